//! A campaign's UTC day not yet sealed, answered from the stored aggregates of its closed
//! slices and, for the rest, its raw partitions (docs/DESIGN.md, "Open days from closed
//! slices"): the newest stretch that is still open, and any closed slice whose aggregate is
//! missing or older than its latest mark. The answer is the raw day's, slice for slice; only
//! its cost differs, bounded by the raw stretches' events rather than by the day's.

use super::aggregate::{BillableWindow, DayAggregate, Reach, SliceCounts};
use super::slice_memo::{Decoded, MemoKey, Signature, SliceMemo};
use super::span::{Duplicates, SpanAggregate, aggregate_spans};
use super::stretch_cache::{KeptSlices, Marks, ReadWith, StretchCache};
use crate::domain::bucket::BucketCount;
use crate::domain::ids::{AdId, CampaignKey};
use crate::domain::partition::EventPartition;
use crate::domain::sealing::SealState;
use crate::domain::sketch::UniqueSketch;
use crate::domain::slices::{Grain, Slice, SliceRule, Span, slices_of_day};
use crate::domain::time::{Day, SLICES_PER_HOUR};
use crate::domain::view::ViewWindow;
use crate::store::{CopyRow, OpenDayParts, ReachLevel, Store, StoreError};
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

/// What an open day is read with.
#[derive(Debug, Clone)]
pub(crate) struct OpenDayRead {
    pub(crate) campaign: CampaignKey,
    pub(crate) day: Day,
    pub(crate) partitions: Vec<EventPartition>,
    pub(crate) levels: Vec<ReachLevel>,
    pub(crate) window: BillableWindow,
    pub(crate) view_window: ViewWindow,
    pub(crate) rule: SliceRule,
    pub(crate) now: DateTime<Utc>,
    pub(crate) concurrency: usize,
    /// The bucket counts in force that day, when the stretches read raw look their ids up in
    /// the copies index under each (a seal: exact even where the aggregator has not found a
    /// duplicate yet); `None` takes the recorded duplicates as they are (a summary).
    pub(crate) find_duplicates: Option<Vec<BucketCount>>,
}

/// A day's counts by slice and ad, and its users by slice (every ad together) and, when the
/// answer lists ads, by slice and ad, before they become a [`DayAggregate`].
#[derive(Default)]
struct BySlice {
    counts: BTreeMap<(Slice, AdId), SliceCounts>,
    users: BTreeMap<Slice, UniqueSketch>,
    ad_users: BTreeMap<(Slice, AdId), UniqueSketch>,
}

/// Whether `levels` count each ad's users apart.
fn per_ad(levels: &[ReachLevel]) -> bool {
    levels.contains(&ReachLevel::AdDay) || levels.contains(&ReachLevel::AdHour)
}

impl BySlice {
    fn add_span(&mut self, span: &SpanAggregate, per_ad: bool) {
        for (key, counts) in &span.counts {
            self.counts.entry(*key).or_default().add(counts);
        }
        for ((slice, ad), users) in &span.users {
            self.users.entry(*slice).or_default().merge(users);
            if per_ad {
                self.ad_users.entry((*slice, *ad)).or_default().merge(users);
            }
        }
    }

    /// Adds the kept pieces' counts and users: each slice's users, every ad together, were
    /// merged as the pieces were kept.
    fn add_kept(&mut self, kept: &KeptSlices, per_ad: bool) {
        for (key, counts) in &kept.by_ad.counts {
            self.counts.entry(*key).or_default().add(counts);
        }
        for (slice, users) in &kept.users {
            self.users.entry(*slice).or_default().merge(users);
        }
        if per_ad {
            for (key, users) in &kept.by_ad.users {
                self.ad_users.entry(*key).or_default().merge(users);
            }
        }
    }

    fn into_day(self, levels: &[ReachLevel]) -> DayAggregate {
        let mut reach = Reach::with_levels(levels);
        for (slice, users) in &self.users {
            let hour = slice.div_euclid(SLICES_PER_HOUR);
            if let Some(day) = &mut reach.day {
                day.merge(users);
            }
            if let Some(hours) = &mut reach.hours {
                hours.entry(hour).or_default().merge(users);
            }
        }
        for ((slice, ad), users) in &self.ad_users {
            let hour = slice.div_euclid(SLICES_PER_HOUR);
            if let Some(ads) = &mut reach.ads {
                ads.entry(*ad).or_default().merge(users);
            }
            if let Some(ad_hours) = &mut reach.ad_hours {
                ad_hours.entry((hour, *ad)).or_default().merge(users);
            }
        }
        DayAggregate {
            slices: self.counts,
            reach,
        }
    }
}

