//! Personal data in the embedded store: the subject directory, one subject's rows read and
//! deleted by their keys, and erasure records (see [`SubjectStore`]).
//!
//! The directory (`subject_week`) is keyed by user (16 bytes), advertiser (16) and week (4, in
//! key order) with no value, so a user's lines are one prefix. Only conversions write lines:
//! the event index leads to a user's events of every advertiser by itself (`event_index`). Erasures share one table
//! (`erasure`) under a kind byte and the erasure's id: the record, its pending-list entry, its
//! erased subject and its counts. The counts are a row of their own so that the first caller to
//! settle them keeps them (the commit thread writes them only where none are), whatever later
//! rewrites the record. Values are small postcard records. The store's privacy key is a marker
//! in `meta`, written the same way.

use super::EmbeddedStore;
use super::committer::{Guarded, Merged, Removals};
use super::engine::{Table, corrupt, engine_error};
use super::subject_keys::{decode_subject_week, subject_conversion_prefix, subject_week_key};
use super::{event_index, events, keys, rows, site_keys};
use crate::domain::beacon::{Guid, SiteId, VisitPartition};
use crate::domain::conversion::ConversionId;
use crate::domain::conversion::index::{IndexEntry, IndexKey, Week};
use crate::domain::event::Impression;
use crate::domain::ids::{AdvertiserId, CampaignKey, ImpressionId, UserId};
use crate::domain::privacy::{
    ErasedCounts, ErasedSubject, ErasureId, ErasureRecord, ErasureStatus, PrivacyKey, Subject,
    SubjectHash, SubjectWeek, VisitorDay,
};
use crate::domain::time::Day;
use crate::domain::traffic::UserAgent;
use crate::store::{ConversionRecord, EventAt, StoreError, SubjectStore, VisitRow};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use uuid::Uuid;

/// Rows a prefix delete removes per commit: a user's week of a busy advertiser may index
/// millions of events, and one commit must not hold them all in memory.
const DELETES_PER_COMMIT: usize = 20_000;

/// The kinds of rows of the `erasure` table.
const RECORD: u8 = b'R';
const PENDING: u8 = b'P';
const SUBJECT: u8 = b'S';
const COUNTS: u8 = b'C';
/// An impression an erasure found: the kind, the erasure's id, then the impression's hash.
const IMPRESSION: u8 = b'I';
/// Impression hashes recorded per commit.
const HASHES_PER_COMMIT: usize = 10_000;

/// The privacy key's row in `meta`.
const PRIVACY_KEY: &str = "privacy_key";
/// The prefix of the day keys' rows in `meta`, then the day (4 bytes, in order).
const DAY_KEY: &[u8] = b"gpc_day_key:";

fn day_key_row(day: Day) -> Vec<u8> {
    let mut key = DAY_KEY.to_vec();
    key.extend_from_slice(&keys::day_bytes(day));
    key
}

fn erasure_key(kind: u8, id: ErasureId) -> Vec<u8> {
    let mut key = vec![kind];
    key.extend_from_slice(id.as_uuid().as_bytes());
    key
}

fn decode_erasure_id(key: &[u8]) -> Option<ErasureId> {
    Some(ErasureId::new(Uuid::from_slice(key.get(1..)?).ok()?))
}

/// A subject in the clear; an enum so that other kinds of subject can follow. New kinds go
/// last: postcard stores the variant's index.
#[derive(Serialize, Deserialize)]
enum StoredSubject {
    User(Uuid),
    Visitor { site: String, guid: String },
}

impl StoredSubject {
    fn of(subject: &Subject) -> Self {
        match subject {
            Subject::User(user) => Self::User(user.as_uuid()),
            Subject::Visitor { site, guid } => Self::Visitor {
                site: site.as_str().to_owned(),
                guid: guid.as_str().to_owned(),
            },
        }
    }

    fn into_subject(self) -> Option<Subject> {
        Some(match self {
            Self::User(user) => Subject::User(UserId::new(user)),
            Self::Visitor { site, guid } => Subject::Visitor {
                site: SiteId::parse(&site).ok()?,
                guid: Guid::parse(&guid).ok()?,
            },
        })
    }
}

#[derive(Serialize, Deserialize)]
struct StoredCounts {
    impressions: u64,
    clicks: u64,
    view_reports: u64,
    conversions: u64,
    visits: u64,
}

#[derive(Serialize, Deserialize)]
struct StoredErasure {
    subject: Option<StoredSubject>,
    subject_hash: [u8; 32],
    scope: Option<Uuid>,
    requested_millis: i64,
    status: String,
    completed_millis: Option<i64>,
    erased: Option<StoredCounts>,
}

#[derive(Serialize, Deserialize)]
struct StoredErasedSubject {
    subject_hash: [u8; 32],
    scope: Option<Uuid>,
    requested_millis: i64,
}

fn stored_counts(counts: &ErasedCounts) -> StoredCounts {
    StoredCounts {
        impressions: counts.impressions,
        clicks: counts.clicks,
        view_reports: counts.view_reports,
        conversions: counts.conversions,
        visits: counts.visits,
    }
}

fn from_stored_counts(stored: StoredCounts) -> ErasedCounts {
    ErasedCounts {
        impressions: stored.impressions,
        clicks: stored.clicks,
        view_reports: stored.view_reports,
        conversions: stored.conversions,
        visits: stored.visits,
    }
}

