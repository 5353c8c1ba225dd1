//! A [`Store`] wrapper that times every call into the `adevents_store_call_duration_seconds`
//! histogram, labelled by operation and outcome, whichever store is underneath.

use super::{
    AccessStore, ClickRow, CopyRow, DeliveryStore, EventStore, FeatureVisits, ImpressionPage,
    ImpressionSummaryRow, LiveCountRow, OpenDayParts, OpenDayRows, PageCursor, ProcessStore,
    ReachLevel, Rollup, RollupStore, SealState, SealStore, SealedCounts, SettingsStore, SiteRollup,
    SketchBatch, SketchPartition, SketchRow, SliceAggregate, SliceStore, Store, StoreError,
    ViewStore, VisitRow, VisitStore, WindowPublication,
};
use super::{AddressStore, ExpiredDays, RetentionStore, RewriteReport, Swept};
use super::{
    ConversionRecord, ConversionStore, DueConversion, DueLane, DueLaneState, EventIndexStore,
};
use super::{EventAt, RollupPart, SubjectStore};
use crate::domain::access::{ApiKey, KeyId, SiteProfile};
use crate::domain::address::StoreIp;
use crate::domain::beacon::{Beacon, Guid, SiteId, VisitPartition};
use crate::domain::campaign::{CampaignSettings, SettingsHistory};
use crate::domain::conversion::index::{IndexEntry, IndexKey, Week};
use crate::domain::conversion::{ConversionId, DecidedConversion, ReceivedConversion};
use crate::domain::delivery::DaySlices;
use crate::domain::event::{Click, Impression};
use crate::domain::ids::AdvertiserId;
use crate::domain::ids::UserId;
use crate::domain::ids::{CampaignKey, ImpressionId};
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
use crate::domain::time::Day;
use crate::domain::time::EventTime;
use crate::domain::traffic::UserAgent;
use crate::domain::view::{StoredReport, ViewReportEvent};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;
use uuid::Uuid;

pub(crate) struct Instrumented {
    inner: Arc<dyn Store>,
}

impl Instrumented {
    pub(crate) fn new(inner: Arc<dyn Store>) -> Self {
        Self { inner }
    }
}

async fn timed<T>(
    operation: &'static str,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let started = Instant::now();
    let result = call.await;
    let outcome = match &result {
        Ok(_) => "ok",
        Err(error) if error.is_retryable() => "unavailable",
        Err(_) => "error",
    };
    metrics::histogram!("adevents_store_call_duration_seconds", "operation" => operation, "outcome" => outcome)
        .record(started.elapsed().as_secs_f64());
    result
}

#[async_trait]
impl EventStore for Instrumented {
    async fn write_impressions(
        &self,
        partition: &EventPartition,
        impressions: &[Impression],
    ) -> Result<Vec<EventTime>, StoreError> {
        let call = self.inner.write_impressions(partition, impressions);
        timed("write_impressions", call).await
    }

    async fn write_clicks(
        &self,
        partition: &EventPartition,
        clicks: &[Click],
    ) -> Result<(), StoreError> {
        timed("write_clicks", self.inner.write_clicks(partition, clicks)).await
    }

    async fn read_impression_summaries(
        &self,
        partition: &EventPartition,
    ) -> Result<Vec<ImpressionSummaryRow>, StoreError> {
        let call = self.inner.read_impression_summaries(partition);
        timed("read_impression_summaries", call).await
    }

    async fn read_impression_page(
        &self,
        partition: &EventPartition,
        cursor: Option<PageCursor>,
    ) -> Result<ImpressionPage, StoreError> {
        let call = self.inner.read_impression_page(partition, cursor);
        timed("read_impression_page", call).await
    }

    async fn read_newest_impressions(
        &self,
        partition: &EventPartition,
        limit: usize,
    ) -> Result<Vec<Impression>, StoreError> {
        let call = self.inner.read_newest_impressions(partition, limit);
        timed("read_newest_impressions", call).await
    }

    async fn read_clicks(&self, partition: &EventPartition) -> Result<Vec<ClickRow>, StoreError> {
        timed("read_clicks", self.inner.read_clicks(partition)).await
    }

    async fn first_click(
        &self,
        campaign: CampaignKey,
        impression_id: ImpressionId,
    ) -> Result<Option<ClickRow>, StoreError> {
        let call = self.inner.first_click(campaign, impression_id);
        timed("first_click", call).await
    }
}

