//! Start-up repair: a process that went away without storing its live state (kill -9, a lost
//! machine) left its owner-days marked; the next process to start rebuilds them from the raw
//! events (and indexes a campaign-day's events again for attribution) before it says it is
//! ready, then removes the silent process.
//!
//! On a store several processes share, a process counts as gone once it has been silent for
//! [`ProcessReport::SILENCE`], or when its report does not move while this one watches for
//! three report periods (a restart right after a crash need not wait out the silence). On the
//! embedded store, whose folder one process holds at a time, every other process is gone.

use crate::beacons::rebuild::rebuild_site_day;
use crate::delivery::rebuild::{DayRepair, Gone, rebuild_campaign_day};
use crate::domain::owner::Owner;
use crate::domain::process::{ProcessId, ProcessReport};
use crate::event_index::EventIndexer;
use crate::event_index::reindex::reindex_campaign_day;
use crate::store::{Store, StoreError};
use chrono::Utc;
use std::time::Duration;

/// What a repair did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Repaired {
    /// Processes found gone and removed.
    pub(crate) processes: usize,
    /// Owner-days rebuilt (sites' sketches, campaigns' delivery counts).
    pub(crate) days: usize,
    /// Beacons read to rebuild them.
    pub(crate) beacons: usize,
}

/// The processes other than `me` that are gone.
async fn gone_processes(store: &dyn Store, me: ProcessId) -> Result<Vec<Gone>, StoreError> {
    let now = Utc::now();
    let mut gone = Vec::new();
    let mut watched = Vec::new();
    for report in store.processes().await? {
        if report.id == me {
            continue;
        }
        if !store.is_shared() || report.is_silent(now) {
            gone.push(Gone {
                id: report.id,
                last_report_at: report.last_report_at,
            });
        } else {
            watched.push(report);
        }
    }
    if watched.is_empty() {
        return Ok(gone);
    }
    let periods = ProcessReport::PERIOD
        .to_std()
        .unwrap_or(Duration::from_secs(1))
        * 3;
    tokio::time::sleep(periods).await;
    let later = store.processes().await?;
    for report in watched {
        // Gone from the list: it stopped cleanly. Still there, unchanged: it stopped reporting.
        if later
            .iter()
            .any(|again| again.id == report.id && again.last_report_at == report.last_report_at)
        {
            gone.push(Gone {
                id: report.id,
                last_report_at: report.last_report_at,
            });
        }
    }
    Ok(gone)
}

/// Rebuilds what every gone process left marked, then removes it.
pub(crate) async fn repair_gone_processes(
    repair: DayRepair<'_>,
    indexer: &EventIndexer,
    me: ProcessId,
) -> Result<Repaired, StoreError> {
    let DayRepair {
        store,
        settings,
        fan_out,
        site_day_bytes,
        ..
    } = repair;
    let mut repaired = Repaired::default();
    for process in gone_processes(store, me).await? {
        for marked in store.unflushed(process.id).await? {
            match &marked.owner {
                Owner::Site(site) => {
                    repaired.beacons += rebuild_site_day(
                        store,
                        settings,
                        (site, marked.day),
                        (fan_out, site_day_bytes),
                    )
                    .await?;
                }
                Owner::Campaign(campaign) => {
                    rebuild_campaign_day(repair, *campaign, marked.day, process).await?;
                    let concurrency = fan_out.concurrency;
                    reindex_campaign_day(
                        store,
                        settings,
                        indexer,
                        *campaign,
                        marked.day,
                        concurrency,
                    )
                    .await?;
                }
            }
            repaired.days += 1;
        }
        store.remove_process(process.id).await?;
        repaired.processes += 1;
    }
    Ok(repaired)
}