/// Reads an open day: its slice states, duplicates and aggregates in one small read (or its
/// states alone, when `memo` holds what the same aggregates decoded to), then each stretch of
/// slices no aggregate answers for, less the pieces of it `kept` holds (a summary over a store
/// no other process writes). Returns the day and how many slices its aggregates answered.
pub(crate) async fn read_open_day(
    store: &dyn Store,
    read: &OpenDayRead,
    kept: Option<&StretchCache>,
    memo: Option<&SliceMemo>,
) -> Result<(DayAggregate, usize), StoreError> {
    let started = Instant::now();
    // Kept pieces were read without looking their ids up: a seal looks every id up.
    let kept = kept.filter(|_| read.find_duplicates.is_none());
    // Before anything is read: a write after it may have changed what this read counts.
    let sequence = kept.map(|kept| kept.sequence(read.now));
    let per_ad = per_ad(&read.levels);
    let aggregates = from_aggregates(store, read, memo).await?;
    let from_aggregates = aggregates.answered.len();
    metrics::histogram!("adevents_open_day_read_seconds", "part" => "aggregates")
        .record(started.elapsed().as_secs_f64());

    let raw_started = Instant::now();
    let mut day = BySlice::default();
    let duplicates = Duplicates::new(aggregates.duplicates);
    let stretches = raw_stretches(read.day, |slice| aggregates.answered.contains(&slice));
    let read_with = ReadWith {
        partitions: read.partitions.clone(),
        window: read.window,
        view_window: read.view_window,
    };
    let lookups = read
        .find_duplicates
        .as_deref()
        .filter(|_| from_aggregates > 0);
    let mut rows_read = 0;
    // Kept pieces answer with the rest read raw only if no write reached back to them while
    // it was read; after two such reads the stretch is read raw whole.
    for attempt in 0..3 {
        let plan = kept
            .zip(sequence)
            .filter(|_| attempt < 2)
            .map(|(kept, sequence)| {
                kept.plan(
                    (read.campaign, read.day, sequence),
                    &read_with,
                    (&stretches, &aggregates.marks),
                    read.now,
                )
            });
        let mut duplicates = duplicates.clone();
        let (raw, grain) = match &plan {
            Some(plan) => {
                duplicates.add(&plan.copies);
                (plan.raw.clone(), Grain::Piece)
            }
            None => (stretches.clone(), Grain::Slice),
        };
        let mut aggregate = SpanAggregate::default();
        if !raw.is_empty() {
            // Read together, so that two copies of an id in different stretches count once.
            // A day read raw whole holds every copy of its ids itself: lookups only help
            // where aggregates answer for part of it.
            aggregate = aggregate_spans(
                store,
                read.campaign,
                &read.partitions,
                &raw,
                (
                    &duplicates,
                    lookups,
                    plan.as_ref().and_then(|plan| plan.opened.as_ref()),
                ),
                (read.window, read.view_window, grain),
                read.concurrency,
            )
            .await?;
            rows_read += aggregate.rows_read;
        }
        if let Some((kept, plan)) = kept.zip(plan) {
            if !kept.still_right((read.campaign, read.day), &plan, &aggregate) {
                continue;
            }
            metrics::counter!("adevents_open_day_pieces_total", "from" => "kept")
                .increment(plan.kept_pieces as u64);
            day.add_kept(&plan.kept, per_ad);
            kept.keep(
                (read.campaign, read.day),
                (&read_with, &aggregates.marks),
                plan,
                &aggregate,
            );
            aggregate = aggregate.into_slices();
        }
        day.add_span(&aggregate, per_ad);
        break;
    }
    metrics::histogram!("adevents_open_day_read_seconds", "part" => "raw")
        .record(raw_started.elapsed().as_secs_f64());
    metrics::counter!("adevents_open_day_rows_read_total").increment(rows_read as u64);
    metrics::counter!("adevents_open_day_slices_total", "from" => "aggregates")
        .increment(from_aggregates as u64);
    metrics::counter!("adevents_open_day_slices_total", "from" => "raw")
        .increment((96 - from_aggregates) as u64);
    let mut answer = aggregates.day;
    answer.merge(day.into_day(&read.levels));
    Ok((answer, from_aggregates))
}

/// What an open day's slice aggregates answer for, and the day's recorded duplicates.
struct FromAggregates {
    day: DayAggregate,
    /// The slices whose aggregates answered (closed, current, and decoded).
    answered: HashSet<Slice>,
    duplicates: Vec<CopyRow>,
    /// Each slice's latest mark.
    marks: Marks,
}

/// Each slice's latest mark among `states`.
fn marks_of(states: &[(Slice, SealState)]) -> Marks {
    states
        .iter()
        .filter_map(|(slice, state)| state.late_at.map(|at| (*slice, at)))
        .collect()
}

