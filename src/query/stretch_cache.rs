//! What summaries read raw of open days, kept by 2-second piece (docs/DESIGN.md, "Open days
//! from closed slices"): the next summary of the day reads raw only the pieces a write may
//! have changed since, and the seconds that were not over yet, so its cost follows what
//! changed since the last summary rather than the minutes of the open stretch. Over a store
//! no other process writes, its change log (`SliceStore::changes`) says from which event time
//! on each write could change the counts; over one other processes write, the slices' marks
//! do, since every write reaching back to a settled piece marks its slice
//! (`SliceRule::marking_settled_pieces`), and pieces are kept only once settled.
//!
//! Every read raw counts an id once, at its earliest copy among the rows it read; kept pieces
//! were read apart, so the copies each read met with several timestamps are kept beside
//! them, and later reads count a copy only where the earliest known one lies. A copy written
//! after a piece was read changes the log from its earliest copy on (the store learns the
//! id's copies while writing), so the piece is read again with it. Where marks say what
//! changed, writers do not learn of copies: the ids each kept piece counted are kept too, and
//! a later read meeting one of them at another time reads again from the earlier copy.

use super::aggregate::BillableWindow;
use super::aggregate::SliceCounts;
use super::span::{Opened, Opener, SpanAggregate, Windows};
use crate::domain::ids::{CampaignKey, ImpressionId};
use crate::domain::partition::EventPartition;
use crate::domain::sealing::SealState;
use crate::domain::sketch::UniqueSketch;
use crate::domain::slices::{
    PIECE_SETTLE, Piece, Slice, Span, piece_of, slice_of_piece, slice_start,
};
use crate::domain::time::{Day, EventTime};
use crate::domain::view::ViewWindow;
use crate::store::{ChangeLog, CopyRow};
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// A piece is kept once it ended this long ago: the events stamped "now" that reach it late
/// would only throw it away (over a change log; marks need [`PIECE_SETTLE`] and a margin).
const SETTLE: TimeDelta = TimeDelta::seconds(1);
/// What one id a kept piece counted is taken to cost in memory, where they are kept: its
/// entry in the day's map and in its piece's list.
const ID_BYTES: usize = 72;

/// The latest mark of each slice of a campaign-day, as its slice states were read.
pub(crate) type Marks = BTreeMap<Slice, DateTime<Utc>>;

/// How the cache learns what writes changed since a piece was read.
enum Watch {
    /// The store's change log: every write of the one process writing the store.
    Log(Arc<ChangeLog>),
    /// The slices' marks, read with each summary's slice states: a write reaching back to a
    /// piece [`PIECE_SETTLE`] after its end marks its slice, and pieces are kept only past
    /// that and the margin for servers' clocks, so a write a read did not see has marked.
    /// Sequence numbers are the reads' start times, in milliseconds.
    Marks,
}

impl Watch {
    /// How long after its end a piece may be kept.
    fn settle(&self) -> TimeDelta {
        match self {
            Self::Log(_) => SETTLE,
            Self::Marks => PIECE_SETTLE + marks_margin(),
        }
    }
}

/// A mark this much older than a read's start may still be of a write the read missed: the
/// seals' margin for servers' clocks, and the second for which a write reuses a mark
/// of its slice (`ingest::MARK_REUSE`).
fn marks_margin() -> TimeDelta {
    SealState::MARGIN + TimeDelta::seconds(1)
}
/// Campaign-days kept; past this, the one read least recently goes.
const DAYS_KEPT: usize = 1_024;
/// The memory all kept pieces may take (their counts and sketches, estimated); past it, the
/// days read least recently go.
const KEPT_BYTES: usize = 64 * 1024 * 1024;
/// The memory one campaign-day's pieces may take: a day far busier than the rest keeps its
/// first pieces and reads the others raw, rather than pushing every other day out.
const DAY_BYTES: usize = 16 * 1024 * 1024;
/// (piece, ad) entries kept of one campaign-day: half an hour of pieces of 24 ads, or two
/// hours of 6. A stretch longer than that (the aggregator far behind) or wider is read raw
/// beyond it.
const ENTRIES_PER_DAY: usize = 900 * 24;
/// Only pieces that began this recently are kept: the open stretch and the slices marked
/// since their aggregation, which the aggregator replaces within minutes. An older stretch
/// read raw (a day no aggregate answers for, far in the past) is read whole each time: kept,
/// its tens of thousands of mostly empty pieces would cost more than they spare.
const KEPT_HORIZON: TimeDelta = TimeDelta::hours(1);
/// What one kept piece is taken to cost in memory besides its counts: its entry in the day's
/// map and its own fields (about 470 bytes each, measured over empty pieces).
const PIECE_BYTES: usize = 512;
/// Copies of ids with several timestamps kept of one campaign-day (within [`KEPT_BYTES`]); a
/// day with more (a client re-sending ids at other times) keeps nothing and is read raw whole.
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
    watch: Watch,
    days: Mutex<Days>,
}

#[derive(Default)]
struct Days {
    by_day: HashMap<(CampaignKey, Day), KeptDay>,
    /// Plans made, so that each day knows when it was last read.
    reads: u64,
    /// Campaign-days kept so far: each kept day's number, so that a day dropped and kept again
    /// is not taken for the one before.
    created: u64,
    /// The estimated memory of every kept piece.
    bytes: usize,
}

struct KeptDay {
    read_with: ReadWith,
    pieces: BTreeMap<Piece, KeptPiece>,
    entries: usize,
    bytes: usize,
    /// Every copy of the ids that reads of the day met with more than one timestamp, with
    /// the sequence number of the read that met it.
    copies: HashMap<ImpressionId, Vec<(CopyRow, u64)>>,
    copy_count: usize,
    /// Each id the kept pieces counted, at the copy they counted (kept where marks say
    /// what changed: writers there do not learn of an id's other copies).
    ids: HashMap<ImpressionId, CopyRow>,
    last_read: u64,
    /// Its number among the days kept ([`Days::created`]).
    created: u64,
    /// Bumped whenever a kept piece goes or is replaced: what was merged of them is stale.
    generation: u64,
    /// The kept pieces a plan last answered with, merged by slice, so the next plan merges
    /// only the pieces kept since.
    merged: Option<Merged>,
    /// The windows the kept pieces opened in the window a plan's raw read last started in,
    /// so the next plan adds only the pieces kept since.
    opened: Option<OpenedWindows>,
}

