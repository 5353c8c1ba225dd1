//! This process among the server processes sharing a store (docs/DESIGN.md, "Processes
//! sharing a store"): it reports itself every second, records each owner-day before it first
//! counts an event of it in live (in-memory) state, clears that mark once the state is stored,
//! and removes itself on a clean stop. What a process that went silent left marked is rebuilt
//! from the raw events by the next process to start (`app::repair`).

use crate::domain::owner::{Owner, OwnerKind};
use crate::domain::process::{ProcessId, ProcessReport, UnflushedDay};
use crate::domain::time::Day;
use crate::store::{ProcessStore, StoreError};
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a stored owner-day's mark stays after its last event, so a steady trickle of
/// events does not write and clear it over and over.
const MARK_LINGER: Duration = Duration::from_secs(60);

pub(crate) struct ProcessRegistry {
    store: Arc<dyn ProcessStore>,
    id: ProcessId,
    started_at: DateTime<Utc>,
    /// Marked owner-days and when an event of each was last counted.
    marks: Mutex<HashMap<UnflushedDay, Instant>>,
    /// Held while a mark is written or cleared in the store, so a clear never lands after a
    /// newer write of the same mark.
    mark_writes: tokio::sync::Mutex<()>,
    /// For each kind of live state (sites' sketches, campaigns' delivery counts, stored by
    /// flushers of their own), the start of the latest flush that stored all of it counted
    /// before.
    saved_through: Mutex<HashMap<OwnerKind, Instant>>,
    /// With an event indexer, the start of its latest flush that wrote everything queued
    /// before it: a campaign-day's mark also waits for it.
    index_saved: Mutex<Option<Instant>>,
    /// The same flush's start as a time, reported to the other processes.
    indexed_through: Mutex<Option<DateTime<Utc>>>,
}

impl ProcessRegistry {
    pub(crate) fn new(store: Arc<dyn ProcessStore>) -> Self {
        Self {
            store,
            id: ProcessId::random(),
            started_at: Utc::now(),
            marks: Mutex::new(HashMap::new()),
            mark_writes: tokio::sync::Mutex::new(()),
            saved_through: Mutex::new(HashMap::new()),
            index_saved: Mutex::new(None),
            indexed_through: Mutex::new(None),
        }
    }

    pub(crate) fn id(&self) -> ProcessId {
        self.id
    }

    /// Records durably that this process is about to count events of `owner`'s `day` in live
    /// state; a store write only for the first event of the owner-day since its last clear.
    pub(crate) async fn mark(&self, owner: &Owner, day: Day) -> Result<(), StoreError> {
        let key = UnflushedDay {
            owner: owner.clone(),
            day,
        };
        if let Some(last) = lock(&self.marks).get_mut(&key) {
            *last = Instant::now();
            return Ok(());
        }
        let _writing = self.mark_writes.lock().await;
        if lock(&self.marks).contains_key(&key) {
            return Ok(());
        }
        self.store.mark_unflushed(self.id, &key).await?;
        lock(&self.marks).insert(key, Instant::now());
        Ok(())
    }

    /// Says an event of `owner`'s `day` was just counted in live state (after [`mark`](Self::mark)):
    /// its mark stays until a flush that started after this stores it.
    pub(crate) fn counted(&self, owner: &Owner, day: Day) {
        let key = UnflushedDay {
            owner: owner.clone(),
            day,
        };
        if let Some(last) = lock(&self.marks).get_mut(&key) {
            *last = Instant::now();
        }
    }

    /// Says a flush that started at `started` stored every live state of `kind` counted
    /// before it.
    pub(crate) fn saved_through(&self, kind: OwnerKind, started: Instant) {
        let mut saved = lock(&self.saved_through);
        let entry = saved.entry(kind).or_insert(started);
        *entry = (*entry).max(started);
    }

    /// Says an event indexer runs: from now on campaign-days' marks also wait for its flushes.
    pub(crate) fn expect_index(&self) {
        lock(&self.index_saved).get_or_insert_with(Instant::now);
    }

    /// Says an index flush that started at `started` wrote every entry queued before it.
    pub(crate) fn index_saved_through(&self, started: Instant, started_at: DateTime<Utc>) {
        let mut saved = lock(&self.index_saved);
        *saved = Some(saved.map_or(started, |saved| saved.max(started)));
        let mut through = lock(&self.indexed_through);
        *through = Some(through.map_or(started_at, |through| through.max(started_at)));
    }

    /// Clears the marks of owner-days whose live state is stored and quiet.
    async fn clear_saved(&self) -> Result<usize, StoreError> {
        let saved = lock(&self.saved_through).clone();
        if saved.is_empty() {
            return Ok(0);
        }
        let index_saved = *lock(&self.index_saved);
        let _writing = self.mark_writes.lock().await;
        let now = Instant::now();
        let saved_days: Vec<UnflushedDay> = lock(&self.marks)
            .iter()
            .filter(|(day, last)| {
                saved
                    .get(&day.owner.kind())
                    .is_some_and(|saved| **last < *saved)
                    && (day.owner.kind() != OwnerKind::Campaign
                        || index_saved.is_none_or(|saved| **last < saved))
                    && now.duration_since(**last) >= MARK_LINGER
            })
            .map(|(day, _)| day.clone())
            .collect();
        for day in &saved_days {
            self.store.clear_unflushed(self.id, day).await?;
            lock(&self.marks).remove(day);
        }
        Ok(saved_days.len())
    }

    async fn report(&self) -> Result<(), StoreError> {
        let report = ProcessReport {
            id: self.id,
            started_at: self.started_at,
            last_report_at: Utc::now(),
            indexed_through: *lock(&self.indexed_through),
        };
        self.store.report_process(&report).await
    }

    /// Reports this process every [`ProcessReport::PERIOD`] and clears saved marks, until the
    /// task is aborted. The first report is made before this returns, so the process is
    /// listed before it serves.
    pub(crate) async fn start_reporting(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        if let Err(error) = self.report().await {
            tracing::warn!(error = %error.chain(), "cannot report this process yet; retrying every second");
        }
        let registry = Arc::clone(self);
        tokio::spawn(async move {
            let period = ProcessReport::PERIOD
                .to_std()
                .unwrap_or(Duration::from_secs(1));
            let mut ticks = crate::periodic::ticks(period);
            let silence = ProcessReport::SILENCE
                .to_std()
                .unwrap_or(Duration::from_secs(10));
            let mut failing_since: Option<Instant> = None;
            loop {
                ticks.tick().await;
                let outcome = match registry.report().await {
                    Ok(()) => registry.clear_saved().await.map(|_| ()),
                    Err(error) => Err(error),
                };
                match (outcome, failing_since) {
                    (Ok(()), Some(since)) => {
                        failing_since = None;
                        if since.elapsed() >= silence {
                            // Silent that long, another process may have repaired this one's
                            // days and removed its marks: write them again as events come.
                            lock(&registry.marks).clear();
                        }
                        tracing::info!("reporting this process again");
                    }
                    (Ok(()), None) => {}
                    (Err(error), None) => {
                        tracing::warn!(error = %error.chain(), "cannot report this process; retrying every second");
                        failing_since = Some(Instant::now());
                    }
                    (Err(_), Some(_)) => {}
                }
            }
        })
    }

    /// Removes this process and its marks: its live state is stored (a clean stop).
    pub(crate) async fn leave(&self) -> Result<(), StoreError> {
        self.store.remove_process(self.id).await
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Marks and instants stay valid whatever panicked while one was held.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
