//! Beacons, site configuration, unique-visitor sketches and the site day index on Cassandra:
//! their prepared statements and the reads and writes that use them.

use super::config::KeyspaceName;
use super::statements::{execute_each, failed, prepare_all, read_all};
use crate::domain::beacon::{Beacon, Features, Guid, SiteId, VisitPartition};
use crate::domain::bucket::BucketCount;
use crate::domain::campaign::{CampaignSettings, SettingsHistory};
use crate::domain::time::{Day, EventTime};
use crate::store::{SketchPartition, SketchRow, StoreError, VisitRow};
use chrono::{DateTime, NaiveDate, Utc};
use scylla::client::session::Session;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use uuid::Uuid;

/// Beacons per unlogged single-partition batch.
const VISITS_PER_BATCH: usize = 100;
/// Sketch rows written at once for one partition.
const SKETCHES_IN_FLIGHT: usize = 64;

pub struct SiteStatements {
    insert_visit: PreparedStatement,
    select_visits: PreparedStatement,
    select_site_settings: PreparedStatement,
    insert_site_settings: PreparedStatement,
    insert_sketch: PreparedStatement,
    select_sketches: PreparedStatement,
    insert_site_day: PreparedStatement,
    select_site_days: PreparedStatement,
}

impl SiteStatements {
    pub async fn prepare(session: &Session, keyspace: &KeyspaceName) -> Result<Self, StoreError> {
        let [
            insert_visit,
            select_visits,
            select_site_settings,
            insert_site_settings,
            insert_sketch,
            select_sketches,
            insert_site_day,
            select_site_days,
        ] = prepare_all(
            session,
            [
                format!(
                    "INSERT INTO {keyspace}.visit (site, day, bucket_id, timestamp, guid, features) \
                     VALUES (?, ?, ?, ?, ?, ?) USING TTL ?"
                ),
                format!(
                    "SELECT timestamp, guid, features FROM {keyspace}.visit \
                     WHERE site = ? AND day = ? AND bucket_id = ?"
                ),
                format!(
                    "SELECT effective_from, buckets FROM {keyspace}.site_config WHERE site = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.site_config (site, effective_from, buckets, updated_at) \
                     VALUES (?, ?, ?, ?)"
                ),
                format!(
                    "INSERT INTO {keyspace}.visit_sketch (site, day, combination, hour, writer, sketch) \
                     VALUES (?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?"
                ),
                format!(
                    "SELECT hour, writer, sketch FROM {keyspace}.visit_sketch \
                     WHERE site = ? AND day = ? AND combination = ?"
                ),
                format!("INSERT INTO {keyspace}.site_day (day, site) VALUES (?, ?) USING TTL ?"),
                format!("SELECT site FROM {keyspace}.site_day WHERE day = ?"),
            ],
        )
        .await?;
        Ok(Self {
            insert_visit,
            select_visits,
            select_site_settings,
            insert_site_settings,
            insert_sketch,
            select_sketches,
            insert_site_day,
            select_site_days,
        })
    }
}

fn visit_partition_values(partition: &VisitPartition) -> (&str, NaiveDate, i16) {
    (
        partition.site.as_str(),
        partition.day.date(),
        // Below 256 by construction.
        partition.bucket.get() as i16,
    )
}

fn decode_error(context: &'static str) -> impl Fn(String) -> StoreError {
    move |error| StoreError::Internal(format!("{context}: {error}"))
}

pub async fn write_visits(
    session: &Session,
    statements: &SiteStatements,
    ttl: i32,
    partition: &VisitPartition,
    visits: &[Beacon],
) -> Result<(), StoreError> {
    let (site, day, bucket) = visit_partition_values(partition);
    let rows: Vec<_> = visits
        .iter()
        .map(|visit| {
            (
                site,
                day,
                bucket,
                visit.timestamp.instant(),
                visit.guid.as_str(),
                visit.features.combination_key(),
                ttl,
            )
        })
        .collect();
    if let [row] = rows.as_slice() {
        session
            .execute_unpaged(&statements.insert_visit, row)
            .await
            .map_err(failed("writing a beacon"))?;
        return Ok(());
    }
    for chunk in rows.chunks(VISITS_PER_BATCH) {
        let mut batch = Batch::new(BatchType::Unlogged);
        batch.set_is_idempotent(true);
        for _ in chunk {
            batch.append_statement(statements.insert_visit.clone());
        }
        session
            .batch(&batch, chunk)
            .await
            .map_err(failed("writing beacons"))?;
    }
    Ok(())
}

