//! Repairing the live delivery counts a process that went away left behind (kill -9, a lost
//! machine): its stored row of a campaign-day may miss the impressions it acknowledged in its
//! last quarter second. The day's billable windows are read from the raw events, and the gone
//! writer's row becomes the windows no other writer holds.
//!
//! Which windows another writer holds, two ways by their age:
//! - Windows of the day's last minutes before the process went silent, and since, and any
//!   window the others may still compare (one that ended less than its grace and second
//!   comparison before their rows are read: long windows), on a store several processes
//!   share, while the day was open: every writer published the users it counted there, and
//!   each window belongs to its first-ranked publication ([`super::windows`]). The gone writer
//!   keeps the windows it ranks first in, and those no one published (what it had not stored
//!   yet). Exact: the publications are read after the raw events, so everything the others
//!   counted of what the read saw is published.
//! - Older windows, and every window elsewhere: the other writers' rows are read before the
//!   raw events, and the gone writer's row is the difference. Their comparisons of those
//!   windows ended before the read, so no give-up lowers the rows afterwards. One exception:
//!   a late event for such a window, counted by another process within about half a minute of
//!   the read, is compared afterwards and given up to the gone writer if it ranks first, whose
//!   row did not get it: that user's window counts nowhere until the day is sealed.

use super::windows::{GRACE, RECHECK, first_ranked};
use crate::domain::delivery::DaySlices;
use crate::domain::ids::CampaignKey;
use crate::domain::owner::Owner;
use crate::domain::process::ProcessId;
use crate::domain::sealing::SealingRule;
use crate::domain::time::Day;
use crate::query::FanOut;
use crate::query::aggregate::{BillableWindow, DayRead, billable_windows_of_day};
use crate::settings::SettingsCache;
use crate::store::{LiveCountRow, Store, StoreError};
use chrono::{DateTime, TimeDelta, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use std::collections::BTreeSet;
use std::time::Duration;

/// How long before the gone process's last report its windows are settled by publications:
/// every window that ended earlier was compared (and compared again) by the others long before.
const SETTLED_BEFORE_SILENCE: TimeDelta = TimeDelta::minutes(2);
/// Slack for the comparisons' once-a-second ticks, after a window's grace and its second
/// comparison.
const COMPARISON_TICKS: TimeDelta = TimeDelta::seconds(5);
/// How long after the raw read the publications are read: the others publish what they count
/// within a quarter second.
const PUBLISHED_WITHIN: Duration = Duration::from_secs(2);
/// Windows' publications read at once.
const WINDOW_READS_IN_FLIGHT: usize = 16;

/// What a repair knows of the process that went away.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gone {
    pub(crate) id: ProcessId,
    pub(crate) last_report_at: DateTime<Utc>,
}

/// What a start-up repair reads with: the same for every day it rebuilds.
#[derive(Clone, Copy)]
pub(crate) struct DayRepair<'a> {
    pub(crate) store: &'a dyn Store,
    pub(crate) settings: &'a SettingsCache,
    pub(crate) window: BillableWindow,
    pub(crate) rule: SealingRule,
    pub(crate) fan_out: FanOut,
    /// What one pass over a site-day may hold (`--seal-memory`).
    pub(crate) site_day_bytes: usize,
}

/// Rewrites `gone`'s live row of `campaign`'s UTC `day` from the raw events; returns the
/// day's billable impressions.
pub(crate) async fn rebuild_campaign_day(
    repair: DayRepair<'_>,
    campaign: CampaignKey,
    day: Day,
    gone: Gone,
) -> Result<u64, StoreError> {
    let DayRepair {
        store,
        settings,
        window,
        rule,
        fan_out,
        ..
    } = repair;
    let sealed = store.read_sealed_counts(campaign).await?;
    if sealed.days.iter().any(|(sealed_day, _)| *sealed_day == day) {
        // Its sealed total answers for it; live rows are not read.
        return Ok(0);
    }
    let others_read_at = Utc::now();
    let mut others = DaySlices::default();
    for row in store.read_live_counts(campaign).await? {
        if row.day == day && row.writer != gone.id {
            others.merge(&row.slices);
        }
    }
    let history = settings.history(&Owner::Campaign(campaign)).await?;
    let read = DayRead::of_day(
        campaign,
        day,
        &history,
        settings.read_staleness(),
        (Vec::new(), crate::domain::view::ViewWindow::default()),
    );
    let windows = billable_windows_of_day(store, &read, window, fan_out.concurrency).await?;
    let published = store.is_shared() && !rule.may_seal(day, gone.last_report_at);
    let settled_until = if published {
        // A window is settled once the others compared it for the last time before their
        // rows were read: its end, the grace and the second comparison ago. A window that
        // began in an earlier slice ended at most one window's length after that slice.
        let compared_for_good =
            others_read_at - window.length() - GRACE - RECHECK - COMPARISON_TICKS;
        let settled_before = compared_for_good.min(gone.last_report_at - SETTLED_BEFORE_SILENCE);
        DaySlices::slice_of(day, settled_before.timestamp_millis())
    } else {
        crate::domain::delivery::SLICES_PER_DAY
    };
    let mut stored = DaySlices::default();
    let mut recent = Vec::new();
    for ((user, number), first) in &windows {
        let slice = DaySlices::slice_of(day, first.epoch_millis());
        stored.add(slice, 1);
        if slice >= settled_until {
            recent.push((*number, *user, slice));
        }
    }
    let mut row_slices = stored
        .before(settled_until)
        .saturating_sub(&others.before(settled_until));
    if !recent.is_empty() {
        tokio::time::sleep(PUBLISHED_WITHIN).await;
        let numbers: BTreeSet<i64> = recent.iter().map(|(number, _, _)| *number).collect();
        let owners: std::collections::HashMap<i64, _> = stream::iter(numbers)
            .map(|number| async move {
                let publications = store
                    .window_publications(campaign, window.start_of(number))
                    .await?;
                Ok::<_, StoreError>((number, first_ranked(&publications)))
            })
            .buffer_unordered(WINDOW_READS_IN_FLIGHT)
            .try_collect()
            .await?;
        for (number, user, slice) in recent {
            let owner = owners
                .get(&number)
                .and_then(|first| first.get(&user))
                .map(|(_, writer)| *writer);
            if owner.is_none_or(|writer| writer == gone.id) {
                row_slices.add(slice, 1);
            }
        }
    }
    let row = LiveCountRow {
        campaign,
        day,
        writer: gone.id,
        slices: row_slices,
    };
    store.write_live_counts(std::slice::from_ref(&row)).await?;
    Ok(stored.total())
}
