//! Group commit: write calls that arrive while a commit is in progress wait for the next one
//! and share it, so many small writes (one beacon per request) cost one journal write and one
//! fsync between them instead of one each. Each call's rows stay in one atomic batch, and a
//! call returns only once that batch is durable per the fsync policy.

use super::{Table, Tables, engine_error};
use crate::store::StoreError;
use std::sync::Arc;
use std::sync::mpsc;
use tokio::sync::oneshot;

/// Rows (table, key, value) one write call applies.
pub type Rows = Vec<(Table, Vec<u8>, Vec<u8>)>;

/// Rows gathered into one commit at most; a larger backlog is split over several.
const MAX_ROWS_PER_COMMIT: usize = 50_000;

struct Pending {
    context: &'static str,
    rows: Rows,
    done: oneshot::Sender<Result<(), StoreError>>,
}

pub struct Committer {
    queue: mpsc::Sender<Pending>,
}

impl Committer {
    /// Starts the commit thread; it ends when the last handle to the store is dropped.
    pub fn start(tables: Arc<Tables>) -> Result<Self, StoreError> {
        let (queue, pending) = mpsc::channel();
        std::thread::Builder::new()
            .name("adevents-commit".into())
            .spawn(move || run(&tables, &pending))
            .map_err(|error| {
                StoreError::Internal(format!("cannot start the commit thread: {error}"))
            })?;
        Ok(Self { queue })
    }

    /// Applies `rows` atomically; returns once they are durable.
    pub async fn commit(&self, context: &'static str, rows: Rows) -> Result<(), StoreError> {
        let (done, committed) = oneshot::channel();
        let stopped = || StoreError::Internal(format!("{context}: the commit thread stopped"));
        self.queue
            .send(Pending {
                context,
                rows,
                done,
            })
            .map_err(|_| stopped())?;
        committed.await.map_err(|_| stopped())?
    }
}

fn run(tables: &Tables, pending: &mpsc::Receiver<Pending>) {
    while let Ok(first) = pending.recv() {
        let mut rows = first.rows.len();
        let mut group = vec![first];
        while rows < MAX_ROWS_PER_COMMIT {
            match pending.try_recv() {
                Ok(next) => {
                    rows += next.rows.len();
                    group.push(next);
                }
                Err(_) => break,
            }
        }
        let mut batch = tables.db.batch().durability(Some(tables.persist));
        let mut waiting = Vec::with_capacity(group.len());
        for Pending {
            context,
            rows,
            done,
        } in group
        {
            for (table, key, value) in rows {
                batch.insert(tables.get(table), key, value);
            }
            waiting.push((context, done));
        }
        let outcome = batch.commit();
        for (context, done) in waiting {
            let result = match &outcome {
                Ok(_) => Ok(()),
                Err(error) => Err(engine_error(context, error)),
            };
            // A caller that went away (its request was cancelled) needs no answer.
            let _ = done.send(result);
        }
    }
}
