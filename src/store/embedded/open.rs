//! Opening a data folder: its lock, its tables, and the upgrade of a layout written by an
//! older release.

use super::engine::{Tables, corrupt, engine_error};
use super::{EmbeddedConfig, EngineMemory, Fsync, access, event_index, site_keys, subject_keys};
use crate::domain::access::SiteProfile;
use crate::domain::beacon::SiteId;
use crate::store::StoreError;
use fjall::config::{FilterPolicy, PartitioningPolicy, PinningPolicy};
use fjall::{Database, KeyspaceCreateOptions, PersistMode};

/// The on-disk layout this build reads and writes. Format 4 stores beacons a commit's worth to
/// a row (`visit_log`); the rows of format 3 (`visit`, one per beacon) are still read, so the
/// upgrade from 3 only records the new number, which keeps an older release off the folder.
/// Format 5 keys the event index by week first (`event_index_by_week`); the upgrade rewrites
/// format 4's `event_index` into it. Format 6 keeps in `subject_week` only the lines that lead
/// to users' conversions; the upgrade deletes the lines older formats wrote for indexed events,
/// which the index now finds itself and which nothing swept. Format 7 keeps a due list of
/// conversions per (day, advertiser); format 6's one list per day (`conversion_due`) is still
/// read until it is empty, so the upgrade only records the new number.
const FORMAT_VERSION: u32 = 7;

/// Rows the event index's upgrade writes per batch.
const UPGRADE_ROWS_PER_BATCH: usize = 10_000;

/// Opens (or creates) the tables in `config.data_dir`, refusing a folder another process
/// holds, and brings an older layout up to [`FORMAT_VERSION`].
pub(crate) fn open_tables(config: &EmbeddedConfig) -> Result<Tables, StoreError> {
    let folder = config.data_dir.display();
    std::fs::create_dir_all(&config.data_dir).map_err(|error| {
        StoreError::internal(format!("cannot create the data folder {folder}"), error)
    })?;
    let memory = config.memory;
    let db = Database::builder(&config.data_dir)
        .cache_size(memory.cache_bytes)
        .max_journaling_size(memory.journal_bytes.max(EngineMemory::MIN_JOURNAL_BYTES))
        .open()
        .map_err(|error| match error {
            fjall::Error::Locked => StoreError::internal_message(format!(
                "the data folder {folder} is in use by another adevents process; stop it or choose another --data-dir"
            )),
            other => StoreError::internal(format!("cannot open the data folder {folder}"), other),
        })?;
    // Memtables far smaller than fjall's 64 MiB: the sketch and visit tables fill theirs at
    // once under load, and memory left to a memtable is memory the live sketches cannot have.
    //
    // Index and filter blocks partitioned at every level, not only from the fourth: a table
    // of a few hundred MiB otherwise has one index block and one filter block of 1-2 MiB per
    // file, too large for any shard of the block cache, so every point read (a subject's
    // events, found through the subject index) copied and checksummed megabytes, and a
    // subject's access took 14 times as long among 10 times the events. Partitions are 4 KiB
    // and cached; only their small top-level index stays in memory. fjall keeps a table's
    // options from its creation: folders created before keep the former layout.
    let open = |name: &str| {
        db.keyspace(name, || {
            KeyspaceCreateOptions::default()
                .max_memtable_size(memory.memtable_bytes)
                .index_block_partitioning_policy(PartitioningPolicy::all(true))
                .filter_block_partitioning_policy(PartitioningPolicy::all(true))
        })
        .map_err(|error| engine_error("opening tables", error))
    };
    let meta = open("meta")?;
    let stored = meta
        .get("format")
        .map_err(|error| engine_error("reading the format", error))?
        .map(|bytes| <[u8; 4]>::try_from(bytes.as_ref()).map(u32::from_be_bytes));
    let upgrade_from = match stored {
        None => None,
        Some(Ok(version)) if version == FORMAT_VERSION => None,
        Some(Ok(version)) if (1..FORMAT_VERSION).contains(&version) => Some(version),
        Some(_) => {
            return Err(StoreError::schema_message(format!(
                "the data folder {folder} was written by a newer adevents (format other than {FORMAT_VERSION})"
            )));
        }
    };
    if upgrade_from == Some(1) {
        upgrade_from_format_1(&db)?;
    }
    let tables = Tables {
        impression: open("impression")?,
        impression_summary: open("impression_summary")?,
        click: open("click")?,
        click_by_impression: open("click_by_impression")?,
        campaign_config: open("campaign_config")?,
        visit: open("visit")?,
        visit_log: open("visit_log")?,
        site_config: open("site_config")?,
        visit_sketch: open("visit_sketch")?,
        site_day: open("site_day")?,
        campaign_day: open("campaign_day")?,
        campaign_rollup: open("campaign_rollup")?,
        campaign_reach: open("campaign_reach_level")?,
        campaign_seal: open("campaign_seal")?,
        site_visits: open("site_visits")?,
        site_reach: open("site_reach")?,
        site_seal: open("site_seal")?,
        api_key: open("api_key")?,
        tag_secret: open("tag_secret")?,
        site_registry: open("site_registry")?,
        late_day: open("late_day")?,
        process: open("process")?,
        process_mark: open("process_mark")?,
        delivery_live: open("delivery_live")?,
        delivery_sealed: open("delivery_sealed")?,
        delivery_windows: open("delivery_windows")?,
        owner_listing: open("owner_listing")?,
        site_features: open("site_feature_visits")?,
        // Ingest looks every impression up here: filters and indexes stay in memory (a day or
        // two of copies, about 1.5 bytes of filter per impression), or a lookup reads a
        // level's whole filter block through the cache.
        impression_copy: db
            .keyspace("impression_copy", || {
                KeyspaceCreateOptions::default()
                    .max_memtable_size(memory.memtable_bytes)
                    .filter_block_pinning_policy(PinningPolicy::all(true))
                    .index_block_pinning_policy(PinningPolicy::all(true))
            })
            .map_err(|error| engine_error("opening tables", error))?,
        open_day: open("open_day")?,
        view_report: open("view_report")?,
        event_index: db
            .keyspace("event_index_by_week", || event_index_options(memory))
            .map_err(|error| engine_error("opening tables", error))?,
        conversion_copy: open("conversion_copy")?,
        conversion_due: open("conversion_due")?,
        conversion_due_by_advertiser: open("conversion_due_by_advertiser")?,
        conversion_due_advertiser: open("conversion_due_advertiser")?,
        conversion_decision: open("conversion_decision")?,
        conversion: open("conversion")?,
        campaign_conversion: open("campaign_conversion")?,
        subject_week: open("subject_week")?,
        subject_conversion: open("subject_conversion")?,
        visitor_day: open("visitor_day")?,
        erasure: open("erasure")?,
        meta,
        persist: match config.fsync {
            Fsync::Always => PersistMode::SyncData,
            Fsync::Never => PersistMode::Buffer,
        },
        created: stored.is_none(),
        db,
    };
    if upgrade_from.is_some_and(|version| version < 3) {
        register_stored_sites(&tables)?;
    }
    if upgrade_from.is_some_and(|version| version < 5) {
        rekey_event_index(&tables)?;
    }
    if upgrade_from.is_some_and(|version| version < 6) {
        drop_event_lines(&tables)?;
    }
    if stored.is_none() || upgrade_from.is_some() {
        tables
            .meta
            .insert("format", FORMAT_VERSION.to_be_bytes())
            .map_err(|error| engine_error("writing the format", error))?;
    }
    tables
        .db
        .persist(PersistMode::SyncAll)
        .map_err(|error| engine_error("syncing the data folder", error))?;
    Ok(tables)
}

