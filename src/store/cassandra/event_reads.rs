//! Reading impressions and clicks: a partition whole (the thin rows that counting reads), a
//! page at a time oldest first (the driver's paging state is the cursor, so nothing above the
//! store holds more than a page), a partition's newest rows (`LIMIT` on its `timestamp DESC`
//! clustering), and one impression's first click.

use super::errors::decode_error;
use super::event_statements::EventStatements;
use super::statements::{failed, partition_values, read_all};
use crate::domain::event::Impression;
use crate::domain::ids::{AdId, CampaignKey, ImpressionId, UserId};
use crate::domain::partition::EventPartition;
use crate::domain::time::EventTime;
use crate::domain::traffic::{InvalidReason, UserAgent, any_valid};
use crate::domain::user_data::UserData;
use crate::domain::view::{AgentTag, Client, Network};
use crate::store::{ClickRow, ImpressionPage, ImpressionSummaryRow, PageCursor, StoreError};
use chrono::{DateTime, Utc};
use scylla::DeserializeRow;
use scylla::client::session::Session;
use scylla::response::{PagingState, PagingStateResponse};
use std::collections::BTreeMap;
use std::net::IpAddr;
use uuid::Uuid;

/// A row's validity from its two cells (see `Validity` in [`super::event_writes`]): valid
/// when a valid copy wrote `valid`, or when no copy wrote `invalid` (rows from before
/// invalid traffic was classified too). An unknown reason (a newer release's) reads as the
/// bot rule, never as valid.
pub(crate) fn validity(valid: Option<bool>, invalid: Option<&str>) -> Option<InvalidReason> {
    match (valid, invalid) {
        (Some(true), _) | (_, None) => None,
        (_, Some(reason)) => {
            Some(InvalidReason::parse(reason).unwrap_or(InvalidReason::BotUserAgent))
        }
    }
}

/// A client back from its two cells.
pub(crate) fn client_of(network: Option<&[u8]>, agent: Option<i64>) -> Client {
    Client {
        network: network.and_then(Network::from_bytes),
        agent: agent.map(AgentTag::from_stored),
    }
}

/// A row of `impression_summary`.
#[derive(DeserializeRow)]
struct SummaryRow {
    impression_id: Uuid,
    ad_id: Uuid,
    user_id: Uuid,
    timestamp: DateTime<Utc>,
    valid: Option<bool>,
    invalid: Option<String>,
    client_net: Option<Vec<u8>>,
    client_agent: Option<i64>,
    pixel_net: Option<Vec<u8>>,
    pixel_agent: Option<i64>,
    pixel_at: Option<DateTime<Utc>>,
}

impl SummaryRow {
    /// The row as counting reads it: the client of its pixel when a pixel copy wrote one
    /// (the browser that rendered the ad), else the client its POSTed copy carried.
    fn into_row(self) -> ImpressionSummaryRow {
        let (network, agent) = if self.pixel_at.is_some() {
            (self.pixel_net, self.pixel_agent)
        } else {
            (self.client_net, self.client_agent)
        };
        ImpressionSummaryRow {
            impression_id: ImpressionId::new(self.impression_id),
            ad_id: AdId::new(self.ad_id),
            user_id: UserId::new(self.user_id),
            timestamp: EventTime::from_stored(self.timestamp),
            invalid: validity(self.valid, self.invalid.as_deref()),
            client: client_of(network.as_deref(), agent),
            pixel_arrival: self.pixel_at,
        }
    }
}

/// A row of `click` or `click_by_impression`.
#[derive(DeserializeRow)]
struct StoredClick {
    impression_id: Uuid,
    ad_id: Uuid,
    timestamp: DateTime<Utc>,
    valid: Option<bool>,
    invalid: Option<String>,
}

impl From<StoredClick> for ClickRow {
    fn from(row: StoredClick) -> Self {
        ClickRow {
            impression_id: ImpressionId::new(row.impression_id),
            ad_id: AdId::new(row.ad_id),
            timestamp: EventTime::from_stored(row.timestamp),
            invalid: validity(row.valid, row.invalid.as_deref()),
        }
    }
}

/// A full row of `impression`, without its partition key.
#[derive(DeserializeRow)]
pub(crate) struct FullImpressionRow {
    timestamp: DateTime<Utc>,
    impression_id: Uuid,
    ad_id: Uuid,
    user_id: Uuid,
    user_ip: Option<IpAddr>,
    user_data: Option<BTreeMap<String, String>>,
    user_agent: Option<String>,
    valid: Option<bool>,
    invalid: Option<String>,
}