#[async_trait]
impl VisitStore for Instrumented {
    async fn write_visits(
        &self,
        partition: &VisitPartition,
        visits: &[Beacon],
        visitors: &[VisitorDay],
    ) -> Result<(), StoreError> {
        let call = self.inner.write_visits(partition, visits, visitors);
        timed("write_visits", call).await
    }

    async fn read_visits(&self, partition: &VisitPartition) -> Result<Vec<VisitRow>, StoreError> {
        timed("read_visits", self.inner.read_visits(partition)).await
    }

    async fn read_visits_with_agents(
        &self,
        partition: &VisitPartition,
    ) -> Result<Vec<VisitRow>, StoreError> {
        timed(
            "read_visits_with_agents",
            self.inner.read_visits_with_agents(partition),
        )
        .await
    }

    async fn write_sketches(&self, batches: &[SketchBatch]) -> Result<(), StoreError> {
        timed("write_sketches", self.inner.write_sketches(batches)).await
    }

    async fn read_sketches(
        &self,
        partition: &SketchPartition,
    ) -> Result<Vec<SketchRow>, StoreError> {
        timed("read_sketches", self.inner.read_sketches(partition)).await
    }
}

#[async_trait]
impl SettingsStore for Instrumented {
    async fn settings(&self, owner: &Owner) -> Result<SettingsHistory, StoreError> {
        timed("settings", self.inner.settings(owner)).await
    }

    async fn put_settings(
        &self,
        owner: &Owner,
        settings: &CampaignSettings,
    ) -> Result<(), StoreError> {
        timed("put_settings", self.inner.put_settings(owner, settings)).await
    }
}

#[async_trait]
impl SealStore for Instrumented {
    async fn mark_day(&self, owner: &Owner, day: Day) -> Result<(), StoreError> {
        timed("mark_day", self.inner.mark_day(owner, day)).await
    }

    async fn owners_of_day(&self, kind: OwnerKind, day: Day) -> Result<Vec<Owner>, StoreError> {
        timed("owners_of_day", self.inner.owners_of_day(kind, day)).await
    }

    async fn listed_owners(&self, listing: Listing) -> Result<Vec<OwnerDays>, StoreError> {
        timed("listed_owners", self.inner.listed_owners(listing)).await
    }

    async fn mark_late(
        &self,
        owner: &Owner,
        day: Day,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        timed("mark_late", self.inner.mark_late(owner, day, at)).await
    }

    async fn seal_state(&self, owner: &Owner, day: Day) -> Result<SealState, StoreError> {
        timed("seal_state", self.inner.seal_state(owner, day)).await
    }

    async fn late_marks(&self, since: Day) -> Result<Vec<LateMark>, StoreError> {
        timed("late_marks", self.inner.late_marks(since)).await
    }
}

#[async_trait]
impl RollupStore for Instrumented {
    async fn write_campaign_rollup(
        &self,
        campaign: CampaignKey,
        day: Day,
        rollup: &Rollup,
        read_started: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let call = self
            .inner
            .write_campaign_rollup(campaign, day, rollup, read_started);
        timed("write_campaign_rollup", call).await
    }

    async fn read_campaign_rollup(
        &self,
        campaign: CampaignKey,
        day: Day,
        reach: &[ReachLevel],
    ) -> Result<Rollup, StoreError> {
        let call = self.inner.read_campaign_rollup(campaign, day, reach);
        timed("read_campaign_rollup", call).await
    }

    async fn write_site_rollup(
        &self,
        site: &SiteId,
        day: Day,
        combinations: &[(String, SiteRollup)],
        read_started: DateTime<Utc>,
        part: RollupPart,
    ) -> Result<(), StoreError> {
        let call = self
            .inner
            .write_site_rollup(site, day, combinations, read_started, part);
        timed("write_site_rollup", call).await
    }

    async fn read_site_rollup(
        &self,
        partition: &SketchPartition,
    ) -> Result<SiteRollup, StoreError> {
        timed("read_site_rollup", self.inner.read_site_rollup(partition)).await
    }

    async fn write_site_features(
        &self,
        site: &SiteId,
        day: Day,
        values: &[FeatureVisits],
    ) -> Result<(), StoreError> {
        let call = self.inner.write_site_features(site, day, values);
        timed("write_site_features", call).await
    }

    async fn read_site_features(
        &self,
        site: &SiteId,
        day: Day,
    ) -> Result<Vec<FeatureVisits>, StoreError> {
        timed(
            "read_site_features",
            self.inner.read_site_features(site, day),
        )
        .await
    }
}

