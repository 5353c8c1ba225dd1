//! The storage contract the service is written against, and its implementations.
//!
//! Everything above this module (HTTP, ingestion, query planning and aggregation) holds an
//! `Arc<dyn Store>` and speaks in domain terms; no driver type crosses this boundary. The
//! contract is partition-level: write rows into one partition, read one partition's rows.
//! Which partitions, how many at once, and what the rows add up to is decided above it, once,
//! for every store. The store decides which of its failures are worth a retry
//! ([`StoreError::is_retryable`]).
//!
//! It is split by subsystem, so each consumer can ask for only the part it uses:
//! [`EventStore`] (impressions and clicks), [`VisitStore`] (beacons and live sketches),
//! [`SettingsStore`], [`SealStore`] (the day index and seal states), [`RollupStore`] (sealed
//! days), [`AccessStore`] (API keys and registered sites) and [`ProcessStore`] (the server
//! processes sharing the store, and what each may leave unsaved) and [`DeliveryStore`]
//! (billable impressions counted for caps) and [`SliceStore`] (the closed slices of days not yet
//! sealed) and [`AddressStore`] (stored addresses rewritten under a privacy policy). Campaigns
//! and sites share one method wherever they follow the same rule, keyed by [`Owner`].
//! [`Store`] is their sum.

pub mod cassandra;
mod changes;
pub mod embedded;
mod error;
pub(crate) mod instrumented;
mod rows;

pub(crate) use crate::domain::sealing::SealState;
pub use changes::ChangeLog;
pub(crate) use error::StoreError;
pub(crate) use rows::{
    ClickRow, CopyRow, FeatureVisits, ImpressionPage, ImpressionSummaryRow, LiveCountRow,
    OpenDayParts, OpenDayRows, PageCursor, ReachLevel, Rollup, RollupPart, RollupReach,
    RollupSlice, SiteRollup, SketchBatch, SketchPartition, SketchRow, SliceAggregate,
    SliceAggregateRow, SliceVisits, VisitRow, WindowPublication,
};

use crate::domain::access::{ApiKey, KeyId, SiteProfile};
use crate::domain::address::StoreIp;
use crate::domain::beacon::{Beacon, Guid, SiteId, VisitPartition};
use crate::domain::campaign::{CampaignSettings, SettingsHistory};
use crate::domain::conversion::index::{IndexEntry, IndexKey, Week};
use crate::domain::conversion::{ConversionId, DecidedConversion, ReceivedConversion};
use crate::domain::delivery::DaySlices;
use crate::domain::event::{Click, Impression};
use crate::domain::ids::{AdvertiserId, CampaignKey, ImpressionId, UserId};
use crate::domain::owner::{Listing, Owner, OwnerDays, OwnerKind};
use crate::domain::partition::EventPartition;
use crate::domain::privacy::{
    ErasedCounts, ErasedSubject, ErasureId, ErasureRecord, PrivacyKey, SubjectHash, SubjectWeek,
    VisitorDay,
};
use crate::domain::process::{ProcessId, ProcessReport, UnflushedDay};
use crate::domain::sealing::LateMark;
use crate::domain::slices::{Slice, Span};
use crate::domain::tag::{TagSecret, TagSecretId};
use crate::domain::time::{Day, EventTime};
use crate::domain::traffic::UserAgent;
use crate::domain::view::{StoredReport, ViewReportEvent};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// Impressions and clicks: the raw event tables, their thin copies and the click index.
#[async_trait]
pub trait EventStore: Send + Sync {
    /// Writes impressions that all belong to `partition`: the full row and the thin summary
    /// row of each, and each copy's entry in the copies index. Idempotent: writing the same
    /// impression again overwrites it. Returns the times of every copy of the written ids
    /// that the partition holds with more than one timestamp, as far as the store learns them
    /// while writing: the embedded store merges each id's copies row in its commit thread and
    /// knows at once; Cassandra does not read them back and returns none (the slice
    /// aggregator finds them there).
    async fn write_impressions(
        &self,
        partition: &EventPartition,
        impressions: &[Impression],
    ) -> Result<Vec<EventTime>, StoreError>;

    /// Writes clicks that all belong to `partition`, and each one into its impression's click
    /// index. Idempotent.
    async fn write_clicks(
        &self,
        partition: &EventPartition,
        clicks: &[Click],
    ) -> Result<(), StoreError>;

    /// Every impression of one partition, thin form, in no promised order.
    async fn read_impression_summaries(
        &self,
        partition: &EventPartition,
    ) -> Result<Vec<ImpressionSummaryRow>, StoreError>;

