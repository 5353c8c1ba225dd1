//! The production store: Apache Cassandra 4.1+/5.0 or ScyllaDB through the `scylla` driver.
//!
//! Every table name is qualified with the configured keyspace, so statements never depend on
//! a session-wide `USE`, and the store can start before its keyspace exists (and report
//! "not ready" until migrations create it).

pub mod config;
mod errors;
mod exports;
pub mod migrator;
mod reads;
mod rollups;
mod session;
mod site_rollups;
mod sites;
mod statements;
mod writes;

use crate::domain::beacon::{Beacon, SiteId, VisitPartition};
use crate::domain::campaign::{CampaignSettings, SettingsHistory};
use crate::domain::event::{Click, Impression};
use crate::domain::ids::{CampaignKey, ImpressionId};
use crate::domain::partition::EventPartition;
use crate::domain::time::Day;
use crate::migrations::Migration;
use crate::store::{
    ClickRow, ImpressionPage, ImpressionSummaryRow, PageCursor, ReachLevel, Rollup, SealState,
    SiteRollup, SketchPartition, SketchRow, Store, StoreError, VisitRow,
};
use async_trait::async_trait;
use config::{CassandraConfig, KeyspaceName};
use exports::ExportStatements;
use migrator::{MigrateError, MigrationReport};
use rollups::RollupStatements;
use scylla::client::session::Session;
use scylla::statement::unprepared::Statement;
use site_rollups::SiteRollupStatements;
use sites::SiteStatements;
use statements::Statements;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::OnceCell;

/// Cassandra refuses a TTL above 20 years.
const MAX_TTL_SECONDS: i32 = 630_720_000;

/// A readiness probe answers quickly or not at all: a load balancer asks again soon.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// The store on a Cassandra or ScyllaDB cluster.
pub struct CassandraStore {
    session: Arc<Session>,
    config: CassandraConfig,
    /// The newest migration this build expects, which readiness checks for.
    latest_migration: Option<Migration>,
    /// Prepared once, at start-up after migrations ([`prepare`](Self::prepare)), or by the
    /// first request if the schema was not there yet.
    statements: OnceCell<Statements>,
    site_statements: OnceCell<SiteStatements>,
    rollup_statements: OnceCell<RollupStatements>,
    export_statements: OnceCell<ExportStatements>,
    site_rollup_statements: OnceCell<SiteRollupStatements>,
    /// Seconds for `USING TTL` (0: never expire).
    ttl_seconds: i32,
}

impl CassandraStore {
    /// Connects to the cluster; `migrations` is the schema this build expects.
    pub async fn connect(
        config: CassandraConfig,
        migrations: &[Migration],
    ) -> Result<Self, StoreError> {
        let session = session::connect(&config).await?;
        let ttl_seconds = match config.retention {
            None => 0,
            Some(retention) => i32::try_from(retention.as_secs().max(1))
                .ok()
                .filter(|ttl| *ttl <= MAX_TTL_SECONDS)
                .ok_or_else(|| {
                    StoreError::Internal(
                        "--retention is longer than Cassandra's TTL limit of 20 years; \
                         leave it unset to keep events forever"
                            .into(),
                    )
                })?,
        };
        Ok(Self {
            session: Arc::new(session),
            config,
            latest_migration: migrations.last().cloned(),
            statements: OnceCell::new(),
            site_statements: OnceCell::new(),
            rollup_statements: OnceCell::new(),
            export_statements: OnceCell::new(),
            site_rollup_statements: OnceCell::new(),
            ttl_seconds,
        })
    }

    /// Prepares every hot-path statement; fails while the schema is missing.
    pub async fn prepare(&self) -> Result<(), StoreError> {
        self.statements().await?;
        self.site_statements().await?;
        self.rollup_statements().await?;
        self.export_statements().await?;
        self.site_rollup_statements().await.map(|_| ())
    }

    async fn site_rollup_statements(&self) -> Result<&SiteRollupStatements, StoreError> {
        self.site_rollup_statements
            .get_or_try_init(|| SiteRollupStatements::prepare(&self.session, &self.config.keyspace))
            .await
    }

    async fn export_statements(&self) -> Result<&ExportStatements, StoreError> {
        self.export_statements
            .get_or_try_init(|| ExportStatements::prepare(&self.session, &self.config.keyspace))
            .await
    }

    async fn rollup_statements(&self) -> Result<&RollupStatements, StoreError> {
        self.rollup_statements
            .get_or_try_init(|| RollupStatements::prepare(&self.session, &self.config.keyspace))
            .await
    }

    async fn site_statements(&self) -> Result<&SiteStatements, StoreError> {
        self.site_statements
            .get_or_try_init(|| SiteStatements::prepare(&self.session, &self.config.keyspace))
            .await
    }

