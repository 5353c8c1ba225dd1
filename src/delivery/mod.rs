//! Delivery against caps (docs/DESIGN.md, "Delivery and freshness"): what a campaign
//! delivered today (its own zone's day) and in its life, from a fixed number of reads whatever
//! its age: the sealed days' totals (held until a seal changes them, [`sealed`]), every
//! writer's live rows of the days not sealed yet, and this process's own counts from memory;
//! and whether a silent process may hold counts that are missing (`complete`).

pub(crate) mod live;
pub(crate) mod rebuild;
pub(crate) mod sealed;
pub(crate) mod windows;

use crate::domain::delivery::{DeliveryFigures, figures, local_day, utc_days_between};
use crate::domain::ids::CampaignKey;
use crate::domain::owner::Owner;
use crate::domain::process::{ProcessId, ProcessReport, UnflushedDay};
use crate::settings::SettingsCache;
use crate::store::{Store, StoreError};
use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use live::LiveDelivery;
use sealed::SealedCache;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// A process that went silent, by its last report.
type SilentReport = (ProcessId, DateTime<Utc>);

/// Silent processes' marks read at once.
const SILENT_READS_IN_FLIGHT: usize = 16;

/// A campaign's delivery at `as_of`.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    pub(crate) as_of: DateTime<Utc>,
    pub(crate) complete: bool,
    /// The zone of the campaign's day.
    pub(crate) tz: chrono_tz::Tz,
    pub(crate) daily_cap: Option<u64>,
    pub(crate) total_cap: Option<u64>,
    pub(crate) figures: DeliveryFigures,
}

pub(crate) struct DeliveryService {
    store: Arc<dyn Store>,
    settings: Arc<SettingsCache>,
    live: Arc<LiveDelivery>,
    /// The marks of processes found silent, by their last report: a silent process writes
    /// no marks, so each is read once, however many answers ask.
    silent_marks: Mutex<HashMap<SilentReport, Vec<UnflushedDay>>>,
    /// Sealed totals, read again only when a seal changed them.
    sealed: SealedCache,
}

impl DeliveryService {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        settings: Arc<SettingsCache>,
        live: Arc<LiveDelivery>,
    ) -> Self {
        Self {
            store,
            settings,
            live,
            silent_marks: Mutex::new(HashMap::new()),
            sealed: SealedCache::default(),
        }
    }

    /// The campaign's delivery now: every impression acknowledged by any process that stored
    /// its live counts since (about every quarter second), every sealed day.
    pub(crate) async fn delivery(&self, campaign: CampaignKey) -> Result<Delivery, StoreError> {
        let as_of = Utc::now();
        let owner = Owner::Campaign(campaign);
        let store = self.store.as_ref();
        let (history, live_rows, processes) = futures::try_join!(
            self.settings.history(&owner),
            store.read_live_counts(campaign),
            store.processes(),
        )?;
        // After the live rows, never before: a day sealed in between is then in the totals
        // read with this version, or still in the live rows read before it.
        let version = store.sealed_version(campaign).await?;
        let sealed = match self.sealed.get(campaign, version) {
            Some(held) => held,
            None => {
                let read_at = Instant::now();
                let counts = store.read_sealed_counts(campaign).await?;
                self.sealed.put(campaign, read_at, counts, as_of)
            }
        };
        let caps = history.latest().caps();
        let mine = self
            .live
            .days_of_where(campaign, |day| !sealed.is_sealed(day));
        let mut days = sealed.recent().clone();
        for row in live_rows {
            let own_fresher = row.writer == self.live.writer() && mine.contains_key(&row.day);
            if sealed.is_sealed(row.day) || own_fresher {
                continue;
            }
            days.entry(row.day).or_default().merge(&row.slices);
        }
        for (day, slices) in &mine {
            days.entry(*day).or_default().merge(slices);
        }
        let (_, start, end) = local_day(caps.tz, as_of);
        let complete = self
            .complete(&owner, &utc_days_between(start, end), &processes, as_of)
            .await?;
        let days = days.iter().map(|(day, slices)| (*day, slices));
        Ok(Delivery {
            as_of,
            complete,
            tz: caps.tz,
            daily_cap: caps.daily_cap,
            total_cap: caps.total_cap,
            figures: figures(caps, as_of, sealed.earlier(), days),
        })
    }

    /// False while a process that went silent marked one of `today`'s days of `owner` as
    /// holding counts it may not have stored.
    async fn complete(
        &self,
        owner: &Owner,
        today: &[crate::domain::time::Day],
        processes: &[ProcessReport],
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let silent: Vec<SilentReport> = processes
            .iter()
            .filter(|report| report.id != self.live.writer() && report.is_silent(now))
            .map(|report| (report.id, report.last_report_at))
            .collect();
        let unknown: Vec<SilentReport> = {
            let mut known = lock(&self.silent_marks);
            // Repaired, returned or reported again: forgotten.
            known.retain(|key, _| silent.contains(key));
            silent
                .iter()
                .filter(|key| !known.contains_key(*key))
                .copied()
                .collect()
        };
        let store = self.store.as_ref();
        let read: Vec<(SilentReport, Vec<UnflushedDay>)> = stream::iter(unknown)
            .map(|key| async move { Ok::<_, StoreError>((key, store.unflushed(key.0).await?)) })
            .buffer_unordered(SILENT_READS_IN_FLIGHT)
            .try_collect()
            .await?;
        let mut known = lock(&self.silent_marks);
        for (key, marks) in read {
            known.insert(key, marks);
        }
        let missing = known
            .values()
            .flat_map(|marks| marks.iter())
            .any(|mark| &mark.owner == owner && today.contains(&mark.day));
        Ok(!missing)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Marks read stay valid whatever panicked while they were held.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