    /// One page (a few thousand rows) of a partition's full impressions, oldest first.
    /// `cursor` is the previous page's `next`, `None` for the first page.
    async fn read_impression_page(
        &self,
        partition: &EventPartition,
        cursor: Option<PageCursor>,
    ) -> Result<ImpressionPage, StoreError>;

    /// The newest `limit` full impressions of one partition, newest first.
    async fn read_newest_impressions(
        &self,
        partition: &EventPartition,
        limit: usize,
    ) -> Result<Vec<Impression>, StoreError>;

    /// Every click of one partition, in no promised order.
    async fn read_clicks(&self, partition: &EventPartition) -> Result<Vec<ClickRow>, StoreError>;

    /// The earliest click ever stored for an impression.
    async fn first_click(
        &self,
        campaign: CampaignKey,
        impression_id: ImpressionId,
    ) -> Result<Option<ClickRow>, StoreError>;
}

/// Beacons and the live unique-visitor sketches counted from them.
#[async_trait]
pub trait VisitStore: Send + Sync {
    /// Writes beacons that all belong to `partition`, and `visitors`' entries in the visitor
    /// index (docs/DESIGN.md, "Personal data"), durable no later than the beacons: in the
    /// same commit on the embedded store, before them on Cassandra, so a stored beacon is
    /// never out of an erasure's reach. Idempotent: a beacon is its site, guid, timestamp and
    /// features, and re-writing one overwrites it.
    async fn write_visits(
        &self,
        partition: &VisitPartition,
        visits: &[Beacon],
        visitors: &[VisitorDay],
    ) -> Result<(), StoreError>;

    /// Every beacon of one partition, in no promised order, without its user agent.
    async fn read_visits(&self, partition: &VisitPartition) -> Result<Vec<VisitRow>, StoreError>;

    /// The same beacons with the user agent stored with each: for a subject access, which
    /// gives back every stored field. Counting reads [`read_visits`](Self::read_visits), which
    /// leaves that widest column out.
    async fn read_visits_with_agents(
        &self,
        partition: &VisitPartition,
    ) -> Result<Vec<VisitRow>, StoreError>;

    /// Writes writers' absolute sketch states, each into its sketch partition: the live
    /// flusher writes thousands of one-row partitions at a time, so they travel together (one
    /// commit on the embedded store, concurrent statements on Cassandra).
    async fn write_sketches(&self, batches: &[SketchBatch]) -> Result<(), StoreError>;

    /// Every writer's sketch of every hour of one sketch partition.
    async fn read_sketches(
        &self,
        partition: &SketchPartition,
    ) -> Result<Vec<SketchRow>, StoreError>;
}

/// Billable impressions for delivery against caps: each writer's live counts of the UTC days
/// it took impressions for (absolute rows, one per writer and day, added up by readers) and
/// sealed days' totals written by the sealer. A campaign's rows are read whole: their number
/// does not grow with its age (live rows are deleted as their days are sealed, and sealed
/// totals are kept a month to a row on Cassandra).
#[async_trait]
pub trait DeliveryStore: Send + Sync {
    /// Writes writers' absolute counts, replacing each writer's earlier row of the same day.
    async fn write_live_counts(&self, rows: &[LiveCountRow]) -> Result<(), StoreError>;

    /// Every writer's live row of every day of `campaign` still kept.
    async fn read_live_counts(
        &self,
        campaign: CampaignKey,
    ) -> Result<Vec<LiveCountRow>, StoreError>;

    /// Drops a day's live rows once its sealed total is stored.
    async fn delete_live_counts(&self, campaign: CampaignKey, day: Day) -> Result<(), StoreError>;

    /// Stores a sealed day's billable impressions, replacing any earlier total of the day, and
    /// a new version of the campaign's sealed totals, both at once.
    async fn write_sealed_counts(
        &self,
        campaign: CampaignKey,
        day: Day,
        slices: &DaySlices,
    ) -> Result<(), StoreError>;

    /// Every sealed day's billable impressions of `campaign`, with their version.
    async fn read_sealed_counts(&self, campaign: CampaignKey) -> Result<SealedCounts, StoreError>;

    /// The version of the campaign's sealed totals: one small read.
    async fn sealed_version(&self, campaign: CampaignKey) -> Result<Option<Uuid>, StoreError>;

    /// Stores writers' publications of the users they counted in billable windows (kept about
    /// a day: only windows of days not yet sealed are compared).
    async fn publish_windows(&self, publications: &[WindowPublication]) -> Result<(), StoreError>;

