//! Decides each conversion's attribution once (docs/DESIGN.md, "Conversions"). A conversion
//! is due `--attribution-delay` after its first copy arrived; it is decided once every running
//! process has indexed what it stored before that moment, from the index entries stored by
//! then, so a click that reached any server within the delay counts. The decision is recorded
//! first-wins (a lightweight transaction on Cassandra): of two processes deciding at once, or
//! one deciding again after a restart, the first recorded is the one every reader sees, and
//! only it is written where conversions are counted. The due entry goes last, so a crash at any
//! step only repeats the steps after the decision.

use crate::conversions::turns;
use crate::domain::conversion::attribution::{LookBacks, attribute};
use crate::domain::conversion::index::{IndexEntry, IndexKey, Week};
use crate::domain::conversion::{Conversion, DecidedConversion, LookBack};
use crate::domain::ids::{CampaignId, CampaignKey};
use crate::domain::owner::Owner;
use crate::domain::time::Day;
use crate::event_index::EventIndexer;
use crate::ingest::Ingestor;
use crate::settings::SettingsCache;
use crate::store::{DueConversion, DueLane, Store, StoreError};
use chrono::{DateTime, TimeDelta, Utc};
use futures::{StreamExt, stream};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the due lists are read when the last round found none full.
const PERIOD: Duration = Duration::from_millis(500);
/// Conversions decided at once.
const CONCURRENCY: usize = 16;
/// Due entries one round reads at most from one day's lists together (each list at least
/// one): a round's memory stays small however many advertisers wait at once.
const READ_AT_MOST: usize = 20_000;
/// How often the conversions waiting for their decision are counted, and the most counted.
const PENDING_EVERY: Duration = Duration::from_secs(10);
const PENDING_COUNTED: usize = 10_000;
/// How often a day's shared list (written by releases before the lists by advertiser) is
/// read again once found empty: nothing writes it after an upgrade, and on Cassandra reading
/// it from its start passes every row taken off it.
const SHARED_RECHECK: Duration = Duration::from_secs(10);
/// Index rows one decision reads at most, newest first: a user with millions of events (a
/// bot, or an ad server's one id for every cookieless visitor) costs a bounded read, not
/// memory in proportion to its events. An older covered click past them is not seen.
const ROWS_PER_DECISION: usize = 50_000;
/// How far back the due lists are read after a start: conversions that waited longer (no
/// server running for a month) are decided only by `adevents` runs that reach back further.
const DUE_REACH_DAYS: i64 = 31;

pub(crate) struct Decider {
    store: Arc<dyn Store>,
    settings: Arc<SettingsCache>,
    indexer: Arc<EventIndexer>,
    /// Marks the days and slices a decided conversion changes, as it does for late events.
    ingestor: Arc<Ingestor>,
    cursors: Mutex<Cursors>,
}

/// Where the due lists are read from next.
struct Cursors {
    /// The first day whose lists may still hold entries.
    first_day: Day,
    /// The last entry this process took off each list.
    taken_through: HashMap<(Day, DueLane), DueConversion>,
    /// When each day's shared list was last found empty.
    shared_empty: HashMap<Day, Instant>,
    /// When each day's shared list last failed to be read (on Cassandra, a read past too many
    /// tombstones fails every time): it is tried again only after [`SHARED_RECHECK`].
    shared_failed: HashMap<Day, Instant>,
    /// The lists found holding nothing more due by a moment, each with that moment: one
    /// whose latest listed due time is no later is not read again.
    exhausted_through: HashMap<(Day, DueLane), DateTime<Utc>>,
    /// How many of each day's lists gave entries to its last round: the round is shared among
    /// them, not among every list of the day, so idle advertisers do not slow a busy one.
    busy_lists: HashMap<Day, usize>,
}

impl Cursors {
    /// Forgets what is kept of the days before `first`.
    fn pass_to(&mut self, first: Day) {
        self.first_day = first;
        self.taken_through.retain(|(day, _), _| *day >= first);
        self.shared_empty.retain(|day, _| *day >= first);
        self.shared_failed.retain(|day, _| *day >= first);
        self.exhausted_through.retain(|(day, _), _| *day >= first);
        self.busy_lists.retain(|day, _| *day >= first);
    }
}