struct OpenedWindows {
    generation: u64,
    /// The window's number, its first piece and the last piece gathered.
    number: i64,
    first: Piece,
    last: Piece,
    windows: Arc<Windows>,
    bytes: usize,
}

struct Merged {
    generation: u64,
    first: Piece,
    last: Piece,
    slices: Arc<KeptSlices>,
    bytes: usize,
}

/// Kept pieces merged by slice: their counts and users by slice and ad, and their users by
/// slice with every ad together. Every summary needs the latter; merged here once as pieces
/// are kept, a poll copies each slice's sketch instead of merging every ad's into it again
/// (at ten million impressions a day, thousands of users an ad and slice).
#[derive(Debug, Default, Clone)]
pub(crate) struct KeptSlices {
    pub(crate) by_ad: SpanAggregate,
    pub(crate) users: BTreeMap<Slice, UniqueSketch>,
}

impl KeptSlices {
    /// Adds `pieces`, an aggregate kept by piece, by slice.
    fn add_pieces(&mut self, pieces: &SpanAggregate) {
        self.by_ad.add_pieces(pieces);
        for ((piece, _), users) in &pieces.users {
            self.users
                .entry(slice_of_piece(*piece))
                .or_default()
                .merge(users);
        }
    }

    /// About what these hold in memory.
    fn bytes(&self) -> usize {
        bytes_of(&self.by_ad)
            + self
                .users
                .values()
                .map(|users| std::mem::size_of::<UniqueSketch>() + users.heap_bytes())
                .sum::<usize>()
    }
}

impl KeptDay {
    /// What the day holds in memory: its pieces and copies, and what was merged of them.
    fn held_bytes(&self) -> usize {
        self.bytes
            + self.merged.as_ref().map_or(0, |merged| merged.bytes)
            + self.opened.as_ref().map_or(0, |opened| opened.bytes)
    }

    fn new(read_with: ReadWith, created: u64) -> Self {
        Self {
            read_with,
            created,
            pieces: BTreeMap::new(),
            entries: 0,
            bytes: 0,
            copies: HashMap::new(),
            copy_count: 0,
            ids: HashMap::new(),
            last_read: 0,
            generation: 0,
            merged: None,
            opened: None,
        }
    }
}

struct KeptPiece {
    /// The change log's sequence number when the read behind it began.
    sequence: u64,
    /// Its counts and users, by piece and ad.
    aggregate: SpanAggregate,
    /// Its billable windows at their earliest impression in it.
    openers: Vec<Opener>,
    /// The ids it counted, where they are kept ([`KeptDay::ids`]).
    ids: Vec<ImpressionId>,
    bytes: usize,
}

impl KeptDay {
    /// Forgets the ids that piece `number` counted (`ids`).
    fn forget_ids(&mut self, number: Piece, ids: &[ImpressionId]) {
        for id in ids {
            if self
                .ids
                .get(id)
                .is_some_and(|copy| piece_of(copy.timestamp.instant()) == number)
            {
                self.ids.remove(id);
            }
        }
    }
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

/// What one kept copy is taken to cost in memory.
const COPY_BYTES: usize = 64;
/// What one window gathered for a plan's raw read is taken to cost: its entry in the map.
const WINDOW_BYTES: usize = 56;

/// How one summary reads a campaign-day's raw stretches with what is kept.
#[derive(Debug, Default)]
pub(crate) struct StretchPlan {
    sequence: u64,
    /// A write since `sequence` at an earlier time than this reaches what the plan kept.
    until: DateTime<Utc>,
    /// The kept pieces' counts and users, by slice (shared with the cache until the next
    /// plan merges more pieces in).
    pub(crate) kept: Arc<KeptSlices>,
    pub(crate) kept_pieces: usize,
    /// What to read raw, oldest first and apart.
    pub(crate) raw: Vec<Span>,
    /// Pieces read raw that are over and may be kept.
    to_keep: Vec<Piece>,
    /// The last kept piece that answers.
    last_used: Option<Piece>,
    /// The kept day's number and generation as planned: another summary changed its pieces
    /// since if they differ.
    stamp: Option<(u64, u64)>,
    /// Every copy of the ids earlier reads met with more than one timestamp.
    pub(crate) copies: Vec<CopyRow>,
    /// The windows the kept pieces opened before the raw read's start, within its window:
    /// it need not read back for them.
    pub(crate) opened: Option<Opened>,
}

impl StretchCache {
    /// A cache over a store no other process writes, which records its writes in `changes`.
    pub(crate) fn new(changes: Arc<ChangeLog>) -> Self {
        Self {
            watch: Watch::Log(changes),
            days: Mutex::new(Days::default()),
        }
    }

    /// A cache over a store other processes write, whose writes reaching back to settled
    /// pieces mark their slices.
    pub(crate) fn over_marks() -> Self {
        Self {
            watch: Watch::Marks,
            days: Mutex::new(Days::default()),
        }
    }

    /// The sequence number a read starting `now` takes: taken before anything of the day is
    /// read, so whatever a write changes after it, that read did not count.
    pub(crate) fn sequence(&self, now: DateTime<Utc>) -> u64 {
        match &self.watch {
            Watch::Log(changes) => changes.sequence(),
            Watch::Marks => u64::try_from(now.timestamp_millis()).unwrap_or(0),
        }
    }

    /// The earliest time from which a write after `sequence` changed `campaign`'s counts, as
    /// far as the cache can tell (`marks`: the day's, read after `sequence` was taken).
    fn changed_since(
        &self,
        campaign: CampaignKey,
        sequence: u64,
        marks: &Marks,
    ) -> Option<DateTime<Utc>> {
        match &self.watch {
            Watch::Log(changes) => changes.changed_since(campaign, sequence),
            Watch::Marks => {
                let read_at = i64::try_from(sequence).unwrap_or(i64::MAX);
                let since = read_at - marks_margin().num_milliseconds();
                marks
                    .iter()
                    .filter(|(_, marked)| marked.timestamp_millis() >= since)
                    .map(|(slice, _)| slice_start(*slice))
                    .min()
            }
        }
    }