/// The slices whose aggregates may answer `now`, and each one's aggregate's read start.
fn answering(read: &OpenDayRead, states: Vec<(Slice, SealState)>) -> (HashSet<Slice>, Signature) {
    let states: HashMap<Slice, SealState> = states.into_iter().collect();
    let signature: Signature = slices_of_day(read.day)
        .filter_map(|slice| {
            let state = states.get(&slice)?;
            (read.rule.is_late(slice, read.now) && state.is_current())
                .then_some((slice, state.sealed_from))
        })
        .collect();
    let answering = signature.iter().map(|(slice, _)| *slice).collect();
    (answering, signature)
}

/// Reads and decodes the day's slice aggregates, or only its states when `memo` holds what
/// the same aggregates decoded to.
async fn from_aggregates(
    store: &dyn Store,
    read: &OpenDayRead,
    memo: Option<&SliceMemo>,
) -> Result<FromAggregates, StoreError> {
    let key: MemoKey = (read.campaign, read.day, read.levels.clone());
    // The states first, on their own: aggregates read after them are at least as new as the
    // states say (each is written before its state), so they may be kept under them.
    let mut kept_under = None;
    if let Some(memo) = memo {
        let rows = store
            .read_open_day(read.campaign, read.day, OpenDayParts::States)
            .await?;
        let marks = marks_of(&rows.states);
        let (_, signature) = answering(read, rows.states);
        if let Some(decoded) = memo.get(&key, &signature) {
            return Ok(FromAggregates {
                day: decoded.aggregate,
                answered: decoded.answered,
                duplicates: rows.duplicates,
                marks,
            });
        }
        kept_under = Some((memo, signature));
    }
    let per_ad = per_ad(&read.levels);
    let parts = if per_ad {
        OpenDayParts::AggregatesWithAdUsers
    } else {
        OpenDayParts::Aggregates
    };
    let rows = store.read_open_day(read.campaign, read.day, parts).await?;
    let marks = marks_of(&rows.states);
    let (answering, signature) = answering(read, rows.states);
    let mut day = BySlice::default();
    // A slice with a sketch that does not decode (or missing) is read raw, every ad of it.
    let mut undecodable: HashSet<Slice> = answering.clone();
    for (slice, users) in rows.users {
        if !answering.contains(&slice) {
            continue;
        }
        if let Ok(users) = UniqueSketch::from_bytes(&users) {
            day.users.insert(slice, users);
            undecodable.remove(&slice);
        }
    }
    for row in rows.aggregates {
        let slice = row.counts.slice;
        if !answering.contains(&slice) {
            continue;
        }
        if per_ad {
            match UniqueSketch::from_bytes(&row.users) {
                Ok(users) => {
                    day.ad_users.insert((slice, row.counts.ad_id), users);
                }
                Err(_) => {
                    undecodable.insert(slice);
                }
            }
        }
        let counts = &row.counts;
        day.counts
            .insert((slice, counts.ad_id), SliceCounts::of_row(counts));
    }
    day.counts
        .retain(|(slice, _), _| !undecodable.contains(slice));
    day.users.retain(|slice, _| !undecodable.contains(slice));
    day.ad_users
        .retain(|(slice, _), _| !undecodable.contains(slice));
    let decoded = Decoded {
        aggregate: day.into_day(&read.levels),
        answered: answering
            .into_iter()
            .filter(|slice| !undecodable.contains(slice))
            .collect(),
    };
    if let Some((memo, states_first)) = kept_under
        && states_first == signature
    {
        memo.put(key, signature, &decoded);
    }
    Ok(FromAggregates {
        day: decoded.aggregate,
        answered: decoded.answered,
        duplicates: rows.duplicates,
        marks,
    })
}

/// The day's maximal runs of slices that `answered` does not answer for, oldest first.
fn raw_stretches(day: Day, answered: impl Fn(Slice) -> bool) -> Vec<Span> {
    let mut stretches = Vec::new();
    let mut run: Option<(Slice, Slice)> = None;
    for slice in slices_of_day(day) {
        if answered(slice) {
            if let Some((first, last)) = run.take() {
                stretches.push(Span::of_slices(first, last));
            }
        } else {
            run = Some(run.map_or((slice, slice), |(first, _)| (first, slice)));
        }
    }
    if let Some((first, last)) = run {
        stretches.push(Span::of_slices(first, last));
    }
    stretches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slices_no_aggregate_answers_for_are_read_in_runs() {
        let day = Day::new("2026-11-28".parse().expect("date"));
        let first = day.first_slice();
        let answered =
            |slice: Slice| (first + 2..first + 90).contains(&slice) && slice != first + 40;
        let runs = raw_stretches(day, answered);
        assert_eq!(
            runs,
            [
                Span::of_slices(first, first + 1),
                Span::of_slices(first + 40, first + 40),
                Span::of_slices(first + 90, first + 95),
            ]
        );
        assert!(raw_stretches(day, |_| true).is_empty());
        assert_eq!(
            raw_stretches(day, |_| false),
            [Span::of_slices(first, first + 95)]
        );
    }
}