/// A day's lists to read, each from where it was taken through, and how many of them were
/// busy in the last round.
struct Lists {
    lists: Vec<(DueLane, Option<DueConversion>)>,
    busy: usize,
    /// The shared list is left out after a failed read: the day cannot be passed meanwhile.
    shared_held: bool,
}

/// What one round over the due lists did.
#[derive(Debug, Default)]
pub(crate) struct Round {
    pub(crate) decided: usize,
    /// Some list gave its whole share: another round follows at once.
    pub(crate) more: bool,
    /// Every list of the day was read whole and all it gave decided: once its day has
    /// passed, the day holds nothing more.
    read_whole: bool,
    /// The first failure met (a list not read, a conversion not decided, entries not taken
    /// off): it held back its own list, or its own day, and nothing else.
    pub(crate) failed: Option<StoreError>,
}

impl Decider {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        settings: Arc<SettingsCache>,
        indexer: Arc<EventIndexer>,
        ingestor: Arc<Ingestor>,
    ) -> Self {
        let first_day = Day::new((Utc::now() - TimeDelta::days(DUE_REACH_DAYS)).date_naive());
        Self {
            store,
            settings,
            indexer,
            ingestor,
            cursors: Mutex::new(Cursors {
                first_day,
                taken_through: HashMap::new(),
                shared_empty: HashMap::new(),
                shared_failed: HashMap::new(),
                exhausted_through: HashMap::new(),
                busy_lists: HashMap::new(),
            }),
        }
    }

    fn cursors(&self) -> std::sync::MutexGuard<'_, Cursors> {
        self.cursors.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One round over every day's due lists, each list giving its share of the conversions
    /// due by now that can be decided. Fails only when it cannot tell what is due; any other
    /// failure is reported in [`Round::failed`] beside what the round did.
    pub(crate) async fn run_once(&self) -> Result<Round, StoreError> {
        let until = self
            .indexer
            .indexed_everywhere_through(self.store.as_ref())
            .await?;
        let last_day = Day::new(until.date_naive());
        let first_day = self.cursors().first_day;
        let mut total = Round::default();
        let mut whole_so_far = true;
        let mut emptied_through = None;
        for day in first_day.through(last_day) {
            // A day that fails is tried again next round; the days after it go on.
            match self.round(day, until).await {
                Ok(round) => {
                    total.decided += round.decided;
                    total.more |= round.more;
                    whole_so_far &= round.read_whole;
                    if let Some(error) = round.failed {
                        total.failed.get_or_insert(error);
                    }
                }
                Err(error) => {
                    total.failed.get_or_insert(error);
                    whole_so_far = false;
                }
            }
            // A day before the last read whole holds nothing due any more: nothing is listed
            // on a day that has passed.
            if whole_so_far && day < last_day {
                emptied_through = Some(day);
            }
        }
        if let Some(day) = emptied_through {
            self.cursors().pass_to(day.next());
        }
        Ok(total)
    }

    /// The day's lists to read, each with where to read it from: its own record or this
    /// process's, whichever is further. A list found exhausted through a moment no earlier
    /// than its latest listed due time is left out: nothing was listed on it since. The
    /// shared list is left out for a while once found empty, but only while `day` is still
    /// open (`recheck_shared`): a day is passed only once every list of it was read past its
    /// end.
    async fn lists_of(&self, day: Day, recheck_shared: bool) -> Result<Lists, StoreError> {
        let recorded = self.store.due_lanes(day).await?;
        let cursors = self.cursors();
        let lately =
            |found: Option<&Instant>| found.is_some_and(|at| at.elapsed() < SHARED_RECHECK);
        let shared_is_empty = recheck_shared && lately(cursors.shared_empty.get(&day));
        let shared_held = lately(cursors.shared_failed.get(&day));
        let shared = (!shared_is_empty && !shared_held).then_some((DueLane::Shared, None));
        let busy = cursors.busy_lists.get(&day).copied();
        let lists = shared
            .into_iter()
            .chain(recorded.into_iter().filter_map(|list| {
                let lane = DueLane::Advertiser(list.advertiser_id);
                let unchanged = list.listed_through.is_some_and(|listed| {
                    cursors
                        .exhausted_through
                        .get(&(day, lane))
                        .is_some_and(|through| listed <= *through)
                });
                (!unchanged).then_some((lane, list.decided_through))
            }))
            .map(|(lane, recorded)| {
                let taken = cursors.taken_through.get(&(day, lane)).cloned();
                (lane, recorded.max(taken))
            })
            .collect::<Vec<_>>();
        Ok(Lists {
            busy: busy.unwrap_or(lists.len()),
            lists,
            shared_held,
        })
    }

    /// Takes each of the day's lists' share of what is due by `until`, decides them in turn,
    /// and takes off each list what is decided, in order (a failure stops its list there).
    /// The share is read for the lists busy in the last round (at most [`READ_AT_MOST`] in
    /// all), then cut to the share of the lists busy now: a day that suddenly has many busy
    /// advertisers makes one round no longer than its turns.
    async fn round(&self, day: Day, until: DateTime<Utc>) -> Result<Round, StoreError> {
        let open = day >= Day::new(until.date_naive());
        let Lists {
            lists,
            busy,
            shared_held,
        } = self.lists_of(day, open).await?;
        let read_share = turns::share(busy).min((READ_AT_MOST / lists.len().max(1)).max(1));
        let read: Vec<Result<Vec<DueConversion>, StoreError>> = stream::iter(lists.clone())
            .map(|(lane, after)| async move {
                self.store
                    .due_conversions(day, lane, after.as_ref(), until, read_share)
                    .await
            })
            .buffered(CONCURRENCY)
            .collect()
            .await;
        let mut round = Round {
            read_whole: !shared_held,
            ..Round::default()
        };
        let mut failed_reads = Vec::new();
        let mut entries: Vec<Vec<DueConversion>> = lists
            .iter()
            .zip(read)
            .map(|((lane, _), result)| {
                result.unwrap_or_else(|error| {
                    // One list that cannot be read does not hold the others back.
                    round.failed.get_or_insert(error);
                    failed_reads.push(*lane);
                    Vec::new()
                })
            })
            .collect();
        if failed_reads.contains(&DueLane::Shared) {
            self.cursors().shared_failed.insert(day, Instant::now());
        }
        let busy_now = entries.iter().filter(|taken| !taken.is_empty()).count();
        self.cursors().busy_lists.insert(day, busy_now);
        let share = read_share.min(turns::share(busy_now));
        // A list read whole gave less than it was asked for and no more than its share; one
        // that gave as much as asked, or was cut to its share, may have more.
        let read_whole: Vec<bool> = lists
            .iter()
            .zip(&entries)
            .map(|((lane, _), taken)| {
                !failed_reads.contains(lane) && taken.len() < read_share && taken.len() <= share
            })
            .collect();
        let may_have_more: Vec<bool> = lists
            .iter()
            .zip(&entries)
            .map(|((lane, _), taken)| !failed_reads.contains(lane) && taken.len() >= share)
            .collect();
        for taken in &mut entries {
            taken.truncate(share);
        }
        let lengths: Vec<usize> = entries.iter().map(Vec::len).collect();
        let order = turns::in_turn(&lengths);
        let in_order: Vec<DueConversion> = order
            .iter()
            .map(|&(list, position)| entries[list][position].clone())
            .collect();
        let outcomes: Vec<Result<(), StoreError>> = stream::iter(in_order)
            .map(|entry| async move { self.decide(&entry).await })
            .buffered(CONCURRENCY)
            .collect()
            .await;
        let mut decided_in: Vec<Vec<bool>> = lengths.iter().map(|&n| vec![false; n]).collect();
        for (&(list, position), outcome) in order.iter().zip(outcomes) {
            match outcome {
                Ok(()) => decided_in[list][position] = true,
                Err(error) => {
                    round.failed.get_or_insert(error);
                }
            }
        }
        for (((((lane, _), taken), decided), whole), more) in lists
            .iter()
            .zip(&entries)
            .zip(&decided_in)
            .zip(read_whole)
            .zip(may_have_more)
        {
            let done = decided.iter().take_while(|ok| **ok).count();
            if let Some(last) = taken[..done].last() {
                if let Err(error) = self.store.remove_due(*lane, &taken[..done]).await {
                    round.failed.get_or_insert(error);
                    round.read_whole = false;
                    continue;
                }
                // Only a list that moved asks for the next round at once: one stuck at a
                // conversion that cannot be decided waits for the next tick.
                round.more |= more;
                round.decided += done;
                self.cursors()
                    .taken_through
                    .insert((day, *lane), last.clone());
            }
            let mut cursors = self.cursors();
            if *lane == DueLane::Shared && whole && taken.is_empty() {
                cursors.shared_empty.insert(day, Instant::now());
            }
            if whole && done == taken.len() {
                cursors.exhausted_through.insert((day, *lane), until);
            } else {
                cursors.exhausted_through.remove(&(day, *lane));
                round.read_whole = false;
            }
        }
        Ok(round)
    }

    /// Counts the entries of the due lists from where they are read on, due or not yet (at
    /// most [`PENDING_COUNTED`]), into `adevents_conversions_pending`.
    async fn count_pending(&self) -> Result<(), StoreError> {
        let first = self.cursors().first_day;
        let far = Utc::now() + TimeDelta::days(1);
        let mut pending = 0;
        'days: for day in first.through(Day::new(far.date_naive())) {
            for (lane, after) in self.lists_of(day, false).await?.lists {
                if pending >= PENDING_COUNTED {
                    break 'days;
                }
                let entries = self
                    .store
                    .due_conversions(day, lane, after.as_ref(), far, PENDING_COUNTED - pending)
                    .await?;
                pending += entries.len();
            }
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

    /// How long after its first arrival a conversion's events count: the delay its due entry
    /// carries (its due time less that arrival), the same on every process whatever delay each
    /// runs with (any process decides any conversion). The first copy's first entry is due
    /// first, so it is the one decided; an entry listed again after a late write is due later
    /// and, decided first only if the first was passed over (or both in one round), credits
    /// the events stored until its own due time.
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

    /// Decides every [`PERIOD`], and round after round while lists give their whole share,
    /// until the task is aborted.
    pub(crate) fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let decider = Arc::clone(self);
        tokio::spawn(async move {
            let mut ticks = crate::periodic::ticks(PERIOD);
            let mut counted = Instant::now();
            let mut warned = Warnings::default();
            loop {
                ticks.tick().await;
                loop {
                    let more = match decider.run_once().await {
                        Ok(round) => {
                            if let Some(error) = round.failed {
                                warned.warn(&error);
                            }
                            round.more
                        }
                        Err(error) => {
                            warned.warn(&error);
                            false
                        }
                    };
                    if counted.elapsed() >= PENDING_EVERY {
                        counted = Instant::now();
                        if let Err(error) = decider.count_pending().await {
                            tracing::debug!(error = %error.chain(), "cannot count pending conversions");
                        }
                    }
                    if !more {
                        break;
                    }
                }
            }
        })
    }
}

/// A failure of deciding, logged at most every [`PENDING_EVERY`]: one that repeats (a
/// conversion that cannot be decided) would otherwise be logged every round.
#[derive(Default)]
struct Warnings {
    last: Option<Instant>,
}

impl Warnings {
    fn warn(&mut self, error: &StoreError) {
        if self.last.is_some_and(|at| at.elapsed() < PENDING_EVERY) {
            return;
        }
        self.last = Some(Instant::now());
        tracing::warn!(error = %error.chain(), "cannot decide some conversions yet; retrying");
    }
}
