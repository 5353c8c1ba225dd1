//! Group commit: write calls that arrive while a commit is in progress wait for the next one
//! and share it, so many small writes (one beacon per request) cost one journal write and one
//! fsync between them instead of one each. Each call's rows stay in one atomic batch, and a
//! call returns only once that batch is durable per the fsync policy.

use super::engine::{Table, Tables, engine_failure};
use crate::store::StoreError;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Rows (table, key, value) one write call applies.
pub type Rows = Vec<(Table, Vec<u8>, Vec<u8>)>;
/// Keys (table, key) one write call removes; never also among its rows.
pub type Removals = Vec<(Table, Vec<u8>)>;

/// A row written only if its key holds no value that `keeps` (an invalid copy of an event,
/// which must not replace a valid copy: an event is valid if any copy is). The check and the
/// write happen in the commit thread, in order, so no other write slips between them.
pub struct Guarded {
    pub table: Table,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub keeps: fn(&[u8]) -> bool,
}

/// Rows gathered into one commit at most; a larger backlog is split over several.
const MAX_ROWS_PER_COMMIT: usize = 50_000;
/// Write calls waiting for a commit at most; past it the store answers "unavailable" (503,
/// retry later) instead of queueing without bound.
const MAX_WAITING_CALLS: usize = 16_384;

struct Pending {
    context: &'static str,
    removals: Removals,
    rows: Rows,
    guarded: Vec<Guarded>,
    done: oneshot::Sender<Result<(), StoreError>>,
}

pub struct Committer {
    queue: mpsc::SyncSender<Pending>,
    thread: std::thread::JoinHandle<()>,
    /// Why the latest commit failed; `None` once one succeeds.
    failing: Arc<Mutex<Option<String>>>,
}

impl Committer {
    /// Starts the commit thread; it ends when the last handle to the store is dropped.
    pub fn start(tables: Arc<Tables>) -> Result<Self, StoreError> {
        let (queue, pending) = mpsc::sync_channel(MAX_WAITING_CALLS);
        let failing = Arc::new(Mutex::new(None));
        let outcomes = Arc::clone(&failing);
        let thread = std::thread::Builder::new()
            .name("adevents-commit".into())
            .spawn(move || run(&tables, &pending, &outcomes))
            .map_err(|error| StoreError::internal("cannot start the commit thread", error))?;
        Ok(Self {
            queue,
            thread,
            failing,
        })
    }

    /// Whether writes can still commit (for readiness).
    pub fn is_running(&self) -> bool {
        !self.thread.is_finished()
    }

    /// Why the latest commit failed (a journal write or fsync), until one succeeds again.
    pub fn failure(&self) -> Option<String> {
        self.failing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Applies `rows` atomically; returns once they are durable.
    pub async fn commit(&self, context: &'static str, rows: Rows) -> Result<(), StoreError> {
        self.commit_replacing(context, Vec::new(), rows).await
    }

    /// Removes `removals` and applies `rows` atomically; returns once they are durable.
    pub async fn commit_replacing(
        &self,
        context: &'static str,
        removals: Removals,
        rows: Rows,
    ) -> Result<(), StoreError> {
        self.submit(context, removals, rows, Vec::new()).await
    }

    /// Applies `rows`, and each of `guarded` unless its key holds a value it keeps,
    /// atomically; returns once they are durable.
    pub async fn commit_guarded(
        &self,
        context: &'static str,
        rows: Rows,
        guarded: Vec<Guarded>,
    ) -> Result<(), StoreError> {
        self.submit(context, Vec::new(), rows, guarded).await
    }

    async fn submit(
        &self,
        context: &'static str,
        removals: Removals,
        rows: Rows,
        guarded: Vec<Guarded>,
    ) -> Result<(), StoreError> {
        let (done, committed) = oneshot::channel();
        let stopped =
            || StoreError::internal_message(format!("{context}: the commit thread stopped"));
        self.queue
            .try_send(Pending {
                context,
                removals,
                rows,
                guarded,
                done,
            })
            .map_err(|error| match error {
                mpsc::TrySendError::Full(_) => StoreError::unavailable_message(format!(
                    "{context}: {MAX_WAITING_CALLS} writes are already waiting for the disk"
                )),
                mpsc::TrySendError::Disconnected(_) => stopped(),
            })?;
        committed.await.map_err(|_| stopped())?
    }
}

/// The guarded rows to write: those whose key no row of this group writes (an unguarded row is
/// a valid copy, which wins) and whose stored value, if any, is not one they must keep. A read
/// that fails writes the row: at worst an invalid copy replaces a valid one, never a loss.
fn kept_guarded(tables: &Tables, rows: &[Rows], guarded: Vec<Guarded>) -> Rows {
    if guarded.is_empty() {
        return Vec::new();
    }
    let written: std::collections::HashSet<(Table, &[u8])> = rows
        .iter()
        .flatten()
        .map(|(table, key, _)| (*table, key.as_slice()))
        .collect();
    let mut kept: Rows = Vec::with_capacity(guarded.len());
    for row in guarded {
        if written.contains(&(row.table, row.key.as_slice())) {
            continue;
        }
        let keeps_stored = matches!(
            tables.get(row.table).get(&row.key),
            Ok(Some(stored)) if (row.keeps)(&stored)
        );
        if !keeps_stored {
            kept.push((row.table, row.key, row.value));
        }
    }
    kept
}

fn run(tables: &Tables, pending: &mpsc::Receiver<Pending>, failing: &Mutex<Option<String>>) {
    while let Ok(first) = pending.recv() {
        let mut row_count = first.rows.len();
        let mut group = vec![first];
        while row_count < MAX_ROWS_PER_COMMIT {
            match pending.try_recv() {
                Ok(next) => {
                    row_count += next.rows.len();
                    group.push(next);
                }
                Err(_) => break,
            }
        }
        let mut waiting = Vec::with_capacity(group.len());
        let mut rows = Vec::with_capacity(group.len());
        let mut removals = Vec::new();
        let mut guarded = Vec::new();
        for Pending {
            context,
            removals: call_removals,
            rows: call_rows,
            guarded: call_guarded,
            done,
        } in group
        {
            removals.extend(call_removals);
            rows.push(call_rows);
            guarded.extend(call_guarded);
            waiting.push((context, done));
        }
        let kept = kept_guarded(tables, &rows, guarded);
        // A panic inside the engine (an assertion on a key) fails this group, not the thread:
        // later writes still commit.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut batch = tables.db.batch().durability(Some(tables.persist));
            for (table, key) in removals {
                batch.remove(tables.get(table), key);
            }
            for (table, key, value) in rows.into_iter().flatten().chain(kept) {
                batch.insert(tables.get(table), key, value);
            }
            batch.commit()
        }));
        // One failure, shared by every call of the group.
        let outcome = match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(Some(Arc::new(error))),
            Err(_) => Err(None),
        };
        *failing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = match &outcome {
            Ok(()) => None,
            Err(Some(error)) => Some(error.to_string()),
            Err(None) => Some("the storage engine panicked".to_owned()),
        };
        for (context, done) in waiting {
            let result = match &outcome {
                Ok(()) => Ok(()),
                Err(Some(error)) => Err(engine_failure(context, Arc::clone(error))),
                Err(None) => Err(StoreError::internal_message(format!(
                    "{context}: the storage engine panicked while committing"
                ))),
            };
            // A caller that went away (its request was cancelled) needs no answer.
            let _ = done.send(result);
        }
    }
}
