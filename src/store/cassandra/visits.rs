//! Beacons and live unique-visitor sketches on Cassandra.

use super::CassandraStore;
use super::config::KeyspaceName;
use super::errors::decode_error;
use super::event_reads::validity;
use super::event_writes::{Validity, user_agent};
use super::statements::{execute_each, failed, prepare_all, read_all};
use crate::domain::beacon::{Beacon, Features, Guid, VisitPartition};
use crate::domain::time::EventTime;
use crate::store::error::Message;
use crate::store::{SketchBatch, SketchPartition, SketchRow, StoreError, VisitRow, VisitStore};
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use scylla::client::session::Session;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::value::MaybeUnset;
use scylla::{DeserializeRow, SerializeRow};
use uuid::Uuid;

/// Beacons per unlogged single-partition batch.
const VISITS_PER_BATCH: usize = 100;
/// Sketch rows written at once for one partition.
const SKETCHES_IN_FLIGHT: usize = 64;

pub struct VisitStatements {
    insert_visit: PreparedStatement,
    select_visits: PreparedStatement,
    insert_sketch: PreparedStatement,
    select_sketches: PreparedStatement,
}

impl VisitStatements {
    pub async fn prepare(session: &Session, keyspace: &KeyspaceName) -> Result<Self, StoreError> {
        let [insert_visit, select_visits, insert_sketch, select_sketches] = prepare_all(
            session,
            [
                format!(
                    "INSERT INTO {keyspace}.visit (site, day, bucket_id, timestamp, guid, features, \
                     user_agent, valid, invalid) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
                ),
                format!(
                    "SELECT timestamp, guid, features, valid, invalid FROM {keyspace}.visit \
                     WHERE site = ? AND day = ? AND bucket_id = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.visit_sketch (site, day, combination, hour, writer, sketch) \
                     VALUES (?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?"
                ),
                format!(
                    "SELECT hour, writer, sketch FROM {keyspace}.visit_sketch \
                     WHERE site = ? AND day = ? AND combination = ?"
                ),
            ],
        )
        .await?;
        Ok(Self {
            insert_visit,
            select_visits,
            insert_sketch,
            select_sketches,
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

/// The bound values of a `visit` insert.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct VisitValues<'a> {
    site: &'a str,
    day: NaiveDate,
    bucket_id: i16,
    timestamp: DateTime<Utc>,
    guid: &'a str,
    features: String,
    user_agent: MaybeUnset<&'a str>,
    #[scylla(flatten)]
    validity: Validity,
    ttl: i32,
}

#[derive(DeserializeRow)]
struct StoredVisit {
    timestamp: DateTime<Utc>,
    guid: String,
    features: String,
    valid: Option<bool>,
    invalid: Option<String>,
}

/// The bound values of a `visit_sketch` insert.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct SketchValues<'a> {
    site: &'a str,
    day: NaiveDate,
    combination: &'a str,
    hour: DateTime<Utc>,
    writer: Uuid,
    sketch: &'a [u8],
    ttl: i32,
    /// Microseconds: of two writes of one writer's row, the later capture wins.
    captured_at: i64,
}

#[derive(DeserializeRow)]
struct StoredSketch {
    hour: DateTime<Utc>,
    writer: Uuid,
    sketch: Vec<u8>,
}

#[async_trait]
impl VisitStore for CassandraStore {
    async fn write_visits(
        &self,
        partition: &VisitPartition,
        visits: &[Beacon],
    ) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.visits;
        let (site, day, bucket_id) = visit_partition_values(partition);
        let rows: Vec<_> = visits
            .iter()
            .map(|visit| VisitValues {
                site,
                day,
                bucket_id,
                timestamp: visit.timestamp.instant(),
                guid: visit.guid.as_str(),
                features: visit.features.combination_key(),
                user_agent: user_agent(visit.user_agent.as_ref()),
                validity: Validity::of(visit.invalid),
                ttl: self.ttl_seconds,
            })
            .collect();
        if let [row] = rows.as_slice() {
            self.session
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
            self.session
                .batch(&batch, chunk)
                .await
                .map_err(failed("writing beacons"))?;
        }
        Ok(())
    }

    async fn read_visits(&self, partition: &VisitPartition) -> Result<Vec<VisitRow>, StoreError> {
        const CONTEXT: &str = "reading beacons";
        let statements = &self.prepared().await?.visits;
        let rows: Vec<StoredVisit> = read_all(
            &self.session,
            &statements.select_visits,
            visit_partition_values(partition),
            CONTEXT,
        )
        .await?;
        rows.into_iter()
            .map(|row| {
                Ok(VisitRow {
                    timestamp: EventTime::from_stored(row.timestamp),
                    guid: Guid::from_stored(row.guid),
                    features: Features::from_combination_key(&row.features).ok_or_else(|| {
                        decode_error(CONTEXT, Message("stored features do not decode".into()))
                    })?,
                    invalid: validity(row.valid, row.invalid.as_deref()),
                })
            })
            .collect()
    }

    async fn write_sketches(&self, batches: &[SketchBatch]) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.visits;
        let rows: Vec<(&SketchPartition, &SketchRow)> = batches
            .iter()
            .flat_map(|(partition, rows)| rows.iter().map(move |row| (partition, row)))
            .collect();
        execute_each(
            &self.session,
            &statements.insert_sketch,
            &rows,
            SKETCHES_IN_FLIGHT,
            |(partition, row)| SketchValues {
                site: partition.site.as_str(),
                day: partition.day.date(),
                combination: partition.combination.as_str(),
                hour: row.hour,
                writer: row.writer,
                sketch: row.sketch.as_slice(),
                ttl: self.ttl_seconds,
                captured_at: row.captured_at,
            },
            "writing sketches",
        )
        .await
    }

    async fn read_sketches(
        &self,
        partition: &SketchPartition,
    ) -> Result<Vec<SketchRow>, StoreError> {
        let statements = &self.prepared().await?.visits;
        let rows: Vec<StoredSketch> = read_all(
            &self.session,
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
            .map(|row| SketchRow {
                hour: row.hour,
                writer: row.writer,
                sketch: row.sketch,
                // Not read back: only writes order by it.
                captured_at: 0,
            })
            .collect())
    }
}
