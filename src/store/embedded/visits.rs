//! Beacons and live unique-visitor sketches in the embedded store.

use super::engine::{Table, corrupt};
use super::{EmbeddedStore, site_keys};
use crate::domain::beacon::{Beacon, Features, Guid, VisitPartition};
use crate::domain::time::EventTime;
use crate::store::{SketchPartition, SketchRow, StoreError, VisitRow, VisitStore};
use async_trait::async_trait;

#[async_trait]
impl VisitStore for EmbeddedStore {
    async fn write_visits(
        &self,
        partition: &VisitPartition,
        visits: &[Beacon],
    ) -> Result<(), StoreError> {
        let rows = visits
            .iter()
            .map(|visit| {
                let key = site_keys::visit_key(
                    partition,
                    visit.timestamp.instant(),
                    visit.guid.as_str(),
                    &visit.features.combination_key(),
                );
                (Table::Visit, key, Vec::new())
            })
            .collect();
        self.write("writing beacons", rows).await
    }

    async fn read_visits(&self, partition: &VisitPartition) -> Result<Vec<VisitRow>, StoreError> {
        const CONTEXT: &str = "reading beacons";
        let prefix = site_keys::visit_prefix(partition);
        let prefix_len = prefix.len();
        let rows = self.scan(Table::Visit, prefix, None, CONTEXT).await?;
        rows.iter()
            .map(|(key, _)| {
                let (at, guid, features) =
                    site_keys::decode_visit_key(key, prefix_len).ok_or_else(|| corrupt(CONTEXT))?;
                Ok(VisitRow {
                    timestamp: EventTime::from_stored(at),
                    guid: Guid::from_stored(guid.to_owned()),
                    features: Features::from_combination_key(features)
                        .ok_or_else(|| corrupt(CONTEXT))?,
                })
            })
            .collect()
    }

    async fn write_sketches(
        &self,
        partition: &SketchPartition,
        rows: &[SketchRow],
    ) -> Result<(), StoreError> {
        let rows = rows
            .iter()
            .map(|row| {
                (
                    Table::VisitSketch,
                    site_keys::sketch_key(partition, row.hour, row.writer),
                    row.sketch.clone(),
                )
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
