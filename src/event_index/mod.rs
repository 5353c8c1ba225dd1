//! Writes the event index (`domain::conversion::index`) off the request path: ingestion hands
//! over each stored event with its arrival, and a flush every [`FLUSH_PERIOD`] writes them in
//! one call. A click is indexed under its user once its impression's user is known: from the
//! impressions this process indexed lately, else from the index itself; a click whose
//! impression is not stored yet waits a while and is tried again, less and less often, and
//! only so many wait at once.
//!
//! What attribution and erasures may rely on: every event this process stored before
//! [`EventIndexer::indexed_through`] is in the index (except a click still waiting for its
//! impression), and so is every event of an ingest call that began before it (a call under
//! way holds the moment back: what it checked then, it may store later). The process reports it, and deciders wait for every running process to pass
//! a conversion's moment before they decide it (`decider`). A process that vanishes leaves
//! its campaign-days marked, as for delivery, and the next to start indexes them again from
//! the raw events (`app::repair`).

pub(crate) mod reindex;

use crate::domain::conversion::index::{IndexEntry, IndexKey, IndexedKind, Week};
use crate::domain::ids::{AdvertiserId, ImpressionId, UserId};
use crate::domain::privacy::SubjectWeek;
use crate::processes::ProcessRegistry;
use crate::store::{EventIndexStore, ProcessStore, StoreError, SubjectStore};
use chrono::{DateTime, TimeDelta, Utc};
use futures::{StreamExt, stream};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How often queued entries are written.
pub(crate) const FLUSH_PERIOD: Duration = Duration::from_millis(200);
/// Entries queued at most (about 150 bytes each); past it, ingestion answers 503 until the
/// queue drains: a store that takes the index slower than ingestion feeds it pushes back on
/// ingestion rather than filling this process's memory or the store's.
const QUEUE_CAPACITY: usize = 500_000;
/// Entries one write takes at most: a lagging index is written in steady, bounded calls
/// rather than one call of everything queued (which on Cassandra filled the node's heap).
const ENTRIES_PER_WRITE: usize = 10_000;
/// Subject-directory lines remembered as written; past it, the memory starts over (a line
/// written again is harmless, only work).
const DIRECTORY_LINES_REMEMBERED: usize = 1_000_000;
/// How long the lines are remembered at most: an erasure on another process deletes a
/// user's lines, and this process writes them again for the user's next events no later than
/// this after.
const DIRECTORY_MEMORY: Duration = Duration::from_secs(600);
/// Impressions' users remembered for their clicks; past it, the memory starts over.
const USERS_REMEMBERED: usize = 1_000_000;
/// How long a click waits for its impression to be stored before it is indexed only by the
/// impression's id (a user's rule then never finds it).
const CLICK_WAITS_FOR_IMPRESSION: TimeDelta = TimeDelta::minutes(2);
/// How far back from a click its impression is looked for: the longest click look-back.
const IMPRESSION_LOOK_BACK: TimeDelta = TimeDelta::days(91);

/// Clicks waiting for their impressions at most; past it, a click whose impression is not
/// found at once is given up (as after [`CLICK_WAITS_FOR_IMPRESSION`]): clicks of ids never
/// stored (a lost impression, or a caller's made-up ids) cannot fill memory or the flushes.
const CLICKS_WAITING: usize = 100_000;
/// Clicks of one advertiser waiting at most once half the room is taken: one tenant posting
/// clicks of made-up ids fills the first half and its share of the second, not the room
/// every other tenant's clicks wait in; a lone tenant still has half the room.
const CLICKS_WAITING_PER_ADVERTISER: usize = CLICKS_WAITING / 10;
/// The first wait before a waiting click is looked up again; each later one doubles, so a
/// click waits its two minutes through eight lookups, not one per flush.
const FIRST_RETRY: TimeDelta = TimeDelta::seconds(1);
/// How far back from a click a lookup after the first looks for its impression: one still
/// on its way was served shortly before its click (the first lookup looked back all the way).
const RETRY_LOOK_BACK: TimeDelta = TimeDelta::days(7);
/// Lookups of clicks' impressions under way at once.
const LOOKUPS_AT_ONCE: usize = 16;