    /// Every publication of one campaign's window, oldest first (by time, then writer).
    async fn window_publications(
        &self,
        campaign: CampaignKey,
        window_start: DateTime<Utc>,
    ) -> Result<Vec<WindowPublication>, StoreError>;
}

/// A campaign's sealed days' billable impressions, as of one version.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SealedCounts {
    /// Changed by every seal; `None` before the first (or for seals of an older release).
    pub(crate) version: Option<Uuid>,
    pub(crate) days: Vec<(Day, DaySlices)>,
}

/// Campaign and site configuration over time.
#[async_trait]
pub trait SettingsStore: Send + Sync {
    /// Every configuration the owner ever had (empty when never configured).
    async fn settings(&self, owner: &Owner) -> Result<SettingsHistory, StoreError>;

    /// Records a configuration taking effect at `settings.effective_from`; one at the same
    /// instant is replaced. A site keeps only `buckets` and `effective_from`.
    async fn put_settings(
        &self,
        owner: &Owner,
        settings: &CampaignSettings,
    ) -> Result<(), StoreError>;
}

/// Which owners received events on which UTC day, and whether each owner-day's rollup may
/// answer for it (see [`SealState`]).
#[async_trait]
pub trait SealStore: Send + Sync {
    /// Records that `owner` received events for UTC `day` (the day index). Idempotent.
    async fn mark_day(&self, owner: &Owner, day: Day) -> Result<(), StoreError>;

    /// The owners of one kind that received events for UTC `day`.
    async fn owners_of_day(&self, kind: OwnerKind, day: Day) -> Result<Vec<Owner>, StoreError>;

    /// Every owner of a listing with the first and last days [`mark_day`](Self::mark_day)
    /// recorded for it (kept beside the day index by the same call).
    async fn listed_owners(&self, listing: Listing) -> Result<Vec<OwnerDays>, StoreError>;

    /// Records that an event older than the grace period arrived `at` for an owner-day, so
    /// its rollup stops answering until the day is sealed again.
    async fn mark_late(&self, owner: &Owner, day: Day, at: DateTime<Utc>)
    -> Result<(), StoreError>;

    /// The owner-day's seal and late mark.
    async fn seal_state(&self, owner: &Owner, day: Day) -> Result<SealState, StoreError>;

    /// The late index: every owner-day [`mark_late`](Self::mark_late) marked on UTC day `since`
    /// or later, each once with its latest mark (marks older than ten days may be gone).
    async fn late_marks(&self, since: Day) -> Result<Vec<LateMark>, StoreError>;
}

/// Sealed days: what a campaign-day or a site-day adds up to, written once by the sealer.
/// Each write stores its rows first and then marks the day sealed from `read_started`, so a
/// half-written rollup is never taken for a sealed one; each is idempotent.
#[async_trait]
pub trait RollupStore: Send + Sync {
    /// Stores a campaign-day's rollup, replacing any earlier one.
    async fn write_campaign_rollup(
        &self,
        campaign: CampaignKey,
        day: Day,
        rollup: &Rollup,
        read_started: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// A sealed campaign-day's slices and its users sketches of the `reach` levels.
    async fn read_campaign_rollup(
        &self,
        campaign: CampaignKey,
        day: Day,
        reach: &[ReachLevel],
    ) -> Result<Rollup, StoreError>;

    /// Stores part of a site-day's rollup, one entry per feature combination, from a read
    /// that started at `read_started`; its last part marks the day sealed.
    async fn write_site_rollup(
        &self,
        site: &SiteId,
        day: Day,
        combinations: &[(String, SiteRollup)],
        read_started: DateTime<Utc>,
        part: RollupPart,
    ) -> Result<(), StoreError>;

    /// Stores a sealed site-day's visits per feature value (the most visited values of each
    /// feature), before its rollup marks it sealed.
    async fn write_site_features(
        &self,
        site: &SiteId,
        day: Day,
        values: &[FeatureVisits],
    ) -> Result<(), StoreError>;

    /// A sealed site-day's visits per feature value.
    async fn read_site_features(
        &self,
        site: &SiteId,
        day: Day,
    ) -> Result<Vec<FeatureVisits>, StoreError>;

    /// One feature combination of a sealed site-day (`partition` names site, day and
    /// combination).
    async fn read_site_rollup(&self, partition: &SketchPartition)
    -> Result<SiteRollup, StoreError>;
}

/// API keys, registered sites and tag secrets: few rows, each read whole by every server process into its
/// memory (an unknown key or site costs no read), refreshed within the settings cache lifetime.
#[async_trait]
pub trait AccessStore: Send + Sync {
    /// Every key of the deployment (hashes, never secrets).
    async fn keys(&self) -> Result<Vec<ApiKey>, StoreError>;

