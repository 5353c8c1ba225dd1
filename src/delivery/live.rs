//! This process's live billable-impression counts: per campaign and UTC day, per 15-minute
//! slice, each user's window counted once (at its earliest impression this process saw), valid
//! impressions only. Stored as this writer's absolute rows about four times a second, so any
//! process answering `delivery` sees every impression acknowledged a second earlier.
//!
//! Bounded: the windows remembered for de-duplication are capped ([`MAX_WINDOWS`]); past it,
//! impressions count without de-duplication (delivery then over-counts, which stops a campaign
//! early, never late) until old days are dropped. A day is dropped once it may be sealed and
//! has been quiet for a while: its sealed total answers for it from then on.
//!
//! On a store several processes share, a user's window counted by more than one of them
//! counts once as soon as the window has closed and been compared ([`super::windows`]).

use super::windows::{Entry, PublicationBatch, Published, WindowKey, WindowLedger, ceded};
use crate::domain::delivery::DaySlices;
use crate::domain::event::Impression;
use crate::domain::ids::{CampaignKey, UserId};
use crate::domain::process::ProcessId;
use crate::domain::sealing::SealingRule;
use crate::domain::time::Day;
use crate::query::aggregate::BillableWindow;
use crate::store::{DeliveryStore, LiveCountRow, Store, StoreError};
use chrono::{DateTime, Utc};
use futures::{StreamExt, stream};
use hashbrown::HashTable;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A window compared: this process's publications of it and the users it gives up.
type Compared = (WindowKey, Vec<Published>, Vec<Entry>);

/// How often a process stores its live counts: with the write's own latency, well inside the
/// second within which `delivery` promises every acknowledged impression.
pub(crate) const FLUSH_INTERVAL: Duration = Duration::from_millis(250);
/// Windows remembered across all campaign-days (about 20 bytes each).
pub(crate) const MAX_WINDOWS: usize = 4_000_000;
/// How long a day that may be sealed stays in memory after its last impression.
const QUIET_BEFORE_DROP: Duration = Duration::from_secs(300);
/// Marks a window remembered in a day counter that another process counts.
const CEDED: u8 = u8::MAX;
/// Windows' publications read at once while comparing.
const WINDOW_READS_IN_FLIGHT: usize = 16;

/// One campaign-day's count in this process.
struct DayCounter {
    slices: DaySlices,
    /// (keyed hash of (user, window), the slice the window is counted in). The key is already
    /// a keyed hash, so it is its own hash in the table: hashing it again would only cost.
    windows: HashTable<(u64, u8)>,
    /// Changed since it was last stored.
    dirty: bool,
    last_counted: Instant,
}

#[derive(Default)]
struct Counters {
    campaigns: HashMap<CampaignKey, BTreeMap<Day, DayCounter>>,
    windows: usize,
    warned_full: bool,
    /// Users counted in windows of open days, until compared with other processes' (only
    /// when publishing).
    ledger: WindowLedger,
    warned_ledger_full: bool,
}

pub(crate) struct LiveDelivery {
    writer: ProcessId,
    window: BillableWindow,
    rule: SealingRule,
    /// Keyed per process, so a caller cannot choose users whose windows collide.
    hasher: RandomState,
    counters: Mutex<Counters>,
    /// Whether other processes may count the same windows (a shared store).
    publishing: bool,
    /// Whether another process was listed at the last comparison: alone, a process has
    /// nothing to compare with and publishes nothing.
    others_listed: std::sync::atomic::AtomicBool,
    /// One flush at a time: each stores a newer state than the one before.
    flushing: tokio::sync::Mutex<()>,
}

/// An impression as counted: its campaign-day, user window and slice.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counted {
    pub(crate) campaign: CampaignKey,
    pub(crate) day: Day,
    user: UserId,
    window_start: DateTime<Utc>,
    window: u64,
    slice: usize,
}

impl LiveDelivery {
    pub(crate) fn new(writer: ProcessId, window: BillableWindow, rule: SealingRule) -> Self {
        Self {
            writer,
            window,
            rule,
            hasher: RandomState::new(),
            counters: Mutex::new(Counters::default()),
            publishing: false,
            others_listed: std::sync::atomic::AtomicBool::new(false),
            flushing: tokio::sync::Mutex::new(()),
        }
    }

    /// Publishes the users counted in windows of open days for other processes to compare
    /// with, when `shared` (a store several processes write).
    pub(crate) fn publishing_windows(mut self, shared: bool) -> Self {
        self.publishing = shared;
        self
    }

    pub(crate) fn writer(&self) -> ProcessId {
        self.writer
    }

