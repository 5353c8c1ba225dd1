//! The event index on Cassandra (`event_index`, `migrations/0015_conversions.cql`): entries
//! grouped by their partition (advertiser, week, bucket of the key) and written as unlogged
//! single-partition batches, many partitions at once; read one key of one week at a time.
//!
//! Every write is a plain insert (no read): an entry written again is another row of its
//! `received`, and a valid one sets only `valid`, so of two copies of one row the valid wins.

use super::CassandraStore;
use super::config::KeyspaceName;
use super::errors::decode_error;
use super::event_writes::set_or_unset;
use super::statements::{prepare_all, read_all, write_partition};
use crate::domain::conversion::index::{IndexEntry, IndexKey, IndexedKind, Week};
use crate::domain::ids::{AdId, AdvertiserId, CampaignId, ImpressionId, UserId};
use crate::domain::retention::Retention;
use crate::domain::time::EventTime;
use crate::store::error::Message;
use crate::store::{EventIndexStore, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt};
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::MaybeUnset;
use scylla::{DeserializeRow, SerializeRow};
use std::collections::HashMap;
use uuid::Uuid;

/// Entries per batch: small rows, far below the mutation limit, and the size event batches use.
const ENTRIES_PER_BATCH: usize = 100;

/// Batches (or lone inserts) in flight for one write: an ingest flush touches a few dozen
/// partitions of each advertiser-week.
const BATCHES_IN_FLIGHT: usize = 32;

pub(crate) struct EventIndexStatements {
    insert: PreparedStatement,
    select: PreparedStatement,
    select_newest: PreparedStatement,
}

impl EventIndexStatements {
    pub(crate) async fn prepare(
        session: &Session,
        keyspace: &KeyspaceName,
    ) -> Result<Self, StoreError> {
        let [insert, select, select_newest] = prepare_all(
            session,
            [
                format!(
                    "INSERT INTO {keyspace}.event_index (advertiser_id, week, bucket_id, key_kind, \
                     key_id, timestamp, kind, impression_id, campaign_id, received, ad_id, user_id, \
                     valid) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
                ),
                format!(
                    "SELECT timestamp, kind, impression_id, campaign_id, received, ad_id, user_id, \
                     valid FROM {keyspace}.event_index WHERE advertiser_id = ? AND week = ? \
                     AND bucket_id = ? AND key_kind = ? AND key_id = ?"
                ),
                format!(
                    "SELECT timestamp, kind, impression_id, campaign_id, received, ad_id, user_id, \
                     valid FROM {keyspace}.event_index WHERE advertiser_id = ? AND week = ? \
                     AND bucket_id = ? AND key_kind = ? AND key_id = ? AND timestamp <= ? \
                     ORDER BY key_kind DESC, key_id DESC, timestamp DESC LIMIT ?"
                ),
            ],
        )
        .await?;
        Ok(Self {
            insert,
            select,
            select_newest,
        })
    }
}

/// An index partition's key: advertiser, week, bucket.
type IndexPartition = (Uuid, i32, i16);

pub(crate) fn partition_of(advertiser: AdvertiserId, week: Week, key: IndexKey) -> IndexPartition {
    // Below INDEX_BUCKETS (64) by construction, so it fits a smallint.
    (advertiser.as_uuid(), week.get(), key.bucket() as i16)
}

/// The bound values of an `event_index` insert, in the statement's order.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct EntryValues {
    advertiser_id: Uuid,
    week: i32,
    bucket_id: i16,
    key_kind: i8,
    key_id: Uuid,
    timestamp: DateTime<Utc>,
    kind: i8,
    impression_id: Uuid,
    campaign_id: Uuid,
    received: DateTime<Utc>,
    ad_id: Uuid,
    // Unset, not null: a null would write a tombstone.
    user_id: MaybeUnset<Uuid>,
    /// Set only for a valid entry, so a row stored once valid and once invalid reads valid.
    valid: MaybeUnset<bool>,
    ttl: i32,
}

impl EntryValues {
    fn new(entry: &IndexEntry, ttl: i32) -> Self {
        let (advertiser_id, week, bucket_id) =
            partition_of(entry.advertiser_id, entry.week(), entry.key);
        Self {
            advertiser_id,
            week,
            bucket_id,
            key_kind: entry.key.code(),
            key_id: entry.key.id(),
            timestamp: entry.timestamp.instant(),
            kind: entry.kind.code(),
            impression_id: entry.impression_id.as_uuid(),
            campaign_id: entry.campaign_id.as_uuid(),
            received: entry.received,
            ad_id: entry.ad_id.as_uuid(),
            user_id: set_or_unset(entry.user_id.map(|user| user.as_uuid())),
            valid: if entry.valid {
                MaybeUnset::Set(true)
            } else {
                MaybeUnset::Unset
            },
            ttl,
        }
    }
}

