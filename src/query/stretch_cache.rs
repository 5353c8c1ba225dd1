//! What summaries read raw of open days, kept by 10-second piece (docs/DESIGN.md, "Open days
//! from closed slices"): the next summary of the day reads raw only the pieces a write may
//! have changed since, and the seconds that were not over yet, so its cost follows what
//! changed since the last summary rather than the minutes of the open stretch. Only over a
//! store no other process writes, whose change log (`SliceStore::changes`) says from which
//! event time on each write could change the counts.
//!
//! Every read raw counts an id once, at its earliest copy among the rows it read; kept pieces
//! were read apart, so the copies each read met with several timestamps are kept beside
//! them, and later reads count a copy only where the earliest known one lies. A copy written
//! after a piece was read changes the log from its earliest copy on (the store learns the
//! id's copies while writing), so the piece is read again with it.

use super::aggregate::BillableWindow;
use super::aggregate::SliceCounts;
use super::span::SpanAggregate;
use crate::domain::ids::{CampaignKey, ImpressionId};
use crate::domain::partition::EventPartition;
use crate::domain::sketch::UniqueSketch;
use crate::domain::slices::{Piece, Span, piece_of, slice_of_piece};
use crate::domain::time::Day;
use crate::domain::view::ViewWindow;
use crate::store::{ChangeLog, CopyRow};
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// A piece is kept once it ended this long ago: the events stamped "now" that reach it late
/// would only throw it away.
const SETTLE: TimeDelta = TimeDelta::seconds(2);
/// Campaign-days kept; past this, the one read least recently goes.
const DAYS_KEPT: usize = 1_024;
/// The memory all kept pieces may take (their counts and sketches, estimated); past it, the
/// days read least recently go.
const KEPT_BYTES: usize = 64 * 1024 * 1024;
/// (piece, ad) entries kept of one campaign-day: two hours of pieces of 30 ads. A stretch
/// longer than that (the aggregator far behind) or wider is read raw beyond it.
const ENTRIES_PER_DAY: usize = 720 * 30;
/// Copies of ids with several timestamps kept of one campaign-day; a day with more (a client
/// re-sending ids at other times) keeps no pieces and is read raw whole.
const COPIES_PER_DAY: usize = 100_000;

/// What kept pieces were read with: read otherwise, they would not count the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReadWith {
    pub(crate) partitions: Vec<EventPartition>,
    pub(crate) window: BillableWindow,
    pub(crate) view_window: ViewWindow,
}

/// The pieces kept of open days, by campaign and UTC day.
pub(crate) struct StretchCache {
    changes: Arc<ChangeLog>,
    days: Mutex<Days>,
}

#[derive(Default)]
struct Days {
    by_day: HashMap<(CampaignKey, Day), KeptDay>,
    /// Plans made, so that each day knows when it was last read.
    reads: u64,
    /// The estimated memory of every kept piece.
    bytes: usize,
}

struct KeptDay {
    read_with: ReadWith,
    pieces: BTreeMap<Piece, KeptPiece>,
    entries: usize,
    bytes: usize,
    /// Every copy of the ids that reads of the day met with more than one timestamp.
    copies: HashMap<ImpressionId, Vec<CopyRow>>,
    copy_count: usize,
    last_read: u64,
}

impl KeptDay {
    fn new(read_with: ReadWith) -> Self {
        Self {
            read_with,
            pieces: BTreeMap::new(),
            entries: 0,
            bytes: 0,
            copies: HashMap::new(),
            copy_count: 0,
            last_read: 0,
        }
    }
}

struct KeptPiece {
    /// The change log's sequence number when the read behind it began.
    sequence: u64,
    /// Its counts and users, by piece and ad.
    aggregate: SpanAggregate,
    bytes: usize,
}

/// About what `aggregate` holds in memory.
fn bytes_of(aggregate: &SpanAggregate) -> usize {
    const ENTRY: usize =
        std::mem::size_of::<SliceCounts>() + std::mem::size_of::<UniqueSketch>() + 64;
    aggregate.counts.len() * ENTRY
        + aggregate
            .users
            .values()
            .map(UniqueSketch::heap_bytes)
            .sum::<usize>()
}

