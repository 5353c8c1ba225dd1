//! The newest seconds of impressions, clicks and view reports, held in memory as the commit
//! thread writes them (docs/DESIGN.md, "The embedded store"). A summary of an open day reads
//! its newest seconds raw at every poll; answered from here, they cost no engine reads,
//! however many segments the engine's tables hold after a busy hour.
//!
//! What is held mirrors the engine exactly from a floor on: every row of a held table whose
//! event time is at or after its campaign's floor is here, as the engine holds it, and a read
//! of a time range starting at or after that floor is answered from here or not at all.

use super::engine::{KeyValues, Table};
use super::keys::{self, CAMPAIGN_LEN, PARTITION_LEN};
use crate::domain::time::MAX_FUTURE_SKEW;
use fjall::Slice;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

/// How far back from now rows are held, by event time: a poll reads raw the last 1 to 3
/// seconds, and again a piece that a write reaching a second or two back changed. Longer
/// costs memory that ingestion at full speed fills.
const HELD_MILLIS: i64 = 5_000;
/// The floor moves at most this often: moving it walks every partition held.
const MOVE_EVERY_MILLIS: i64 = 1_000;
/// The memory held rows may take; past it the campaign holding the most gives its rows up,
/// and its reads go to the engine until the floor passes them (a burst of one campaign's
/// events, stamped now or minutes ahead, costs that campaign speed, and nobody memory).
const HELD_BYTES: usize = 64 * 1024 * 1024;
/// What one held row is taken to cost besides its key and value: its entry in a tree node
/// (two slices' headers), the slices' heap allocations and the allocator's share.
const ROW_OVERHEAD: usize = 128;
/// What a partition's tree costs with a single row: a node of eleven entries and its map
/// entry.
const PARTITION_OVERHEAD: usize = 1_024;
/// How far the clock may step back across a restart (the seals' margin for clocks).
const CLOCK_MARGIN_MILLIS: i64 = 5_000;

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

fn partition_of(key: &[u8]) -> Option<[u8; PARTITION_LEN]> {
    key.get(..PARTITION_LEN)?.try_into().ok()
}

fn campaign_of(partition: &[u8; PARTITION_LEN]) -> [u8; CAMPAIGN_LEN] {
    let mut campaign = [0; CAMPAIGN_LEN];
    campaign.copy_from_slice(&partition[..CAMPAIGN_LEN]);
    campaign
}

fn row_bytes(key: &[u8], value: &[u8]) -> usize {
    key.len() + value.len() + ROW_OVERHEAD
}

/// The first key of a partition's rows stamped before `millis` (events are newest first).
fn before_key(partition: &[u8; PARTITION_LEN], millis: i64) -> Vec<u8> {
    let mut key = partition.to_vec();
    key.extend_from_slice(&keys::ordered_i64(!(millis.saturating_sub(1))));
    key
}

/// How far past the clock a stored row may be stamped, and the clock step back with it.
fn max_ahead() -> i64 {
    MAX_FUTURE_SKEW.num_milliseconds() + CLOCK_MARGIN_MILLIS
}

/// The rows of the held tables from the floor on.
pub(crate) struct RecentRows {
    held: Mutex<Held>,
}

struct Held {
    /// Every held row stamped at or after this is here, unless its campaign's own floor is
    /// later.
    floor: i64,
    campaigns: HashMap<[u8; CAMPAIGN_LEN], CampaignRows>,
    bytes: usize,
}

struct CampaignRows {
    /// Past the rows it gave up when it held the most memory.
    floor: i64,
    /// By table and partition, in key order, as the engine keeps them.
    partitions: HashMap<(Table, [u8; PARTITION_LEN]), BTreeMap<Slice, Slice>>,
    bytes: usize,
}

/// What a commit changes of the held tables, gathered before the commit and applied once it
/// succeeded.
#[derive(Default)]
pub(crate) struct HeldChanges {
    removed: Vec<(Table, Vec<u8>)>,
    written: Vec<(Table, Slice, Slice)>,
    /// A key both removed and written in the commit (which one the engine keeps is not for
    /// the mirror to guess), or a held key that does not decode: nothing held can be trusted.
    unknown: bool,
}

