//! Personal data in the cassandra store: one subject's rows read and deleted by their keys,
//! and erasure records (see [`SubjectStore`]; the directory is in [`super::subject_lines`],
//! the records in [`super::erasures`]).
//!
//! Every delete names a row, a clustering prefix or a partition by its key, never a scan, and
//! leaves a tombstone: deleting what is gone writes one more and is no error, so a resumed
//! erasure only repeats work. Raw rows naming an impression go with it (its full, thin and
//! copies-index rows, its view reports, its entry among the day's duplicates); aggregates,
//! slices, seals and delivery counts stay: they hold counts, not identities.

use super::CassandraStore;
use super::erasures;
use super::event_index::partition_of;
use super::event_reads::FullImpressionRow;
use super::statements::{
    execute, execute_each, failed, partition_values, read_all, read_one, visit_partition_values,
};
use super::subject_statements::SubjectStatements;
use super::visit_batches::VISITS_PER_BATCH;
use crate::domain::beacon::{Guid, SiteId, VisitPartition};
use crate::domain::conversion::index::{IndexEntry, IndexKey, Week};
use crate::domain::conversion::{Conversion, ConversionId, conversion_bucket};
use crate::domain::event::Impression;
use crate::domain::ids::{AdvertiserId, CampaignKey, ImpressionId, UserId};
use crate::domain::privacy::{
    ErasedCounts, ErasedSubject, ErasureId, ErasureRecord, PrivacyKey, SubjectConversion,
    SubjectHash, SubjectWeek, VisitorDay,
};
use crate::domain::time::Day;
use crate::domain::traffic::UserAgent;
use crate::store::{ConversionRecord, EventAt, StoreError, SubjectStore, VisitRow};
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use scylla::statement::batch::{Batch, BatchType};
use uuid::Uuid;

/// Directory lines written or deleted at once by one call.
const ROWS_IN_FLIGHT: usize = 64;

/// The key of one row of an event table: its partition, time and impression.
type EventRow = (Uuid, Uuid, NaiveDate, i16, DateTime<Utc>, Uuid);

fn event_row(at: &EventAt) -> EventRow {
    let (advertiser, campaign, day, bucket) = partition_values(&at.partition);
    (
        advertiser,
        campaign,
        day,
        bucket,
        at.timestamp.instant(),
        at.impression_id.as_uuid(),
    )
}

impl CassandraStore {
    async fn subject_statements(&self) -> Result<&SubjectStatements, StoreError> {
        Ok(&self.prepared().await?.subjects)
    }

    /// Writes the subject-index entries of conversions carrying a user, and the directory
    /// lines leading to them, before the conversions themselves are stored.
    pub(super) async fn write_subject_conversions(
        &self,
        conversions: &[&Conversion],
    ) -> Result<(), StoreError> {
        let entries: Vec<(SubjectConversion, i32)> = conversions
            .iter()
            .filter_map(|conversion| {
                let entry = SubjectConversion::of(conversion)?;
                Some((entry, self.raw_ttl(conversion.day())))
            })
            .collect();
        if entries.is_empty() {
            return Ok(());
        }
        let lines: Vec<SubjectWeek> = entries.iter().map(|(entry, _)| entry.line()).collect();
        self.write_subject_weeks(&lines).await?;
        let statement = &self.subject_statements().await?.insert_subject_conversion;
        execute_each(
            &self.session,
            statement,
            &entries,
            ROWS_IN_FLIGHT,
            |(entry, ttl)| {
                (
                    entry.advertiser_id.as_uuid(),
                    entry.week.get(),
                    entry.user_id.as_uuid(),
                    entry.conversion_id.as_str(),
                    *ttl,
                )
            },
            "writing the subject index of conversions",
        )
        .await
    }
}

#[async_trait]
impl SubjectStore for CassandraStore {
    async fn write_subject_weeks(&self, weeks: &[SubjectWeek]) -> Result<(), StoreError> {
        self.write_subject_lines(weeks).await
    }

