//! Reading one partition (all its pages) or one small row, decoded into store rows.

use super::statements::{Statements, failed, partition_values, read_all};
use crate::domain::bucket::BucketCount;
use crate::domain::campaign::{CampaignSettings, SettingsHistory};
use crate::domain::ids::{AdId, CampaignKey, ImpressionId, UserId};
use crate::domain::partition::EventPartition;
use crate::domain::time::EventTime;
use crate::store::{ClickRow, ImpressionSummaryRow, StoreError};
use chrono::{DateTime, Utc};
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use uuid::Uuid;

fn decode_error(context: &'static str) -> impl Fn(String) -> StoreError {
    move |error| StoreError::Internal(format!("{context}: {error}"))
}

/// Every row of one event partition, fetched page by page.
async fn read_partition<R>(
    session: &Session,
    statement: &PreparedStatement,
    partition: &EventPartition,
    context: &'static str,
) -> Result<Vec<R>, StoreError>
where
    R: for<'frame, 'metadata> scylla::deserialize::row::DeserializeRow<'frame, 'metadata>
        + Send
        + 'static,
{
    read_all(session, statement, partition_values(partition), context).await
}

pub async fn impression_summaries(
    session: &Session,
    statements: &Statements,
    partition: &EventPartition,
) -> Result<Vec<ImpressionSummaryRow>, StoreError> {
    let rows: Vec<(Uuid, Uuid, Uuid, DateTime<Utc>)> = read_partition(
        session,
        &statements.select_impression_summaries,
        partition,
        "reading impressions",
    )
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(impression_id, ad_id, user_id, timestamp)| ImpressionSummaryRow {
                impression_id: ImpressionId::new(impression_id),
                ad_id: AdId::new(ad_id),
                user_id: UserId::new(user_id),
                timestamp: EventTime::from_stored(timestamp),
            },
        )
        .collect())
}

fn click_row((impression_id, ad_id, timestamp): (Uuid, Uuid, DateTime<Utc>)) -> ClickRow {
    ClickRow {
        impression_id: ImpressionId::new(impression_id),
        ad_id: AdId::new(ad_id),
        timestamp: EventTime::from_stored(timestamp),
    }
}

pub async fn clicks(
    session: &Session,
    statements: &Statements,
    partition: &EventPartition,
) -> Result<Vec<ClickRow>, StoreError> {
    let rows: Vec<(Uuid, Uuid, DateTime<Utc>)> = read_partition(
        session,
        &statements.select_clicks,
        partition,
        "reading clicks",
    )
    .await?;
    Ok(rows.into_iter().map(click_row).collect())
}

pub async fn first_click(
    session: &Session,
    statements: &Statements,
    campaign: CampaignKey,
    impression_id: ImpressionId,
) -> Result<Option<ClickRow>, StoreError> {
    let values = (
        campaign.advertiser_id.as_uuid(),
        campaign.campaign_id.as_uuid(),
        impression_id.as_uuid(),
    );
    let result = session
        .execute_unpaged(&statements.select_first_click, values)
        .await
        .map_err(failed("reading the click index"))?;
    let row = result
        .into_rows_result()
        .map_err(|error| decode_error("reading the click index")(error.to_string()))?
        .maybe_first_row::<(Uuid, Uuid, DateTime<Utc>)>()
        .map_err(|error| decode_error("reading the click index")(error.to_string()))?;
    Ok(row.map(click_row))
}

pub async fn campaign_settings(
    session: &Session,
    statements: &Statements,
    campaign: CampaignKey,
) -> Result<SettingsHistory, StoreError> {
    let values = (
        campaign.advertiser_id.as_uuid(),
        campaign.campaign_id.as_uuid(),
    );
    let result = session
        .execute_unpaged(&statements.select_campaign_settings, values)
        .await
        .map_err(failed("reading campaign settings"))?;
    let rows = result
        .into_rows_result()
        .map_err(|error| decode_error("reading campaign settings")(error.to_string()))?;
    let mut entries = Vec::new();
    for row in rows
        .rows::<(DateTime<Utc>, i16, Option<i64>)>()
        .map_err(|error| decode_error("reading campaign settings")(error.to_string()))?
    {
        let (effective_from, buckets, daily_cap) =
            row.map_err(|error| decode_error("reading campaign settings")(error.to_string()))?;
        let buckets = u16::try_from(buckets)
            .ok()
            .and_then(|count| BucketCount::new(count).ok())
            .ok_or_else(|| {
                StoreError::Internal(format!("stored bucket count {buckets} is invalid"))
            })?;
        entries.push(CampaignSettings {
            buckets,
            effective_from,
            daily_cap: daily_cap.and_then(|cap| u64::try_from(cap).ok()),
        });
    }
    Ok(SettingsHistory::new(entries))
}