    /// Records a key; one with the same id is replaced.
    async fn put_key(&self, key: &ApiKey) -> Result<(), StoreError>;

    /// Removes a key: it stops working on every process within the cache lifetime.
    async fn delete_key(&self, id: KeyId) -> Result<(), StoreError>;

    /// Every registered site.
    async fn sites(&self) -> Result<Vec<SiteProfile>, StoreError>;

    /// Registers a site, or replaces its profile.
    async fn put_site(&self, site: &SiteProfile) -> Result<(), StoreError>;

    /// Whether this store ever had its bootstrap admin key (embedded store: once per folder).
    async fn admin_bootstrapped(&self) -> Result<bool, StoreError>;

    /// Records that the bootstrap admin key was made.
    async fn mark_admin_bootstrapped(&self) -> Result<(), StoreError>;

    /// Every advertiser's tag secrets (the secrets themselves: verifying a signature needs
    /// them).
    async fn tag_secrets(&self) -> Result<Vec<TagSecret>, StoreError>;

    /// Records a tag secret.
    async fn put_tag_secret(&self, secret: &TagSecret) -> Result<(), StoreError>;

    /// Removes a tag secret: URLs it signed stop counting within the cache lifetime.
    async fn delete_tag_secret(&self, id: TagSecretId) -> Result<(), StoreError>;
}

/// The server processes sharing the store: each reports every second, and records each
/// owner-day it holds unsaved live state for before it counts an event of it, so that the
/// state of a process that went silent can be repaired from the raw events.
#[async_trait]
pub trait ProcessStore: Send + Sync {
    /// Records or refreshes a running process's report.
    async fn report_process(&self, report: &ProcessReport) -> Result<(), StoreError>;

    /// Every process that reported and was not removed since.
    async fn processes(&self) -> Result<Vec<ProcessReport>, StoreError>;

    /// Records that `process` may hold unsaved live state for an owner-day. Idempotent.
    async fn mark_unflushed(
        &self,
        process: ProcessId,
        day: &UnflushedDay,
    ) -> Result<(), StoreError>;

    /// Removes one mark: the process stored the owner-day's live state.
    async fn clear_unflushed(
        &self,
        process: ProcessId,
        day: &UnflushedDay,
    ) -> Result<(), StoreError>;

    /// The owner-days `process` marked.
    async fn unflushed(&self, process: ProcessId) -> Result<Vec<UnflushedDay>, StoreError>;

    /// Forgets a process and its marks: it stopped cleanly, or its days were repaired.
    async fn remove_process(&self, process: ProcessId) -> Result<(), StoreError>;

    /// Whether this store can be shared by several processes at once (Cassandra) or belongs
    /// to one (the embedded store's locked folder: every other process there is gone).
    fn is_shared(&self) -> bool;
}

/// The closed 15-minute slices of campaign-days not yet sealed (docs/DESIGN.md, "Open days
/// from closed slices"): time-bounded reads of the raw tables, the copies index that finds an
/// impression id stored with more than one timestamp, each slice's marks and its aggregate.
/// A day's rows are one small partition each, read whole.
#[async_trait]
pub trait SliceStore: Send + Sync {
    /// The impressions of one partition whose time lies in `span`, thin form.
    async fn read_impression_summaries_between(
        &self,
        partition: &EventPartition,
        span: Span,
    ) -> Result<Vec<ImpressionSummaryRow>, StoreError>;

    /// The clicks of one partition whose time lies in `span`.
    async fn read_clicks_between(
        &self,
        partition: &EventPartition,
        span: Span,
    ) -> Result<Vec<ClickRow>, StoreError>;

    /// Every stored copy of `ids` in one partition (the copies index, written with each
    /// impression by [`EventStore::write_impressions`]).
    async fn impression_copies(
        &self,
        partition: &EventPartition,
        ids: &[ImpressionId],
    ) -> Result<Vec<CopyRow>, StoreError>;

    /// Every click stored for an impression (at most a hundred), oldest first.
    async fn clicks_of(
        &self,
        campaign: CampaignKey,
        impression_id: ImpressionId,
    ) -> Result<Vec<ClickRow>, StoreError>;

