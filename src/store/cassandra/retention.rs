//! Retention on Cassandra (docs/DESIGN.md, "Retention"). Rows written by this release carry a
//! TTL from their own UTC day and expire by themselves, whole SSTables at a time under TWCS;
//! a TTL cannot be shortened afterwards, so the sweep deletes the partitions of expired days
//! for rows stored before (or under a longer retention), then the days' lines in the day
//! index. Partition deletions: one tombstone per partition, never one per row, except for the
//! click index, which is keyed by impression and is deleted click by click.

use super::CassandraStore;
use super::config::KeyspaceName;
use super::statements::{
    EVENT_PARTITION, execute, execute_each, partition_values, prepare_all, read_all,
};
use crate::domain::beacon::{SiteId, VisitPartition};
use crate::domain::conversion::CONVERSION_BUCKETS;
use crate::domain::ids::CampaignKey;
use crate::domain::owner::OwnerKind;
use crate::domain::partition::EventPartition;
use crate::domain::time::Day;
use crate::store::{EventStore, ExpiredDays, RetentionStore, StoreError, Swept};
use async_trait::async_trait;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;

const CONTEXT: &str = "deleting expired days";
/// Conversions' copy and decision partitions deleted at once.
const CONVERSIONS_IN_FLIGHT: usize = 32;

/// The event tables partitioned by (advertiser, campaign, day, bucket).
const EVENT_TABLES: [&str; 5] = [
    "impression",
    "impression_summary",
    "impression_copy",
    "click",
    "view_report",
];

pub(crate) struct RetentionStatements {
    /// One per [`EVENT_TABLES`] entry, in that order.
    delete_event_partition: Vec<PreparedStatement>,
    delete_click_index: PreparedStatement,
    delete_campaign_conversions: PreparedStatement,
    delete_advertiser_conversions: PreparedStatement,
    select_advertiser_conversion_ids: PreparedStatement,
    delete_conversion_copies: PreparedStatement,
    delete_conversion_decision: PreparedStatement,
    delete_campaign_day: PreparedStatement,
    delete_visit_partition: PreparedStatement,
    delete_site_day: PreparedStatement,
}

impl RetentionStatements {
    pub(crate) async fn prepare(
        session: &Session,
        keyspace: &KeyspaceName,
    ) -> Result<Self, StoreError> {
        let delete_event_partition = prepare_all(
            session,
            EVENT_TABLES
                .map(|table| format!("DELETE FROM {keyspace}.{table} WHERE {EVENT_PARTITION}")),
        )
        .await?
        .to_vec();
        let [
            delete_click_index,
            delete_campaign_conversions,
            delete_advertiser_conversions,
            select_advertiser_conversion_ids,
            delete_conversion_copies,
            delete_conversion_decision,
            delete_campaign_day,
            delete_visit_partition,
            delete_site_day,
        ] = prepare_all(
            session,
            [
                format!(
                    "DELETE FROM {keyspace}.click_by_impression WHERE advertiser_id = ? \
                     AND campaign_id = ? AND impression_id = ? AND timestamp = ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.campaign_conversion WHERE advertiser_id = ? \
                     AND campaign_id = ? AND day = ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.conversion WHERE advertiser_id = ? AND day = ? \
                     AND bucket_id = ?"
                ),
                format!(
                    "SELECT conversion_id FROM {keyspace}.conversion WHERE advertiser_id = ? \
                     AND day = ? AND bucket_id = ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.conversion_copy WHERE advertiser_id = ? \
                     AND conversion_id = ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.conversion_decision WHERE advertiser_id = ? \
                     AND conversion_id = ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.campaign_day WHERE day = ? AND advertiser_id = ? \
                     AND campaign_id = ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.visit WHERE site = ? AND day = ? AND bucket_id = ?"
                ),
                format!("DELETE FROM {keyspace}.site_day WHERE day = ? AND site = ?"),
            ],
        )
        .await?;
        Ok(Self {
            delete_event_partition,
            delete_click_index,
            delete_campaign_conversions,
            delete_advertiser_conversions,
            select_advertiser_conversion_ids,
            delete_conversion_copies,
            delete_conversion_decision,
            delete_campaign_day,
            delete_visit_partition,
            delete_site_day,
        })
    }
}

impl CassandraStore {
    async fn retention_statements(&self) -> Result<&RetentionStatements, StoreError> {
        self.retention
            .get_or_try_init(|| RetentionStatements::prepare(&self.session, &self.config.keyspace))
            .await
    }

