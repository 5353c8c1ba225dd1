//! The newest seconds of impressions, clicks and view reports, held in memory as the commit
//! thread writes them (docs/DESIGN.md, "The embedded store"). A summary of an open day reads
//! its newest seconds raw at every poll; answered from here, they cost no engine reads,
//! however many segments the engine's tables hold after a busy hour.
//!
//! What is held mirrors the engine exactly from a floor on: every row of a held table whose
//! event time is at or after the floor is here, as the engine holds it, and a read of a time
//! range starting at or after the floor is answered from here or not at all.

use super::engine::{KeyValues, Rows, Table, Tables, engine_error};
use super::keys::{self, PARTITION_LEN};
use crate::domain::time::MAX_FUTURE_SKEW;
use crate::store::StoreError;
use fjall::Slice;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

/// How far back from now rows are held, by event time: a poll reads raw the last 1 to 3
/// seconds, and again a piece that a write reaching a few seconds back changed.
const HELD_MILLIS: i64 = 10_000;
/// The floor moves at most this often: moving it walks every partition held.
const MOVE_EVERY_MILLIS: i64 = 1_000;
/// The memory held rows may take; past it the oldest seconds go first, and their reads go to
/// the engine (a burst of events stamped now, or stamped minutes ahead, bounds it, not the
/// rate).
const HELD_BYTES: usize = 32 * 1024 * 1024;
/// What one held row is taken to cost besides its key and value: the tree's share of a node
/// and the two slices' headers.
const ROW_OVERHEAD: usize = 64;
/// How far the clock may step back across a restart: rows stamped ahead of the clock of
/// their write are recorded ([`FUTURE_KEY`]), and the floor after a restart starts past them
/// and this far past the clock.
const CLOCK_MARGIN_MILLIS: i64 = 5_000;

/// Where the latest event time of a held table's row written ahead of its commit's clock is
/// kept, in the meta table: rows stored before a restart with a time past the new floor.
pub(crate) const FUTURE_KEY: &str = "recent_rows_future_until";

/// Whether rows of `table` are held: the tables a raw read of an open stretch reads by time.
fn holds(table: Table) -> bool {
    matches!(
        table,
        Table::ImpressionSummary | Table::Click | Table::ViewReport
    )
}

/// The event time (milliseconds) of a key of a held table, which starts as an event key.
fn key_millis(key: &[u8]) -> Option<i64> {
    keys::decode_event_key(key).map(|(at, _)| at.timestamp_millis())
}

/// The rows of the held tables from the floor on.
pub(crate) struct RecentRows {
    held: Mutex<Held>,
}

struct Held {
    /// Every row of a held table with an event time at or after this (milliseconds) is here.
    floor: i64,
    /// By table and partition, in key order, as the engine keeps them.
    partitions: HashMap<(Table, [u8; PARTITION_LEN]), BTreeMap<Slice, Slice>>,
    bytes: usize,
    /// The latest row time stamped ahead of its commit that [`FUTURE_KEY`] holds.
    future_until: i64,
}

/// What a commit changes of the held tables, gathered before the commit and applied once it
/// succeeded.
#[derive(Default)]
pub(crate) struct HeldChanges {
    removed: Vec<(Table, Vec<u8>)>,
    written: Vec<(Table, Vec<u8>, Vec<u8>)>,
    /// Some key both removed and written in the commit: which one the engine kept is its
    /// business, so nothing held can be trusted.
    ambiguous: bool,
    /// A later time of a row written ahead of the commit's clock than [`FUTURE_KEY`] holds.
    future_until: Option<i64>,
}

impl HeldChanges {
    /// The row the commit must carry to record [`Self::future_until`].
    pub(crate) fn future_row(&self) -> Option<(Table, Vec<u8>, Vec<u8>)> {
        self.future_until.map(|until| {
            (
                Table::Meta,
                FUTURE_KEY.as_bytes().to_vec(),
                until.to_be_bytes().to_vec(),
            )
        })
    }
}