/// A click waiting for its impression's user.
struct WaitingClick {
    entry: IndexEntry,
    since: DateTime<Utc>,
    /// Lookups made so far.
    tries: u32,
    /// When it is looked up next.
    next_try: DateTime<Utc>,
}

impl WaitingClick {
    fn new(entry: IndexEntry, now: DateTime<Utc>) -> Self {
        Self {
            entry,
            since: now,
            tries: 0,
            next_try: now,
        }
    }

    /// The impression it waits for.
    fn key(&self) -> (AdvertiserId, ImpressionId) {
        (self.entry.advertiser_id, self.entry.impression_id)
    }

    /// Waits again after one more lookup that did not find its impression.
    fn tried(mut self, now: DateTime<Utc>) -> Self {
        self.tries += 1;
        let doublings = self.tries.saturating_sub(1).min(16);
        self.next_try = now + FIRST_RETRY * 2_i32.pow(doublings);
        self
    }

    /// The weeks its impression is looked for in, newest first.
    fn weeks(&self) -> impl Iterator<Item = Week> + use<> {
        let at = self.entry.timestamp.instant();
        let look_back = if self.tries == 0 {
            IMPRESSION_LOOK_BACK
        } else {
            RETRY_LOOK_BACK
        };
        Week::newest_first(at - look_back, at)
    }
}

pub(crate) struct EventIndexer {
    store: Arc<dyn EventIndexStore>,
    /// Where the subject directory is written (`domain::privacy::SubjectWeek`).
    directory: Arc<dyn SubjectStore>,
    directory_written: Mutex<(Instant, HashSet<SubjectWeek>)>,
    registry: Arc<ProcessRegistry>,
    queue: Mutex<Vec<IndexEntry>>,
    waiting: Mutex<Vec<WaitingClick>>,
    users: Mutex<HashMap<(AdvertiserId, ImpressionId), UserId>>,
    indexed_through: Mutex<DateTime<Utc>>,
    /// Ingest calls under way, counted by the instant each began: what they store is not
    /// queued yet, so the index is whole only up to the oldest of them.
    in_flight: Mutex<BTreeMap<DateTime<Utc>, usize>>,
    /// One flush at a time.
    flushing: tokio::sync::Mutex<()>,
}

/// An ingest call under way ([`EventIndexer::begin_storing`]); it ends when dropped.
pub(crate) struct Storing {
    indexer: Arc<EventIndexer>,
    began: DateTime<Utc>,
}

impl Drop for Storing {
    fn drop(&mut self) {
        let mut in_flight = lock(&self.indexer.in_flight);
        if let Some(count) = in_flight.get_mut(&self.began) {
            *count -= 1;
            if *count == 0 {
                in_flight.remove(&self.began);
            }
        }
    }
}

impl EventIndexer {
    pub(crate) fn new(
        store: Arc<dyn EventIndexStore>,
        directory: Arc<dyn SubjectStore>,
        registry: Arc<ProcessRegistry>,
    ) -> Self {
        registry.expect_index();
        Self {
            store,
            directory,
            directory_written: Mutex::new((Instant::now(), HashSet::new())),
            registry,
            queue: Mutex::new(Vec::new()),
            waiting: Mutex::new(Vec::new()),
            users: Mutex::new(HashMap::new()),
            indexed_through: Mutex::new(Utc::now()),
            in_flight: Mutex::new(BTreeMap::new()),
            flushing: tokio::sync::Mutex::new(()),
        }
    }