    async fn drop_event_partition(
        &self,
        statements: &RetentionStatements,
        partition: &EventPartition,
    ) -> Result<Swept, StoreError> {
        let mut swept = Swept::default();
        // The click index first: its rows are found from the clicks, which go after it.
        let clicks = self.read_clicks(partition).await?;
        let campaign = partition.campaign;
        futures::future::try_join_all(clicks.iter().map(|click| {
            let values = (
                campaign.advertiser_id.as_uuid(),
                campaign.campaign_id.as_uuid(),
                click.impression_id.as_uuid(),
                click.timestamp.instant(),
            );
            execute(
                &self.session,
                &statements.delete_click_index,
                values,
                CONTEXT,
            )
        }))
        .await?;
        swept.rows += clicks.len() as u64;
        let key = partition_values(partition);
        futures::future::try_join_all(
            statements
                .delete_event_partition
                .iter()
                .map(|delete| execute(&self.session, delete, key, CONTEXT)),
        )
        .await?;
        swept.ranges += statements.delete_event_partition.len() as u64;
        Ok(swept)
    }

    async fn drop_campaign_day(
        &self,
        statements: &RetentionStatements,
        campaign: CampaignKey,
        day: Day,
    ) -> Result<Swept, StoreError> {
        let (advertiser, campaign_id) = (
            campaign.advertiser_id.as_uuid(),
            campaign.campaign_id.as_uuid(),
        );
        let date = day.date();
        execute(
            &self.session,
            &statements.delete_campaign_conversions,
            (advertiser, campaign_id, date),
            CONTEXT,
        )
        .await?;
        // The advertiser's own list of the day's conversions: every campaign of the
        // advertiser deletes it again, which costs a tombstone and changes nothing. Each
        // conversion listed first loses its copies and decision, partitions of their own
        // (keyed by conversion, not by day) that rows stored without a TTL keep otherwise.
        let listed = futures::future::try_join_all((0..CONVERSION_BUCKETS).map(|bucket| {
            read_all::<(String,)>(
                &self.session,
                &statements.select_advertiser_conversion_ids,
                (advertiser, date, bucket as i16),
                CONTEXT,
            )
        }))
        .await?;
        let ids: Vec<String> = listed.into_iter().flatten().map(|(id,)| id).collect();
        for delete in [
            &statements.delete_conversion_copies,
            &statements.delete_conversion_decision,
        ] {
            execute_each(
                &self.session,
                delete,
                &ids,
                CONVERSIONS_IN_FLIGHT,
                |id| (advertiser, id.as_str()),
                CONTEXT,
            )
            .await?;
        }
        futures::future::try_join_all((0..CONVERSION_BUCKETS).map(|bucket| {
            execute(
                &self.session,
                &statements.delete_advertiser_conversions,
                (advertiser, date, bucket as i16),
                CONTEXT,
            )
        }))
        .await?;
        Ok(Swept {
            ranges: 1 + u64::from(CONVERSION_BUCKETS) + 2 * ids.len() as u64,
            rows: 0,
        })
    }

    async fn drop_site_partition(
        &self,
        statements: &RetentionStatements,
        partition: &VisitPartition,
    ) -> Result<(), StoreError> {
        let values = (
            partition.site.as_str(),
            partition.day.date(),
            partition.bucket.get() as i16,
        );
        execute(
            &self.session,
            &statements.delete_visit_partition,
            values,
            CONTEXT,
        )
        .await
    }

    async fn forget_site_day(
        &self,
        statements: &RetentionStatements,
        site: &SiteId,
        day: Day,
    ) -> Result<(), StoreError> {
        let values = (day.date(), site.as_str());
        execute(&self.session, &statements.delete_site_day, values, CONTEXT).await
    }
}

#[async_trait]
impl RetentionStore for CassandraStore {
    async fn drop_expired_days(&self, expired: &ExpiredDays) -> Result<Swept, StoreError> {
        let statements = self.retention_statements().await?;
        let mut swept = Swept::default();
        match expired {
            // The advertiser's conversions go day by day, with the campaign's days: listing
            // every day before the kept one would be a read per day and bucket since 2000.
            ExpiredDays::Campaign {
                campaign,
                days,
                partitions,
                ..
            } => {
                for partition in partitions {
                    swept += self.drop_event_partition(statements, partition).await?;
                }
                for day in days {
                    swept += self.drop_campaign_day(statements, *campaign, *day).await?;
                }
                // The day index last: until its lines go, the next sweep finds the days again.
                for day in days {
                    let values = (
                        day.date(),
                        campaign.advertiser_id.as_uuid(),
                        campaign.campaign_id.as_uuid(),
                    );
                    execute(
                        &self.session,
                        &statements.delete_campaign_day,
                        values,
                        CONTEXT,
                    )
                    .await?;
                    swept.rows += 1;
                }
            }
            ExpiredDays::Site {
                site,
                days,
                partitions,
            } => {
                for partition in partitions {
                    self.drop_site_partition(statements, partition).await?;
                    swept.ranges += 1;
                }
                for day in days {
                    self.forget_site_day(statements, site, *day).await?;
                    swept.rows += 1;
                }
            }
        }
        Ok(swept)
    }

    async fn drop_expired_rollups(
        &self,
        _kind: OwnerKind,
        _kept: Day,
    ) -> Result<Swept, StoreError> {
        // Rollup rows carry a TTL from their day (`aggregate_ttl`). Those written before the
        // flag was set keep theirs: finding them would mean listing every owner's days.
        Ok(Swept::default())
    }
}
