//! Stretches of a campaign's UTC day aggregated together from its raw partitions, slice by
//! slice: what the slice aggregator stores of closed slices and what a summary reads raw of a
//! day not yet sealed (docs/DESIGN.md, "Open days from closed slices").
//!
//! The stretches are counted exactly as the whole day would count them ([`super::aggregate`]):
//! - an impression counts at its earliest copy in the day: within the rows of every stretch
//!   read together (so two copies read raw count once however far apart they lie), and beyond
//!   them through the day's recorded duplicates (the only ids stored with more than one
//!   timestamp), so an id whose earliest copy lies elsewhere is left to that slice;
//! - a billable window counts at its earliest impression: each stretch's read reaches back to
//!   the start of the window holding its first instant, so a window opened just before it is
//!   not counted again;
//! - a click counts at its impression's first click ever, looked up in the click index.

use crate::domain::bucket::BucketCount;
use crate::domain::conversion::DecidedConversion;
use crate::domain::ids::{AdId, CampaignKey, ImpressionId, UserId};
use crate::domain::partition::EventPartition;
use crate::domain::sketch::{MemberHash, UniqueSketch};
use crate::domain::slices::{Grain, Slice, Span, slice_of_piece};
use crate::domain::time::EventTime;
use crate::domain::traffic::{InvalidReason, any_valid};
use crate::domain::view::ViewWindow;
use crate::query::aggregate::{BillableWindow, SliceCounts, keep_earliest};
use crate::query::id_map::{IdMap, IdSet};
use crate::query::views::ViewJoin;
use crate::store::{CopyRow, ImpressionSummaryRow, Store, StoreError};
use futures::{StreamExt, TryStreamExt, stream};
use std::collections::{BTreeMap, BTreeSet};

/// The copies of every id a campaign-day stored with more than one timestamp.
#[derive(Debug, Clone, Default)]
pub(crate) struct Duplicates(IdMap<ImpressionId, Vec<CopyRow>>);

impl Duplicates {
    pub(crate) fn new(rows: Vec<CopyRow>) -> Self {
        let mut duplicates = Self::default();
        duplicates.add(&rows);
        duplicates
    }

    pub(crate) fn add(&mut self, rows: &[CopyRow]) {
        for row in rows {
            self.0.entry(row.impression_id).or_default().push(*row);
        }
    }

    /// Whether `copy` is recorded already.
    pub(crate) fn holds(&self, copy: &CopyRow) -> bool {
        self.0
            .get(&copy.impression_id)
            .is_some_and(|copies| copies.iter().any(|held| held.timestamp == copy.timestamp))
    }

    /// The earliest copy of `id` and whether any copy is valid, if `id` has duplicates.
    fn earliest(&self, id: ImpressionId) -> Option<(EventTime, Option<InvalidReason>)> {
        let copies = self.0.get(&id)?;
        let first = copies.iter().map(|copy| copy.timestamp).min()?;
        Some((first, any_valid(copies.iter().map(|copy| copy.invalid))))
    }
}

/// Stretches' counts and users reached, by slice (or piece, as asked) and ad.
#[derive(Debug, Clone, Default)]
pub(crate) struct SpanAggregate {
    pub(crate) counts: BTreeMap<(Slice, AdId), SliceCounts>,
    pub(crate) users: BTreeMap<(Slice, AdId), UniqueSketch>,
    /// Raw rows read (impressions, the window's reach-back included, and clicks).
    pub(crate) rows_read: usize,
    /// Every copy of each id read here that the copies index holds with more than one
    /// timestamp (when asked to look).
    pub(crate) found_duplicates: Vec<CopyRow>,
    /// Every copy of each id that the rows read here hold with more than one timestamp.
    pub(crate) read_duplicates: Vec<CopyRow>,
    /// Read by piece: each piece's billable windows, at the earliest impression of each
    /// there (what a later read can take instead of reading back to its window's start).
    pub(crate) openers: BTreeMap<Slice, Vec<Opener>>,
    /// Read by piece: each impression counted in the spans, at the copy counted (what a
    /// later read meets again if the id is stored once more, at another time).
    pub(crate) counted: Vec<CopyRow>,
}

/// A user's earliest valid impression in a billable window, within some stretch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Opener {
    pub(crate) user: UserId,
    pub(crate) window: i64,
    pub(crate) at: EventTime,
    pub(crate) ad: AdId,
}

/// A user's window (numbered as [`BillableWindow::of`] does) and its earliest valid
/// impression, with the ad it was of.
pub(crate) type Windows = IdMap<(UserId, i64), (EventTime, AdId)>;

