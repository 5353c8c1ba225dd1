//! The beacon write path: a validated beacon is stored in its partition (site, UTC day, bucket
//! in force at its own time) before the answer, then counted in this process's live sketches,
//! which reach the store about a second later ([`live`]). Sketches can always be rebuilt from
//! the stored beacons ([`rebuild`]).

pub mod live;
pub mod rebuild;

use crate::domain::beacon::Beacon;
use crate::domain::owner::Owner;
use crate::domain::sealing::SealingRule;
use crate::domain::time::Day;
use crate::processes::ProcessRegistry;
use crate::remembered::Remembered;
use crate::settings::SettingsCache;
use crate::store::{Store, StoreError};
use chrono::Utc;
use live::LiveSketches;
use std::sync::Arc;

/// Site-days remembered as already in the day index; past this, the memory starts over.
const MARKED_DAYS_REMEMBERED: usize = 100_000;

/// Why a beacon was not taken; nothing of it was stored.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TrackError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The live sketches are a quarter past their memory budget: the flusher is behind.
    #[error("the unique-visitor sketches are over their memory budget")]
    SketchesFull,
}

pub(crate) struct BeaconIngestor {
    store: Arc<dyn Store>,
    settings: Arc<SettingsCache>,
    live: Arc<LiveSketches>,
    /// Where this process marks the site-days its live sketches hold unsaved state for.
    registry: Arc<ProcessRegistry>,
    /// Which beacons are late (their day may be sealed already).
    sealing: SealingRule,
    /// Site-days this process already wrote to the day index (docs/DESIGN.md: de-duplicated in the
    /// process, so the index costs one write per site and day, not one per beacon).
    marked: Remembered<(Day, Owner)>,
}

impl BeaconIngestor {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        settings: Arc<SettingsCache>,
        live: Arc<LiveSketches>,
        registry: Arc<ProcessRegistry>,
        sealing: SealingRule,
    ) -> Self {
        Self {
            store,
            settings,
            live,
            registry,
            sealing,
            marked: Remembered::new(MARKED_DAYS_REMEMBERED),
        }
    }

    /// Stores `beacon` durably, then counts it.
    pub(crate) async fn track(&self, beacon: Beacon) -> Result<(), TrackError> {
        if !self.live.has_room() {
            return Err(TrackError::SketchesFull);
        }
        let owner = Owner::Site(beacon.site.clone());
        let history = self.settings.history(&owner).await?;
        let partition = beacon.partition(history.buckets_at(beacon.timestamp.instant()));
        self.mark_day(partition.day, &owner).await?;
        // Before the beacon can be counted: a crash before its sketches are stored is
        // repaired from the stored beacons (crate::app::repair).
        self.registry.mark(&owner, partition.day).await?;
        self.store
            .write_visits(&partition, std::slice::from_ref(&beacon))
            .await?;
        // After the write, by the beacon's age (see `crate::domain::sealing`): a sealed day
        // stops answering until it is sealed again with this beacon.
        let now = Utc::now();
        if self.sealing.is_late(partition.day, now) {
            self.store.mark_late(&owner, partition.day, now).await?;
        }
        // Invalid traffic is stored, never counted as a visitor.
        if beacon.invalid.is_none() {
            self.live.record(&beacon);
            self.registry.counted(&owner, partition.day);
        }
        Ok(())
    }

    async fn mark_day(&self, day: Day, owner: &Owner) -> Result<(), StoreError> {
        let key = (day, owner.clone());
        if self.marked.contains(&key) {
            return Ok(());
        }
        self.store.mark_day(owner, day).await?;
        self.marked.remember([key]);
        Ok(())
    }
}
