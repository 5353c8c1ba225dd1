//! Schema migrations against the real node: what they create, that they are idempotent and
//! serialised, and that an edited applied file is refused.

use crate::common::{
    config, embedded_migrations, migrated_store, private_keyspace, raw_session, shared_keyspace,
    store_for,
};
use adevents::migrations::Migration;
use adevents::store::cassandra::migrator::{MigrateError, applied_migrations};
use std::collections::BTreeMap;

/// Partition key columns in order, then clustering columns with their order.
async fn key_of(keyspace: &str, table: &str) -> (Vec<String>, Vec<(String, String)>) {
    let session = raw_session().await;
    let rows = session
        .query_unpaged(
            "SELECT column_name, kind, position, clustering_order FROM system_schema.columns \
             WHERE keyspace_name = ? AND table_name = ?",
            (keyspace, table),
        )
        .await
        .expect("read system_schema.columns")
        .into_rows_result()
        .expect("rows");
    let mut partition = BTreeMap::new();
    let mut clustering = BTreeMap::new();
    for row in rows
        .rows::<(String, String, i32, String)>()
        .expect("typed rows")
    {
        let (column, kind, position, order) = row.expect("row");
        match kind.as_str() {
            "partition_key" => {
                partition.insert(position, column);
            }
            "clustering" => {
                clustering.insert(position, (column, order));
            }
            _ => {}
        }
    }
    (
        partition.into_values().collect(),
        clustering.into_values().collect(),
    )
}

async fn compaction_of(keyspace: &str, table: &str) -> BTreeMap<String, String> {
    let session = raw_session().await;
    let (compaction,) = session
        .query_unpaged(
            "SELECT compaction FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?",
            (keyspace, table),
        )
        .await
        .expect("read system_schema.tables")
        .into_rows_result()
        .expect("rows")
        .single_row::<(BTreeMap<String, String>,)>()
        .unwrap_or_else(|error| panic!("table {keyspace}.{table} exists: {error}"));
    compaction
}

#[tokio::test]
async fn migrations_create_every_table_with_its_key_clustering_order_and_compaction() {
    migrated_store().await;
    let keyspace = shared_keyspace();
    let keyspace = keyspace.as_str();
    let event_key = |ids: &[&str]| {
        ids.iter()
            .map(|id| id.to_string())
            .chain(["day".to_owned(), "bucket_id".to_owned()])
            .collect::<Vec<_>>()
    };
    let newest_first = vec![
        ("timestamp".to_owned(), "desc".to_owned()),
        ("impression_id".to_owned(), "asc".to_owned()),
    ];
    for table in ["impression", "impression_summary", "click"] {
        let (partition, clustering) = key_of(keyspace, table).await;
        assert_eq!(
            partition,
            event_key(&["advertiser_id", "campaign_id"]),
            "{table}"
        );
        assert_eq!(clustering, newest_first, "{table}");
        let compaction = compaction_of(keyspace, table).await;
        assert!(
            compaction["class"].ends_with("TimeWindowCompactionStrategy"),
            "{table}: {compaction:?}"
        );
        assert_eq!(compaction["compaction_window_unit"], "HOURS", "{table}");
        assert_eq!(compaction["compaction_window_size"], "12", "{table}");
    }

    let (partition, clustering) = key_of(keyspace, "click_by_impression").await;
    assert_eq!(partition, ["advertiser_id", "campaign_id", "impression_id"]);
    assert_eq!(clustering, [("timestamp".to_owned(), "asc".to_owned())]);

    // A window's publications are read whole, oldest first, and expire a day later.
    let (partition, clustering) = key_of(keyspace, "delivery_windows").await;
    assert_eq!(partition, ["advertiser_id", "campaign_id", "window_start"]);
    assert_eq!(
        clustering,
        [
            ("published_at".to_owned(), "asc".to_owned()),
            ("writer".to_owned(), "asc".to_owned())
        ]
    );
    let compaction = compaction_of(keyspace, "delivery_windows").await;
    assert!(
        compaction["class"].ends_with("TimeWindowCompactionStrategy"),
        "{compaction:?}"
    );

    let (partition, clustering) = key_of(keyspace, "campaign_config").await;
    assert_eq!(partition, ["advertiser_id", "campaign_id"]);
    assert_eq!(
        clustering,
        [("effective_from".to_owned(), "asc".to_owned())]
    );

    // The subject directory: a partition per (week, bucket of the user), never growing
    // beyond a week's lines.
    let (partition, clustering) = key_of(keyspace, "subject_line").await;
    assert_eq!(partition, ["week", "bucket"]);
    assert_eq!(
        clustering,
        [
            ("user_id".to_owned(), "asc".to_owned()),
            ("advertiser_id".to_owned(), "asc".to_owned())
        ]
    );

    // Conversions due: a list per (day, advertiser), so one advertiser's flood is read in
    // turns with the others' and a day's list never holds every advertiser's.
    let (partition, clustering) = key_of(keyspace, "conversion_due_by_advertiser").await;
    assert_eq!(partition, ["day", "advertiser_id"]);
    assert_eq!(
        clustering,
        [
            ("due".to_owned(), "asc".to_owned()),
            ("conversion_id".to_owned(), "asc".to_owned())
        ]
    );

    for table in [
        "click_by_impression",
        "campaign_config",
        "schema_migrations",
    ] {
        let compaction = compaction_of(keyspace, table).await;
        assert!(
            !compaction["class"].ends_with("TimeWindowCompactionStrategy"),
            "only raw event tables use TWCS; {table} has {compaction:?}"
        );
    }
}

