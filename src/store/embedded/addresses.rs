//! Stored addresses brought under a `--store-ip` policy (`adevents privacy
//! truncate-addresses`): the impression table read in key order a page at a time, and each
//! changed row written back through the committer, so it is as durable as any write.
//!
//! The folder is locked to the process that opened it, so no server writes impressions while
//! the command runs: a row read and written back cannot have changed in between.

use super::engine::{Table, corrupt, engine_error};
use super::{EmbeddedStore, rows};
use crate::domain::address::StoreIp;
use crate::store::{AddressStore, RewriteReport, StoreError};
use async_trait::async_trait;

/// Rows read, and written back, at once: a commit of this many rows is small, and a page
/// holds little memory.
const PAGE_ROWS: usize = 2_000;

const CONTEXT: &str = "rewriting stored addresses";

/// The first key after `key` in key order.
fn after(key: &[u8]) -> Vec<u8> {
    let mut next = key.to_vec();
    next.push(0);
    next
}

#[async_trait]
impl AddressStore for EmbeddedStore {
    async fn rewrite_addresses(
        &self,
        policy: StoreIp,
        progress: &mut (dyn FnMut(RewriteReport) + Send),
    ) -> Result<RewriteReport, StoreError> {
        let mut report = RewriteReport::default();
        let mut from = Vec::new();
        loop {
            let start = std::mem::take(&mut from);
            let page = self
                .blocking(move |tables| {
                    tables
                        .get(Table::Impression)
                        .range(start..)
                        .take(PAGE_ROWS)
                        .map(|guard| {
                            guard
                                .into_inner()
                                .map_err(|error| engine_error(CONTEXT, error))
                        })
                        .collect::<Result<Vec<_>, _>>()
                })
                .await?;
            let Some((last, _)) = page.last() else {
                break;
            };
            from = after(last);
            let mut changed = Vec::new();
            for (key, value) in &page {
                if let Some(value) =
                    rows::with_address_kept(value, policy).ok_or_else(|| corrupt(CONTEXT))?
                {
                    changed.push((Table::Impression, key.to_vec(), value));
                }
            }
            report.rows_seen += page.len() as u64;
            report.rows_rewritten += changed.len() as u64;
            if !changed.is_empty() {
                self.write(CONTEXT, changed).await?;
            }
            progress(report);
            if page.len() < PAGE_ROWS {
                break;
            }
        }
        Ok(report)
    }
}