impl RecentRows {
    /// Holds nothing yet, for a store opened at `now` (milliseconds). A folder created now
    /// holds no rows, so its floor is now; rows stored before may be stamped up to ten
    /// minutes ahead of the clock of their write, so an older folder's floor starts past
    /// them.
    pub(crate) fn new(now: i64, created: bool) -> Self {
        Self {
            held: Mutex::new(Held {
                floor: if created { now } else { now + max_ahead() },
                campaigns: HashMap::new(),
                bytes: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What a commit of `removals` and `written` will change of the held rows, and its rows
    /// as the engine takes them: the ones held share their bytes with what is held, so
    /// holding them costs no copy.
    pub(crate) fn gather(
        &self,
        removals: &[(Table, Vec<u8>)],
        written: impl Iterator<Item = (Table, Vec<u8>, Vec<u8>)>,
    ) -> (Vec<(Table, Slice, Slice)>, HeldChanges) {
        let floor = self.lock().floor;
        let mut changes = HeldChanges::default();
        for (table, key) in removals {
            if holds(*table) {
                changes.removed.push((*table, key.clone()));
            }
        }
        let mut rows = Vec::with_capacity(written.size_hint().0);
        for (table, key, value) in written {
            let (key_slice, value_slice) = (Slice::from(key), Slice::from(value));
            if holds(table) {
                match key_millis(&key_slice) {
                    Some(at) if at >= floor => {
                        changes
                            .written
                            .push((table, key_slice.clone(), value_slice.clone()));
                    }
                    Some(_) => {}
                    None => changes.unknown = true,
                }
            }
            rows.push((table, key_slice, value_slice));
        }
        if !changes.removed.is_empty() && !changes.written.is_empty() {
            let removed: HashSet<(Table, &[u8])> = changes
                .removed
                .iter()
                .map(|(table, key)| (*table, key.as_slice()))
                .collect();
            changes.unknown |= changes
                .written
                .iter()
                .any(|(table, key, _)| removed.contains(&(*table, key.as_ref())));
        }
        (rows, changes)
    }

    /// Applies what a commit that succeeded changed; `now` moves the floor along.
    pub(crate) fn apply(&self, changes: HeldChanges, now: i64) {
        let mut held = self.lock();
        if changes.unknown {
            held.forget(now);
            return;
        }
        for (table, key) in changes.removed {
            held.remove(table, &key);
        }
        for (table, key, value) in changes.written {
            held.insert(table, key, value);
        }
        let passed = now.saturating_sub(HELD_MILLIS);
        if passed >= held.floor.saturating_add(MOVE_EVERY_MILLIS) {
            held.raise(passed);
        }
        held.bound();
    }

    /// A commit failed: what the engine holds now is not known, so nothing held answers
    /// until the rows written from here on are all that a read can meet.
    pub(crate) fn forget(&self, now: i64) {
        self.lock().forget(now);
    }

    /// The rows of `table` in `start..end` within one partition, whose event times are all
    /// at or after `from`; `None` when rows before the campaign's floor may lie there (the
    /// engine answers).
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
        let campaign = held.campaigns.get(&campaign_of(&partition));
        if from < held.floor_of(campaign) {
            return None;
        }
        let Some(rows) = campaign.and_then(|rows| rows.partitions.get(&(table, partition))) else {
            return Some(Vec::new());
        };
        if start > end {
            return Some(Vec::new());
        }
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
    fn floor_of(&self, campaign: Option<&CampaignRows>) -> i64 {
        campaign.map_or(self.floor, |rows| rows.floor.max(self.floor))
    }

    fn insert(&mut self, table: Table, key: Slice, value: Slice) {
        let (Some(partition), Some(at)) = (partition_of(&key), key_millis(&key)) else {
            return;
        };
        let campaign = campaign_of(&partition);
        // Gathered under an older floor, perhaps.
        if at < self.floor_of(self.campaigns.get(&campaign)) {
            return;
        }
        let rows = self.campaigns.entry(campaign).or_insert(CampaignRows {
            floor: i64::MIN,
            partitions: HashMap::new(),
            bytes: 0,
        });
        let before = rows.bytes;
        rows.insert((table, partition), key, value);
        self.bytes = (self.bytes + rows.bytes).saturating_sub(before);
    }

    fn remove(&mut self, table: Table, key: &[u8]) {
        let Some(partition) = partition_of(key) else {
            return;
        };
        let campaign = campaign_of(&partition);
        let Some(rows) = self.campaigns.get_mut(&campaign) else {
            return;
        };
        let before = rows.bytes;
        rows.remove((table, partition), key);
        self.bytes = (self.bytes + rows.bytes).saturating_sub(before);
        if rows.partitions.is_empty() && rows.floor <= self.floor {
            self.campaigns.remove(&campaign);
        }
    }

    /// Holds only the rows stamped at or after `floor` from now on.
    fn raise(&mut self, floor: i64) {
        if floor <= self.floor {
            return;
        }
        self.floor = floor;
        self.campaigns.retain(|_, rows| {
            rows.drop_before(floor);
            !rows.partitions.is_empty() || rows.floor > floor
        });
        self.bytes = self.campaigns.values().map(|rows| rows.bytes).sum();
    }

    /// Past [`HELD_BYTES`], the campaigns holding the most give their rows up, one after
    /// another.
    fn bound(&mut self) {
        while self.bytes > HELD_BYTES {
            let Some(rows) = self
                .campaigns
                .values_mut()
                .max_by_key(|rows| rows.bytes)
                .filter(|rows| rows.bytes > 0)
            else {
                // Nothing left to give up: the count had drifted from what is held.
                self.bytes = self.campaigns.values().map(|rows| rows.bytes).sum();
                return;
            };
            let newest = rows.newest().unwrap_or(i64::MIN);
            rows.floor = rows.floor.max(newest.saturating_add(1));
            self.bytes = self.bytes.saturating_sub(rows.bytes);
            rows.partitions.clear();
            rows.bytes = 0;
        }
    }

    fn forget(&mut self, now: i64) {
        self.campaigns.clear();
        self.bytes = 0;
        // Rows are stamped at most ten minutes ahead: none of the commit's lies past that.
        self.floor = self.floor.max(now.saturating_add(max_ahead()));
    }
}

impl CampaignRows {
    fn insert(&mut self, slot: (Table, [u8; PARTITION_LEN]), key: Slice, value: Slice) {
        let bytes = &mut self.bytes;
        let rows = self.partitions.entry(slot).or_insert_with(|| {
            *bytes += PARTITION_OVERHEAD;
            BTreeMap::new()
        });
        let added = row_bytes(&key, &value);
        if let Some(old) = rows.insert(key.clone(), value) {
            *bytes = bytes.saturating_sub(row_bytes(&key, &old));
        }
        *bytes += added;
    }

    fn remove(&mut self, slot: (Table, [u8; PARTITION_LEN]), key: &[u8]) {
        let Some(rows) = self.partitions.get_mut(&slot) else {
            return;
        };
        if let Some(old) = rows.remove(key) {
            self.bytes = self.bytes.saturating_sub(row_bytes(key, &old));
        }
        if rows.is_empty() {
            self.partitions.remove(&slot);
            self.bytes = self.bytes.saturating_sub(PARTITION_OVERHEAD);
        }
    }

    fn drop_before(&mut self, floor: i64) {
        let mut freed = 0;
        self.partitions.retain(|(_, partition), rows| {
            let older = rows.split_off(before_key(partition, floor).as_slice());
            freed += older
                .iter()
                .map(|(key, value)| row_bytes(key, value))
                .sum::<usize>();
            if rows.is_empty() {
                freed += PARTITION_OVERHEAD;
            }
            !rows.is_empty()
        });
        self.bytes = self.bytes.saturating_sub(freed);
    }

    /// The time of its newest row.
    fn newest(&self) -> Option<i64> {
        self.partitions
            .values()
            .filter_map(|rows| rows.keys().next().and_then(|key| key_millis(key)))
            .max()
    }
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
    use crate::store::embedded::engine::Rows;
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
        let (_, changes) = recent.gather(removals, rows.iter().cloned());
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
        assert_eq!(
            RecentRows::new(NOW, true).floor(),
            NOW,
            "a new folder holds nothing"
        );
        let recent = RecentRows::new(NOW, false);
        let floor = recent.floor();
        assert_eq!(
            floor,
            NOW + max_ahead(),
            "past rows stored ahead of the clock"
        );
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
        let (start, end) = (key(1, floor, 0), key(1, floor + 5_000, 0));
        assert_eq!(
            recent.range(Table::ImpressionSummary, floor, &start, &end),
            Some(vec![]),
            "a range ending before it starts holds nothing"
        );
    }

    #[test]
    fn removals_and_new_values_are_held_as_the_engine_keeps_them() {
        let recent = RecentRows::new(NOW, true);
        let at = NOW + 1_000;
        commit(&recent, &[], &vec![row(Table::Click, 1, at, 1)], NOW);
        let mut again = row(Table::Click, 1, at, 1);
        again.2 = vec![9; 20];
        commit(&recent, &[], &vec![again], NOW);
        let start = key(1, at, 0);
        let end = key(1, at - 1, 0);
        let held = recent.range(Table::Click, at, &start, &end).expect("held");
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].1.as_ref(), [9; 20].as_slice());
        assert_eq!(
            recent.bytes(),
            row_bytes(&key(1, at, 1), &[9; 20]) + PARTITION_OVERHEAD
        );
        commit(&recent, &[(Table::Click, key(1, at, 1))], &Vec::new(), NOW);
        assert_eq!(recent.range(Table::Click, at, &start, &end), Some(vec![]));
        assert_eq!(recent.bytes(), 0);
    }

    #[test]
    fn the_floor_follows_the_clock() {
        let recent = RecentRows::new(NOW, true);
        let rows: Rows = (0..20)
            .map(|n| row(Table::ImpressionSummary, 1, NOW + n * 1_000, n as u8))
            .collect();
        commit(&recent, &[], &rows, NOW);
        let later = NOW + 5_000 + HELD_MILLIS;
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
            Some((5..20).rev().map(|n| NOW + n * 1_000).collect::<Vec<_>>())
        );
        assert_eq!(
            recent.bytes(),
            15 * row_bytes(&key(1, 0, 0), &[0; 8]) + PARTITION_OVERHEAD
        );
        commit(&recent, &[], &Vec::new(), later + 60_000);
        assert_eq!(recent.bytes(), 0, "every row passed");
    }