fn partition_of(key: &[u8]) -> Option<[u8; PARTITION_LEN]> {
    key.get(..PARTITION_LEN)?.try_into().ok()
}

fn row_bytes(key: &[u8], value: &[u8]) -> usize {
    key.len() + value.len() + ROW_OVERHEAD
}

/// The first key of a partition's rows stamped before `millis` (events are newest first).
fn before_key(partition: &[u8; PARTITION_LEN], millis: i64) -> Vec<u8> {
    let mut key = partition.to_vec();
    key.extend_from_slice(&keys::ordered_i64(!(millis - 1)));
    key
}

impl RecentRows {
    /// Holds nothing yet: its floor starts `CLOCK_MARGIN_MILLIS` past `now` and past the latest
    /// row stored ahead of its clock (`future_until`, from [`FUTURE_KEY`]).
    pub(crate) fn new(now: i64, future_until: Option<i64>) -> Self {
        let future_until = future_until.unwrap_or(i64::MIN);
        Self {
            held: Mutex::new(Held {
                floor: (now + CLOCK_MARGIN_MILLIS).max(future_until.saturating_add(1)),
                partitions: HashMap::new(),
                bytes: 0,
                future_until,
            }),
        }
    }

    /// Holds nothing yet, for a store opened on `tables` now.
    pub(crate) fn opened(tables: &Tables) -> Result<Self, StoreError> {
        let now = chrono::Utc::now().timestamp_millis();
        let stored = tables
            .meta
            .get(FUTURE_KEY)
            .map_err(|error| engine_error("reading the rows stored ahead of the clock", error))?;
        let future_until = stored.map(|bytes| match <[u8; 8]>::try_from(bytes.as_ref()) {
            Ok(bytes) => i64::from_be_bytes(bytes),
            // Not known: past anything a row could have been stamped with.
            Err(_) => now + max_ahead(),
        });
        Ok(Self::new(now, future_until))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What a commit of `removals` and `written` at `now` will change of the held rows.
    pub(crate) fn gather(
        &self,
        removals: &[(Table, Vec<u8>)],
        written: &[&(Table, Vec<u8>, Vec<u8>)],
        now: i64,
    ) -> HeldChanges {
        let (floor, future_until) = {
            let held = self.lock();
            (held.floor, held.future_until)
        };
        let mut changes = HeldChanges::default();
        let mut ahead = future_until;
        for (table, key) in removals {
            if holds(*table) {
                changes.removed.push((*table, key.clone()));
            }
        }
        for (table, key, value) in written.iter().copied() {
            if !holds(*table) {
                continue;
            }
            let Some(at) = key_millis(key) else {
                continue;
            };
            if at > now {
                ahead = ahead.max(at);
            }
            if at >= floor {
                changes.written.push((*table, key.clone(), value.clone()));
            }
        }
        if !changes.removed.is_empty() && !changes.written.is_empty() {
            let removed: HashSet<(Table, &[u8])> = changes
                .removed
                .iter()
                .map(|(table, key)| (*table, key.as_slice()))
                .collect();
            changes.ambiguous = changes
                .written
                .iter()
                .any(|(table, key, _)| removed.contains(&(*table, key.as_slice())));
        }
        changes.future_until = (ahead > future_until).then_some(ahead);
        changes
    }

    /// Applies what a commit that succeeded changed; `now` moves the floor along.
    pub(crate) fn apply(&self, changes: HeldChanges, now: i64) {
        let mut held = self.lock();
        if let Some(until) = changes.future_until {
            held.future_until = held.future_until.max(until);
        }
        if changes.ambiguous {
            held.forget(now);
            return;
        }
        for (table, key) in changes.removed {
            held.remove(table, &key);
        }
        let floor = held.floor;
        for (table, key, value) in changes.written {
            // Gathered under an older floor, perhaps.
            if key_millis(&key).is_some_and(|at| at >= floor) {
                held.insert(table, key, value);
            }
        }
        if now - HELD_MILLIS >= held.floor + MOVE_EVERY_MILLIS {
            held.raise(now - HELD_MILLIS);
        }
        while held.bytes > HELD_BYTES && !held.partitions.is_empty() {
            let next = held.floor.saturating_add(MOVE_EVERY_MILLIS);
            held.raise(next);
        }
    }

    /// A commit failed: what the engine holds now is not known, so nothing held answers
    /// until the rows written from here on are all that a read can meet.
    pub(crate) fn forget(&self, now: i64) {
        self.lock().forget(now);
    }

    /// The rows of `table` in `start..end` within one partition, whose event times are all
    /// at or after `from`; `None` when rows before the floor may lie there (the engine
    /// answers).
    pub(crate) fn range(
        &self,
        table: Table,
        from: i64,
        start: &[u8],
        end: &[u8],
    ) -> Option<KeyValues> {
        let partition = partition_of(start)?;
        if !holds(table) || partition_of(end) != Some(partition) {
            return None;
        }
        let held = self.lock();
        if from < held.floor {
            return None;
        }
        let Some(rows) = held.partitions.get(&(table, partition)) else {
            return Some(Vec::new());
        };
        Some(
            rows.range::<[u8], _>((
                std::ops::Bound::Included(start),
                std::ops::Bound::Excluded(end),
            ))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect(),
        )
    }

    #[cfg(test)]
    fn floor(&self) -> i64 {
        self.lock().floor
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.lock().bytes
    }
}

impl Held {
    fn insert(&mut self, table: Table, key: Vec<u8>, value: Vec<u8>) {
        let Some(partition) = partition_of(&key) else {
            return;
        };
        let added = row_bytes(&key, &value);
        let rows = self.partitions.entry((table, partition)).or_default();
        if let Some(old) = rows.insert(Slice::from(key.as_slice()), Slice::from(value.as_slice())) {
            self.bytes = self.bytes.saturating_sub(row_bytes(&key, &old));
        }
        self.bytes += added;
    }

