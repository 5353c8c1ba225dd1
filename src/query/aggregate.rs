//! One UTC day of one campaign, aggregated from its raw partitions: impressions, clicks and
//! billable impressions per 15-minute slice and ad, and the users reached per UTC hour and ad
//! as sketches. Any query's rows are sums of slices (exact in every zone whose offset is a
//! multiple of 15 minutes, which is every zone) and unions of hourly sketches.
//!
//! Counting rules (DESIGN.md): an impression counts once per UTC day, at its earliest
//! timestamp; a click counts once per impression, at that impression's first click ever (the
//! click index answers it); a billable impression counts once per user and window
//! (`floor(epoch_seconds / window) × window`), at the time and for the ad of the window's
//! earliest impression. The window divides a day, so no window spans two UTC days and a day is
//! aggregated on its own, exactly, whatever the order or delay in which its events arrived.

use crate::domain::ids::{AdId, CampaignKey, ImpressionId, UserId};
use crate::domain::partition::EventPartition;
use crate::domain::sketch::{MemberHash, UniqueSketch};
use crate::domain::time::{EventTime, HOUR_MILLIS, SLICE_MILLIS};
use crate::store::{
    ClickRow, ImpressionSummaryRow, Rollup, RollupReach, RollupSlice, Store, StoreError,
};
use futures::{StreamExt, stream};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

/// The billable-impression window: a whole number of seconds that divides a day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BillableWindow(u32);

impl BillableWindow {
    pub const DEFAULT: Self = Self(40);

    pub fn new(window: Duration) -> Result<Self, String> {
        let seconds = window.as_secs();
        if window.subsec_nanos() != 0 || seconds == 0 || 86_400 % seconds != 0 {
            return Err(
                "must be a whole number of seconds that divides 24 hours (e.g. 40s, 1m, 5m)".into(),
            );
        }
        Ok(Self(seconds as u32))
    }

    /// The window holding `at`.
    fn of(&self, at: EventTime) -> i64 {
        at.epoch_millis().div_euclid(i64::from(self.0) * 1000)
    }
}

/// Additive counts of one slice (or any sum of slices).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SliceCounts {
    pub impressions: u64,
    pub clicks: u64,
    pub billable_impressions: u64,
}

impl SliceCounts {
    pub fn add(&mut self, other: &SliceCounts) {
        self.impressions += other.impressions;
        self.clicks += other.clicks;
        self.billable_impressions += other.billable_impressions;
    }
}

/// One UTC day of a campaign.
#[derive(Debug, Clone, Default)]
pub struct DayAggregate {
    /// By (15-minute slice since the epoch, ad).
    pub slices: BTreeMap<(i64, AdId), SliceCounts>,
    /// Users reached, by (hour since the epoch, ad).
    pub users: BTreeMap<(i64, AdId), UniqueSketch>,
}

impl DayAggregate {
    /// The rows a sealed day keeps.
    pub fn to_rollup(&self) -> Rollup {
        Rollup {
            slices: self
                .slices
                .iter()
                .map(|((slice, ad_id), counts)| RollupSlice {
                    slice: *slice,
                    ad_id: *ad_id,
                    impressions: counts.impressions,
                    clicks: counts.clicks,
                    billable_impressions: counts.billable_impressions,
                })
                .collect(),
            reach: self
                .users
                .iter()
                .map(|((hour, ad_id), sketch)| RollupReach {
                    hour: *hour,
                    ad_id: *ad_id,
                    sketch: sketch.to_bytes(),
                })
                .collect(),
        }
    }

    /// A sealed day back from its rows; `None` if a sketch does not decode (the caller then
    /// reads the raw partitions instead).
    pub fn from_rollup(rollup: Rollup) -> Option<Self> {
        let mut day = Self::default();
        for row in rollup.slices {
            day.slices.insert(
                (row.slice, row.ad_id),
                SliceCounts {
                    impressions: row.impressions,
                    clicks: row.clicks,
                    billable_impressions: row.billable_impressions,
                },
            );
        }
        for row in rollup.reach {
            day.users.insert(
                (row.hour, row.ad_id),
                UniqueSketch::from_bytes(&row.sketch).ok()?,
            );
        }
        Some(day)
    }

    fn slice(&mut self, at: EventTime, ad: AdId) -> &mut SliceCounts {
        self.slices
            .entry((at.epoch_millis().div_euclid(SLICE_MILLIS), ad))
            .or_default()
    }
}

/// Reads one UTC day's impression and click partitions (`partitions`, every bucket in force
/// that day) and aggregates them.
pub async fn aggregate_day(
    store: &dyn Store,
    campaign: CampaignKey,
    partitions: &[EventPartition],
    window: BillableWindow,
    concurrency: usize,
) -> Result<DayAggregate, StoreError> {
    let concurrency = concurrency.max(1);
    let mut earliest: HashMap<ImpressionId, ImpressionSummaryRow> = HashMap::new();
    let mut reads = stream::iter(partitions.iter().copied())
        .map(|partition| async move { store.read_impression_summaries(partition).await })
        .buffer_unordered(concurrency);
    while let Some(rows) = reads.next().await {
        for row in rows? {
            earliest
                .entry(row.impression_id)
                .and_modify(|seen| {
                    if row.timestamp < seen.timestamp {
                        *seen = row;
                    }
                })
                .or_insert(row);
        }
    }
    let mut day = DayAggregate::default();
    let mut windows: HashMap<(UserId, i64), (EventTime, AdId)> = HashMap::new();
    for row in earliest.into_values() {
        day.slice(row.timestamp, row.ad_id).impressions += 1;
        day.users
            .entry((
                row.timestamp.epoch_millis().div_euclid(HOUR_MILLIS),
                row.ad_id,
            ))
            .or_default()
            .insert(MemberHash::of(row.user_id.as_uuid().as_bytes()));
        windows
            .entry((row.user_id, window.of(row.timestamp)))
            .and_modify(|first| {
                if (row.timestamp, row.ad_id) < *first {
                    *first = (row.timestamp, row.ad_id);
                }
            })
            .or_insert((row.timestamp, row.ad_id));
    }
    for (at, ad) in windows.into_values() {
        day.slice(at, ad).billable_impressions += 1;
    }

    // Clicks: each impression clicked this day, counted here only if its first click ever
    // is this day's (that click's own row is in this day's partitions).
    let mut clicked: HashSet<ImpressionId> = HashSet::new();
    let mut reads = stream::iter(partitions.iter().copied())
        .map(|partition| async move { store.read_clicks(partition).await })
        .buffer_unordered(concurrency);
    while let Some(rows) = reads.next().await {
        clicked.extend(rows?.into_iter().map(|row| row.impression_id));
    }
    let Some(utc_day) = partitions.first().map(|partition| partition.day) else {
        return Ok(day);
    };
    let mut lookups = stream::iter(clicked)
        .map(|impression_id| store.first_click(campaign, impression_id))
        .buffer_unordered(concurrency);
    while let Some(first) = lookups.next().await {
        if let Some(ClickRow {
            ad_id, timestamp, ..
        }) = first?
            && timestamp.utc_day() == utc_day
        {
            day.slice(timestamp, ad_id).clicks += 1;
        }
    }
    Ok(day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_must_divide_a_day() {
        assert!(BillableWindow::new(Duration::from_secs(40)).is_ok());
        assert!(BillableWindow::new(Duration::from_secs(300)).is_ok());
        assert!(BillableWindow::new(Duration::from_secs(7)).is_err());
        assert!(BillableWindow::new(Duration::from_millis(1500)).is_err());
        assert!(BillableWindow::new(Duration::ZERO).is_err());
    }
}