/// A row of one key's entries.
#[derive(DeserializeRow)]
struct StoredEntry {
    timestamp: DateTime<Utc>,
    kind: i8,
    impression_id: Uuid,
    campaign_id: Uuid,
    received: DateTime<Utc>,
    ad_id: Option<Uuid>,
    user_id: Option<Uuid>,
    valid: Option<bool>,
}

impl StoredEntry {
    fn into_entry(self, advertiser: AdvertiserId, key: IndexKey) -> Result<IndexEntry, String> {
        let kind = IndexedKind::from_code(self.kind)
            .ok_or_else(|| format!("unknown event kind {}", self.kind))?;
        let ad_id = self.ad_id.ok_or("an index entry without its ad")?;
        Ok(IndexEntry {
            advertiser_id: advertiser,
            key,
            timestamp: EventTime::from_stored(self.timestamp),
            kind,
            impression_id: ImpressionId::new(self.impression_id),
            campaign_id: CampaignId::new(self.campaign_id),
            ad_id: AdId::new(ad_id),
            user_id: self.user_id.map(UserId::new),
            received: self.received,
            valid: self.valid == Some(true),
        })
    }
}

/// Splits entries into the writes to make: each one partition's, at most [`ENTRIES_PER_BATCH`].
fn index_batches(entries: &[IndexEntry]) -> Vec<Vec<&IndexEntry>> {
    let mut by_partition: HashMap<IndexPartition, Vec<&IndexEntry>> = HashMap::new();
    for entry in entries {
        by_partition
            .entry(partition_of(entry.advertiser_id, entry.week(), entry.key))
            .or_default()
            .push(entry);
    }
    let mut batches = Vec::with_capacity(by_partition.len());
    for (_, mut group) in by_partition {
        while group.len() > ENTRIES_PER_BATCH {
            let rest = group.split_off(ENTRIES_PER_BATCH);
            batches.push(std::mem::replace(&mut group, rest));
        }
        batches.push(group);
    }
    batches
}

impl CassandraStore {
    async fn index_statements(&self) -> Result<&EventIndexStatements, StoreError> {
        Ok(&self.prepared().await?.event_index)
    }
}

/// Writes one partition's entries: a lone entry as a plain insert, more as one unlogged batch.
async fn write_batch(
    session: &Session,
    insert: &PreparedStatement,
    entries: Vec<&IndexEntry>,
    retain_raw: Retention,
) -> Result<(), StoreError> {
    // Each entry expires with the raw event it points to: from its event's UTC day.
    let now = Utc::now();
    let ttl = |entry: &IndexEntry| {
        retain_raw
            .ttl_seconds(entry.timestamp.utc_day(), now)
            .unwrap_or(0)
    };
    let rows = entries
        .into_iter()
        .map(|entry| EntryValues::new(entry, ttl(entry)))
        .collect();
    write_partition(session, insert, rows, "writing the event index").await
}

/// A key's rows as index entries, failing on the first that does not decode.
fn decode_entries(
    rows: Vec<StoredEntry>,
    advertiser: AdvertiserId,
    key: IndexKey,
    context: &'static str,
) -> Result<Vec<IndexEntry>, StoreError> {
    rows.into_iter()
        .map(|row| {
            row.into_entry(advertiser, key)
                .map_err(|why| decode_error(context, Message(why)))
        })
        .collect()
}

#[async_trait]
impl EventIndexStore for CassandraStore {
    async fn write_index(&self, entries: &[IndexEntry]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let insert = &self.index_statements().await?.insert;
        let (session, retain_raw) = (&*self.session, self.retain_raw);
        // The futures are made before they enter the stream (they do nothing until polled): a
        // closure inside the stream would not prove the future `Send` for every lifetime.
        let writes: Vec<_> = index_batches(entries)
            .into_iter()
            .map(|batch| write_batch(session, insert, batch, retain_raw))
            .collect();
        futures::stream::iter(writes)
            .buffer_unordered(BATCHES_IN_FLIGHT)
            .try_collect::<()>()
            .await
    }

    async fn read_index(
        &self,
        advertiser: AdvertiserId,
        week: Week,
        key: IndexKey,
    ) -> Result<Vec<IndexEntry>, StoreError> {
        const CONTEXT: &str = "reading the event index";
        let select = &self.index_statements().await?.select;
        let (advertiser_id, week, bucket_id) = partition_of(advertiser, week, key);
        let rows: Vec<StoredEntry> = read_all(
            &self.session,
            select,
            (advertiser_id, week, bucket_id, key.code(), key.id()),
            CONTEXT,
        )
        .await?;
        decode_entries(rows, advertiser, key, CONTEXT)
    }