/// The event index's options. It takes two randomly keyed entries per impression and is
/// only ever read by range (a key's week, a user's weeks), so its cost is what its flushes
/// and compactions rewrite (docs/BENCHMARKS.md, "Personal data"):
/// - no filters: a bloom filter answers point reads, which this table never gets, and every
///   flush and compaction hashed each key to build one;
/// - a memtable four times the others' (32 MiB by default): each flush then carries more
///   of the week's keys, and merging it into the level below rewrites fewer bytes per entry.
fn event_index_options(memory: EngineMemory) -> KeyspaceCreateOptions {
    KeyspaceCreateOptions::default()
        .max_memtable_size(memory.memtable_bytes.saturating_mul(4))
        .index_block_partitioning_policy(PartitioningPolicy::all(true))
        .filter_policy(FilterPolicy::disabled())
}

/// Format 3 accepts beacons only for registered sites (when keys are on): every site that
/// already received beacons or has settings is registered, with no origin rule, so a
/// deployment that turns keys on keeps its traffic.
fn register_stored_sites(tables: &Tables) -> Result<(), StoreError> {
    let fail = |error: fjall::Error| engine_error("registering the stored sites", error);
    let mut sites = std::collections::BTreeSet::new();
    for guard in tables.site_day.iter() {
        let key = guard.key().map_err(fail)?;
        if let Some(site) = site_keys::decode_site_day_key(&key) {
            sites.insert(site.to_owned());
        }
    }
    for guard in tables.site_config.iter() {
        let key = guard.key().map_err(fail)?;
        if let Some(site) = site_keys::decode_site_prefix(&key) {
            sites.insert(site.to_owned());
        }
    }
    let now = chrono::Utc::now();
    for site in sites {
        let Ok(site) = SiteId::parse(&site) else {
            continue;
        };
        if tables
            .site_registry
            .get(site.as_str())
            .map_err(fail)?
            .is_none()
        {
            let profile = SiteProfile {
                site,
                allowed_origins: Vec::new(),
                require_origin: false,
                respect_gpc: false,
                created_at: now,
            };
            tables
                .site_registry
                .insert(profile.site.as_str(), access::site_value(&profile))
                .map_err(fail)?;
        }
    }
    Ok(())
}