    /// What of `impressions` delivery counts: the valid ones, with their window; taken before
    /// the write, counted after it ([`count`](Self::count)).
    pub(crate) fn countable(&self, impressions: &[Impression]) -> Vec<Counted> {
        impressions
            .iter()
            .filter(|impression| impression.invalid.is_none())
            .map(|impression| {
                let day = impression.timestamp.utc_day();
                let window = self.window.of(impression.timestamp);
                Counted {
                    campaign: impression.campaign,
                    day,
                    user: impression.user_id,
                    window_start: self.window.start_of(window),
                    window: self.hasher.hash_one((impression.user_id, window)),
                    slice: DaySlices::slice_of(day, impression.timestamp.epoch_millis()),
                }
            })
            .collect()
    }

    /// Notes the user of a window this process just counted, to be compared with other
    /// processes' users: only while others are listed and the window's day is open.
    fn note_for_comparison(
        &self,
        ledger: &mut WindowLedger,
        warned_full: &mut bool,
        item: &Counted,
        today: DateTime<Utc>,
    ) {
        if !self.publishing
            || !self
                .others_listed
                .load(std::sync::atomic::Ordering::Relaxed)
            || self.rule.may_seal(item.day, today)
        {
            return;
        }
        let window = WindowKey {
            campaign: item.campaign,
            start: item.window_start,
        };
        let entry = Entry {
            user: item.user,
            day: item.day,
            key: item.window,
        };
        if !ledger.note(window, entry) && !*warned_full {
            *warned_full = true;
            tracing::warn!(
                entries = super::windows::MAX_ENTRIES,
                "delivery remembers as many users for comparison with other processes as it may; windows counted by two processes count twice until their day is sealed"
            );
        }
    }

    /// Counts stored impressions: a window already counted moves to an earlier slice if need
    /// be, never counts twice.
    pub(crate) fn count(&self, counted: &[Counted]) {
        let now = Instant::now();
        let today = Utc::now();
        let mut counters = lock(&self.counters);
        let counters = &mut *counters;
        let full = counters.windows >= MAX_WINDOWS;
        if full && !counters.warned_full {
            counters.warned_full = true;
            tracing::warn!(
                windows = MAX_WINDOWS,
                "delivery remembers as many billable windows as it may; impressions count without de-duplication (delivery may over-count) until old days are dropped"
            );
        }
        let mut added = 0;
        // A request's impressions come mostly from one campaign-day: its counter is looked up
        // once per run of them, not once per impression.
        for run in counted.chunk_by(|a, b| a.campaign == b.campaign && a.day == b.day) {
            let Some(first_item) = run.first() else {
                continue;
            };
            let counter = counters
                .campaigns
                .entry(first_item.campaign)
                .or_default()
                .entry(first_item.day)
                .or_insert_with(|| DayCounter {
                    slices: DaySlices::default(),
                    windows: HashTable::new(),
                    dirty: false,
                    last_counted: now,
                });
            counter.last_counted = now;
            for item in run {
                let slice = item.slice as u8;
                match counter
                    .windows
                    .find_mut(item.window, |(key, _)| *key == item.window)
                {
                    Some((_, first)) if *first == CEDED => {}
                    Some((_, first)) if slice < *first => {
                        counter.slices.move_one(usize::from(*first), item.slice);
                        *first = slice;
                        counter.dirty = true;
                    }
                    Some(_) => {}
                    None => {
                        if !full {
                            counter.windows.insert_unique(
                                item.window,
                                (item.window, slice),
                                |(key, _)| *key,
                            );
                            added += 1;
                            self.note_for_comparison(
                                &mut counters.ledger,
                                &mut counters.warned_ledger_full,
                                item,
                                today,
                            );
                        }
                        counter.slices.add(item.slice, 1);
                        counter.dirty = true;
                    }
                }
            }
        }
        counters.windows += added;
    }

    /// This process's counts of `campaign`'s days still in memory (fresher than its stored
    /// rows).
    #[cfg(test)]
    pub(crate) fn days_of(&self, campaign: CampaignKey) -> BTreeMap<Day, DaySlices> {
        self.days_of_where(campaign, |_| true)
    }

