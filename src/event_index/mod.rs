//! Writes the event index (`domain::conversion::index`) off the request path: ingestion hands
//! over each stored event with its arrival, and a flush every [`FLUSH_PERIOD`] writes them in
//! one call. A click is indexed under its user once its impression's user is known: from the
//! impressions this process indexed lately, else from the index itself; a click whose
//! impression is not stored yet waits a while and is tried again.
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

/// A click waiting for its impression's user.
struct WaitingClick {
    entry: IndexEntry,
    since: DateTime<Utc>,
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
        let waiting = std::mem::take(&mut *lock(&self.waiting));
        let clicks: Vec<WaitingClick> = entries
            .iter()
            .filter(|entry| entry.kind == IndexedKind::Click)
            .map(|entry| WaitingClick {
                entry: entry.clone(),
                since: started_at,
            })
            .chain(waiting)
            .collect();
        self.remember_users(&entries);
        let (found, still_waiting) = match self.users_of(clicks, started_at).await {
            Ok(result) => result,
            Err((error, clicks)) => {
                self.requeue(entries, clicks, started_at);
                return Err(error);
            }
        };
        entries.extend(found);
        // The directory first: an erasure finds a user's entries only through it, so no entry
        // may be stored before the line that leads to it.
        if let Err(error) = self.write_directory(&entries).await {
            self.requeue(entries, still_waiting, started_at);
            return Err(error);
        }
        if !entries.is_empty()
            && let Err(error) = self.store.write_index(&entries).await
        {
            self.requeue(entries, still_waiting, started_at);
            return Err(error);
        }
        lock(&self.waiting).extend(still_waiting);
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
        lock(&self.waiting).extend(waiting.into_iter().filter(|click| click.since < flush));
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

    /// The user entries of the clicks whose impressions are known, and the clicks that still
    /// wait (those waiting past [`CLICK_WAITS_FOR_IMPRESSION`] are given up).
    async fn users_of(
        &self,
        clicks: Vec<WaitingClick>,
        now: DateTime<Utc>,
    ) -> Result<(Vec<IndexEntry>, Vec<WaitingClick>), (StoreError, Vec<WaitingClick>)> {
        let mut found = Vec::new();
        let mut waiting = Vec::new();
        let mut clicks = clicks.into_iter();
        while let Some(click) = clicks.next() {
            let key = (click.entry.advertiser_id, click.entry.impression_id);
            let remembered = lock(&self.users).get(&key).copied();
            let user = match remembered {
                Some(user) => Some(user),
                None => match self.stored_user(&click.entry).await {
                    Ok(user) => user,
                    Err(error) => {
                        let mut unresolved = vec![click];
                        unresolved.extend(clicks);
                        unresolved.extend(waiting);
                        return Err((error, unresolved));
                    }
                },
            };
            match user {
                Some(user) => found.push(click.entry.for_user(user)),
                None if now - click.since < CLICK_WAITS_FOR_IMPRESSION => waiting.push(click),
                None => {
                    metrics::counter!("adevents_event_index_clicks_without_user_total")
                        .increment(1);
                }
            }
        }
        Ok((found, waiting))
    }

    /// The user of a click's impression, from the index: its week first, then older ones.
    async fn stored_user(&self, click: &IndexEntry) -> Result<Option<UserId>, StoreError> {
        let at = click.timestamp.instant();
        for week in Week::newest_first(at - IMPRESSION_LOOK_BACK, at) {
            let entries = self
                .store
                .read_index(
                    click.advertiser_id,
                    week,
                    IndexKey::Impression(click.impression_id),
                )
                .await?;
            let user = entries
                .iter()
                .filter(|entry| entry.kind == IndexedKind::Impression)
                .find_map(|entry| entry.user_id);
            if let Some(user) = user {
                lock(&self.users).insert((click.advertiser_id, click.impression_id), user);
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
    use crate::store::embedded::{EmbeddedStore, Fsync};

    #[tokio::test]
    async fn an_ingest_call_under_way_holds_the_index_back_until_it_ends() {
        let folder = tempfile::tempdir().expect("temp dir");
        let store = Arc::new(EmbeddedStore::open_for_test(folder.path(), Fsync::Never));
        let registry = Arc::new(ProcessRegistry::new(
            Arc::clone(&store) as Arc<dyn ProcessStore>
        ));
        let indexer = Arc::new(EventIndexer::new(
            Arc::clone(&store) as Arc<dyn EventIndexStore>,
            Arc::clone(&store) as Arc<dyn SubjectStore>,
            registry,
        ));
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
