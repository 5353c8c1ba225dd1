//! Beacons and live unique-visitor sketches on Cassandra.

use super::CassandraStore;
use super::config::KeyspaceName;
use super::errors::decode_error;
use super::event_reads::validity;
use super::replica_batches;
use super::statements::{execute_each, failed, prepare_all, read_all, visit_partition_values};
use super::visit_batches::VisitWriter;
use crate::domain::beacon::{Beacon, Features, Guid, VisitPartition};
use crate::domain::privacy::VisitorDay;
use crate::domain::time::EventTime;
use crate::domain::traffic::UserAgent;
use crate::store::error::Message;
use crate::store::{SketchBatch, SketchPartition, SketchRow, StoreError, VisitRow, VisitStore};
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use scylla::client::session::Session;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::{DeserializeRow, SerializeRow};
use std::sync::Arc;
use uuid::Uuid;

/// Requests of sketch rows (one row, or a batch of rows on one node) in flight at once.
const SKETCHES_IN_FLIGHT: usize = 64;

pub(crate) struct VisitStatements {
    insert_visit: PreparedStatement,
    select_visits: PreparedStatement,
    /// `select_visits` with each beacon's user agent, for subject access only.
    select_visits_with_agents: PreparedStatement,
    insert_sketch: PreparedStatement,
    select_sketches: PreparedStatement,
}

impl VisitStatements {
    pub(crate) async fn prepare(
        session: &Session,
        keyspace: &KeyspaceName,
    ) -> Result<Self, StoreError> {
        let [
            insert_visit,
            select_visits,
            select_visits_with_agents,
            insert_sketch,
            select_sketches,
        ] = prepare_all(
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
                    "SELECT timestamp, guid, features, valid, invalid, user_agent \
                     FROM {keyspace}.visit WHERE site = ? AND day = ? AND bucket_id = ?"
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
            select_visits_with_agents,
            insert_sketch,
            select_sketches,
        })
    }
}

#[derive(DeserializeRow)]
struct StoredVisit {
    timestamp: DateTime<Utc>,
    guid: String,
    features: String,
    valid: Option<bool>,
    invalid: Option<String>,
}

/// A beacon as `select_visits_with_agents` reads it.
#[derive(DeserializeRow)]
struct StoredVisitWithAgent {
    timestamp: DateTime<Utc>,
    guid: String,
    features: String,
    valid: Option<bool>,
    invalid: Option<String>,
    user_agent: Option<String>,
}

impl StoredVisit {
    fn into_row(self, user_agent: Option<UserAgent>) -> Result<VisitRow, StoreError> {
        Ok(VisitRow {
            timestamp: EventTime::from_stored(self.timestamp),
            guid: Guid::from_stored(self.guid),
            features: Features::from_combination_key(&self.features).ok_or_else(|| {
                decode_error(
                    "reading beacons",
                    Message("stored features do not decode".into()),
                )
            })?,
            invalid: validity(self.valid, self.invalid.as_deref()),
            user_agent,
        })
    }
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
        visitors: &[VisitorDay],
    ) -> Result<(), StoreError> {
        if !visitors.is_empty() {
            // Before the beacons: a stored beacon must never be out of an erasure's reach.
            let statement = &self.prepared().await?.subjects.insert_visitor_day;
            // An entry expires with its day's beacons.
            execute_each(
                &self.session,
                statement,
                visitors,
                visitors.len(),
                |entry| {
                    (
                        entry.site.as_str(),
                        entry.guid.as_str(),
                        entry.day.date(),
                        self.raw_ttl(entry.day),
                    )
                },
                "writing the visitor index",
            )
            .await?;
        }
        let writer = VisitWriter {
            session: Arc::clone(&self.session),
            insert_visit: self.prepared().await?.visits.insert_visit.clone(),
            ttl: self.raw_ttl(partition.day),
        };
        match visits {
            // One beacon per `/track` request: grouped with its partition's other beacons.
            [visit] => {
                self.visit_batches
                    .write(&writer, partition, visit.clone())
                    .await
            }
            _ => writer.write(partition, visits).await,
        }
    }

    async fn read_visits(&self, partition: &VisitPartition) -> Result<Vec<VisitRow>, StoreError> {
        let statements = &self.prepared().await?.visits;
        let rows: Vec<StoredVisit> = read_all(
            &self.session,
            &statements.select_visits,
            visit_partition_values(partition),
            "reading beacons",
        )
        .await?;
        rows.into_iter().map(|row| row.into_row(None)).collect()
    }

    async fn read_visits_with_agents(
        &self,
        partition: &VisitPartition,
    ) -> Result<Vec<VisitRow>, StoreError> {
        let statements = &self.prepared().await?.visits;
        let rows: Vec<StoredVisitWithAgent> = read_all(
            &self.session,
            &statements.select_visits_with_agents,
            visit_partition_values(partition),
            "reading beacons",
        )
        .await?;
        rows.into_iter()
            .map(|row| {
                let agent = row.user_agent.as_deref().and_then(UserAgent::new);
                StoredVisit {
                    timestamp: row.timestamp,
                    guid: row.guid,
                    features: row.features,
                    valid: row.valid,
                    invalid: row.invalid,
                }
                .into_row(agent)
            })
            .collect()
    }

    async fn write_sketches(&self, batches: &[SketchBatch]) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.visits;
        let keyspace = self.config.keyspace.to_string();
        let rows: Vec<SketchValues> = batches
            .iter()
            .flat_map(|(partition, rows)| {
                rows.iter().map(move |row| SketchValues {
                    site: partition.site.as_str(),
                    day: partition.day.date(),
                    combination: partition.combination.as_str(),
                    hour: row.hour,
                    writer: row.writer,
                    sketch: row.sketch.as_slice(),
                    ttl: self.raw_ttl(partition.day),
                    captured_at: row.captured_at,
                })
            })
            .collect();
        // Each sketch row is a partition of its own: grouped by the node that owns it, a
        // flush is a few hundred requests, not one per row.
        let groups = replica_batches::by_replica(
            rows,
            |row| {
                replica_batches::first_replica(
                    &self.session,
                    &keyspace,
                    "visit_sketch",
                    &(row.site, row.day, row.combination),
                )
            },
            // Keys and blob, plus the day, hour, writer and cell overheads.
            |row| row.site.len() + row.combination.len() + row.sketch.len() + 64,
        );
        let writes: Vec<_> = groups
            .into_iter()
            .map(|group| self.write_sketch_group(&statements.insert_sketch, group))
            .collect();
        stream::iter(writes)
            .buffer_unordered(SKETCHES_IN_FLIGHT)
            .try_collect::<()>()
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

impl CassandraStore {
    /// Writes rows that [`replica_batches::by_replica`] grouped: alone as one statement,
    /// together as one unlogged batch (each row keeps its own `USING TIMESTAMP`).
    async fn write_sketch_group(
        &self,
        insert_sketch: &PreparedStatement,
        group: Vec<SketchValues<'_>>,
    ) -> Result<(), StoreError> {
        const CONTEXT: &str = "writing sketches";
        if let [row] = group.as_slice() {
            self.session
                .execute_unpaged(insert_sketch, row)
                .await
                .map_err(failed(CONTEXT))?;
            return Ok(());
        }
        let mut batch = Batch::new(BatchType::Unlogged);
        batch.set_is_idempotent(true);
        for _ in &group {
            batch.append_statement(insert_sketch.clone());
        }
        self.session
            .batch(&batch, group)
            .await
            .map_err(failed(CONTEXT))?;
        Ok(())
    }
}
