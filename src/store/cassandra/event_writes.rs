//! Writing one partition's events, as unlogged single-partition batches or as concurrent
//! single-row inserts ([`WriteMode`]). An impression's full and thin rows share the partition
//! key, and so does its copies-index row: all go into the same batch, one mutation per chunk.

use super::config::WriteMode;
use super::event_statements::EventStatements;
use super::statements::{PartitionValues, failed, partition_values};
use crate::domain::event::{Click, Impression};
use crate::domain::partition::EventPartition;
use crate::domain::traffic::{InvalidReason, UserAgent};
use crate::domain::view::Client;
use crate::store::StoreError;
use chrono::{DateTime, NaiveDate, Utc};
use futures::future::try_join_all;
use scylla::SerializeRow;
use scylla::client::session::Session;
use scylla::statement::batch::{Batch, BatchType};
use scylla::value::MaybeUnset;
use std::collections::BTreeMap;
use std::net::IpAddr;
use uuid::Uuid;

/// Events per batch: far below Cassandra's mutation limit (half a commit-log segment, 16 MiB
/// by default) even with the largest user_data, and small enough to spread over connections.
const EVENTS_PER_BATCH: usize = 100;
/// Bytes of user_data per batch, so a batch of attribute-heavy impressions stays ~1 MiB.
const USER_DATA_BYTES_PER_BATCH: usize = 1 << 20;

/// Single-row inserts in flight for one partition write: enough to fill a connection's
/// pipeline without one large request starving the others.
const ROWS_IN_FLIGHT: usize = 128;

/// What a write of one partition's events needs: where, with which statements, how.
pub(crate) struct EventWriter<'a> {
    pub(crate) session: &'a Session,
    pub(crate) statements: &'a EventStatements,
    pub(crate) mode: WriteMode,
    /// Seconds for `USING TTL` (0: never expire).
    pub(crate) ttl: i32,
}

/// Runs `insert` for every item, [`ROWS_IN_FLIGHT`] at a time, stopping at the first failure.
async fn bounded<'a, T, F>(items: &'a [T], insert: impl Fn(&'a T) -> F) -> Result<(), StoreError>
where
    F: std::future::Future<Output = Result<(), StoreError>>,
{
    for chunk in items.chunks(ROWS_IN_FLIGHT) {
        try_join_all(chunk.iter().map(&insert)).await?;
    }
    Ok(())
}

/// A copy's `valid` and `invalid` cells: a valid copy sets only `valid`, an invalid one only
/// `invalid`, so copies of one row merge cell by cell into "valid if any copy is" whatever
/// their order (migrations/0008_invalid_traffic.cql).
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
pub(crate) struct Validity {
    valid: MaybeUnset<bool>,
    invalid: MaybeUnset<&'static str>,
}

impl Validity {
    pub(crate) fn of(invalid: Option<InvalidReason>) -> Self {
        match invalid {
            None => Self {
                valid: MaybeUnset::Set(true),
                invalid: MaybeUnset::Unset,
            },
            Some(reason) => Self {
                valid: MaybeUnset::Unset,
                invalid: MaybeUnset::Set(reason.as_str()),
            },
        }
    }
}

/// A cell written only when there is a value (no tombstone).
pub(crate) fn set_or_unset<T>(value: Option<T>) -> MaybeUnset<T> {
    value.map_or(MaybeUnset::Unset, MaybeUnset::Set)
}

/// A client as its two cells (network, user-agent tag), each unset when unknown.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
pub(crate) struct ClientCells {
    network: MaybeUnset<Vec<u8>>,
    agent: MaybeUnset<i64>,
}

impl ClientCells {
    pub(crate) fn of(client: Client) -> Self {
        Self {
            network: set_or_unset(client.network.map(|network| network.as_bytes().to_vec())),
            agent: set_or_unset(client.agent.map(|agent| agent.stored())),
        }
    }

    fn unset() -> Self {
        Self::of(Client::default())
    }
}

/// A user agent as a bound value: unset when there is none (no tombstone).
pub(crate) fn user_agent(agent: Option<&UserAgent>) -> MaybeUnset<&str> {
    agent.map_or(MaybeUnset::Unset, |agent| MaybeUnset::Set(agent.as_str()))
}

/// The bound values of an `impression` insert, in the statement's order.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct ImpressionValues<'a> {
    advertiser_id: Uuid,
    campaign_id: Uuid,
    day: NaiveDate,
    bucket_id: i16,
    timestamp: DateTime<Utc>,
    impression_id: Uuid,
    ad_id: Uuid,
    user_id: Uuid,
    // Unset, not null: a null would write a tombstone.
    user_ip: MaybeUnset<IpAddr>,
    user_data: MaybeUnset<&'a BTreeMap<String, String>>,
    user_agent: MaybeUnset<&'a str>,
    #[scylla(flatten)]
    validity: Validity,
    ttl: i32,
}