/// The windows opened before `before`, within the window holding it: the first span read
/// need not read back to its window's start for them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Opened {
    pub(crate) before: chrono::DateTime<chrono::Utc>,
    /// Shared with the cache that gathered them, which adds to them as pieces are kept.
    pub(crate) windows: std::sync::Arc<Windows>,
}

impl SpanAggregate {
    fn counts(&mut self, slice: Slice, ad: AdId) -> &mut SliceCounts {
        self.counts.entry((slice, ad)).or_default()
    }

    /// An aggregate kept by piece, kept by slice instead.
    pub(crate) fn into_slices(self) -> SpanAggregate {
        let mut slices = SpanAggregate::default();
        slices.add_pieces(&self);
        SpanAggregate {
            rows_read: self.rows_read,
            found_duplicates: self.found_duplicates,
            read_duplicates: self.read_duplicates,
            ..slices
        }
    }

    /// Adds the counts and users of `pieces`, an aggregate kept by piece, to these, by slice.
    pub(crate) fn add_pieces(&mut self, pieces: &SpanAggregate) {
        for ((piece, ad), counts) in &pieces.counts {
            self.counts(slice_of_piece(*piece), *ad).add(counts);
        }
        for ((piece, ad), users) in &pieces.users {
            self.users
                .entry((slice_of_piece(*piece), *ad))
                .or_default()
                .merge(users);
        }
    }
}

/// Reads `spans` of one UTC day (its `partitions`), oldest first and apart, and aggregates
/// them together, kept apart by `grain`.
pub(crate) async fn aggregate_spans(
    store: &dyn Store,
    campaign: CampaignKey,
    partitions: &[EventPartition],
    spans: &[Span],
    (duplicates, find_duplicates, opened): (&Duplicates, Option<&[BucketCount]>, Option<&Opened>),
    (window, view_window, grain): (BillableWindow, ViewWindow, Grain),
    concurrency: usize,
) -> Result<SpanAggregate, StoreError> {
    let concurrency = concurrency.max(1);
    // Windows divide the day and are aligned at the epoch: the reach-back stays in the day.
    // A span whose windows opened before it are known is read from its own start.
    let reads: Vec<Span> = spans
        .iter()
        .map(|span| Span {
            from: if opened.is_some_and(|opened| opened.before == span.from) {
                span.from
            } else {
                window.start_of(window.of(EventTime::from_stored(span.from)))
            },
            to: span.to,
        })
        .collect();
    let in_spans = |at: EventTime| spans.iter().any(|span| span.contains(at.instant()));
    let mut views =
        ViewJoin::read(store, partitions, Some(spans), view_window, concurrency).await?;
    let (earliest, impressions_read, (found, read_duplicates)) = earliest_copies(
        store,
        partitions,
        &reads,
        (duplicates, find_duplicates),
        (concurrency, &mut views),
    )
    .await?;
    let mut aggregate = SpanAggregate {
        rows_read: impressions_read,
        found_duplicates: found,
        read_duplicates,
        ..SpanAggregate::default()
    };
    let mut windows: Windows = IdMap::default();
    windows.reserve(earliest.len());
    // Read by piece: each piece's windows at their earliest impression there.
    let mut piece_openers: IdMap<(i64, UserId, i64), (EventTime, AdId)> = IdMap::default();
    for row in earliest.into_values() {
        let at = row.timestamp;
        let in_span = in_spans(at);
        if in_span && grain == Grain::Piece {
            aggregate.counted.push(copy_of(&row));
        }
        if row.invalid.is_some() {
            if in_span {
                aggregate
                    .counts(grain.of(at.instant()), row.ad_id)
                    .invalid_impressions += 1;
            }
            continue;
        }
        if in_span {
            let slice = grain.of(at.instant());
            let counts = aggregate.counts(slice, row.ad_id);
            counts.impressions += 1;
            counts.views.count(&views.views_of(row.impression_id));
            aggregate
                .users
                .entry((slice, row.ad_id))
                .or_default()
                .insert(MemberHash::of(row.user_id.as_uuid().as_bytes()));
        }
        if in_span && grain == Grain::Piece {
            piece_openers
                .entry((grain.of(at.instant()), row.user_id, window.of(at)))
                .and_modify(|first| *first = (*first).min((at, row.ad_id)))
                .or_insert((at, row.ad_id));
        }
        windows
            .entry((row.user_id, window.of(at)))
            .and_modify(|first| *first = (*first).min((at, row.ad_id)))
            .or_insert((at, row.ad_id));
    }
    // A window opened before the spans counts there, not here. Only the windows read here
    // are looked up: a busy campaign's kept pieces opened thousands.
    if let Some(opened) = opened {
        for (key, first) in &mut windows {
            if let Some(earlier) = opened.windows.get(key) {
                *first = (*first).min(*earlier);
            }
        }
    }
    for (at, ad) in windows.into_values() {
        if in_spans(at) {
            aggregate
                .counts(grain.of(at.instant()), ad)
                .billable_impressions += 1;
        }
    }
    for ((piece, user, number), (at, ad)) in piece_openers {
        aggregate.openers.entry(piece).or_default().push(Opener {
            user,
            window: number,
            at,
            ad,
        });
    }
    let (clicks, clicks_read) =
        first_clicks_in(store, campaign, partitions, spans, concurrency).await?;
    aggregate.rows_read += clicks_read;
    for click in clicks {
        let counts = aggregate.counts(grain.of(click.timestamp.instant()), click.ad_id);
        match click.invalid {
            None => counts.clicks += 1,
            Some(_) => counts.invalid_clicks += 1,
        }
    }
    // Conversions credited to the campaign at a time in the spans, each span's read by time:
    // a poll of the newest seconds reads theirs, however many the day holds.
    if let Some(day) = partitions.first().map(|partition| partition.day) {
        let conversions: Vec<Vec<DecidedConversion>> = stream::iter(spans.to_vec())
            .map(|span| store.read_campaign_conversions(campaign, day, span))
            .buffer_unordered(concurrency)
            .try_collect()
            .await?;
        let conversions = conversions.iter().flatten();
        aggregate.rows_read += conversions.clone().count();
        for decided in conversions {
            let at = decided.conversion.timestamp.instant();
            if let Some(ad) = decided
                .ad_id()
                .filter(|_| in_spans(EventTime::from_stored(at)))
            {
                aggregate
                    .counts(grain.of(at), ad)
                    .conversions
                    .count(decided);
            }
        }
    }
    Ok(aggregate)
}