pub async fn read_visits(
    session: &Session,
    statements: &SiteStatements,
    partition: &VisitPartition,
) -> Result<Vec<VisitRow>, StoreError> {
    const CONTEXT: &str = "reading beacons";
    let rows: Vec<(DateTime<Utc>, String, String)> = read_all(
        session,
        &statements.select_visits,
        visit_partition_values(partition),
        CONTEXT,
    )
    .await?;
    rows.into_iter()
        .map(|(timestamp, guid, features)| {
            Ok(VisitRow {
                timestamp: EventTime::from_stored(timestamp),
                guid: Guid::from_stored(guid),
                features: Features::from_combination_key(&features)
                    .ok_or_else(|| decode_error(CONTEXT)("stored features do not decode".into()))?,
            })
        })
        .collect()
}

pub async fn site_settings(
    session: &Session,
    statements: &SiteStatements,
    site: &SiteId,
) -> Result<SettingsHistory, StoreError> {
    const CONTEXT: &str = "reading site settings";
    let rows: Vec<(DateTime<Utc>, i16)> = read_all(
        session,
        &statements.select_site_settings,
        (site.as_str(),),
        CONTEXT,
    )
    .await?;
    let entries = rows
        .into_iter()
        .map(|(effective_from, buckets)| {
            Ok(CampaignSettings {
                buckets: u16::try_from(buckets)
                    .ok()
                    .and_then(|count| BucketCount::new(count).ok())
                    .ok_or_else(|| decode_error(CONTEXT)(format!("bucket count {buckets}")))?,
                effective_from,
                daily_cap: None,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(SettingsHistory::new(entries))
}

pub async fn put_site_settings(
    session: &Session,
    statements: &SiteStatements,
    site: &SiteId,
    settings: &CampaignSettings,
) -> Result<(), StoreError> {
    let values = (
        site.as_str(),
        settings.effective_from,
        // At most 256.
        settings.buckets.get() as i16,
        Utc::now(),
    );
    session
        .execute_unpaged(&statements.insert_site_settings, values)
        .await
        .map_err(failed("writing site settings"))?;
    Ok(())
}

pub async fn write_sketches(
    session: &Session,
    statements: &SiteStatements,
    ttl: i32,
    partition: &SketchPartition,
    rows: &[SketchRow],
) -> Result<(), StoreError> {
    execute_each(
        session,
        &statements.insert_sketch,
        rows,
        SKETCHES_IN_FLIGHT,
        |row| {
            (
                partition.site.as_str(),
                partition.day.date(),
                partition.combination.as_str(),
                row.hour,
                row.writer,
                row.sketch.as_slice(),
                ttl,
                row.captured_at,
            )
        },
        "writing sketches",
    )
    .await
}

pub async fn read_sketches(
    session: &Session,
    statements: &SiteStatements,
    partition: &SketchPartition,
) -> Result<Vec<SketchRow>, StoreError> {
    let rows: Vec<(DateTime<Utc>, Uuid, Vec<u8>)> = read_all(
        session,
        &statements.select_sketches,
        (
            partition.site.as_str(),
            partition.day.date(),
            partition.combination.as_str(),
        ),
        "reading sketches",
    )
    .await?;
    Ok(rows
        .into_iter()
        .map(|(hour, writer, sketch)| SketchRow {
            hour,
            writer,
            sketch,
            // Not read back: only writes order by it.
            captured_at: 0,
        })
        .collect())
}

pub async fn mark_site_day(
    session: &Session,
    statements: &SiteStatements,
    ttl: i32,
    day: Day,
    site: &SiteId,
) -> Result<(), StoreError> {
    session
        .execute_unpaged(
            &statements.insert_site_day,
            (day.date(), site.as_str(), ttl),
        )
        .await
        .map_err(failed("writing the day index"))?;
    Ok(())
}

pub async fn sites_of_day(
    session: &Session,
    statements: &SiteStatements,
    day: Day,
) -> Result<Vec<SiteId>, StoreError> {
    const CONTEXT: &str = "reading the day index";
    let rows: Vec<(String,)> = read_all(
        session,
        &statements.select_site_days,
        (day.date(),),
        CONTEXT,
    )
    .await?;
    rows.into_iter()
        .map(|(site,)| SiteId::parse(&site).map_err(decode_error(CONTEXT)))
        .collect()
}
