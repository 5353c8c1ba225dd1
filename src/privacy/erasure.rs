//! Erasure as a durable job (docs/DESIGN.md, "Personal data"). A request is recorded before it
//! is answered; every process runs the pending ones. A job waits until every running process
//! has indexed what it stored before the request (and has learnt of the erasure, so that it
//! drops the subject's re-sent old events), finds the subject's events through the index,
//! records the keyed hashes of the impressions found and waits again until every process drops
//! their clicks and view reports (which name no user), finds again what came meanwhile,
//! settles its counts once (the first count stored wins), deletes the rows (conversions
//! carrying the user among them), then the index
//! entries and directory lines that led to them, marks the unsealed slices that counted them,
//! and is recorded done with only the subject's keyed hash. Every step is idempotent and the
//! pointers go last, so a job cut off anywhere (`kill -9`) is resumed by running it again, on
//! this process or another.

use super::finder::{SubjectEvents, SubjectFinder, VisitorEvents};
use crate::beacons::BeaconIngestor;
use crate::domain::conversion::index::{IndexKey, Week};
use crate::domain::ids::{AdvertiserId, CampaignKey};
use crate::domain::owner::Owner;
use crate::domain::privacy::{
    ErasedCounts, ErasureId, ErasureRecord, ErasureStatus, Subject, SubjectHash, SubjectWeek,
    VisitorDay,
};
use crate::domain::time::Day;
use crate::erased::{ErasedSubjects, REFRESH};
use crate::event_index::EventIndexer;
use crate::ingest::Ingestor;
use crate::readiness::Readiness;
use crate::store::{EventAt, Store, StoreError};
use chrono::{DateTime, TimeDelta, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often pending erasures are looked for (a request on this process wakes the job at once).
const PERIOD: Duration = Duration::from_secs(2);
/// Added to the refresh period of erased subjects for the clocks and reads of other processes.
const SETTLE_MARGIN: TimeDelta = TimeDelta::seconds(5);
/// Deletes at once.
const CONCURRENCY: usize = 16;

pub(crate) struct Erasures {
    store: Arc<dyn Store>,
    finder: SubjectFinder,
    indexer: Arc<EventIndexer>,
    ingestor: Arc<Ingestor>,
    erased: Arc<ErasedSubjects>,
    /// A start-up repair re-indexes what a vanished process stored; jobs wait for it.
    readiness: Arc<Readiness>,
    /// When this process's start-up repair was over: what it re-indexed is indexed once this
    /// process's index is past it.
    repaired_at: std::sync::OnceLock<DateTime<Utc>>,
    wake: Arc<tokio::sync::Notify>,
    /// Told which visitor-days an erasure deleted from the visitor index, so that it writes
    /// them again for the visitor's next beacons.
    beacons: Option<Arc<BeaconIngestor>>,
    /// The impressions each running job recorded as erased, and when it last added some.
    guarded: Mutex<HashMap<ErasureId, Guarded>>,
}

/// Impressions whose clicks and view reports every process drops once it has read them.
struct Guarded {
    hashes: BTreeSet<SubjectHash>,
    since: DateTime<Utc>,
}

impl Erasures {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        finder: SubjectFinder,
        indexer: Arc<EventIndexer>,
        ingestor: Arc<Ingestor>,
        erased: Arc<ErasedSubjects>,
        readiness: Arc<Readiness>,
    ) -> Self {
        Self {
            store,
            finder,
            indexer,
            ingestor,
            erased,
            readiness,
            repaired_at: std::sync::OnceLock::new(),
            wake: Arc::new(tokio::sync::Notify::new()),
            beacons: None,
            guarded: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn with_beacons(mut self, beacons: Arc<BeaconIngestor>) -> Self {
        self.beacons = Some(beacons);
        self
    }

    /// Records an erasure of `subject` (of one advertiser's data, or of all); durable on return.
    pub(crate) async fn request(
        &self,
        subject: Subject,
        scope: Option<AdvertiserId>,
    ) -> Result<ErasureRecord, StoreError> {
        let key = self.erased.key().await?;
        let hash = key.hash(&subject);
        let record = ErasureRecord::requested(subject, hash, scope, Utc::now());
        self.store.create_erasure(&record).await?;
        self.erased.add(record.erased_subject());
        metrics::counter!("adevents_erasures_requested_total").increment(1);
        self.wake.notify_one();
        Ok(record)
    }

    pub(crate) async fn status(&self, id: ErasureId) -> Result<Option<ErasureRecord>, StoreError> {
        self.store.erasure(id).await
    }

    /// Runs every pending erasure that may run now; returns how many were done.
    pub(crate) async fn run_pending(&self) -> Result<usize, StoreError> {
        let pending = self.store.pending_erasures().await?;
        metrics::gauge!("adevents_erasures_pending").set(pending.len() as f64);
        // A job done elsewhere needs its guard here no more.
        self.guards().retain(|id, _| pending.contains(id));
        if pending.is_empty() {
            return Ok(0);
        }
        if self.readiness.is_repairing() {
            return Ok(0);
        }
        let repaired_at = *self.repaired_at.get_or_init(Utc::now);
        let indexed_through = self
            .indexer
            .indexed_everywhere_through(self.store.as_ref())
            .await?;
        let mut done = 0;
        for id in pending {
            if self.run(id, indexed_through, repaired_at).await? {
                done += 1;
            }
        }
        Ok(done)
    }

    /// Runs one erasure if every process has indexed what it stored before the request;
    /// says whether it is done.
    async fn run(
        &self,
        id: ErasureId,
        indexed_through: DateTime<Utc>,
        repaired_at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let Some(record) = self.store.erasure(id).await? else {
            return Ok(false);
        };
        if record.status == ErasureStatus::Done {
            // Done elsewhere after it was listed here.
            return Ok(true);
        }
        // Until every process knows the erasure, one may still store an old event of the
        // subject; it is indexed once that process is past this.
        let settled =
            indexed_through >= self.known_everywhere(record.requested_at).max(repaired_at);
        let counts = match &record.subject {
            Some(Subject::User(user)) => {
                let user = *user;
                // The impressions found are guarded from the first run on, so that the two
                // waits run together; no find while the guard's wait runs.
                if let Some(since) = self.guarded_since(record.id)
                    && indexed_through < self.known_everywhere(since)
                {
                    return Ok(false);
                }
                let found = self
                    .finder
                    .find(user, record.scope, Some(record.requested_at))
                    .await?;
                if !self.impressions_guarded(record.id, &found).await? || !settled {
                    return Ok(false);
                }
                let counts = self
                    .store
                    .settle_erasure_counts(id, self.count(&found).await?)
                    .await?;
                self.erase(&found, record.requested_at).await?;
                self.store
                    .finish_erasure(&record.done(counts, Utc::now()))
                    .await?;
                self.indexer.forget_subject(user);
                self.guards().remove(&record.id);
                counts
            }
            Some(Subject::Visitor { site, guid }) => {
                if !settled {
                    return Ok(false);
                }
                let mut found = self.finder.find_visitor(site, guid).await?;
                // Beacons timed after the request are the visitor's later ones: they stay.
                for (_, rows) in &mut found.visits {
                    rows.retain(|row| row.timestamp.instant() < record.requested_at);
                }
                found.visits.retain(|(_, rows)| !rows.is_empty());
                let found_counts = ErasedCounts {
                    visits: found.count(),
                    ..ErasedCounts::default()
                };
                let counts = self.store.settle_erasure_counts(id, found_counts).await?;
                self.erase_visitor(&found, record.requested_at).await?;
                // Before the record says done: a beacon of the visitor stored once the
                // erasure is done must be indexed again.
                let days: Vec<Day> = found.days.iter().map(|entry| entry.day).collect();
                if let Some(beacons) = &self.beacons {
                    beacons.forget_visitor(site, guid, &days);
                }
                self.store
                    .finish_erasure(&record.done(counts, Utc::now()))
                    .await?;
                counts
            }
            None => {
                // A pending record always holds its subject; one that does not has nothing to
                // find.
                self.store
                    .finish_erasure(&record.done(ErasedCounts::default(), Utc::now()))
                    .await?;
                return Ok(true);
            }
        };
        metrics::counter!("adevents_erasures_done_total").increment(1);
        metrics::counter!("adevents_erased_events_total", "kind" => "impression")
            .increment(counts.impressions);
        metrics::counter!("adevents_erased_events_total", "kind" => "click")
            .increment(counts.clicks);
        metrics::counter!("adevents_erased_events_total", "kind" => "view_report")
            .increment(counts.view_reports);
        metrics::counter!("adevents_erased_events_total", "kind" => "conversion")
            .increment(counts.conversions);
        metrics::counter!("adevents_erased_events_total", "kind" => "visit")
            .increment(counts.visits);
        tracing::info!(erasure = %id, "erasure done");
        Ok(true)
    }

    /// When every process has learnt what this process recorded at `at`: other processes
    /// read erasures every [`REFRESH`]; one process alone on its store knew it at once.
    fn known_everywhere(&self, at: DateTime<Utc>) -> DateTime<Utc> {
        if self.store.is_shared() {
            at + TimeDelta::from_std(REFRESH).unwrap_or(TimeDelta::MAX) + SETTLE_MARGIN
        } else {
            at
        }
    }

    /// When this process last recorded impressions of erasure `id` as erased, if it did.
    fn guarded_since(&self, id: ErasureId) -> Option<DateTime<Utc>> {
        self.guards().get(&id).map(|guarded| guarded.since)
    }

    /// Whether the impressions `found` were recorded as erased already, so that every process
    /// drops their clicks and view reports once [`Self::known_everywhere`] of the recording:
    /// they name no user, so one stored after the job could never be found to be erased.
    /// Otherwise records their keyed hashes and says no: the job, run again once every process
    /// has read them and indexed what it stored before, finds what came in meanwhile.
    /// Recording again after a restart only repeats writes.
    async fn impressions_guarded(
        &self,
        id: ErasureId,
        found: &SubjectEvents,
    ) -> Result<bool, StoreError> {
        let key = self.erased.key().await?;
        let hashes: BTreeSet<SubjectHash> = found
            .impressions
            .iter()
            .map(|impression| {
                key.hash_impression(impression.campaign.advertiser_id, impression.impression_id)
            })
            .collect();
        if hashes.is_empty() {
            return Ok(true);
        }
        if self
            .guards()
            .get(&id)
            .is_some_and(|guarded| hashes.is_subset(&guarded.hashes))
        {
            return Ok(true);
        }
        let recorded: Vec<SubjectHash> = hashes.iter().copied().collect();
        self.store.record_erased_impressions(id, &recorded).await?;
        self.erased.add_impressions(recorded);
        let mut guards = self.guards();
        let guarded = guards.entry(id).or_insert_with(|| Guarded {
            hashes: BTreeSet::new(),
            since: Utc::now(),
        });
        guarded.hashes.extend(hashes);
        guarded.since = Utc::now();
        Ok(false)
    }

    fn guards(&self) -> std::sync::MutexGuard<'_, HashMap<ErasureId, Guarded>> {
        self.guarded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What the job erases, each identity once.
    async fn count(&self, found: &SubjectEvents) -> Result<ErasedCounts, StoreError> {
        let copies: Vec<EventAt> = found
            .impressions
            .iter()
            .flat_map(|impression| impression.copies.iter().copied())
            .collect();
        let reports: HashSet<_> = stream::iter(copies)
            .map(|copy| {
                let finder = self.finder.clone();
                async move { finder.reports_of(&copy).await }
            })
            .buffer_unordered(CONCURRENCY)
            .try_concat()
            .await?
            .into_iter()
            .map(|report| (report.impression_id, report.id))
            .collect();
        Ok(ErasedCounts {
            impressions: found
                .impressions
                .iter()
                .filter(|impression| !impression.copies.is_empty())
                .count() as u64,
            // A click's identity is its impression's: clicked three times, one click.
            clicks: found
                .impressions
                .iter()
                .filter(|impression| !impression.clicks.is_empty())
                .count() as u64,
            view_reports: reports.len() as u64,
            conversions: found.conversions.len() as u64,
            visits: 0,
        })
    }

    /// Deletes the rows, then what led to them: a job cut off before the end finds them again.
    /// The user's own index entries go one by one, so entries of events stored since the
    /// request stay; so do the directory lines of the request's week and later, which lead to
    /// those (this process or another may remember having written them, and would not write
    /// them again). Older weeks get no new events of the user: ingestion drops them.
    async fn erase(
        &self,
        found: &SubjectEvents,
        requested_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut removed: Vec<(CampaignKey, DateTime<Utc>)> = Vec::new();
        let mut impression_keys: BTreeSet<(AdvertiserId, Week, IndexKey)> = BTreeSet::new();
        for impression in &found.impressions {
            let advertiser = impression.campaign.advertiser_id;
            let key = IndexKey::Impression(impression.impression_id);
            for copy in &impression.copies {
                removed.push((impression.campaign, copy.timestamp.instant()));
                impression_keys.insert((advertiser, Week::of(copy.timestamp.instant()), key));
            }
            for (at, _) in &impression.clicks {
                removed.push((impression.campaign, at.timestamp.instant()));
                impression_keys.insert((advertiser, Week::of(at.timestamp.instant()), key));
            }
        }
        stream::iter(found.impressions.clone())
            .map(|impression| {
                let store = Arc::clone(&self.store);
                async move {
                    for copy in &impression.copies {
                        store.erase_impression(copy).await?;
                    }
                    for (at, _) in &impression.clicks {
                        store.erase_click(at).await?;
                    }
                    store
                        .erase_clicks_of(impression.campaign, impression.impression_id)
                        .await
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<()>()
            .await?;
        // A decided conversion counts in its credited campaign's slice of its own time.
        for record in &found.conversions {
            if let Some(decided) = &record.decision
                && let Some(campaign_id) = decided.campaign_id()
            {
                let campaign = CampaignKey {
                    advertiser_id: decided.conversion.advertiser_id,
                    campaign_id,
                };
                removed.push((campaign, decided.conversion.timestamp.instant()));
            }
        }
        stream::iter(found.conversions.clone())
            .map(|record| {
                let store = Arc::clone(&self.store);
                async move { store.erase_conversion(&record).await }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<()>()
            .await?;
        self.mark_unsealed(&removed).await?;
        stream::iter(impression_keys)
            .map(|(advertiser, week, key)| {
                let store = Arc::clone(&self.store);
                async move { store.delete_index_key(advertiser, week, key).await }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<()>()
            .await?;
        self.store.delete_index_entries(&found.entries).await?;
        let current = Week::of(requested_at);
        let past: Vec<SubjectWeek> = found
            .weeks
            .iter()
            .filter(|line| line.week < current)
            .copied()
            .collect();
        self.store.delete_subject_weeks(&past).await
    }

    /// Deletes a visitor's beacons, then the index entries that led to them. Open days count
    /// visits from the stored beacons, so nothing is marked: their visits exclude the visitor
    /// at once, and their live unique-visitor sketches are corrected by the day's seal, which
    /// counts from the beacons left.
    async fn erase_visitor(
        &self,
        found: &VisitorEvents,
        requested_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        stream::iter(found.visits.clone())
            .map(|(partition, rows)| {
                let store = Arc::clone(&self.store);
                async move { store.erase_visits(&partition, &rows).await }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<()>()
            .await?;
        // The request's day and later stay in the index: they lead to the visitor's later
        // beacons, and a process that remembers writing the entry would not write it again.
        let today = Day::new(requested_at.date_naive());
        let past: Vec<VisitorDay> = found
            .days
            .iter()
            .filter(|entry| entry.day < today)
            .cloned()
            .collect();
        self.store.delete_visitor_days(&past, requested_at).await
    }

    /// Marks the slices of days not yet sealed that counted a removed event. A sealed day keeps
    /// its rollup (it holds no identity); a later seal of it recomputes without the events.
    async fn mark_unsealed(
        &self,
        removed: &[(CampaignKey, DateTime<Utc>)],
    ) -> Result<(), StoreError> {
        let days: BTreeSet<(CampaignKey, Day)> = removed
            .iter()
            .map(|(campaign, at)| (*campaign, Day::new(at.date_naive())))
            .collect();
        let sealed: HashSet<(CampaignKey, Day)> = stream::iter(days)
            .map(|(campaign, day)| {
                let store = Arc::clone(&self.store);
                async move {
                    let state = store.seal_state(&Owner::Campaign(campaign), day).await?;
                    Ok::<_, StoreError>(state.sealed_from.map(|_| (campaign, day)))
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_filter_map(|sealed| async move { Ok(sealed) })
            .try_collect()
            .await?;
        let open: Vec<(CampaignKey, DateTime<Utc>)> = removed
            .iter()
            .filter(|(campaign, at)| !sealed.contains(&(*campaign, Day::new(at.date_naive()))))
            .copied()
            .collect();
        self.ingestor.events_removed(&open).await
    }

    /// Runs pending erasures every [`PERIOD`], or at once when this process records one.
    /// (Every process's erasures are read again on their own timer:
    /// [`ErasedSubjects::spawn_refresh`].)
    pub(crate) fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let erasures = Arc::clone(self);
        let wake = Arc::clone(&self.wake);
        tokio::spawn(async move {
            let mut failures = crate::periodic::OutageLog::new(
                "cannot run erasures yet; retrying",
                Some("erasures run again"),
            );
            loop {
                let outcome = erasures.run_pending().await;
                failures.record(&outcome);
                let _woken = tokio::time::timeout(PERIOD, wake.notified()).await;
            }
        })
    }
}
