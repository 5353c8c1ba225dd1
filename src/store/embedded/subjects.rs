//! Personal data in the embedded store: the subject directory, one subject's rows read and
//! deleted by their keys, and erasure records (see [`SubjectStore`]).
//!
//! The directory (`subject_week`) is keyed by user (16 bytes), advertiser (16) and week (4, in
//! key order) with no value, so a user's lines are one prefix.

use super::EmbeddedStore;
use super::committer::{Merged, Removals};
use super::engine::{Table, corrupt, engine_error};
use super::{event_index, events, keys};
use crate::domain::conversion::index::{IndexKey, Week};
use crate::domain::event::Impression;
use crate::domain::ids::{AdvertiserId, CampaignKey, ImpressionId, UserId};
use crate::domain::privacy::{
    ErasedCounts, ErasedSubject, ErasureId, ErasureRecord, PrivacyKey, SubjectWeek,
};
use crate::store::{EventAt, StoreError, SubjectStore};
use async_trait::async_trait;
use uuid::Uuid;

/// Rows a prefix delete removes per commit: a user's week of a busy advertiser may index
/// millions of events, and one commit must not hold them all in memory.
const DELETES_PER_COMMIT: usize = 20_000;

/// User (16), advertiser (16), week (4).
fn subject_week_key(line: &SubjectWeek) -> Vec<u8> {
    let mut key = line.user_id.as_uuid().as_bytes().to_vec();
    key.extend_from_slice(line.advertiser_id.as_uuid().as_bytes());
    key.extend_from_slice(&keys::week_bytes(line.week));
    key
}

fn decode_subject_week(key: &[u8]) -> Option<SubjectWeek> {
    Some(SubjectWeek {
        user_id: UserId::new(Uuid::from_slice(key.get(..16)?).ok()?),
        advertiser_id: AdvertiserId::new(Uuid::from_slice(key.get(16..32)?).ok()?),
        week: keys::decode_week(key.get(32..)?)?,
    })
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

    async fn read_subject_weeks(&self, user: UserId) -> Result<Vec<SubjectWeek>, StoreError> {
        const CONTEXT: &str = "reading the subject directory";
        self.scan(
            Table::SubjectWeek,
            user.as_uuid().as_bytes().to_vec(),
            None,
            CONTEXT,
        )
        .await?
        .iter()
        .map(|(key, _)| decode_subject_week(key).ok_or_else(|| corrupt(CONTEXT)))
        .collect()
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
            .await
    }

    async fn erase_click(&self, at: &EventAt) -> Result<(), StoreError> {
        let key = keys::event_key(&at.partition, at.timestamp.instant(), at.impression_id);
        self.committer
            .commit_replacing("erasing a click", vec![(Table::Click, key)], Vec::new())
            .await
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
        .await
    }
    async fn create_erasure(&self, _record: &ErasureRecord) -> Result<(), StoreError> {
        todo!()
    }

    async fn erasure(&self, _id: ErasureId) -> Result<Option<ErasureRecord>, StoreError> {
        todo!()
    }

    async fn pending_erasures(&self) -> Result<Vec<ErasureId>, StoreError> {
        todo!()
    }

    async fn settle_erasure_counts(
        &self,
        _id: ErasureId,
        _counts: ErasedCounts,
    ) -> Result<ErasedCounts, StoreError> {
        todo!()
    }

    async fn finish_erasure(&self, _record: &ErasureRecord) -> Result<(), StoreError> {
        todo!()
    }

    async fn erased_subjects(&self) -> Result<Vec<ErasedSubject>, StoreError> {
        todo!()
    }

    async fn privacy_key(&self, _candidate: &PrivacyKey) -> Result<PrivacyKey, StoreError> {
        todo!()
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
    use crate::store::embedded::{EmbeddedConfig, EngineMemory, Fsync};
    use crate::store::{EventIndexStore, EventStore, SliceStore, ViewStore};

    fn open(folder: &tempfile::TempDir) -> EmbeddedStore {
        EmbeddedStore::open(&EmbeddedConfig {
            data_dir: folder.path().to_owned(),
            fsync: Fsync::Never,
            memory: EngineMemory::default(),
        })
        .expect("opened")
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
}