    /// Marks slices of a campaign-day as changed `at`: an aggregate whose read started
    /// earlier (less the seals' margin) no longer answers for them.
    async fn mark_slices(
        &self,
        campaign: CampaignKey,
        day: Day,
        slices: &[Slice],
        at: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// Records every copy of impression ids stored with more than one timestamp in the day.
    async fn write_duplicates(
        &self,
        campaign: CampaignKey,
        day: Day,
        copies: &[CopyRow],
    ) -> Result<(), StoreError>;

    /// A campaign-day's slice states and duplicates, and its aggregates as `parts` asks:
    /// each ad's users only for a summary by ad or a seal, since the rest need the slices'
    /// users of every ad together, a sketch per slice rather than one per slice and ad.
    async fn read_open_day(
        &self,
        campaign: CampaignKey,
        day: Day,
        parts: OpenDayParts,
    ) -> Result<OpenDayRows, StoreError>;

    /// Stores one slice's aggregate (replacing any earlier one), then its state as aggregated
    /// from `read_started`, so a half-written aggregate is never taken for a whole one.
    async fn write_slice_aggregate(
        &self,
        campaign: CampaignKey,
        day: Day,
        slice: Slice,
        aggregate: &SliceAggregate,
        read_started: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// What this process wrote to the campaigns' counted rows since a read began, when no
    /// other process writes the store (the embedded store): a summary then keeps what it read
    /// raw of an open day and reads again only what a write could have changed. `None` where
    /// other processes write unseen (Cassandra).
    fn changes(&self) -> Option<std::sync::Arc<ChangeLog>> {
        None
    }

    /// Drops a sealed day's slice rows and copies index: the rollup answers for it now.
    async fn delete_open_day(
        &self,
        campaign: CampaignKey,
        day: Day,
        partitions: &[EventPartition],
    ) -> Result<(), StoreError>;
}

/// View reports (docs/DESIGN.md, "Viewability"): kept in the partition of the impression they
/// report on, so whatever reads a partition's impressions reads its reports beside them.
#[async_trait]
pub trait ViewStore: Send + Sync {
    /// Stores reports of one partition; a report stored twice is two rows of one id.
    async fn write_view_reports(
        &self,
        partition: &EventPartition,
        reports: &[ViewReportEvent],
    ) -> Result<(), StoreError>;

    /// The reports of one partition, or of the impressions whose time lies in `span`.
    async fn read_view_reports(
        &self,
        partition: &EventPartition,
        span: Option<Span>,
    ) -> Result<Vec<StoredReport>, StoreError>;
}

/// A conversion waiting for its attribution: due once `--attribution-delay` has passed since
/// its first copy arrived.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DueConversion {
    pub due: DateTime<Utc>,
    pub advertiser_id: AdvertiserId,
    pub conversion_id: ConversionId,
}

/// One of a day's due lists: each advertiser has its own, so that one advertiser's flood of
/// conversions waits behind itself, not in front of every other advertiser's.
/// [`DueLane::Shared`] is the one list of the day that releases before format 7 (embedded)
/// and migration 0024 (Cassandra) wrote; it is read until it is empty, then stays so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DueLane {
    Shared,
    Advertiser(AdvertiserId),
}

/// An advertiser's due list of a day, and the last entry taken off it, if recorded: reading
/// after it skips what is decided without passing over the removed entries again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueLaneState {
    pub advertiser_id: AdvertiserId,
    /// The latest due time listed, where the store keeps it (Cassandra): a list found empty
    /// through a later moment need not be read again.
    pub listed_through: Option<DateTime<Utc>>,
    pub decided_through: Option<DueConversion>,
}

/// A conversion as stored: every copy received, and its decision once made.
#[derive(Debug, Clone, Default)]
pub struct ConversionRecord {
    pub(crate) copies: Vec<ReceivedConversion>,
    pub(crate) decision: Option<DecidedConversion>,
}

impl ConversionRecord {
    /// Every copy received, as stored.
    pub fn copies(&self) -> &[ReceivedConversion] {
        &self.copies
    }

    /// Its decision, once made.
    pub fn decision(&self) -> Option<&DecidedConversion> {
        self.decision.as_ref()
    }
}

/// Conversions (docs/DESIGN.md, "Conversions"): their copies as received, each one's entry in
/// the due list, its decision (the first one stored wins, on every process), and the decided
/// conversions by day, for the advertiser and for the campaign credited.
#[async_trait]
pub trait ConversionStore: Send + Sync {
    /// Stores copies as received, each with its entry in its advertiser's due list of the
    /// day (and that list in the day's directory); a copy carrying a `user_id` also with its
    /// entry in the subject index and the directory line leading to it (written first, or in
    /// the same commit: a stored conversion is never out of an erasure's reach). Durable on
    /// return.
    async fn write_conversion_copies(
        &self,
        copies: &[ReceivedConversion],
        due: &[DueConversion],
    ) -> Result<(), StoreError>;