fn counts_value(counts: &ErasedCounts) -> Vec<u8> {
    // Plain data into a Vec: serialising cannot fail.
    postcard::to_stdvec(&stored_counts(counts)).unwrap_or_default()
}

fn decode_counts(value: &[u8]) -> Option<ErasedCounts> {
    postcard::from_bytes(value).ok().map(from_stored_counts)
}

/// A stored value that decodes is settled and stays; one that does not is no one's answer.
fn keeps_counts(value: &[u8]) -> bool {
    decode_counts(value).is_some()
}

fn record_value(record: &ErasureRecord) -> Vec<u8> {
    let stored = StoredErasure {
        subject: record.subject.as_ref().map(StoredSubject::of),
        subject_hash: *record.subject_hash.as_bytes(),
        scope: record.scope.map(|scope| scope.as_uuid()),
        requested_millis: record.requested_at.timestamp_millis(),
        status: record.status.name().to_owned(),
        completed_millis: record.completed_at.map(|at| at.timestamp_millis()),
        erased: record.erased.as_ref().map(stored_counts),
    };
    postcard::to_stdvec(&stored).unwrap_or_default()
}

fn decode_record(id: ErasureId, value: &[u8]) -> Option<ErasureRecord> {
    let stored: StoredErasure = postcard::from_bytes(value).ok()?;
    let completed_at = match stored.completed_millis {
        None => None,
        Some(millis) => Some(DateTime::from_timestamp_millis(millis)?),
    };
    let subject = match stored.subject {
        None => None,
        Some(subject) => Some(subject.into_subject()?),
    };
    Some(ErasureRecord {
        id,
        subject,
        subject_hash: SubjectHash::new(stored.subject_hash),
        scope: stored.scope.map(AdvertiserId::new),
        requested_at: DateTime::from_timestamp_millis(stored.requested_millis)?,
        status: ErasureStatus::from_name(&stored.status)?,
        completed_at,
        erased: stored.erased.map(from_stored_counts),
    })
}

fn erased_subject_value(subject: &ErasedSubject) -> Vec<u8> {
    let stored = StoredErasedSubject {
        subject_hash: *subject.subject_hash.as_bytes(),
        scope: subject.scope.map(|scope| scope.as_uuid()),
        requested_millis: subject.requested_at.timestamp_millis(),
    };
    postcard::to_stdvec(&stored).unwrap_or_default()
}

fn decode_erased_subject(key: &[u8], value: &[u8]) -> Option<ErasedSubject> {
    let stored: StoredErasedSubject = postcard::from_bytes(value).ok()?;
    Some(ErasedSubject {
        id: decode_erasure_id(key)?,
        subject_hash: SubjectHash::new(stored.subject_hash),
        scope: stored.scope.map(AdvertiserId::new),
        requested_at: DateTime::from_timestamp_millis(stored.requested_millis)?,
    })
}

fn decode_privacy_key(value: &[u8]) -> Option<PrivacyKey> {
    Some(PrivacyKey::new(value.try_into().ok()?))
}

fn keeps_privacy_key(value: &[u8]) -> bool {
    decode_privacy_key(value).is_some()
}

impl EmbeddedStore {
    /// The value stored under `key` in one table.
    async fn point(
        &self,
        table: Table,
        key: Vec<u8>,
        context: &'static str,
    ) -> Result<Option<fjall::Slice>, StoreError> {
        self.blocking(move |tables| {
            tables
                .get(table)
                .get(&key)
                .map_err(|error| engine_error(context, error))
        })
        .await
    }

    /// Removes every row under `prefix` in one table, at most [`DELETES_PER_COMMIT`] a commit.
    async fn remove_prefix(
        &self,
        table: Table,
        prefix: Vec<u8>,
        context: &'static str,
    ) -> Result<(), StoreError> {
        loop {
            let batch = self
                .scan(table, prefix.clone(), Some(DELETES_PER_COMMIT), context)
                .await?;
            let full = batch.len() == DELETES_PER_COMMIT;
            if batch.is_empty() {
                return Ok(());
            }
            let removals: Removals = batch
                .into_iter()
                .map(|(key, _)| (table, key.to_vec()))
                .collect();
            self.committer
                .commit_replacing(context, removals, Vec::new())
                .await?;
            if !full {
                return Ok(());
            }
        }
    }

    /// Writes `value` under `key` unless a value it `keeps` is stored there, and returns what
    /// is stored once it is durable: the first writer's value, on every caller.
    async fn keep_first(
        &self,
        context: &'static str,
        row: Guarded,
    ) -> Result<fjall::Slice, StoreError> {
        let (table, key) = (row.table, row.key.clone());
        // Settled once, read often: a value already kept costs no commit.
        if let Some(stored) = self.point(table, key.clone(), context).await?
            && (row.keeps)(&stored)
        {
            return Ok(stored);
        }
        self.committer
            .commit_guarded(context, Vec::new(), vec![row])
            .await?;
        self.point(table, key, context)
            .await?
            .ok_or_else(|| corrupt(context))
    }
}

