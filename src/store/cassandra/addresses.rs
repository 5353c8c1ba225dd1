//! Stored addresses brought under a `--store-ip` policy on Cassandra (`adevents privacy
//! truncate-addresses`): a paged scan of the whole `impression` table (in token order, the
//! order a full scan returns), and an update of `user_ip` for each row whose address the
//! policy changes. A one-off command, so a full scan is fine; its statements are prepared when
//! it runs, not with the request path's.
//!
//! Each update keeps what is left of the cell's TTL (`--retain-raw`): an update with none would
//! outlive the rest of its row and leave it behind as a row of nothing but an address.

use super::CassandraStore;
use super::errors::{decode_error, execution_error};
use super::statements::{execute, prepare_all};
use crate::domain::address::StoreIp;
use crate::store::{AddressStore, RewriteReport, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use futures::future::try_join_all;
use scylla::DeserializeRow;
use scylla::response::{PagingState, PagingStateResponse};
use std::net::IpAddr;
use uuid::Uuid;

/// Rows per page of the scan.
const PAGE_ROWS: i32 = 2_000;
/// Updates in flight at once: enough to keep a node busy, not enough to crowd out a server's
/// own requests on a live cluster.
const UPDATES_IN_FLIGHT: usize = 32;

const CONTEXT: &str = "rewriting stored addresses";

/// One impression's primary key, its address and that cell's remaining TTL.
#[derive(DeserializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct AddressRow {
    advertiser_id: Uuid,
    campaign_id: Uuid,
    day: NaiveDate,
    bucket_id: i16,
    timestamp: DateTime<Utc>,
    impression_id: Uuid,
    user_ip: Option<IpAddr>,
    user_ip_ttl: Option<i32>,
}

type Key = (Uuid, Uuid, NaiveDate, i16, DateTime<Utc>, Uuid);

impl AddressRow {
    fn key(&self) -> Key {
        (
            self.advertiser_id,
            self.campaign_id,
            self.day,
            self.bucket_id,
            self.timestamp,
            self.impression_id,
        )
    }
}

#[async_trait]
impl AddressStore for CassandraStore {
    async fn rewrite_addresses(
        &self,
        policy: StoreIp,
        progress: &mut (dyn FnMut(RewriteReport) + Send),
    ) -> Result<RewriteReport, StoreError> {
        let keyspace = &self.config.keyspace;
        const KEY: &str = "advertiser_id = ? AND campaign_id = ? AND day = ? AND bucket_id = ? \
                           AND timestamp = ? AND impression_id = ?";
        let [mut scan, update, delete] = prepare_all(
            &self.session,
            [
                format!(
                    "SELECT advertiser_id, campaign_id, day, bucket_id, timestamp, impression_id, \
                     user_ip, TTL(user_ip) FROM {keyspace}.impression"
                ),
                format!("UPDATE {keyspace}.impression USING TTL ? SET user_ip = ? WHERE {KEY}"),
                format!("DELETE user_ip FROM {keyspace}.impression WHERE {KEY}"),
            ],
        )
        .await?;
        scan.set_page_size(PAGE_ROWS);
        let mut report = RewriteReport::default();
        let mut paging = PagingState::start();
        loop {
            let (result, next) = self
                .session
                .execute_single_page(&scan, (), paging)
                .await
                .map_err(|error| execution_error(CONTEXT, error))?;
            let rows = result
                .into_rows_result()
                .map_err(|error| decode_error(CONTEXT, error))?;
            let rows = rows
                .rows::<AddressRow>()
                .map_err(|error| decode_error(CONTEXT, error))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|error| decode_error(CONTEXT, error))?;
            report.rows_seen += rows.len() as u64;
            let changed: Vec<(AddressRow, Option<IpAddr>)> = rows
                .into_iter()
                .filter_map(|row| {
                    let kept = policy.stored(row.user_ip);
                    (kept != row.user_ip).then_some((row, kept))
                })
                .collect();
            for chunk in changed.chunks(UPDATES_IN_FLIGHT) {
                try_join_all(chunk.iter().map(|(row, kept)| async {
                    match kept {
                        Some(address) => {
                            let ttl = row.user_ip_ttl.unwrap_or(0).max(0);
                            let (a, c, d, b, t, i) = row.key();
                            execute(
                                &self.session,
                                &update,
                                (ttl, address, a, c, d, b, t, i),
                                CONTEXT,
                            )
                            .await
                        }
                        None => execute(&self.session, &delete, row.key(), CONTEXT).await,
                    }
                }))
                .await?;
            }
            report.rows_rewritten += changed.len() as u64;
            progress(report);
            match next {
                PagingStateResponse::HasMorePages { state } => paging = state,
                PagingStateResponse::NoMorePages => break,
            }
        }
        Ok(report)
    }
}