impl<'a> ImpressionValues<'a> {
    fn new(key: PartitionValues, event: &'a Impression, ttl: i32) -> Self {
        let (advertiser_id, campaign_id, day, bucket_id) = key;
        Self {
            advertiser_id,
            campaign_id,
            day,
            bucket_id,
            timestamp: event.timestamp.instant(),
            impression_id: event.impression_id.as_uuid(),
            ad_id: event.ad_id.as_uuid(),
            user_id: event.user_id.as_uuid(),
            user_ip: event.user_ip.map_or(MaybeUnset::Unset, MaybeUnset::Set),
            user_data: if event.user_data.is_empty() {
                MaybeUnset::Unset
            } else {
                MaybeUnset::Set(event.user_data.entries())
            },
            user_agent: user_agent(event.user_agent.as_ref()),
            validity: Validity::of(event.invalid),
            ttl,
        }
    }
}

/// The bound values of an `impression_summary` insert.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct SummaryValues {
    advertiser_id: Uuid,
    campaign_id: Uuid,
    day: NaiveDate,
    bucket_id: i16,
    timestamp: DateTime<Utc>,
    impression_id: Uuid,
    ad_id: Uuid,
    user_id: Uuid,
    #[scylla(flatten)]
    validity: Validity,
    /// A POSTed copy's client and a pixel's, in cells of their own: neither kind of copy
    /// overwrites the other's, whatever order they arrive in.
    #[scylla(flatten)]
    posted: ClientCells,
    #[scylla(flatten)]
    pixel: ClientCells,
    pixel_at: MaybeUnset<DateTime<Utc>>,
    ttl: i32,
}

impl SummaryValues {
    fn new(key: PartitionValues, event: &Impression, ttl: i32) -> Self {
        let (advertiser_id, campaign_id, day, bucket_id) = key;
        Self {
            advertiser_id,
            campaign_id,
            day,
            bucket_id,
            timestamp: event.timestamp.instant(),
            impression_id: event.impression_id.as_uuid(),
            ad_id: event.ad_id.as_uuid(),
            user_id: event.user_id.as_uuid(),
            validity: Validity::of(event.invalid),
            posted: match event.pixel_arrival {
                None => ClientCells::of(event.client()),
                Some(_) => ClientCells::unset(),
            },
            pixel: match event.pixel_arrival {
                Some(_) => ClientCells::of(event.client()),
                None => ClientCells::unset(),
            },
            pixel_at: set_or_unset(event.pixel_arrival),
            ttl,
        }
    }
}

/// The bound values of a `click` insert.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct ClickValues<'a> {
    advertiser_id: Uuid,
    campaign_id: Uuid,
    day: NaiveDate,
    bucket_id: i16,
    timestamp: DateTime<Utc>,
    impression_id: Uuid,
    ad_id: Uuid,
    user_agent: MaybeUnset<&'a str>,
    #[scylla(flatten)]
    validity: Validity,
    ttl: i32,
}

