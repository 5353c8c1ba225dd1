//! Beacons and live unique-visitor sketches in the embedded store.

use super::committer::Guarded;
use super::engine::{Table, corrupt};
use super::{EmbeddedStore, rows, site_keys};
use crate::domain::beacon::{Beacon, Features, Guid, VisitPartition};
use crate::domain::time::EventTime;
use crate::store::{SketchBatch, SketchPartition, SketchRow, StoreError, VisitRow, VisitStore};
use async_trait::async_trait;

#[async_trait]
impl VisitStore for EmbeddedStore {
    async fn write_visits(
        &self,
        partition: &VisitPartition,
        visits: &[Beacon],
    ) -> Result<(), StoreError> {
        let mut rows = Vec::with_capacity(visits.len());
        let mut guarded = Vec::new();
        for visit in visits {
            let key = site_keys::visit_key(
                partition,
                visit.timestamp.instant(),
                visit.guid.as_str(),
                &visit.features.combination_key(),
            );
            let value = rows::traffic_suffix(visit.invalid, visit.user_agent.as_ref());
            if visit.invalid.is_none() {
                rows.push((Table::Visit, key, value));
            } else {
                guarded.push(Guarded {
                    table: Table::Visit,
                    key,
                    value,
                    keeps: rows::visit_is_valid,
                });
            }
        }
        self.committer
            .commit_guarded("writing beacons", rows, guarded)
            .await
    }

    async fn read_visits(&self, partition: &VisitPartition) -> Result<Vec<VisitRow>, StoreError> {
        const CONTEXT: &str = "reading beacons";
        let prefix = site_keys::visit_prefix(partition);
        let prefix_len = prefix.len();
        let rows = self.scan(Table::Visit, prefix, None, CONTEXT).await?;
        rows.iter()
            .map(|(key, value)| {
                let (at, guid, features) =
                    site_keys::decode_visit_key(key, prefix_len).ok_or_else(|| corrupt(CONTEXT))?;
                let (invalid, _) =
                    rows::decode_traffic_suffix(value).ok_or_else(|| corrupt(CONTEXT))?;
                Ok(VisitRow {
                    timestamp: EventTime::from_stored(at),
                    guid: Guid::from_stored(guid.to_owned()),
                    features: Features::from_combination_key(features)
                        .ok_or_else(|| corrupt(CONTEXT))?,
                    invalid,
                })
            })
            .collect()
    }

    async fn write_sketches(&self, batches: &[SketchBatch]) -> Result<(), StoreError> {
        let rows = batches
            .iter()
            .flat_map(|(partition, rows)| {
                rows.iter().map(move |row| {
                    (
                        Table::VisitSketch,
                        site_keys::sketch_key(partition, row.hour, row.writer),
                        row.sketch.clone(),
                    )
                })
            })
            .collect();
        self.write("writing sketches", rows).await
    }

    async fn read_sketches(
        &self,
        partition: &SketchPartition,
    ) -> Result<Vec<SketchRow>, StoreError> {
        const CONTEXT: &str = "reading sketches";
        let prefix = site_keys::sketch_prefix(partition);
        let prefix_len = prefix.len();
        let rows = self.scan(Table::VisitSketch, prefix, None, CONTEXT).await?;
        rows.iter()
            .map(|(key, value)| {
                let (hour, writer) = site_keys::decode_sketch_key(key, prefix_len)
                    .ok_or_else(|| corrupt(CONTEXT))?;
                Ok(SketchRow {
                    hour,
                    writer,
                    sketch: value.to_vec(),
                    // Not kept: one process writes this folder, in order.
                    captured_at: 0,
                })
            })
            .collect()
    }
}
