//! The write path: validated events are placed in their partitions (campaign, UTC day, bucket
//! in force at the event's own time) and written partition by partition, several at once.
//! An answer is given only after every write was acknowledged, and, for impressions, after
//! they are counted in this process's live delivery counts and every closed slice they change
//! is marked (docs/DESIGN.md, "Open days from closed slices").

use crate::delivery::live::LiveDelivery;
use crate::domain::bucket::BucketCount;
use crate::domain::campaign::SettingsHistory;
use crate::domain::conversion::index::IndexEntry;
use crate::domain::event::{CampaignEvent, Click, Impression};
use crate::domain::ids::{AdvertiserId, CampaignKey, ImpressionId, UserId};
use crate::domain::owner::Owner;
use crate::domain::partition::EventPartition;
use crate::domain::sealing::SealingRule;
use crate::domain::slices::{Slice, SliceRule, slice_of};
use crate::domain::time::Day;
use crate::domain::view::ViewReportEvent;
use crate::erased::ErasedSubjects;
use crate::event_index::EventIndexer;
use crate::processes::ProcessRegistry;
use crate::query::aggregate::BillableWindow;
use crate::remembered::Remembered;
use crate::settings::SettingsCache;
use crate::store::{ClickRow, Store, StoreError};
use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

pub struct Ingestor {
    store: Arc<dyn Store>,
    settings: Arc<SettingsCache>,
    /// Partitions written at once for one request.
    write_concurrency: usize,
    /// Which events are late (their day may be sealed already).
    sealing: SealingRule,
    /// Campaign-days this process already wrote to the day index (de-duplicated in the
    /// process: one write per campaign and day, not one per request).
    indexed: Remembered<(Day, CampaignKey)>,
    /// This process's live billable-impression counts, for delivery against caps.
    delivery: Arc<LiveDelivery>,
    /// Where this process records the days it holds live counts of.
    registry: Arc<ProcessRegistry>,
    /// Which events are late for their slice, and the billable window that can carry an
    /// event's effect into the next slice.
    slices: SliceRule,
    window: BillableWindow,
    /// When this process last marked each slice for a view report (see [`Self::view_reports`]).
    /// The slices this process marked lately, and when ([`MARK_REUSE`]).
    recent_marks: std::sync::Mutex<HashMap<(CampaignKey, Slice), DateTime<Utc>>>,
    /// The event index attribution reads, fed with every stored impression and click (none in
    /// a standalone ingestor).
    indexer: Option<Arc<EventIndexer>>,
    /// Erased subjects, whose re-sent old impressions are dropped.
    erased: Option<Arc<ErasedSubjects>>,
}

/// A slice this process marked this recently is not marked again by its next write: a mark
/// keeps the slice's aggregate from answering for the margin after it (and kept pieces of it,
/// for the margin and this), so any aggregation or summary that could answer reads after this
/// write. A steady flow of late events or view reports then costs a mark a second per slice.
const MARK_REUSE: chrono::TimeDelta = chrono::TimeDelta::seconds(1);
/// Slices remembered as marked; past this, the memory starts over.
const MARKS_REMEMBERED: usize = 10_000;

/// The slices to mark, by campaign and UTC day.
type SliceMarks = BTreeMap<(CampaignKey, Day), BTreeSet<Slice>>;

fn add_marks(marks: &mut SliceMarks, campaign: CampaignKey, slices: Vec<Slice>) {
    for slice in slices {
        let day = Day::new(crate::domain::slices::slice_start(slice).date_naive());
        marks.entry((campaign, day)).or_default().insert(slice);
    }
}

/// Campaign-days remembered as indexed; past this, the memory starts over.
const INDEXED_DAYS_REMEMBERED: usize = 100_000;

