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
use crate::domain::slices::{Slice, SliceRule, Span, slices_of_day};
use crate::domain::time::Day;
use crate::query::FanOut;
use crate::query::aggregate::BillableWindow;
use crate::query::plan::campaign_partitions;
use crate::query::span::{Duplicates, aggregate_span};
use crate::sealer::read_start;
use crate::settings::SettingsCache;
use crate::store::{RollupSlice, SliceAggregateRow, Store, StoreError};
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the aggregator works.
#[derive(Debug, Clone, Copy)]
pub struct SlicerOptions {
    pub(crate) rule: SliceRule,
    pub(crate) window: BillableWindow,
    pub(crate) fan_out: FanOut,
    /// How often it looks for slices to aggregate.
    pub(crate) interval: Duration,
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
    pub async fn aggregate_due(&self, now: DateTime<Utc>) -> Result<usize, StoreError> {
        let today = Day::new(now.date_naive());
        let yesterday = Day::new(today.date() - TimeDelta::days(1));
        let store = self.store.as_ref();
        let mut aggregated = 0;
        for day in [yesterday, today] {
            for owner in store.owners_of_day(OwnerKind::Campaign, day).await? {
                let Owner::Campaign(campaign) = owner else {
                    continue;
                };
                if store.seal_state(&owner, day).await?.sealed_from.is_some() {
                    continue;
                }
                aggregated += self.aggregate_campaign_day(campaign, day, now).await?;
            }
        }
        Ok(aggregated)
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
        let rows = store.read_open_day(campaign, day).await?;
        let states: HashMap<Slice, SealState> = rows.states.into_iter().collect();
        let due: Vec<Slice> = slices_of_day(day)
            .filter(|slice| {
                options.rule.may_aggregate(*slice, now)
                    && !states.get(slice).is_some_and(SealState::is_current)
            })
            .collect();
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
        let duplicates = Duplicates::new(rows.duplicates);
        for slice in &due {
            let started = Instant::now();
            let span = Span::of_slices(*slice, *slice);
            let aggregate = aggregate_span(
                store,
                campaign,
                &partitions,
                span,
                &duplicates,
                options.window,
                options.fan_out.concurrency,
            )
            .await?;
            let empty = UniqueSketch::new();
            let rows: Vec<SliceAggregateRow> = aggregate
                .counts
                .iter()
                .map(|((slice, ad), counts)| SliceAggregateRow {
                    counts: RollupSlice {
                        slice: *slice,
                        ad_id: *ad,
                        impressions: counts.impressions,
                        clicks: counts.clicks,
                        billable_impressions: counts.billable_impressions,
                        invalid_impressions: counts.invalid_impressions,
                        invalid_clicks: counts.invalid_clicks,
                    },
                    users: aggregate
                        .users
                        .get(&(*slice, *ad))
                        .unwrap_or(&empty)
                        .to_bytes(),
                })
                .collect();
            store
                .write_slice_aggregate(campaign, day, *slice, &rows, read_started)
                .await?;
            metrics::counter!("adevents_slices_aggregated_total").increment(1);
            // Background work gives way: at most about half of one core, so ingestion keeps
            // the machine while a backlog of slices (a bulk load of late events) is worked off.
            tokio::time::sleep(started.elapsed()).await;
        }
        Ok(due.len())
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
