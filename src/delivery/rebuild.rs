//! Repairing the live delivery counts a process that went away left behind (kill -9, a lost
//! machine): its stored row of a campaign-day may miss the impressions it acknowledged in its
//! last quarter second. The day's billable impressions are aggregated from the raw events and
//! the gone writer's row becomes what the other writers' rows do not hold.
//!
//! Never an under-count: the other writers' rows are read before the raw events, so whatever
//! they store after that read adds to a total that already counts every impression stored
//! before the raw read. What they store in between counts twice until the day is sealed (about
//! a second of their traffic), which stops a campaign early rather than late. Nor does a
//! window the others give up later take away from it: the repair says so before this read,
//! and until it is done no process gives a window up (see [`super::windows`]).

use crate::domain::delivery::DaySlices;
use crate::domain::ids::CampaignKey;
use crate::domain::owner::Owner;
use crate::domain::process::ProcessId;
use crate::domain::time::Day;
use crate::query::FanOut;
use crate::query::aggregate::{BillableWindow, DayRead, aggregate_day};
use crate::settings::SettingsCache;
use crate::store::{LiveCountRow, Store, StoreError};

/// Rewrites `gone`'s live row of `campaign`'s UTC `day` from the raw events; returns the
/// day's billable impressions.
pub async fn rebuild_campaign_day(
    store: &dyn Store,
    settings: &SettingsCache,
    campaign: CampaignKey,
    day: Day,
    gone: ProcessId,
    window: BillableWindow,
    fan_out: FanOut,
) -> Result<u64, StoreError> {
    let sealed = store.read_sealed_counts(campaign).await?;
    if sealed.days.iter().any(|(sealed_day, _)| *sealed_day == day) {
        // Its sealed total answers for it; live rows are not read.
        return Ok(0);
    }
    let mut others = DaySlices::default();
    for row in store.read_live_counts(campaign).await? {
        if row.day == day && row.writer != gone {
            others.merge(&row.slices);
        }
    }
    let history = settings.history(&Owner::Campaign(campaign)).await?;
    let read = DayRead::of_day(
        campaign,
        day,
        &history,
        settings.read_staleness(),
        Vec::new(),
    );
    let aggregate = aggregate_day(store, &read, window, fan_out.concurrency).await?;
    let stored = aggregate.billable_slices(day);
    let row = LiveCountRow {
        campaign,
        day,
        writer: gone,
        slices: stored.saturating_sub(&others),
    };
    store.write_live_counts(std::slice::from_ref(&row)).await?;
    Ok(stored.total())
}