impl Ingestor {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        settings: Arc<SettingsCache>,
        write_concurrency: usize,
        sealing: SealingRule,
        delivery: Arc<LiveDelivery>,
        registry: Arc<ProcessRegistry>,
        (slices, window): (SliceRule, BillableWindow),
    ) -> Self {
        // Other processes write a store without a change log of its own: summaries learn of
        // writes that reach back to what they kept from marks alone.
        let slices = match store.changes() {
            Some(_) => slices,
            None => slices.marking_settled_pieces(),
        };
        Self {
            store,
            settings,
            write_concurrency: write_concurrency.max(1),
            sealing,
            indexed: Remembered::new(INDEXED_DAYS_REMEMBERED),
            delivery,
            registry,
            slices,
            window,
            recent_marks: std::sync::Mutex::new(HashMap::new()),
            indexer: None,
            erased: None,
        }
    }

    /// Drops the impressions of erased subjects timed before their erasures (a re-sent old
    /// batch), as docs/API.md promises.
    pub(crate) fn with_erased(mut self, erased: Arc<ErasedSubjects>) -> Self {
        self.erased = Some(erased);
        self
    }

    /// Feeds `indexer` with every impression and click this ingestor stores.
    pub(crate) fn with_indexer(mut self, indexer: Arc<EventIndexer>) -> Self {
        self.indexer = Some(indexer);
        self
    }

    /// Refuses a write while the event index is too far behind: what is stored must be
    /// indexed, and what waits to be is held in memory. The HTTP layer asks before it reads a
    /// request's body, so a server pushing back spends nothing on the batches it refuses.
    pub(crate) fn check_index_room(&self) -> Result<(), StoreError> {
        match &self.indexer {
            Some(indexer) if !indexer.has_room() => Err(StoreError::Unavailable {
                context: "the event index is behind; retry shortly".into(),
                source: None,
            }),
            _ => Ok(()),
        }
    }

    /// Marks the campaign-days of `events` before they are written: with an indexer, this
    /// process holds their index entries in memory until the next flush, and a successor
    /// indexes the days again should it vanish first.
    async fn mark_for_index<E: CampaignEvent>(
        &self,
        events: &[E],
        already: &BTreeSet<(CampaignKey, Day)>,
    ) -> Result<BTreeSet<(CampaignKey, Day)>, StoreError> {
        if self.indexer.is_none() {
            return Ok(BTreeSet::new());
        }
        let days: BTreeSet<(CampaignKey, Day)> = events
            .iter()
            .map(|event| (event.campaign(), CampaignEvent::timestamp(event).utc_day()))
            .filter(|day| !already.contains(day))
            .collect();
        for (campaign, day) in &days {
            self.registry
                .mark(&Owner::Campaign(*campaign), *day)
                .await?;
        }
        Ok(days)
    }

    /// An ingestor outside a server (benchmarks, tools): its live delivery counts stay in
    /// its memory, under a process id of its own that never reports.
    pub fn standalone(
        store: Arc<dyn Store>,
        settings: Arc<SettingsCache>,
        write_concurrency: usize,
        sealing: SealingRule,
    ) -> Self {
        let registry = Arc::new(ProcessRegistry::new(
            Arc::clone(&store) as Arc<dyn crate::store::ProcessStore>
        ));
        let delivery = Arc::new(LiveDelivery::new(
            registry.id(),
            crate::query::aggregate::BillableWindow::DEFAULT,
            sealing,
        ));
        Self::new(
            store,
            settings,
            write_concurrency,
            sealing,
            delivery,
            registry,
            (SliceRule::default(), BillableWindow::DEFAULT),
        )
    }

    /// Whether `user`'s event of `advertiser` timed `at` belongs to an erasure: stored, it
    /// would bring back what was erased (a re-sent old event).
    pub(crate) fn is_erased(
        &self,
        user: UserId,
        advertiser: AdvertiserId,
        at: DateTime<Utc>,
    ) -> bool {
        self.erased
            .as_ref()
            .is_some_and(|erased| erased.drops(user, advertiser, at))
    }

    /// Whether a click or view report of `impression` of `advertiser` names an impression an
    /// erasure removed (ingestion drops it).
    pub(crate) fn is_of_erased_impression(
        &self,
        advertiser: AdvertiserId,
        impression: ImpressionId,
    ) -> bool {
        self.erased
            .as_ref()
            .is_some_and(|erased| erased.drops_of_impression(advertiser, impression))
    }

    /// Holds the index's `indexed_through` back until the call ends: what it checks against
    /// the erasures now, it stores later, and an erasure (or a decision) waiting for the index
    /// must find it.
    fn begin_storing(&self) -> Option<crate::event_index::Storing> {
        self.indexer.as_ref().map(EventIndexer::begin_storing)
    }

    /// Drops the clicks or view reports (`of`: the advertiser and impression each names) of
    /// impressions an erasure found: they name no user, and nothing could find one stored
    /// now to erase it.
    fn drop_of_erased_impressions<E>(
        &self,
        events: &mut Vec<E>,
        of: impl Fn(&E) -> (AdvertiserId, ImpressionId),
    ) {
        let Some(erased) = &self.erased else {
            return;
        };
        let before = events.len();
        events.retain(|event| {
            let (advertiser, impression) = of(event);
            !erased.drops_of_impression(advertiser, impression)
        });
        let dropped = before - events.len();
        if dropped > 0 {
            metrics::counter!("adevents_erased_events_dropped_total").increment(dropped as u64);
        }
    }

    pub async fn impressions(&self, mut events: Vec<Impression>) -> Result<(), StoreError> {
        self.check_index_room()?;
        let _storing = self.begin_storing();
        if let Some(erased) = &self.erased {
            let before = events.len();
            events.retain(|event| {
                !erased.drops(
                    event.user_id,
                    event.campaign.advertiser_id,
                    event.timestamp.instant(),
                )
            });
            let dropped = before - events.len();
            if dropped > 0 {
                metrics::counter!("adevents_erased_events_dropped_total").increment(dropped as u64);
            }
        }
        let countable = self.delivery.countable(&events);
        let counted_days: BTreeSet<(CampaignKey, Day)> = countable
            .iter()
            .map(|counted| (counted.campaign, counted.day))
            .collect();
        // Before anything is acknowledged, the store learns that this process is about to
        // hold live counts of these days (a successor repairs them should it vanish).
        for (campaign, day) in &counted_days {
            self.registry
                .mark(&Owner::Campaign(*campaign), *day)
                .await?;
        }
        let indexed_days = self.mark_for_index(&events, &counted_days).await?;
        let partitions = self.partition(events).await?;
        let late = self.index_days(&partitions).await?;
        let times: Vec<(CampaignKey, DateTime<Utc>)> = partitions
            .iter()
            .flat_map(|(partition, events)| {
                events
                    .iter()
                    .map(|event| (partition.campaign, event.timestamp.instant()))
            })
            .collect();
        let indexed: Vec<IndexEntry> = match &self.indexer {
            Some(_) => partitions
                .values()
                .flatten()
                .flat_map(IndexEntry::of_impression)
                .collect(),
            None => Vec::new(),
        };
        let duplicate_copies = self
            .write_all(partitions, |store, partition, events| async move {
                let copies = store.write_impressions(&partition, &events).await?;
                Ok((partition.campaign, copies))
            })
            .await?;
        // Counted once stored, before the answer: delivery includes every acknowledged one.
        self.delivery.count(&countable);
        if let Some(indexer) = &self.indexer {
            indexer.stored(indexed);
        }
        for (campaign, day) in counted_days.iter().chain(&indexed_days) {
            self.registry.counted(&Owner::Campaign(*campaign), *day);
        }
        // Late by the time the write is done: a slice aggregated before that could have
        // missed the event, one aggregated after it (less the margin) saw it.
        let now = Utc::now();
        let mut marks = SliceMarks::new();
        // Every copy of an id the store found stored with more than one timestamp: read raw
        // together, they count once at the earliest, at once.
        let copies = duplicate_copies.into_iter().flat_map(|(campaign, copies)| {
            copies.into_iter().map(move |at| (campaign, at.instant()))
        });
        for (campaign, at) in times.into_iter().chain(copies) {
            let late = self.slices.late_slices(at, self.window.length(), now);
            add_marks(&mut marks, campaign, late);
        }
        self.mark_slices(marks).await?;
        self.mark_late(late).await
    }

    /// Stores view reports in their impressions' partitions. A report for a closed slice (or a
    /// settled piece, by [`SliceRule::marks`]) marks it, and one for a day past its grace marks
    /// the day, as a late impression would: the
    /// join is made when a slice, a seal or a raw read counts the day, so whatever aggregated
    /// the impression before must count again.
    pub(crate) async fn view_reports(
        &self,
        mut reports: Vec<ViewReportEvent>,
    ) -> Result<(), StoreError> {
        // Not indexed, but found through their impressions: an erasure waits for them too.
        let _storing = self.begin_storing();
        self.drop_of_erased_impressions(&mut reports, |report| {
            (report.campaign.advertiser_id, report.impression_id)
        });
        if reports.is_empty() {
            return Ok(());
        }
        let partitions = self.partition(reports).await?;
        let late = self.index_days(&partitions).await?;
        let times: Vec<(CampaignKey, DateTime<Utc>)> = partitions
            .iter()
            .flat_map(|(partition, reports)| {
                reports
                    .iter()
                    .map(|report| (partition.campaign, report.impression_time.instant()))
            })
            .collect();
        self.write_all(partitions, |store, partition, reports| async move {
            store.write_view_reports(&partition, &reports).await
        })
        .await?;
        let now = Utc::now();
        let mut marks = SliceMarks::new();
        for (campaign, at) in times {
            if self.slices.marks(at, now) {
                add_marks(&mut marks, campaign, vec![slice_of(at)]);
            }
        }
        self.mark_slices(marks).await?;
        self.mark_late(late).await
    }

    /// Marks what counting decided conversions changes, as late events would, once they are
    /// written where they are counted: each credited campaign-day is indexed (the sealer
    /// finds it), a closed slice (or a settled piece's) is marked, and a day past its grace is
    /// marked late.
    pub(crate) async fn conversions_counted(
        &self,
        credited: &[(CampaignKey, DateTime<Utc>)],
    ) -> Result<(), StoreError> {
        let days = credited
            .iter()
            .map(|(campaign, at)| (*campaign, Day::new(at.date_naive())))
            .collect();
        let late = self.index_campaign_days(days).await?;
        let now = Utc::now();
        let mut marks = SliceMarks::new();
        for (campaign, at) in credited {
            if self.slices.marks(*at, now) {
                add_marks(&mut marks, *campaign, vec![slice_of(*at)]);
            }
        }
        self.mark_slices(marks).await?;
        self.mark_late(late).await
    }

    /// Marks what removing stored events (an erasure) changes: each closed slice (or settled
    /// piece's) that counted one, as a late event of that time would, so the slice is read
    /// raw until aggregated again without it.
    pub(crate) async fn events_removed(
        &self,
        removed: &[(CampaignKey, DateTime<Utc>)],
    ) -> Result<(), StoreError> {
        let now = Utc::now();
        let mut marks = SliceMarks::new();
        for (campaign, at) in removed {
            let late = self.slices.late_slices(*at, self.window.length(), now);
            add_marks(&mut marks, *campaign, late);
        }
        self.mark_slices(marks).await
    }

    /// Marks the slices a write changed after they closed (or after the piece it reached back
    /// to settled, by [`SliceRule::marks`]).
    async fn mark_slices(&self, mut marks: SliceMarks) -> Result<(), StoreError> {
        let now = Utc::now();
        {
            let mut recent = self.recent_marks();
            if recent.len() >= MARKS_REMEMBERED {
                recent.clear();
            }
            for ((campaign, _), slices) in marks.iter_mut() {
                slices.retain(|slice| {
                    recent
                        .get(&(*campaign, *slice))
                        .is_none_or(|marked| now - *marked >= MARK_REUSE)
                });
            }
            marks.retain(|_, slices| !slices.is_empty());
        }
        let marked: Vec<(CampaignKey, Slice)> = marks
            .iter()
            .flat_map(|((campaign, _), slices)| slices.iter().map(|slice| (*campaign, *slice)))
            .collect();
        let store = &self.store;
        stream::iter(marks)
            .map(|((campaign, day), slices)| async move {
                let slices: Vec<Slice> = slices.into_iter().collect();
                store.mark_slices(campaign, day, &slices, now).await
            })
            .buffer_unordered(self.write_concurrency)
            .try_collect::<()>()
            .await?;
        // Remembered once written, at the time the marks carry (set before they were written).
        self.recent_marks()
            .extend(marked.into_iter().map(|key| (key, now)));
        Ok(())
    }

    fn recent_marks(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(CampaignKey, Slice), DateTime<Utc>>> {
        self.recent_marks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub async fn clicks(&self, mut events: Vec<Click>) -> Result<(), StoreError> {
        self.check_index_room()?;
        let _storing = self.begin_storing();
        self.drop_of_erased_impressions(&mut events, |click| {
            (click.campaign.advertiser_id, click.impression_id)
        });
        if events.is_empty() {
            return Ok(());
        }
        let indexed_days = self.mark_for_index(&events, &BTreeSet::new()).await?;
        let indexed: Vec<IndexEntry> = match &self.indexer {
            Some(_) => events.iter().map(IndexEntry::of_click).collect(),
            None => Vec::new(),
        };
        let partitions = self.partition(events).await?;
        let mut late = self.index_days(&partitions).await?;
        let clicked: Vec<ClickWritten> = partitions
            .iter()
            .flat_map(|(partition, clicks)| {
                clicks.iter().map(|click| ClickWritten {
                    campaign: partition.campaign,
                    impression_id: click.impression_id,
                    at: click.timestamp.instant(),
                    valid: click.invalid.is_none(),
                })
            })
            .collect();
        self.write_all(partitions, |store, partition, events| async move {
            store.write_clicks(&partition, &events).await
        })
        .await?;
        if let Some(indexer) = &self.indexer {
            indexer.stored(indexed);
        }
        for (campaign, day) in &indexed_days {
            self.registry.counted(&Owner::Campaign(*campaign), *day);
        }
        let now = Utc::now();
        let mut marks = SliceMarks::new();
        // By impression: a batch of many clicks of one impression reads its clicks once.
        let mut looked_up: BTreeMap<(CampaignKey, ImpressionId), Vec<(ClickWritten, bool)>> =
            BTreeMap::new();
        for click in clicked {
            let late_slice = self.slices.marks(click.at, now);
            if late_slice {
                add_marks(&mut marks, click.campaign, vec![click.slice()]);
            }
            // A late click may have become its impression's first (whatever the two graces,
            // its slice or its day is closed); a valid click may make an invalid first click
            // count as valid, wherever that click lies: only the stored clicks tell.
            let late = late_slice || self.sealing.is_late(click.day(), now);
            if late || click.valid {
                looked_up
                    .entry((click.campaign, click.impression_id))
                    .or_default()
                    .push((click, late));
            }
        }
        // Read after the write, so of two clicks written at once the later read sees both.
        let store = &self.store;
        let moved: Vec<Vec<(CampaignKey, DateTime<Utc>)>> = stream::iter(looked_up)
            .map(|((campaign, impression_id), written)| async move {
                let clicks = store.clicks_of(campaign, impression_id).await?;
                Ok::<_, StoreError>(
                    written
                        .iter()
                        .flat_map(|(click, late)| click.moved_counts(&clicks, *late))
                        .collect(),
                )
            })
            .buffer_unordered(self.write_concurrency)
            .try_collect()
            .await?;
        for (campaign, at) in moved.into_iter().flatten() {
            if self.slices.marks(at, now) {
                add_marks(&mut marks, campaign, vec![slice_of(at)]);
            }
            let day = Day::new(at.date_naive());
            if self.sealing.is_late(day, now) {
                late.insert((campaign, day));
            }
        }
        self.mark_slices(marks).await?;
        self.mark_late(late).await
    }

    /// Before any event is written, indexes each new campaign-day (the sealer finds days by
    /// it); returns the days the events make late: those past their grace period, by the
    /// events' age, never by checking a seal.
    async fn index_days<E>(
        &self,
        partitions: &BTreeMap<EventPartition, Vec<E>>,
    ) -> Result<BTreeSet<(CampaignKey, Day)>, StoreError> {
        let days: BTreeSet<(CampaignKey, Day)> = partitions
            .keys()
            .map(|partition| (partition.campaign, partition.day))
            .collect();
        self.index_campaign_days(days).await
    }

    /// [`Self::index_days`] of campaign-days named directly.
    async fn index_campaign_days(
        &self,
        days: BTreeSet<(CampaignKey, Day)>,
    ) -> Result<BTreeSet<(CampaignKey, Day)>, StoreError> {
        let now = Utc::now();
        let new_days: Vec<(CampaignKey, Day)> = days
            .iter()
            .filter(|(campaign, day)| !self.indexed.contains(&(*day, *campaign)))
            .copied()
            .collect();
        let store = &self.store;
        stream::iter(new_days.clone())
            .map(|(campaign, day)| async move { store.mark_day(&Owner::Campaign(campaign), day).await })
            .buffer_unordered(self.write_concurrency)
            .try_collect::<()>()
            .await?;
        self.indexed
            .remember(new_days.into_iter().map(|(campaign, day)| (day, campaign)));
        Ok(days
            .into_iter()
            .filter(|(_, day)| self.sealing.is_late(*day, now))
            .collect())
    }

    /// After the events are written, marks their late days with the time of the mark: a seal
    /// whose read started after it saw the events; any other seal is not taken as current
    /// (see [`crate::domain::sealing::SealState::is_current`]). Should this fail, the client retries the request (it got
    /// no 2xx) and the mark is written then.
    async fn mark_late(&self, late: BTreeSet<(CampaignKey, Day)>) -> Result<(), StoreError> {
        let now = Utc::now();
        let store = &self.store;
        stream::iter(late)
            .map(|(campaign, day)| async move {
                store.mark_late(&Owner::Campaign(campaign), day, now).await
            })
            .buffer_unordered(self.write_concurrency)
            .try_collect::<()>()
            .await
    }

    /// Groups events by the partition each belongs to.
    async fn partition<E: CampaignEvent>(
        &self,
        events: Vec<E>,
    ) -> Result<BTreeMap<EventPartition, Vec<E>>, StoreError> {
        let histories = self.histories(&events).await?;
        let mut partitions: BTreeMap<EventPartition, Vec<E>> = BTreeMap::new();
        for event in events {
            let campaign = event.campaign();
            let timestamp = event.timestamp();
            let buckets = histories
                .get(&campaign)
                .map_or(BucketCount::ONE, |history| {
                    history.buckets_at(timestamp.instant())
                });
            let partition = EventPartition {
                campaign,
                day: timestamp.utc_day(),
                bucket: buckets.bucket_of(event.bucket_key().as_uuid()),
            };
            partitions.entry(partition).or_default().push(event);
        }
        Ok(partitions)
    }

    /// The settings of every campaign in `events`, fetched concurrently: a batch may name
    /// many campaigns the cache has not seen.
    async fn histories<E: CampaignEvent>(
        &self,
        events: &[E],
    ) -> Result<HashMap<CampaignKey, Arc<SettingsHistory>>, StoreError> {
        let campaigns: HashSet<CampaignKey> = events.iter().map(CampaignEvent::campaign).collect();
        stream::iter(campaigns)
            .map(|campaign| async move {
                let history = self.settings.history(&Owner::Campaign(campaign)).await?;
                Ok((campaign, history))
            })
            .buffer_unordered(self.write_concurrency)
            .try_collect()
            .await
    }

    /// Writes each partition's events with `write`, a bounded number at once; returns what
    /// each write returned.
    async fn write_all<E, T, W, F>(
        &self,
        partitions: BTreeMap<EventPartition, Vec<E>>,
        write: W,
    ) -> Result<Vec<T>, StoreError>
    where
        W: Fn(Arc<dyn Store>, EventPartition, Vec<E>) -> F,
        F: std::future::Future<Output = Result<T, StoreError>>,
    {
        stream::iter(partitions)
            .map(|(partition, events)| write(Arc::clone(&self.store), partition, events))
            .buffer_unordered(self.write_concurrency)
            .try_collect()
            .await
    }
}

/// A click just written, as far as the marks it calls for go.
struct ClickWritten {
    campaign: CampaignKey,
    impression_id: ImpressionId,
    at: DateTime<Utc>,
    valid: bool,
}

impl ClickWritten {
    fn slice(&self) -> Slice {
        slice_of(self.at)
    }

    fn day(&self) -> Day {
        Day::new(self.at.date_naive())
    }

    /// The times of the stored clicks (`clicks`, the impression's, oldest first) whose counts
    /// this click changed: when it is first and `late` (its slice or day closed), every other
    /// click, since any of them may have been first before (clicks written at once by other
    /// processes among them); and the first click when that one is invalid and this one
    /// valid, as the click then counts as valid. Taken whenever the count may have moved: a
    /// needless mark costs a read raw until aggregated or sealed again, a missing one a wrong
    /// count.
    fn moved_counts(&self, clicks: &[ClickRow], late: bool) -> Vec<(CampaignKey, DateTime<Utc>)> {
        let Some(first) = clicks.first() else {
            return Vec::new();
        };
        let first_at = first.timestamp.instant();
        if first_at == self.at {
            if !late {
                return Vec::new();
            }
            return clicks
                .iter()
                .map(|click| click.timestamp.instant())
                .filter(|at| *at != self.at)
                .map(|at| (self.campaign, at))
                .collect();
        }
        if self.valid && first.invalid.is_some() {
            return vec![(self.campaign, first_at)];
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{AdId, AdvertiserId, CampaignId};
    use crate::domain::time::EventTime;
    use crate::domain::traffic::InvalidReason;
    use uuid::Uuid;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().expect("an instant")
    }

    fn campaign() -> CampaignKey {
        CampaignKey {
            advertiser_id: AdvertiserId::new(Uuid::from_u128(1)),
            campaign_id: CampaignId::new(Uuid::from_u128(2)),
        }
    }

    fn stored(time: &str, invalid: bool) -> ClickRow {
        ClickRow {
            impression_id: ImpressionId::new(Uuid::from_u128(3)),
            ad_id: AdId::new(Uuid::from_u128(4)),
            timestamp: EventTime::from_stored(at(time)),
            invalid: invalid.then_some(InvalidReason::BotUserAgent),
        }
    }

    fn written(time: &str, valid: bool) -> ClickWritten {
        ClickWritten {
            campaign: campaign(),
            impression_id: ImpressionId::new(Uuid::from_u128(3)),
            at: at(time),
            valid,
        }
    }

    #[test]
    fn a_valid_click_moves_an_invalid_first_clicks_count_and_nothing_else() {
        let first_invalid = [
            stored("2026-11-27T10:00:00Z", true),
            stored("2026-11-29T10:00:00Z", false),
        ];
        let click = written("2026-11-29T10:00:00Z", true);
        assert_eq!(
            click.moved_counts(&first_invalid, false),
            [(campaign(), at("2026-11-27T10:00:00Z"))]
        );
        let first_valid = [
            stored("2026-11-27T10:00:00Z", false),
            stored("2026-11-29T10:00:00Z", false),
        ];
        assert!(click.moved_counts(&first_valid, false).is_empty());
        let invalid_click = written("2026-11-29T10:00:00Z", false);
        assert!(invalid_click.moved_counts(&first_invalid, true).is_empty());
    }

    #[test]
    fn a_late_first_click_moves_the_clicks_it_displaced_and_a_timely_one_nothing() {
        let clicks = [
            stored("2026-11-29T09:00:00Z", false),
            stored("2026-11-29T10:00:00Z", false),
        ];
        let click = written("2026-11-29T09:00:00Z", true);
        assert_eq!(
            click.moved_counts(&clicks, true),
            [(campaign(), at("2026-11-29T10:00:00Z"))]
        );
        assert!(click.moved_counts(&clicks, false).is_empty());
    }
}