async fn applied_at(
    session: &scylla::client::session::Session,
) -> BTreeMap<i32, chrono::DateTime<chrono::Utc>> {
    let cql = format!(
        "SELECT version, applied_at FROM {}.schema_migrations",
        shared_keyspace()
    );
    session
        .query_unpaged(cql, ())
        .await
        .expect("read schema_migrations")
        .into_rows_result()
        .expect("rows")
        .rows::<(i32, chrono::DateTime<chrono::Utc>)>()
        .expect("typed rows")
        .collect::<Result<BTreeMap<_, _>, _>>()
        .expect("rows decode")
}

#[tokio::test]
async fn a_second_run_changes_nothing() {
    let store = migrated_store().await;
    let session = raw_session().await;
    let before = applied_at(&session).await;

    let report = store
        .migrate(&embedded_migrations())
        .await
        .expect("second run succeeds");

    assert!(report.applied.is_empty(), "{report:?}");
    assert_eq!(report.already_applied, embedded_migrations().len());
    assert_eq!(applied_at(&session).await, before);
}

#[tokio::test]
async fn an_applied_migration_that_changed_is_refused_naming_the_file() {
    let store = migrated_store().await;
    let mut migrations = embedded_migrations();
    let first = &migrations[0];
    let tampered = format!(
        "{}\n-- an innocent-looking edit\n",
        first.statements().join(";\n")
    );
    migrations[0] = Migration::new(first.file_name().to_owned(), tampered).expect("valid file");

    let error = store.migrate(&migrations).await.expect_err("refused");

    assert!(
        matches!(&error, MigrateError::Changed { file, .. } if file == "0001_events.cql"),
        "{error:?}"
    );
    assert!(error.to_string().contains("0001_events.cql"), "{error}");
}

#[tokio::test]
async fn a_new_keyspace_is_created_and_pending_files_apply_in_order_once() {
    let keyspace = private_keyspace("fresh");
    let mut migrations = embedded_migrations();
    let next = migrations.len() + 1;
    migrations.push(
        Migration::new(
            format!("{next:04}_later_table.cql"),
            "CREATE TABLE later_table (k int PRIMARY KEY, v text);".to_owned(),
        )
        .expect("valid file"),
    );
    // Two servers starting at once: the lock lets one apply, the other finds nothing to do.
    let first = store_for(config(keyspace.clone()), false).await;
    let second = store_for(config(keyspace.clone()), false).await;

    let (a, b) = tokio::join!(first.migrate(&migrations), second.migrate(&migrations));
    let (a, b) = (a.expect("first migrator"), b.expect("second migrator"));

    let mut applied: Vec<String> = a.applied.iter().chain(&b.applied).cloned().collect();
    applied.sort();
    let expected: Vec<String> = migrations
        .iter()
        .map(|m| m.file_name().to_owned())
        .collect();
    assert_eq!(applied, expected, "each file applied exactly once");
    let session = raw_session().await;
    let recorded = applied_migrations(&session, &keyspace)
        .await
        .expect("read records");
    assert_eq!(recorded.len(), migrations.len());
    for migration in &migrations {
        assert_eq!(
            recorded[&migration.version()].checksum,
            migration.checksum()
        );
    }
    assert_eq!(key_of(keyspace.as_str(), "later_table").await.0, ["k"]);
}

/// Turning keys on keeps a deployment's traffic: the migration that adds registered sites
/// registers every site that already received beacons or settings.
#[tokio::test]
async fn the_access_migration_registers_the_sites_already_stored() {
    use adevents::store::AccessStore;
    let keyspace = private_keyspace("registry");
    let all = embedded_migrations();
    let before_keys: Vec<Migration> = all
        .iter()
        .filter(|migration| migration.version() < 6)
        .cloned()
        .collect();
    let store = store_for(config(keyspace.clone()), false).await;
    store.migrate(&before_keys).await.expect("migrations 1-5");
    let session = raw_session().await;
    let ks = keyspace.as_str();
    for (day, site) in [
        ("2026-10-01", "beacons.example"),
        ("2026-10-02", "more.example"),
    ] {
        session
            .query_unpaged(
                format!("INSERT INTO {ks}.site_day (day, site) VALUES ('{day}', '{site}')"),
                (),
            )
            .await
            .expect("a day index entry");
    }
    session
        .query_unpaged(
            format!(
                "INSERT INTO {ks}.site_config (site, effective_from, buckets, updated_at) \
                 VALUES ('configured.example', '2026-01-01', 4, '2026-01-01')"
            ),
            (),
        )
        .await
        .expect("a site configuration");

    store.migrate(&all).await.expect("the access migration");

    let mut sites: Vec<String> = store
        .sites()
        .await
        .expect("registered sites")
        .into_iter()
        .map(|profile| profile.site.as_str().to_owned())
        .collect();
    sites.sort();
    assert_eq!(
        sites,
        ["beacons.example", "configured.example", "more.example"]
    );
}
