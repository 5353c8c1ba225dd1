//! Sealing closed days (DESIGN.md principle 3): once a UTC day is past the grace period for
//! late events, each campaign's and site's day is aggregated once from the raw tables into a
//! rollup, and summaries and unique-visitor queries read that small rollup from then on. A late event for a sealed day marks it
//! (ingest writes `late_at` by the event's age, never by checking the seal), which makes
//! summaries read the raw partitions again until the next seal: answers stay exact throughout.
//!
//! Safe with several server processes: a seal writes absolute rows, the same from the same
//! raw data, and its `sealed_from` (the start of its read) decides with `late_at` whether the
//! rollup may answer; two seals of one day at once only repeat each other's work.

use crate::beacons::rebuild::aggregate_site_day;
use crate::domain::beacon::SiteId;
use crate::domain::ids::CampaignKey;
use crate::domain::time::Day;
use crate::query::FanOut;
use crate::query::aggregate::{BillableWindow, aggregate_day};
use crate::query::plan::campaign_partitions;
use crate::settings::SettingsCache;
use crate::store::{ReachLevel, SiteRollup, Store, StoreError};
use chrono::{DateTime, TimeDelta, Utc};
use std::sync::Arc;
use std::time::Duration;

/// When and how far back the sealer works.
#[derive(Debug, Clone, Copy)]
pub struct SealingOptions {
    /// How long after a UTC day ends it still takes events without a late mark.
    pub grace: Duration,
    /// How many days back the background sealer looks for days to (re-)seal. Older days with
    /// late events stay exact (read raw) until `adevents rollup` seals them.
    pub lookback_days: u32,
    /// How often the background sealer looks.
    pub interval: Duration,
    pub window: BillableWindow,
    pub fan_out: FanOut,
}

impl Default for SealingOptions {
    fn default() -> Self {
        Self {
            grace: Duration::from_secs(3600),
            lookback_days: 7,
            interval: Duration::from_secs(60),
            window: BillableWindow::DEFAULT,
            fan_out: FanOut { concurrency: 64 },
        }
    }
}

impl SealingOptions {
    fn grace(&self) -> TimeDelta {
        TimeDelta::from_std(self.grace).unwrap_or(TimeDelta::hours(1))
    }

    /// Whether an event for UTC `day` arriving `now` is late: its day may already be sealed.
    pub fn is_late(&self, day: Day, now: DateTime<Utc>) -> bool {
        now >= day.next().start_utc() + self.grace()
    }

    /// Whether `day` may be sealed `now`: past the grace period, with a margin for clock
    /// differences between servers.
    pub fn may_seal(&self, day: Day, now: DateTime<Utc>) -> bool {
        now >= day.next().start_utc() + self.grace() + crate::store::SealState::MARGIN
    }
}

/// Aggregates one campaign-day from its raw partitions and stores the rollup.
pub async fn seal_campaign_day(
    store: &dyn Store,
    settings: &SettingsCache,
    campaign: CampaignKey,
    day: Day,
    options: &SealingOptions,
) -> Result<(), StoreError> {
    let read_started = Utc::now();
    let history = settings.history(campaign).await?;
    let plan = campaign_partitions(
        campaign,
        std::iter::once(day),
        &history,
        settings.read_staleness(),
    );
    let partitions: Vec<_> = plan
        .into_iter()
        .flat_map(|(_, partitions)| partitions)
        .collect();
    let aggregate = aggregate_day(
        store,
        campaign,
        &partitions,
        options.window,
        options.fan_out.concurrency,
        &ReachLevel::ALL,
    )
    .await?;
    store
        .write_rollup(campaign, day, &aggregate.to_rollup(day), read_started)
        .await
}

/// Aggregates one site-day from its stored beacons and stores the rollup: exact visits per
/// 15-minute slice and one merged sketch per hour, for every feature combination.
pub async fn seal_site_day(
    store: &dyn Store,
    settings: &SettingsCache,
    site: &SiteId,
    day: Day,
    options: &SealingOptions,
) -> Result<usize, StoreError> {
    let read_started = Utc::now();
    let aggregate = aggregate_site_day(store, settings, site, day, options.fan_out).await?;
    let combinations: Vec<(String, SiteRollup)> = aggregate
        .combinations
        .into_iter()
        .map(|(combination, combination_day)| {
            let rollup = SiteRollup {
                visits: combination_day.slices.into_iter().collect(),
                reach: combination_day
                    .hours
                    .into_iter()
                    .map(|(hour, sketch)| (hour, sketch.to_bytes()))
                    .collect(),
            };
            (combination, rollup)
        })
        .collect();
    store
        .write_site_rollup(site, day, &combinations, read_started)
        .await?;
    Ok(aggregate.beacons)
}

/// Seals every campaign-day and site-day of the look-back window that is due and not current; returns how
/// many were sealed.
pub async fn seal_due(
    store: &dyn Store,
    settings: &SettingsCache,
    options: &SealingOptions,
    now: DateTime<Utc>,
) -> Result<usize, StoreError> {
    let today = Day::new(now.date_naive());
    let mut sealed = 0;
    for back in (1..=i64::from(options.lookback_days)).rev() {
        let day = Day::new(today.date() - TimeDelta::days(back));
        if !options.may_seal(day, now) {
            continue;
        }
        for campaign in store.campaigns_of_day(day).await? {
            if !store.seal_state(campaign, day).await?.is_current() {
                seal_campaign_day(store, settings, campaign, day, options).await?;
                sealed += 1;
            }
        }
        for site in store.sites_of_day(day).await? {
            if !store.site_seal_state(&site, day).await?.is_current() {
                seal_site_day(store, settings, &site, day, options).await?;
                sealed += 1;
            }
        }
    }
    Ok(sealed)
}

/// Seals due days every `options.interval` until the task is aborted.
pub fn spawn_sealer(
    store: Arc<dyn Store>,
    settings: Arc<SettingsCache>,
    options: SealingOptions,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // The first pass waits like every other: start-up and readiness probes go first.
        let first = tokio::time::Instant::now() + options.interval.min(Duration::from_secs(15));
        let mut ticks = tokio::time::interval_at(first, options.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match seal_due(store.as_ref(), &settings, &options, Utc::now()).await {
                Ok(0) => {}
                Ok(sealed) => {
                    tracing::info!(sealed, "sealed closed campaign- and site-days into rollups")
                }
                Err(error) => {
                    tracing::warn!(%error, "sealing closed days failed; retrying at the next pass")
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_day_is_late_after_its_grace_and_sealed_after_the_margin() {
        let options = SealingOptions::default();
        let day = Day::new("2026-11-25".parse().expect("date"));
        let at = |text: &str| text.parse::<DateTime<Utc>>().expect("time");
        assert!(!options.is_late(day, at("2026-11-26T00:59:59Z")));
        assert!(options.is_late(day, at("2026-11-26T01:00:00Z")));
        assert!(!options.may_seal(day, at("2026-11-26T01:00:04Z")));
        assert!(options.may_seal(day, at("2026-11-26T01:00:05Z")));
    }
}
