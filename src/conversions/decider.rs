//! Decides each conversion's attribution once (docs/DESIGN.md, "Conversions"). A conversion
//! is due `--attribution-delay` after its first copy arrived; it is decided once every running
//! process has indexed what it stored before that moment, from the index entries stored by
//! then, so a click that reached any server within the delay counts. The decision is recorded
//! first-wins (a lightweight transaction on Cassandra): of two processes deciding at once, or
//! one deciding again after a restart, the first recorded is the one every reader sees, and
//! only it is written where conversions are counted. The due entry goes last, so a crash at any
//! step only repeats the steps after the decision.

use crate::domain::conversion::attribution::{LookBacks, attribute};
use crate::domain::conversion::index::{IndexEntry, IndexKey, Week};
use crate::domain::conversion::{Conversion, DecidedConversion, LookBack};
use crate::domain::ids::{CampaignId, CampaignKey};
use crate::domain::owner::Owner;
use crate::domain::time::Day;
use crate::event_index::EventIndexer;
use crate::ingest::Ingestor;
use crate::settings::SettingsCache;
use crate::store::{DueConversion, Store, StoreError};
use chrono::{DateTime, TimeDelta, Utc};
use futures::{StreamExt, stream};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the due list is read.
const PERIOD: Duration = Duration::from_millis(500);
/// Due entries read at once.
const BATCH: usize = 200;
/// Conversions decided at once.
const CONCURRENCY: usize = 16;
/// How often the conversions waiting for their decision are counted, and the most counted.
const PENDING_EVERY: Duration = Duration::from_secs(10);
const PENDING_COUNTED: usize = 10_000;
/// Index rows one decision reads at most, newest first: a user with millions of events (a
/// bot, or an ad server's one id for every cookieless visitor) costs a bounded read, not
/// memory in proportion to its events. An older covered click past them is not seen.
const ROWS_PER_DECISION: usize = 50_000;
/// How far back the due list is read after a start: conversions that waited longer (no
/// server running for a month) are decided only by `adevents` runs that reach back further.
const DUE_REACH_DAYS: i64 = 31;

pub(crate) struct Decider {
    store: Arc<dyn Store>,
    settings: Arc<SettingsCache>,
    indexer: Arc<EventIndexer>,
    /// Marks the days and slices a decided conversion changes, as it does for late events.
    ingestor: Arc<Ingestor>,
    /// Where the due list is read from next: a day and the last entry taken of it.
    cursor: Mutex<(Day, Option<DueConversion>)>,
}