    async fn statements(&self) -> Result<&Statements, StoreError> {
        self.statements
            .get_or_try_init(|| Statements::prepare(&self.session, &self.config.keyspace))
            .await
    }

    /// The driver session, for benchmarks that compare the service with raw driver calls.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    pub fn keyspace(&self) -> &KeyspaceName {
        &self.config.keyspace
    }

    /// Creates the keyspace if needed and applies the pending `migrations`.
    pub async fn migrate(&self, migrations: &[Migration]) -> Result<MigrationReport, MigrateError> {
        migrator::migrate(
            &self.session,
            &self.config.keyspace,
            &self.config.replication,
            migrations,
        )
        .await
    }
}

#[async_trait]
impl Store for CassandraStore {
    async fn check_ready(&self) -> Result<(), StoreError> {
        let Some(latest) = &self.latest_migration else {
            return Ok(());
        };
        // Migrations apply in order, so the newest one recorded with its checksum vouches for
        // all before it. One single-partition read.
        let mut statement = Statement::new(format!(
            "SELECT checksum FROM {}.schema_migrations WHERE version = {}",
            self.config.keyspace,
            latest.version()
        ));
        statement.set_request_timeout(Some(READY_TIMEOUT));
        let result = self
            .session
            .query_unpaged(statement, ())
            .await
            .map_err(|error| errors::execution_error("checking the schema version", error))?;
        let recorded = result
            .into_rows_result()
            .map_err(|error| StoreError::Internal(format!("checking the schema version: {error}")))?
            .maybe_first_row::<(String,)>()
            .map_err(|error| {
                StoreError::Internal(format!("checking the schema version: {error}"))
            })?;
        match recorded {
            Some((checksum,)) if checksum == latest.checksum() => Ok(()),
            Some(_) => Err(StoreError::SchemaNotCurrent(format!(
                "migration {} was applied from a different file",
                latest.file_name()
            ))),
            None => Err(StoreError::SchemaNotCurrent(format!(
                "migration {} is not applied",
                latest.file_name()
            ))),
        }
    }

    async fn write_impressions(
        &self,
        partition: EventPartition,
        impressions: &[Impression],
    ) -> Result<(), StoreError> {
        let statements = self.statements().await?;
        writes::write_impressions(
            &self.session,
            statements,
            self.config.write_mode,
            self.ttl_seconds,
            &partition,
            impressions,
        )
        .await
    }

    async fn write_clicks(
        &self,
        partition: EventPartition,
        clicks: &[Click],
    ) -> Result<(), StoreError> {
        let statements = self.statements().await?;
        writes::write_clicks(
            &self.session,
            statements,
            self.config.write_mode,
            self.ttl_seconds,
            &partition,
            clicks,
        )
        .await
    }

    async fn read_impression_summaries(
        &self,
        partition: EventPartition,
    ) -> Result<Vec<ImpressionSummaryRow>, StoreError> {
        reads::impression_summaries(&self.session, self.statements().await?, &partition).await
    }

    async fn read_impression_page(
        &self,
        partition: EventPartition,
        cursor: Option<PageCursor>,
    ) -> Result<ImpressionPage, StoreError> {
        let statements = self.export_statements().await?;
        exports::impression_page(&self.session, statements, &partition, cursor).await
    }

    async fn read_newest_impressions(
        &self,
        partition: EventPartition,
        limit: usize,
    ) -> Result<Vec<Impression>, StoreError> {
        let statements = self.export_statements().await?;
        exports::newest_impressions(&self.session, statements, &partition, limit).await
    }

    async fn read_clicks(&self, partition: EventPartition) -> Result<Vec<ClickRow>, StoreError> {
        reads::clicks(&self.session, self.statements().await?, &partition).await
    }

    async fn first_click(
        &self,
        campaign: CampaignKey,
        impression_id: ImpressionId,
    ) -> Result<Option<ClickRow>, StoreError> {
        reads::first_click(
            &self.session,
            self.statements().await?,
            campaign,
            impression_id,
        )
        .await
    }

    async fn campaign_settings(
        &self,
        campaign: CampaignKey,
    ) -> Result<SettingsHistory, StoreError> {
        reads::campaign_settings(&self.session, self.statements().await?, campaign).await
    }

    async fn put_campaign_settings(
        &self,
        campaign: CampaignKey,
        settings: &CampaignSettings,
    ) -> Result<(), StoreError> {
        let statements = self.statements().await?;
        let values = (
            campaign.advertiser_id.as_uuid(),
            campaign.campaign_id.as_uuid(),
            settings.effective_from,
            // At most 256.
            settings.buckets.get() as i16,
            settings.daily_cap.and_then(|cap| i64::try_from(cap).ok()),
            chrono::Utc::now(),
        );
        self.session
            .execute_unpaged(&statements.insert_campaign_settings, values)
            .await
            .map_err(statements::failed("writing campaign settings"))?;
        Ok(())
    }