    async fn read_subject_weeks(&self, user: UserId) -> Result<Vec<SubjectWeek>, StoreError> {
        self.read_subject_lines(user).await
    }

    async fn delete_subject_weeks(&self, weeks: &[SubjectWeek]) -> Result<(), StoreError> {
        self.delete_subject_lines(weeks).await
    }

    async fn delete_index_entries(&self, entries: &[IndexEntry]) -> Result<(), StoreError> {
        let statement = &self.subject_statements().await?.delete_index_entry;
        execute_each(
            &self.session,
            statement,
            entries,
            ROWS_IN_FLIGHT,
            |entry| {
                let (advertiser_id, week, bucket_id) =
                    partition_of(entry.advertiser_id, entry.week(), entry.key);
                (
                    advertiser_id,
                    week,
                    bucket_id,
                    entry.key.code(),
                    entry.key.id(),
                    entry.timestamp.instant(),
                    entry.kind.code(),
                    entry.impression_id.as_uuid(),
                    entry.campaign_id.as_uuid(),
                    entry.received,
                )
            },
            "deleting from the event index",
        )
        .await
    }

    async fn delete_index_key(
        &self,
        advertiser: AdvertiserId,
        week: Week,
        key: IndexKey,
    ) -> Result<(), StoreError> {
        let statement = &self.subject_statements().await?.delete_index_key;
        let (advertiser_id, week, bucket_id) = partition_of(advertiser, week, key);
        let values = (advertiser_id, week, bucket_id, key.code(), key.id());
        execute(
            &self.session,
            statement,
            values,
            "deleting from the event index",
        )
        .await
    }

    async fn read_impression_at(&self, at: &EventAt) -> Result<Option<Impression>, StoreError> {
        let statement = &self.subject_statements().await?.select_impression_at;
        let row: Option<FullImpressionRow> = read_one(
            &self.session,
            statement,
            event_row(at),
            "reading an impression",
        )
        .await?;
        Ok(row.map(|row| row.into_impression(&at.partition)))
    }

    async fn read_click_agent(&self, at: &EventAt) -> Result<Option<UserAgent>, StoreError> {
        let statement = &self.subject_statements().await?.select_click_agent;
        let row: Option<(Option<String>,)> = read_one(
            &self.session,
            statement,
            event_row(at),
            "reading a click's user agent",
        )
        .await?;
        Ok(row
            .and_then(|(agent,)| agent)
            .as_deref()
            .and_then(UserAgent::new))
    }

    async fn erase_impression(&self, at: &EventAt) -> Result<(), StoreError> {
        const CONTEXT: &str = "erasing an impression";
        let statements = self.subject_statements().await?;
        let key = event_row(at);
        // One partition key across four tables: one mutation, applied together on a replica.
        let mut batch = Batch::new(BatchType::Unlogged);
        batch.set_is_idempotent(true);
        for statement in [
            &statements.delete_impression,
            &statements.delete_impression_summary,
            &statements.delete_impression_copy,
            &statements.delete_view_reports,
        ] {
            batch.append_statement(statement.clone());
        }
        let rows = async {
            self.session
                .batch(&batch, (key, key, key, key))
                .await
                .map(|_| ())
                .map_err(failed(CONTEXT))
        };
        // The slicer records a copy among its campaign-day's duplicates when the day holds its
        // id at another time too; the partition's day is the copy's.
        let (advertiser, campaign, day, _, timestamp, impression) = key;
        let duplicate = execute(
            &self.session,
            &statements.delete_duplicate,
            (advertiser, campaign, day, timestamp, impression),
            CONTEXT,
        );
        futures::try_join!(rows, duplicate)?;
        Ok(())
    }

    async fn read_subject_conversions(
        &self,
        advertiser: AdvertiserId,
        week: Week,
        user: UserId,
    ) -> Result<Vec<ConversionId>, StoreError> {
        const CONTEXT: &str = "reading a user's conversions";
        let statement = &self.subject_statements().await?.select_subject_conversions;
        let rows: Vec<(String,)> = read_all(
            &self.session,
            statement,
            (advertiser.as_uuid(), week.get(), user.as_uuid()),
            CONTEXT,
        )
        .await?;
        rows.into_iter()
            .map(|(id,)| {
                ConversionId::new(&id)
                    .map_err(|_| StoreError::internal_message(format!("{CONTEXT}: a malformed id")))
            })
            .collect()
    }