impl<'a> ClickValues<'a> {
    fn new(key: PartitionValues, click: &'a Click, ttl: i32) -> Self {
        let (advertiser_id, campaign_id, day, bucket_id) = key;
        Self {
            advertiser_id,
            campaign_id,
            day,
            bucket_id,
            timestamp: click.timestamp.instant(),
            impression_id: click.impression_id.as_uuid(),
            ad_id: click.ad_id.as_uuid(),
            user_agent: user_agent(click.user_agent.as_ref()),
            validity: Validity::of(click.invalid),
            ttl,
        }
    }
}

/// The bound values of a `click_by_impression` insert.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct ClickIndexValues {
    advertiser_id: Uuid,
    campaign_id: Uuid,
    impression_id: Uuid,
    timestamp: DateTime<Utc>,
    ad_id: Uuid,
    #[scylla(flatten)]
    validity: Validity,
    ttl: i32,
}

/// The bound values of an `impression_copy` insert (the table's own TTL applies).
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct CopyValues {
    advertiser_id: Uuid,
    campaign_id: Uuid,
    day: NaiveDate,
    bucket_id: i16,
    impression_id: Uuid,
    timestamp: DateTime<Utc>,
    #[scylla(flatten)]
    validity: Validity,
}

impl CopyValues {
    fn new(key: PartitionValues, event: &Impression) -> Self {
        let (advertiser_id, campaign_id, day, bucket_id) = key;
        Self {
            advertiser_id,
            campaign_id,
            day,
            bucket_id,
            impression_id: event.impression_id.as_uuid(),
            timestamp: event.timestamp.instant(),
            validity: Validity::of(event.invalid),
        }
    }
}

/// Splits a partition's impressions into batches bounded by count and user_data bytes.
fn impression_chunks(impressions: &[Impression]) -> Vec<&[Impression]> {
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (index, event) in impressions.iter().enumerate() {
        let size: usize = event
            .user_data
            .entries()
            .iter()
            .map(|(key, value)| key.len() + value.len())
            .sum();
        if index > start
            && (index - start >= EVENTS_PER_BATCH || bytes + size > USER_DATA_BYTES_PER_BATCH)
        {
            chunks.push(&impressions[start..index]);
            (start, bytes) = (index, 0);
        }
        bytes += size;
    }
    if start < impressions.len() {
        chunks.push(&impressions[start..]);
    }
    chunks
}

pub(crate) async fn write_impressions(
    writer: &EventWriter<'_>,
    partition: &EventPartition,
    impressions: &[Impression],
) -> Result<(), StoreError> {
    let EventWriter {
        session,
        statements,
        mode,
        ttl,
    } = *writer;
    let key = partition_values(partition);
    match mode {
        WriteMode::Batch => {
            let batches = impression_chunks(impressions)
                .into_iter()
                .map(|chunk| async move {
                    let mut batch = Batch::new(BatchType::Unlogged);
                    batch.set_is_idempotent(true);
                    let mut values: Vec<
                        Box<dyn scylla::serialize::row::SerializeRow + Send + Sync>,
                    > = Vec::with_capacity(chunk.len() * 3);
                    for event in chunk {
                        batch.append_statement(statements.insert_impression.clone());
                        values.push(Box::new(ImpressionValues::new(key, event, ttl)));
                        batch.append_statement(statements.insert_impression_summary.clone());
                        values.push(Box::new(SummaryValues::new(key, event, ttl)));
                        batch.append_statement(statements.insert_impression_copy.clone());
                        values.push(Box::new(CopyValues::new(key, event)));
                    }
                    session
                        .batch(&batch, values)
                        .await
                        .map_err(failed("writing impressions"))
                });
            try_join_all(batches).await?;
        }
        WriteMode::Rows => {
            bounded(impressions, |event| async move {
                let full = session.execute_unpaged(
                    &statements.insert_impression,
                    ImpressionValues::new(key, event, ttl),
                );
                let thin = session.execute_unpaged(
                    &statements.insert_impression_summary,
                    SummaryValues::new(key, event, ttl),
                );
                let copy = session.execute_unpaged(
                    &statements.insert_impression_copy,
                    CopyValues::new(key, event),
                );
                futures::try_join!(full, thin, copy)
                    .map(|_| ())
                    .map_err(failed("writing impressions"))
            })
            .await?;
        }
    }
    Ok(())
}

