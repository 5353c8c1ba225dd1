//! Group commit: write calls that arrive while a commit is in progress wait for the next one
//! and share it, so many small writes (one beacon per request) cost one journal write and one
//! fsync between them instead of one each. Each call's rows stay in one atomic batch, and a
//! call returns only once that batch is durable per the fsync policy. Records appended to a
//! log ([`Appended`]) go further: a commit stores all of its calls' records for one prefix as
//! a single row, so they cost the engine one key, not one each.

use super::engine::{Rows, Table, Tables, engine_error, engine_failure};
use super::recent::RecentRows;
use crate::store::StoreError;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Keys (table, key) one write call removes; never also among its rows.
pub(crate) type Removals = Vec<(Table, Vec<u8>)>;

/// A row written only if its key holds no value that `keeps` (an invalid copy of an event,
/// which must not replace a valid copy: an event is valid if any copy is). The check and the
/// write happen in the commit thread, in order, so no other write slips between them.
pub(crate) struct Guarded {
    pub(crate) table: Table,
    pub(crate) key: Vec<u8>,
    pub(crate) value: Vec<u8>,
    pub(crate) keeps: fn(&[u8]) -> bool,
}

/// A row whose new value is `merge` of its stored value (if any) and `value`: the read and the
/// write happen in the commit thread, in order, so no other write slips between them, and
/// merges of one key in one group apply one after the other. A merge that leaves an empty
/// value removes the row: that is how an entry is taken out of a merged row, and the row
/// goes once its last entry does.
pub(crate) struct Merged {
    pub(crate) table: Table,
    pub(crate) key: Vec<u8>,
    pub(crate) value: Vec<u8>,
    pub(crate) merge: fn(Option<&[u8]>, &[u8]) -> Vec<u8>,
}

/// A record for the log under `prefix` in `table`. The commit thread stores the records of every
/// call in its group that share a prefix as one row: the prefix, then the commit's number
/// ([`log_key`]), holding the records in the order they arrived ([`log_records`] reads them
/// back). Readers see every record ever appended, duplicates included.
pub(crate) struct Appended {
    pub(crate) table: Table,
    pub(crate) prefix: Vec<u8>,
    pub(crate) record: Vec<u8>,
}

/// Where the number of the next commit with log records is kept, in the meta table. It is
/// written with each such commit, so numbers never repeat, across restarts too.
const NEXT_LOG_NUMBER: &str = "next_log_number";

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
    merged: Vec<Merged>,
    appended: Vec<Appended>,
    done: oneshot::Sender<Result<MergedValues, StoreError>>,
}

/// The values a call's merged rows hold once its group is committed, in the call's order.
pub(crate) type MergedValues = Vec<Vec<u8>>;

pub(crate) struct Committer {
    queue: mpsc::SyncSender<Pending>,
    thread: std::thread::JoinHandle<()>,
    /// Why the latest commit failed; `None` once one succeeds.
    failing: Arc<Mutex<Option<String>>>,
}

impl Committer {
    /// Starts the commit thread; it ends when the last handle to the store is dropped.
    /// Every commit that succeeds is applied to `recent` before its callers hear of it.
    pub(crate) fn start(tables: Arc<Tables>, recent: Arc<RecentRows>) -> Result<Self, StoreError> {
        let (queue, pending) = mpsc::sync_channel(MAX_WAITING_CALLS);
        let failing = Arc::new(Mutex::new(None));
        let outcomes = Arc::clone(&failing);
        let next_log_number = stored_log_number(&tables)?;
        let thread = std::thread::Builder::new()
            .name("adevents-commit".into())
            .spawn(move || run(&tables, &recent, &pending, &outcomes, next_log_number))
            .map_err(|error| StoreError::internal("cannot start the commit thread", error))?;
        Ok(Self {
            queue,
            thread,
            failing,
        })
    }

    /// Whether writes can still commit (for readiness).
    pub(crate) fn is_running(&self) -> bool {
        !self.thread.is_finished()
    }

