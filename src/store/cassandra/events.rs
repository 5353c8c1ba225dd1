//! Impressions and clicks on Cassandra: the raw tables, the thin `impression_summary` and the
//! click index. Writes live in [`super::event_writes`], reads in [`super::event_reads`], their
//! prepared statements in [`super::event_statements`].

use super::{CassandraStore, event_reads, event_writes};
use crate::domain::event::{Click, Impression};
use crate::domain::ids::{CampaignKey, ImpressionId};
use crate::domain::partition::EventPartition;
use crate::domain::time::EventTime;
use crate::store::{
    ClickRow, EventStore, ImpressionPage, ImpressionSummaryRow, PageCursor, StoreError,
};
use async_trait::async_trait;

#[async_trait]
impl EventStore for CassandraStore {
    async fn write_impressions(
        &self,
        partition: &EventPartition,
        impressions: &[Impression],
    ) -> Result<Vec<EventTime>, StoreError> {
        let statements = &self.prepared().await?.events;
        event_writes::write_impressions(
            &self.writer(statements, partition.day),
            partition,
            impressions,
        )
        .await?;
        Ok(Vec::new())
    }

    async fn write_clicks(
        &self,
        partition: &EventPartition,
        clicks: &[Click],
    ) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.events;
        event_writes::write_clicks(&self.writer(statements, partition.day), partition, clicks).await
    }

    async fn read_impression_summaries(
        &self,
        partition: &EventPartition,
    ) -> Result<Vec<ImpressionSummaryRow>, StoreError> {
        let statements = &self.prepared().await?.events;
        event_reads::impression_summaries(&self.session, statements, partition).await
    }

    async fn read_impression_page(
        &self,
        partition: &EventPartition,
        cursor: Option<PageCursor>,
    ) -> Result<ImpressionPage, StoreError> {
        let statements = &self.prepared().await?.events;
        event_reads::impression_page(&self.session, statements, partition, cursor).await
    }

    async fn read_newest_impressions(
        &self,
        partition: &EventPartition,
        limit: usize,
    ) -> Result<Vec<Impression>, StoreError> {
        let statements = &self.prepared().await?.events;
        event_reads::newest_impressions(&self.session, statements, partition, limit).await
    }

    async fn read_clicks(&self, partition: &EventPartition) -> Result<Vec<ClickRow>, StoreError> {
        let statements = &self.prepared().await?.events;
        event_reads::clicks(&self.session, statements, partition).await
    }

    async fn first_click(
        &self,
        campaign: CampaignKey,
        impression_id: ImpressionId,
    ) -> Result<Option<ClickRow>, StoreError> {
        let statements = &self.prepared().await?.events;
        event_reads::first_click(&self.session, statements, campaign, impression_id).await
    }
}
