//! Impressions and clicks in the embedded store: the full and thin rows of each impression,
//! clicks and the click index, read a partition (or a page of one) at a time.

use super::committer::Guarded;
use super::engine::{Table, corrupt, engine_error};
use super::{EmbeddedStore, keys, rows};
use crate::domain::event::{Click, Impression};
use crate::domain::ids::{AdId, CampaignKey, ImpressionId, UserId};
use crate::domain::partition::EventPartition;
use crate::domain::time::EventTime;
use crate::domain::traffic::any_valid;
use crate::domain::user_data::UserData;
use crate::store::{
    ClickRow, EventStore, ImpressionPage, ImpressionSummaryRow, PageCursor, StoreError,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// Rows per page of a partition read for exports and reports.
const EXPORT_PAGE_ROWS: usize = 2_000;
/// Clicks of one impression read to find its first and whether any is valid (as on Cassandra).
const MAX_CLICKS_READ: usize = 100;

/// An invalid copy's row, written only where no valid copy is stored.
fn guard((table, key, value): (Table, Vec<u8>, Vec<u8>), keeps: fn(&[u8]) -> bool) -> Guarded {
    Guarded {
        table,
        key,
        value,
        keeps,
    }
}

/// A full impression row of `partition` back from its key and value.
fn full_impression(partition: &EventPartition, key: &[u8], value: &[u8]) -> Option<Impression> {
    let (at, impression_id) = keys::decode_event_key(key)?;
    let row = rows::decode_impression_value(value)?;
    Some(Impression {
        impression_id,
        campaign: partition.campaign,
        ad_id: row.ad_id,
        user_id: row.user_id,
        timestamp: EventTime::from_stored(at),
        user_ip: row.user_ip,
        user_data: UserData::from_stored(row.user_data),
        user_agent: row.user_agent,
        invalid: row.invalid,
    })
}

impl EmbeddedStore {
    /// Every row of one event partition, its key's time and id decoded, the value by `decode`.
    async fn read_partition<R>(
        &self,
        table: Table,
        partition: &EventPartition,
        context: &'static str,
        decode: impl Fn(DateTime<Utc>, ImpressionId, &[u8]) -> Option<R>,
    ) -> Result<Vec<R>, StoreError> {
        let rows = self
            .scan(table, keys::partition_prefix(partition), None, context)
            .await?;
        rows.iter()
            .map(|(key, value)| {
                let (at, impression_id) =
                    keys::decode_event_key(key).ok_or_else(|| corrupt(context))?;
                decode(at, impression_id, value).ok_or_else(|| corrupt(context))
            })
            .collect()
    }
}

#[async_trait]
impl EventStore for EmbeddedStore {
    async fn write_impressions(
        &self,
        partition: &EventPartition,
        impressions: &[Impression],
    ) -> Result<(), StoreError> {
        let mut rows = Vec::with_capacity(impressions.len() * 3);
        let mut guarded = Vec::new();
        for event in impressions {
            let key = keys::event_key(partition, event.timestamp.instant(), event.impression_id);
            let full = (
                Table::Impression,
                key.clone(),
                rows::impression_value(event),
            );
            let thin = (Table::ImpressionSummary, key, rows::summary_value(event));
            let copy = super::slices::copy_row(partition, event);
            if event.invalid.is_none() {
                rows.extend([full, thin, (copy.table, copy.key, copy.value)]);
            } else {
                guarded.push(guard(full, rows::impression_is_valid));
                guarded.push(guard(thin, rows::summary_is_valid));
                guarded.push(copy);
            }
        }
        self.committer
            .commit_guarded("writing impressions", rows, guarded)
            .await
    }

    async fn write_clicks(
        &self,
        partition: &EventPartition,
        clicks: &[Click],
    ) -> Result<(), StoreError> {
        let mut rows = Vec::with_capacity(clicks.len() * 2);
        let mut guarded = Vec::new();
        for click in clicks {
            let mut value = click.ad_id.as_uuid().as_bytes().to_vec();
            value.extend(rows::traffic_suffix(
                click.invalid,
                click.user_agent.as_ref(),
            ));
            let key = keys::event_key(partition, click.timestamp.instant(), click.impression_id);
            let index = keys::click_index_key(
                click.campaign,
                click.impression_id,
                click.timestamp.instant(),
            );
            let row = (Table::Click, key, value.clone());
            // The index keeps the ad and the reason code, not the user agent.
            value.truncate(17);
            let index_row = (Table::ClickByImpression, index, value);
            if click.invalid.is_none() {
                rows.extend([row, index_row]);
            } else {
                guarded.push(guard(row, rows::click_is_valid));
                guarded.push(guard(index_row, rows::click_is_valid));
            }
        }
        self.committer
            .commit_guarded("writing clicks", rows, guarded)
            .await
    }

    async fn read_impression_summaries(
        &self,
        partition: &EventPartition,
    ) -> Result<Vec<ImpressionSummaryRow>, StoreError> {
        self.read_partition(
            Table::ImpressionSummary,
            partition,
            "reading impressions",
            |at, impression_id, value| {
                let (ad, user) = rows::decode_two_ids(value)?;
                Some(ImpressionSummaryRow {
                    impression_id,
                    ad_id: AdId::new(ad),
                    user_id: UserId::new(user),
                    timestamp: EventTime::from_stored(at),
                    invalid: rows::decode_summary_invalid(value)?,
                })
            },
        )
        .await
    }

    async fn read_impression_page(
        &self,
        partition: &EventPartition,
        cursor: Option<PageCursor>,
    ) -> Result<ImpressionPage, StoreError> {
        const CONTEXT: &str = "reading impressions";
        // Keys run newest first, so a page is read backwards from the last key returned.
        let prefix = keys::partition_prefix(partition);
        let rows = self
            .blocking(move |tables| {
                let table = tables.get(Table::Impression);
                let rows = match cursor {
                    None => table.prefix(&prefix),
                    Some(cursor) => table.range(prefix.clone()..cursor.bytes().to_vec()),
                };
                rows.rev()
                    .take(EXPORT_PAGE_ROWS)
                    .map(|guard| {
                        guard
                            .into_inner()
                            .map_err(|error| engine_error(CONTEXT, error))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .await?;
        let next = (rows.len() == EXPORT_PAGE_ROWS)
            .then(|| rows.last().map(|(key, _)| PageCursor::new(key.to_vec())))
            .flatten();
        let impressions = rows
            .iter()
            .map(|(key, value)| {
                full_impression(partition, key, value).ok_or_else(|| corrupt(CONTEXT))
            })
            .collect::<Result<_, _>>()?;
        Ok(ImpressionPage { impressions, next })
    }

    async fn read_newest_impressions(
        &self,
        partition: &EventPartition,
        limit: usize,
    ) -> Result<Vec<Impression>, StoreError> {
        const CONTEXT: &str = "reading the newest impressions";
        let rows = self
            .scan(
                Table::Impression,
                keys::partition_prefix(partition),
                Some(limit),
                CONTEXT,
            )
            .await?;
        rows.iter()
            .map(|(key, value)| {
                full_impression(partition, key, value).ok_or_else(|| corrupt(CONTEXT))
            })
            .collect()
    }

    async fn read_clicks(&self, partition: &EventPartition) -> Result<Vec<ClickRow>, StoreError> {
        self.read_partition(
            Table::Click,
            partition,
            "reading clicks",
            |at, impression_id, value| {
                let (invalid, _) = rows::decode_traffic_suffix(value.get(16..)?)?;
                Some(ClickRow {
                    impression_id,
                    ad_id: AdId::new(rows::decode_one_id(value)?),
                    timestamp: EventTime::from_stored(at),
                    invalid,
                })
            },
        )
        .await
    }

    async fn first_click(
        &self,
        campaign: CampaignKey,
        impression_id: ImpressionId,
    ) -> Result<Option<ClickRow>, StoreError> {
        const CONTEXT: &str = "reading the click index";
        // Oldest first: the first is the first click; the click is valid if any copy is.
        let rows = self
            .scan(
                Table::ClickByImpression,
                keys::click_index_prefix(campaign, impression_id),
                Some(MAX_CLICKS_READ),
                CONTEXT,
            )
            .await?;
        let clicks = rows
            .iter()
            .map(|(key, value)| {
                let at = keys::decode_click_index_time(key).ok_or_else(|| corrupt(CONTEXT))?;
                let ad = rows::decode_one_id(value).ok_or_else(|| corrupt(CONTEXT))?;
                let (invalid, _) = value
                    .get(16..)
                    .and_then(rows::decode_traffic_suffix)
                    .ok_or_else(|| corrupt(CONTEXT))?;
                Ok(ClickRow {
                    impression_id,
                    ad_id: AdId::new(ad),
                    timestamp: EventTime::from_stored(at),
                    invalid,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(clicks.first().map(|first| ClickRow {
            invalid: any_valid(clicks.iter().map(|copy| copy.invalid)),
            ..*first
        }))
    }
}