/// Every partition paired with every span: the reads of a fan-out.
fn partition_spans(partitions: &[EventPartition], spans: &[Span]) -> Vec<(EventPartition, Span)> {
    spans
        .iter()
        .flat_map(|span| partitions.iter().map(|partition| (*partition, *span)))
        .collect()
}

/// Copies of one impression id recorded as duplicates, earliest first.
const MAX_COPIES_RECORDED: usize = 64;

/// Each id of `reads` at its earliest copy in the day, valid if any copy is; ids whose
/// earliest copy lies outside `reads` are left out. With `find` (the bucket counts in force that
/// day), every id read is looked up in the copies index of each partition a copy of it can lie
/// in (one per count: a copy is written under the count in force at its own time), and the ids
/// found with more than one timestamp are returned (and counted) as duplicates too. Returns
/// the earliest copies, how many rows were read, and the duplicates found and those read.
async fn earliest_copies(
    store: &dyn Store,
    partitions: &[EventPartition],
    reads: &[Span],
    (duplicates, find): (&Duplicates, Option<&[BucketCount]>),
    (concurrency, views): (usize, &mut ViewJoin),
) -> Result<
    (
        IdMap<ImpressionId, ImpressionSummaryRow>,
        usize,
        (Vec<CopyRow>, Vec<CopyRow>),
    ),
    StoreError,
> {
    let mut earliest: IdMap<ImpressionId, ImpressionSummaryRow> = IdMap::default();
    let mut read_copies: IdMap<ImpressionId, Vec<CopyRow>> = IdMap::default();
    let mut rows_read = 0;
    let mut read_ids: Vec<(EventPartition, Vec<ImpressionId>)> = Vec::new();
    let mut reads = stream::iter(partition_spans(partitions, reads))
        .map(|(partition, read)| async move {
            let rows = store
                .read_impression_summaries_between(&partition, read)
                .await?;
            Ok::<_, StoreError>((partition, rows))
        })
        .buffer_unordered(concurrency);
    while let Some(result) = reads.next().await {
        let (partition, rows) = result?;
        rows_read += rows.len();
        earliest.reserve(rows.len());
        if find.is_some() && !rows.is_empty() {
            read_ids.push((
                partition,
                rows.iter().map(|row| row.impression_id).collect(),
            ));
        }
        for row in rows {
            views.see(&row);
            if let Some(held) = earliest.get(&row.impression_id)
                && held.timestamp != row.timestamp
            {
                read_copies
                    .entry(row.impression_id)
                    .or_insert_with(|| vec![copy_of(held)])
                    .push(copy_of(&row));
            }
            keep_earliest(&mut earliest, row);
        }
    }
    let found = match find {
        // One partition's lookups at a time: on Cassandra each id is a point read in a large
        // partition, dearer for the node than for this process, and this is background work.
        Some(counts) => found_duplicates(store, lookups(read_ids, counts), 1).await?,
        None => Vec::new(),
    };
    let mut all = duplicates.clone();
    all.add(&found);
    earliest.retain(|id, row| match all.earliest(*id) {
        None => true,
        Some((first, invalid)) => {
            row.invalid = any_valid([row.invalid, invalid]);
            // Its earliest copy is this row, or lies before it, in a stretch that counts it.
            first >= row.timestamp
        }
    });
    Ok((
        earliest,
        rows_read,
        (found, read_copies.into_values().flatten().collect()),
    ))
}