    /// The advertisers with a due list on the UTC day `day` (by due time), each with the last
    /// entry taken off it.
    async fn due_lanes(&self, day: Day) -> Result<Vec<DueLaneState>, StoreError>;

    /// The entries of one due list of the UTC day `day`, after `after` and due by `until`,
    /// oldest first, at most `limit`.
    async fn due_conversions(
        &self,
        day: Day,
        lane: DueLane,
        after: Option<&DueConversion>,
        until: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<DueConversion>, StoreError>;

    /// Takes entries off a due list once their conversions' decided rows are stored; `taken`
    /// holds the list's oldest entries, in order, so the last of them is recorded as the
    /// list's `decided_through`.
    async fn remove_due(&self, lane: DueLane, taken: &[DueConversion]) -> Result<(), StoreError>;

    /// Every stored copy of a conversion and its decision, if made.
    async fn conversion_record(
        &self,
        advertiser: AdvertiserId,
        id: &ConversionId,
    ) -> Result<ConversionRecord, StoreError>;

    /// Records `decided` unless a decision of that conversion is recorded already, and answers
    /// the recorded one: the first decision wins, whichever process made it.
    async fn decide_conversion(
        &self,
        decided: &DecidedConversion,
    ) -> Result<DecidedConversion, StoreError>;

    /// Writes decided conversions where they are counted: the advertiser's day, and the
    /// credited campaign's day. Idempotent.
    async fn write_decided(&self, decided: &[DecidedConversion]) -> Result<(), StoreError>;

    /// The decided conversions of one bucket of an advertiser's UTC day.
    async fn read_advertiser_conversions(
        &self,
        advertiser: AdvertiserId,
        day: Day,
        bucket: u16,
    ) -> Result<Vec<DecidedConversion>, StoreError>;

    /// The conversions credited to a campaign, of one UTC day (by the conversion's time),
    /// timed `within` it: a read of an open day's newest seconds reads their conversions,
    /// not the day's.
    async fn read_campaign_conversions(
        &self,
        campaign: CampaignKey,
        day: Day,
        within: Span,
    ) -> Result<Vec<DecidedConversion>, StoreError>;
}

/// The event index (`domain::conversion::index`): written off the request path, read by
/// attribution one key and week at a time.
#[async_trait]
pub trait EventIndexStore: Send + Sync {
    /// Writes entries; an entry written again is one more row of its received time.
    async fn write_index(&self, entries: &[IndexEntry]) -> Result<(), StoreError>;

    /// The entries of `key` in the advertiser's `week`, in no promised order.
    async fn read_index(
        &self,
        advertiser: AdvertiserId,
        week: Week,
        key: IndexKey,
    ) -> Result<Vec<IndexEntry>, StoreError>;

    /// The newest `limit` entries of `key` in the advertiser's `week` timed at or before `at`,
    /// newest first: what a decision reads, bounded however many events the key has.
    async fn read_index_newest(
        &self,
        advertiser: AdvertiserId,
        week: Week,
        key: IndexKey,
        at: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<IndexEntry>, StoreError>;

    /// Whether the index itself leads to a user's entries of every advertiser
    /// ([`SubjectStore::read_subject_weeks`] finds them without directory lines), so the
    /// indexer writes no lines for events. A store whose index partitions begin with the
    /// advertiser needs the lines.
    fn finds_subjects_itself(&self) -> bool {
        false
    }
}

/// Where one stored copy of an event is: its partition, its time and the impression it is
/// (or, for a click, the impression clicked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventAt {
    pub partition: EventPartition,
    pub timestamp: EventTime,
    pub impression_id: ImpressionId,
}

/// Personal data (docs/DESIGN.md, "Personal data"): the subject directory, one subject's
/// stored rows read and deleted by their keys (never by a scan), and erasure records. Every
/// delete is idempotent: deleting what is gone is no error, so a resumed or repeated erasure
/// only repeats work.
#[async_trait]
pub trait SubjectStore: Send + Sync {
    /// Adds lines to the subject directory (writing a line again changes nothing).
    async fn write_subject_weeks(&self, weeks: &[SubjectWeek]) -> Result<(), StoreError>;

    /// Every directory line of `user`, of every advertiser.
    async fn read_subject_weeks(&self, user: UserId) -> Result<Vec<SubjectWeek>, StoreError>;

    async fn delete_subject_weeks(&self, weeks: &[SubjectWeek]) -> Result<(), StoreError>;

    /// Deletes these event-index entries (exactly these rows: entries of the same key stored
    /// since, such as a user's events after an erasure's request, stay).
    async fn delete_index_entries(&self, entries: &[IndexEntry]) -> Result<(), StoreError>;