#[async_trait]
impl AccessStore for Instrumented {
    async fn keys(&self) -> Result<Vec<ApiKey>, StoreError> {
        timed("keys", self.inner.keys()).await
    }

    async fn put_key(&self, key: &ApiKey) -> Result<(), StoreError> {
        timed("put_key", self.inner.put_key(key)).await
    }

    async fn delete_key(&self, id: KeyId) -> Result<(), StoreError> {
        timed("delete_key", self.inner.delete_key(id)).await
    }

    async fn sites(&self) -> Result<Vec<SiteProfile>, StoreError> {
        timed("sites", self.inner.sites()).await
    }

    async fn put_site(&self, site: &SiteProfile) -> Result<(), StoreError> {
        timed("put_site", self.inner.put_site(site)).await
    }

    async fn admin_bootstrapped(&self) -> Result<bool, StoreError> {
        timed("admin_bootstrapped", self.inner.admin_bootstrapped()).await
    }

    async fn mark_admin_bootstrapped(&self) -> Result<(), StoreError> {
        let call = self.inner.mark_admin_bootstrapped();
        timed("mark_admin_bootstrapped", call).await
    }

    async fn tag_secrets(&self) -> Result<Vec<TagSecret>, StoreError> {
        timed("tag_secrets", self.inner.tag_secrets()).await
    }

    async fn put_tag_secret(&self, secret: &TagSecret) -> Result<(), StoreError> {
        timed("put_tag_secret", self.inner.put_tag_secret(secret)).await
    }

    async fn delete_tag_secret(&self, id: TagSecretId) -> Result<(), StoreError> {
        timed("delete_tag_secret", self.inner.delete_tag_secret(id)).await
    }
}

#[async_trait]
impl ProcessStore for Instrumented {
    async fn report_process(&self, report: &ProcessReport) -> Result<(), StoreError> {
        timed("report_process", self.inner.report_process(report)).await
    }

    async fn processes(&self) -> Result<Vec<ProcessReport>, StoreError> {
        timed("processes", self.inner.processes()).await
    }

    async fn mark_unflushed(
        &self,
        process: ProcessId,
        day: &UnflushedDay,
    ) -> Result<(), StoreError> {
        timed("mark_unflushed", self.inner.mark_unflushed(process, day)).await
    }

    async fn clear_unflushed(
        &self,
        process: ProcessId,
        day: &UnflushedDay,
    ) -> Result<(), StoreError> {
        timed("clear_unflushed", self.inner.clear_unflushed(process, day)).await
    }

    async fn unflushed(&self, process: ProcessId) -> Result<Vec<UnflushedDay>, StoreError> {
        timed("unflushed", self.inner.unflushed(process)).await
    }

    async fn remove_process(&self, process: ProcessId) -> Result<(), StoreError> {
        timed("remove_process", self.inner.remove_process(process)).await
    }

    fn is_shared(&self) -> bool {
        self.inner.is_shared()
    }
}

#[async_trait]
impl DeliveryStore for Instrumented {
    async fn write_live_counts(&self, rows: &[LiveCountRow]) -> Result<(), StoreError> {
        timed("write_live_counts", self.inner.write_live_counts(rows)).await
    }

    async fn read_live_counts(
        &self,
        campaign: CampaignKey,
    ) -> Result<Vec<LiveCountRow>, StoreError> {
        timed("read_live_counts", self.inner.read_live_counts(campaign)).await
    }

    async fn delete_live_counts(&self, campaign: CampaignKey, day: Day) -> Result<(), StoreError> {
        let call = self.inner.delete_live_counts(campaign, day);
        timed("delete_live_counts", call).await
    }

    async fn write_sealed_counts(
        &self,
        campaign: CampaignKey,
        day: Day,
        slices: &DaySlices,
    ) -> Result<(), StoreError> {
        let call = self.inner.write_sealed_counts(campaign, day, slices);
        timed("write_sealed_counts", call).await
    }

    async fn read_sealed_counts(&self, campaign: CampaignKey) -> Result<SealedCounts, StoreError> {
        timed(
            "read_sealed_counts",
            self.inner.read_sealed_counts(campaign),
        )
        .await
    }

    async fn sealed_version(&self, campaign: CampaignKey) -> Result<Option<Uuid>, StoreError> {
        timed("sealed_version", self.inner.sealed_version(campaign)).await
    }

    async fn publish_windows(&self, publications: &[WindowPublication]) -> Result<(), StoreError> {
        timed("publish_windows", self.inner.publish_windows(publications)).await
    }

