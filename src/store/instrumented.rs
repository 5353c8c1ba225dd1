//! A [`Store`] wrapper that times every call into the `adevents_store_call_duration_seconds`
//! histogram, labelled by operation and outcome, whichever store is underneath.

use super::{
    ClickRow, ImpressionPage, ImpressionSummaryRow, PageCursor, ReachLevel, Rollup, SealState,
    SiteRollup, SketchPartition, SketchRow, Store, StoreError, VisitRow,
};
use crate::domain::beacon::{Beacon, SiteId, VisitPartition};
use crate::domain::campaign::{CampaignSettings, SettingsHistory};
use crate::domain::event::{Click, Impression};
use crate::domain::ids::{CampaignKey, ImpressionId};
use crate::domain::partition::EventPartition;
use crate::domain::time::Day;
use async_trait::async_trait;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

pub struct Instrumented {
    inner: Arc<dyn Store>,
}

impl Instrumented {
    pub fn new(inner: Arc<dyn Store>) -> Self {
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
impl Store for Instrumented {
    async fn check_ready(&self) -> Result<(), StoreError> {
        timed("check_ready", self.inner.check_ready()).await
    }

    async fn write_impressions(
        &self,
        partition: EventPartition,
        impressions: &[Impression],
    ) -> Result<(), StoreError> {
        timed(
            "write_impressions",
            self.inner.write_impressions(partition, impressions),
        )
        .await
    }

    async fn write_clicks(
        &self,
        partition: EventPartition,
        clicks: &[Click],
    ) -> Result<(), StoreError> {
        timed("write_clicks", self.inner.write_clicks(partition, clicks)).await
    }

    async fn read_impression_summaries(
        &self,
        partition: EventPartition,
    ) -> Result<Vec<ImpressionSummaryRow>, StoreError> {
        timed(
            "read_impression_summaries",
            self.inner.read_impression_summaries(partition),
        )
        .await
    }

    async fn read_impression_page(
        &self,
        partition: EventPartition,
        cursor: Option<PageCursor>,
    ) -> Result<ImpressionPage, StoreError> {
        timed(
            "read_impression_page",
            self.inner.read_impression_page(partition, cursor),
        )
        .await
    }

    async fn read_newest_impressions(
        &self,
        partition: EventPartition,
        limit: usize,
    ) -> Result<Vec<Impression>, StoreError> {
        timed(
            "read_newest_impressions",
            self.inner.read_newest_impressions(partition, limit),
        )
        .await
    }

    async fn read_clicks(&self, partition: EventPartition) -> Result<Vec<ClickRow>, StoreError> {
        timed("read_clicks", self.inner.read_clicks(partition)).await
    }

    async fn first_click(
        &self,
        campaign: CampaignKey,
        impression_id: ImpressionId,
    ) -> Result<Option<ClickRow>, StoreError> {
        timed(
            "first_click",
            self.inner.first_click(campaign, impression_id),
        )
        .await
    }

    async fn campaign_settings(
        &self,
        campaign: CampaignKey,
    ) -> Result<SettingsHistory, StoreError> {
        timed("campaign_settings", self.inner.campaign_settings(campaign)).await
    }

    async fn put_campaign_settings(
        &self,
        campaign: CampaignKey,
        settings: &CampaignSettings,
    ) -> Result<(), StoreError> {
        timed(
            "put_campaign_settings",
            self.inner.put_campaign_settings(campaign, settings),
        )
        .await
    }

    async fn write_visits(
        &self,
        partition: &VisitPartition,
        visits: &[Beacon],
    ) -> Result<(), StoreError> {
        timed("write_visits", self.inner.write_visits(partition, visits)).await
    }

    async fn read_visits(&self, partition: &VisitPartition) -> Result<Vec<VisitRow>, StoreError> {
        timed("read_visits", self.inner.read_visits(partition)).await
    }

    async fn site_settings(&self, site: &SiteId) -> Result<SettingsHistory, StoreError> {
        timed("site_settings", self.inner.site_settings(site)).await
    }

    async fn put_site_settings(
        &self,
        site: &SiteId,
        settings: &CampaignSettings,
    ) -> Result<(), StoreError> {
        timed(
            "put_site_settings",
            self.inner.put_site_settings(site, settings),
        )
        .await
    }

    async fn write_sketches(
        &self,
        partition: &SketchPartition,
        rows: &[SketchRow],
    ) -> Result<(), StoreError> {
        timed("write_sketches", self.inner.write_sketches(partition, rows)).await
    }

    async fn read_sketches(
        &self,
        partition: &SketchPartition,
    ) -> Result<Vec<SketchRow>, StoreError> {
        timed("read_sketches", self.inner.read_sketches(partition)).await
    }

    async fn mark_site_day(&self, day: Day, site: &SiteId) -> Result<(), StoreError> {
        timed("mark_site_day", self.inner.mark_site_day(day, site)).await
    }

    async fn sites_of_day(&self, day: Day) -> Result<Vec<SiteId>, StoreError> {
        timed("sites_of_day", self.inner.sites_of_day(day)).await
    }

    async fn mark_campaign_day(&self, day: Day, campaign: CampaignKey) -> Result<(), StoreError> {
        timed(
            "mark_campaign_day",
            self.inner.mark_campaign_day(day, campaign),
        )
        .await
    }

    async fn campaigns_of_day(&self, day: Day) -> Result<Vec<CampaignKey>, StoreError> {
        timed("campaigns_of_day", self.inner.campaigns_of_day(day)).await
    }

    async fn mark_late(
        &self,
        campaign: CampaignKey,
        day: Day,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        timed("mark_late", self.inner.mark_late(campaign, day, at)).await
    }

    async fn seal_state(&self, campaign: CampaignKey, day: Day) -> Result<SealState, StoreError> {
        timed("seal_state", self.inner.seal_state(campaign, day)).await
    }

    async fn write_rollup(
        &self,
        campaign: CampaignKey,
        day: Day,
        rollup: &Rollup,
        read_started: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        timed(
            "write_rollup",
            self.inner.write_rollup(campaign, day, rollup, read_started),
        )
        .await
    }

    async fn read_rollup(
        &self,
        campaign: CampaignKey,
        day: Day,
        reach: &[ReachLevel],
    ) -> Result<Rollup, StoreError> {
        timed("read_rollup", self.inner.read_rollup(campaign, day, reach)).await
    }

    async fn mark_site_late(
        &self,
        site: &SiteId,
        day: Day,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        timed("mark_site_late", self.inner.mark_site_late(site, day, at)).await
    }

    async fn site_seal_state(&self, site: &SiteId, day: Day) -> Result<SealState, StoreError> {
        timed("site_seal_state", self.inner.site_seal_state(site, day)).await
    }

    async fn write_site_rollup(
        &self,
        site: &SiteId,
        day: Day,
        combinations: &[(String, SiteRollup)],
        read_started: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        timed(
            "write_site_rollup",
            self.inner
                .write_site_rollup(site, day, combinations, read_started),
        )
        .await
    }

    async fn read_site_rollup(
        &self,
        partition: &SketchPartition,
    ) -> Result<SiteRollup, StoreError> {
        timed("read_site_rollup", self.inner.read_site_rollup(partition)).await
    }
}
