//! This process's unique-visitor sketches of recent beacons, one per site, UTC hour and feature
//! combination, flushed about every second as **absolute** state under a writer id of their own
//! (docs/DESIGN.md, "Live unique-visitor sketches"). Readers merge every writer's row of an hour, so
//! a rewrite, a retried beacon, a restart or a second process never inflates a count.
//!
//! A sketch evicted from memory and needed again (a late beacon for an old hour) starts afresh
//! under a new writer id rather than overwrite the state already stored with less.
//!
//! Memory is bounded by a byte budget: from four fifths of it, the flusher stores every sketch
//! and drops the least recently used from memory (counts are unchanged: readers merge what is
//! stored). Should new sketches outrun the flusher up to the budget itself, beacons are refused
//! until it catches up ([`LiveSketches::has_room`]). Sketches are spread over shards by site,
//! hour and combination, so no single map holds a busy site's whole hour (growing one map
//! briefly holds its old and new tables).

use crate::domain::beacon::{Beacon, SiteId};
use crate::domain::owner::OwnerKind;
use crate::domain::sketch::{MemberHash, UniqueSketch};
use crate::domain::time::{Day, HOUR_MILLIS};
use crate::processes::ProcessRegistry;
use crate::store::{SketchBatch, SketchPartition, SketchRow, StoreError, VisitStore};
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use uuid::Uuid;

/// Independent locks, so concurrent beacons rarely wait for each other.
const SHARDS: usize = 16;
/// Dirty sketches copied out and written as one store call: a flush holds this many copies
/// at most, and the embedded store commits them (one fsync) together.
const FLUSH_CHUNK: usize = 4096;
/// The default memory budget of the live sketches.
pub const DEFAULT_BUDGET_BYTES: u64 = 256 * 1024 * 1024;

/// What a sketch is charged against the budget, besides what the sketch itself holds
/// ([`UniqueSketch::heap_bytes`]): its map slot (the entry and its key, at the map's worst load
/// and growth, hence twice) and the key's allocation (with the allocator's rounding).
const ENTRY_BASE_BYTES: u64 =
    (2 * (std::mem::size_of::<Entry>() + std::mem::size_of::<String>()) + 32) as u64;

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
    /// What this entry is charged against the budget.
    charged: u64,
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
    budget: u64,
    /// Bytes charged for the sketches in memory.
    held: AtomicU64,
    /// Woken when `held` passes the budget.
    pressure: Notify,
}

impl Default for LiveSketches {
    fn default() -> Self {
        Self::with_budget(DEFAULT_BUDGET_BYTES)
    }
}