    /// Marks an ingest call under way until the guard is dropped: the index is not said to be
    /// whole past its beginning before it has queued what it stores. The instant is taken with
    /// the marks held, so a flush that finds none older cannot have missed one.
    pub(crate) fn begin_storing(self: &Arc<Self>) -> Storing {
        let mut in_flight = lock(&self.in_flight);
        let began = Utc::now();
        *in_flight.entry(began).or_default() += 1;
        Storing {
            indexer: Arc::clone(self),
            began,
        }
    }

    /// When the oldest ingest call under way began, if one is.
    fn oldest_in_flight(&self) -> Option<DateTime<Utc>> {
        lock(&self.in_flight).keys().next().copied()
    }

    /// Whether ingestion may store more events: the queue is below its capacity.
    pub(crate) fn has_room(&self) -> bool {
        lock(&self.queue).len() < QUEUE_CAPACITY
    }

    /// Queues the entries of stored events ([`IndexEntry::of_impression`],
    /// [`IndexEntry::of_click`]), or of events read back by a repair. Their arrival is taken
    /// with the queue held, so a flush that starts later writes every entry that arrived
    /// before it started.
    pub(crate) fn stored(&self, entries: Vec<IndexEntry>) {
        let mut queue = lock(&self.queue);
        let received = Utc::now();
        queue.extend(
            entries
                .into_iter()
                .map(|entry| IndexEntry { received, ..entry }),
        );
        metrics::gauge!("adevents_event_index_queued").set(queue.len() as f64);
    }

    /// Everything this process stored before this instant is indexed (or waiting for its
    /// impression).
    pub(crate) fn indexed_through(&self) -> DateTime<Utc> {
        *lock(&self.indexed_through)
    }

