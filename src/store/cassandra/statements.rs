//! Every statement the Cassandra store runs on the hot path, prepared once, with idempotence
//! declared so the driver may retry and speculate. Table names are keyspace-qualified.

use super::config::KeyspaceName;
use super::errors::{execution_error, pager_error};
use crate::domain::partition::EventPartition;
use crate::store::StoreError;
use chrono::NaiveDate;
use futures::TryStreamExt;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use uuid::Uuid;

pub struct Statements {
    pub insert_impression: PreparedStatement,
    pub insert_impression_summary: PreparedStatement,
    pub insert_click: PreparedStatement,
    pub insert_click_index: PreparedStatement,
    pub select_impression_summaries: PreparedStatement,
    pub select_clicks: PreparedStatement,
    pub select_first_click: PreparedStatement,
    pub select_campaign_settings: PreparedStatement,
    pub insert_campaign_settings: PreparedStatement,
}

const EVENT_PARTITION: &str = "advertiser_id = ? AND campaign_id = ? AND day = ? AND bucket_id = ?";

impl Statements {
    pub async fn prepare(session: &Session, keyspace: &KeyspaceName) -> Result<Self, StoreError> {
        let prepare = |cql: String| prepare_one(session, cql);
        Ok(Self {
            insert_impression: prepare(format!(
                "INSERT INTO {keyspace}.impression (advertiser_id, campaign_id, day, bucket_id, timestamp, \
                 impression_id, ad_id, user_id, user_ip, user_data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
            ))
            .await?,
            insert_impression_summary: prepare(format!(
                "INSERT INTO {keyspace}.impression_summary (advertiser_id, campaign_id, day, bucket_id, timestamp, \
                 impression_id, ad_id, user_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
            ))
            .await?,
            insert_click: prepare(format!(
                "INSERT INTO {keyspace}.click (advertiser_id, campaign_id, day, bucket_id, timestamp, \
                 impression_id, ad_id) VALUES (?, ?, ?, ?, ?, ?, ?) USING TTL ?"
            ))
            .await?,
            insert_click_index: prepare(format!(
                "INSERT INTO {keyspace}.click_by_impression (advertiser_id, campaign_id, impression_id, timestamp, ad_id) \
                 VALUES (?, ?, ?, ?, ?) USING TTL ?"
            ))
            .await?,
            select_impression_summaries: prepare(format!(
                "SELECT impression_id, ad_id, user_id, timestamp FROM {keyspace}.impression_summary WHERE {EVENT_PARTITION}"
            ))
            .await?,
            select_clicks: prepare(format!(
                "SELECT impression_id, ad_id, timestamp FROM {keyspace}.click WHERE {EVENT_PARTITION}"
            ))
            .await?,
            select_first_click: prepare(format!(
                "SELECT impression_id, ad_id, timestamp FROM {keyspace}.click_by_impression \
                 WHERE advertiser_id = ? AND campaign_id = ? AND impression_id = ? LIMIT 1"
            ))
            .await?,
            select_campaign_settings: prepare(format!(
                "SELECT effective_from, buckets, daily_cap FROM {keyspace}.campaign_config \
                 WHERE advertiser_id = ? AND campaign_id = ?"
            ))
            .await?,
            insert_campaign_settings: prepare(format!(
                "INSERT INTO {keyspace}.campaign_config (advertiser_id, campaign_id, effective_from, buckets, \
                 daily_cap, updated_at) VALUES (?, ?, ?, ?, ?, ?)"
            ))
            .await?,
        })
    }
}

/// Prepares one statement. Every statement of this store writes absolute values or reads, so
/// repeating one is harmless: all are idempotent.
async fn prepare_one(session: &Session, cql: String) -> Result<PreparedStatement, StoreError> {
    let mut statement = session
        .prepare(cql)
        .await
        .map_err(|error| prepare_error(&error.to_string()))?;
    statement.set_is_idempotent(true);
    Ok(statement)
}

/// Prepares several statements at once, in the order given.
pub async fn prepare_all<const N: usize>(
    session: &Session,
    cql: [String; N],
) -> Result<[PreparedStatement; N], StoreError> {
    let prepared =
        futures::future::try_join_all(cql.into_iter().map(|cql| prepare_one(session, cql))).await?;
    prepared
        .try_into()
        .map_err(|_| StoreError::Internal("preparing statements: a statement went missing".into()))
}

/// A statement that cannot be prepared almost always names a table migrations have not
/// created yet; anything else is reported as unavailable and retried on the next request.
fn prepare_error(message: &str) -> StoreError {
    if message.contains("unconfigured table") || message.contains("does not exist") {
        StoreError::SchemaNotCurrent(format!("preparing statements: {message}"))
    } else {
        StoreError::Unavailable(format!("preparing statements: {message}"))
    }
}

/// The partition key columns of an event table, bound first in every event statement.
pub type PartitionValues = (Uuid, Uuid, NaiveDate, i16);

pub fn partition_values(partition: &EventPartition) -> PartitionValues {
    (
        partition.campaign.advertiser_id.as_uuid(),
        partition.campaign.campaign_id.as_uuid(),
        partition.day.date(),
        // A BucketId is below 256 by construction, so it fits a smallint.
        partition.bucket.get() as i16,
    )
}

/// Every row a paged statement returns, fetched page by page.
pub async fn read_all<R>(
    session: &Session,
    statement: &PreparedStatement,
    values: impl scylla::serialize::row::SerializeRow,
    context: &'static str,
) -> Result<Vec<R>, StoreError>
where
    R: for<'frame, 'metadata> scylla::deserialize::row::DeserializeRow<'frame, 'metadata>
        + Send
        + 'static,
{
    let pager = session
        .execute_iter(statement.clone(), values)
        .await
        .map_err(|error| pager_error(context, error))?;
    pager
        .rows_stream::<R>()
        .map_err(|error| StoreError::Internal(format!("{context}: {error}")))?
        .try_collect()
        .await
        .map_err(|error| StoreError::Unavailable(format!("{context}: {error}")))
}

/// Runs `statement` once per item, with the values `values` makes of it, `in_flight` at a
/// time, stopping at the first failure.
pub async fn execute_each<'a, T, V>(
    session: &Session,
    statement: &PreparedStatement,
    items: &'a [T],
    in_flight: usize,
    values: impl Fn(&'a T) -> V,
    context: &'static str,
) -> Result<(), StoreError>
where
    V: scylla::serialize::row::SerializeRow,
{
    for chunk in items.chunks(in_flight.max(1)) {
        futures::future::try_join_all(
            chunk
                .iter()
                .map(|item| session.execute_unpaged(statement, values(item))),
        )
        .await
        .map_err(failed(context))?;
    }
    Ok(())
}

/// Sorts a failed execution of a prepared statement.
pub fn failed(context: &str) -> impl Fn(scylla::errors::ExecutionError) -> StoreError + '_ {
    move |error| execution_error(context, error)
}
