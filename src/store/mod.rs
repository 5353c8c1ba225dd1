//! The storage contract the service is written against, and its implementations.
//!
//! Everything above this module (HTTP, ingestion, query planning and aggregation) holds an
//! `Arc<dyn Store>` and speaks in domain terms; no driver type crosses this boundary. The
//! contract is partition-level: write rows into one partition, read one partition's rows.
//! Which partitions, how many at once, and what the rows add up to is decided above it, once,
//! for every store. The store decides which of its failures are worth a retry
//! ([`StoreError::is_retryable`]).

pub mod cassandra;
pub mod embedded;
mod error;
pub mod instrumented;
mod rows;

pub use error::StoreError;
pub use rows::{
    ClickRow, ImpressionPage, ImpressionSummaryRow, PageCursor, ReachLevel, Rollup, RollupReach,
    RollupSlice, SealState, SiteRollup, SketchPartition, SketchRow, VisitRow,
};

use crate::domain::beacon::{Beacon, SiteId, VisitPartition};
use crate::domain::campaign::{CampaignSettings, SettingsHistory};
use crate::domain::event::{Click, Impression};
use crate::domain::ids::{CampaignKey, ImpressionId};
use crate::domain::partition::EventPartition;
use crate::domain::time::Day;
use async_trait::async_trait;

/// A place events are kept.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Succeeds when the store answers requests and its schema is the one this build expects:
    /// what `/readyz` reports to a load balancer.
    async fn check_ready(&self) -> Result<(), StoreError>;

    /// Writes impressions that all belong to `partition`: the full row and the thin summary
    /// row of each. Idempotent: writing the same impression again overwrites it.
    async fn write_impressions(
        &self,
        partition: EventPartition,
        impressions: &[Impression],
    ) -> Result<(), StoreError>;

    /// Writes clicks that all belong to `partition`, and each one into its impression's click
    /// index. Idempotent.
    async fn write_clicks(
        &self,
        partition: EventPartition,
        clicks: &[Click],
    ) -> Result<(), StoreError>;

    /// Every impression of one partition, thin form, in no promised order.
    async fn read_impression_summaries(
        &self,
        partition: EventPartition,
    ) -> Result<Vec<ImpressionSummaryRow>, StoreError>;

    /// One page (a few thousand rows) of a partition's full impressions, oldest first.
    /// `cursor` is the previous page's `next`, `None` for the first page.
    async fn read_impression_page(
        &self,
        partition: EventPartition,
        cursor: Option<PageCursor>,
    ) -> Result<ImpressionPage, StoreError>;

    /// The newest `limit` full impressions of one partition, newest first.
    async fn read_newest_impressions(
        &self,
        partition: EventPartition,
        limit: usize,
    ) -> Result<Vec<Impression>, StoreError>;

    /// Every click of one partition, in no promised order.
    async fn read_clicks(&self, partition: EventPartition) -> Result<Vec<ClickRow>, StoreError>;

    /// The earliest click ever stored for an impression.
    async fn first_click(
        &self,
        campaign: CampaignKey,
        impression_id: ImpressionId,
    ) -> Result<Option<ClickRow>, StoreError>;

    /// Every configuration the campaign ever had (empty when never configured).
    async fn campaign_settings(&self, campaign: CampaignKey)
    -> Result<SettingsHistory, StoreError>;

    /// Records a configuration taking effect at `settings.effective_from`; one at the same
    /// instant is replaced.
    async fn put_campaign_settings(
        &self,
        campaign: CampaignKey,
        settings: &CampaignSettings,
    ) -> Result<(), StoreError>;

    /// Writes beacons that all belong to `partition`. Idempotent: a beacon is its site, guid,
    /// timestamp and features, and re-writing one overwrites it.
    async fn write_visits(
        &self,
        partition: &VisitPartition,
        visits: &[Beacon],
    ) -> Result<(), StoreError>;

    /// Every beacon of one partition, in no promised order.
    async fn read_visits(&self, partition: &VisitPartition) -> Result<Vec<VisitRow>, StoreError>;

    /// Every configuration the site ever had (empty when never configured).
    async fn site_settings(&self, site: &SiteId) -> Result<SettingsHistory, StoreError>;

    /// Records a site configuration (only `buckets` and `effective_from` apply to sites).
    async fn put_site_settings(
        &self,
        site: &SiteId,
        settings: &CampaignSettings,
    ) -> Result<(), StoreError>;

    /// Writes writers' absolute sketch states into one sketch partition.
    async fn write_sketches(
        &self,
        partition: &SketchPartition,
        rows: &[SketchRow],
    ) -> Result<(), StoreError>;

    /// Every writer's sketch of every hour of one sketch partition.
    async fn read_sketches(
        &self,
        partition: &SketchPartition,
    ) -> Result<Vec<SketchRow>, StoreError>;

    /// Records that `site` received beacons for UTC `day` (the day index). Idempotent.
    async fn mark_site_day(&self, day: Day, site: &SiteId) -> Result<(), StoreError>;

    /// The sites that received beacons for UTC `day`.
    async fn sites_of_day(&self, day: Day) -> Result<Vec<SiteId>, StoreError>;

    /// Records that `campaign` received events for UTC `day` (the day index). Idempotent.
    async fn mark_campaign_day(&self, day: Day, campaign: CampaignKey) -> Result<(), StoreError>;

    /// The campaigns that received events for UTC `day`.
    async fn campaigns_of_day(&self, day: Day) -> Result<Vec<CampaignKey>, StoreError>;

    /// Records that an event older than the grace period arrived `at` for a campaign-day, so
    /// its rollup stops answering until the day is sealed again.
    async fn mark_late(
        &self,
        campaign: CampaignKey,
        day: Day,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError>;

    async fn seal_state(&self, campaign: CampaignKey, day: Day) -> Result<SealState, StoreError>;

    /// Stores a campaign-day's rollup, then marks it sealed from `read_started` (the rollup
    /// rows first, so a half-written rollup is never taken for a sealed one). Idempotent.
    async fn write_rollup(
        &self,
        campaign: CampaignKey,
        day: Day,
        rollup: &Rollup,
        read_started: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError>;

    /// A sealed campaign-day's slices and its users sketches of the `reach` levels.
    async fn read_rollup(
        &self,
        campaign: CampaignKey,
        day: Day,
        reach: &[ReachLevel],
    ) -> Result<Rollup, StoreError>;

    /// As [`mark_late`](Self::mark_late), for a site-day.
    async fn mark_site_late(
        &self,
        site: &SiteId,
        day: Day,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError>;

    async fn site_seal_state(&self, site: &SiteId, day: Day) -> Result<SealState, StoreError>;

    /// Stores a site-day's rollup, one entry per feature combination, then marks it sealed
    /// from `read_started`. Idempotent.
    async fn write_site_rollup(
        &self,
        site: &SiteId,
        day: Day,
        combinations: &[(String, SiteRollup)],
        read_started: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError>;

    /// One feature combination of a sealed site-day (`partition` names site, day and
    /// combination).
    async fn read_site_rollup(&self, partition: &SketchPartition)
    -> Result<SiteRollup, StoreError>;
}