#[async_trait]
impl SubjectStore for EmbeddedStore {
    async fn write_subject_weeks(&self, weeks: &[SubjectWeek]) -> Result<(), StoreError> {
        let rows = weeks
            .iter()
            .map(|line| (Table::SubjectWeek, subject_week_key(line), Vec::new()))
            .collect();
        self.write("writing the subject directory", rows).await
    }

    /// The lines of the directory (a user's conversions; an older folder's lines of indexed
    /// events are deleted when it is opened at format 6) with those the event index itself holds (`event_index`: a user's week of every
    /// advertiser is one range there).
    async fn read_subject_weeks(&self, user: UserId) -> Result<Vec<SubjectWeek>, StoreError> {
        const CONTEXT: &str = "reading the subject directory";
        let mut lines = self
            .scan(
                Table::SubjectWeek,
                user.as_uuid().as_bytes().to_vec(),
                None,
                CONTEXT,
            )
            .await?
            .iter()
            .map(|(key, _)| decode_subject_week(key).ok_or_else(|| corrupt(CONTEXT)))
            .collect::<Result<BTreeSet<SubjectWeek>, StoreError>>()?;
        lines.extend(self.indexed_subject_weeks(user).await?);
        Ok(lines.into_iter().collect())
    }

    async fn delete_subject_weeks(&self, weeks: &[SubjectWeek]) -> Result<(), StoreError> {
        let removals = weeks
            .iter()
            .map(|line| (Table::SubjectWeek, subject_week_key(line)))
            .collect();
        self.committer
            .commit_replacing("deleting from the subject directory", removals, Vec::new())
            .await
    }

    async fn read_subject_conversions(
        &self,
        advertiser: AdvertiserId,
        week: Week,
        user: UserId,
    ) -> Result<Vec<ConversionId>, StoreError> {
        const CONTEXT: &str = "reading a user's conversions";
        let prefix = subject_conversion_prefix(advertiser, week, user);
        let start = prefix.len();
        self.scan(Table::SubjectConversion, prefix, None, CONTEXT)
            .await?
            .iter()
            .map(|(key, _)| {
                key.get(start..)
                    .and_then(|id| std::str::from_utf8(id).ok())
                    .and_then(|id| ConversionId::new(id).ok())
                    .ok_or_else(|| corrupt(CONTEXT))
            })
            .collect()
    }

    async fn erase_conversion(&self, record: &ConversionRecord) -> Result<(), StoreError> {
        self.committer
            .commit_replacing(
                "erasing a conversion",
                super::conversions::conversion_removals(record),
                Vec::new(),
            )
            .await?;
        self.changed(
            record
                .decision
                .as_ref()
                .and_then(super::conversions::credited_at),
        );
        Ok(())
    }

    async fn delete_index_entries(&self, entries: &[IndexEntry]) -> Result<(), StoreError> {
        let removals = entries
            .iter()
            .map(|entry| (Table::EventIndex, event_index::entry_key(entry)))
            .collect();
        self.committer
            .commit_replacing("deleting from the event index", removals, Vec::new())
            .await
    }

    async fn delete_index_key(
        &self,
        advertiser: AdvertiserId,
        week: Week,
        key: IndexKey,
    ) -> Result<(), StoreError> {
        self.remove_prefix(
            Table::EventIndex,
            event_index::key_prefix(advertiser, week, key),
            "deleting from the event index",
        )
        .await
    }

    async fn read_impression_at(&self, at: &EventAt) -> Result<Option<Impression>, StoreError> {
        const CONTEXT: &str = "reading an impression";
        let key = keys::event_key(&at.partition, at.timestamp.instant(), at.impression_id);
        let Some(value) = self.point(Table::Impression, key.clone(), CONTEXT).await? else {
            return Ok(None);
        };
        events::full_impression(&at.partition, &key, &value)
            .map(Some)
            .ok_or_else(|| corrupt(CONTEXT))
    }

    async fn read_click_agent(&self, at: &EventAt) -> Result<Option<UserAgent>, StoreError> {
        const CONTEXT: &str = "reading a click's user agent";
        let key = keys::event_key(&at.partition, at.timestamp.instant(), at.impression_id);
        let Some(value) = self.point(Table::Click, key, CONTEXT).await? else {
            return Ok(None);
        };
        // The click's ad (16 bytes), then its traffic part.
        let (_, agent) = value
            .get(16..)
            .and_then(rows::decode_traffic_suffix)
            .ok_or_else(|| corrupt(CONTEXT))?;
        Ok(agent)
    }

    async fn erase_impression(&self, at: &EventAt) -> Result<(), StoreError> {
        const CONTEXT: &str = "erasing an impression";
        let key = keys::event_key(&at.partition, at.timestamp.instant(), at.impression_id);
        // A view report's key starts with its impression's event key: these are the reports
        // of this impression at this time, a few at most (one per report id and arrival).
        let mut removals: Removals = self
            .scan(Table::ViewReport, key.clone(), None, CONTEXT)
            .await?
            .into_iter()
            .map(|(report, _)| (Table::ViewReport, report.to_vec()))
            .collect();
        removals.push((Table::Impression, key.clone()));
        removals.push((Table::ImpressionSummary, key));
        // Taken out in the commit thread, as copies are merged in: a copy of the same id
        // written meanwhile keeps its entry.
        let copy = Merged {
            table: Table::ImpressionCopy,
            key: keys::copy_prefix(&at.partition, at.impression_id),
            value: at.timestamp.epoch_millis().to_be_bytes().to_vec(),
            merge: events::remove_copy,
        };
        self.committer
            .commit_removing(CONTEXT, removals, vec![copy])
            .await?;
        self.changed([(at.partition.campaign, at.timestamp.instant())]);
        Ok(())
    }