impl LiveSketches {
    pub fn with_budget(budget_bytes: u64) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
            budget: budget_bytes.max(1),
            held: AtomicU64::new(0),
            pressure: Notify::new(),
        }
    }

    /// Bytes charged for the sketches in memory.
    pub fn held_bytes(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Whether a beacon may be counted now: false only when new sketches have outrun the
    /// flusher up to the whole budget (the answer is then 503, and nothing is stored).
    pub fn has_room(&self) -> bool {
        self.held_bytes() <= self.budget
    }

    /// From here on the flusher stores and drops sketches: four fifths of the budget.
    fn pressure_mark(&self) -> u64 {
        self.budget / 5 * 4
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
        let mut charged = 0u64;
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
            let mut shard = self.shard(&beacon.site, hour, &key);
            let hours = match shard.get_mut(&beacon.site) {
                Some(hours) => hours,
                None => shard.entry(beacon.site.clone()).or_default(),
            };
            let combinations = hours.entry(hour).or_default();
            let entry = match combinations.get_mut(key.as_str()) {
                Some(entry) => entry,
                None => {
                    let base = ENTRY_BASE_BYTES + key.len() as u64;
                    charged += base;
                    combinations.entry(key.clone()).or_insert_with(|| Entry {
                        writer: Uuid::new_v4(),
                        sketch: UniqueSketch::new(),
                        version: 0,
                        flushed: 0,
                        touched: now,
                        charged: base,
                    })
                }
            };
            entry.sketch.insert(member);
            entry.version += 1;
            entry.touched = now;
            // Never lowered: turning dense frees a list larger than the registers, and the
            // allocator may keep it a while.
            let charge = ENTRY_BASE_BYTES + key.len() as u64 + entry.sketch.heap_bytes() as u64;
            if charge > entry.charged {
                charged += charge - entry.charged;
                entry.charged = charge;
            }
        }
        let held = self.held.fetch_add(charged, Ordering::Relaxed) + charged;
        if held > self.pressure_mark() {
            self.pressure.notify_one();
        }
    }

    /// Writes every sketch changed since its last flush, at most [`FLUSH_CHUNK`] at a time
    /// (the copies a flush holds stay small, and each chunk is one store call). A sketch
    /// dirtied again while its shard is written waits for the next flush, so a flush ends
    /// under any load. A sketch whose write fails stays dirty and is written by the next flush;
    /// the first failure is returned after every shard was tried.
    pub async fn flush(&self, store: &dyn VisitStore) -> Result<Flushed, StoreError> {
        let mut written = Flushed::default();
        let mut first_error = None;
        for shard in 0..SHARDS {
            let mut chunks_left = None;
            loop {
                let (mut snapshots, dirty) = self.dirty_in(shard, FLUSH_CHUNK);
                let left = chunks_left.get_or_insert(dirty.div_ceil(FLUSH_CHUNK));
                if snapshots.is_empty() || *left == 0 {
                    break;
                }
                *left -= 1;
                let bytes: usize = snapshots.iter().map(|s| s.bytes.len()).sum();
                let mut by_partition: BTreeMap<SketchPartition, Vec<SketchRow>> = BTreeMap::new();
                for snapshot in &mut snapshots {
                    by_partition
                        .entry(snapshot.cell.partition())
                        .or_default()
                        .push(SketchRow {
                            hour: snapshot.cell.hour_start(),
                            writer: snapshot.writer,
                            sketch: std::mem::take(&mut snapshot.bytes),
                            captured_at: snapshot.captured_at,
                        });
                }
                let batches: Vec<SketchBatch> = by_partition.into_iter().collect();
                match store.write_sketches(&batches).await {
                    Ok(()) => {
                        written.sketches += snapshots.len();
                        written.bytes += bytes;
                        self.mark_flushed(&snapshots);
                    }
                    Err(error) => {
                        first_error.get_or_insert(error);
                        break;
                    }
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
        let now = Instant::now();
        self.evict_stored(|entry| now.saturating_duration_since(entry.touched) >= idle);
    }

    /// Once past four fifths of the budget, drops the least recently used stored sketches
    /// until two fifths of it are free, so the next eviction is not due at once.
    pub fn evict_least_recent(&self) {
        let held = self.held_bytes();
        if held <= self.pressure_mark() {
            return;
        }
        let to_free = held - self.budget / 5 * 3;
        let mut stored: Vec<(Instant, u64)> = Vec::new();
        for shard in &self.shards {
            for hours in lock(shard).values() {
                for combinations in hours.values() {
                    stored.extend(
                        combinations
                            .values()
                            .filter(|entry| !entry.is_dirty())
                            .map(|entry| (entry.touched, entry.charged)),
                    );
                }
            }
        }
        stored.sort_unstable_by_key(|(touched, _)| *touched);
        let mut freed = 0;
        let Some(cutoff) = stored.iter().find_map(|(touched, charged)| {
            freed += charged;
            (freed >= to_free).then_some(*touched)
        }) else {
            // Not enough stored: drop all of it.
            self.evict_stored(|_| true);
            return;
        };
        self.evict_stored(|entry| entry.touched <= cutoff);
    }

    /// Drops the stored (not dirty) sketches `evict` picks, releasing their charge.
    fn evict_stored(&self, evict: impl Fn(&Entry) -> bool) {
        let mut released = 0;
        for shard in &self.shards {
            lock(shard).retain(|_, hours| {
                hours.retain(|_, combinations| {
                    combinations.retain(|_, entry| {
                        let drop = !entry.is_dirty() && evict(entry);
                        if drop {
                            released += entry.charged;
                        }
                        !drop
                    });
                    // A map never shrinks by itself: one that held a burst would keep its
                    // table (and grow it again over its tombstones) for the hour.
                    if combinations.capacity() > 4 * combinations.len() + 64 {
                        combinations.shrink_to_fit();
                    }
                    !combinations.is_empty()
                });
                !hours.is_empty()
            });
        }
        self.held.fetch_sub(released, Ordering::Relaxed);
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

    /// Every dirty sketch, copied out (tests).
    #[cfg(test)]
    fn dirty(&self) -> Vec<Snapshot> {
        (0..SHARDS)
            .flat_map(|shard| self.dirty_in(shard, usize::MAX).0)
            .collect()
    }

    /// Up to `limit` dirty sketches of one shard, copied out for a flush, and how many of its
    /// sketches are dirty.
    fn dirty_in(&self, shard: usize, limit: usize) -> (Vec<Snapshot>, usize) {
        let mut dirty = Vec::new();
        let mut count = 0;
        let captured_at = capture_time();
        for (site, hours) in lock(&self.shards[shard]).iter() {
            for (hour, combinations) in hours {
                for (combination, entry) in combinations {
                    if !entry.is_dirty() {
                        continue;
                    }
                    count += 1;
                    if dirty.len() < limit {
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
        (dirty, count)
    }

    fn mark_flushed(&self, snapshots: &[Snapshot]) {
        for snapshot in snapshots {
            let Cell {
                site,
                hour,
                combination,
            } = &snapshot.cell;
            if let Some(entry) = self
                .shard(site, *hour, combination)
                .get_mut(site)
                .and_then(|hours| hours.get_mut(hour))
                .and_then(|combinations| combinations.get_mut(combination))
                && entry.writer == snapshot.writer
            {
                entry.flushed = entry.flushed.max(snapshot.version);
            }
        }
    }

    fn shard(&self, site: &SiteId, hour: i64, combination: &str) -> MutexGuard<'_, Shard> {
        let index = (self.hasher.hash_one((site, hour, combination)) as usize) % SHARDS;
        lock(&self.shards[index])
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Sketches stay valid whatever panicked while one was held: keep counting.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Flushes `live` every `period`, and at once when it passes its budget, until the task is
/// aborted; sketches idle for 15 minutes, and past the budget the least recently used, are
/// dropped from memory once stored.
pub fn spawn_flusher(
    live: Arc<LiveSketches>,
    store: Arc<dyn VisitStore>,
    registry: Arc<ProcessRegistry>,
    period: Duration,
) -> tokio::task::JoinHandle<()> {
    const IDLE: Duration = Duration::from_secs(15 * 60);
    tokio::spawn(async move {
        let mut ticks = crate::periodic::ticks(period);
        // The sketches stay in memory and are retried.
        let mut outage = crate::periodic::OutageLog::new(
            "cannot store unique-visitor sketches; retrying every flush",
            Some("unique-visitor sketches are being stored again"),
        );
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                () = live.pressure.notified() => {}
            }
            let started = Instant::now();
            let flushed = live.flush(store.as_ref()).await;
            // Whatever the outcome: only stored sketches are dropped, and some of a failed
            // flush's were stored.
            live.evict_idle(IDLE);
            live.evict_least_recent();
            metrics::gauge!("adevents_sketch_memory_bytes").set(live.held_bytes() as f64);
            if flushed.is_ok() {
                registry.saved_through(OwnerKind::Site, started);
            }
            outage.record(&flushed);
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
            user_agent: None,
            invalid: None,
        }
    }

    #[test]
    fn a_beacon_touches_one_sketch_per_feature_subset_and_dirty_ones_are_snapshotted_once() {
        let live = LiveSketches::default();
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

#[cfg(test)]
mod budget_tests {
    use super::*;
    use crate::domain::beacon::{Features, Guid, SiteId};
    use crate::domain::time::EventTime;

    fn fresh_beacon(n: usize) -> Beacon {
        Beacon {
            site: SiteId::parse("example.com").expect("valid site"),
            guid: Guid::parse(&format!("visitor-{n}")).expect("valid guid"),
            timestamp: EventTime::from_epoch_millis(1_764_158_400_000, Utc::now()).expect("valid"),
            features: Features::new([("page".to_owned(), format!("/p/{n}"))].into())
                .expect("valid features"),
            user_agent: None,
            invalid: None,
        }
    }

    #[test]
    fn past_its_budget_the_least_recently_used_stored_sketches_go_and_the_charge_follows() {
        let live = LiveSketches::with_budget(64 * 1024);
        for n in 0..400 {
            live.record(&fresh_beacon(n));
        }
        assert!(live.held_bytes() > 64 * 1024, "{}", live.held_bytes());
        assert!(!live.has_room(), "far past the budget");
        live.evict_least_recent();
        assert!(
            live.held_bytes() > 64 * 1024,
            "dirty sketches are never dropped"
        );
        let dirty = live.dirty();
        live.mark_flushed(&dirty);
        live.evict_least_recent();
        assert!(
            live.held_bytes() <= 64 * 1024 * 3 / 5,
            "{}",
            live.held_bytes()
        );
        assert!(live.has_room());
        // The site-wide sketch is used by every beacon: the most recent, it stays.
        let site = fresh_beacon(0).site;
        let hour = fresh_beacon(0)
            .timestamp
            .epoch_millis()
            .div_euclid(HOUR_MILLIS);
        let site_wide = live
            .shard(&site, hour, "")
            .get(&site)
            .and_then(|hours| hours.get(&hour))
            .is_some_and(|combinations| combinations.contains_key(""));
        assert!(site_wide);
        live.evict_idle(Duration::ZERO);
        assert_eq!(
            live.held_bytes(),
            0,
            "every charge is released with its sketch"
        );
        assert!(live.is_empty());
    }
}