    async fn window_publications(
        &self,
        campaign: CampaignKey,
        window_start: DateTime<Utc>,
    ) -> Result<Vec<WindowPublication>, StoreError> {
        let call = self.inner.window_publications(campaign, window_start);
        timed("window_publications", call).await
    }
}

#[async_trait]
impl Store for Instrumented {
    async fn check_ready(&self) -> Result<(), StoreError> {
        timed("check_ready", self.inner.check_ready()).await
    }
}

#[async_trait]
impl SliceStore for Instrumented {
    async fn read_impression_summaries_between(
        &self,
        partition: &EventPartition,
        span: Span,
    ) -> Result<Vec<ImpressionSummaryRow>, StoreError> {
        let call = self
            .inner
            .read_impression_summaries_between(partition, span);
        timed("read_impression_summaries_between", call).await
    }

    async fn read_clicks_between(
        &self,
        partition: &EventPartition,
        span: Span,
    ) -> Result<Vec<ClickRow>, StoreError> {
        let call = self.inner.read_clicks_between(partition, span);
        timed("read_clicks_between", call).await
    }

    async fn impression_copies(
        &self,
        partition: &EventPartition,
        ids: &[ImpressionId],
    ) -> Result<Vec<CopyRow>, StoreError> {
        timed(
            "impression_copies",
            self.inner.impression_copies(partition, ids),
        )
        .await
    }

    async fn clicks_of(
        &self,
        campaign: CampaignKey,
        impression_id: ImpressionId,
    ) -> Result<Vec<ClickRow>, StoreError> {
        timed("clicks_of", self.inner.clicks_of(campaign, impression_id)).await
    }

    async fn mark_slices(
        &self,
        campaign: CampaignKey,
        day: Day,
        slices: &[Slice],
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let call = self.inner.mark_slices(campaign, day, slices, at);
        timed("mark_slices", call).await
    }

    async fn write_duplicates(
        &self,
        campaign: CampaignKey,
        day: Day,
        copies: &[CopyRow],
    ) -> Result<(), StoreError> {
        let call = self.inner.write_duplicates(campaign, day, copies);
        timed("write_duplicates", call).await
    }

    async fn read_open_day(
        &self,
        campaign: CampaignKey,
        day: Day,
        parts: OpenDayParts,
    ) -> Result<OpenDayRows, StoreError> {
        let call = self.inner.read_open_day(campaign, day, parts);
        timed("read_open_day", call).await
    }

    async fn write_slice_aggregate(
        &self,
        campaign: CampaignKey,
        day: Day,
        slice: Slice,
        aggregate: &SliceAggregate,
        read_started: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let call = self
            .inner
            .write_slice_aggregate(campaign, day, slice, aggregate, read_started);
        timed("write_slice_aggregate", call).await
    }

    fn changes(&self) -> Option<std::sync::Arc<super::ChangeLog>> {
        self.inner.changes()
    }

    async fn delete_open_day(
        &self,
        campaign: CampaignKey,
        day: Day,
        partitions: &[EventPartition],
    ) -> Result<(), StoreError> {
        let call = self.inner.delete_open_day(campaign, day, partitions);
        timed("delete_open_day", call).await
    }
}

#[async_trait]
impl ViewStore for Instrumented {
    async fn write_view_reports(
        &self,
        partition: &EventPartition,
        reports: &[ViewReportEvent],
    ) -> Result<(), StoreError> {
        let call = self.inner.write_view_reports(partition, reports);
        timed("write_view_reports", call).await
    }

    async fn read_view_reports(
        &self,
        partition: &EventPartition,
        span: Option<Span>,
    ) -> Result<Vec<StoredReport>, StoreError> {
        let call = self.inner.read_view_reports(partition, span);
        timed("read_view_reports", call).await
    }
}

#[async_trait]
impl ConversionStore for Instrumented {
    async fn write_conversion_copies(
        &self,
        copies: &[ReceivedConversion],
        due: &[DueConversion],
    ) -> Result<(), StoreError> {
        timed(
            "write_conversion_copies",
            self.inner.write_conversion_copies(copies, due),
        )
        .await
    }

    async fn due_lanes(&self, day: Day) -> Result<Vec<DueLaneState>, StoreError> {
        timed("due_lanes", self.inner.due_lanes(day)).await
    }