    /// Why the latest commit failed (a journal write or fsync), until one succeeds again.
    pub(crate) fn failure(&self) -> Option<String> {
        self.failing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Applies `rows` atomically; returns once they are durable.
    pub(crate) async fn commit(&self, context: &'static str, rows: Rows) -> Result<(), StoreError> {
        self.commit_replacing(context, Vec::new(), rows).await
    }

    /// Removes `removals` and applies `rows` atomically; returns once they are durable.
    pub(crate) async fn commit_replacing(
        &self,
        context: &'static str,
        removals: Removals,
        rows: Rows,
    ) -> Result<(), StoreError> {
        self.submit(context, removals, rows, Vec::new(), Vec::new(), Vec::new())
            .await
            .map(drop)
    }

    /// Applies `rows`, and each of `guarded` unless its key holds a value it keeps,
    /// atomically; returns once they are durable.
    pub(crate) async fn commit_guarded(
        &self,
        context: &'static str,
        rows: Rows,
        guarded: Vec<Guarded>,
    ) -> Result<(), StoreError> {
        self.submit(context, Vec::new(), rows, guarded, Vec::new(), Vec::new())
            .await
            .map(drop)
    }

    /// Applies `rows`, each of `guarded` unless its key holds a value it keeps, and each of
    /// `merged` merged with its stored value, atomically; returns once they are durable, with
    /// the value each of `merged` then holds (merged with its group's other writes too).
    pub(crate) async fn commit_merged(
        &self,
        context: &'static str,
        rows: Rows,
        guarded: Vec<Guarded>,
        merged: Vec<Merged>,
    ) -> Result<MergedValues, StoreError> {
        self.submit(context, Vec::new(), rows, guarded, merged, Vec::new())
            .await
    }

    /// Removes `removals` and merges each of `merged` with its stored value, atomically;
    /// returns once they are durable.
    pub(crate) async fn commit_removing(
        &self,
        context: &'static str,
        removals: Removals,
        merged: Vec<Merged>,
    ) -> Result<(), StoreError> {
        self.submit(
            context,
            removals,
            Vec::new(),
            Vec::new(),
            merged,
            Vec::new(),
        )
        .await
        .map(drop)
    }

    /// Applies `rows` and appends `records` to their logs atomically; returns once they are
    /// durable.
    pub(crate) async fn commit_appended_with(
        &self,
        context: &'static str,
        rows: Rows,
        records: Vec<Appended>,
    ) -> Result<(), StoreError> {
        self.submit(context, Vec::new(), rows, Vec::new(), Vec::new(), records)
            .await
            .map(drop)
    }

    async fn submit(
        &self,
        context: &'static str,
        removals: Removals,
        rows: Rows,
        guarded: Vec<Guarded>,
        merged: Vec<Merged>,
        appended: Vec<Appended>,
    ) -> Result<MergedValues, StoreError> {
        let (done, committed) = oneshot::channel();
        let stopped =
            || StoreError::internal_message(format!("{context}: the commit thread stopped"));
        self.queue
            .try_send(Pending {
                context,
                removals,
                rows,
                guarded,
                merged,
                appended,
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

/// The merged rows' new values: each key's stored value (read once) merged with every value
/// the group brings for it, in order. A read that fails merges with nothing.
fn merged_rows(tables: &Tables, merged: Vec<Merged>) -> Rows {
    let mut values: std::collections::HashMap<(Table, Vec<u8>), Vec<u8>> =
        std::collections::HashMap::new();
    let mut order: Vec<(Table, Vec<u8>)> = Vec::new();
    for row in merged {
        let slot = (row.table, row.key);
        let value = match values.get(&slot) {
            Some(current) => (row.merge)(Some(current), &row.value),
            None => {
                order.push(slot.clone());
                let stored = tables.get(slot.0).get(&slot.1).ok().flatten();
                (row.merge)(stored.as_deref(), &row.value)
            }
        };
        values.insert(slot, value);
    }
    order
        .into_iter()
        .filter_map(|slot| {
            let value = values.remove(&slot)?;
            Some((slot.0, slot.1, value))
        })
        .collect()
}

/// The key of a log row: its prefix, then the number of the commit that wrote it.
pub(crate) fn log_key(prefix: &[u8], number: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + 8);
    key.extend_from_slice(prefix);
    key.extend_from_slice(&number.to_be_bytes());
    key
}

/// The records of one log row, in the order they were appended; `None` in place of a record
/// whose length runs past the row (a damaged row).
pub(crate) fn log_records(row: &[u8]) -> impl Iterator<Item = Option<&[u8]>> {
    let mut rest = Some(row);
    std::iter::from_fn(move || {
        let bytes = rest?;
        if bytes.is_empty() {
            return None;
        }
        let record = bytes
            .split_first_chunk::<4>()
            .and_then(|(len, after)| after.split_at_checked(u32::from_be_bytes(*len) as usize));
        rest = record.map(|(_, after)| after);
        Some(record.map(|(record, _)| record))
    })
}

fn stored_log_number(tables: &Tables) -> Result<u64, StoreError> {
    let stored = tables
        .meta
        .get(NEXT_LOG_NUMBER)
        .map_err(|error| engine_error("reading the log number", error))?;
    match stored {
        None => Ok(0),
        Some(bytes) => <[u8; 8]>::try_from(bytes.as_ref())
            .map(u64::from_be_bytes)
            .map_err(|_| StoreError::internal_message("the stored log number does not decode")),
    }
}

/// One row per (table, prefix) holding the group's records for it, length first, in order.
fn log_rows(appended: Vec<Appended>, number: u64) -> Rows {
    let mut logs: std::collections::HashMap<(Table, Vec<u8>), Vec<u8>> =
        std::collections::HashMap::new();
    for Appended {
        table,
        prefix,
        record,
    } in appended
    {
        let row = logs.entry((table, prefix)).or_default();
        // Records are a beacon's few hundred bytes, far below 4 GiB.
        let len = u32::try_from(record.len()).unwrap_or(u32::MAX);
        row.extend_from_slice(&len.to_be_bytes());
        row.extend_from_slice(&record);
    }
    logs.into_iter()
        .map(|((table, prefix), row)| (table, log_key(&prefix, number), row))
        .collect()
}

fn run(
    tables: &Tables,
    recent: &RecentRows,
    pending: &mpsc::Receiver<Pending>,
    failing: &Mutex<Option<String>>,
    mut next_log_number: u64,
) {
    while let Ok(first) = pending.recv() {
        let mut row_count = first.rows.len() + first.appended.len();
        let mut group = vec![first];
        while row_count < MAX_ROWS_PER_COMMIT {
            match pending.try_recv() {
                Ok(next) => {
                    row_count += next.rows.len() + next.appended.len();
                    group.push(next);
                }
                Err(_) => break,
            }
        }
        let mut waiting = Vec::with_capacity(group.len());
        let mut rows = Vec::with_capacity(group.len());
        let mut removals = Vec::new();
        let mut guarded = Vec::new();
        let mut merged = Vec::new();
        let mut appended = Vec::new();
        for Pending {
            context,
            removals: call_removals,
            rows: call_rows,
            guarded: call_guarded,
            merged: call_merged,
            appended: call_appended,
            done,
        } in group
        {
            removals.extend(call_removals);
            rows.push(call_rows);
            guarded.extend(call_guarded);
            appended.extend(call_appended);
            let slots: Vec<(Table, Vec<u8>)> = call_merged
                .iter()
                .map(|row| (row.table, row.key.clone()))
                .collect();
            merged.extend(call_merged);
            waiting.push((context, slots, done));
        }
        let mut kept = kept_guarded(tables, &rows, guarded);
        let merged = merged_rows(tables, merged);
        let merged_values: std::collections::HashMap<(Table, &[u8]), &Vec<u8>> = merged
            .iter()
            .map(|(table, key, value)| ((*table, key.as_slice()), value))
            .collect();
        let answers: Vec<MergedValues> = waiting
            .iter()
            .map(|(_, slots, _)| {
                slots
                    .iter()
                    .map(|(table, key)| {
                        merged_values
                            .get(&(*table, key.as_slice()))
                            .map(|value| (*value).clone())
                            .unwrap_or_default()
                    })
                    .collect()
            })
            .collect();
        let (emptied, merged): (Rows, Rows) = merged
            .into_iter()
            .partition(|(_, _, value)| value.is_empty());
        removals.extend(emptied.into_iter().map(|(table, key, _)| (table, key)));
        kept.extend(merged);
        // A failed commit leaves its number unused, which is harmless: numbers only have to
        // be new, not consecutive.
        let logs = if appended.is_empty() {
            Vec::new()
        } else {
            let number = next_log_number;
            next_log_number += 1;
            let mut logs = log_rows(appended, number);
            logs.push((
                Table::Meta,
                NEXT_LOG_NUMBER.as_bytes().to_vec(),
                next_log_number.to_be_bytes().to_vec(),
            ));
            logs
        };
        // Only a commit that wrote something proves the journal takes writes again: an empty
        // one (a background task with nothing to do) commits without touching it.
        let writes_something = !removals.is_empty()
            || !kept.is_empty()
            || !logs.is_empty()
            || rows.iter().any(|group| !group.is_empty());
        let (rows, held) = recent.gather(
            &removals,
            rows.into_iter().flatten().chain(kept).chain(logs),
        );
        // A panic inside the engine (an assertion on a key) fails this group, not the thread:
        // later writes still commit.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut batch = tables.db.batch().durability(Some(tables.persist));
            for (table, key) in removals {
                batch.remove(tables.get(table), key);
            }
            for (table, key, value) in rows {
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
        // Before any caller hears of it: a summary told of a write finds it held.
        let now = chrono::Utc::now().timestamp_millis();
        match &outcome {
            Ok(()) => recent.apply(held, now),
            Err(_) => recent.forget(now),
        }
        {
            let mut failing = failing
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match &outcome {
                Ok(()) if writes_something => *failing = None,
                Ok(()) => {}
                Err(Some(error)) => *failing = Some(error.to_string()),
                Err(None) => *failing = Some("the storage engine panicked".to_owned()),
            }
        }
        for ((context, _, done), values) in waiting.into_iter().zip(answers) {
            let result = match &outcome {
                Ok(()) => Ok(values),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::embedded::{EmbeddedConfig, EngineMemory, Fsync, open::open_tables};

    fn record(table: Table, prefix: &[u8], record: &[u8]) -> Appended {
        Appended {
            table,
            prefix: prefix.to_vec(),
            record: record.to_vec(),
        }
    }

    #[test]
    fn a_commits_records_make_one_row_per_prefix_and_read_back_in_order() {
        let rows = log_rows(
            vec![
                record(Table::VisitLog, b"a", b"first"),
                record(Table::VisitLog, b"b", b"other"),
                record(Table::VisitLog, b"a", b""),
                record(Table::VisitLog, b"a", b"third"),
            ],
            7,
        );
        assert_eq!(rows.len(), 2);
        let (_, _, row) = rows
            .iter()
            .find(|(_, key, _)| *key == log_key(b"a", 7))
            .expect("the row of prefix a");
        let records: Vec<_> = log_records(row).collect();
        assert_eq!(
            records,
            vec![Some(&b"first"[..]), Some(&b""[..]), Some(&b"third"[..])]
        );
    }

    #[test]
    fn a_record_running_past_its_row_reads_as_damaged() {
        let mut row = 10u32.to_be_bytes().to_vec();
        row.extend_from_slice(b"short");
        assert_eq!(log_records(&row).collect::<Vec<_>>(), vec![None]);
        assert_eq!(log_records(&[0, 0]).collect::<Vec<_>>(), vec![None]);
    }

    /// Log rows are never overwritten: a committer started on a folder goes on from the number
    /// the last one stored (after a restart, say).
    #[tokio::test]
    async fn log_numbers_go_on_across_committers() {
        let folder = tempfile::tempdir().expect("temp dir");
        let tables = Arc::new(
            open_tables(&EmbeddedConfig {
                data_dir: folder.path().to_owned(),
                fsync: Fsync::Never,
                memory: EngineMemory::default(),
            })
            .expect("opened"),
        );
        for text in [&b"one"[..], b"two"] {
            let committer =
                Committer::start(Arc::clone(&tables), Arc::new(RecentRows::new(0, true)))
                    .expect("started");
            committer
                .commit_appended_with(
                    "test",
                    Vec::new(),
                    vec![record(Table::VisitLog, b"p", text)],
                )
                .await
                .expect("committed");
        }
        let rows: Vec<_> = tables
            .visit_log
            .prefix(b"p")
            .map(|guard| guard.into_inner().expect("read"))
            .collect();
        assert_eq!(rows.len(), 2, "the second commit kept the first's row");
        assert_eq!(rows[0].0.as_ref(), log_key(b"p", 0));
        assert_eq!(rows[1].0.as_ref(), log_key(b"p", 1));
        assert_eq!(stored_log_number(&tables).expect("read"), 2);
    }

    fn append(stored: Option<&[u8]>, value: &[u8]) -> Vec<u8> {
        let mut row = stored.unwrap_or_default().to_vec();
        row.extend_from_slice(value);
        row
    }

    fn take_out(stored: Option<&[u8]>, value: &[u8]) -> Vec<u8> {
        let mut row = stored.unwrap_or_default().to_vec();
        row.retain(|byte| !value.contains(byte));
        row
    }

    /// Taking the last entry out of a merged row removes the row, beside the call's removals.
    #[tokio::test]
    async fn a_merge_that_leaves_nothing_removes_its_row() {
        let folder = tempfile::tempdir().expect("temp dir");
        let tables = Arc::new(
            open_tables(&EmbeddedConfig {
                data_dir: folder.path().to_owned(),
                fsync: Fsync::Never,
                memory: EngineMemory::default(),
            })
            .expect("opened"),
        );
        let committer = Committer::start(Arc::clone(&tables), Arc::new(RecentRows::new(0, true)))
            .expect("started");
        let merged = |value: &[u8], merge| Merged {
            table: Table::ImpressionCopy,
            key: b"row".to_vec(),
            value: value.to_vec(),
            merge,
        };
        let values = committer
            .commit_merged(
                "test",
                vec![(Table::Meta, b"other".to_vec(), vec![1])],
                Vec::new(),
                vec![merged(b"ab", append)],
            )
            .await
            .expect("committed");
        assert_eq!(values, vec![b"ab".to_vec()]);
        committer
            .commit_removing("test", Vec::new(), vec![merged(b"a", take_out)])
            .await
            .expect("committed");
        let row = tables.impression_copy.get(b"row").expect("read");
        assert_eq!(row.as_deref(), Some(&b"b"[..]));
        committer
            .commit_removing(
                "test",
                vec![(Table::Meta, b"other".to_vec())],
                vec![merged(b"b", take_out)],
            )
            .await
            .expect("committed");
        assert!(tables.impression_copy.get(b"row").expect("read").is_none());
        assert!(tables.meta.get(b"other").expect("read").is_none());
    }
}