pub(crate) async fn write_clicks(
    writer: &EventWriter<'_>,
    partition: &EventPartition,
    clicks: &[Click],
) -> Result<(), StoreError> {
    let EventWriter {
        session,
        statements,
        mode,
        ttl,
    } = *writer;
    let key = partition_values(partition);
    let click_rows = async {
        match mode {
            WriteMode::Batch => {
                let batches = clicks.chunks(EVENTS_PER_BATCH).map(|chunk| async move {
                    let mut batch = Batch::new(BatchType::Unlogged);
                    batch.set_is_idempotent(true);
                    let mut values = Vec::with_capacity(chunk.len());
                    for click in chunk {
                        batch.append_statement(statements.insert_click.clone());
                        values.push(ClickValues::new(key, click, ttl));
                    }
                    session
                        .batch(&batch, values)
                        .await
                        .map_err(failed("writing clicks"))
                });
                try_join_all(batches).await.map(|_| ())
            }
            WriteMode::Rows => {
                bounded(clicks, |click| async move {
                    session
                        .execute_unpaged(
                            &statements.insert_click,
                            ClickValues::new(key, click, ttl),
                        )
                        .await
                        .map(|_| ())
                        .map_err(failed("writing clicks"))
                })
                .await
            }
        }
    };
    // Each index row is its own partition (one per impression): single-row inserts.
    let index_rows = bounded(clicks, |click| async move {
        let values = ClickIndexValues {
            advertiser_id: key.0,
            campaign_id: key.1,
            impression_id: click.impression_id.as_uuid(),
            timestamp: click.timestamp.instant(),
            ad_id: click.ad_id.as_uuid(),
            validity: Validity::of(click.invalid),
            ttl,
        };
        session
            .execute_unpaged(&statements.insert_click_index, values)
            .await
            .map(|_| ())
            .map_err(failed("writing the click index"))
    });
    futures::try_join!(click_rows, index_rows)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{AdId, AdvertiserId, CampaignId, CampaignKey, ImpressionId, UserId};
    use crate::domain::time::EventTime;
    use crate::domain::user_data::UserData;

    /// An impression with `entries` user_data entries of 1000-byte values.
    fn impression(entries: usize) -> Impression {
        let user_data = UserData::new(
            (0..entries)
                .map(|i| (format!("k{i:02}"), "v".repeat(1000)))
                .collect(),
        )
        .expect("valid");
        Impression {
            impression_id: ImpressionId::new(Uuid::new_v4()),
            campaign: CampaignKey {
                advertiser_id: AdvertiserId::new(Uuid::nil()),
                campaign_id: CampaignId::new(Uuid::nil()),
            },
            ad_id: AdId::new(Uuid::nil()),
            user_id: UserId::new(Uuid::nil()),
            timestamp: EventTime::from_stored(chrono::Utc::now()),
            user_ip: None,
            user_data,
            user_agent: None,
            invalid: None,
            pixel_arrival: None,
            ip_is_viewers: true,
        }
    }

    #[test]
    fn batches_are_bounded_by_count_and_bytes_and_keep_every_event() {
        let thin: Vec<_> = (0..250).map(|_| impression(0)).collect();
        let sizes: Vec<usize> = impression_chunks(&thin).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [100, 100, 50]);

        // 64 KB of attributes each: a batch holds at most 16 of them.
        let heavy: Vec<_> = (0..100).map(|_| impression(64)).collect();
        let chunks = impression_chunks(&heavy);
        assert_eq!(chunks.iter().map(|c| c.len()).sum::<usize>(), 100);
        for chunk in chunks {
            assert!(
                chunk.len() * 64 * 1003 <= USER_DATA_BYTES_PER_BATCH,
                "{}",
                chunk.len()
            );
        }
    }
}