    async fn erase_conversion(&self, record: &ConversionRecord) -> Result<(), StoreError> {
        const CONTEXT: &str = "erasing a conversion";
        let statements = self.subject_statements().await?;
        let session = &*self.session;
        let mut conversions: Vec<&Conversion> =
            record.copies.iter().map(|copy| &copy.conversion).collect();
        if let Some(decided) = &record.decision {
            let inner = &decided.conversion;
            let (advertiser, id) = (inner.advertiser_id.as_uuid(), inner.conversion_id.as_str());
            let row = (inner.timestamp.instant(), id);
            execute(
                session,
                &statements.delete_decided,
                (
                    advertiser,
                    inner.day().date(),
                    conversion_bucket(&inner.conversion_id) as i16,
                    row.0,
                    row.1,
                ),
                CONTEXT,
            )
            .await?;
            if let Some(campaign) = decided.campaign_id() {
                execute(
                    session,
                    &statements.delete_campaign_decided,
                    (
                        advertiser,
                        campaign.as_uuid(),
                        inner.day().date(),
                        row.0,
                        row.1,
                    ),
                    CONTEXT,
                )
                .await?;
            }
            conversions.push(inner);
        }
        if let Some(conversion) = conversions.first() {
            let key = (
                conversion.advertiser_id.as_uuid(),
                conversion.conversion_id.as_str(),
            );
            execute(
                session,
                &statements.delete_conversion_decision,
                key,
                CONTEXT,
            )
            .await?;
            execute(session, &statements.delete_conversion_copies, key, CONTEXT).await?;
        }
        // The entries last: a job cut off before them finds the conversion's rows again.
        let entries: Vec<SubjectConversion> = conversions
            .into_iter()
            .filter_map(SubjectConversion::of)
            .collect();
        execute_each(
            session,
            &statements.delete_subject_conversion,
            &entries,
            ROWS_IN_FLIGHT,
            |entry| {
                (
                    entry.advertiser_id.as_uuid(),
                    entry.week.get(),
                    entry.user_id.as_uuid(),
                    entry.conversion_id.as_str(),
                )
            },
            CONTEXT,
        )
        .await
    }

    async fn erase_click(&self, at: &EventAt) -> Result<(), StoreError> {
        let statement = &self.subject_statements().await?.delete_click;
        execute(&self.session, statement, event_row(at), "erasing a click").await
    }

    async fn erase_clicks_of(
        &self,
        campaign: CampaignKey,
        impression_id: ImpressionId,
    ) -> Result<(), StoreError> {
        let statement = &self.subject_statements().await?.delete_clicks_of;
        let values = (
            campaign.advertiser_id.as_uuid(),
            campaign.campaign_id.as_uuid(),
            impression_id.as_uuid(),
        );
        execute(
            &self.session,
            statement,
            values,
            "erasing an impression's click index",
        )
        .await
    }

    async fn create_erasure(&self, record: &ErasureRecord) -> Result<(), StoreError> {
        let statements = self.subject_statements().await?;
        erasures::create(&self.session, statements, record).await
    }

    async fn erasure(&self, id: ErasureId) -> Result<Option<ErasureRecord>, StoreError> {
        let statements = self.subject_statements().await?;
        erasures::read(&self.session, statements, id).await
    }

    async fn pending_erasures(&self) -> Result<Vec<ErasureId>, StoreError> {
        let statements = self.subject_statements().await?;
        erasures::pending(&self.session, statements).await
    }

    async fn settle_erasure_counts(
        &self,
        id: ErasureId,
        counts: ErasedCounts,
    ) -> Result<ErasedCounts, StoreError> {
        let statements = self.subject_statements().await?;
        erasures::settle_counts(&self.session, statements, id, counts).await
    }