fn copy_of(row: &ImpressionSummaryRow) -> CopyRow {
    CopyRow {
        impression_id: row.impression_id,
        timestamp: row.timestamp,
        invalid: row.invalid,
    }
}

/// The partitions to look each read id up in: under every bucket count in force that day
/// (usually one, so the partition it was read from).
fn lookups(
    read_ids: Vec<(EventPartition, Vec<ImpressionId>)>,
    counts: &[BucketCount],
) -> Vec<(EventPartition, Vec<ImpressionId>)> {
    // Under one count, an id's partition is the one it was read from.
    if counts.len() <= 1 {
        return read_ids;
    }
    let mut by_partition: BTreeMap<EventPartition, BTreeSet<ImpressionId>> = BTreeMap::new();
    for (read_from, ids) in read_ids {
        for id in ids {
            for count in counts {
                let partition = EventPartition {
                    bucket: count.bucket_of(id.as_uuid()),
                    ..read_from
                };
                by_partition.entry(partition).or_default().insert(id);
            }
        }
    }
    by_partition
        .into_iter()
        .map(|(partition, ids)| (partition, ids.into_iter().collect()))
        .collect()
}

/// Every copy of the ids of each partition that the copies index holds with more than one
/// timestamp (at most the earliest [`MAX_COPIES_RECORDED`] of an id, the first carrying
/// whether any copy is valid).
async fn found_duplicates(
    store: &dyn Store,
    read_ids: Vec<(EventPartition, Vec<ImpressionId>)>,
    concurrency: usize,
) -> Result<Vec<CopyRow>, StoreError> {
    let found: Vec<Vec<CopyRow>> = stream::iter(read_ids)
        .map(|(partition, ids)| async move { store.impression_copies(&partition, &ids).await })
        .buffer_unordered(concurrency)
        .try_collect()
        .await?;
    let mut by_id: IdMap<ImpressionId, Vec<CopyRow>> = IdMap::default();
    for copy in found.into_iter().flatten() {
        by_id.entry(copy.impression_id).or_default().push(copy);
    }
    let mut duplicates = Vec::new();
    for mut copies in by_id.into_values() {
        copies.sort_by_key(|copy| copy.timestamp);
        copies.dedup_by_key(|copy| copy.timestamp);
        if copies.len() < 2 {
            continue;
        }
        let valid = any_valid(copies.iter().map(|copy| copy.invalid));
        copies.truncate(MAX_COPIES_RECORDED);
        if let Some(first) = copies.first_mut() {
            first.invalid = valid;
        }
        duplicates.extend(copies);
    }
    Ok(duplicates)
}

/// The first click ever of each impression whose first click lies in `spans`, valid if any of
/// its clicks is; and how many click rows were read.
async fn first_clicks_in(
    store: &dyn Store,
    campaign: CampaignKey,
    partitions: &[EventPartition],
    spans: &[Span],
    concurrency: usize,
) -> Result<(Vec<crate::store::ClickRow>, usize), StoreError> {
    let mut reads = stream::iter(partition_spans(partitions, spans))
        .map(|(partition, span)| async move { store.read_clicks_between(&partition, span).await })
        .buffer_unordered(concurrency);
    let mut clicked: IdSet<ImpressionId> = IdSet::default();
    let mut rows_read = 0;
    while let Some(rows) = reads.next().await {
        let rows = rows?;
        rows_read += rows.len();
        clicked.extend(rows.into_iter().map(|row| row.impression_id));
    }
    let firsts: Vec<crate::store::ClickRow> = stream::iter(clicked)
        .map(|impression_id| store.first_click(campaign, impression_id))
        .buffer_unordered(concurrency)
        .try_filter_map(|first| async move {
            Ok(first.filter(|first| {
                spans
                    .iter()
                    .any(|span| span.contains(first.timestamp.instant()))
            }))
        })
        .try_collect()
        .await?;
    Ok((firsts, rows_read))
}
