//! This process's unique-visitor sketches of recent beacons, one per site, UTC hour and feature
//! combination, flushed about every second as **absolute** state under a writer id of their own
//! (docs/DESIGN.md, "Live unique-visitor sketches"). Readers merge every writer's row of an hour, so
//! a rewrite, a retried beacon, a restart or a second process never inflates a count.
//!
//! A beacon waits, grouped with the others of its whole cell, until the flush counts each group
//! into its subsets' sketches at once ([`waiting`]).
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

mod shard;
mod waiting;

use crate::domain::beacon::Beacon;
use crate::domain::owner::OwnerKind;
use crate::domain::sketch::MemberHash;
use crate::domain::time::HOUR_MILLIS;
use crate::processes::ProcessRegistry;
use crate::store::{SketchBatch, SketchPartition, SketchRow, StoreError, VisitStore};
use chrono::Utc;
use shard::{CellRef, Queued, Shard, Snapshot};
use std::collections::BTreeMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use waiting::{Group, Waiting};

/// Independent locks, so concurrent beacons rarely wait for each other.
const SHARDS: usize = 16;
/// Changed sketches copied out and written as one store call: a flush holds this many copies
/// at most, and the embedded store commits them (one fsync) together.
const FLUSH_CHUNK: usize = 4096;
/// Waiting groups counted between two yields of the flusher: about a millisecond's work, so
/// the requests sharing its thread wait no longer than that.
const COUNT_CHUNK: usize = 256;
/// The default memory budget of the live sketches.
pub(crate) const DEFAULT_BUDGET_BYTES: u64 = 256 * 1024 * 1024;

