//! The beacon write path: a validated beacon is stored in its partition (site, UTC day, bucket
//! in force at its own time) before the answer, then counted in this process's live sketches,
//! which reach the store about a second later ([`live`]). Sketches can always be rebuilt from
//! the stored beacons ([`rebuild`]).

pub(crate) mod gpc;
pub mod live;
pub mod rebuild;

use crate::domain::beacon::{Beacon, Guid, SiteId};
use crate::domain::owner::Owner;
use crate::domain::privacy::VisitorDay;
use crate::domain::sealing::SealingRule;
use crate::domain::time::Day;
use crate::erased::ErasedSubjects;
use crate::processes::ProcessRegistry;
use crate::remembered::Remembered;
use crate::settings::SettingsCache;
use crate::store::{Store, StoreError};
use chrono::Utc;
use gpc::DayKeys;
use live::LiveSketches;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Site-days remembered as already in the day index; past this, the memory starts over.
const MARKED_DAYS_REMEMBERED: usize = 100_000;
/// Visitor-days remembered as already in the visitor index (16 bytes each); past this, the
/// memory starts over (an entry written again is harmless, only work).
const VISITOR_DAYS_REMEMBERED: usize = 500_000;
/// How long they are remembered at most: an erasure on another process deletes a visitor's
/// entries, and this process writes them again for the visitor's next beacons no later than
/// this after.
const VISITOR_DAYS_MEMORY: Duration = Duration::from_secs(600);

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
    /// Visitor-days this process wrote to the visitor index lately, as 128-bit hashes keyed
    /// per process: a visitor's beacons of a day cost the index one write, not one each.
    visitor_days: Mutex<(Instant, HashSet<u128>)>,
    visitor_seed: u64,
    /// Erased visitors, whose re-sent old beacons are dropped.
    erased: Option<Arc<ErasedSubjects>>,
    /// The day keys a beacon sent under Global Privacy Control is hashed with.
    day_keys: Option<Arc<DayKeys>>,
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
            visitor_days: Mutex::new((Instant::now(), HashSet::new())),
            visitor_seed: rand::random(),
            erased: None,
            day_keys: None,
        }
    }

    /// Stores the beacons that ask for Global Privacy Control without their visitor.
    pub(crate) fn with_day_keys(mut self, day_keys: Arc<DayKeys>) -> Self {
        self.day_keys = Some(day_keys);
        self
    }

    /// Drops the re-sent old beacons of erased visitors.
    pub(crate) fn with_erased(mut self, erased: Arc<ErasedSubjects>) -> Self {
        self.erased = Some(erased);
        self
    }

    /// Stores `beacon` durably, then counts it. With `without_visitor` (its page asked for
    /// Global Privacy Control and its site respects it) it is stored as a visit without a
    /// visitor: its guid replaced by a keyed hash under its day's key, out of the visitor
    /// index and of the unique visitors.
    pub(crate) async fn track(
        &self,
        mut beacon: Beacon,
        without_visitor: bool,
    ) -> Result<(), TrackError> {
        if !self.live.has_room() {
            return Err(TrackError::SketchesFull);
        }
        if self.erased.as_ref().is_some_and(|erased| {
            erased.drops_beacon(&beacon.site, &beacon.guid, beacon.timestamp.instant())
        }) {
            // An erased visitor's beacon timed before the erasure: it would have been erased.
            metrics::counter!("adevents_erased_events_dropped_total", "kind" => "visit")
                .increment(1);
            return Ok(());
        }
        if without_visitor {
            let day_keys = self.day_keys.as_ref().ok_or_else(|| {
                StoreError::internal_message("beacons under Global Privacy Control need day keys")
            })?;
            let day = beacon.timestamp.utc_day();
            beacon.guid = day_keys
                .guid_of(&beacon.site, &beacon.guid, day, Utc::now())
                .await?;
        }
        let owner = Owner::Site(beacon.site.clone());
        let history = self.settings.history(&owner).await?;
        let partition = beacon.partition(history.buckets_at(beacon.timestamp.instant()));
        let visitor_day = self.visitor_day_hash(&beacon.site, &beacon.guid, partition.day);
        let visitors =
            if !beacon.guid.is_visitor() || self.lock_visitor_days().1.contains(&visitor_day) {
                Vec::new()
            } else {
                vec![VisitorDay {
                    site: beacon.site.clone(),
                    guid: beacon.guid.clone(),
                    day: partition.day,
                }]
            };
        self.mark_day(partition.day, &owner).await?;
        // Before the beacon can be counted: a crash before its sketches are stored is
        // repaired from the stored beacons (crate::app::repair).
        self.registry.mark(&owner, partition.day).await?;
        self.store
            .write_visits(&partition, std::slice::from_ref(&beacon), &visitors)
            .await?;
        if !visitors.is_empty() {
            self.remember_visitor_day(visitor_day);
        }
        // After the write, by the beacon's age (see `crate::domain::sealing`): a sealed day
        // stops answering until it is sealed again with this beacon.
        let now = Utc::now();
        if self.sealing.is_late(partition.day, now) {
            self.store.mark_late(&owner, partition.day, now).await?;
        }
        // Invalid traffic is stored, never counted as a visitor; nor is a GPC beacon.
        if beacon.invalid.is_none() && beacon.guid.is_visitor() {
            self.live.record(&beacon);
            self.registry.counted(&owner, partition.day);
        }
        Ok(())
    }

    /// A visitor-day's key in this process's memory of the visitor index. 128 bits: a false
    /// match would leave a beacon out of the index.
    fn visitor_day_hash(&self, site: &SiteId, guid: &Guid, day: Day) -> u128 {
        let mut bytes = Vec::with_capacity(site.as_str().len() + guid.as_str().len() + 8);
        bytes.extend_from_slice(site.as_str().as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(guid.as_str().as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(&chrono::Datelike::num_days_from_ce(&day.date()).to_be_bytes());
        xxhash_rust::xxh3::xxh3_128_with_seed(&bytes, self.visitor_seed)
    }

    fn remember_visitor_day(&self, hash: u128) {
        let mut memory = self.lock_visitor_days();
        let (since, written) = &mut *memory;
        if written.len() >= VISITOR_DAYS_REMEMBERED || since.elapsed() >= VISITOR_DAYS_MEMORY {
            written.clear();
            *since = Instant::now();
        }
        written.insert(hash);
    }

    /// Forgets a visitor's days once its erasure deleted them, so that its beacons stored
    /// after the erasure lead to it again.
    pub(crate) fn forget_visitor(&self, site: &SiteId, guid: &Guid, days: &[Day]) {
        let hashes: Vec<u128> = days
            .iter()
            .map(|day| self.visitor_day_hash(site, guid, *day))
            .collect();
        let mut memory = self.lock_visitor_days();
        for hash in hashes {
            memory.1.remove(&hash);
        }
    }

    fn lock_visitor_days(&self) -> MutexGuard<'_, (Instant, HashSet<u128>)> {
        // A set of markers stays usable whatever panicked while holding it.
        self.visitor_days
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
