//! What every statement of the Cassandra store shares: preparation (once, idempotence
//! declared so the driver may retry and speculate), reading a whole partition page by page,
//! and running one statement over many rows with a bounded number in flight.

use super::errors::{
    decode_error, execution_error, names_missing_schema, pager_error, stream_error,
};
use crate::domain::beacon::VisitPartition;
use crate::domain::partition::EventPartition;
use crate::store::StoreError;
use crate::store::error::Message;
use chrono::NaiveDate;
use futures::TryStreamExt;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use uuid::Uuid;

/// The partition key of every event table, as bound in its statements.
pub(crate) const EVENT_PARTITION: &str =
    "advertiser_id = ? AND campaign_id = ? AND day = ? AND bucket_id = ?";

/// Prepares one statement. Every statement of this store writes absolute values or reads, so
/// repeating one is harmless: all are idempotent.
async fn prepare_one(session: &Session, cql: String) -> Result<PreparedStatement, StoreError> {
    let mut statement = session.prepare(cql).await.map_err(|error| {
        // A statement that cannot be prepared almost always names a table migrations have
        // not created yet; anything else is retried on the next request.
        if names_missing_schema(&error.to_string()) {
            StoreError::schema("preparing statements", error)
        } else {
            StoreError::unavailable("preparing statements", error)
        }
    })?;
    statement.set_is_idempotent(true);
    Ok(statement)
}

/// Prepares several statements at once, in the order given.
pub(crate) async fn prepare_all<const N: usize>(
    session: &Session,
    cql: [String; N],
) -> Result<[PreparedStatement; N], StoreError> {
    let prepared =
        futures::future::try_join_all(cql.into_iter().map(|cql| prepare_one(session, cql))).await?;
    prepared
        .try_into()
        .map_err(|_| StoreError::internal_message("preparing statements: a statement went missing"))
}

/// The partition key columns of an event table, bound first in every event statement.
pub(crate) type PartitionValues = (Uuid, Uuid, NaiveDate, i16);

pub(crate) fn partition_values(partition: &EventPartition) -> PartitionValues {
    (
        partition.campaign.advertiser_id.as_uuid(),
        partition.campaign.campaign_id.as_uuid(),
        partition.day.date(),
        // A BucketId is below 256 by construction, so it fits a smallint.
        partition.bucket.get() as i16,
    )
}

/// Every row a paged statement returns, fetched page by page.
pub(crate) async fn read_all<R>(
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
        .map_err(|error| decode_error(context, error))?
        .try_collect()
        .await
        .map_err(|error| stream_error(context, error))
}

/// The first row of an unpaged statement's answer, if any.
pub(crate) async fn read_one<R>(
    session: &Session,
    statement: &PreparedStatement,
    values: impl scylla::serialize::row::SerializeRow,
    context: &'static str,
) -> Result<Option<R>, StoreError>
where
    R: for<'frame, 'metadata> scylla::deserialize::row::DeserializeRow<'frame, 'metadata>,
{
    session
        .execute_unpaged(statement, values)
        .await
        .map_err(failed(context))?
        .into_rows_result()
        .map_err(|error| decode_error(context, error))?
        .maybe_first_row::<R>()
        .map_err(|error| decode_error(context, error))
}

/// Runs `statement` once per item, with the values `values` makes of it, `in_flight` at a
/// time, stopping at the first failure.
pub(crate) async fn execute_each<'a, T, V>(
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

/// Writes rows of one partition with one statement: a lone row as a plain statement, more as
/// one unlogged batch (single-partition, so the node applies it as one mutation), marked
/// idempotent so the driver may retry it.
pub(crate) async fn write_partition<V>(
    session: &Session,
    statement: &PreparedStatement,
    mut rows: Vec<V>,
    context: &'static str,
) -> Result<(), StoreError>
where
    V: scylla::serialize::row::SerializeRow,
{
    if rows.len() == 1
        && let Some(only) = rows.pop()
    {
        return session
            .execute_unpaged(statement, only)
            .await
            .map(|_| ())
            .map_err(failed(context));
    }
    let mut batch =
        scylla::statement::batch::Batch::new(scylla::statement::batch::BatchType::Unlogged);
    batch.set_is_idempotent(true);
    for _ in &rows {
        batch.append_statement(statement.clone());
    }
    session
        .batch(&batch, rows)
        .await
        .map(|_| ())
        .map_err(failed(context))
}

/// Runs one statement once, for its effect.
pub(crate) async fn execute(
    session: &Session,
    statement: &PreparedStatement,
    values: impl scylla::serialize::row::SerializeRow,
    context: &'static str,
) -> Result<(), StoreError> {
    session
        .execute_unpaged(statement, values)
        .await
        .map(|_| ())
        .map_err(failed(context))
}

/// Sorts a failed execution of a prepared statement.
pub(crate) fn failed(context: &str) -> impl Fn(scylla::errors::ExecutionError) -> StoreError + '_ {
    move |error| execution_error(context, error)
}

/// The bound values of a visit partition: site, day, bucket.
pub(super) fn visit_partition_values(partition: &VisitPartition) -> (&str, NaiveDate, i16) {
    (
        partition.site.as_str(),
        partition.day.date(),
        // Below 256 by construction.
        partition.bucket.get() as i16,
    )
}

/// Whether a lightweight transaction (`… IF NOT EXISTS`) applied. It answers `[applied]`
/// first, then (when not applied) the row it met, whatever columns the table has by then:
/// read untyped, only `[applied]` is used.
pub(crate) fn transaction_applied(
    result: scylla::response::query_result::QueryResult,
    context: &str,
) -> Result<bool, StoreError> {
    let rows = result
        .into_rows_result()
        .map_err(|error| decode_error(context, error))?;
    let applied_at = rows
        .column_specs()
        .iter()
        .position(|column| column.name() == "[applied]");
    let row = rows
        .first_row::<scylla::value::Row>()
        .map_err(|error| decode_error(context, error))?;
    applied_at
        .and_then(|index| row.columns.get(index)?.as_ref()?.as_boolean())
        .ok_or_else(|| {
            decode_error(
                context,
                Message("the transaction answered no [applied] column".into()),
            )
        })
}
