//! Campaign summaries: impressions and clicks per local day, per ad, and in total.
//!
//! Counting rules (DESIGN.md): an impression counts once per UTC day, at its earliest
//! timestamp, so its rows are de-duplicated across the day's buckets; a click counts once per
//! impression, at that impression's first click ever, which the click index answers.

use super::FanOut;
use super::plan::campaign_partitions;
use super::range::QueryRange;
use crate::domain::ids::{AdId, CampaignKey, ImpressionId};
use crate::domain::partition::EventPartition;
use crate::domain::time::{Day, EventTime};
use crate::settings::SettingsCache;
use crate::store::{ClickRow, Store, StoreError};
use chrono::NaiveDate;
use futures::{StreamExt, stream};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Impressions and clicks of one period or one ad.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub impressions: u64,
    pub clicks: u64,
}

impl Counts {
    /// Clicks per impression; 0 when there are no impressions.
    pub fn ctr(&self) -> f64 {
        if self.impressions == 0 {
            0.0
        } else {
            self.clicks as f64 / self.impressions as f64
        }
    }
}

/// A campaign's counts over a range, by local day and by ad.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub totals: Counts,
    /// Every local day of the range, zeros included.
    pub by_day: BTreeMap<NaiveDate, Counts>,
    /// Every ad with an impression or a click in the range.
    pub by_ad: HashMap<AdId, Counts>,
}

impl Summary {
    fn new(range: &QueryRange) -> Self {
        Self {
            by_day: range
                .local_days()
                .map(|day| (day, Counts::default()))
                .collect(),
            ..Self::default()
        }
    }

    fn add(&mut self, range: &QueryRange, at: EventTime, ad: AdId, add: impl Fn(&mut Counts)) {
        add(&mut self.totals);
        add(self
            .by_day
            .entry(range.local_day(at.instant()))
            .or_default());
        add(self.by_ad.entry(ad).or_default());
    }

    /// Ads ordered as API.md wants them: most impressions first, then by id.
    pub fn ads_ranked(&self) -> Vec<(AdId, Counts)> {
        let mut ads: Vec<(AdId, Counts)> = self
            .by_ad
            .iter()
            .map(|(ad, counts)| (*ad, *counts))
            .collect();
        ads.sort_by(|(a_id, a), (b_id, b)| b.impressions.cmp(&a.impressions).then(a_id.cmp(b_id)));
        ads
    }
}

pub async fn campaign_summary(
    store: &dyn Store,
    settings: &SettingsCache,
    campaign: CampaignKey,
    range: &QueryRange,
    fan_out: FanOut,
) -> Result<Summary, StoreError> {
    let history = settings.history(campaign).await?;
    let plan = campaign_partitions(
        campaign,
        range.utc_days(),
        &history,
        settings.read_staleness(),
    );
    let mut summary = Summary::new(range);
    count_impressions(store, &plan, range, fan_out, &mut summary).await?;
    count_clicks(store, campaign, &plan, range, fan_out, &mut summary).await?;
    Ok(summary)
}

/// A UTC day being read: buckets still to come, and each impression's earliest time and ad.
type PendingDay = (usize, HashMap<ImpressionId, (EventTime, AdId)>);

/// Reads every impression partition (bounded in flight) and folds each UTC day into the
/// summary as soon as its last bucket arrives, so only unfinished days are held in memory.
async fn count_impressions(
    store: &dyn Store,
    plan: &[(Day, Vec<EventPartition>)],
    range: &QueryRange,
    fan_out: FanOut,
    summary: &mut Summary,
) -> Result<(), StoreError> {
    let mut pending: HashMap<Day, PendingDay> = plan
        .iter()
        .map(|(day, partitions)| (*day, (partitions.len(), HashMap::new())))
        .collect();
    let mut reads = stream::iter(all_partitions(plan))
        .map(|partition| async move {
            (
                partition.day,
                store.read_impression_summaries(partition).await,
            )
        })
        .buffer_unordered(fan_out.concurrency.max(1));
    while let Some((day, rows)) = reads.next().await {
        let rows = rows?;
        let Some((remaining, earliest)) = pending.get_mut(&day) else {
            continue;
        };
        for row in rows {
            earliest
                .entry(row.impression_id)
                .and_modify(|seen| {
                    if row.timestamp < seen.0 {
                        *seen = (row.timestamp, row.ad_id);
                    }
                })
                .or_insert((row.timestamp, row.ad_id));
        }
        *remaining -= 1;
        if *remaining == 0
            && let Some((_, earliest)) = pending.remove(&day)
        {
            for (timestamp, ad) in earliest.into_values() {
                if range.contains(timestamp.instant()) {
                    summary.add(range, timestamp, ad, |counts| counts.impressions += 1);
                }
            }
        }
    }
    Ok(())
}

/// Reads the range's clicks, then asks the click index for each clicked impression's first
/// click: only a first click inside the range counts, at its own time, for its own ad.
async fn count_clicks(
    store: &dyn Store,
    campaign: CampaignKey,
    plan: &[(Day, Vec<EventPartition>)],
    range: &QueryRange,
    fan_out: FanOut,
    summary: &mut Summary,
) -> Result<(), StoreError> {
    let concurrency = fan_out.concurrency.max(1);
    let mut clicked: HashSet<ImpressionId> = HashSet::new();
    let mut reads = stream::iter(all_partitions(plan))
        .map(|partition| store.read_clicks(partition))
        .buffer_unordered(concurrency);
    while let Some(rows) = reads.next().await {
        for ClickRow {
            impression_id,
            timestamp,
            ..
        } in rows?
        {
            if range.contains(timestamp.instant()) {
                clicked.insert(impression_id);
            }
        }
    }
    let mut lookups = stream::iter(clicked)
        .map(|impression_id| store.first_click(campaign, impression_id))
        .buffer_unordered(concurrency);
    while let Some(first) = lookups.next().await {
        if let Some(first) = first?
            && range.contains(first.timestamp.instant())
        {
            summary.add(range, first.timestamp, first.ad_id, |counts| {
                counts.clicks += 1
            });
        }
    }
    Ok(())
}

/// The plan's partitions as owned values, so the fan-out stream borrows nothing from it.
fn all_partitions(plan: &[(Day, Vec<EventPartition>)]) -> Vec<EventPartition> {
    plan.iter()
        .flat_map(|(_, partitions)| partitions.iter().copied())
        .collect()
}