    /// Which pieces of `stretches` (the day's runs of slices no aggregate answers for) are
    /// kept and still right, and what is left to read raw: the kept pieces answer from the
    /// first over piece up to the first that is not kept, and everything after is read raw
    /// in one pass, so every copy and report an id of it needs is read with it.
    pub(crate) fn plan(
        &self,
        (campaign, day, sequence): (CampaignKey, Day, u64),
        read_with: &ReadWith,
        (stretches, marks): (&[Span], &Marks),
        now: DateTime<Utc>,
    ) -> StretchPlan {
        let settle = self.watch.settle();
        let mut days = self.lock();
        let days = &mut *days;
        days.reads += 1;
        let reads = days.reads;
        let mut plan = StretchPlan {
            sequence,
            raw: stretches.to_vec(),
            to_keep: over_pieces(stretches, now, settle),
            until: DateTime::<Utc>::MIN_UTC,
            ..StretchPlan::default()
        };
        let Some(kept) = days.by_day.get_mut(&(campaign, day)) else {
            return plan;
        };
        if kept.read_with != *read_with {
            days.bytes -= kept.held_bytes().min(days.bytes);
            days.created += 1;
            *kept = KeptDay::new(read_with.clone(), days.created);
        }
        kept.last_read = reads;
        let changed_before = |sequence: u64, until: DateTime<Utc>| {
            self.changed_since(campaign, sequence, marks)
                .is_some_and(|at| at < until)
        };
        // A piece holding an id's earliest copy counts what the id's later copies bring (their
        // view reports, their validity): it lasts until the latest copy. A copy a write has
        // reached back to since it was read (erased, say) is forgotten with its id, and the id's
        // earliest piece and every piece after it are read raw again.
        let mut reach: HashMap<Piece, DateTime<Utc>> = HashMap::new();
        let mut wrong_from: Option<Piece> = None;
        let mut forgotten = 0;
        kept.copies.retain(|_, copies| {
            let times = copies.iter().map(|(copy, _)| copy.timestamp.instant());
            let (Some(earliest), Some(latest)) = (times.clone().min(), times.max()) else {
                return false;
            };
            let stale = copies.iter().any(|(copy, read_at)| {
                changed_before(
                    *read_at,
                    copy.timestamp.instant() + TimeDelta::milliseconds(1),
                )
            });
            if stale {
                let piece = piece_of(earliest);
                wrong_from = Some(wrong_from.map_or(piece, |wrong| wrong.min(piece)));
                forgotten += copies.len();
            } else {
                let until = latest + TimeDelta::milliseconds(1);
                let held = reach.entry(piece_of(earliest)).or_insert(until);
                *held = (*held).max(until);
            }
            !stale
        });
        kept.copy_count -= forgotten.min(kept.copy_count);
        let until_of = |piece: Piece| {
            let end = Span::of_piece(piece).to;
            reach.get(&piece).map_or(end, |until| end.max(*until))
        };
        let in_stretches = |piece: Piece| {
            let span = Span::of_piece(piece);
            stretches
                .iter()
                .any(|stretch| stretch.from <= span.from && span.to <= stretch.to)
        };
        let (mut entries, mut bytes) = (0, 0);
        let mut gone = Vec::new();
        // A piece the horizon has passed answers no more: its memory goes to newer ones.
        let in_horizon = piece_of(now - KEPT_HORIZON);
        kept.pieces.retain(|piece, held| {
            let right = in_stretches(*piece)
                && *piece >= in_horizon
                && wrong_from.is_none_or(|wrong| *piece < wrong)
                && !changed_before(held.sequence, until_of(*piece));
            if !right {
                entries += held.aggregate.counts.len();
                bytes += held.bytes;
                gone.push((*piece, std::mem::take(&mut held.ids)));
            }
            right
        });
        for (piece, ids) in gone {
            kept.forget_ids(piece, &ids);
        }
        if entries > 0 || bytes > 0 {
            kept.generation += 1;
        }
        kept.entries -= entries.min(kept.entries);
        kept.bytes -= bytes.min(kept.bytes);
        days.bytes -= bytes.min(days.bytes);
        plan.copies = kept
            .copies
            .values()
            .flatten()
            .map(|(copy, _)| *copy)
            .collect();
        plan.to_keep.clear();
        let mut used = Vec::new();
        for piece in over_pieces(stretches, now, settle) {
            if plan.to_keep.is_empty() && kept.pieces.contains_key(&piece) {
                plan.until = plan.until.max(until_of(piece));
                used.push(piece);
            } else {
                plan.to_keep.push(piece);
            }
        }
        // What the last plan merged, if the pieces it merged still lead these, and the rest.
        let (mut merged, from) = match kept.merged.take() {
            Some(held)
                if held.generation == kept.generation
                    && used.first() == Some(&held.first)
                    && used.binary_search(&held.last).is_ok() =>
            {
                days.bytes -= held.bytes.min(days.bytes);
                (
                    held.slices,
                    used.partition_point(|piece| *piece <= held.last),
                )
            }
            held => {
                days.bytes -= held.map_or(0, |held| held.bytes).min(days.bytes);
                (Arc::default(), 0)
            }
        };
        if from < used.len() {
            // Copied only while a summary still answers with the last plan's.
            let slices = Arc::make_mut(&mut merged);
            for piece in &used[from..] {
                if let Some(held) = kept.pieces.get(piece) {
                    slices.add_pieces(&held.aggregate);
                }
            }
        }
        if let (Some(first), Some(last)) = (used.first(), used.last()) {
            let bytes = merged.bytes();
            days.bytes += bytes;
            kept.merged = Some(Merged {
                generation: kept.generation,
                first: *first,
                last: *last,
                slices: Arc::clone(&merged),
                bytes,
            });
        }
        plan.kept = merged;
        plan.kept_pieces = used.len();
        plan.last_used = used.last().copied();
        plan.stamp = Some((kept.created, kept.generation));
        let held = kept.opened.as_ref().map_or(0, |opened| opened.bytes);
        plan.opened = opened_before(kept, &used, stretches, read_with.window);
        let now_held = kept.opened.as_ref().map_or(0, |opened| opened.bytes);
        days.bytes = (days.bytes + now_held).saturating_sub(held);
        plan.raw = without_pieces(stretches, used.into_iter().collect());
        // The copies passed on are right only while no write reaches back to them either.
        if let Some(latest) = plan
            .copies
            .iter()
            .map(|copy| copy.timestamp.instant())
            .max()
        {
            plan.until = plan.until.max(latest + TimeDelta::milliseconds(1));
        }
        plan
    }