    #[test]
    fn past_the_memory_bound_the_campaign_holding_the_most_gives_way() {
        let recent = RecentRows::new(NOW, true);
        commit(
            &recent,
            &[],
            &vec![row(Table::Click, 1, NOW + 1_000, 1)],
            NOW,
        );
        // Another campaign's burst, stamped minutes ahead, far past the bound.
        let ahead = NOW + 9 * 60_000;
        let burst: Rows = (0..80)
            .map(|n| {
                let mut row = row(Table::ViewReport, 2, ahead + n, 1);
                row.2 = vec![0; 1024 * 1024];
                row
            })
            .collect();
        commit(&recent, &[], &burst, NOW);
        assert!(
            recent.bytes() <= HELD_BYTES,
            "{} bytes held",
            recent.bytes()
        );
        assert_eq!(
            times(&recent, Table::ViewReport, 2, NOW, ahead + 60_000),
            None,
            "the burst's campaign reads the engine"
        );
        assert_eq!(
            times(&recent, Table::Click, 1, NOW, NOW + 60_000),
            Some(vec![NOW + 1_000]),
            "the other keeps its rows"
        );
        // Its new rows, past what it gave up, are held again.
        commit(
            &recent,
            &[],
            &vec![row(Table::ViewReport, 2, ahead + 100, 2)],
            NOW,
        );
        assert_eq!(
            times(&recent, Table::ViewReport, 2, ahead + 80, ahead + 60_000),
            Some(vec![ahead + 100])
        );
    }