    /// Deletes every event-index entry of `key` in the advertiser's `week`.
    async fn delete_index_key(
        &self,
        advertiser: AdvertiserId,
        week: Week,
        key: IndexKey,
    ) -> Result<(), StoreError>;

    /// The full impression row stored at `at`, if there is one.
    async fn read_impression_at(&self, at: &EventAt) -> Result<Option<Impression>, StoreError>;

    /// The user agent stored with the click at `at` (the click's partition, time and
    /// impression), if the click is there and has one: for a subject access, which gives every
    /// stored field of the subject's records.
    async fn read_click_agent(&self, at: &EventAt) -> Result<Option<UserAgent>, StoreError>;

    /// Deletes the impression copy at `at`: its full and thin rows, its entry in the copies
    /// index, and the view reports stored for that impression at that time.
    async fn erase_impression(&self, at: &EventAt) -> Result<(), StoreError>;

    /// Deletes the click row at `at` (the click's partition and time).
    async fn erase_click(&self, at: &EventAt) -> Result<(), StoreError>;

    /// Deletes an impression's entries in the index of clicks by impression.
    async fn erase_clicks_of(
        &self,
        campaign: CampaignKey,
        impression_id: ImpressionId,
    ) -> Result<(), StoreError>;

    /// Records a new erasure, its place in the pending list and its erased subject (which
    /// ingestion drops re-sent events by). Durable on return.
    async fn create_erasure(&self, record: &ErasureRecord) -> Result<(), StoreError>;

    async fn erasure(&self, id: ErasureId) -> Result<Option<ErasureRecord>, StoreError>;

    /// Erasures recorded and not yet done.
    async fn pending_erasures(&self) -> Result<Vec<ErasureId>, StoreError>;

    /// Stores an erasure's counts unless counts are stored already (the first wins, on every
    /// process); returns the stored ones.
    async fn settle_erasure_counts(
        &self,
        id: ErasureId,
        counts: ErasedCounts,
    ) -> Result<ErasedCounts, StoreError>;

    /// Replaces the record by its done form (no subject in the clear) and takes it off the
    /// pending list.
    async fn finish_erasure(&self, record: &ErasureRecord) -> Result<(), StoreError>;

    /// Every erasure's erased subject, done or not.
    async fn erased_subjects(&self) -> Result<Vec<ErasedSubject>, StoreError>;

    /// Records the keyed hashes of the impressions an erasure found (writing one again changes
    /// nothing): ingestion drops a click or view report of any of them, whenever it arrives.
    async fn record_erased_impressions(
        &self,
        id: ErasureId,
        hashes: &[SubjectHash],
    ) -> Result<(), StoreError>;

    /// The impression hashes recorded for erasure `id`.
    async fn erased_impressions(&self, id: ErasureId) -> Result<Vec<SubjectHash>, StoreError>;

    /// The store's key for subject hashes: `candidate` if none was stored yet, else the stored
    /// one (the first writer wins, on every process).
    async fn privacy_key(&self, candidate: &PrivacyKey) -> Result<PrivacyKey, StoreError>;

    /// The ids of the conversions of `advertiser` carrying `user` with a time in `week`.
    async fn read_subject_conversions(
        &self,
        advertiser: AdvertiserId,
        week: Week,
        user: UserId,
    ) -> Result<Vec<ConversionId>, StoreError>;

    /// Deletes a conversion as `record` found it: every copy, its decision, its decided rows
    /// (the advertiser's day, the credited campaign's day) and its subject-index entries. Its
    /// entry in the due list stays: deciding it then finds no copy and decides nothing.
    async fn erase_conversion(&self, record: &ConversionRecord) -> Result<(), StoreError>;

    /// The UTC days the visitor index holds for (`site`, `guid`), oldest first.
    async fn read_visitor_days(&self, site: &SiteId, guid: &Guid) -> Result<Vec<Day>, StoreError>;