/// Format 5 keys the event index by week, then key, then advertiser (`event_index`); format 4
/// wrote the advertiser first. Every old row is written again under its new key, a batch at a
/// time, then the old table goes. The format number is written only after, so an upgrade cut
/// off anywhere starts again from the old table, and writing a row twice changes nothing.
fn rekey_event_index(tables: &Tables) -> Result<(), StoreError> {
    const OLD: &str = "event_index";
    let fail = |error: fjall::Error| engine_error("upgrading the event index", error);
    if !tables.db.keyspace_exists(OLD) {
        return Ok(());
    }
    let old = tables
        .db
        .keyspace(OLD, KeyspaceCreateOptions::default)
        .map_err(fail)?;
    let mut batch = tables.db.batch();
    let mut rows = 0;
    for guard in old.iter() {
        let (key, value) = guard.into_inner().map_err(fail)?;
        let Some(key) = event_index::rekeyed_from_format_4(&key) else {
            return Err(corrupt("upgrading the event index"));
        };
        batch.insert(&tables.event_index, key, value);
        rows += 1;
        if rows % UPGRADE_ROWS_PER_BATCH == 0 {
            std::mem::replace(&mut batch, tables.db.batch())
                .commit()
                .map_err(fail)?;
        }
    }
    batch.commit().map_err(fail)?;
    tables
        .db
        .persist(PersistMode::SyncAll)
        .map_err(|error| engine_error("syncing the data folder", error))?;
    tables.db.delete_keyspace(old).map_err(fail)?;
    tracing::info!(rows, "event index rewritten with the week first (format 5)");
    Ok(())
}

/// Before format 5 the indexer wrote a directory line (user, advertiser, week) for every
/// indexed event; since, the index keyed by week finds a user's advertiser-weeks itself, and
/// `subject_week` needs only the lines that lead to users' conversions, which retention
/// sweeps with their entries. The others named a user and nothing swept them: each line with
/// no conversion entry of its (advertiser, week, user) goes, a batch at a time. Deleting a
/// line twice changes nothing, so an upgrade cut off anywhere starts again.
fn drop_event_lines(tables: &Tables) -> Result<(), StoreError> {
    let fail = |error: fjall::Error| engine_error("upgrading the subject directory", error);
    tracing::info!("dropping the directory lines of indexed events (format 6)");
    let mut batch = tables.db.batch();
    let mut dropped = 0;
    for guard in tables.subject_week.iter() {
        let key = guard.key().map_err(fail)?;
        // A damaged line is left where it is: it fails only its own user's reads.
        let Some(line) = subject_keys::decode_subject_week(&key) else {
            tracing::warn!(key = ?key, "a directory line that does not decode is kept");
            continue;
        };
        let prefix =
            subject_keys::subject_conversion_prefix(line.advertiser_id, line.week, line.user_id);
        if tables.subject_conversion.prefix(prefix).next().is_some() {
            continue;
        }
        batch.remove(&tables.subject_week, key);
        dropped += 1;
        if dropped % UPGRADE_ROWS_PER_BATCH == 0 {
            std::mem::replace(&mut batch, tables.db.batch())
                .commit()
                .map_err(fail)?;
        }
    }
    batch.commit().map_err(fail)?;
    tracing::info!(
        lines = dropped,
        "directory lines of indexed events dropped (format 6)"
    );
    Ok(())
}