    async fn write_visits(
        &self,
        partition: &VisitPartition,
        visits: &[Beacon],
    ) -> Result<(), StoreError> {
        let statements = self.site_statements().await?;
        sites::write_visits(
            &self.session,
            statements,
            self.ttl_seconds,
            partition,
            visits,
        )
        .await
    }

    async fn read_visits(&self, partition: &VisitPartition) -> Result<Vec<VisitRow>, StoreError> {
        sites::read_visits(&self.session, self.site_statements().await?, partition).await
    }

    async fn site_settings(&self, site: &SiteId) -> Result<SettingsHistory, StoreError> {
        sites::site_settings(&self.session, self.site_statements().await?, site).await
    }

    async fn put_site_settings(
        &self,
        site: &SiteId,
        settings: &CampaignSettings,
    ) -> Result<(), StoreError> {
        let statements = self.site_statements().await?;
        sites::put_site_settings(&self.session, statements, site, settings).await
    }

    async fn write_sketches(
        &self,
        partition: &SketchPartition,
        rows: &[SketchRow],
    ) -> Result<(), StoreError> {
        let statements = self.site_statements().await?;
        sites::write_sketches(&self.session, statements, self.ttl_seconds, partition, rows).await
    }

    async fn read_sketches(
        &self,
        partition: &SketchPartition,
    ) -> Result<Vec<SketchRow>, StoreError> {
        sites::read_sketches(&self.session, self.site_statements().await?, partition).await
    }

    async fn mark_site_day(&self, day: Day, site: &SiteId) -> Result<(), StoreError> {
        let statements = self.site_statements().await?;
        sites::mark_site_day(&self.session, statements, self.ttl_seconds, day, site).await
    }

    async fn sites_of_day(&self, day: Day) -> Result<Vec<SiteId>, StoreError> {
        sites::sites_of_day(&self.session, self.site_statements().await?, day).await
    }

    async fn mark_campaign_day(&self, day: Day, campaign: CampaignKey) -> Result<(), StoreError> {
        let statements = self.rollup_statements().await?;
        rollups::mark_campaign_day(&self.session, statements, day, campaign).await
    }

    async fn campaigns_of_day(&self, day: Day) -> Result<Vec<CampaignKey>, StoreError> {
        rollups::campaigns_of_day(&self.session, self.rollup_statements().await?, day).await
    }

    async fn mark_late(
        &self,
        campaign: CampaignKey,
        day: Day,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        let statements = self.rollup_statements().await?;
        rollups::mark_late(&self.session, statements, campaign, day, at).await
    }

    async fn seal_state(&self, campaign: CampaignKey, day: Day) -> Result<SealState, StoreError> {
        let statements = self.rollup_statements().await?;
        rollups::seal_state(&self.session, statements, campaign, day).await
    }

    async fn write_rollup(
        &self,
        campaign: CampaignKey,
        day: Day,
        rollup: &Rollup,
        read_started: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        let statements = self.rollup_statements().await?;
        rollups::write_rollup(
            &self.session,
            statements,
            campaign,
            day,
            rollup,
            read_started,
        )
        .await
    }

    async fn read_rollup(
        &self,
        campaign: CampaignKey,
        day: Day,
        reach: &[ReachLevel],
    ) -> Result<Rollup, StoreError> {
        let statements = self.rollup_statements().await?;
        rollups::read_rollup(&self.session, statements, campaign, day, reach).await
    }

    async fn mark_site_late(
        &self,
        site: &SiteId,
        day: Day,
        at: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        let statements = self.site_rollup_statements().await?;
        site_rollups::mark_site_late(&self.session, statements, site, day, at).await
    }

    async fn site_seal_state(&self, site: &SiteId, day: Day) -> Result<SealState, StoreError> {
        let statements = self.site_rollup_statements().await?;
        site_rollups::site_seal_state(&self.session, statements, site, day).await
    }

    async fn write_site_rollup(
        &self,
        site: &SiteId,
        day: Day,
        combinations: &[(String, SiteRollup)],
        read_started: chrono::DateTime<chrono::Utc>,
    ) -> Result<(), StoreError> {
        let statements = self.site_rollup_statements().await?;
        site_rollups::write_site_rollup(
            &self.session,
            statements,
            site,
            day,
            combinations,
            read_started,
        )
        .await
    }

    async fn read_site_rollup(
        &self,
        partition: &SketchPartition,
    ) -> Result<SiteRollup, StoreError> {
        let statements = self.site_rollup_statements().await?;
        site_rollups::read_site_rollup(&self.session, statements, partition).await
    }
}