    /// This process's counts of the `campaign`'s days in memory that `wanted` picks: only
    /// those are copied (after a backfill a process holds a year of days for minutes).
    pub(crate) fn days_of_where(
        &self,
        campaign: CampaignKey,
        wanted: impl Fn(Day) -> bool,
    ) -> BTreeMap<Day, DaySlices> {
        lock(&self.counters)
            .campaigns
            .get(&campaign)
            .map(|days| {
                days.iter()
                    .filter(|(day, _)| wanted(**day))
                    .map(|(day, counter)| (*day, counter.slices.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Stores every campaign-day that changed since the last flush, then drops the days that
    /// are sealed and quiet; returns how many rows were written.
    pub(crate) async fn flush(
        &self,
        store: &dyn DeliveryStore,
        now: DateTime<Utc>,
    ) -> Result<usize, StoreError> {
        let _one_at_a_time = self.flushing.lock().await;
        let (rows, batch): (Vec<LiveCountRow>, PublicationBatch) = {
            let mut counters = lock(&self.counters);
            // Taken with the rows: whatever is published is in a row stored before it.
            let batch = counters.ledger.take_unpublished(now);
            let mut rows = Vec::new();
            for (campaign, days) in &mut counters.campaigns {
                for (day, counter) in days.iter_mut().filter(|(_, counter)| counter.dirty) {
                    counter.dirty = false;
                    rows.push(LiveCountRow {
                        campaign: *campaign,
                        day: *day,
                        writer: self.writer,
                        slices: counter.slices.clone(),
                    });
                }
            }
            (rows, batch)
        };
        if rows.is_empty() && batch.is_empty() {
            self.drop_quiet_days(now);
            return Ok(0);
        }
        let mut unstored = Unstored {
            live: self,
            days: rows.iter().map(|row| (row.campaign, row.day)).collect(),
            batch: Some(batch),
        };
        store.write_live_counts(&rows).await?;
        unstored.days.clear();
        if let Some(batch) = unstored.batch.as_ref().filter(|batch| !batch.is_empty()) {
            store
                .publish_windows(&batch.publications(self.writer))
                .await?;
        }
        if let Some(batch) = unstored.batch.take() {
            lock(&self.counters).ledger.published(batch);
        }
        self.drop_quiet_days(now);
        Ok(rows.len())
    }

    /// Compares every window due at `now` with the other processes' publications and gives up
    /// the users a publication ranked before this process's already counts; the rows that
    /// changed are stored at the next flush. Returns how many were given up. A window whose
    /// publications cannot be read stays due for the next call, and the first such error is
    /// returned once every other window is settled: one bad partition stalls no other.
    pub(crate) async fn reconcile(
        &self,
        store: &dyn Store,
        now: DateTime<Utc>,
    ) -> Result<usize, StoreError> {
        let others_listed = store
            .processes()
            .await?
            .iter()
            .any(|report| report.id != self.writer);
        self.others_listed
            .store(others_listed, std::sync::atomic::Ordering::Relaxed);
        let due = lock(&self.counters).ledger.due(now, self.window.length());
        let me = self.writer;
        // Ranked before the counters' lock is taken: every impression counted waits for it.
        let read: Vec<Result<Compared, StoreError>> = stream::iter(due)
            .map(|(window, mine)| async move {
                let theirs = store
                    .window_publications(window.campaign, window.start)
                    .await?;
                let given_up = ceded(&theirs, me, &mine);
                Ok((window, mine, given_up))
            })
            .buffer_unordered(WINDOW_READS_IN_FLIGHT)
            .collect()
            .await;
        let mut first_error = None;
        let compared: Vec<Compared> = read
            .into_iter()
            .filter_map(|outcome| {
                outcome
                    .map_err(|error| {
                        first_error.get_or_insert(error);
                    })
                    .ok()
            })
            .collect();
        let mut guard = lock(&self.counters);
        let counters = &mut *guard;
        let mut given_up_count = 0;
        for (window, mine, given_up) in compared {
            counters.ledger.settle(window, &mine, &given_up, now);
            for entry in given_up {
                let Some(counter) = counters
                    .campaigns
                    .get_mut(&window.campaign)
                    .and_then(|days| days.get_mut(&entry.day))
                else {
                    continue;
                };
                if let Some((_, slice)) = counter
                    .windows
                    .find_mut(entry.key, |(key, _)| *key == entry.key)
                    && *slice != CEDED
                {
                    counter.slices.remove_one(usize::from(*slice));
                    *slice = CEDED;
                    counter.dirty = true;
                    given_up_count += 1;
                }
            }
        }
        drop(guard);
        if given_up_count > 0 {
            metrics::counter!("adevents_delivery_windows_given_up_total")
                .increment(given_up_count as u64);
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(given_up_count),
        }
    }

    /// Compares every window published, closed or not (a process about to stop cleanly: what
    /// it keeps is in its saved row for good).
    pub(crate) async fn compare_every_window(
        &self,
        store: &dyn Store,
    ) -> Result<usize, StoreError> {
        // Later than any window's grace; the second comparison it schedules never comes.
        let past_every_grace = Utc::now() + chrono::TimeDelta::days(1);
        self.reconcile(store, past_every_grace).await
    }

    fn drop_quiet_days(&self, now: DateTime<Utc>) {
        let rule = self.rule;
        let mut counters = lock(&self.counters);
        let mut dropped = 0;
        counters.campaigns.retain(|_, days| {
            days.retain(|day, counter| {
                let keep = counter.dirty
                    || !rule.may_seal(*day, now)
                    || counter.last_counted.elapsed() < QUIET_BEFORE_DROP;
                if !keep {
                    dropped += counter.windows.len();
                }
                keep
            });
            !days.is_empty()
        });
        counters.windows -= dropped;
        if dropped > 0 {
            counters.warned_full = false;
        }
    }
}

/// Stores this process's live counts every `interval` until the task is aborted; after each
/// flush that stored everything counted before it started, `saved` is told when it started.
pub(crate) fn spawn_flusher(
    live: std::sync::Arc<LiveDelivery>,
    store: std::sync::Arc<dyn DeliveryStore>,
    interval: Duration,
    saved: impl Fn(Instant) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = crate::periodic::ticks(interval);
        let mut outage = crate::periodic::OutageLog::new(
            "cannot store live delivery counts; retrying",
            Some("storing live delivery counts again"),
        );
        loop {
            ticks.tick().await;
            let started = Instant::now();
            let flushed = live.flush(store.as_ref(), Utc::now()).await;
            if flushed.is_ok() {
                saved(started);
            }
            outage.record(&flushed);
        }
    })
}

/// Compares this process's due windows with the other processes' every second until the task
/// is aborted (on a store several processes share).
pub(crate) fn spawn_reconciler(
    live: std::sync::Arc<LiveDelivery>,
    store: std::sync::Arc<dyn Store>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = crate::periodic::ticks(Duration::from_secs(1));
        let mut outage = crate::periodic::OutageLog::new(
            "cannot compare billable windows with other processes; retrying",
            Some("comparing billable windows with other processes again"),
        );
        loop {
            ticks.tick().await;
            outage.record(&live.reconcile(store.as_ref(), Utc::now()).await);
        }
    })
}

/// What a flush took out of the counters and has not stored yet, put back when the flush
/// fails or is cancelled (a clean stop aborts the flusher, mid-write or not), so that a later
/// flush, the last one before the process leaves included, stores it.
struct Unstored<'a> {
    live: &'a LiveDelivery,
    /// Campaign-days whose rows are not stored yet: dirty again.
    days: Vec<(CampaignKey, Day)>,
    /// Users not published yet: published with the next batch.
    batch: Option<PublicationBatch>,
}