    async fn erase_click(&self, at: &EventAt) -> Result<(), StoreError> {
        let key = keys::event_key(&at.partition, at.timestamp.instant(), at.impression_id);
        self.committer
            .commit_replacing("erasing a click", vec![(Table::Click, key)], Vec::new())
            .await?;
        self.changed([(at.partition.campaign, at.timestamp.instant())]);
        Ok(())
    }

    async fn erase_clicks_of(
        &self,
        campaign: CampaignKey,
        impression_id: ImpressionId,
    ) -> Result<(), StoreError> {
        self.remove_prefix(
            Table::ClickByImpression,
            keys::click_index_prefix(campaign, impression_id),
            "erasing an impression's clicks from the click index",
        )
        .await?;
        // The index says which click is an impression's first, whenever the clicks were.
        self.changed([(campaign, DateTime::<Utc>::MIN_UTC)]);
        Ok(())
    }

    async fn create_erasure(&self, record: &ErasureRecord) -> Result<(), StoreError> {
        let id = record.id;
        let rows = vec![
            (
                Table::Erasure,
                erasure_key(RECORD, id),
                record_value(record),
            ),
            (Table::Erasure, erasure_key(PENDING, id), Vec::new()),
            (
                Table::Erasure,
                erasure_key(SUBJECT, id),
                erased_subject_value(&record.erased_subject()),
            ),
        ];
        self.write("recording an erasure", rows).await
    }

    async fn erasure(&self, id: ErasureId) -> Result<Option<ErasureRecord>, StoreError> {
        const CONTEXT: &str = "reading an erasure";
        let (record, counts) = self
            .blocking(move |tables| {
                let table = tables.get(Table::Erasure);
                let read = |kind| {
                    table
                        .get(erasure_key(kind, id))
                        .map_err(|error| engine_error(CONTEXT, error))
                };
                Ok((read(RECORD)?, read(COUNTS)?))
            })
            .await?;
        let Some(record) = record else {
            return Ok(None);
        };
        let mut record = decode_record(id, &record).ok_or_else(|| corrupt(CONTEXT))?;
        // Settled counts live beside the record until the done form carries them.
        if record.erased.is_none() {
            record.erased = counts
                .map(|counts| decode_counts(&counts).ok_or_else(|| corrupt(CONTEXT)))
                .transpose()?;
        }
        Ok(Some(record))
    }

    async fn pending_erasures(&self) -> Result<Vec<ErasureId>, StoreError> {
        const CONTEXT: &str = "reading pending erasures";
        self.scan(Table::Erasure, vec![PENDING], None, CONTEXT)
            .await?
            .iter()
            .map(|(key, _)| decode_erasure_id(key).ok_or_else(|| corrupt(CONTEXT)))
            .collect()
    }

    async fn settle_erasure_counts(
        &self,
        id: ErasureId,
        counts: ErasedCounts,
    ) -> Result<ErasedCounts, StoreError> {
        const CONTEXT: &str = "settling an erasure's counts";
        let stored = self
            .keep_first(
                CONTEXT,
                Guarded {
                    table: Table::Erasure,
                    key: erasure_key(COUNTS, id),
                    value: counts_value(&counts),
                    keeps: keeps_counts,
                },
            )
            .await?;
        decode_counts(&stored).ok_or_else(|| corrupt(CONTEXT))
    }

    async fn finish_erasure(&self, record: &ErasureRecord) -> Result<(), StoreError> {
        // The done form never names the subject in the clear, whatever the caller passed.
        let done = ErasureRecord {
            subject: None,
            ..record.clone()
        };
        self.committer
            .commit_replacing(
                "finishing an erasure",
                vec![(Table::Erasure, erasure_key(PENDING, record.id))],
                vec![(
                    Table::Erasure,
                    erasure_key(RECORD, record.id),
                    record_value(&done),
                )],
            )
            .await
    }

    async fn erased_subjects(&self) -> Result<Vec<ErasedSubject>, StoreError> {
        const CONTEXT: &str = "reading erased subjects";
        self.scan(Table::Erasure, vec![SUBJECT], None, CONTEXT)
            .await?
            .iter()
            .map(|(key, value)| decode_erased_subject(key, value).ok_or_else(|| corrupt(CONTEXT)))
            .collect()
    }

    async fn record_erased_impressions(
        &self,
        id: ErasureId,
        hashes: &[SubjectHash],
    ) -> Result<(), StoreError> {
        // A commit at a time of bounded size: a subject may have millions of impressions, and
        // writing a row again changes nothing, so a cut-off recording is simply done again.
        for chunk in hashes.chunks(HASHES_PER_COMMIT) {
            let rows = chunk
                .iter()
                .map(|hash| {
                    let mut key = erasure_key(IMPRESSION, id);
                    key.extend_from_slice(hash.as_bytes());
                    (Table::Erasure, key, Vec::new())
                })
                .collect();
            self.write("recording an erasure's impressions", rows)
                .await?;
        }
        Ok(())
    }

