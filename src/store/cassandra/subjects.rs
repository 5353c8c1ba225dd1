//! Personal data in the cassandra store: the subject directory, one subject's rows read and
//! deleted by their keys, and erasure records (see [`SubjectStore`]).

use super::CassandraStore;
use crate::domain::conversion::index::{IndexKey, Week};
use crate::domain::event::Impression;
use crate::domain::ids::{AdvertiserId, CampaignKey, ImpressionId, UserId};
use crate::domain::privacy::{
    ErasedCounts, ErasedSubject, ErasureId, ErasureRecord, PrivacyKey, SubjectWeek,
};
use crate::store::{EventAt, StoreError, SubjectStore};
use async_trait::async_trait;

#[async_trait]
impl SubjectStore for CassandraStore {
    async fn write_subject_weeks(&self, _weeks: &[SubjectWeek]) -> Result<(), StoreError> {
        todo!()
    }

    async fn read_subject_weeks(&self, _user: UserId) -> Result<Vec<SubjectWeek>, StoreError> {
        todo!()
    }

    async fn delete_subject_weeks(&self, _weeks: &[SubjectWeek]) -> Result<(), StoreError> {
        todo!()
    }

    async fn delete_index_key(
        &self,
        _advertiser: AdvertiserId,
        _week: Week,
        _key: IndexKey,
    ) -> Result<(), StoreError> {
        todo!()
    }

    async fn read_impression_at(&self, _at: &EventAt) -> Result<Option<Impression>, StoreError> {
        todo!()
    }

    async fn erase_impression(&self, _at: &EventAt) -> Result<(), StoreError> {
        todo!()
    }

    async fn erase_click(&self, _at: &EventAt) -> Result<(), StoreError> {
        todo!()
    }

    async fn erase_clicks_of(
        &self,
        _campaign: CampaignKey,
        _impression_id: ImpressionId,
    ) -> Result<(), StoreError> {
        todo!()
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