    /// Whether the kept pieces and copies `plan` answered with are still right once the rest
    /// was read raw (`read`): a write during that read, reaching back to them, makes the two
    /// disagree. Where marks say what changed, a write during the read is seen by the next
    /// summary; there the read is checked for an id a kept piece counted at another time (a
    /// copy written since, which its writer did not mark): the id's copies are then kept as
    /// met, and everything from its earliest copy's piece on is read again.
    pub(crate) fn still_right(
        &self,
        (campaign, day): (CampaignKey, Day),
        plan: &StretchPlan,
        read: &SpanAggregate,
    ) -> bool {
        match &self.watch {
            Watch::Log(changes) => {
                plan.kept_pieces == 0 && plan.copies.is_empty()
                    || changes
                        .changed_since(campaign, plan.sequence)
                        .is_none_or(|at| at >= plan.until)
            }
            Watch::Marks => {
                let Some(last_used) = plan.last_used else {
                    return true;
                };
                let mut days = self.lock();
                let days = &mut *days;
                // Another summary may have dropped the pieces this one answered with since
                // its plan, for an id met again that this read counted too: read again.
                let Some(kept) = days
                    .by_day
                    .get_mut(&(campaign, day))
                    .filter(|kept| plan.stamp == Some((kept.created, kept.generation)))
                else {
                    return false;
                };
                let mut met = Vec::new();
                for counted in &read.counted {
                    if let Some(held) = kept.ids.get(&counted.impression_id)
                        && held.timestamp != counted.timestamp
                        && piece_of(held.timestamp.instant()) <= last_used
                    {
                        met.push((*held, *counted));
                    }
                }
                let Some(from) = met
                    .iter()
                    .map(|(held, counted)| held.timestamp.min(counted.timestamp))
                    .min()
                else {
                    return true;
                };
                for (held, counted) in met {
                    let copies = kept.copies.entry(held.impression_id).or_default();
                    for copy in [held, counted] {
                        if !copies
                            .iter()
                            .any(|(known, _)| known.timestamp == copy.timestamp)
                        {
                            copies.push((copy, plan.sequence));
                            kept.copy_count += 1;
                            kept.bytes += COPY_BYTES;
                            days.bytes += COPY_BYTES;
                        }
                    }
                }
                if kept.copy_count > COPIES_PER_DAY {
                    days.bytes -= kept.held_bytes().min(days.bytes);
                    days.by_day.remove(&(campaign, day));
                    return false;
                }
                let gone: Vec<(Piece, KeptPiece)> = kept
                    .pieces
                    .split_off(&piece_of(from.instant()))
                    .into_iter()
                    .collect();
                for (piece, held) in gone {
                    kept.forget_ids(piece, &held.ids);
                    kept.entries -= held.aggregate.counts.len().min(kept.entries);
                    kept.bytes -= held.bytes.min(kept.bytes);
                    days.bytes -= held.bytes.min(days.bytes);
                }
                kept.generation += 1;
                false
            }
        }
    }