/// How one summary reads a campaign-day's raw stretches with what is kept.
#[derive(Debug, Default)]
pub(crate) struct StretchPlan {
    sequence: u64,
    /// The kept pieces' counts and users, by slice and ad.
    pub(crate) kept: SpanAggregate,
    pub(crate) kept_pieces: usize,
    /// What to read raw, oldest first and apart.
    pub(crate) raw: Vec<Span>,
    /// Pieces read raw that are over and may be kept.
    to_keep: Vec<Piece>,
    /// Every copy of the ids earlier reads met with more than one timestamp.
    pub(crate) copies: Vec<CopyRow>,
}

impl StretchCache {
    pub(crate) fn new(changes: Arc<ChangeLog>) -> Self {
        Self {
            changes,
            days: Mutex::new(Days::default()),
        }
    }

    /// The sequence number a read starting now takes: taken before anything of the day is
    /// read, so whatever a write changes after it, that read did not count.
    pub(crate) fn sequence(&self) -> u64 {
        self.changes.sequence()
    }

    /// Which pieces of `stretches` (the day's runs of slices no aggregate answers for) are
    /// kept and still right, and what is left to read raw.
    pub(crate) fn plan(
        &self,
        (campaign, day, sequence): (CampaignKey, Day, u64),
        read_with: &ReadWith,
        stretches: &[Span],
        now: DateTime<Utc>,
    ) -> StretchPlan {
        let mut days = self.lock();
        let days = &mut *days;
        days.reads += 1;
        let reads = days.reads;
        let Some(kept) = days.by_day.get_mut(&(campaign, day)) else {
            return StretchPlan {
                sequence,
                raw: stretches.to_vec(),
                to_keep: over_pieces(stretches, now),
                ..StretchPlan::default()
            };
        };
        if kept.read_with != *read_with {
            days.bytes -= kept.bytes.min(days.bytes);
            *kept = KeptDay::new(read_with.clone());
        }
        kept.last_read = reads;
        let in_stretches = |piece: Piece| {
            let span = Span::of_piece(piece);
            stretches
                .iter()
                .any(|stretch| stretch.from <= span.from && span.to <= stretch.to)
        };
        let changes = &self.changes;
        let (mut entries, mut bytes) = (0, 0);
        kept.pieces.retain(|piece, held| {
            let right = in_stretches(*piece)
                && changes
                    .changed_since(campaign, held.sequence)
                    .is_none_or(|at| at >= Span::of_piece(*piece).to);
            if !right {
                entries += held.aggregate.counts.len();
                bytes += held.bytes;
            }
            right
        });
        kept.entries -= entries.min(kept.entries);
        kept.bytes -= bytes.min(kept.bytes);
        days.bytes -= bytes.min(days.bytes);
        let mut plan = StretchPlan {
            sequence,
            copies: kept.copies.values().flatten().copied().collect(),
            ..StretchPlan::default()
        };
        let mut used = BTreeSet::new();
        for piece in over_pieces(stretches, now) {
            match kept.pieces.get(&piece) {
                Some(held) => {
                    add_by_slice(&mut plan.kept, &held.aggregate);
                    used.insert(piece);
                }
                None => plan.to_keep.push(piece),
            }
        }
        plan.kept_pieces = used.len();
        plan.raw = without_pieces(stretches, used);
        plan
    }