    async fn erased_impressions(&self, id: ErasureId) -> Result<Vec<SubjectHash>, StoreError> {
        const CONTEXT: &str = "reading an erasure's impressions";
        let prefix = erasure_key(IMPRESSION, id);
        let skip = prefix.len();
        self.scan(Table::Erasure, prefix, None, CONTEXT)
            .await?
            .iter()
            .map(|(key, _)| {
                key.get(skip..)
                    .and_then(|hash| <[u8; 32]>::try_from(hash).ok())
                    .map(SubjectHash::new)
                    .ok_or_else(|| corrupt(CONTEXT))
            })
            .collect()
    }

    async fn privacy_key(&self, candidate: &PrivacyKey) -> Result<PrivacyKey, StoreError> {
        const CONTEXT: &str = "storing the privacy key";
        let stored = self
            .keep_first(
                CONTEXT,
                Guarded {
                    table: Table::Meta,
                    key: PRIVACY_KEY.as_bytes().to_vec(),
                    value: candidate.as_bytes().to_vec(),
                    keeps: keeps_privacy_key,
                },
            )
            .await?;
        decode_privacy_key(&stored).ok_or_else(|| corrupt(CONTEXT))
    }

    async fn read_visitor_days(&self, site: &SiteId, guid: &Guid) -> Result<Vec<Day>, StoreError> {
        const CONTEXT: &str = "reading the visitor index";
        let prefix = site_keys::visitor_prefix(site, guid.as_str());
        let prefix_len = prefix.len();
        self.scan(Table::VisitorDay, prefix, None, CONTEXT)
            .await?
            .iter()
            .map(|(key, _)| {
                key.get(prefix_len..)
                    .and_then(keys::decode_day)
                    .ok_or_else(|| corrupt(CONTEXT))
            })
            .collect()
    }

    async fn delete_visitor_days(
        &self,
        days: &[VisitorDay],
        _requested_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let removals = days
            .iter()
            .map(|entry| {
                let key = site_keys::visitor_day_key(&entry.site, entry.guid.as_str(), entry.day);
                (Table::VisitorDay, key)
            })
            .collect();
        self.committer
            .commit_replacing("deleting from the visitor index", removals, Vec::new())
            .await
    }

    async fn erase_visits(
        &self,
        partition: &VisitPartition,
        visits: &[VisitRow],
    ) -> Result<(), StoreError> {
        self.erase_visit_rows(partition, visits).await
    }

    async fn day_key(
        &self,
        day: Day,
        candidate: &PrivacyKey,
        _expires: DateTime<Utc>,
    ) -> Result<PrivacyKey, StoreError> {
        const CONTEXT: &str = "storing a day key";
        let stored = self
            .keep_first(
                CONTEXT,
                Guarded {
                    table: Table::Meta,
                    key: day_key_row(day),
                    value: candidate.as_bytes().to_vec(),
                    keeps: keeps_privacy_key,
                },
            )
            .await?;
        decode_privacy_key(&stored).ok_or_else(|| corrupt(CONTEXT))
    }