    async fn finish_erasure(&self, record: &ErasureRecord) -> Result<(), StoreError> {
        let statements = self.subject_statements().await?;
        erasures::finish(&self.session, statements, record).await
    }

    async fn erased_subjects(&self) -> Result<Vec<ErasedSubject>, StoreError> {
        let statements = self.subject_statements().await?;
        erasures::erased_subjects(&self.session, statements).await
    }

    async fn record_erased_impressions(
        &self,
        id: ErasureId,
        hashes: &[SubjectHash],
    ) -> Result<(), StoreError> {
        let statements = self.subject_statements().await?;
        erasures::record_impressions(&self.session, statements, id, hashes).await
    }

    async fn erased_impressions(&self, id: ErasureId) -> Result<Vec<SubjectHash>, StoreError> {
        let statements = self.subject_statements().await?;
        erasures::impressions(&self.session, statements, id).await
    }

    async fn privacy_key(&self, candidate: &PrivacyKey) -> Result<PrivacyKey, StoreError> {
        let statements = self.subject_statements().await?;
        erasures::privacy_key(&self.session, statements, candidate).await
    }

    async fn read_visitor_days(&self, site: &SiteId, guid: &Guid) -> Result<Vec<Day>, StoreError> {
        let statement = &self.subject_statements().await?.select_visitor_days;
        let rows: Vec<(NaiveDate,)> = read_all(
            &self.session,
            statement,
            (site.as_str(), guid.as_str()),
            "reading the visitor index",
        )
        .await?;
        Ok(rows.into_iter().map(|(day,)| Day::new(day)).collect())
    }

    async fn delete_visitor_days(
        &self,
        days: &[VisitorDay],
        requested_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let statement = &self.subject_statements().await?.delete_visitor_day;
        // At the request's instant: every process runs pending erasures, and one that runs
        // this job late must not delete the entry a beacon stored since wrote again.
        let at = requested_at.timestamp_micros();
        execute_each(
            &self.session,
            statement,
            days,
            ROWS_IN_FLIGHT,
            |entry| {
                (
                    at,
                    entry.site.as_str(),
                    entry.guid.as_str(),
                    entry.day.date(),
                )
            },
            "deleting from the visitor index",
        )
        .await
    }

    async fn day_key(
        &self,
        day: Day,
        candidate: &PrivacyKey,
        expires: DateTime<Utc>,
    ) -> Result<PrivacyKey, StoreError> {
        let statements = self.subject_statements().await?;
        // Never 0, which would mean no expiry; the caller asks only before `expires`.
        let ttl = (expires - Utc::now())
            .num_seconds()
            .clamp(1, i64::from(i32::MAX));
        let ttl = i32::try_from(ttl).unwrap_or(i32::MAX);
        erasures::day_key(&self.session, statements, day, candidate, ttl).await
    }

    async fn delete_day_keys(&self, _before: Day) -> Result<(), StoreError> {
        // Written with their TTL: gone by themselves.
        Ok(())
    }

    async fn erase_visits(
        &self,
        partition: &VisitPartition,
        visits: &[VisitRow],
    ) -> Result<(), StoreError> {
        const CONTEXT: &str = "erasing beacons";
        let statement = &self.subject_statements().await?.delete_visit;
        let (site, day, bucket) = visit_partition_values(partition);
        // One partition: each chunk is one unlogged single-partition batch, one mutation.
        for chunk in visits.chunks(VISITS_PER_BATCH) {
            let mut batch = Batch::new(BatchType::Unlogged);
            batch.set_is_idempotent(true);
            let values: Vec<_> = chunk
                .iter()
                .map(|visit| {
                    batch.append_statement(statement.clone());
                    (
                        site,
                        day,
                        bucket,
                        visit.timestamp.instant(),
                        visit.guid.as_str(),
                        visit.features.combination_key(),
                    )
                })
                .collect();
            self.session
                .batch(&batch, values)
                .await
                .map_err(failed(CONTEXT))?;
        }
        Ok(())
    }
}
