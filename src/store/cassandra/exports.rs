//! Reading full impressions for exports, reports and "newest N": a partition page by page,
//! oldest first (the driver's paging state is the cursor, so nothing above the store holds
//! more than a page), and a partition's newest rows with `LIMIT` on its `timestamp DESC`
//! clustering.

use super::config::KeyspaceName;
use super::statements::{failed, partition_values, prepare_all};
use crate::domain::event::Impression;
use crate::domain::ids::{AdId, ImpressionId, UserId};
use crate::domain::partition::EventPartition;
use crate::domain::time::EventTime;
use crate::domain::user_data::UserData;
use crate::store::{ImpressionPage, PageCursor, StoreError};
use chrono::{DateTime, Utc};
use scylla::client::session::Session;
use scylla::response::{PagingState, PagingStateResponse};
use scylla::statement::prepared::PreparedStatement;
use std::collections::BTreeMap;
use std::net::IpAddr;
use uuid::Uuid;

/// Rows per page of a partition read: big enough to amortise a round trip, small enough that
/// an export holds little.
const PAGE_ROWS: i32 = 2_000;

const COLUMNS: &str = "timestamp, impression_id, ad_id, user_id, user_ip, user_data";
const PARTITION: &str = "advertiser_id = ? AND campaign_id = ? AND day = ? AND bucket_id = ?";

type FullRow = (
    DateTime<Utc>,
    Uuid,
    Uuid,
    Uuid,
    Option<IpAddr>,
    Option<BTreeMap<String, String>>,
);

pub struct ExportStatements {
    select_page: PreparedStatement,
    select_newest: PreparedStatement,
}

impl ExportStatements {
    pub async fn prepare(session: &Session, keyspace: &KeyspaceName) -> Result<Self, StoreError> {
        let [mut select_page, select_newest] = prepare_all(
            session,
            [
                // The reverse of the table's clustering order: oldest first.
                format!(
                    "SELECT {COLUMNS} FROM {keyspace}.impression WHERE {PARTITION} \
                     ORDER BY timestamp ASC, impression_id DESC"
                ),
                format!("SELECT {COLUMNS} FROM {keyspace}.impression WHERE {PARTITION} LIMIT ?"),
            ],
        )
        .await?;
        select_page.set_page_size(PAGE_ROWS);
        Ok(Self {
            select_page,
            select_newest,
        })
    }
}

fn impression(partition: &EventPartition, row: FullRow) -> Impression {
    let (timestamp, impression_id, ad_id, user_id, user_ip, user_data) = row;
    Impression {
        impression_id: ImpressionId::new(impression_id),
        campaign: partition.campaign,
        ad_id: AdId::new(ad_id),
        user_id: UserId::new(user_id),
        timestamp: EventTime::from_stored(timestamp),
        user_ip,
        user_data: UserData::from_stored(user_data.unwrap_or_default()),
    }
}

fn decode_rows(
    partition: &EventPartition,
    result: scylla::response::query_result::QueryResult,
    context: &'static str,
) -> Result<Vec<Impression>, StoreError> {
    let rows = result
        .into_rows_result()
        .map_err(|error| StoreError::Internal(format!("{context}: {error}")))?;
    rows.rows::<FullRow>()
        .map_err(|error| StoreError::Internal(format!("{context}: {error}")))?
        .map(|row| {
            row.map(|row| impression(partition, row))
                .map_err(|error| StoreError::Internal(format!("{context}: {error}")))
        })
        .collect()
}

pub async fn impression_page(
    session: &Session,
    statements: &ExportStatements,
    partition: &EventPartition,
    cursor: Option<PageCursor>,
) -> Result<ImpressionPage, StoreError> {
    const CONTEXT: &str = "reading impressions";
    let paging = match cursor {
        None => PagingState::start(),
        Some(cursor) => PagingState::new_from_raw_bytes(cursor.bytes()),
    };
    let (result, paging) = session
        .execute_single_page(&statements.select_page, partition_values(partition), paging)
        .await
        .map_err(failed(CONTEXT))?;
    let impressions = decode_rows(partition, result, CONTEXT)?;
    let next = match paging {
        PagingStateResponse::HasMorePages { state } => state
            .as_bytes_slice()
            .map(|bytes| PageCursor::new(bytes.to_vec())),
        PagingStateResponse::NoMorePages => None,
    };
    Ok(ImpressionPage { impressions, next })
}

pub async fn newest_impressions(
    session: &Session,
    statements: &ExportStatements,
    partition: &EventPartition,
    limit: usize,
) -> Result<Vec<Impression>, StoreError> {
    const CONTEXT: &str = "reading the newest impressions";
    let (advertiser, campaign, day, bucket) = partition_values(partition);
    let limit = i32::try_from(limit).unwrap_or(i32::MAX);
    let result = session
        .execute_unpaged(
            &statements.select_newest,
            (advertiser, campaign, day, bucket, limit),
        )
        .await
        .map_err(failed(CONTEXT))?;
    decode_rows(partition, result, CONTEXT)
}