    /// Keeps the pieces `plan` read raw that no write has changed since, from `read` (the
    /// raw stretches' counts by piece), oldest first until the first that does not fit, and
    /// the copies it met.
    pub(crate) fn keep(
        &self,
        (campaign, day): (CampaignKey, Day),
        (read_with, marks): (&ReadWith, &Marks),
        plan: StretchPlan,
        read: &SpanAggregate,
    ) {
        let changed = self.changed_since(campaign, plan.sequence, marks);
        let still_right = |piece: Piece| changed.is_none_or(|at| at >= Span::of_piece(piece).to);
        let mut by_piece: BTreeMap<Piece, (SpanAggregate, Vec<Opener>, Vec<CopyRow>)> = plan
            .to_keep
            .iter()
            .copied()
            .take_while(|piece| still_right(*piece))
            .map(|piece| (piece, Default::default()))
            .collect();
        for (piece, openers) in &read.openers {
            if let Some((_, kept, _)) = by_piece.get_mut(piece) {
                kept.clone_from(openers);
            }
        }
        for (key, counts) in &read.counts {
            if let Some((aggregate, _, _)) = by_piece.get_mut(&key.0) {
                aggregate.counts.insert(*key, counts.clone());
            }
        }
        for (key, users) in &read.users {
            if let Some((aggregate, _, _)) = by_piece.get_mut(&key.0) {
                aggregate.users.insert(*key, users.clone());
            }
        }
        if matches!(self.watch, Watch::Marks) {
            for counted in &read.counted {
                if let Some((_, _, ids)) = by_piece.get_mut(&piece_of(counted.timestamp.instant()))
                {
                    ids.push(*counted);
                }
            }
        }
        let pieces: Vec<(Piece, KeptPiece, Vec<CopyRow>)> = by_piece
            .into_iter()
            .map(|(piece, (aggregate, openers, ids))| {
                let bytes = PIECE_BYTES
                    + bytes_of(&aggregate)
                    + openers.len() * std::mem::size_of::<Opener>()
                    + ids.len() * ID_BYTES;
                let held = KeptPiece {
                    sequence: plan.sequence,
                    aggregate,
                    openers,
                    ids: ids.iter().map(|copy| copy.impression_id).collect(),
                    bytes,
                };
                (piece, held, ids)
            })
            .collect();
        let mut days = self.lock();
        let days = &mut *days;
        let reads = days.reads;
        let next = days.created + 1;
        let kept = days
            .by_day
            .entry((campaign, day))
            .or_insert_with(|| KeptDay::new(read_with.clone(), next));
        if kept.read_with != *read_with {
            days.bytes -= kept.held_bytes().min(days.bytes);
            *kept = KeptDay::new(read_with.clone(), next);
        }
        if kept.created == next {
            days.created = next;
        }
        kept.last_read = reads;
        // Where marks say what changed, pieces another summary dropped since this one's plan
        // (an id met again) may be what this read counted wrongly: it keeps nothing.
        if matches!(self.watch, Watch::Marks)
            && plan
                .stamp
                .is_some_and(|stamp| stamp != (kept.created, kept.generation))
        {
            return;
        }
        let mut added = 0;
        for copy in &read.read_duplicates {
            let copies = kept.copies.entry(copy.impression_id).or_default();
            if !copies
                .iter()
                .any(|(held, _)| held.timestamp == copy.timestamp)
            {
                copies.push((*copy, plan.sequence));
                kept.copy_count += 1;
                kept.bytes += COPY_BYTES;
                added += COPY_BYTES;
            }
        }
        if kept.copy_count > COPIES_PER_DAY {
            days.bytes -= (kept.held_bytes() - added).min(days.bytes);
            days.by_day.remove(&(campaign, day));
            return;
        }
        for (piece, held, ids) in pieces {
            let (entries, bytes) = (held.aggregate.counts.len(), held.bytes);
            if kept.entries + entries > ENTRIES_PER_DAY
                || kept.bytes + bytes > DAY_BYTES
                || days.bytes + added + bytes > KEPT_BYTES
            {
                break;
            }
            kept.entries += entries;
            kept.bytes += bytes;
            added += bytes;
            let replaced = kept.pieces.insert(piece, held);
            if let Some(replaced) = &replaced {
                kept.forget_ids(piece, &replaced.ids);
            }
            for copy in ids {
                kept.ids
                    .entry(copy.impression_id)
                    .and_modify(|held| {
                        if copy.timestamp < held.timestamp {
                            *held = copy;
                        }
                    })
                    .or_insert(copy);
            }
            if let Some(replaced) = replaced {
                kept.generation += 1;
                kept.entries -= replaced.aggregate.counts.len().min(kept.entries);
                kept.bytes -= replaced.bytes.min(kept.bytes);
                added -= replaced.bytes.min(added);
            }
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
                days.bytes -= gone.held_bytes().min(days.bytes);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Days> {
        self.days
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The pieces of `stretches` that ended at least `settle` before `now` and began within
/// [`KEPT_HORIZON`] of it, oldest first.
fn over_pieces(stretches: &[Span], now: DateTime<Utc>, settle: TimeDelta) -> Vec<Piece> {
    let settled = now - settle;
    let horizon = now - KEPT_HORIZON;
    stretches
        .iter()
        .flat_map(|stretch| piece_of(stretch.from.max(horizon))..piece_of(stretch.to.min(settled)))
        .collect()
}

/// The windows that the `used` pieces (a prefix of the over pieces, oldest first) opened
/// before the first piece after them, within that piece's window, if they cover the window's
/// start up to it: what the read of the rest would otherwise read back for.
fn opened_before(
    kept: &mut KeptDay,
    used: &[Piece],
    stretches: &[Span],
    window: BillableWindow,
) -> Option<Opened> {
    let gathered = kept.opened.take();
    let last = *used.last()?;
    let before = Span::of_piece(last + 1).from;
    // The rest must start right after the pieces, in the same stretch.
    if !stretches
        .iter()
        .any(|stretch| stretch.from < before && before < stretch.to)
    {
        return None;
    }
    let number = window.of(EventTime::from_stored(before));
    let back_to = piece_of(window.start_of(number));
    // What the last plan gathered of this window, if no piece of it went since.
    let (mut windows, from) = match gathered {
        Some(held)
            if held.generation == kept.generation
                && held.number == number
                && held.first == back_to
                && held.last <= last =>
        {
            (held.windows, held.last + 1)
        }
        _ => (Arc::default(), back_to),
    };
    for piece in back_to..=last {
        used.binary_search(&piece).ok()?;
        if piece < from {
            continue;
        }
        let held = kept.pieces.get(&piece)?;
        let gathering = Arc::make_mut(&mut windows);
        for opener in held.openers.iter().filter(|opener| opener.window == number) {
            gathering
                .entry((opener.user, opener.window))
                .and_modify(|first| *first = (*first).min((opener.at, opener.ad)))
                .or_insert((opener.at, opener.ad));
        }
    }
    kept.opened = Some(OpenedWindows {
        generation: kept.generation,
        number,
        first: back_to,
        last,
        bytes: windows.capacity() * WINDOW_BYTES,
        windows: Arc::clone(&windows),
    });
    Some(Opened { before, windows })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{AdId, AdvertiserId, CampaignId, ImpressionId};
    use crate::domain::sketch::MemberHash;
    use crate::domain::slices::{PIECE_MILLIS, slice_of_piece};
    use uuid::Uuid;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().expect("time")
    }

    /// The whole pieces from `from` to `to`.
    fn pieces(from: &str, to: &str) -> i64 {
        (at(to) - at(from)).num_milliseconds() / PIECE_MILLIS
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

    /// A quarter of an hour from 10:00, read at 10:05: its pieces over by then.
    struct Quarter {
        changes: Arc<ChangeLog>,
        cache: StretchCache,
        day: Day,
        stretch: [Span; 1],
        now: DateTime<Utc>,
        first: Piece,
        over: i64,
    }

    impl Quarter {
        fn new() -> Self {
            let changes = Arc::new(ChangeLog::new());
            let from = at("2026-11-29T10:00:00Z");
            Self {
                cache: StretchCache::new(Arc::clone(&changes)),
                changes,
                day: Day::new("2026-11-29".parse().expect("date")),
                stretch: [Span {
                    from,
                    to: at("2026-11-29T10:15:00Z"),
                }],
                now: at("2026-11-29T10:05:00Z"),
                first: piece_of(from),
                over: pieces("2026-11-29T10:00:00Z", "2026-11-29T10:04:59Z"),
            }
        }

        fn plan(&self) -> StretchPlan {
            let key = (campaign(), self.day, self.cache.sequence(self.now));
            self.cache
                .plan(key, &read_with(), (&self.stretch, &Marks::new()), self.now)
        }

        fn keep(&self, plan: StretchPlan, read: &SpanAggregate) {
            self.cache.keep(
                (campaign(), self.day),
                (&read_with(), &Marks::new()),
                plan,
                read,
            );
        }

        fn write_at(&self, time: &str) {
            self.changes.record([(campaign(), at(time))]);
        }
    }

    #[test]
    fn kept_pieces_answer_until_a_write_reaches_back_to_them() {
        let quarter = Quarter::new();
        let (first, over) = (quarter.first, quarter.over);
        let plan = quarter.plan();
        assert_eq!(plan.raw, quarter.stretch);
        // The pieces over a second before 10:05; not the one under way.
        assert_eq!(plan.to_keep, (first..first + over).collect::<Vec<_>>());
        quarter.keep(plan, &read_of(first..first + over + 1));

        let plan = quarter.plan();
        assert_eq!(plan.kept_pieces as i64, over);
        let impressions: u64 = plan.kept.by_ad.counts.values().map(|c| c.impressions).sum();
        assert_eq!(impressions as i64, over);
        assert_eq!(plan.raw[0].from, Span::of_piece(first + over).from);
        assert_eq!(plan.raw[0].to, quarter.stretch[0].to);

        // A write at 10:00:35 leaves the pieces that ended by then and no other.
        quarter.write_at("2026-11-29T10:00:35Z");
        let plan = quarter.plan();
        let before = pieces("2026-11-29T10:00:00Z", "2026-11-29T10:00:35Z");
        assert_eq!(plan.kept_pieces as i64, before);
        assert_eq!(plan.raw[0].from, Span::of_piece(first + before).from);
        assert_eq!(
            plan.to_keep,
            (first + before..first + over).collect::<Vec<_>>()
        );
    }

    #[test]
    fn only_the_last_hours_pieces_are_kept_and_an_old_stretch_is_read_whole() {
        let mut quarter = Quarter::new();
        // The same quarter read a day later (a day no aggregate answers for): nothing to keep.
        quarter.now = at("2026-11-30T10:05:00Z");
        let plan = quarter.plan();
        assert!(plan.to_keep.is_empty(), "{:?}", plan.to_keep.len());
        quarter.keep(plan, &read_of(quarter.first..quarter.first + 450));
        let plan = quarter.plan();
        assert_eq!(plan.kept_pieces, 0);
        assert_eq!(plan.raw, quarter.stretch);
        assert_eq!(quarter.cache.lock().bytes, 0);

        // Read at 11:14:30, only its pieces from 10:14:30 on are kept.
        quarter.now = at("2026-11-29T11:14:30Z");
        let plan = quarter.plan();
        let first = piece_of(at("2026-11-29T10:14:30Z"));
        let last = piece_of(quarter.stretch[0].to);
        assert_eq!(plan.to_keep, (first..last).collect::<Vec<_>>());
    }

    #[test]
    fn pieces_the_horizon_passed_go_with_their_memory() {
        let mut quarter = Quarter::new();
        let plan = quarter.plan();
        let kept = plan.to_keep.len();
        quarter.keep(plan, &SpanAggregate::default());
        // An hour after 10:02, the pieces before it go (the aggregator is that far behind).
        quarter.now = at("2026-11-29T11:02:00Z");
        let plan = quarter.plan();
        let gone = pieces("2026-11-29T10:00:00Z", "2026-11-29T10:02:00Z") as usize;
        assert_eq!(plan.kept_pieces, kept - gone);
        assert_eq!(quarter.cache.lock().bytes, (kept - gone) * PIECE_BYTES);
    }

    #[test]
    fn empty_pieces_count_against_the_memory_bound() {
        let quarter = Quarter::new();
        let plan = quarter.plan();
        let kept = plan.to_keep.len();
        quarter.keep(plan, &SpanAggregate::default());
        assert_eq!(quarter.plan().kept_pieces, kept);
        assert_eq!(quarter.cache.lock().bytes, kept * PIECE_BYTES);
    }

    #[test]
    fn a_write_during_the_read_keeps_the_pieces_before_it_only() {
        let quarter = Quarter::new();
        let plan = quarter.plan();
        quarter.write_at("2026-11-29T10:02:00Z");
        quarter.keep(plan, &read_of(quarter.first..quarter.first + quarter.over));
        assert_eq!(
            quarter.plan().kept_pieces as i64,
            pieces("2026-11-29T10:00:00Z", "2026-11-29T10:02:00Z")
        );
    }

    #[test]
    fn copies_met_are_kept_and_settings_changed_start_over() {
        let quarter = Quarter::new();
        let plan = quarter.plan();
        let mut read = read_of([]);
        read.read_duplicates = vec![
            copy(9, "2026-11-29T10:00:01Z"),
            copy(9, "2026-11-29T10:03:01Z"),
        ];
        quarter.keep(plan, &read);
        let plan = quarter.plan();
        assert_eq!(plan.copies.len(), 2);
        assert_eq!(plan.kept_pieces as i64, quarter.over);
        let other = ReadWith {
            window: BillableWindow::new(std::time::Duration::from_secs(60)).expect("a window"),
            ..read_with()
        };
        let key = (campaign(), quarter.day, quarter.cache.sequence(quarter.now));
        let plan = quarter
            .cache
            .plan(key, &other, (&quarter.stretch, &Marks::new()), quarter.now);
        assert_eq!((plan.kept_pieces, plan.copies.len()), (0, 0));
        assert_eq!(plan.raw, quarter.stretch);
    }

    #[test]
    fn a_piece_holding_an_earliest_copy_lasts_until_the_latest_copy() {
        let quarter = Quarter::new();
        let read_copies = || {
            let plan = quarter.plan();
            let mut read = read_of(quarter.first..quarter.first + quarter.over);
            read.read_duplicates = vec![
                copy(9, "2026-11-29T10:00:01Z"),
                copy(9, "2026-11-29T10:03:01Z"),
            ];
            quarter.keep(plan, &read);
        };
        read_copies();
        // After the latest copy: the earliest copy's piece still answers.
        quarter.write_at("2026-11-29T10:04:00Z");
        let plan = quarter.plan();
        let before = pieces("2026-11-29T10:00:00Z", "2026-11-29T10:04:00Z");
        assert_eq!((plan.kept_pieces as i64, plan.copies.len()), (before, 2));
        // Between the copies (a report of the later one, say): from the earliest copy's piece
        // on, everything is read again, and the copies are met again there.
        quarter.write_at("2026-11-29T10:02:00Z");
        let plan = quarter.plan();
        assert_eq!((plan.kept_pieces, plan.copies.len()), (0, 0));
        assert_eq!(plan.raw, quarter.stretch);
        read_copies();
        let plan = quarter.plan();
        assert_eq!(
            (plan.kept_pieces as i64, plan.copies.len()),
            (quarter.over, 2)
        );
        assert!(quarter.cache.still_right(
            (campaign(), quarter.day),
            &plan,
            &SpanAggregate::default()
        ));
        // A write while the rest is read, reaching back to a kept copy: read again.
        quarter.write_at("2026-11-29T10:03:00Z");
        assert!(!quarter.cache.still_right(
            (campaign(), quarter.day),
            &plan,
            &SpanAggregate::default()
        ));
    }

    #[test]
    fn what_was_merged_is_merged_again_only_past_its_end() {
        let quarter = Quarter::new();
        let (first, over) = (quarter.first, quarter.over);
        let total = |plan: &StretchPlan| -> (i64, u64) {
            let impressions = plan.kept.by_ad.counts.values().map(|c| c.impressions).sum();
            (plan.kept_pieces as i64, impressions)
        };
        let plan = quarter.plan();
        quarter.keep(plan, &read_of(first..first + 10));
        assert_eq!(total(&quarter.plan()), (over, 10));
        assert_eq!(total(&quarter.plan()), (over, 10));
        // Pieces gone: merged again from those left, then from the ones kept after them.
        quarter.write_at(&Span::of_piece(first + 8).from.to_rfc3339());
        let plan = quarter.plan();
        assert_eq!(total(&plan), (8, 8));
        quarter.keep(plan, &read_of(first + 8..first + 20));
        assert_eq!(total(&quarter.plan()), (over, 20));
        assert_eq!(total(&quarter.plan()), (over, 20));
    }

    #[test]
    fn kept_slices_hold_each_slices_users_of_every_ad_together() {
        let quarter = Quarter::new();
        let first = quarter.first;
        // Two ads, a user of each in every piece read.
        let with_users = |pieces: std::ops::Range<Piece>| {
            let mut read = read_of(pieces.clone());
            for piece in pieces {
                for ad in [3_u128, 4] {
                    let mut users = UniqueSketch::default();
                    users.insert(MemberHash::of(&(piece as u128 * 10 + ad).to_be_bytes()));
                    read.users
                        .insert((piece, AdId::new(Uuid::from_u128(ad))), users);
                }
            }
            read
        };
        let users = |plan: &StretchPlan| -> Vec<(Slice, u64)> {
            plan.kept
                .users
                .iter()
                .map(|(slice, users)| (*slice, users.estimate()))
                .collect()
        };
        let slice = slice_of_piece(first);
        let plan = quarter.plan();
        quarter.keep(plan, &with_users(first..first + 10));
        assert_eq!(users(&quarter.plan()), [(slice, 20)]);
        // Merged again from the pieces left, then on from those kept after them.
        quarter.write_at(&Span::of_piece(first + 8).from.to_rfc3339());
        let plan = quarter.plan();
        assert_eq!(users(&plan), [(slice, 16)]);
        quarter.keep(plan, &with_users(first + 8..first + 20));
        let plan = quarter.plan();
        assert_eq!(users(&plan), [(slice, 40)]);
        let by_ad: u64 = plan
            .kept
            .by_ad
            .users
            .values()
            .map(UniqueSketch::estimate)
            .sum();
        assert_eq!(by_ad, 40);
    }

    #[test]
    fn the_windows_kept_pieces_opened_spare_the_rest_its_read_back() {
        let quarter = Quarter::new();
        let (first, over) = (quarter.first, quarter.over);
        let window = BillableWindow::DEFAULT;
        let before = Span::of_piece(first + over).from;
        let number = window.of(EventTime::from_stored(before));
        let opener = |at: DateTime<Utc>| Opener {
            user: crate::domain::ids::UserId::new(Uuid::from_u128(5)),
            window: window.of(EventTime::from_stored(at)),
            at: EventTime::from_stored(at),
            ad: AdId::new(Uuid::from_u128(3)),
        };
        // One in the window the rest starts in, one in the window before it.
        let inside = window.start_of(number) + TimeDelta::seconds(1);
        let earlier = window.start_of(number) - TimeDelta::seconds(1);
        let plan = quarter.plan();
        let mut read = read_of(first..first + over);
        for at in [inside, earlier] {
            read.openers
                .entry(piece_of(at))
                .or_default()
                .push(opener(at));
        }
        quarter.keep(plan, &read);
        let plan = quarter.plan();
        let opened = plan.opened.expect("the window's start is kept");
        assert_eq!(opened.before, before);
        assert_eq!(plan.raw[0].from, before);
        let held = opener(inside);
        let windows: Vec<_> = opened
            .windows
            .iter()
            .map(|(key, first)| (*key, *first))
            .collect();
        assert_eq!(windows, [((held.user, held.window), (held.at, held.ad))]);
        // A piece of that window gone: the rest reads back for itself.
        quarter.write_at(&(inside + TimeDelta::seconds(2)).to_rfc3339());
        let plan = quarter.plan();
        assert!(plan.opened.is_none_or(|opened| opened.before != before));
    }

    /// Keeps what `read` holds of `plan` in a cache over marks, with no marks read.
    fn keep_over_marks(
        cache: &StretchCache,
        quarter: &Quarter,
        plan: StretchPlan,
        read: &SpanAggregate,
    ) {
        let key = (campaign(), quarter.day);
        cache.keep(key, (&read_with(), &Marks::new()), plan, read);
    }

    /// A plan of the quarter's day by a cache over marks, read `now` with the day's `marks`.
    fn plan_over_marks(
        cache: &StretchCache,
        quarter: &Quarter,
        now: DateTime<Utc>,
        marks: &Marks,
    ) -> StretchPlan {
        let key = (campaign(), quarter.day, cache.sequence(now));
        cache.plan(key, &read_with(), (&quarter.stretch, marks), now)
    }

    #[test]
    fn over_marks_pieces_are_kept_once_settled_until_a_mark_may_be_of_a_write_since() {
        let quarter = Quarter::new();
        let cache = StretchCache::over_marks();
        let first = quarter.first;
        let plan = plan_over_marks(&cache, &quarter, quarter.now, &Marks::new());
        // Settled, with the margin for clocks: the pieces that ended by 10:04:44.
        let settled = pieces("2026-11-29T10:00:00Z", "2026-11-29T10:04:44Z");
        assert_eq!(plan.to_keep, (first..first + settled).collect::<Vec<_>>());
        keep_over_marks(
            &cache,
            &quarter,
            plan,
            &read_of(first..first + quarter.over + 1),
        );

        let later = at("2026-11-29T10:05:10Z");
        let slice = slice_of_piece(first);
        // A mark older than the read's start less the margin was seen by it.
        let seen: Marks = [(slice, at("2026-11-29T10:04:53Z"))].into();
        let plan = plan_over_marks(&cache, &quarter, later, &seen);
        assert_eq!(plan.kept_pieces as i64, settled);
        assert_eq!(plan.raw[0].from, at("2026-11-29T10:04:44Z"));
        // A later one may be of a write the read missed: the slice is read again.
        let since: Marks = [(slice, at("2026-11-29T10:04:55Z"))].into();
        assert_eq!(
            plan_over_marks(&cache, &quarter, later, &since).kept_pieces,
            0
        );
    }

    #[test]
    fn over_marks_an_id_met_again_at_another_time_is_read_again_from_its_earlier_copy() {
        let quarter = Quarter::new();
        let cache = StretchCache::over_marks();
        let first = quarter.first;
        let settled = pieces("2026-11-29T10:00:00Z", "2026-11-29T10:04:44Z");
        let plan = plan_over_marks(&cache, &quarter, quarter.now, &Marks::new());
        let mut read = read_of(first..first + settled);
        read.counted = vec![
            copy(7, "2026-11-29T10:01:00Z"),
            copy(8, "2026-11-29T10:02:00Z"),
        ];
        keep_over_marks(&cache, &quarter, plan, &read);
        let plan = plan_over_marks(&cache, &quarter, quarter.now, &Marks::new());
        assert_eq!(plan.kept_pieces as i64, settled);
        // The rest, read raw, counts another id and id 7 again, stored since at 10:04:50
        // (a copy its writer did not know of, so marked nothing).
        let rest = SpanAggregate {
            counted: vec![
                copy(9, "2026-11-29T10:04:46Z"),
                copy(7, "2026-11-29T10:04:50Z"),
            ],
            ..SpanAggregate::default()
        };
        assert!(!cache.still_right((campaign(), quarter.day), &plan, &rest));
        let plan = plan_over_marks(&cache, &quarter, quarter.now, &Marks::new());
        assert_eq!(
            plan.kept_pieces as i64,
            pieces("2026-11-29T10:00:00Z", "2026-11-29T10:01:00Z")
        );
        assert_eq!(plan.raw[0].from, at("2026-11-29T10:01:00Z"));
        let mut copies = plan.copies.clone();
        copies.sort_by_key(|copy| copy.timestamp);
        assert_eq!(
            copies,
            [
                copy(7, "2026-11-29T10:01:00Z"),
                copy(7, "2026-11-29T10:04:50Z")
            ]
        );
        // Read again from there with both copies known, it holds.
        let mut again = read_of(first + 30..first + settled);
        again.counted = vec![copy(7, "2026-11-29T10:01:00Z")];
        assert!(cache.still_right((campaign(), quarter.day), &plan, &again));
    }

    #[test]
    fn over_marks_a_summary_whose_pieces_another_dropped_meanwhile_reads_again_and_keeps_nothing() {
        let quarter = Quarter::new();
        let cache = StretchCache::over_marks();
        let first = quarter.first;
        let settled = pieces("2026-11-29T10:00:00Z", "2026-11-29T10:04:44Z");
        let plan = plan_over_marks(&cache, &quarter, quarter.now, &Marks::new());
        let read = SpanAggregate {
            counted: vec![copy(7, "2026-11-29T10:01:00Z")],
            ..read_of(first..first + settled)
        };
        keep_over_marks(&cache, &quarter, plan, &read);
        // Two summaries at once, both answering with the kept pieces, both meeting id 7 again.
        let later = at("2026-11-29T10:05:10Z");
        let one = plan_over_marks(&cache, &quarter, quarter.now, &Marks::new());
        let other = plan_over_marks(&cache, &quarter, later, &Marks::new());
        assert_eq!(
            other.to_keep.len(),
            5,
            "10:04:44 to 10:04:54, settled since"
        );
        let rest = SpanAggregate {
            counted: vec![copy(7, "2026-11-29T10:04:50Z")],
            ..SpanAggregate::default()
        };
        assert!(!cache.still_right((campaign(), quarter.day), &one, &rest));
        // The id is forgotten with the pieces the first dropped; the other must not answer.
        assert!(!cache.still_right((campaign(), quarter.day), &other, &rest));
        let newer = read_of(first + settled..first + settled + 5);
        keep_over_marks(&cache, &quarter, other, &newer);
        let key = (campaign(), quarter.day);
        let kept = cache.lock().by_day.get(&key).map(|day| day.pieces.len());
        assert_eq!(kept, Some(30), "the pieces before 10:01 alone");
    }

    #[test]
    fn the_days_read_least_recently_go_first() {
        let quarter = Quarter::new();
        let cache = &quarter.cache;
        let campaign_n = |n: u128| CampaignKey {
            advertiser_id: AdvertiserId::new(Uuid::from_u128(1)),
            campaign_id: CampaignId::new(Uuid::from_u128(100 + n)),
        };
        let (first, over) = (quarter.first, quarter.over);
        let read = |n: u128| {
            let key = (campaign_n(n), quarter.day, cache.sequence(quarter.now));
            let plan = cache.plan(
                key,
                &read_with(),
                (&quarter.stretch, &Marks::new()),
                quarter.now,
            );
            let kept = plan.kept_pieces;
            cache.keep(
                (campaign_n(n), quarter.day),
                (&read_with(), &Marks::new()),
                plan,
                &read_of(first..first + over),
            );
            kept as i64
        };
        assert_eq!(read(0), 0);
        for n in 1..=DAYS_KEPT as u128 {
            read(n);
        }
        // The first campaign went to make room; the last is kept.
        assert_eq!(read(0), 0);
        assert_eq!(read(DAYS_KEPT as u128), over);
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
                Span::of_piece(first + 2),
                Span {
                    from: Span::of_piece(first + 4).from,
                    to: at("2026-11-29T10:15:00Z"),
                },
            ]
        );
    }
}