    async fn read_index_newest(
        &self,
        advertiser: AdvertiserId,
        week: Week,
        key: IndexKey,
        at: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<IndexEntry>, StoreError> {
        const CONTEXT: &str = "reading the event index, newest first";
        let select = &self.index_statements().await?.select_newest;
        let (advertiser_id, week, bucket_id) = partition_of(advertiser, week, key);
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        let rows: Vec<StoredEntry> = read_all(
            &self.session,
            select,
            (
                advertiser_id,
                week,
                bucket_id,
                key.code(),
                key.id(),
                at,
                limit,
            ),
            CONTEXT,
        )
        .await?;
        decode_entries(rows, advertiser, key, CONTEXT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn entry(advertiser: u128, key: IndexKey, day: i64, n: u128) -> IndexEntry {
        let at = DateTime::from_timestamp(1_780_000_000 + day * 86_400, 0).expect("time");
        IndexEntry {
            advertiser_id: AdvertiserId::new(Uuid::from_u128(advertiser)),
            key,
            timestamp: EventTime::from_stored(at),
            kind: IndexedKind::Impression,
            impression_id: ImpressionId::new(Uuid::from_u128(n)),
            campaign_id: CampaignId::new(Uuid::from_u128(7)),
            ad_id: AdId::new(Uuid::from_u128(8)),
            user_id: None,
            received: at,
            valid: true,
        }
    }

    #[test]
    fn batches_hold_one_partition_each_at_most_a_hundred_and_every_entry_once() {
        let user = IndexKey::User(UserId::new(Uuid::from_u128(1)));
        let mut entries: Vec<IndexEntry> = (0..250).map(|n| entry(1, user, 0, n)).collect();
        // Another advertiser, another week, other keys.
        entries.extend((0..5).map(|n| entry(2, user, 0, 1000 + n)));
        entries.extend((0..5).map(|n| entry(1, user, 14, 2000 + n)));
        entries.extend((0..40).map(|n| {
            let key = IndexKey::Impression(ImpressionId::new(Uuid::from_u128(3000 + n)));
            entry(1, key, 0, 3000 + n)
        }));
        let batches = index_batches(&entries);

        let mut seen = HashSet::new();
        for batch in &batches {
            assert!(!batch.is_empty() && batch.len() <= ENTRIES_PER_BATCH);
            let first = partition_of(batch[0].advertiser_id, batch[0].week(), batch[0].key);
            for entry in batch {
                assert_eq!(
                    partition_of(entry.advertiser_id, entry.week(), entry.key),
                    first
                );
                assert!(seen.insert(entry.impression_id), "written twice");
            }
        }
        assert_eq!(seen.len(), entries.len());
        // A partition of n entries is ceil(n / 100) writes, not n: the user's 250 entries of
        // one week (with any impression key sharing its bucket) are three.
        let mut sizes: HashMap<IndexPartition, usize> = HashMap::new();
        for entry in &entries {
            *sizes
                .entry(partition_of(entry.advertiser_id, entry.week(), entry.key))
                .or_default() += 1;
        }
        let expected: usize = sizes.values().map(|n| n.div_ceil(ENTRIES_PER_BATCH)).sum();
        assert_eq!(batches.len(), expected);
        let user_week = partition_of(entries[0].advertiser_id, entries[0].week(), user);
        assert_eq!(sizes[&user_week].div_ceil(ENTRIES_PER_BATCH), 3);
    }

    #[test]
    fn rows_decode_to_entries_and_an_unknown_kind_is_refused() {
        let key = IndexKey::User(UserId::new(Uuid::from_u128(1)));
        let advertiser = AdvertiserId::new(Uuid::from_u128(2));
        let row = |kind: i8, valid: Option<bool>| StoredEntry {
            timestamp: DateTime::from_timestamp(1_780_000_000, 0).expect("time"),
            kind,
            impression_id: Uuid::from_u128(3),
            campaign_id: Uuid::from_u128(4),
            received: DateTime::from_timestamp(1_780_000_001, 0).expect("time"),
            ad_id: Some(Uuid::from_u128(5)),
            user_id: Some(Uuid::from_u128(1)),
            valid,
        };
        let click = row(1, Some(true))
            .into_entry(advertiser, key)
            .expect("decodes");
        assert_eq!(click.kind, IndexedKind::Click);
        assert!(click.valid);
        assert_eq!(click.user_id, Some(UserId::new(Uuid::from_u128(1))));
        // An invalid copy wrote no `valid` cell.
        assert!(
            !row(0, None)
                .into_entry(advertiser, key)
                .expect("decodes")
                .valid
        );
        assert!(row(9, Some(true)).into_entry(advertiser, key).is_err());
    }
}
