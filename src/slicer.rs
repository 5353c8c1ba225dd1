//! Aggregating the closed slices of days not yet sealed (docs/DESIGN.md, "Open days from
//! closed slices"): every few seconds, each campaign-day of today and yesterday that is not
//! sealed has each slice past its grace aggregated once from the raw partitions, and again
//! whenever a mark newer than its aggregate says it changed. Summaries then read those days'
//! closed slices from a few small rows and only the rest raw.
//!
//! Safe with several server processes, as sealing is: an aggregate is a function of the raw
//! rows, written as absolute rows under its read's start, and the state decides with the
//! slice's marks whether it answers; two aggregations of one slice at once only repeat each
//! other's work.

use crate::domain::ids::CampaignKey;
use crate::domain::owner::{Owner, OwnerKind};
use crate::domain::sealing::SealState;
use crate::domain::sketch::UniqueSketch;
use crate::domain::slices::{Grain, Slice, SliceRule, Span, slices_of_day, touched_slices};
use crate::domain::time::Day;
use crate::domain::view::ViewWindow;
use crate::query::FanOut;
use crate::query::aggregate::BillableWindow;
use crate::query::plan::campaign_partitions;
use crate::query::span::{Duplicates, SpanAggregate, aggregate_spans};
use crate::sealer::read_start;
use crate::settings::SettingsCache;
use crate::store::{CopyRow, OpenDayParts, SliceAggregate, SliceAggregateRow, Store, StoreError};
use chrono::{DateTime, TimeDelta, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the aggregator works.
#[derive(Debug, Clone, Copy)]
pub struct SlicerOptions {
    pub(crate) rule: SliceRule,
    pub(crate) window: BillableWindow,
    pub(crate) view_window: ViewWindow,
    pub(crate) fan_out: FanOut,
    /// How often it looks for slices to aggregate.
    pub(crate) interval: Duration,
}

/// Slices read in one stretch at most: two hours, so a backlog's read holds a bounded share of
/// a day in memory, and quiet slices (most of them, for most campaigns) cost one read together.
const SLICES_PER_READ: i64 = 8;

/// Runs of consecutive slices of `due` (oldest first), each at most [`SLICES_PER_READ`] long.
fn stretches(due: &[Slice]) -> Vec<(Slice, Slice)> {
    let mut runs: Vec<(Slice, Slice)> = Vec::new();
    for slice in due {
        match runs.last_mut() {
            Some((first, last)) if *last + 1 == *slice && *slice - *first < SLICES_PER_READ => {
                *last = *slice;
            }
            _ => runs.push((*slice, *slice)),
        }
    }
    runs
}

/// A stretch's aggregate, one per slice.
fn split_by_slice(aggregate: SpanAggregate) -> HashMap<Slice, SpanAggregate> {
    let mut slices: HashMap<Slice, SpanAggregate> = HashMap::new();
    for ((slice, ad), counts) in aggregate.counts {
        slices
            .entry(slice)
            .or_default()
            .counts
            .insert((slice, ad), counts);
    }
    for ((slice, ad), users) in aggregate.users {
        slices
            .entry(slice)
            .or_default()
            .users
            .insert((slice, ad), users);
    }
    slices
}

/// Raw rows from which a stretch's aggregation counts as work that must give way.
const BUSY_STRETCH_ROWS: usize = 10_000;

/// What is stored of one slice's stretch: counts and users by ad, and every ad's users
/// together.
fn slice_aggregate(aggregate: SpanAggregate) -> SliceAggregate {
    let mut users = UniqueSketch::new();
    let by_ad = aggregate
        .counts
        .iter()
        .map(|((slice, ad), counts)| {
            let ad_users = aggregate.users.get(&(*slice, *ad));
            if let Some(ad_users) = ad_users {
                users.merge(ad_users);
            }
            SliceAggregateRow {
                counts: counts.to_row(*slice, *ad),
                users: ad_users
                    .map(UniqueSketch::to_bytes)
                    .unwrap_or_else(|| UniqueSketch::new().to_bytes()),
            }
        })
        .collect();
    SliceAggregate {
        by_ad,
        users: users.to_bytes(),
    }
}

/// Aggregates closed slices: what the background task and the tests share.
pub struct SliceAggregator {
    store: Arc<dyn Store>,
    settings: Arc<SettingsCache>,
    options: SlicerOptions,
}

impl SliceAggregator {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        settings: Arc<SettingsCache>,
        options: SlicerOptions,
    ) -> Self {
        Self {
            store,
            settings,
            options,
        }
    }

    /// Aggregates every slice that is due `now` of every unsealed campaign-day of today and
    /// yesterday; returns how many slices it aggregated.
    ///
    /// Most campaign-days have nothing due on most passes, yet each costs two small reads to
    /// know it (its seal and its slice states): those run `fan_out.concurrency` at a time, so
    /// a pass over thousands of campaigns takes a round trip per that many of them rather than
    /// one each. The aggregations themselves run one after another, each giving way after a
    /// busy stretch, so background work keeps its bounded share of the machine.
    pub async fn aggregate_due(&self, now: DateTime<Utc>) -> Result<usize, StoreError> {
        let today = Day::new(now.date_naive());
        let yesterday = Day::new(today.date() - TimeDelta::days(1));
        let store = self.store.as_ref();
        let mut candidates = Vec::new();
        for day in [yesterday, today] {
            for owner in store.owners_of_day(OwnerKind::Campaign, day).await? {
                if let Owner::Campaign(campaign) = owner {
                    candidates.push((campaign, day));
                }
            }
        }
        let due: Vec<(CampaignKey, Day)> = stream::iter(candidates)
            .map(|(campaign, day)| async move {
                let has_due = self.has_due_slices(campaign, day, now).await?;
                Ok::<_, StoreError>(has_due.then_some((campaign, day)))
            })
            .buffer_unordered(self.options.fan_out.concurrency.max(1))
            .try_filter_map(|found| async move { Ok(found) })
            .try_collect()
            .await?;
        let mut aggregated = 0;
        // Each reads its states again: its read start must come just before its own read, not
        // a whole pass earlier, or a mark in between would make its aggregates stale for
        // nothing.
        for (campaign, day) in due {
            aggregated += self.aggregate_campaign_day(campaign, day, now).await?;
        }
        Ok(aggregated)
    }

    /// Whether an unsealed campaign-day has a slice to aggregate `now`.
    async fn has_due_slices(
        &self,
        campaign: CampaignKey,
        day: Day,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let store = self.store.as_ref();
        let owner = Owner::Campaign(campaign);
        if store.seal_state(&owner, day).await?.sealed_from.is_some() {
            return Ok(false);
        }
        let rows = store
            .read_open_day(campaign, day, OpenDayParts::States)
            .await?;
        let states: HashMap<Slice, SealState> = rows.states.into_iter().collect();
        Ok(!self.due_slices(day, &states, now).is_empty())
    }

    /// The slices of `day` to aggregate `now`, given their states: past their grace, not
    /// answered by a current aggregate, and not marked within the margin (an aggregate read
    /// now could not answer for such a slice (see `SealState::is_current`), and while a
    /// backfill keeps marking it, it is read raw anyway).
    fn due_slices(
        &self,
        day: Day,
        states: &HashMap<Slice, SealState>,
        now: DateTime<Utc>,
    ) -> Vec<Slice> {
        let settled = |state: &SealState| {
            state
                .late_at
                .is_none_or(|marked| marked + SealState::MARGIN < now)
        };
        slices_of_day(day)
            .filter(|slice| {
                let state = states.get(slice).copied().unwrap_or_default();
                self.options.rule.may_aggregate(*slice, now)
                    && !state.is_current()
                    && settled(&state)
            })
            .collect()
    }

    /// Aggregates the due slices of one campaign-day, oldest first.
    pub async fn aggregate_campaign_day(
        &self,
        campaign: CampaignKey,
        day: Day,
        now: DateTime<Utc>,
    ) -> Result<usize, StoreError> {
        let store = self.store.as_ref();
        let options = self.options;
        // Before anything is read: a mark written after this (less the margin) makes the
        // aggregates below stale, one written before it was written after its events.
        let read_started = read_start();
        let rows = store
            .read_open_day(campaign, day, OpenDayParts::States)
            .await?;
        let states: HashMap<Slice, SealState> = rows.states.into_iter().collect();
        let due = self.due_slices(day, &states, now);
        if due.is_empty() {
            return Ok(0);
        }
        let history = self.settings.history(&Owner::Campaign(campaign)).await?;
        let partitions: Vec<_> = campaign_partitions(
            campaign,
            std::iter::once(day),
            &history,
            self.settings.read_staleness(),
        )
        .into_iter()
        .flat_map(|(_, partitions)| partitions)
        .collect();
        let counts = history.counts_in_force(day, self.settings.read_staleness());
        let duplicates = Duplicates::new(rows.duplicates);
        for (first, last) in stretches(&due) {
            let started = Instant::now();
            let aggregate = aggregate_spans(
                store,
                campaign,
                &partitions,
                &[Span::of_slices(first, last)],
                (&duplicates, Some(&counts), None),
                (options.window, options.view_window, Grain::Slice),
                options.fan_out.concurrency,
            )
            .await?;
            self.record_duplicates(campaign, day, &duplicates, &aggregate, (first, last))
                .await?;
            let busy = aggregate.rows_read >= BUSY_STRETCH_ROWS;
            let mut by_slice = split_by_slice(aggregate);
            for slice in first..=last {
                let aggregate = slice_aggregate(by_slice.remove(&slice).unwrap_or_default());
                store
                    .write_slice_aggregate(campaign, day, slice, &aggregate, read_started)
                    .await?;
            }
            metrics::counter!("adevents_slices_aggregated_total")
                .increment((last - first + 1) as u64);
            // Background work gives way: busy a quarter of the time at most (here and in the
            // store) while it works off a backlog (a bulk load of late events), so ingestion
            // keeps the machine; quiet stretches cost next to nothing and wait for nothing.
            if busy {
                tokio::time::sleep(started.elapsed() * 3).await;
            }
        }
        Ok(due.len())
    }

    /// Records the duplicates a stretch's aggregation found that the day did not hold yet (an
    /// impression id stored again with another timestamp), then marks every other slice a copy
    /// of theirs touches: that slice's aggregate may count the id where it no longer counts.
    /// Recorded before the marks, so whoever sees a mark finds them.
    async fn record_duplicates(
        &self,
        campaign: CampaignKey,
        day: Day,
        recorded: &Duplicates,
        aggregate: &SpanAggregate,
        (first, last): (Slice, Slice),
    ) -> Result<(), StoreError> {
        let new: Vec<CopyRow> = aggregate
            .found_duplicates
            .iter()
            .filter(|copy| !recorded.holds(copy))
            .copied()
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let store = self.store.as_ref();
        store.write_duplicates(campaign, day, &new).await?;
        let new_ids: std::collections::HashSet<_> =
            new.iter().map(|copy| copy.impression_id).collect();
        let mut marks: std::collections::BTreeSet<Slice> = std::collections::BTreeSet::new();
        for copy in &aggregate.found_duplicates {
            if new_ids.contains(&copy.impression_id) {
                let at = copy.timestamp.instant();
                marks.extend(touched_slices(at, self.options.window.length()));
            }
        }
        let marks: Vec<Slice> = marks
            .into_iter()
            .filter(|slice| !(first..=last).contains(slice) && slices_of_day(day).contains(slice))
            .collect();
        if marks.is_empty() {
            return Ok(());
        }
        store.mark_slices(campaign, day, &marks, Utc::now()).await
    }

    /// Aggregates due slices every `interval` until the task is aborted.
    pub(crate) fn spawn(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let interval = self.options.interval;
            let mut ticks =
                tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                match self.aggregate_due(Utc::now()).await {
                    Ok(0) => {}
                    Ok(slices) => tracing::debug!(slices, "aggregated closed slices"),
                    Err(error) => tracing::warn!(
                        error = %error.chain(),
                        "aggregating closed slices failed; retrying at the next pass"
                    ),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_slices_are_read_in_runs_of_at_most_two_hours() {
        let due: Vec<Slice> = (100..120).chain([125, 126, 130]).collect();
        assert_eq!(
            stretches(&due),
            [(100, 107), (108, 115), (116, 119), (125, 126), (130, 130)]
        );
        assert!(stretches(&[]).is_empty());
    }
}
