//! Viewability reports from `/v.js` (docs/API.md, "Viewability and engagement"): each
//! verified report is stored once, at most [`PLACES_PER_CLIENT`] distinct ones per impression
//! and client, as an event of its own in its impression's partition. This process remembers
//! the reports it stored, bounded by `--view-memory-entries`; forgetting one costs at most a
//! second stored copy, which the join reads as one (docs/DESIGN.md, "Viewability").

use crate::domain::ids::ImpressionId;
use crate::domain::view::{Client, PLACES_PER_CLIENT, ReportId, ViewReportEvent};
use crate::ingest::Ingestor;
use crate::store::StoreError;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What became of a report, for `adevents_view_reports_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Stored (it may still be ignored by the join: another client, or past the window).
    Stored,
    /// Stored as invalid traffic (a bot, a prefetch, a denied address): it counts nowhere.
    StoredInvalid,
    /// This process stored the same report already.
    Repeated,
    /// Its client has sent 5 other reports for the impression.
    PastLimit,
}

impl Outcome {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Stored => "stored",
            Self::StoredInvalid => "stored_invalid",
            Self::Repeated => "repeated",
            Self::PastLimit => "past_limit",
        }
    }
}

/// An impression, a client, and whether its reports are valid traffic: an invalid report
/// (a prefetch from the viewer's own browser, say) takes none of the places of valid ones.
type ClientKey = (ImpressionId, Client, bool);

/// The reports stored per (impression, client), oldest first, forgotten when they expire or
/// when the memory is full.
struct Places {
    reports: HashMap<ClientKey, (Instant, Vec<ReportId>)>,
    order: VecDeque<(Instant, ClientKey)>,
    capacity: usize,
    lifetime: Duration,
}

impl Places {
    /// Takes a place for `id` (`Ok`), or says why not.
    fn admit(&mut self, key: ClientKey, id: ReportId, now: Instant) -> Result<(), Outcome> {
        self.forget_expired(now);
        if let Some((_, ids)) = self.reports.get_mut(&key) {
            if ids.contains(&id) {
                return Err(Outcome::Repeated);
            }
            if ids.len() >= PLACES_PER_CLIENT {
                return Err(Outcome::PastLimit);
            }
            ids.push(id);
            return Ok(());
        }
        while self.reports.len() >= self.capacity {
            let Some((_, oldest)) = self.order.pop_front() else {
                break;
            };
            self.reports.remove(&oldest);
        }
        let expires = now + self.lifetime;
        self.reports.insert(key, (expires, vec![id]));
        self.order.push_back((expires, key));
        Ok(())
    }

    /// Gives back the place of a report whose write failed, so a retry may take it.
    fn release(&mut self, key: &ClientKey, id: ReportId) {
        if let Some((_, ids)) = self.reports.get_mut(key) {
            ids.retain(|held| *held != id);
        }
    }

    fn forget_expired(&mut self, now: Instant) {
        while let Some((expires, key)) = self.order.front().copied() {
            if expires > now {
                break;
            }
            self.order.pop_front();
            // A key evicted and admitted again has a later entry of its own.
            if self
                .reports
                .get(&key)
                .is_some_and(|(held, _)| *held == expires)
            {
                self.reports.remove(&key);
            }
        }
    }
}

pub(crate) struct ViewReports {
    ingestor: Arc<Ingestor>,
    places: Mutex<Places>,
}

impl ViewReports {
    /// `lifetime`: how long a report may still come for an impression (`--tag-ttl` plus
    /// `--view-window`); `capacity`: the (impression, client) pairs remembered at most.
    pub(crate) fn new(ingestor: Arc<Ingestor>, capacity: usize, lifetime: Duration) -> Self {
        Self {
            ingestor,
            places: Mutex::new(Places {
                reports: HashMap::new(),
                order: VecDeque::new(),
                capacity: capacity.max(1),
                lifetime,
            }),
        }
    }

    /// Stores `report` unless this process stored it, or 5 others of its client, already.
    pub(crate) async fn report(&self, report: ViewReportEvent) -> Result<Outcome, StoreError> {
        let key = (
            report.impression_id,
            report.client,
            report.invalid.is_none(),
        );
        let id = report.id();
        let stored = match report.invalid {
            None => Outcome::Stored,
            Some(_) => Outcome::StoredInvalid,
        };
        if let Err(outcome) = self.lock().admit(key, id, Instant::now()) {
            return Ok(outcome);
        }
        let held = self.lock().reports.len();
        metrics::gauge!("adevents_view_join_entries").set(held as f64);
        match self.ingestor.view_reports(vec![report]).await {
            Ok(()) => Ok(stored),
            Err(error) => {
                self.lock().release(&key, id);
                Err(error)
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Places> {
        // Plain bookkeeping: usable whatever panicked while holding it.
        self.places
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::view::{ViewKinds, ViewReport};
    use uuid::Uuid;

    fn places(capacity: usize) -> Places {
        Places {
            reports: HashMap::new(),
            order: VecDeque::new(),
            capacity,
            lifetime: Duration::from_secs(60),
        }
    }

    fn id(bits: u8) -> ReportId {
        let report = ViewReport {
            kinds: ViewKinds::from_bits(bits),
            in_view_ms: None,
            max_visible: None,
        };
        ReportId::of(&Client::default(), &report)
    }

    fn key(n: u128) -> ClientKey {
        (
            ImpressionId::new(Uuid::from_u128(n)),
            Client::default(),
            true,
        )
    }

    #[test]
    fn five_places_per_client_and_a_repeat_takes_none() {
        let mut memory = places(10);
        let now = Instant::now();
        for bits in 1..=5 {
            assert_eq!(memory.admit(key(1), id(bits), now), Ok(()));
        }
        assert_eq!(memory.admit(key(1), id(1), now), Err(Outcome::Repeated));
        assert_eq!(memory.admit(key(1), id(6), now), Err(Outcome::PastLimit));
        memory.release(&key(1), id(5));
        assert_eq!(memory.admit(key(1), id(6), now), Ok(()));
        assert_eq!(memory.admit(key(2), id(1), now), Ok(()));
    }

    #[test]
    fn the_memory_forgets_the_oldest_when_full_and_what_expired() {
        let mut memory = places(2);
        let now = Instant::now();
        for n in 1..=3 {
            assert_eq!(memory.admit(key(n), id(1), now), Ok(()));
        }
        assert_eq!(memory.reports.len(), 2);
        assert!(!memory.reports.contains_key(&key(1)));
        let later = now + Duration::from_secs(61);
        assert_eq!(memory.admit(key(4), id(1), later), Ok(()));
        assert_eq!(memory.reports.len(), 1);
    }
}