    fn remove(&mut self, table: Table, key: &[u8]) {
        let Some(partition) = partition_of(key) else {
            return;
        };
        let Some(rows) = self.partitions.get_mut(&(table, partition)) else {
            return;
        };
        if let Some(old) = rows.remove(key) {
            self.bytes = self.bytes.saturating_sub(row_bytes(key, &old));
        }
        if rows.is_empty() {
            self.partitions.remove(&(table, partition));
        }
    }

    /// Holds only the rows stamped at or after `floor` from now on.
    fn raise(&mut self, floor: i64) {
        if floor <= self.floor {
            return;
        }
        self.floor = floor;
        let mut freed = 0;
        self.partitions.retain(|(_, partition), rows| {
            let older = rows.split_off(before_key(partition, floor).as_slice());
            freed += older
                .iter()
                .map(|(key, value)| row_bytes(key, value))
                .sum::<usize>();
            !rows.is_empty()
        });
        self.bytes = self.bytes.saturating_sub(freed);
    }

    fn forget(&mut self, now: i64) {
        self.partitions.clear();
        self.bytes = 0;
        // Rows stamped up to ten minutes ahead are accepted: none of the failed commit's
        // can lie past that.
        let ahead = now + max_ahead();
        self.floor = self
            .floor
            .max(ahead)
            .max(self.future_until.saturating_add(1));
    }
}

/// How far past the clock a row may be stamped (and the clock step back).
fn max_ahead() -> i64 {
    MAX_FUTURE_SKEW.num_milliseconds() + CLOCK_MARGIN_MILLIS
}

/// The rows of `rows` and `kept` a commit writes, for [`RecentRows::gather`].
pub(crate) fn written<'a>(rows: &'a [Rows], kept: &'a Rows) -> Vec<&'a (Table, Vec<u8>, Vec<u8>)> {
    rows.iter()
        .flatten()
        .chain(kept.iter())
        .filter(|(table, _, _)| holds(*table))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::bucket::BucketCount;
    use crate::domain::event::Impression;
    use crate::domain::ids::{AdId, AdvertiserId, CampaignId, CampaignKey, ImpressionId, UserId};
    use crate::domain::partition::EventPartition;
    use crate::domain::slices::Span;
    use crate::domain::time::{Day, EventTime};
    use crate::domain::user_data::UserData;
    use crate::store::embedded::slices::span_range;
    use crate::store::embedded::{EmbeddedStore, Fsync};
    use crate::store::{EventStore, SliceStore};
    use chrono::{DateTime, TimeDelta, Utc};
    use uuid::Uuid;

    const NOW: i64 = 1_790_000_000_000;

    fn key(partition: u8, at: i64, id: u8) -> Vec<u8> {
        let mut key = vec![partition; PARTITION_LEN];
        key.extend_from_slice(&keys::ordered_i64(!at));
        key.extend_from_slice(&[id; 16]);
        key
    }

    fn row(table: Table, partition: u8, at: i64, id: u8) -> (Table, Vec<u8>, Vec<u8>) {
        (table, key(partition, at, id), vec![id; 8])
    }

    fn commit(recent: &RecentRows, removals: &[(Table, Vec<u8>)], rows: &Rows, now: i64) {
        let written: Vec<_> = rows.iter().collect();
        let changes = recent.gather(removals, &written, now);
        recent.apply(changes, now);
    }

    /// The times of the rows held of `partition` stamped in `from..to`, newest first, if the
    /// floor lets them answer.
    fn times(
        recent: &RecentRows,
        table: Table,
        partition: u8,
        from: i64,
        to: i64,
    ) -> Option<Vec<i64>> {
        let start = key(partition, to - 1, 0);
        let end = key(partition, from - 1, 0);
        let rows = recent.range(table, from, &start, &end)?;
        Some(rows.iter().filter_map(|(key, _)| key_millis(key)).collect())
    }

    #[test]
    fn rows_from_the_floor_on_answer_and_reads_reaching_before_it_do_not() {
        let recent = RecentRows::new(NOW, None);
        let floor = NOW + CLOCK_MARGIN_MILLIS;
        assert_eq!(recent.floor(), floor);
        let rows = vec![
            row(Table::ImpressionSummary, 1, floor - 1, 1),
            row(Table::ImpressionSummary, 1, floor, 2),
            row(Table::ImpressionSummary, 1, floor + 2_000, 3),
            row(Table::ImpressionSummary, 2, floor + 1_000, 4),
            row(Table::Click, 1, floor + 500, 5),
            row(Table::Impression, 1, floor + 500, 6),
        ];
        commit(&recent, &[], &rows, NOW);
        let summaries = times(&recent, Table::ImpressionSummary, 1, floor, floor + 10_000);
        assert_eq!(summaries, Some(vec![floor + 2_000, floor]));
        assert_eq!(
            times(
                &recent,
                Table::ImpressionSummary,
                1,
                floor + 1,
                floor + 2_000
            ),
            Some(vec![]),
            "the range's ends hold"
        );
        assert_eq!(
            times(&recent, Table::ImpressionSummary, 2, floor, floor + 10_000),
            Some(vec![floor + 1_000])
        );
        assert_eq!(
            times(&recent, Table::Click, 1, floor, floor + 10_000),
            Some(vec![floor + 500])
        );
        assert_eq!(
            times(
                &recent,
                Table::ImpressionSummary,
                1,
                floor - 1,
                floor + 10_000
            ),
            None,
            "the row before the floor is the engine's to answer"
        );
        assert_eq!(
            times(&recent, Table::Impression, 1, floor, floor + 10_000),
            None,
            "full impressions are not held"
        );
        assert_eq!(
            times(&recent, Table::ViewReport, 3, floor, floor + 10_000),
            Some(vec![]),
            "a partition with nothing from the floor on holds nothing"
        );
    }

    #[test]
    fn removals_and_new_values_are_held_as_the_engine_keeps_them() {
        let recent = RecentRows::new(NOW, None);
        let at = NOW + CLOCK_MARGIN_MILLIS + 1_000;
        commit(&recent, &[], &vec![row(Table::Click, 1, at, 1)], NOW);
        let mut again = row(Table::Click, 1, at, 1);
        again.2 = vec![9; 20];
        commit(&recent, &[], &vec![again], NOW);
        let start = key(1, at, 0);
        let end = key(1, at - 1, 0);
        let held = recent.range(Table::Click, at, &start, &end).expect("held");
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].1.as_ref(), [9; 20].as_slice());
        assert_eq!(recent.bytes(), row_bytes(&key(1, at, 1), &[9; 20]));
        commit(&recent, &[(Table::Click, key(1, at, 1))], &Vec::new(), NOW);
        assert_eq!(recent.range(Table::Click, at, &start, &end), Some(vec![]));
        assert_eq!(recent.bytes(), 0);
    }

    #[test]
    fn the_floor_follows_the_clock_and_the_memory_bound() {
        let recent = RecentRows::new(NOW, None);
        let floor = NOW + CLOCK_MARGIN_MILLIS;
        let rows: Rows = (0..20)
            .map(|n| row(Table::ImpressionSummary, 1, floor + n * 1_000, n as u8))
            .collect();
        commit(&recent, &[], &rows, NOW);
        let later = floor + 15_000;
        commit(&recent, &[], &Vec::new(), later);
        assert_eq!(recent.floor(), later - HELD_MILLIS);
        assert_eq!(
            times(
                &recent,
                Table::ImpressionSummary,
                1,
                later - HELD_MILLIS,
                later + 60_000
            ),
            Some((5..20).rev().map(|n| floor + n * 1_000).collect::<Vec<_>>())
        );
        assert_eq!(recent.bytes(), 15 * row_bytes(&key(1, 0, 0), &[0; 8]));

        // A burst far larger than the bound keeps the newest seconds that fit.
        let big: Rows = (0..40)
            .map(|n| {
                let mut row = row(Table::ViewReport, 2, later + n * 1_000, 1);
                row.2 = vec![0; 1024 * 1024];
                row
            })
            .collect();
        commit(&recent, &[], &big, later);
        assert!(
            recent.bytes() <= HELD_BYTES,
            "{} bytes held",
            recent.bytes()
        );
        let floor = recent.floor();
        assert!(floor > later);
        let held = times(&recent, Table::ViewReport, 2, floor, later + 60_000).expect("held");
        assert!(held.len() >= 20 && held.iter().all(|at| *at >= floor));
    }

    #[test]
    fn a_key_removed_and_written_in_one_commit_leaves_nothing_to_trust() {
        let recent = RecentRows::new(NOW, None);
        let at = NOW + CLOCK_MARGIN_MILLIS + 1_000;
        let rows = vec![row(Table::Click, 1, at, 1)];
        commit(&recent, &[(Table::Click, key(1, at, 1))], &rows, NOW);
        assert!(recent.floor() > NOW + MAX_FUTURE_SKEW.num_milliseconds());
        assert_eq!(recent.bytes(), 0);
    }

    #[test]
    fn rows_stamped_ahead_of_the_clock_are_recorded_and_a_later_floor_starts_past_them() {
        let recent = RecentRows::new(NOW, None);
        let ahead = NOW + 60_000;
        let rows = [row(Table::Click, 1, ahead, 1), row(Table::Click, 1, NOW, 2)];
        let written: Vec<_> = rows.iter().collect();
        let changes = recent.gather(&[], &written, NOW);
        let record = changes.future_row().expect("a row ahead of the clock");
        assert_eq!(record.1, FUTURE_KEY.as_bytes());
        assert_eq!(record.2, ahead.to_be_bytes());
        recent.apply(changes, NOW);
        let changes = recent.gather(&[], &written, NOW + 1);
        assert!(changes.future_row().is_none(), "recorded once");
        let restarted = RecentRows::new(NOW + 1_000, Some(ahead));
        assert_eq!(restarted.floor(), ahead + 1);
    }

    fn impression(id: u128, at: DateTime<Utc>) -> Impression {
        let uuid = Uuid::from_u128;
        Impression {
            impression_id: ImpressionId::new(uuid(id)),
            campaign: CampaignKey {
                advertiser_id: AdvertiserId::new(uuid(1)),
                campaign_id: CampaignId::new(uuid(2)),
            },
            ad_id: AdId::new(uuid(3)),
            user_id: UserId::new(uuid(4)),
            timestamp: EventTime::from_stored(at),
            user_ip: None,
            user_data: UserData::default(),
            user_agent: None,
            invalid: None,
            pixel_arrival: None,
        }
    }

    /// Through the store: what its reads of the newest seconds answer from memory is what the
    /// engine holds, after writes and a removal; opened again, it holds nothing from before.
    #[tokio::test]
    async fn the_store_answers_the_newest_seconds_as_its_engine_does() {
        let folder = tempfile::tempdir().expect("temporary folder");
        // Past the floor of a store opened now.
        let from = Utc::now() + TimeDelta::seconds(8);
        let partition = |at: DateTime<Utc>| EventPartition {
            campaign: impression(0, at).campaign,
            day: Day::new(at.date_naive()),
            bucket: BucketCount::ONE.ids().next().expect("bucket"),
        };
        let events: Vec<Impression> = (0..50)
            .map(|n| impression(100 + n, from + TimeDelta::milliseconds(n as i64 * 37)))
            .collect();
        let partition = partition(from);
        let span = Span {
            from,
            to: from + TimeDelta::seconds(10),
        };
        let engine = |store: &EmbeddedStore| {
            let (start, end) = span_range(&partition, span);
            let store = store.clone();
            async move {
                store
                    .scan_range(Table::ImpressionSummary, start, Some(end), "test")
                    .await
                    .expect("engine")
            }
        };
        {
            let store = EmbeddedStore::open_for_test(folder.path(), Fsync::Never);
            store
                .write_impressions(&partition, &events)
                .await
                .expect("written");
            let (start, end) = span_range(&partition, span);
            let held = store
                .recent
                .range(
                    Table::ImpressionSummary,
                    from.timestamp_millis(),
                    &start,
                    &end,
                )
                .expect("the newest seconds are held");
            assert_eq!(held.len(), 50);
            assert_eq!(held, engine(&store).await);
            let read = store
                .read_impression_summaries_between(&partition, span)
                .await
                .expect("read");
            assert_eq!(read.len(), 50);

            let erased = keys::event_key(
                &partition,
                events[7].timestamp.instant(),
                events[7].impression_id,
            );
            store
                .committer
                .commit_replacing("test", vec![(Table::ImpressionSummary, erased)], Vec::new())
                .await
                .expect("removed");
            let held = store
                .recent
                .range(
                    Table::ImpressionSummary,
                    from.timestamp_millis(),
                    &start,
                    &end,
                )
                .expect("held");
            assert_eq!(held.len(), 49);
            assert_eq!(held, engine(&store).await);
        }
        let store = EmbeddedStore::open_for_test(folder.path(), Fsync::Never);
        let latest = events.last().expect("events").timestamp.instant();
        assert!(
            store.recent.floor() > latest.timestamp_millis(),
            "rows stored ahead of the clock before the restart lie below the new floor"
        );
        assert_eq!(engine(&store).await.len(), 49);
    }
}