    /// Deletes visitor-index entries as they were written before `requested_at`: an entry a
    /// beacon writes again after the request survives a job (on another process, or late)
    /// that deletes it afterwards (Cassandra deletes `USING TIMESTAMP`; the embedded store
    /// has one process, whose job runs once at a time).
    async fn delete_visitor_days(
        &self,
        days: &[VisitorDay],
        requested_at: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// The key of UTC `day`'s hashes of Global Privacy Control beacons: `candidate` if none
    /// was stored yet, else the stored one (the first writer wins, on every process). Stored
    /// until `expires` at most: Cassandra lets it expire, the embedded store's is deleted by
    /// [`delete_day_keys`](Self::delete_day_keys).
    async fn day_key(
        &self,
        day: Day,
        candidate: &PrivacyKey,
        expires: DateTime<Utc>,
    ) -> Result<PrivacyKey, StoreError>;

    /// Deletes the day keys of the days before `before` (a no-op where they expire).
    async fn delete_day_keys(&self, before: Day) -> Result<(), StoreError>;

    /// Deletes beacons of one partition by their keys (time, guid, features): every stored
    /// copy of each.
    async fn erase_visits(
        &self,
        partition: &VisitPartition,
        visits: &[VisitRow],
    ) -> Result<(), StoreError>;
}

/// What a rewrite of stored addresses went through and changed, so far or in all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RewriteReport {
    /// Impression rows read.
    pub rows_seen: u64,
    /// Rows whose address was rewritten (the others kept no address, or one the policy keeps
    /// as it is).
    pub rows_rewritten: u64,
}

/// Stored client addresses brought under a `--store-ip` policy after the fact (`adevents
/// privacy truncate-addresses`): rows written before the policy, or under a laxer one. The
/// only address stored is an impression's `user_ip` (its view-join network is a /24 or /48
/// already).
#[async_trait]
pub trait AddressStore: Send + Sync {
    /// Rewrites every stored impression's `user_ip` to what `policy` keeps of it, writing only
    /// the rows that change, and calls `progress` with the totals after each page of rows.
    /// A one-off full scan, not for the request path. Idempotent (what a policy keeps, it
    /// keeps again unchanged), so running it again is how an interrupted run resumes.
    async fn rewrite_addresses(
        &self,
        policy: StoreIp,
        progress: &mut (dyn FnMut(RewriteReport) + Send),
    ) -> Result<RewriteReport, StoreError>;
}

/// The raw days of one owner that retention deletes (`--retain-raw`), with every partition
/// they may have been written to (each bucket count in force on each day).
#[derive(Debug, Clone)]
pub enum ExpiredDays {
    Campaign {
        campaign: CampaignKey,
        days: Vec<Day>,
        partitions: Vec<EventPartition>,
        /// The first day kept: what is keyed by advertiser and day rather than by campaign
        /// (its conversions, its users' conversion entries) goes up to it, since the
        /// advertiser's days need not be the campaign's.
        kept: Day,
    },
    Site {
        site: SiteId,
        days: Vec<Day>,
        partitions: Vec<VisitPartition>,
    },
}

/// What a sweep deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Key ranges (embedded store) or partitions (Cassandra) deleted whole.
    pub ranges: u64,
    /// Rows deleted one at a time (what no range held).
    pub rows: u64,
}

impl std::ops::AddAssign for Swept {
    fn add_assign(&mut self, other: Self) {
        self.ranges += other.ranges;
        self.rows += other.rows;
    }
}

/// Deletes what retention no longer keeps (docs/DESIGN.md, "Retention").
#[async_trait]
pub trait RetentionStore: Send + Sync {
    /// Deletes the raw rows of `expired` (a campaign's impressions, their thin copies and
    /// copies index, clicks and click index, view reports, its conversions and open-day
    /// slices; a site's beacons and live sketches), then the days' lines in the day index, so
    /// a later sweep finds them no more. Rollups, seal states and delivery's sealed totals
    /// stay. Idempotent: a sweep cut off anywhere is done again whole by the next.
    async fn drop_expired_days(&self, expired: &ExpiredDays) -> Result<Swept, StoreError>;

    /// Deletes the rollups of every `kind` owner's days before `kept` (`--retain-aggregates`):
    /// a campaign's slice and reach rows, a site's visit, reach and feature-value rows. Seal
    /// states stay (such a day answers zeros), and so do delivery's sealed totals, or lifetime
    /// caps would start again. On Cassandra rollups are written with a TTL from their day
    /// instead, and this deletes nothing.
    async fn drop_expired_rollups(&self, kind: OwnerKind, kept: Day) -> Result<Swept, StoreError>;
}

/// A place events are kept: every subsystem, and whether the whole answers.
#[async_trait]
pub trait Store:
    EventStore
    + VisitStore
    + SettingsStore
    + SealStore
    + RollupStore
    + AccessStore
    + ProcessStore
    + DeliveryStore
    + SliceStore
    + ViewStore
    + ConversionStore
    + EventIndexStore
    + SubjectStore
    + AddressStore
    + RetentionStore
    + 'static
{
    /// Succeeds when the store answers requests and its schema is the one this build expects:
    /// what `/readyz` reports to a load balancer.
    async fn check_ready(&self) -> Result<(), StoreError>;
}