/// Format 1 kept users reached per ad and hour only (`campaign_reach`); format 2 keeps them
/// by level (`campaign_reach_level`, see `migrations/0005_reach_levels.cql`). The old rows go,
/// and so do the seals that relied on them: those days are read raw until sealed again.
fn upgrade_from_format_1(db: &Database) -> Result<(), StoreError> {
    let fail = |error: fjall::Error| engine_error("upgrading the data folder", error);
    if db.keyspace_exists("campaign_reach") {
        let old = db
            .keyspace("campaign_reach", KeyspaceCreateOptions::default)
            .map_err(fail)?;
        db.delete_keyspace(old).map_err(fail)?;
    }
    let seals = db
        .keyspace("campaign_seal", KeyspaceCreateOptions::default)
        .map_err(fail)?;
    let keys = seals
        .iter()
        .map(|guard| guard.key().map_err(fail))
        .collect::<Result<Vec<_>, _>>()?;
    for key in keys {
        seals.remove(key).map_err(fail)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::time::Day;

    fn config_in(folder: &tempfile::TempDir) -> EmbeddedConfig {
        EmbeddedConfig {
            data_dir: folder.path().to_owned(),
            fsync: Fsync::Never,
            memory: EngineMemory::default(),
        }
    }

    #[test]
    fn the_format_3_upgrade_registers_the_sites_already_stored() {
        let folder = tempfile::tempdir().expect("temp dir");
        let config = config_in(&folder);
        {
            let tables = open_tables(&config).expect("opened");
            let site = SiteId::parse("old.example").expect("valid");
            let day = Day::new("2026-10-01".parse().expect("date"));
            tables
                .site_day
                .insert(site_keys::site_day_key(day, &site), [])
                .expect("day index entry");
            tables
                .meta
                .insert("format", 2u32.to_be_bytes())
                .expect("an older format");
        }
        let tables = open_tables(&config).expect("upgraded");
        let registered = tables
            .site_registry
            .get("old.example")
            .expect("read")
            .is_some();
        assert!(registered, "the site of an older folder is registered");
        let format = tables.meta.get("format").expect("read").expect("present");
        assert_eq!(format.as_ref(), FORMAT_VERSION.to_be_bytes());
    }

    #[test]
    fn the_format_5_upgrade_rewrites_the_event_index_with_the_week_first() {
        let folder = tempfile::tempdir().expect("temp dir");
        let config = config_in(&folder);
        // Advertiser 16, week 4, key kind 1, key id 16, then a tail of 49.
        let old_key: Vec<u8> = (0..86u8).collect();
        {
            let tables = open_tables(&config).expect("opened");
            let old = tables
                .db
                .keyspace("event_index", KeyspaceCreateOptions::default)
                .expect("format 4's table");
            old.insert(&old_key, b"value").expect("an old row");
            tables
                .meta
                .insert("format", 4u32.to_be_bytes())
                .expect("format 4");
        }
        let tables = open_tables(&config).expect("upgraded");
        let new_key = event_index::rekeyed_from_format_4(&old_key).expect("rekeyed");
        assert_eq!(new_key[0..4], old_key[16..20], "the week first");
        let value = tables.event_index.get(&new_key).expect("read");
        assert_eq!(value.as_deref(), Some(&b"value"[..]));
        assert!(
            !tables.db.keyspace_exists("event_index"),
            "the old table gone"
        );
        let format = tables.meta.get("format").expect("read").expect("present");
        assert_eq!(format.as_ref(), FORMAT_VERSION.to_be_bytes());
    }

    #[test]
    fn the_format_6_upgrade_keeps_only_the_lines_that_lead_to_conversions() {
        use crate::domain::conversion::index::Week;
        use crate::domain::ids::{AdvertiserId, UserId};
        use crate::domain::privacy::SubjectWeek;
        let folder = tempfile::tempdir().expect("temp dir");
        let config = config_in(&folder);
        let id = |n: u128| uuid::Uuid::from_u128(n);
        let line = |user: u128, week: i32| SubjectWeek {
            user_id: UserId::new(id(user)),
            advertiser_id: AdvertiserId::new(id(1)),
            week: Week::new(week),
        };
        let (of_events, of_a_conversion) = (line(7, 10), line(8, 10));
        {
            let tables = open_tables(&config).expect("opened");
            for kept in [of_events, of_a_conversion] {
                tables
                    .subject_week
                    .insert(subject_keys::subject_week_key(&kept), b"")
                    .expect("a line");
            }
            let mut entry = subject_keys::subject_conversion_prefix(
                of_a_conversion.advertiser_id,
                of_a_conversion.week,
                of_a_conversion.user_id,
            );
            entry.extend_from_slice(b"order-1");
            tables
                .subject_conversion
                .insert(entry, b"")
                .expect("a conversion's entry");
            tables
                .meta
                .insert("format", 5u32.to_be_bytes())
                .expect("format 5");
        }
        let tables = open_tables(&config).expect("upgraded");
        let lines: Vec<SubjectWeek> = tables
            .subject_week
            .iter()
            .map(|guard| {
                let key = guard.key().expect("read");
                subject_keys::decode_subject_week(&key).expect("a line")
            })
            .collect();
        assert_eq!(lines, vec![of_a_conversion]);
        let format = tables.meta.get("format").expect("read").expect("present");
        assert_eq!(format.as_ref(), FORMAT_VERSION.to_be_bytes());
    }
}