    async fn delete_day_keys(&self, before: Day) -> Result<(), StoreError> {
        const CONTEXT: &str = "deleting day keys";
        let removals: Removals = self
            .scan(Table::Meta, DAY_KEY.to_vec(), None, CONTEXT)
            .await?
            .into_iter()
            .filter(|(key, _)| {
                // A row that does not decode is no day's key: it goes too.
                key.get(DAY_KEY.len()..)
                    .and_then(keys::decode_day)
                    .is_none_or(|day| day < before)
            })
            .map(|(key, _)| (Table::Meta, key.to_vec()))
            .collect();
        if removals.is_empty() {
            return Ok(());
        }
        self.committer
            .commit_replacing(CONTEXT, removals, Vec::new())
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::bucket::BucketCount;
    use crate::domain::conversion::index::{IndexEntry, IndexedKind};
    use crate::domain::event::Click;
    use crate::domain::ids::{AdId, CampaignId};
    use crate::domain::partition::EventPartition;
    use crate::domain::time::{Day, EventTime};
    use crate::domain::user_data::UserData;
    use crate::domain::view::{Client, ViewKinds, ViewReport, ViewReportEvent};
    use crate::store::embedded::Fsync;
    use crate::store::{EventIndexStore, EventStore, SliceStore, ViewStore};
    use chrono::Utc;

    fn open(folder: &tempfile::TempDir) -> EmbeddedStore {
        EmbeddedStore::open_for_test(folder.path(), Fsync::Never)
    }

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn campaign() -> CampaignKey {
        CampaignKey {
            advertiser_id: AdvertiserId::new(id(1)),
            campaign_id: CampaignId::new(id(2)),
        }
    }

    fn partition() -> EventPartition {
        EventPartition {
            campaign: campaign(),
            day: Day::new("2026-11-28".parse().expect("date")),
            bucket: BucketCount::ONE.ids().next().expect("bucket"),
        }
    }

    fn time(text: &str) -> EventTime {
        EventTime::from_stored(text.parse().expect("time"))
    }

    fn impression(impression: u128, at: &str) -> Impression {
        Impression {
            impression_id: ImpressionId::new(id(impression)),
            campaign: campaign(),
            ad_id: AdId::new(id(3)),
            user_id: UserId::new(id(4)),
            timestamp: time(at),
            user_ip: Some("192.0.2.1".parse().expect("ip")),
            user_data: UserData::default(),
            user_agent: None,
            invalid: None,
            pixel_arrival: None,
            ip_is_viewers: true,
        }
    }

    fn at(event: &Impression) -> EventAt {
        EventAt {
            partition: partition(),
            timestamp: event.timestamp,
            impression_id: event.impression_id,
        }
    }

    fn report(event: &Impression, kinds: u8) -> ViewReportEvent {
        ViewReportEvent {
            campaign: event.campaign,
            impression_id: event.impression_id,
            impression_time: event.timestamp,
            received: event.timestamp.instant() + chrono::Duration::seconds(1),
            client: Client::default(),
            report: ViewReport {
                kinds: ViewKinds::from_bits(kinds),
                in_view_ms: None,
                max_visible: None,
            },
            invalid: None,
        }
    }

    #[tokio::test]
    async fn the_directory_reads_one_users_lines_and_deletes_them() {
        let folder = tempfile::tempdir().expect("temp dir");
        let store = open(&folder);
        let line = |user: u128, advertiser: u128, week: i32| SubjectWeek {
            user_id: UserId::new(id(user)),
            advertiser_id: AdvertiserId::new(id(advertiser)),
            week: Week::new(week),
        };
        let lines = [
            line(7, 1, 2900),
            line(7, 1, -3),
            line(7, 2, 2900),
            line(8, 1, 2900),
        ];
        store.write_subject_weeks(&lines).await.expect("written");
        store.write_subject_weeks(&lines[..1]).await.expect("again");
        let read = store
            .read_subject_weeks(UserId::new(id(7)))
            .await
            .expect("read");
        assert_eq!(read, vec![lines[1], lines[0], lines[2]]);
        store
            .delete_subject_weeks(&[lines[0], lines[2], line(9, 1, 1)])
            .await
            .expect("deleted");
        let read = store
            .read_subject_weeks(UserId::new(id(7)))
            .await
            .expect("read");
        assert_eq!(read, vec![lines[1]]);
        let other = store
            .read_subject_weeks(UserId::new(id(8)))
            .await
            .expect("read");
        assert_eq!(other, vec![lines[3]]);
    }

    #[tokio::test]
    async fn the_event_index_leads_to_a_users_weeks_of_every_advertiser() {
        let folder = tempfile::tempdir().expect("temp dir");
        let store = open(&folder);
        assert!(store.finds_subjects_itself(), "the indexer writes no lines");
        let entry = |user: u128, advertiser: u128, at: &str, impression: u128| IndexEntry {
            advertiser_id: AdvertiserId::new(id(advertiser)),
            key: IndexKey::User(UserId::new(id(user))),
            timestamp: time(at),
            kind: IndexedKind::Impression,
            impression_id: ImpressionId::new(id(impression)),
            campaign_id: CampaignId::new(id(2)),
            ad_id: AdId::new(id(3)),
            user_id: Some(UserId::new(id(user))),
            received: time("2026-11-28T12:00:00Z").instant(),
            valid: true,
        };
        let by_impression = IndexEntry {
            key: IndexKey::Impression(ImpressionId::new(id(50))),
            ..entry(9, 5, "2026-11-20T10:00:00Z", 50)
        };
        store
            .write_index(&[
                entry(7, 1, "2026-11-28T10:00:00Z", 10),
                entry(7, 1, "2026-11-28T11:00:00Z", 11),
                entry(7, 2, "2026-11-28T10:00:00Z", 12),
                // An advertiser whose id starts with 0xFF sorts after any short bound.
                entry(7, u128::MAX, "2026-11-28T10:00:00Z", 16),
                entry(7, 1, "2026-10-01T10:00:00Z", 13),
                // Other users, and an impression's own entry, lead nowhere for user 7.
                entry(8, 3, "2026-11-28T10:00:00Z", 14),
                entry(6, 4, "2026-11-10T10:00:00Z", 15),
                by_impression,
            ])
            .await
            .expect("indexed");
        // A conversion's line, in the directory.
        let conversion_line = SubjectWeek {
            user_id: UserId::new(id(7)),
            advertiser_id: AdvertiserId::new(id(6)),
            week: Week::of(time("2026-11-05T00:00:00Z").instant()),
        };
        store
            .write_subject_weeks(&[conversion_line])
            .await
            .expect("line");
        let line = |advertiser: u128, at: &str| SubjectWeek {
            user_id: UserId::new(id(7)),
            advertiser_id: AdvertiserId::new(id(advertiser)),
            week: Week::of(time(at).instant()),
        };
        let read = store
            .read_subject_weeks(UserId::new(id(7)))
            .await
            .expect("read");
        assert_eq!(
            read,
            vec![
                line(1, "2026-10-01T10:00:00Z"),
                line(1, "2026-11-28T10:00:00Z"),
                line(2, "2026-11-28T10:00:00Z"),
                conversion_line,
                line(u128::MAX, "2026-11-28T10:00:00Z"),
            ]
        );
        let none = store
            .read_subject_weeks(UserId::new(id(99)))
            .await
            .expect("read");
        assert!(none.is_empty(), "{none:?}");
    }

    #[tokio::test]
    async fn deleting_an_index_key_leaves_other_keys_and_weeks() {
        let folder = tempfile::tempdir().expect("temp dir");
        let store = open(&folder);
        let user = IndexKey::User(UserId::new(id(4)));
        let entry = |key: IndexKey, at: &str, impression: u128| IndexEntry {
            advertiser_id: AdvertiserId::new(id(1)),
            key,
            timestamp: time(at),
            kind: IndexedKind::Impression,
            impression_id: ImpressionId::new(id(impression)),
            campaign_id: CampaignId::new(id(2)),
            ad_id: AdId::new(id(3)),
            user_id: Some(UserId::new(id(4))),
            received: time("2026-11-28T12:00:00Z").instant(),
            valid: true,
        };
        let entries = [
            entry(user, "2026-11-28T10:00:00Z", 10),
            entry(user, "2026-11-28T11:00:00Z", 11),
            entry(
                IndexKey::Impression(ImpressionId::new(id(10))),
                "2026-11-28T10:00:00Z",
                10,
            ),
            entry(user, "2026-11-01T10:00:00Z", 12),
        ];
        store.write_index(&entries).await.expect("written");
        let advertiser = AdvertiserId::new(id(1));
        let week = entries[0].week();
        store
            .delete_index_key(advertiser, week, user)
            .await
            .expect("deleted");
        store
            .delete_index_key(advertiser, week, user)
            .await
            .expect("deleted again");
        assert!(
            store
                .read_index(advertiser, week, user)
                .await
                .expect("read")
                .is_empty()
        );
        let by_impression = store
            .read_index(advertiser, week, entries[2].key)
            .await
            .expect("read");
        assert_eq!(by_impression, vec![entries[2].clone()]);
        let earlier = store
            .read_index(advertiser, entries[3].week(), user)
            .await
            .expect("read");
        assert_eq!(earlier, vec![entries[3].clone()]);
    }

    /// Erasing one copy of an impression takes its rows and reports, and its entry in the
    /// copies index; the other copy and other impressions stay.
    #[tokio::test]
    async fn erasing_an_impression_copy_takes_its_rows_only() {
        let folder = tempfile::tempdir().expect("temp dir");
        let store = open(&folder);
        let partition = partition();
        let first = impression(10, "2026-11-28T10:00:00Z");
        let second = impression(10, "2026-11-28T10:05:00Z");
        let other = impression(11, "2026-11-28T10:00:00Z");
        for event in [&first, &second, &other] {
            store
                .write_impressions(&partition, std::slice::from_ref(event))
                .await
                .expect("written");
        }
        let reports = [
            report(&first, 1),
            report(&first, 3),
            report(&second, 1),
            report(&other, 1),
        ];
        store
            .write_view_reports(&partition, &reports)
            .await
            .expect("written");
        let read = store.read_impression_at(&at(&first)).await.expect("read");
        assert_eq!(read, Some(first.clone()));

        store.erase_impression(&at(&first)).await.expect("erased");
        assert_eq!(
            store.read_impression_at(&at(&first)).await.expect("read"),
            None
        );
        let mut thin: Vec<_> = store
            .read_impression_summaries(&partition)
            .await
            .expect("read")
            .iter()
            .map(|row| (row.impression_id, row.timestamp))
            .collect();
        thin.sort();
        let expected = vec![
            (first.impression_id, second.timestamp),
            (other.impression_id, other.timestamp),
        ];
        assert_eq!(thin, expected);
        let copies = store
            .impression_copies(&partition, &[first.impression_id])
            .await
            .expect("read");
        assert_eq!(copies.len(), 1);
        assert_eq!(copies[0].timestamp, second.timestamp);
        let left: Vec<_> = store
            .read_view_reports(&partition, None)
            .await
            .expect("read")
            .iter()
            .map(|report| (report.impression_id, report.impression_time))
            .collect();
        assert_eq!(left.len(), 2);
        assert!(!left.contains(&(first.impression_id, first.timestamp)));

        store.erase_impression(&at(&second)).await.expect("erased");
        store.erase_impression(&at(&second)).await.expect("again");
        let copy_row = store
            .tables
            .impression_copy
            .get(keys::copy_prefix(&partition, first.impression_id))
            .expect("read");
        assert!(copy_row.is_none(), "the last copy takes its row with it");
        let full = store
            .read_newest_impressions(&partition, 10)
            .await
            .expect("read");
        assert_eq!(full, vec![other.clone()]);
        let reports = store
            .read_view_reports(&partition, None)
            .await
            .expect("read");
        assert_eq!(reports.len(), 1);
        assert_eq!(reports[0].impression_id, other.impression_id);
    }

    #[tokio::test]
    async fn clicks_go_from_their_partition_and_from_the_click_index() {
        let folder = tempfile::tempdir().expect("temp dir");
        let store = open(&folder);
        let partition = partition();
        let click = |impression: u128| Click {
            impression_id: ImpressionId::new(id(impression)),
            campaign: campaign(),
            ad_id: AdId::new(id(3)),
            timestamp: time("2026-11-28T10:01:00Z"),
            user_agent: None,
            invalid: None,
        };
        let (erased, kept) = (click(10), click(11));
        store
            .write_clicks(&partition, &[erased.clone(), kept.clone()])
            .await
            .expect("written");
        let place = EventAt {
            partition,
            timestamp: erased.timestamp,
            impression_id: erased.impression_id,
        };
        store.erase_click(&place).await.expect("erased");
        store.erase_click(&place).await.expect("again");
        let clicks = store.read_clicks(&partition).await.expect("read");
        assert_eq!(clicks.len(), 1);
        assert_eq!(clicks[0].impression_id, kept.impression_id);
        store
            .erase_clicks_of(campaign(), erased.impression_id)
            .await
            .expect("erased");
        let index = store
            .clicks_of(campaign(), erased.impression_id)
            .await
            .expect("read");
        assert!(index.is_empty());
        let index = store
            .clicks_of(campaign(), kept.impression_id)
            .await
            .expect("read");
        assert_eq!(index.len(), 1);
    }

    #[tokio::test]
    async fn an_erasures_impressions_are_recorded_over_several_commits_and_read_back_apart() {
        let folder = tempfile::tempdir().expect("temp dir");
        let store = open(&folder);
        let (one, other) = (ErasureId::new(id(1)), ErasureId::new(id(2)));
        let hash = |n: u32| {
            let mut bytes = [0; 32];
            bytes[..4].copy_from_slice(&n.to_be_bytes());
            SubjectHash::new(bytes)
        };
        let many: Vec<SubjectHash> = (0..25_000).map(hash).collect();
        store
            .record_erased_impressions(one, &many)
            .await
            .expect("recorded");
        // Recorded again after a restart: the same rows.
        store
            .record_erased_impressions(one, &many[..10])
            .await
            .expect("again");
        store
            .record_erased_impressions(other, &[hash(7)])
            .await
            .expect("recorded");
        let mut read = store.erased_impressions(one).await.expect("read");
        read.sort();
        assert_eq!(read, many);
        assert_eq!(
            store.erased_impressions(other).await.expect("read"),
            vec![hash(7)]
        );
    }

    #[tokio::test]
    async fn an_erasure_settles_its_counts_once_and_its_done_form_forgets_the_subject() {
        let folder = tempfile::tempdir().expect("temp dir");
        let store = open(&folder);
        let user = UserId::new(id(0xfeed_beef));
        let record = ErasureRecord::requested(
            Subject::User(user),
            SubjectHash::new([9; 32]),
            Some(AdvertiserId::new(id(1))),
            "2026-11-28T12:00:00.123Z".parse().expect("time"),
        );
        store.create_erasure(&record).await.expect("created");
        assert_eq!(
            store.erasure(record.id).await.expect("read"),
            Some(record.clone())
        );
        assert_eq!(
            store.erasure(ErasureId::generate()).await.expect("read"),
            None
        );
        assert_eq!(
            store.pending_erasures().await.expect("read"),
            vec![record.id]
        );
        assert_eq!(
            store.erased_subjects().await.expect("read"),
            vec![record.erased_subject()]
        );

        let counts = |impressions| ErasedCounts {
            impressions,
            clicks: 2,
            ..ErasedCounts::default()
        };
        let settled: Vec<_> = futures::future::join_all(
            (1..=4).map(|n| store.settle_erasure_counts(record.id, counts(n))),
        )
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .expect("settled");
        assert!(
            settled.iter().all(|each| *each == settled[0]),
            "{settled:?}"
        );
        let later = store
            .settle_erasure_counts(record.id, counts(99))
            .await
            .expect("settled");
        assert_eq!(later, settled[0]);
        let read = store
            .erasure(record.id)
            .await
            .expect("read")
            .expect("stored");
        assert_eq!(read.erased, Some(settled[0]));

        let done = read.done(settled[0], Utc::now());
        store.finish_erasure(&done).await.expect("finished");
        store.finish_erasure(&done).await.expect("again");
        let read = store
            .erasure(record.id)
            .await
            .expect("read")
            .expect("stored");
        assert_eq!(read.status, ErasureStatus::Done);
        assert_eq!(read.subject, None);
        assert_eq!(read.subject_hash, record.subject_hash);
        assert_eq!(read.erased, Some(settled[0]));
        let stored = store
            .tables
            .erasure
            .get(erasure_key(RECORD, record.id))
            .expect("read")
            .expect("stored");
        assert!(
            !stored
                .windows(16)
                .any(|bytes| bytes == user.as_uuid().as_bytes()),
            "the done record holds no user id"
        );
        assert!(store.pending_erasures().await.expect("read").is_empty());
        assert_eq!(
            store.erased_subjects().await.expect("read"),
            vec![record.erased_subject()]
        );
    }

    #[tokio::test]
    async fn the_first_privacy_key_stays() {
        let folder = tempfile::tempdir().expect("temp dir");
        let store = open(&folder);
        let first = store
            .privacy_key(&PrivacyKey::new([1; 32]))
            .await
            .expect("stored");
        assert_eq!(first.as_bytes(), &[1; 32]);
        let second = store
            .privacy_key(&PrivacyKey::new([2; 32]))
            .await
            .expect("stored");
        assert_eq!(second.as_bytes(), &[1; 32]);
    }
}