    /// Waits until everything this process stored before `at` is indexed, at most
    /// `patience`; says whether it is.
    pub(crate) async fn wait_indexed_through(&self, at: DateTime<Utc>, patience: Duration) -> bool {
        let deadline = Instant::now() + patience;
        while self.indexed_through() < at {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    /// The moment before which every running process's stored events are indexed: this
    /// process's own, and on a shared store the least that any other running process reports.
    /// What waits for the index (a conversion's decision, an erasure) waits for this.
    pub(crate) async fn indexed_everywhere_through(
        &self,
        processes: &dyn ProcessStore,
    ) -> Result<DateTime<Utc>, StoreError> {
        let own = self.indexed_through();
        if !processes.is_shared() {
            return Ok(own);
        }
        let now = Utc::now();
        Ok(processes
            .processes()
            .await?
            .iter()
            .filter(|report| !report.is_silent(now))
            .filter_map(|report| report.indexed_through)
            .fold(own, DateTime::min))
    }

    /// Writes what is queued, with the user entries of the clicks whose users are found.
    /// Writes everything queued, [`ENTRIES_PER_WRITE`] at a time.
    pub(crate) async fn flush(&self) -> Result<(), StoreError> {
        while !self.write_some().await? {
            tokio::task::yield_now().await;
        }
        Ok(())
    }

    /// Writes the oldest queued entries (at most [`ENTRIES_PER_WRITE`]), with the user
    /// entries of the clicks whose users are found; says whether that emptied the queue.
    async fn write_some(&self) -> Result<bool, StoreError> {
        let _one = self.flushing.lock().await;
        let started = Instant::now();
        // Entries queue in arrival order: what stays queued arrived after what is taken.
        let (started_at, mut entries, next_arrival) = {
            let mut queue = lock(&self.queue);
            let taken: Vec<IndexEntry> = if queue.len() > ENTRIES_PER_WRITE {
                queue.drain(..ENTRIES_PER_WRITE).collect()
            } else {
                std::mem::take(&mut *queue)
            };
            (Utc::now(), taken, queue.first().map(|entry| entry.received))
        };
        self.remember_users(&entries);
        // The waiting clicks due for another lookup, and those whose impression's user this
        // process has learnt since (no read); the others wait on untouched. Those that
        // waited come first: past the bound on waiting, the new ones are given up.
        let due: Vec<WaitingClick> = {
            let users = lock(&self.users);
            let mut waiting = lock(&self.waiting);
            let (due, later) = std::mem::take(&mut *waiting)
                .into_iter()
                .partition(|click| {
                    click.next_try <= started_at || users.contains_key(&click.key())
                });
            *waiting = later;
            due
        };
        let clicks: Vec<WaitingClick> = due
            .into_iter()
            .chain(
                entries
                    .iter()
                    .filter(|entry| entry.kind == IndexedKind::Click)
                    .map(|entry| WaitingClick::new(entry.clone(), started_at)),
            )
            .collect();
        let (found, still_waiting) = match self.users_of(clicks, started_at).await {
            Ok(result) => result,
            Err((error, clicks)) => {
                self.requeue(entries, clicks, started_at);
                return Err(error);
            }
        };
        entries.extend(
            found
                .iter()
                .map(|(click, user)| click.entry.for_user(*user)),
        );
        // Should a write fail, every click goes back: those found too (the ones queued by
        // this flush come again from its entries).
        let all_clicks = |found: Vec<(WaitingClick, UserId)>, waiting: Vec<WaitingClick>| {
            found
                .into_iter()
                .map(|(click, _)| click)
                .chain(waiting)
                .collect::<Vec<_>>()
        };
        // The directory first: an erasure finds a user's entries only through it, so no entry
        // may be stored before the line that leads to it.
        if let Err(error) = self.write_directory(&entries).await {
            self.requeue(entries, all_clicks(found, still_waiting), started_at);
            return Err(error);
        }
        if !entries.is_empty()
            && let Err(error) = self.store.write_index(&entries).await
        {
            self.requeue(entries, all_clicks(found, still_waiting), started_at);
            return Err(error);
        }
        self.wait_on(still_waiting);
        metrics::counter!("adevents_event_index_entries_total").increment(entries.len() as u64);
        // Read after the write: a call that began before `started_at` and is still under way
        // has not queued its entries.
        let oldest = self.oldest_in_flight();
        let held = |at: DateTime<Utc>| oldest.map_or(at, |oldest| oldest.min(at));
        match next_arrival {
            // Everything that arrived before the first entry still queued is written.
            Some(arrival) => {
                let mut through = lock(&self.indexed_through);
                *through = (*through).max(held(arrival));
                Ok(false)
            }
            None => {
                let through = held(started_at);
                *lock(&self.indexed_through) = through;
                self.registry.index_saved_through(started, through);
                Ok(true)
            }
        }
    }

    /// Puts a failed flush's work back for the next: its queued entries ahead of those queued
    /// since, and the clicks that were waiting before it (the others come again from the
    /// queued entries, as do the user entries found for them).
    fn requeue(&self, entries: Vec<IndexEntry>, waiting: Vec<WaitingClick>, flush: DateTime<Utc>) {
        let mut queue = lock(&self.queue);
        let newer = std::mem::take(&mut *queue);
        queue.extend(entries.into_iter().filter(|entry| {
            entry.kind != IndexedKind::Click || matches!(entry.key, IndexKey::Impression(_))
        }));
        queue.extend(newer);
        drop(queue);
        self.wait_on(
            waiting
                .into_iter()
                .filter(|click| click.since < flush)
                .collect(),
        );
    }

    /// Puts clicks back to wait, as far as [`CLICKS_WAITING`] and, past half of it, each
    /// advertiser's [`CLICKS_WAITING_PER_ADVERTISER`] allow; those past them are given up (their entries by
    /// the impression's id are written).
    fn wait_on(&self, clicks: Vec<WaitingClick>) {
        let mut waiting = lock(&self.waiting);
        let mut per_advertiser: HashMap<AdvertiserId, usize> = HashMap::new();
        for click in waiting.iter() {
            *per_advertiser.entry(click.entry.advertiser_id).or_default() += 1;
        }
        let mut given_up = 0;
        for click in clicks {
            let held = per_advertiser.entry(click.entry.advertiser_id).or_default();
            let room_for_all = waiting.len() < CLICKS_WAITING / 2;
            if waiting.len() < CLICKS_WAITING
                && (room_for_all || *held < CLICKS_WAITING_PER_ADVERTISER)
            {
                *held += 1;
                waiting.push(click);
            } else {
                given_up += 1;
            }
        }
        if given_up > 0 {
            metrics::counter!("adevents_event_index_clicks_without_user_total")
                .increment(given_up as u64);
        }
    }

    /// Writes the subject-directory lines of `entries` this process has not written lately
    /// (none on a store whose index leads to a user's entries by itself).
    async fn write_directory(&self, entries: &[IndexEntry]) -> Result<(), StoreError> {
        if self.store.finds_subjects_itself() {
            return Ok(());
        }
        let lines: Vec<SubjectWeek> = {
            let (_, written) = &*lock(&self.directory_written);
            let lines: HashSet<SubjectWeek> = entries
                .iter()
                .filter_map(|entry| match entry.key {
                    IndexKey::User(user_id) => Some(SubjectWeek {
                        user_id,
                        advertiser_id: entry.advertiser_id,
                        week: entry.week(),
                    }),
                    IndexKey::Impression(_) => None,
                })
                .filter(|line| !written.contains(line))
                .collect();
            lines.into_iter().collect()
        };
        if lines.is_empty() {
            return Ok(());
        }
        self.directory.write_subject_weeks(&lines).await?;
        let mut memory = lock(&self.directory_written);
        let (since, written) = &mut *memory;
        if written.len() + lines.len() > DIRECTORY_LINES_REMEMBERED
            || since.elapsed() >= DIRECTORY_MEMORY
        {
            written.clear();
            *since = Instant::now();
        }
        written.extend(lines);
        Ok(())
    }

    /// Forgets the directory lines of `user`, so that its events stored after an erasure lead
    /// to it again.
    pub(crate) fn forget_subject(&self, user: UserId) {
        lock(&self.directory_written)
            .1
            .retain(|line| line.user_id != user);
    }

    fn remember_users(&self, entries: &[IndexEntry]) {
        let mut users = lock(&self.users);
        for entry in entries {
            if let (IndexKey::Impression(id), Some(user)) = (entry.key, entry.user_id) {
                if users.len() >= USERS_REMEMBERED {
                    users.clear();
                }
                users.insert((entry.advertiser_id, id), user);
            }
        }
    }

    /// The clicks whose impressions' users are known, with them, and the clicks that still
    /// wait (those waiting past [`CLICK_WAITS_FOR_IMPRESSION`] are given up). Each impression
    /// is looked up once, however many clicks name it, [`LOOKUPS_AT_ONCE`] at a time, and
    /// none after the first that fails.
    async fn users_of(
        &self,
        clicks: Vec<WaitingClick>,
        now: DateTime<Utc>,
    ) -> Result<(Vec<(WaitingClick, UserId)>, Vec<WaitingClick>), (StoreError, Vec<WaitingClick>)>
    {
        // One lookup per impression, as far back as its widest click asks (a new one's).
        let mut widest: HashMap<(AdvertiserId, ImpressionId), &WaitingClick> = HashMap::new();
        for click in &clicks {
            widest
                .entry(click.key())
                .and_modify(|held| {
                    if click.tries < held.tries {
                        *held = click;
                    }
                })
                .or_insert(click);
        }
        let lookups: Vec<((AdvertiserId, ImpressionId), Vec<Week>)> = widest
            .into_iter()
            .map(|(key, click)| (key, click.weeks().collect()))
            .collect();
        let mut users: HashMap<(AdvertiserId, ImpressionId), Option<UserId>> = HashMap::new();
        let mut failed = None;
        {
            let mut looked_up = stream::iter(lookups)
                .map(|(key, weeks)| async move {
                    let remembered = lock(&self.users).get(&key).copied();
                    let user = match remembered {
                        Some(user) => Ok(Some(user)),
                        None => self.stored_user(key, weeks).await,
                    };
                    (key, user)
                })
                .buffer_unordered(LOOKUPS_AT_ONCE);
            while let Some((key, user)) = looked_up.next().await {
                match user {
                    Ok(user) => {
                        users.insert(key, user);
                    }
                    Err(error) => {
                        failed = Some(error);
                        break;
                    }
                }
            }
        }
        if let Some(error) = failed {
            // Every click back: the flush is made again whole.
            return Err((error, clicks));
        }
        let mut found = Vec::new();
        let mut waiting = Vec::new();
        let mut given_up = 0;
        for click in clicks {
            match users.get(&click.key()).copied().flatten() {
                Some(user) => found.push((click, user)),
                None if now - click.since < CLICK_WAITS_FOR_IMPRESSION => {
                    waiting.push(click.tried(now));
                }
                None => given_up += 1,
            }
        }
        if given_up > 0 {
            metrics::counter!("adevents_event_index_clicks_without_user_total").increment(given_up);
        }
        Ok((found, waiting))
    }

    /// The user of an impression, from the index, looked for in `weeks` (a click's week
    /// first, then older ones, as far back as the click's lookup goes).
    async fn stored_user(
        &self,
        (advertiser, impression): (AdvertiserId, ImpressionId),
        weeks: Vec<Week>,
    ) -> Result<Option<UserId>, StoreError> {
        for week in weeks {
            let entries = self
                .store
                .read_index(advertiser, week, IndexKey::Impression(impression))
                .await?;
            let user = entries
                .iter()
                .filter(|indexed| indexed.kind == IndexedKind::Impression)
                .find_map(|indexed| indexed.user_id);
            if let Some(user) = user {
                lock(&self.users).insert((advertiser, impression), user);
                return Ok(Some(user));
            }
        }
        Ok(None)
    }

    /// Flushes every [`FLUSH_PERIOD`] until the task is aborted.
    pub(crate) fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let indexer = Arc::clone(self);
        tokio::spawn(async move {
            let mut ticks = crate::periodic::ticks(FLUSH_PERIOD);
            loop {
                ticks.tick().await;
                if let Err(error) = indexer.flush().await {
                    tracing::warn!(error = %error.chain(), "cannot write the event index; retrying");
                }
            }
        })
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Queues and memories stay usable whatever panicked while one was held.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{AdId, CampaignId};
    use crate::domain::time::EventTime;
    use crate::store::embedded::{EmbeddedStore, Fsync};
    use uuid::Uuid;

    fn indexer_on(store: &Arc<EmbeddedStore>) -> Arc<EventIndexer> {
        let registry = Arc::new(ProcessRegistry::new(
            Arc::clone(store) as Arc<dyn ProcessStore>
        ));
        Arc::new(EventIndexer::new(
            Arc::clone(store) as Arc<dyn EventIndexStore>,
            Arc::clone(store) as Arc<dyn SubjectStore>,
            registry,
        ))
    }

    fn entry(kind: IndexedKind, key: IndexKey, user: Option<UserId>) -> IndexEntry {
        IndexEntry {
            advertiser_id: AdvertiserId::new(Uuid::from_u128(1)),
            key,
            timestamp: EventTime::from_stored(Utc::now()),
            kind,
            impression_id: ImpressionId::new(Uuid::from_u128(2)),
            campaign_id: CampaignId::new(Uuid::from_u128(3)),
            ad_id: AdId::new(Uuid::from_u128(4)),
            user_id: user,
            received: DateTime::UNIX_EPOCH,
            valid: true,
        }
    }

    #[test]
    fn a_waiting_click_is_looked_up_less_and_less_often_and_then_only_lately() {
        let now = Utc::now();
        let click = entry(
            IndexedKind::Click,
            IndexKey::Impression(ImpressionId::new(Uuid::from_u128(2))),
            None,
        );
        let mut waiting = WaitingClick::new(click, now);
        assert_eq!(waiting.weeks().count(), 14, "the whole look-back at first");
        let mut waits = Vec::new();
        let mut at = now;
        while at - waiting.since < CLICK_WAITS_FOR_IMPRESSION {
            waiting = waiting.tried(at);
            waits.push((waiting.next_try - at).num_seconds());
            at = waiting.next_try;
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64]);
        assert!(waiting.weeks().count() <= 2, "then the last week only");
    }

    #[tokio::test]
    async fn one_advertiser_cannot_take_the_room_other_advertisers_clicks_wait_in() {
        let folder = tempfile::tempdir().expect("temp dir");
        let store = Arc::new(EmbeddedStore::open_for_test(folder.path(), Fsync::Never));
        let indexer = indexer_on(&store);
        let click_of = |advertiser: u128, impression: u128| {
            let mut click = entry(
                IndexedKind::Click,
                IndexKey::Impression(ImpressionId::new(Uuid::from_u128(impression))),
                None,
            );
            click.advertiser_id = AdvertiserId::new(Uuid::from_u128(advertiser));
            WaitingClick::new(click, Utc::now())
        };
        let flood: Vec<WaitingClick> = (0..CLICKS_WAITING as u128)
            .map(|impression| click_of(1, 1_000 + impression))
            .collect();
        indexer.wait_on(flood);
        indexer.wait_on(vec![click_of(1, 1), click_of(9, 2)]);
        let waiting = lock(&indexer.waiting);
        let of = |advertiser: u128| {
            waiting
                .iter()
                .filter(|click| click.entry.advertiser_id.as_uuid().as_u128() == advertiser)
                .count()
        };
        assert_eq!(of(1), CLICKS_WAITING / 2, "the flood, up to half the room");
        assert_eq!(of(9), 1, "another advertiser's click still waits");
    }

    #[tokio::test]
    async fn a_click_stored_before_its_impression_is_indexed_under_its_user_as_it_comes() {
        let folder = tempfile::tempdir().expect("temp dir");
        let store = Arc::new(EmbeddedStore::open_for_test(folder.path(), Fsync::Never));
        let indexer = indexer_on(&store);
        let (impression, user) = (
            ImpressionId::new(Uuid::from_u128(2)),
            UserId::new(Uuid::from_u128(5)),
        );
        let click = entry(IndexedKind::Click, IndexKey::Impression(impression), None);
        indexer.stored(vec![click.clone()]);
        indexer.flush().await.expect("flushed");
        assert_eq!(lock(&indexer.waiting).len(), 1, "the click waits");

        indexer.stored(vec![
            entry(
                IndexedKind::Impression,
                IndexKey::Impression(impression),
                Some(user),
            ),
            entry(IndexedKind::Impression, IndexKey::User(user), Some(user)),
        ]);
        // Not due for a lookup yet, but the impression's user is known now: no read needed.
        indexer.flush().await.expect("flushed");
        assert!(lock(&indexer.waiting).is_empty());
        let by_user = store
            .read_index(click.advertiser_id, click.week(), IndexKey::User(user))
            .await
            .expect("read");
        assert!(
            by_user.iter().any(|entry| entry.kind == IndexedKind::Click),
            "{by_user:?}"
        );
    }

    #[tokio::test]
    async fn an_ingest_call_under_way_holds_the_index_back_until_it_ends() {
        let folder = tempfile::tempdir().expect("temp dir");
        let store = Arc::new(EmbeddedStore::open_for_test(folder.path(), Fsync::Never));
        let indexer = indexer_on(&store);
        let (first, second) = (indexer.begin_storing(), indexer.begin_storing());
        let began = first.began.min(second.began);
        tokio::time::sleep(Duration::from_millis(5)).await;
        indexer.flush().await.expect("flushed");
        assert_eq!(indexer.indexed_through(), began, "held at the oldest call");
        drop(first);
        drop(second);
        indexer.flush().await.expect("flushed");
        assert!(indexer.indexed_through() > began, "free once both ended");
    }
}