    #[test]
    fn a_key_removed_and_written_in_one_commit_leaves_nothing_to_trust() {
        let recent = RecentRows::new(NOW, true);
        let at = NOW + 1_000;
        let rows = vec![row(Table::Click, 1, at, 1)];
        commit(&recent, &[(Table::Click, key(1, at, 1))], &rows, NOW);
        assert!(recent.floor() > NOW + MAX_FUTURE_SKEW.num_milliseconds());
        assert_eq!(recent.bytes(), 0);
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
            ip_is_viewers: true,
        }
    }

    /// Through the store: what its reads of the newest seconds answer from memory is what the
    /// engine holds, after writes and a removal; opened again, it holds nothing from before.
    #[tokio::test]
    async fn the_store_answers_the_newest_seconds_as_its_engine_does() {
        let folder = tempfile::tempdir().expect("temporary folder");
        // A new folder's floor is the moment it was opened; these are stamped ahead of it, as
        // the rows a restart must not take for held are.
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
            let held = || {
                store
                    .recent
                    .range(
                        Table::ImpressionSummary,
                        from.timestamp_millis(),
                        &start,
                        &end,
                    )
                    .expect("the newest seconds are held")
            };
            assert_eq!(held().len(), 50);
            assert_eq!(held(), engine(&store).await);
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
            assert_eq!(held().len(), 49);
            assert_eq!(held(), engine(&store).await);
        }
        let store = EmbeddedStore::open_for_test(folder.path(), Fsync::Never);
        let latest = events.last().expect("events").timestamp.instant();
        assert!(
            store.recent.floor() > latest.timestamp_millis(),
            "rows stored ahead of the clock before the restart lie below the new floor"
        );
        let (start, end) = span_range(&partition, span);
        let from = from.timestamp_millis();
        assert_eq!(
            store
                .recent
                .range(Table::ImpressionSummary, from, &start, &end),
            None
        );
        let read = store
            .read_impression_summaries_between(&partition, span)
            .await
            .expect("read from the engine");
        assert_eq!(read.len(), 49);
    }
}
