//! The prepared statements of impressions and clicks on Cassandra, shared by their writes
//! ([`super::event_writes`]) and reads ([`super::event_reads`]).

use super::config::KeyspaceName;
use super::statements::{EVENT_PARTITION, prepare_all};
use crate::store::StoreError;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;

/// Rows per page of a partition read for exports and reports: big enough to amortise a round
/// trip, small enough that an export holds little.
const PAGE_ROWS: i32 = 2_000;

/// Clicks of one impression read to find its first and whether any is valid: an impression is
/// clicked a handful of times; past this many copies, the first ones decide.
const MAX_CLICKS_READ: usize = 100;

/// The columns of a full impression, as [`event_reads::FullImpressionRow`] names them.
pub(crate) const FULL_COLUMNS: &str =
    "timestamp, impression_id, ad_id, user_id, user_ip, user_data, user_agent, valid, invalid";

/// The columns of `impression_summary` that counting reads (`event_reads::SummaryRow`).
pub(crate) const SUMMARY_COLUMNS: &str = "impression_id, ad_id, user_id, timestamp, valid, invalid, \
     client_net, client_agent, pixel_net, pixel_agent, pixel_at";

pub(crate) struct EventStatements {
    pub(crate) insert_impression: PreparedStatement,
    pub(crate) insert_impression_summary: PreparedStatement,
    pub(crate) insert_click: PreparedStatement,
    pub(crate) insert_click_index: PreparedStatement,
    /// A copies-index row, written in the impression's batch.
    pub(crate) insert_impression_copy: PreparedStatement,
    pub(crate) select_impression_summaries: PreparedStatement,
    pub(crate) select_clicks: PreparedStatement,
    pub(crate) select_first_click: PreparedStatement,
    /// A partition's full impressions, oldest first, a page at a time.
    pub(crate) select_page: PreparedStatement,
    /// A partition's newest full impressions, `LIMIT ?`.
    pub(crate) select_newest: PreparedStatement,
}

impl EventStatements {
    pub(crate) async fn prepare(
        session: &Session,
        keyspace: &KeyspaceName,
    ) -> Result<Self, StoreError> {
        let [
            insert_impression,
            insert_impression_summary,
            insert_click,
            insert_click_index,
            insert_impression_copy,
            select_impression_summaries,
            select_clicks,
            select_first_click,
            mut select_page,
            select_newest,
        ] = prepare_all(
            session,
            [
                format!(
                    "INSERT INTO {keyspace}.impression (advertiser_id, campaign_id, day, bucket_id, timestamp, \
                     impression_id, ad_id, user_id, user_ip, user_data, user_agent, valid, invalid) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.impression_summary (advertiser_id, campaign_id, day, bucket_id, timestamp, \
                     impression_id, ad_id, user_id, valid, invalid, client_net, client_agent, pixel_net, pixel_agent, \
                     pixel_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.click (advertiser_id, campaign_id, day, bucket_id, timestamp, \
                     impression_id, ad_id, user_agent, valid, invalid) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.click_by_impression (advertiser_id, campaign_id, impression_id, timestamp, ad_id, \
                     valid, invalid) VALUES (?, ?, ?, ?, ?, ?, ?) USING TTL ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.impression_copy (advertiser_id, campaign_id, day, bucket_id, \
                     impression_id, timestamp, valid, invalid) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                format!(
                    "SELECT {SUMMARY_COLUMNS} FROM {keyspace}.impression_summary \
                     WHERE {EVENT_PARTITION}"
                ),
                format!(
                    "SELECT impression_id, ad_id, timestamp, valid, invalid FROM {keyspace}.click WHERE {EVENT_PARTITION}"
                ),
                format!(
                    "SELECT impression_id, ad_id, timestamp, valid, invalid FROM {keyspace}.click_by_impression \
                     WHERE advertiser_id = ? AND campaign_id = ? AND impression_id = ? LIMIT {MAX_CLICKS_READ}"
                ),
                // The reverse of the table's clustering order: oldest first.
                format!(
                    "SELECT {FULL_COLUMNS} FROM {keyspace}.impression WHERE {EVENT_PARTITION} \
                     ORDER BY timestamp ASC, impression_id DESC"
                ),
                format!(
                    "SELECT {FULL_COLUMNS} FROM {keyspace}.impression WHERE {EVENT_PARTITION} LIMIT ?"
                ),
            ],
        )
        .await?;
        select_page.set_page_size(PAGE_ROWS);
        Ok(Self {
            insert_impression,
            insert_impression_summary,
            insert_click,
            insert_click_index,
            insert_impression_copy,
            select_impression_summaries,
            select_clicks,
            select_first_click,
            select_page,
            select_newest,
        })
    }
}