    async fn due_conversions(
        &self,
        day: Day,
        lane: DueLane,
        after: Option<&DueConversion>,
        until: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<DueConversion>, StoreError> {
        timed(
            "due_conversions",
            self.inner.due_conversions(day, lane, after, until, limit),
        )
        .await
    }

    async fn remove_due(&self, lane: DueLane, taken: &[DueConversion]) -> Result<(), StoreError> {
        timed("remove_due", self.inner.remove_due(lane, taken)).await
    }

    async fn conversion_record(
        &self,
        advertiser: AdvertiserId,
        id: &ConversionId,
    ) -> Result<ConversionRecord, StoreError> {
        timed(
            "conversion_record",
            self.inner.conversion_record(advertiser, id),
        )
        .await
    }

    async fn decide_conversion(
        &self,
        decided: &DecidedConversion,
    ) -> Result<DecidedConversion, StoreError> {
        timed("decide_conversion", self.inner.decide_conversion(decided)).await
    }

    async fn write_decided(&self, decided: &[DecidedConversion]) -> Result<(), StoreError> {
        timed("write_decided", self.inner.write_decided(decided)).await
    }

    async fn read_advertiser_conversions(
        &self,
        advertiser: AdvertiserId,
        day: Day,
        bucket: u16,
    ) -> Result<Vec<DecidedConversion>, StoreError> {
        timed(
            "read_advertiser_conversions",
            self.inner
                .read_advertiser_conversions(advertiser, day, bucket),
        )
        .await
    }

    async fn read_campaign_conversions(
        &self,
        campaign: CampaignKey,
        day: Day,
        within: Span,
    ) -> Result<Vec<DecidedConversion>, StoreError> {
        timed(
            "read_campaign_conversions",
            self.inner.read_campaign_conversions(campaign, day, within),
        )
        .await
    }
}

#[async_trait]
impl EventIndexStore for Instrumented {
    async fn write_index(&self, entries: &[IndexEntry]) -> Result<(), StoreError> {
        timed("write_index", self.inner.write_index(entries)).await
    }

    async fn read_index(
        &self,
        advertiser: AdvertiserId,
        week: Week,
        key: IndexKey,
    ) -> Result<Vec<IndexEntry>, StoreError> {
        timed("read_index", self.inner.read_index(advertiser, week, key)).await
    }

    async fn read_index_newest(
        &self,
        advertiser: AdvertiserId,
        week: Week,
        key: IndexKey,
        at: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<IndexEntry>, StoreError> {
        timed(
            "read_index_newest",
            self.inner
                .read_index_newest(advertiser, week, key, at, limit),
        )
        .await
    }

    fn finds_subjects_itself(&self) -> bool {
        self.inner.finds_subjects_itself()
    }
}

#[async_trait]
impl SubjectStore for Instrumented {
    async fn write_subject_weeks(&self, weeks: &[SubjectWeek]) -> Result<(), StoreError> {
        timed("write_subject_weeks", self.inner.write_subject_weeks(weeks)).await
    }

    async fn read_subject_weeks(&self, user: UserId) -> Result<Vec<SubjectWeek>, StoreError> {
        timed("read_subject_weeks", self.inner.read_subject_weeks(user)).await
    }

    async fn delete_subject_weeks(&self, weeks: &[SubjectWeek]) -> Result<(), StoreError> {
        timed(
            "delete_subject_weeks",
            self.inner.delete_subject_weeks(weeks),
        )
        .await
    }

    async fn delete_index_entries(&self, entries: &[IndexEntry]) -> Result<(), StoreError> {
        timed(
            "delete_index_entries",
            self.inner.delete_index_entries(entries),
        )
        .await
    }

    async fn delete_index_key(
        &self,
        advertiser: AdvertiserId,
        week: Week,
        key: IndexKey,
    ) -> Result<(), StoreError> {
        timed(
            "delete_index_key",
            self.inner.delete_index_key(advertiser, week, key),
        )
        .await
    }

    async fn read_impression_at(&self, at: &EventAt) -> Result<Option<Impression>, StoreError> {
        timed("read_impression_at", self.inner.read_impression_at(at)).await
    }

    async fn read_click_agent(&self, at: &EventAt) -> Result<Option<UserAgent>, StoreError> {
        timed("read_click_agent", self.inner.read_click_agent(at)).await
    }

    async fn erase_impression(&self, at: &EventAt) -> Result<(), StoreError> {
        timed("erase_impression", self.inner.erase_impression(at)).await
    }

    async fn erase_click(&self, at: &EventAt) -> Result<(), StoreError> {
        timed("erase_click", self.inner.erase_click(at)).await
    }

