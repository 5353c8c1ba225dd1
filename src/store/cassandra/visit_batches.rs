//! Beacons that arrive together for one partition share one write. `/track` stores one beacon
//! per request, and a round trip per beacon is what limits it on Cassandra; so while a write of
//! a partition's beacons is in flight, the partition's next beacons wait and then go together
//! as one unlogged single-partition batch (atomic and isolated in Cassandra, no batch log),
//! the way impressions of one request already do. A beacon that finds its partition idle is
//! written at once: grouping adds no wait when there is nothing to group with.
//!
//! Each beacon's call still returns only once its own batch is stored, so `204` still means
//! stored. The waiting beacons are bounded by the requests the server lets in at once, and by
//! [`MAX_WAITING_BEACONS`] (a caller that hangs up gives back its in-flight place while its
//! beacon still waits to be written).

use super::event_writes::{Validity, user_agent};
use super::statements::{failed, visit_partition_values};
use crate::domain::beacon::{Beacon, VisitPartition};
use crate::store::StoreError;
use chrono::{DateTime, NaiveDate, Utc};
use futures::future::join_all;
use scylla::SerializeRow;
use scylla::client::session::Session;
use scylla::statement::batch::{Batch, BatchType};
use scylla::statement::prepared::PreparedStatement;
use scylla::value::MaybeUnset;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::oneshot;

/// Beacons per unlogged single-partition batch. Single-partition batches are exempt from
/// Cassandra's batch-size warnings (CASSANDRA-10876); a beacon is at most a few KiB, so a batch
/// stays far below the mutation limit.
pub(crate) const VISITS_PER_BATCH: usize = 100;

/// Beacons waiting for a write at once, over all partitions: while the store is slow, callers
/// that hang up could otherwise queue beacons faster than they are written. Past it a beacon
/// is refused as "store unavailable" (503, retry later), never queued.
pub(crate) const MAX_WAITING_BEACONS: usize = 16_384;

/// The bound values of a `visit` insert.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
pub(crate) struct VisitValues<'a> {
    site: &'a str,
    day: NaiveDate,
    bucket_id: i16,
    timestamp: DateTime<Utc>,
    guid: &'a str,
    features: String,
    user_agent: MaybeUnset<&'a str>,
    #[scylla(flatten)]
    validity: Validity,
    ttl: i32,
}

impl<'a> VisitValues<'a> {
    pub(crate) fn new(partition: &'a VisitPartition, visit: &'a Beacon, ttl: i32) -> Self {
        let (site, day, bucket_id) = visit_partition_values(partition);
        Self {
            site,
            day,
            bucket_id,
            timestamp: visit.timestamp.instant(),
            guid: visit.guid.as_str(),
            features: visit.features.combination_key(),
            user_agent: user_agent(visit.user_agent.as_ref()),
            validity: Validity::of(visit.invalid),
            ttl,
        }
    }
}

/// What writing a partition's beacons needs; owned, so a write outlives the request that
/// started it (a client that hangs up does not strand the beacons waiting behind it).
#[derive(Clone)]
pub(crate) struct VisitWriter {
    pub(crate) session: Arc<Session>,
    pub(crate) insert_visit: PreparedStatement,
    /// Seconds for `USING TTL` (0: never expire).
    pub(crate) ttl: i32,
}

impl VisitWriter {
    /// Writes one partition's beacons: alone as one statement, together in batches.
    pub(crate) async fn write(
        &self,
        partition: &VisitPartition,
        visits: &[Beacon],
    ) -> Result<(), StoreError> {
        if let [visit] = visits {
            self.session
                .execute_unpaged(
                    &self.insert_visit,
                    VisitValues::new(partition, visit, self.ttl),
                )
                .await
                .map_err(failed("writing a beacon"))?;
            return Ok(());
        }
        let results = join_all(
            visits
                .chunks(VISITS_PER_BATCH)
                .map(|chunk| self.write_batch(partition, chunk)),
        )
        .await;
        results.into_iter().collect()
    }