impl Drop for Unstored<'_> {
    fn drop(&mut self) {
        if self.days.is_empty() && self.batch.is_none() {
            // Stored: nothing to put back, and no lock to take four times a second.
            return;
        }
        let mut counters = lock(&self.live.counters);
        if let Some(batch) = self.batch.take() {
            counters.ledger.restore(batch);
        }
        for (campaign, day) in &self.days {
            if let Some(counter) = counters
                .campaigns
                .get_mut(campaign)
                .and_then(|days| days.get_mut(day))
            {
                counter.dirty = true;
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Counts stay valid whatever panicked while they were held.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{AdId, AdvertiserId, CampaignId, ImpressionId, UserId};
    use crate::domain::time::EventTime;
    use crate::domain::traffic::InvalidReason;
    use crate::domain::user_data::UserData;
    use uuid::Uuid;

    fn impression(campaign: CampaignKey, user: Uuid, at: &str) -> Impression {
        Impression {
            impression_id: ImpressionId::new(Uuid::new_v4()),
            campaign,
            ad_id: AdId::new(Uuid::new_v4()),
            user_id: UserId::new(user),
            timestamp: EventTime::from_stored(at.parse().expect("time")),
            user_ip: None,
            user_data: UserData::default(),
            user_agent: None,
            invalid: None,
            pixel_arrival: None,
            ip_is_viewers: true,
        }
    }

    #[test]
    fn a_window_counts_once_at_its_earliest_impression_and_invalid_traffic_never() {
        let live = LiveDelivery::new(
            ProcessId::random(),
            BillableWindow::DEFAULT,
            SealingRule::default(),
        );
        let campaign = CampaignKey {
            advertiser_id: AdvertiserId::new(Uuid::new_v4()),
            campaign_id: CampaignId::new(Uuid::new_v4()),
        };
        let (alice, bob) = (Uuid::new_v4(), Uuid::new_v4());
        // 00:14:59 and 00:15:10 share the window [00:14:40, 00:15:20) but not a slice.
        let late = impression(campaign, alice, "2026-11-26T00:15:10Z");
        live.count(&live.countable(std::slice::from_ref(&late)));
        live.count(&live.countable(std::slice::from_ref(&late)));
        let early = impression(campaign, alice, "2026-11-26T00:14:59Z");
        let mut bot = impression(campaign, bob, "2026-11-26T00:14:59Z");
        bot.invalid = Some(InvalidReason::BotUserAgent);
        let next_window = impression(campaign, alice, "2026-11-26T00:15:25Z");
        live.count(&live.countable(&[early, bot, next_window]));
        let days = live.days_of(campaign);
        let slices = days.values().next().expect("a day");
        assert_eq!(slices.total(), 2);
        assert_eq!((slices.get(0), slices.get(1)), (1, 1));
    }
}
