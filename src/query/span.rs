//! One stretch of a campaign's UTC day aggregated from its raw partitions, slice by slice:
//! what the slice aggregator stores of a closed slice and what a summary reads raw of a day not
//! yet sealed (docs/DESIGN.md, "Open days from closed slices").
//!
//! A stretch is counted exactly as the whole day would count it ([`super::aggregate`]):
//! - an impression counts at its earliest copy in the day: within the stretch's own rows, and
//!   beyond them through the day's recorded duplicates (the only ids stored with more than one
//!   timestamp), so an id whose earliest copy lies elsewhere is left to that slice;
//! - a billable window counts at its earliest impression: the stretch's read reaches back to
//!   the start of the window holding its first instant, so a window opened just before it is
//!   not counted again;
//! - a click counts at its impression's first click ever, looked up in the click index.

use crate::domain::ids::{AdId, CampaignKey, ImpressionId, UserId};
use crate::domain::partition::EventPartition;
use crate::domain::sketch::{MemberHash, UniqueSketch};
use crate::domain::slices::{Slice, Span, slice_of};
use crate::domain::time::EventTime;
use crate::domain::traffic::{InvalidReason, any_valid};
use crate::query::aggregate::{BillableWindow, SliceCounts, keep_earliest};
use crate::store::{CopyRow, ImpressionSummaryRow, Store, StoreError};
use futures::{StreamExt, TryStreamExt, stream};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The copies of every id a campaign-day stored with more than one timestamp.
#[derive(Debug, Clone, Default)]
pub(crate) struct Duplicates(HashMap<ImpressionId, Vec<CopyRow>>);

impl Duplicates {
    pub(crate) fn new(rows: Vec<CopyRow>) -> Self {
        let mut copies: HashMap<ImpressionId, Vec<CopyRow>> = HashMap::new();
        for row in rows {
            copies.entry(row.impression_id).or_default().push(row);
        }
        Self(copies)
    }

    /// The earliest copy of `id` and whether any copy is valid, if `id` has duplicates.
    fn earliest(&self, id: ImpressionId) -> Option<(EventTime, Option<InvalidReason>)> {
        let copies = self.0.get(&id)?;
        let first = copies.iter().map(|copy| copy.timestamp).min()?;
        Some((first, any_valid(copies.iter().map(|copy| copy.invalid))))
    }
}

/// A stretch's counts and users reached, by slice and ad.
#[derive(Debug, Clone, Default)]
pub(crate) struct SpanAggregate {
    pub(crate) counts: BTreeMap<(Slice, AdId), SliceCounts>,
    pub(crate) users: BTreeMap<(Slice, AdId), UniqueSketch>,
    /// Raw rows read (impressions, the window's reach-back included, and clicks).
    pub(crate) rows_read: usize,
}

impl SpanAggregate {
    fn counts(&mut self, slice: Slice, ad: AdId) -> &mut SliceCounts {
        self.counts.entry((slice, ad)).or_default()
    }
}

/// Reads `span` of one UTC day (its `partitions`) and aggregates it.
pub(crate) async fn aggregate_span(
    store: &dyn Store,
    campaign: CampaignKey,
    partitions: &[EventPartition],
    span: Span,
    duplicates: &Duplicates,
    window: BillableWindow,
    concurrency: usize,
) -> Result<SpanAggregate, StoreError> {
    let concurrency = concurrency.max(1);
    // Windows divide the day and are aligned at the epoch: the reach-back stays in the day.
    let opening = window.start_of(window.of(EventTime::from_stored(span.from)));
    let read = Span {
        from: opening,
        to: span.to,
    };
    let (earliest, impressions_read) =
        earliest_copies(store, partitions, read, duplicates, concurrency).await?;
    let mut aggregate = SpanAggregate {
        rows_read: impressions_read,
        ..SpanAggregate::default()
    };
    let mut windows: HashMap<(UserId, i64), (EventTime, AdId)> = HashMap::new();
    for row in earliest.into_values() {
        let at = row.timestamp;
        let in_span = span.contains(at.instant());
        if row.invalid.is_some() {
            if in_span {
                aggregate
                    .counts(slice_of(at.instant()), row.ad_id)
                    .invalid_impressions += 1;
            }
            continue;
        }
        if in_span {
            let slice = slice_of(at.instant());
            aggregate.counts(slice, row.ad_id).impressions += 1;
            aggregate
                .users
                .entry((slice, row.ad_id))
                .or_default()
                .insert(MemberHash::of(row.user_id.as_uuid().as_bytes()));
        }
        windows
            .entry((row.user_id, window.of(at)))
            .and_modify(|first| *first = (*first).min((at, row.ad_id)))
            .or_insert((at, row.ad_id));
    }
    for (at, ad) in windows.into_values() {
        if span.contains(at.instant()) {
            aggregate
                .counts(slice_of(at.instant()), ad)
                .billable_impressions += 1;
        }
    }
    let (clicks, clicks_read) =
        first_clicks_in(store, campaign, partitions, span, concurrency).await?;
    aggregate.rows_read += clicks_read;
    for click in clicks {
        let counts = aggregate.counts(slice_of(click.timestamp.instant()), click.ad_id);
        match click.invalid {
            None => counts.clicks += 1,
            Some(_) => counts.invalid_clicks += 1,
        }
    }
    Ok(aggregate)
}

/// Each id of `read` at its earliest copy in the day, valid if any copy is; ids whose earliest
/// copy lies outside `read` are left out. Returns them and how many rows were read.
async fn earliest_copies(
    store: &dyn Store,
    partitions: &[EventPartition],
    read: Span,
    duplicates: &Duplicates,
    concurrency: usize,
) -> Result<(HashMap<ImpressionId, ImpressionSummaryRow>, usize), StoreError> {
    let mut earliest: HashMap<ImpressionId, ImpressionSummaryRow> = HashMap::new();
    let mut rows_read = 0;
    let mut reads = stream::iter(partitions.iter().copied())
        .map(|partition| async move {
            store
                .read_impression_summaries_between(&partition, read)
                .await
        })
        .buffer_unordered(concurrency);
    while let Some(rows) = reads.next().await {
        let rows = rows?;
        rows_read += rows.len();
        for row in rows {
            keep_earliest(&mut earliest, row);
        }
    }
    earliest.retain(|id, row| match duplicates.earliest(*id) {
        None => true,
        Some((first, invalid)) => {
            row.invalid = any_valid([row.invalid, invalid]);
            // Its earliest copy is this row, or lies before it, in a stretch that counts it.
            first >= row.timestamp
        }
    });
    Ok((earliest, rows_read))
}

/// The first click ever of each impression whose first click lies in `span`, valid if any of
/// its clicks is; and how many click rows were read.
async fn first_clicks_in(
    store: &dyn Store,
    campaign: CampaignKey,
    partitions: &[EventPartition],
    span: Span,
    concurrency: usize,
) -> Result<(Vec<crate::store::ClickRow>, usize), StoreError> {
    let mut reads = stream::iter(partitions.iter().copied())
        .map(|partition| async move { store.read_clicks_between(&partition, span).await })
        .buffer_unordered(concurrency);
    let mut clicked = HashSet::new();
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
            Ok(first.filter(|first| span.contains(first.timestamp.instant())))
        })
        .try_collect()
        .await?;
    Ok((firsts, rows_read))
}