/// Microseconds since the epoch, strictly increasing within the process: the capture time of
/// a sketch state.
pub(crate) fn capture_time() -> i64 {
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

pub struct LiveSketches {
    shards: Vec<Mutex<Shard>>,
    /// Beacons recorded and not yet counted into `shards`, by whole cell.
    waiting: Vec<Mutex<Waiting>>,
    /// Hashes each cell once per beacon: the hash picks the shard and finds the sketch in it.
    /// Keyed per process, so feature values cannot be chosen to collide.
    hasher: RandomState,
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
    pub(crate) fn with_budget(budget_bytes: u64) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            waiting: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            budget: budget_bytes.max(1),
            held: AtomicU64::new(0),
            pressure: Notify::new(),
        }
    }

    /// Bytes charged for the sketches in memory and the beacons waiting to be counted.
    pub(crate) fn held_bytes(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Whether a beacon may be counted now: false only when new sketches have outrun the
    /// flusher up to the whole budget (the answer is then 503, and nothing is stored).
    pub(crate) fn has_room(&self) -> bool {
        self.held_bytes() <= self.budget
    }

    /// From here on the flusher stores and drops sketches: four fifths of the budget.
    fn pressure_mark(&self) -> u64 {
        self.budget / 5 * 4
    }

    /// Takes `beacon`'s visitor to be counted in the sketch of every subset of its features
    /// by the next flush. Runs for every beacon: one lookup of its whole cell, where the
    /// beacons of the same cell since the last flush wait together.
    pub fn record(&self, beacon: &Beacon) {
        let member = MemberHash::of(beacon.guid.as_str().as_bytes());
        let hour = beacon.timestamp.epoch_millis().div_euclid(HOUR_MILLIS);
        let hash = self
            .hasher
            .hash_one((beacon.site.as_str(), hour, &beacon.features));
        let charged = lock(&self.waiting[shard_of(hash)]).add(
            hash,
            &beacon.site,
            hour,
            &beacon.features,
            member,
        );
        self.charge(charged);
    }

    /// Counts every beacon waiting when it starts into its sketches, one shard of waiting
    /// groups at a time (a request that records meanwhile waits for one shard's table swap,
    /// not the counting). Dropped halfway, it puts back the groups it had not counted.
    pub(crate) async fn count_waiting(&self) {
        for waiting in &self.waiting {
            let mut counting = Counting {
                waiting,
                groups: lock(waiting).take(),
            };
            while !counting.groups.is_empty() {
                let from = counting.groups.len().saturating_sub(COUNT_CHUNK);
                let chunk = counting.groups.split_off(from);
                // No await between taking a chunk and counting it: a drop loses nothing.
                self.count(&chunk);
                // A second's beacons take a while to count: let requests run meanwhile.
                tokio::task::yield_now().await;
            }
        }
    }

    /// Counts each group's visitors in the sketch of every subset of its features: the
    /// combination keys are built in one reused buffer per group and only allocated for a
    /// sketch seen for the first time.
    fn count(&self, groups: &[Group]) {
        let now = Instant::now();
        let (mut charged, mut released) = (0u64, 0u64);
        for group in groups {
            let mut keys = group.features.each_subset_key();
            while let Some(key) = keys.next_key() {
                let cell = CellRef {
                    site: &group.site,
                    hour: group.hour,
                    combination: key,
                };
                let hash = self.hash(cell);
                charged += self.shard(hash).record(hash, cell, &group.members, now);
            }
            released += group.charged;
        }
        self.held.fetch_sub(released, Ordering::Relaxed);
        self.charge(charged);
    }

    fn charge(&self, bytes: u64) {
        let held = self.held.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if held > self.pressure_mark() {
            self.pressure.notify_one();
        }
    }

    /// Counts the waiting beacons, then writes every sketch changed since its last flush, at most [`FLUSH_CHUNK`] at a time
    /// (the copies a flush holds stay small, and each chunk is one store call). A sketch
    /// changed again while its shard is written waits for the next flush, so a flush ends
    /// under any load. A sketch whose write fails stays changed and is written by the next
    /// flush; the first failure is returned after every shard was tried.
    pub async fn flush(&self, store: &dyn VisitStore) -> Result<Flushed, StoreError> {
        self.count_waiting().await;
        let mut written = Flushed::default();
        let mut first_error = None;
        for shard in &self.shards {
            // Sketches changed after this point wait for the next flush.
            let mut left = lock(shard).queued();
            while left > 0 {
                let take = left.min(FLUSH_CHUNK);
                left -= take;
                let mut snapshots = lock(shard).snapshot_next(take, capture_time());
                let in_flight = InFlight::new(shard, &snapshots);
                let bytes: usize = snapshots.iter().map(|s| s.bytes.len()).sum();
                match store.write_sketches(&batches(&mut snapshots)).await {
                    Ok(()) => {
                        written.sketches += snapshots.len();
                        written.bytes += bytes;
                        in_flight.stored(&snapshots);
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
        self.evict_stored(|touched| now.saturating_duration_since(touched) >= idle);
    }

    /// Once past four fifths of the budget, drops the least recently used stored sketches
    /// until two fifths of it are free, so the next eviction is not due at once.
    pub(crate) fn evict_least_recent(&self) {
        let held = self.held_bytes();
        if held <= self.pressure_mark() {
            return;
        }
        let to_free = held - self.budget / 5 * 3;
        let mut stored: Vec<(Instant, u64)> = Vec::new();
        for shard in &self.shards {
            stored.extend(
                lock(shard)
                    .entries()
                    .filter(|entry| !entry.is_dirty())
                    .map(|entry| (entry.touched, entry.charged)),
            );
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
        self.evict_stored(|touched| touched <= cutoff);
    }

    /// Drops the stored (not dirty) sketches last touched when `evict` says, releasing their
    /// charge.
    fn evict_stored(&self, evict: impl Fn(Instant) -> bool) {
        let released: u64 = self
            .shards
            .iter()
            .map(|shard| lock(shard).evict(|entry| evict(entry.touched)))
            .sum();
        self.held.fetch_sub(released, Ordering::Relaxed);
    }

    /// Sketches held in memory.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|shard| lock(shard).len()).sum()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counts every waiting beacon at once (tests).
    #[cfg(test)]
    fn count_now(&self) {
        for waiting in &self.waiting {
            let groups = lock(waiting).take();
            self.count(&groups);
        }
    }

    /// Every waiting beacon counted, then every changed sketch copied out, by shard (tests).
    #[cfg(test)]
    fn dirty(&self) -> Vec<(usize, Vec<Snapshot>)> {
        self.count_now();
        let captured_at = capture_time();
        self.shards
            .iter()
            .enumerate()
            .map(|(index, shard)| (index, lock(shard).snapshot_next(usize::MAX, captured_at)))
            .filter(|(_, snapshots)| !snapshots.is_empty())
            .collect()
    }

    /// Records copies as stored (tests).
    #[cfg(test)]
    fn mark_flushed(&self, dirty: &[(usize, Vec<Snapshot>)]) {
        for (index, snapshots) in dirty {
            lock(&self.shards[*index]).mark_flushed(snapshots);
        }
    }

    fn hash(&self, cell: CellRef<'_>) -> u64 {
        self.hasher
            .hash_one((cell.site.as_str(), cell.hour, cell.combination))
    }

    fn shard(&self, hash: u64) -> MutexGuard<'_, Shard> {
        lock(&self.shards[shard_of(hash)])
    }
}

/// The shard of a hash: bits the tables do not use (their buckets come from the low bits of
/// the same hash, their tags from the top seven).
fn shard_of(hash: u64) -> usize {
    (hash >> 32) as usize % SHARDS
}

/// Waiting groups taken out of their table and not yet counted: put back if the count is
/// dropped halfway (the flusher is stopped at shutdown), so the last flush still counts them.
struct Counting<'a> {
    waiting: &'a Mutex<Waiting>,
    groups: Vec<Group>,
}

impl Drop for Counting<'_> {
    fn drop(&mut self) {
        if !self.groups.is_empty() {
            lock(self.waiting).put_back(self.groups.drain(..));
        }
    }
}

/// Snapshots taken off a shard's queue and not yet stored: queued again if their write fails,
/// or if the flush is dropped halfway (at shutdown), so a later flush still finds them.
struct InFlight<'a> {
    shard: &'a Mutex<Shard>,
    names: Vec<Queued>,
}

impl<'a> InFlight<'a> {
    fn new(shard: &'a Mutex<Shard>, snapshots: &[Snapshot]) -> Self {
        Self {
            shard,
            names: snapshots.iter().map(Snapshot::named).collect(),
        }
    }

    fn stored(mut self, snapshots: &[Snapshot]) {
        lock(self.shard).mark_flushed(snapshots);
        self.names.clear();
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.names.is_empty() {
            lock(self.shard).requeue(&self.names);
        }
    }
}

/// The snapshots' rows, grouped by partition (their bytes are moved out).
fn batches(snapshots: &mut [Snapshot]) -> Vec<SketchBatch> {
    let mut by_partition: BTreeMap<SketchPartition, Vec<SketchRow>> = BTreeMap::new();
    for snapshot in snapshots {
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
    by_partition.into_iter().collect()
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
pub(crate) fn spawn_flusher(
    live: Arc<LiveSketches>,
    store: Arc<dyn VisitStore>,
    registry: Arc<ProcessRegistry>,
    period: Duration,
) -> tokio::task::JoinHandle<()> {
    const IDLE: Duration = Duration::from_secs(15 * 60);
    // A sweep for idle sketches visits every sketch: once a minute is often enough for 15.
    const IDLE_SWEEP: Duration = Duration::from_secs(60);
    tokio::spawn(async move {
        let mut ticks = crate::periodic::ticks(period);
        let mut last_sweep = Instant::now();
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
            if last_sweep.elapsed() >= IDLE_SWEEP {
                live.evict_idle(IDLE);
                last_sweep = Instant::now();
            }
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
    use crate::domain::sketch::UniqueSketch;
    use crate::domain::time::EventTime;
    use std::collections::HashMap;
    use uuid::Uuid;

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
        assert_eq!(live.len(), 0, "counted by the flush");
        live.count_now();
        assert_eq!(live.len(), 4);
        let dirty = live.dirty();
        assert_eq!(count(&dirty), 4);
        live.mark_flushed(&dirty);
        assert_eq!(count(&live.dirty()), 0);
        live.record(&beacon("c", &[("ref", "y")]));
        // Two new cells (ref=y, and the site-wide one again).
        assert_eq!(count(&live.dirty()), 2);
        live.evict_idle(Duration::ZERO);
        assert_eq!(live.len(), 2, "only the stored, idle sketches are dropped");
    }

    #[test]
    fn a_sketch_changed_while_its_copy_is_written_is_written_again() {
        let live = LiveSketches::default();
        live.record(&beacon("a", &[]));
        live.count_now();
        let shard = &live.shards[first_dirty_shard(&live)];
        let copies = lock(shard).snapshot_next(usize::MAX, capture_time());
        assert_eq!(copies.len(), 1);
        live.record(&beacon("b", &[]));
        live.count_now();
        InFlight::new(shard, &copies).stored(&copies);
        let again = live.dirty();
        assert_eq!(count(&again), 1, "the second visitor is not stored yet");
        live.mark_flushed(&again);
        assert_eq!(count(&live.dirty()), 0);
    }

    #[test]
    fn copies_whose_write_failed_or_was_dropped_are_queued_again() {
        let live = LiveSketches::default();
        live.record(&beacon("a", &[("ref", "x")]));
        live.count_now();
        for shard in &live.shards {
            let copies = lock(shard).snapshot_next(usize::MAX, capture_time());
            // Dropped before `stored`: a failed write, or a flush cancelled at shutdown.
            drop(InFlight::new(shard, &copies));
        }
        let dirty = live.dirty();
        assert_eq!(count(&dirty), 2, "both sketches are still to be written");
        live.mark_flushed(&dirty);
        live.evict_idle(Duration::ZERO);
        assert!(live.is_empty(), "once stored, they may go");
    }

    #[test]
    fn a_long_sketchs_waiting_members_are_in_its_copy() {
        let live = LiveSketches::default();
        // Past 512 entries, members wait in a buffer of 64: 1,000 leaves some waiting.
        for n in 0..1_000 {
            live.record(&beacon(&format!("visitor-{n}"), &[]));
        }
        let dirty = live.dirty();
        let copies: Vec<&Snapshot> = dirty.iter().flat_map(|(_, copies)| copies).collect();
        assert_eq!(copies.len(), 1, "the site-wide sketch");
        let sketch = UniqueSketch::from_bytes(&copies[0].bytes).expect("decodes");
        assert_eq!(sketch.estimate(), 1_000);
    }

    /// The two rows of a sketch always hold every member between them, and a growing sketch
    /// is not rewritten whole every flush.
    #[test]
    fn a_growing_sketch_stores_what_it_gained_apart_until_rewriting_it_pays() {
        let live = LiveSketches::default();
        let mut stored: HashMap<Uuid, UniqueSketch> = HashMap::new();
        let mut whole_writer = None;
        let (mut wholes, mut written, mut whole_each_time) = (0, 0, 0);
        for round in 0..30 {
            for n in round * 100..round * 100 + 100 {
                live.record(&beacon(&format!("visitor-{n}"), &[]));
            }
            let dirty = live.dirty();
            live.mark_flushed(&dirty);
            let copies: Vec<Snapshot> = dirty.into_iter().flat_map(|(_, c)| c).collect();
            assert_eq!(copies.len(), 1, "the site-wide sketch only");
            let copy = &copies[0];
            let sketch = UniqueSketch::from_bytes(&copy.bytes).expect("decodes");
            let members = (round + 1) * 100;
            if *whole_writer.get_or_insert(copy.writer) == copy.writer {
                assert_eq!(sketch.estimate(), members as u64, "round {round}: whole");
                wholes += 1;
            }
            written += copy.bytes.len();
            whole_each_time += live_whole_bytes(&live);
            // A write replaces its row; readers merge the rows there are.
            stored.insert(copy.writer, sketch);
            let mut union = UniqueSketch::new();
            stored.values().for_each(|row| union.merge(row));
            assert!(
                union.estimate().abs_diff(members as u64) <= 1,
                "round {round}: {} of {members}",
                union.estimate()
            );
            // Returning visitors change nothing: no copy.
            live.record(&beacon("visitor-0", &[]));
            assert_eq!(count(&live.dirty()), 0);
        }
        assert_eq!(stored.len(), 2, "the whole row and the recent row");
        assert!(
            (3..15).contains(&wholes),
            "{wholes} whole rows in 30 flushes"
        );
        assert!(
            written * 2 < whole_each_time,
            "{written} bytes, against {whole_each_time} rewriting the whole"
        );
    }

    fn live_whole_bytes(live: &LiveSketches) -> usize {
        live.shards
            .iter()
            .map(|shard| lock(shard).whole_bytes())
            .sum()
    }

    #[test]
    fn members_gained_while_the_whole_row_is_written_stay_for_the_next_copy() {
        let live = LiveSketches::default();
        let visit = |range: std::ops::Range<usize>| {
            for n in range {
                live.record(&beacon(&format!("visitor-{n}"), &[]));
            }
        };
        visit(0..100);
        let first = live.dirty();
        live.mark_flushed(&first);
        // Thirty times what the whole row holds: the next copy is the whole row again.
        visit(100..3_100);
        live.count_now();
        let shard = &live.shards[first_dirty_shard(&live)];
        let whole = lock(shard).snapshot_next(usize::MAX, capture_time());
        assert_eq!(whole[0].writer, first[0].1[0].writer, "the whole row");
        live.record(&beacon("arrived-during-the-write", &[]));
        live.count_now();
        InFlight::new(shard, &whole).stored(&whole);
        let next = live.dirty();
        let copies: Vec<&Snapshot> = next.iter().flat_map(|(_, copies)| copies).collect();
        assert_eq!(copies.len(), 1);
        assert_ne!(copies[0].writer, whole[0].writer, "the recent row");
        let recent = UniqueSketch::from_bytes(&copies[0].bytes).expect("decodes");
        assert_eq!(recent.estimate(), 1, "only the member the whole row missed");
    }

    #[tokio::test]
    async fn a_count_dropped_halfway_puts_back_what_it_had_not_counted() {
        let live = LiveSketches::default();
        // Enough pages that the first shard holds more groups than one chunk.
        let pages = SHARDS * COUNT_CHUNK * 2;
        for n in 0..pages {
            let page = format!("/p/{n}");
            live.record(&beacon(&format!("visitor-{n}"), &[("page", page.as_str())]));
        }
        // The first chunk is counted, then the count is dropped at its first pause, as the
        // flusher is at shutdown.
        let dropped = futures::FutureExt::now_or_never(live.count_waiting());
        assert!(dropped.is_none(), "the count pauses after a chunk");
        let counted = live.len();
        assert!(
            counted > 1 && counted <= COUNT_CHUNK + 1,
            "{counted} sketches"
        );
        live.count_now();
        assert_eq!(
            live.len(),
            pages + 1,
            "each page's sketch and the site-wide one"
        );
        let dirty = live.dirty();
        live.mark_flushed(&dirty);
        live.evict_idle(Duration::ZERO);
        assert_eq!(live.held_bytes(), 0, "every charge is released once");
    }

    fn count(dirty: &[(usize, Vec<Snapshot>)]) -> usize {
        dirty.iter().map(|(_, snapshots)| snapshots.len()).sum()
    }

    fn first_dirty_shard(live: &LiveSketches) -> usize {
        live.shards
            .iter()
            .position(|shard| lock(shard).queued() > 0)
            .expect("a queued sketch")
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
        let beacon = fresh_beacon(0);
        let site_wide = CellRef {
            site: &beacon.site,
            hour: beacon.timestamp.epoch_millis().div_euclid(HOUR_MILLIS),
            combination: "",
        };
        let hash = live.hash(site_wide);
        assert!(live.shard(hash).holds(hash, site_wide));
        live.evict_idle(Duration::ZERO);
        assert_eq!(
            live.held_bytes(),
            0,
            "every charge is released with its sketch"
        );
        assert!(live.is_empty());
    }
}