impl FullImpressionRow {
    pub(crate) fn into_impression(self, partition: &EventPartition) -> Impression {
        Impression {
            impression_id: ImpressionId::new(self.impression_id),
            campaign: partition.campaign,
            ad_id: AdId::new(self.ad_id),
            user_id: UserId::new(self.user_id),
            timestamp: EventTime::from_stored(self.timestamp),
            user_ip: self.user_ip,
            user_data: UserData::from_stored(self.user_data.unwrap_or_default()),
            user_agent: self.user_agent.as_deref().and_then(UserAgent::new),
            invalid: validity(self.valid, self.invalid.as_deref()),
            // Kept in the thin row, which the view join reads.
            pixel_arrival: None,
            ip_is_viewers: true,
        }
    }
}

pub(crate) async fn impression_summaries(
    session: &Session,
    statements: &EventStatements,
    partition: &EventPartition,
) -> Result<Vec<ImpressionSummaryRow>, StoreError> {
    let rows: Vec<SummaryRow> = read_all(
        session,
        &statements.select_impression_summaries,
        partition_values(partition),
        "reading impressions",
    )
    .await?;
    Ok(rows.into_iter().map(SummaryRow::into_row).collect())
}

pub(crate) async fn clicks(
    session: &Session,
    statements: &EventStatements,
    partition: &EventPartition,
) -> Result<Vec<ClickRow>, StoreError> {
    let rows: Vec<StoredClick> = read_all(
        session,
        &statements.select_clicks,
        partition_values(partition),
        "reading clicks",
    )
    .await?;
    Ok(rows.into_iter().map(ClickRow::from).collect())
}

/// Every click of an impression in the index (at most a hundred), oldest first.
pub(crate) async fn clicks_of(
    session: &Session,
    statements: &EventStatements,
    campaign: CampaignKey,
    impression_id: ImpressionId,
) -> Result<Vec<ClickRow>, StoreError> {
    let values = (
        campaign.advertiser_id.as_uuid(),
        campaign.campaign_id.as_uuid(),
        impression_id.as_uuid(),
    );
    let rows: Vec<StoredClick> = read_all(
        session,
        &statements.select_first_click,
        values,
        "reading the click index",
    )
    .await?;
    Ok(rows.into_iter().map(ClickRow::from).collect())
}

pub(crate) async fn first_click(
    session: &Session,
    statements: &EventStatements,
    campaign: CampaignKey,
    impression_id: ImpressionId,
) -> Result<Option<ClickRow>, StoreError> {
    // Oldest first: the first is the first click; the click is valid if any copy is.
    let clicks = clicks_of(session, statements, campaign, impression_id).await?;
    Ok(clicks.first().map(|first| ClickRow {
        invalid: any_valid(clicks.iter().map(|copy| copy.invalid)),
        ..*first
    }))
}

/// A partition's thin impressions or clicks in a span of time (`statement` binds the
/// partition, then the span's start and end).
pub(crate) async fn impression_summaries_between(
    session: &Session,
    statement: &scylla::statement::prepared::PreparedStatement,
    partition: &EventPartition,
    span: crate::domain::slices::Span,
) -> Result<Vec<ImpressionSummaryRow>, StoreError> {
    let (a, c, d, b) = partition_values(partition);
    let rows: Vec<SummaryRow> = read_all(
        session,
        statement,
        (a, c, d, b, span.from, span.to),
        "reading impressions",
    )
    .await?;
    Ok(rows.into_iter().map(SummaryRow::into_row).collect())
}

pub(crate) async fn clicks_between(
    session: &Session,
    statement: &scylla::statement::prepared::PreparedStatement,
    partition: &EventPartition,
    span: crate::domain::slices::Span,
) -> Result<Vec<ClickRow>, StoreError> {
    let (a, c, d, b) = partition_values(partition);
    let rows: Vec<StoredClick> = read_all(
        session,
        statement,
        (a, c, d, b, span.from, span.to),
        "reading clicks",
    )
    .await?;
    Ok(rows.into_iter().map(ClickRow::from).collect())
}

fn decode_impressions(
    partition: &EventPartition,
    result: scylla::response::query_result::QueryResult,
    context: &'static str,
) -> Result<Vec<Impression>, StoreError> {
    let rows = result
        .into_rows_result()
        .map_err(|error| decode_error(context, error))?;
    rows.rows::<FullImpressionRow>()
        .map_err(|error| decode_error(context, error))?
        .map(|row| {
            row.map(|row| row.into_impression(partition))
                .map_err(|error| decode_error(context, error))
        })
        .collect()
}

pub(crate) async fn impression_page(
    session: &Session,
    statements: &EventStatements,
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
    let impressions = decode_impressions(partition, result, CONTEXT)?;
    let next = match paging {
        PagingStateResponse::HasMorePages { state } => state
            .as_bytes_slice()
            .map(|bytes| PageCursor::new(bytes.to_vec())),
        PagingStateResponse::NoMorePages => None,
    };
    Ok(ImpressionPage { impressions, next })
}

pub(crate) async fn newest_impressions(
    session: &Session,
    statements: &EventStatements,
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
    decode_impressions(partition, result, CONTEXT)
}
