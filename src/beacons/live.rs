//! This process's unique-visitor sketches of recent beacons, one per site, UTC hour and feature
//! combination, flushed about every second as **absolute** state under a writer id of their own
//! (docs/DESIGN.md, "Live unique-visitor sketches"). Readers merge every writer's row of an hour, so
//! a rewrite, a retried beacon, a restart or a second process never inflates a count.
//!
//! A sketch evicted from memory and needed again (a late beacon for an old hour) starts afresh
//! under a new writer id rather than overwrite the state already stored with less.

use crate::domain::beacon::{Beacon, SiteId};
use crate::domain::sketch::{MemberHash, UniqueSketch};
use crate::domain::time::{Day, HOUR_MILLIS};
use crate::store::{SketchPartition, SketchRow, StoreError, VisitStore};
use chrono::{DateTime, Utc};
use futures::{StreamExt, stream};
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// Independent locks, so concurrent beacons rarely wait for each other.
const SHARDS: usize = 16;
/// Sketch partitions written at once by one flush.
const FLUSH_CONCURRENCY: usize = 16;

/// One sketch's place: site, hour and combination.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cell {
    site: SiteId,
    /// Hours since the epoch.
    hour: i64,
    combination: String,
}

impl Cell {
    fn hour_start(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(self.hour * HOUR_MILLIS).unwrap_or_default()
    }

    fn partition(&self) -> SketchPartition {
        SketchPartition {
            site: self.site.clone(),
            day: Day::new(self.hour_start().date_naive()),
            combination: self.combination.clone(),
        }
    }
}

struct Entry {
    writer: Uuid,
    sketch: UniqueSketch,
    /// Bumped by every insert; the state is stored once `flushed` catches up.
    version: u64,
    flushed: u64,
    touched: Instant,
}

impl Entry {
    fn is_dirty(&self) -> bool {
        self.version != self.flushed
    }
}

/// One dirty sketch, copied out for a flush.
struct Snapshot {
    cell: Cell,
    writer: Uuid,
    version: u64,
    bytes: Vec<u8>,
    captured_at: i64,
}

/// Microseconds since the epoch, strictly increasing within the process: the capture time of
/// a sketch state.
pub fn capture_time() -> i64 {
    static LAST: AtomicI64 = AtomicI64::new(0);
    let now = Utc::now().timestamp_micros();
    let previous = LAST
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
            Some(now.max(last + 1))
        })
        .unwrap_or(now);
    now.max(previous + 1)
}

/// What one flush wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flushed {
    pub sketches: usize,
    /// Serialized sketch bytes (keys not included).
    pub bytes: usize,
}

/// A site's sketches by hour, then combination: nested so a beacon's lookups borrow its
/// site and keys instead of allocating a composite key per subset.
type SiteSketches = HashMap<i64, HashMap<String, Entry>>;
type Shard = HashMap<SiteId, SiteSketches>;

pub struct LiveSketches {
    shards: Vec<Mutex<Shard>>,
    hasher: std::collections::hash_map::RandomState,
}

impl Default for LiveSketches {
    fn default() -> Self {
        Self::new()
    }
}