impl Decider {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        settings: Arc<SettingsCache>,
        indexer: Arc<EventIndexer>,
        ingestor: Arc<Ingestor>,
    ) -> Self {
        let first = Day::new((Utc::now() - TimeDelta::days(DUE_REACH_DAYS)).date_naive());
        Self {
            store,
            settings,
            indexer,
            ingestor,
            cursor: Mutex::new((first, None)),
        }
    }

    /// Decides every conversion due by now that can be; returns how many.
    pub(crate) async fn run_once(&self) -> Result<usize, StoreError> {
        let until = self
            .indexer
            .indexed_everywhere_through(self.store.as_ref())
            .await?;
        let last_day = Day::new(until.date_naive());
        let mut decided = 0;
        loop {
            let (day, after) = self
                .cursor
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            if day > last_day {
                break;
            }
            let due = self
                .store
                .due_conversions(day, after.as_ref(), until, BATCH)
                .await?;
            let taken = due.len();
            // In order, so the cursor passes only what is decided.
            let outcomes: Vec<Result<(), StoreError>> = stream::iter(due.clone())
                .map(|entry| async move { self.decide(&entry).await })
                .buffered(CONCURRENCY)
                .collect()
                .await;
            let done: Vec<DueConversion> = due
                .iter()
                .zip(&outcomes)
                .take_while(|(_, outcome)| outcome.is_ok())
                .map(|(entry, _)| entry.clone())
                .collect();
            decided += done.len();
            self.store.remove_due(&done).await?;
            let mut cursor = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(last) = done.last() {
                cursor.1 = Some(last.clone());
            }
            if let Some(Err(error)) = outcomes.into_iter().find(Result::is_err) {
                return Err(error);
            }
            if taken < BATCH {
                if day == last_day {
                    break;
                }
                *cursor = (day.next(), None);
            }
        }
        Ok(decided)
    }

    /// Counts the due list's entries from the cursor on, due or not yet (at most
    /// [`PENDING_COUNTED`]), into `adevents_conversions_pending`.
    async fn count_pending(&self) -> Result<(), StoreError> {
        let (first, after) = self
            .cursor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let far = Utc::now() + TimeDelta::days(1);
        let mut pending = 0;
        let mut day = first;
        let mut after = after;
        while day <= Day::new(far.date_naive()) && pending < PENDING_COUNTED {
            let entries = self
                .store
                .due_conversions(day, after.as_ref(), far, PENDING_COUNTED - pending)
                .await?;
            pending += entries.len();
            day = day.next();
            after = None;
        }
        metrics::gauge!("adevents_conversions_pending").set(pending as f64);
        Ok(())
    }

    /// Decides one conversion, or finds its decision, and writes it where it is counted.
    async fn decide(&self, due: &DueConversion) -> Result<(), StoreError> {
        let record = self
            .store
            .conversion_record(due.advertiser_id, &due.conversion_id)
            .await?;
        let decision = match record.decision {
            Some(decision) => decision,
            None => {
                let Some(first) = record.copies.iter().min_by_key(|copy| copy.order_key()) else {
                    // A due entry whose copy is gone (its retention passed, or an erasure):
                    // nothing to decide.
                    return Ok(());
                };
                // Its user's erasure is about to delete it: a decision now would outlive it.
                let conversion = &first.conversion;
                if conversion.user_id.is_some_and(|user| {
                    self.ingestor.is_erased(
                        user,
                        conversion.advertiser_id,
                        conversion.timestamp.instant(),
                    )
                }) {
                    return Ok(());
                }
                let stored_by = first.received + self.delay_of(due, first.received);
                let entries = self.entries_of(&first.conversion, stored_by).await?;
                let look_backs = self.look_backs(&first.conversion, &entries).await?;
                let attribution = attribute(&first.conversion, &entries, stored_by, |campaign| {
                    look_backs
                        .get(&campaign)
                        .copied()
                        .unwrap_or(LookBacks::DEFAULT)
                });
                let decided = DecidedConversion {
                    conversion: first.conversion.clone(),
                    received: first.received,
                    attribution,
                };
                let recorded = self.store.decide_conversion(&decided).await?;
                let kind = recorded
                    .attribution
                    .map_or("unattributed", |attribution| attribution.kind.name());
                metrics::counter!("adevents_conversion_decisions_total", "kind" => kind)
                    .increment(1);
                recorded
            }
        };
        self.store
            .write_decided(std::slice::from_ref(&decision))
            .await?;
        if let Some(campaign_id) = decision.campaign_id() {
            let campaign = CampaignKey {
                advertiser_id: decision.conversion.advertiser_id,
                campaign_id,
            };
            let at = decision.conversion.timestamp.instant();
            self.ingestor.conversions_counted(&[(campaign, at)]).await?;
        }
        Ok(())
    }

    /// The delay a due entry carries: its due time less the arrival of the copy it was written
    /// for. The first copy's entry is due first, so it is the one decided.
    fn delay_of(&self, due: &DueConversion, received: DateTime<Utc>) -> TimeDelta {
        (due.due - received).max(TimeDelta::zero())
    }

    /// The index entries the conversion's rule reads: the named impression's, else the
    /// user's, timed at or before the conversion, newest first over the weeks a look-back can
    /// reach, of the newest [`ROWS_PER_DECISION`] rows; only those the rule can credit (valid,
    /// stored by `stored_by`) are kept.
    async fn entries_of(
        &self,
        conversion: &Conversion,
        stored_by: DateTime<Utc>,
    ) -> Result<Vec<IndexEntry>, StoreError> {
        let key = match conversion.named_impression() {
            Some(impression) => IndexKey::Impression(impression),
            None => match conversion.user_id {
                Some(user) => IndexKey::User(user),
                None => return Ok(Vec::new()),
            },
        };
        let at = conversion.timestamp.instant();
        let reach = TimeDelta::seconds(i64::from(LookBack::CLICK_MAX.seconds()));
        let mut entries = Vec::new();
        let mut left = ROWS_PER_DECISION;
        // A week at a time, so that the newest weeks take the budget.
        for week in Week::newest_first(at - reach, at) {
            let rows = self
                .store
                .read_index_newest(conversion.advertiser_id, week, key, at, left)
                .await?;
            left -= rows.len().min(left);
            entries.extend(
                rows.into_iter()
                    .filter(|entry| entry.valid && entry.received <= stored_by),
            );
            if left == 0 {
                metrics::counter!("adevents_conversion_decisions_read_capped_total").increment(1);
                break;
            }
        }
        Ok(entries)
    }

    /// The look-backs of every campaign among `entries`, as set now.
    async fn look_backs(
        &self,
        conversion: &Conversion,
        entries: &[IndexEntry],
    ) -> Result<HashMap<CampaignId, LookBacks>, StoreError> {
        let campaigns: BTreeMap<CampaignId, ()> = entries
            .iter()
            .map(|entry| (entry.campaign_id, ()))
            .collect();
        let mut look_backs = HashMap::with_capacity(campaigns.len());
        for campaign_id in campaigns.into_keys() {
            let owner = Owner::Campaign(CampaignKey {
                advertiser_id: conversion.advertiser_id,
                campaign_id,
            });
            let history = self.settings.history(&owner).await?;
            look_backs.insert(campaign_id, history.latest().look_backs);
        }
        Ok(look_backs)
    }

    /// Decides every [`PERIOD`] until the task is aborted.
    pub(crate) fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let decider = Arc::clone(self);
        tokio::spawn(async move {
            let mut ticks = crate::periodic::ticks(PERIOD);
            let mut counted = std::time::Instant::now();
            loop {
                ticks.tick().await;
                if let Err(error) = decider.run_once().await {
                    tracing::warn!(error = %error.chain(), "cannot decide conversions yet; retrying");
                }
                if counted.elapsed() >= PENDING_EVERY {
                    counted = std::time::Instant::now();
                    if let Err(error) = decider.count_pending().await {
                        tracing::debug!(error = %error.chain(), "cannot count pending conversions");
                    }
                }
            }
        })
    }
}