    /// Keeps the pieces `plan` read raw that no write has changed since, from `read` (the
    /// raw stretches' counts by piece), and the copies it met.
    pub(crate) fn keep(
        &self,
        (campaign, day): (CampaignKey, Day),
        read_with: &ReadWith,
        plan: StretchPlan,
        read: &SpanAggregate,
    ) {
        let changed = self.changes.changed_since(campaign, plan.sequence);
        let still_right = |piece: Piece| changed.is_none_or(|at| at >= Span::of_piece(piece).to);
        let wanted: HashSet<Piece> = plan
            .to_keep
            .iter()
            .copied()
            .filter(|piece| still_right(*piece))
            .collect();
        let mut by_piece: HashMap<Piece, SpanAggregate> = wanted
            .iter()
            .map(|piece| (*piece, SpanAggregate::default()))
            .collect();
        for (key, counts) in &read.counts {
            if let Some(aggregate) = by_piece.get_mut(&key.0) {
                aggregate.counts.insert(*key, counts.clone());
            }
        }
        for (key, users) in &read.users {
            if let Some(aggregate) = by_piece.get_mut(&key.0) {
                aggregate.users.insert(*key, users.clone());
            }
        }
        let pieces: Vec<(Piece, SpanAggregate, usize)> = by_piece
            .into_iter()
            .map(|(piece, aggregate)| {
                let bytes = bytes_of(&aggregate);
                (piece, aggregate, bytes)
            })
            .collect();
        let mut days = self.lock();
        let days = &mut *days;
        let reads = days.reads;
        let kept = days
            .by_day
            .entry((campaign, day))
            .or_insert_with(|| KeptDay::new(read_with.clone()));
        if kept.read_with != *read_with {
            days.bytes -= kept.bytes.min(days.bytes);
            *kept = KeptDay::new(read_with.clone());
        }
        kept.last_read = reads;
        for copy in &read.read_duplicates {
            let copies = kept.copies.entry(copy.impression_id).or_default();
            if !copies.iter().any(|held| held.timestamp == copy.timestamp) {
                copies.push(*copy);
                kept.copy_count += 1;
            }
        }
        if kept.copy_count > COPIES_PER_DAY {
            days.bytes -= kept.bytes.min(days.bytes);
            days.by_day.remove(&(campaign, day));
            return;
        }
        let mut added = 0;
        for (piece, aggregate, bytes) in pieces {
            let entries = aggregate.counts.len();
            if kept.entries + entries > ENTRIES_PER_DAY || days.bytes + added + bytes > KEPT_BYTES {
                continue;
            }
            kept.entries += entries;
            kept.bytes += bytes;
            added += bytes;
            kept.pieces.insert(
                piece,
                KeptPiece {
                    sequence: plan.sequence,
                    aggregate,
                    bytes,
                },
            );
        }
        days.bytes += added;
        // Room for the next: the days read least recently go first.
        while days.by_day.len() > DAYS_KEPT || days.bytes > KEPT_BYTES * 3 / 4 {
            let Some(oldest) = days
                .by_day
                .iter()
                .filter(|(key, _)| **key != (campaign, day))
                .min_by_key(|(_, kept)| kept.last_read)
                .map(|(key, _)| *key)
            else {
                break;
            };
            if let Some(gone) = days.by_day.remove(&oldest) {
                days.bytes -= gone.bytes.min(days.bytes);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Days> {
        self.days
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The pieces of `stretches` that ended at least [`SETTLE`] before `now`, oldest first.
fn over_pieces(stretches: &[Span], now: DateTime<Utc>) -> Vec<Piece> {
    let settled = now - SETTLE;
    stretches
        .iter()
        .flat_map(|stretch| piece_of(stretch.from)..piece_of(stretch.to.min(settled)))
        .collect()
}

/// `stretches` less the time of `pieces`, oldest first and apart.
fn without_pieces(stretches: &[Span], pieces: BTreeSet<Piece>) -> Vec<Span> {
    let mut raw = Vec::new();
    for stretch in stretches {
        let mut from = stretch.from;
        for piece in pieces.range(piece_of(stretch.from)..piece_of(stretch.to)) {
            let span = Span::of_piece(*piece);
            if span.to > stretch.to {
                break;
            }
            if from < span.from {
                raw.push(Span {
                    from,
                    to: span.from,
                });
            }
            from = span.to;
        }
        if from < stretch.to {
            raw.push(Span {
                from,
                to: stretch.to,
            });
        }
    }
    raw
}

/// Adds a piece's counts and users to `into`, by slice.
fn add_by_slice(into: &mut SpanAggregate, piece: &SpanAggregate) {
    for ((piece, ad), counts) in &piece.counts {
        into.counts
            .entry((slice_of_piece(*piece), *ad))
            .or_default()
            .add(counts);
    }
    for ((piece, ad), users) in &piece.users {
        into.users
            .entry((slice_of_piece(*piece), *ad))
            .or_default()
            .merge(users);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{AdId, AdvertiserId, CampaignId};
    use crate::domain::time::EventTime;
    use uuid::Uuid;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().expect("time")
    }

    fn copy(id: u128, stored_at: &str) -> CopyRow {
        CopyRow {
            impression_id: ImpressionId::new(Uuid::from_u128(id)),
            timestamp: EventTime::from_stored(at(stored_at)),
            invalid: None,
        }
    }

    fn campaign() -> CampaignKey {
        CampaignKey {
            advertiser_id: AdvertiserId::new(Uuid::from_u128(1)),
            campaign_id: CampaignId::new(Uuid::from_u128(2)),
        }
    }

    fn read_with() -> ReadWith {
        ReadWith {
            partitions: Vec::new(),
            window: BillableWindow::DEFAULT,
            view_window: ViewWindow::default(),
        }
    }

    /// A read of `pieces` with one impression of one ad in each.
    fn read_of(pieces: impl IntoIterator<Item = Piece>) -> SpanAggregate {
        let ad = AdId::new(Uuid::from_u128(3));
        let mut read = SpanAggregate::default();
        for piece in pieces {
            read.counts.insert(
                (piece, ad),
                SliceCounts {
                    impressions: 1,
                    ..SliceCounts::default()
                },
            );
        }
        read
    }

    #[test]
    fn kept_pieces_answer_until_a_write_reaches_back_to_them() {
        let changes = Arc::new(ChangeLog::new());
        let cache = StretchCache::new(Arc::clone(&changes));
        let day = Day::new("2026-11-29".parse().expect("date"));
        let stretch = [Span {
            from: at("2026-11-29T10:00:00Z"),
            to: at("2026-11-29T11:00:00Z"),
        }];
        let now = at("2026-11-29T10:01:05Z");
        let first = piece_of(at("2026-11-29T10:00:00Z"));

        let plan = cache.plan(
            (campaign(), day, cache.sequence()),
            &read_with(),
            &stretch,
            now,
        );
        assert_eq!(plan.raw, stretch);
        // Six pieces are over two seconds before 10:01:05; the seventh is not.
        assert_eq!(plan.to_keep, (first..first + 6).collect::<Vec<_>>());
        cache.keep(
            (campaign(), day),
            &read_with(),
            plan,
            &read_of(first..first + 7),
        );

        let plan = cache.plan(
            (campaign(), day, cache.sequence()),
            &read_with(),
            &stretch,
            now,
        );
        assert_eq!(plan.kept_pieces, 6);
        assert_eq!(
            plan.kept
                .counts
                .values()
                .map(|c| c.impressions)
                .sum::<u64>(),
            6
        );
        assert_eq!(
            plan.raw,
            [Span {
                from: at("2026-11-29T10:01:00Z"),
                to: at("2026-11-29T11:00:00Z"),
            }]
        );

        // A write at 10:00:35 leaves the first three pieces and no other.
        changes.record([(campaign(), at("2026-11-29T10:00:35Z"))]);
        let plan = cache.plan(
            (campaign(), day, cache.sequence()),
            &read_with(),
            &stretch,
            now,
        );
        assert_eq!(plan.kept_pieces, 3);
        assert_eq!(plan.raw[0].from, at("2026-11-29T10:00:30Z"));
        assert_eq!(plan.to_keep, (first + 3..first + 6).collect::<Vec<_>>());
    }

    #[test]
    fn a_write_during_the_read_keeps_the_pieces_before_it_only() {
        let changes = Arc::new(ChangeLog::new());
        let cache = StretchCache::new(Arc::clone(&changes));
        let day = Day::new("2026-11-29".parse().expect("date"));
        let stretch = [Span {
            from: at("2026-11-29T10:00:00Z"),
            to: at("2026-11-29T10:15:00Z"),
        }];
        let now = at("2026-11-29T10:05:00Z");
        let first = piece_of(at("2026-11-29T10:00:00Z"));
        let plan = cache.plan(
            (campaign(), day, cache.sequence()),
            &read_with(),
            &stretch,
            now,
        );
        changes.record([(campaign(), at("2026-11-29T10:02:00Z"))]);
        cache.keep(
            (campaign(), day),
            &read_with(),
            plan,
            &read_of(first..first + 30),
        );
        let plan = cache.plan(
            (campaign(), day, cache.sequence()),
            &read_with(),
            &stretch,
            now,
        );
        assert_eq!(plan.kept_pieces, 12);
    }

    #[test]
    fn copies_met_are_kept_and_settings_changed_start_over() {
        let cache = StretchCache::new(Arc::new(ChangeLog::new()));
        let day = Day::new("2026-11-29".parse().expect("date"));
        let stretch = [Span {
            from: at("2026-11-29T10:00:00Z"),
            to: at("2026-11-29T10:15:00Z"),
        }];
        let now = at("2026-11-29T10:05:00Z");
        let plan = cache.plan(
            (campaign(), day, cache.sequence()),
            &read_with(),
            &stretch,
            now,
        );
        let mut read = read_of([]);
        read.read_duplicates = vec![
            copy(9, "2026-11-29T10:00:01Z"),
            copy(9, "2026-11-29T10:03:01Z"),
        ];
        cache.keep((campaign(), day), &read_with(), plan, &read);
        let plan = cache.plan(
            (campaign(), day, cache.sequence()),
            &read_with(),
            &stretch,
            now,
        );
        assert_eq!(plan.copies.len(), 2);
        assert_eq!(plan.kept_pieces, 29);
        let other = ReadWith {
            window: BillableWindow::new(std::time::Duration::from_secs(60)).expect("a window"),
            ..read_with()
        };
        let plan = cache.plan((campaign(), day, cache.sequence()), &other, &stretch, now);
        assert_eq!((plan.kept_pieces, plan.copies.len()), (0, 0));
        assert_eq!(plan.raw, stretch);
    }

    #[test]
    fn the_days_read_least_recently_go_first() {
        let cache = StretchCache::new(Arc::new(ChangeLog::new()));
        let day = Day::new("2026-11-29".parse().expect("date"));
        let stretch = [Span {
            from: at("2026-11-29T10:00:00Z"),
            to: at("2026-11-29T10:15:00Z"),
        }];
        let now = at("2026-11-29T10:05:00Z");
        let campaign_n = |n: u128| CampaignKey {
            advertiser_id: AdvertiserId::new(Uuid::from_u128(1)),
            campaign_id: CampaignId::new(Uuid::from_u128(100 + n)),
        };
        let first = piece_of(stretch[0].from);
        let read = |n: u128| {
            let key = (campaign_n(n), day, cache.sequence());
            let plan = cache.plan(key, &read_with(), &stretch, now);
            let kept = plan.kept_pieces;
            cache.keep(
                (campaign_n(n), day),
                &read_with(),
                plan,
                &read_of(first..first + 29),
            );
            kept
        };
        assert_eq!(read(0), 0);
        for n in 1..=DAYS_KEPT as u128 {
            read(n);
        }
        // The first campaign went to make room; the last is kept.
        assert_eq!(read(0), 0);
        assert_eq!(read(DAYS_KEPT as u128), 29);
        assert!(cache.lock().bytes <= KEPT_BYTES);
    }

    #[test]
    fn kept_pieces_leave_gaps_to_read() {
        let from = at("2026-11-29T10:00:00Z");
        let first = piece_of(from);
        let stretch = [Span {
            from,
            to: at("2026-11-29T10:15:00Z"),
        }];
        let raw = without_pieces(
            &stretch,
            [first, first + 1, first + 3].into_iter().collect(),
        );
        assert_eq!(
            raw,
            [
                Span {
                    from: at("2026-11-29T10:00:20Z"),
                    to: at("2026-11-29T10:00:30Z"),
                },
                Span {
                    from: at("2026-11-29T10:00:40Z"),
                    to: at("2026-11-29T10:15:00Z"),
                },
            ]
        );
    }
}