    async fn erase_clicks_of(
        &self,
        campaign: CampaignKey,
        impression_id: ImpressionId,
    ) -> Result<(), StoreError> {
        timed(
            "erase_clicks_of",
            self.inner.erase_clicks_of(campaign, impression_id),
        )
        .await
    }

    async fn read_subject_conversions(
        &self,
        advertiser: AdvertiserId,
        week: Week,
        user: UserId,
    ) -> Result<Vec<ConversionId>, StoreError> {
        timed(
            "read_subject_conversions",
            self.inner.read_subject_conversions(advertiser, week, user),
        )
        .await
    }

    async fn erase_conversion(&self, record: &ConversionRecord) -> Result<(), StoreError> {
        timed("erase_conversion", self.inner.erase_conversion(record)).await
    }

    async fn create_erasure(&self, record: &ErasureRecord) -> Result<(), StoreError> {
        timed("create_erasure", self.inner.create_erasure(record)).await
    }

    async fn erasure(&self, id: ErasureId) -> Result<Option<ErasureRecord>, StoreError> {
        timed("erasure", self.inner.erasure(id)).await
    }

    async fn pending_erasures(&self) -> Result<Vec<ErasureId>, StoreError> {
        timed("pending_erasures", self.inner.pending_erasures()).await
    }

    async fn settle_erasure_counts(
        &self,
        id: ErasureId,
        counts: ErasedCounts,
    ) -> Result<ErasedCounts, StoreError> {
        timed(
            "settle_erasure_counts",
            self.inner.settle_erasure_counts(id, counts),
        )
        .await
    }

    async fn finish_erasure(&self, record: &ErasureRecord) -> Result<(), StoreError> {
        timed("finish_erasure", self.inner.finish_erasure(record)).await
    }

    async fn erased_subjects(&self) -> Result<Vec<ErasedSubject>, StoreError> {
        timed("erased_subjects", self.inner.erased_subjects()).await
    }

    async fn record_erased_impressions(
        &self,
        id: ErasureId,
        hashes: &[SubjectHash],
    ) -> Result<(), StoreError> {
        timed(
            "record_erased_impressions",
            self.inner.record_erased_impressions(id, hashes),
        )
        .await
    }

    async fn erased_impressions(&self, id: ErasureId) -> Result<Vec<SubjectHash>, StoreError> {
        timed("erased_impressions", self.inner.erased_impressions(id)).await
    }

    async fn privacy_key(&self, candidate: &PrivacyKey) -> Result<PrivacyKey, StoreError> {
        timed("privacy_key", self.inner.privacy_key(candidate)).await
    }

    async fn read_visitor_days(&self, site: &SiteId, guid: &Guid) -> Result<Vec<Day>, StoreError> {
        timed(
            "read_visitor_days",
            self.inner.read_visitor_days(site, guid),
        )
        .await
    }

    async fn delete_visitor_days(
        &self,
        days: &[VisitorDay],
        requested_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let call = self.inner.delete_visitor_days(days, requested_at);
        timed("delete_visitor_days", call).await
    }

    async fn erase_visits(
        &self,
        partition: &VisitPartition,
        visits: &[VisitRow],
    ) -> Result<(), StoreError> {
        timed("erase_visits", self.inner.erase_visits(partition, visits)).await
    }

    async fn day_key(
        &self,
        day: Day,
        candidate: &PrivacyKey,
        expires: DateTime<Utc>,
    ) -> Result<PrivacyKey, StoreError> {
        timed("day_key", self.inner.day_key(day, candidate, expires)).await
    }

    async fn delete_day_keys(&self, before: Day) -> Result<(), StoreError> {
        timed("delete_day_keys", self.inner.delete_day_keys(before)).await
    }
}

#[async_trait]
impl AddressStore for Instrumented {
    async fn rewrite_addresses(
        &self,
        policy: StoreIp,
        progress: &mut (dyn FnMut(RewriteReport) + Send),
    ) -> Result<RewriteReport, StoreError> {
        let call = self.inner.rewrite_addresses(policy, progress);
        timed("rewrite_addresses", call).await
    }
}

#[async_trait]
impl RetentionStore for Instrumented {
    async fn drop_expired_days(&self, expired: &ExpiredDays) -> Result<Swept, StoreError> {
        timed("drop_expired_days", self.inner.drop_expired_days(expired)).await
    }

    async fn drop_expired_rollups(&self, kind: OwnerKind, kept: Day) -> Result<Swept, StoreError> {
        timed(
            "drop_expired_rollups",
            self.inner.drop_expired_rollups(kind, kept),
        )
        .await
    }
}