    async fn write_batch(
        &self,
        partition: &VisitPartition,
        chunk: &[Beacon],
    ) -> Result<(), StoreError> {
        let mut batch = Batch::new(BatchType::Unlogged);
        batch.set_is_idempotent(true);
        let values: Vec<VisitValues> = chunk
            .iter()
            .map(|visit| {
                batch.append_statement(self.insert_visit.clone());
                VisitValues::new(partition, visit, self.ttl)
            })
            .collect();
        self.session
            .batch(&batch, values)
            .await
            .map_err(failed("writing beacons"))?;
        Ok(())
    }
}

/// A beacon waiting for its partition's next write, and who to tell how it went.
struct Waiting {
    visit: Beacon,
    stored: oneshot::Sender<Result<(), StoreError>>,
}

/// The partitions with a write in flight, each with the beacons waiting for the next one.
#[derive(Default)]
pub(crate) struct VisitBatches {
    queues: Mutex<Queues>,
}

#[derive(Default)]
struct Queues {
    by_partition: HashMap<VisitPartition, Vec<Waiting>>,
    /// Beacons in all the queues.
    waiting: usize,
}

impl Queues {
    /// Queues `waiting` for `partition`'s next write; true when no write of the partition is
    /// in flight, and the caller must start one.
    fn enqueue(
        &mut self,
        partition: &VisitPartition,
        waiting: Waiting,
    ) -> Result<bool, StoreError> {
        if self.waiting >= MAX_WAITING_BEACONS {
            return Err(StoreError::unavailable_message(format!(
                "writing a beacon: {MAX_WAITING_BEACONS} beacons are already waiting for the store"
            )));
        }
        self.waiting += 1;
        Ok(match self.by_partition.entry(partition.clone()) {
            Entry::Occupied(mut queue) => {
                queue.get_mut().push(waiting);
                false
            }
            Entry::Vacant(slot) => {
                slot.insert(vec![waiting]);
                true
            }
        })
    }

    /// The partition's waiting beacons, leaving it queued and empty while they are written;
    /// `None` when none wait, and then the partition is no longer queued.
    fn take(&mut self, partition: &VisitPartition) -> Option<Vec<Waiting>> {
        match self.by_partition.get_mut(partition) {
            Some(queue) if !queue.is_empty() => {
                let batch = std::mem::take(queue);
                self.waiting -= batch.len();
                Some(batch)
            }
            _ => {
                self.by_partition.remove(partition);
                None
            }
        }
    }

    /// Drops the partition and whatever waits for it: their callers hear an error.
    fn abandon(&mut self, partition: &VisitPartition) {
        if let Some(dropped) = self.by_partition.remove(partition) {
            self.waiting -= dropped.len();
        }
    }
}

impl VisitBatches {
    /// Stores `visit` in `partition`, together with whatever else waits for that partition.
    pub(crate) async fn write(
        self: &Arc<Self>,
        writer: &VisitWriter,
        partition: &VisitPartition,
        visit: Beacon,
    ) -> Result<(), StoreError> {
        let (stored, outcome) = oneshot::channel();
        let leads = self.lock().enqueue(partition, Waiting { visit, stored })?;
        if leads {
            tokio::spawn(Arc::clone(self).drain(writer.clone(), partition.clone()));
        }
        outcome.await.unwrap_or_else(|_| {
            Err(StoreError::internal_message(
                "writing beacons: the writer ended before the beacon was stored",
            ))
        })
    }