impl LiveSketches {
    pub fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }

    /// Counts `beacon`'s visitor in the sketch of every subset of its features. Runs for every
    /// beacon: the combination keys are built in one reused buffer and only allocated for a
    /// sketch seen for the first time.
    pub fn record(&self, beacon: &Beacon) {
        let member = MemberHash::of(beacon.guid.as_str().as_bytes());
        let hour = beacon.timestamp.epoch_millis().div_euclid(HOUR_MILLIS);
        let pairs = beacon.features.encoded_pairs();
        let mut key = String::with_capacity(pairs.iter().map(|pair| pair.len() + 1).sum());
        let now = Instant::now();
        let mut shard = self.shard(&beacon.site);
        let hours = match shard.get_mut(&beacon.site) {
            Some(hours) => hours,
            None => shard.entry(beacon.site.clone()).or_default(),
        };
        let combinations = hours.entry(hour).or_default();
        for mask in 0u32..(1 << pairs.len()) {
            key.clear();
            for (bit, pair) in pairs.iter().enumerate() {
                if mask & (1 << bit) != 0 {
                    if !key.is_empty() {
                        key.push('&');
                    }
                    key.push_str(pair);
                }
            }
            let entry = match combinations.get_mut(key.as_str()) {
                Some(entry) => entry,
                None => combinations.entry(key.clone()).or_insert_with(|| Entry {
                    writer: Uuid::new_v4(),
                    sketch: UniqueSketch::new(),
                    version: 0,
                    flushed: 0,
                    touched: now,
                }),
            };
            entry.sketch.insert(member);
            entry.version += 1;
            entry.touched = now;
        }
    }

    /// Writes every sketch changed since its last flush. A sketch whose write fails stays
    /// dirty and is written by the next flush.
    pub async fn flush(&self, store: &dyn VisitStore) -> Result<Flushed, StoreError> {
        let mut by_partition: BTreeMap<SketchPartition, Vec<Snapshot>> = BTreeMap::new();
        for snapshot in self.dirty() {
            by_partition
                .entry(snapshot.cell.partition())
                .or_default()
                .push(snapshot);
        }
        let mut written = Flushed::default();
        let mut first_error = None;
        let mut writes = stream::iter(by_partition)
            .map(|(partition, snapshots)| async move {
                let rows: Vec<SketchRow> = snapshots
                    .iter()
                    .map(|snapshot| SketchRow {
                        hour: snapshot.cell.hour_start(),
                        writer: snapshot.writer,
                        sketch: snapshot.bytes.clone(),
                        captured_at: snapshot.captured_at,
                    })
                    .collect();
                let result = store.write_sketches(&partition, &rows).await;
                (snapshots, result)
            })
            .buffer_unordered(FLUSH_CONCURRENCY);
        while let Some((snapshots, result)) = writes.next().await {
            match result {
                Ok(()) => {
                    written.sketches += snapshots.len();
                    written.bytes += snapshots.iter().map(|s| s.bytes.len()).sum::<usize>();
                    self.mark_flushed(&snapshots);
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(written),
        }
    }

    /// Drops sketches that are stored and have not changed for `idle`.
    pub fn evict_idle(&self, idle: Duration) {
        for shard in &self.shards {
            lock(shard).retain(|_, hours| {
                hours.retain(|_, combinations| {
                    combinations
                        .retain(|_, entry| entry.is_dirty() || entry.touched.elapsed() < idle);
                    !combinations.is_empty()
                });
                !hours.is_empty()
            });
        }
    }

    /// Sketches held in memory.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                lock(shard)
                    .values()
                    .flat_map(HashMap::values)
                    .map(HashMap::len)
                    .sum::<usize>()
            })
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn dirty(&self) -> Vec<Snapshot> {
        let mut dirty = Vec::new();
        let captured_at = capture_time();
        for shard in &self.shards {
            for (site, hours) in lock(shard).iter() {
                for (hour, combinations) in hours {
                    for (combination, entry) in combinations {
                        if entry.is_dirty() {
                            dirty.push(Snapshot {
                                cell: Cell {
                                    site: site.clone(),
                                    hour: *hour,
                                    combination: combination.clone(),
                                },
                                writer: entry.writer,
                                version: entry.version,
                                bytes: entry.sketch.to_bytes(),
                                captured_at,
                            });
                        }
                    }
                }
            }
        }
        dirty
    }

    fn mark_flushed(&self, snapshots: &[Snapshot]) {
        for snapshot in snapshots {
            let Cell {
                site,
                hour,
                combination,
            } = &snapshot.cell;
            if let Some(entry) = self
                .shard(site)
                .get_mut(site)
                .and_then(|hours| hours.get_mut(hour))
                .and_then(|combinations| combinations.get_mut(combination))
                && entry.writer == snapshot.writer
            {
                entry.flushed = entry.flushed.max(snapshot.version);
            }
        }
    }

    fn shard(&self, site: &SiteId) -> MutexGuard<'_, Shard> {
        let index = (self.hasher.hash_one(site) as usize) % SHARDS;
        lock(&self.shards[index])
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Sketches stay valid whatever panicked while one was held: keep counting.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Flushes `live` every `period` until the task is aborted; sketches idle for 15 minutes are
/// dropped from memory once stored.
pub fn spawn_flusher(
    live: Arc<LiveSketches>,
    store: Arc<dyn VisitStore>,
    period: Duration,
) -> tokio::task::JoinHandle<()> {
    const IDLE: Duration = Duration::from_secs(15 * 60);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            ticks.tick().await;
            match live.flush(store.as_ref()).await {
                Ok(_) => {
                    if failing {
                        tracing::info!("unique-visitor sketches are being stored again");
                    }
                    failing = false;
                    live.evict_idle(IDLE);
                }
                Err(error) => {
                    // Logged once per outage; the sketches stay in memory and are retried.
                    if !failing {
                        tracing::warn!(%error, "cannot store unique-visitor sketches; retrying every flush");
                    }
                    failing = true;
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::beacon::{Features, Guid, SiteId};
    use crate::domain::time::EventTime;

    fn beacon(guid: &str, features: &[(&str, &str)]) -> Beacon {
        let features = features
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect();
        Beacon {
            site: SiteId::parse("example.com").expect("valid site"),
            guid: Guid::parse(guid).expect("valid guid"),
            timestamp: EventTime::from_epoch_millis(1_764_158_400_000, Utc::now()).expect("valid"),
            features: Features::new(features).expect("valid features"),
        }
    }

    #[test]
    fn a_beacon_touches_one_sketch_per_feature_subset_and_dirty_ones_are_snapshotted_once() {
        let live = LiveSketches::new();
        live.record(&beacon("a", &[("ref", "x"), ("page", "/")]));
        live.record(&beacon("b", &[("ref", "x"), ("page", "/")]));
        assert_eq!(live.len(), 4);
        let dirty = live.dirty();
        assert_eq!(dirty.len(), 4);
        live.mark_flushed(&dirty);
        assert!(live.dirty().is_empty());
        live.record(&beacon("c", &[("ref", "y")]));
        // Two new cells (ref=y, and the site-wide one again).
        assert_eq!(live.dirty().len(), 2);
        live.evict_idle(Duration::ZERO);
        assert_eq!(live.len(), 2, "only the stored, idle sketches are dropped");
    }
}