    /// Writes the partition's waiting beacons, batch after batch, until none wait.
    async fn drain(self: Arc<Self>, writer: VisitWriter, partition: VisitPartition) {
        let mut draining = Draining {
            batches: &self,
            partition: &partition,
            done: false,
        };
        loop {
            // The partition stays queued, empty, while its batch is written: that is what
            // tells the next beacons to wait instead of writing on their own. It leaves under
            // the same lock that finds nothing waiting, so no beacon is left behind.
            let Some(batch) = self.lock().take(&partition) else {
                draining.done = true;
                return;
            };
            let (visits, told): (Vec<Beacon>, Vec<_>) = batch
                .into_iter()
                .map(|waiting| (waiting.visit, waiting.stored))
                .unzip();
            let outcome = writer.write(&partition, &visits).await;
            for stored in told {
                // A caller that stopped waiting no longer needs the answer.
                let _ = stored.send(outcome.clone());
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queues> {
        // The queues stay consistent whatever panicked while they were held.
        self.queues
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A partition's drain in progress. Dropped before the drain found nothing waiting (the task
/// panicked, or the runtime is shutting down), it removes the partition anyway: its waiting
/// callers get an error rather than wait for a drain that will never come, and later beacons
/// start afresh.
struct Draining<'a> {
    batches: &'a VisitBatches,
    partition: &'a VisitPartition,
    done: bool,
}

impl Drop for Draining<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.batches.lock().abandon(self.partition);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::beacon::{Features, Guid, SiteId};
    use crate::domain::bucket::BucketCount;
    use crate::domain::time::EventTime;

    fn waiting(
        guid: &str,
    ) -> (
        VisitPartition,
        Waiting,
        oneshot::Receiver<Result<(), StoreError>>,
    ) {
        let visit = Beacon {
            site: SiteId::parse("example.com").expect("valid site"),
            guid: Guid::parse(guid).expect("valid guid"),
            timestamp: EventTime::from_epoch_millis(1_764_158_400_000, chrono::Utc::now())
                .expect("valid"),
            features: Features::new(Default::default()).expect("valid features"),
            user_agent: None,
            invalid: None,
        };
        let (stored, outcome) = oneshot::channel();
        (
            visit.partition(BucketCount::ONE),
            Waiting { visit, stored },
            outcome,
        )
    }

    #[test]
    fn the_first_beacon_of_an_idle_partition_leads_and_the_rest_wait_for_one_take() {
        let mut queues = Queues::default();
        let (partition, first, _) = waiting("a");
        assert!(queues.enqueue(&partition, first).expect("room"));
        // The leader's drain takes it; the partition stays queued while it is written.
        assert_eq!(queues.take(&partition).map(|batch| batch.len()), Some(1));
        for guid in ["b", "c", "d"] {
            let (partition, next, _) = waiting(guid);
            assert!(!queues.enqueue(&partition, next).expect("room"));
        }
        assert_eq!(queues.waiting, 3);
        assert_eq!(queues.take(&partition).map(|batch| batch.len()), Some(3));
        assert_eq!(queues.waiting, 0);
        // Nothing left: the partition is idle again and the next beacon leads.
        assert!(queues.take(&partition).is_none());
        let (partition, last, _) = waiting("e");
        assert!(queues.enqueue(&partition, last).expect("room"));
    }

    #[test]
    fn past_the_bound_a_beacon_is_refused_as_unavailable_and_an_abandoned_queue_frees_room() {
        let mut queues = Queues::default();
        let mut outcomes = Vec::new();
        let mut partition = None;
        for index in 0..MAX_WAITING_BEACONS {
            let (key, next, outcome) = waiting(&format!("visitor-{index}"));
            queues.enqueue(&key, next).expect("room");
            outcomes.push(outcome);
            partition = Some(key);
        }
        let partition = partition.expect("queued");
        let (_, refused, _) = waiting("one-too-many");
        let error = queues.enqueue(&partition, refused).expect_err("full");
        assert!(error.is_retryable(), "{error}");

        queues.abandon(&partition);
        assert_eq!(queues.waiting, 0);
        // Their callers hear that the writer is gone instead of waiting for ever.
        assert!(
            outcomes
                .iter_mut()
                .all(|outcome| outcome.try_recv().is_err())
        );
        let (_, again, _) = waiting("again");
        assert!(queues.enqueue(&partition, again).expect("room"));
    }
}
