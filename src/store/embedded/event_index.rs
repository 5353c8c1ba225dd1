//! The event index in the embedded store: one row per entry and arrival under (week, key,
//! advertiser), so one key's week of one advertiser is one contiguous range, and a user's
//! entries of every advertiser in a week are one range too. That second range is what an
//! erasure or a subject access of every advertiser reads, so this store needs no subject
//! directory beside the index (the Cassandra store keeps one: its partitions are by
//! advertiser). The week first also makes a week's expiry one range of whole files.

use super::engine::{Table, corrupt, engine_error};
use super::{EmbeddedStore, keys};
use crate::domain::conversion::index::{IndexEntry, IndexKey, IndexedKind, Week};
use crate::domain::ids::{AdId, AdvertiserId, CampaignId, ImpressionId, UserId};
use crate::domain::privacy::SubjectWeek;
use crate::domain::time::EventTime;
use crate::store::{EventIndexStore, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::BTreeSet;
use uuid::Uuid;

/// Week (4), key kind (1), key id (16), advertiser (16).
const PREFIX_LEN: usize = 37;
/// The key's length past the prefix: time (8), kind (1), impression (16), campaign (16),
/// arrival (8).
const ENTRY_TAIL_LEN: usize = 49;

/// Every entry of `key` in the advertiser's `week` starts so (also what erasing the key
/// deletes).
pub(super) fn key_prefix(advertiser: AdvertiserId, week: Week, key: IndexKey) -> Vec<u8> {
    let mut bytes = key_in_week(week, key);
    bytes.extend_from_slice(advertiser.as_uuid().as_bytes());
    bytes
}

/// Every entry of `key` in `week`, of every advertiser, starts so.
fn key_in_week(week: Week, key: IndexKey) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(PREFIX_LEN + ENTRY_TAIL_LEN);
    bytes.extend_from_slice(&keys::week_bytes(week));
    bytes.push(key.code() as u8);
    bytes.extend_from_slice(key.id().as_bytes());
    bytes
}

/// The key of an entry as format 4 of the data folder wrote it (advertiser, week, key kind,
/// key id, then the same tail) in this layout: the same bytes in another order.
pub(super) fn rekeyed_from_format_4(old: &[u8]) -> Option<Vec<u8>> {
    if old.len() != PREFIX_LEN + ENTRY_TAIL_LEN {
        return None;
    }
    let mut key = Vec::with_capacity(old.len());
    key.extend_from_slice(&old[16..37]);
    key.extend_from_slice(&old[0..16]);
    key.extend_from_slice(&old[37..]);
    Some(key)
}

/// Then the event's time (8), kind (1), impression (16), campaign (16) and arrival (8).
pub(super) fn entry_key(entry: &IndexEntry) -> Vec<u8> {
    let mut key = key_prefix(entry.advertiser_id, entry.week(), entry.key);
    key.extend_from_slice(&keys::ordered_i64(entry.timestamp.epoch_millis()));
    key.push(entry.kind.code() as u8);
    key.extend_from_slice(entry.impression_id.as_uuid().as_bytes());
    key.extend_from_slice(entry.campaign_id.as_uuid().as_bytes());
    key.extend_from_slice(&keys::ordered_i64(entry.received.timestamp_millis()));
    key
}

/// The ad (16), validity (1), then the user (16) when known.
fn entry_value(entry: &IndexEntry) -> Vec<u8> {
    let mut value = Vec::with_capacity(33);
    value.extend_from_slice(entry.ad_id.as_uuid().as_bytes());
    value.push(u8::from(entry.valid));
    if let Some(user) = entry.user_id {
        value.extend_from_slice(user.as_uuid().as_bytes());
    }
    value
}

fn decode_entry(key: &[u8], value: &[u8]) -> Option<IndexEntry> {
    let uuid = |bytes: Option<&[u8]>| bytes.and_then(|bytes| Uuid::from_slice(bytes).ok());
    let at = |bytes: Option<&[u8]>| {
        bytes
            .and_then(keys::decode_ordered_i64)
            .and_then(DateTime::from_timestamp_millis)
    };
    let index_key = IndexKey::from_parts(*key.get(4)? as i8, uuid(key.get(5..21))?)?;
    Some(IndexEntry {
        advertiser_id: AdvertiserId::new(uuid(key.get(21..37))?),
        key: index_key,
        timestamp: EventTime::from_stored(at(key.get(37..45))?),
        kind: IndexedKind::from_code(*key.get(45)? as i8)?,
        impression_id: ImpressionId::new(uuid(key.get(46..62))?),
        campaign_id: CampaignId::new(uuid(key.get(62..78))?),
        received: at(key.get(78..86))?,
        ad_id: AdId::new(uuid(value.get(0..16))?),
        valid: *value.get(16)? == 1,
        user_id: uuid(value.get(17..33)).map(UserId::new),
    })
}

#[async_trait]
impl EventIndexStore for EmbeddedStore {
    async fn write_index(&self, entries: &[IndexEntry]) -> Result<(), StoreError> {
        let rows = entries
            .iter()
            .map(|entry| (entry_key(entry), entry_value(entry)))
            .collect();
        self.write_derived("writing the event index", Table::EventIndex, rows)
            .await
    }

    async fn read_index(
        &self,
        advertiser: AdvertiserId,
        week: Week,
        key: IndexKey,
    ) -> Result<Vec<IndexEntry>, StoreError> {
        const CONTEXT: &str = "reading the event index";
        self.scan(
            Table::EventIndex,
            key_prefix(advertiser, week, key),
            None,
            CONTEXT,
        )
        .await?
        .iter()
        .map(|(key, value)| decode_entry(key, value).ok_or_else(|| corrupt(CONTEXT)))
        .collect()
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
        let start = key_prefix(advertiser, week, key);
        let mut end = start.clone();
        end.extend_from_slice(&keys::ordered_i64(at.timestamp_millis().saturating_add(1)));
        self.scan_range_newest(Table::EventIndex, start, end, limit, CONTEXT)
            .await?
            .iter()
            .map(|(key, value)| decode_entry(key, value).ok_or_else(|| corrupt(CONTEXT)))
            .collect()
    }

    fn finds_subjects_itself(&self) -> bool {
        true
    }
}

impl EmbeddedStore {
    /// The (advertiser, week) pairs in which the index holds entries of `user`: for each week
    /// from the index's first to its last, one seek per advertiser found (past an advertiser's
    /// entries, the next read starts at the next advertiser), so the cost follows the weeks
    /// held and the user's advertisers, never the user's events or anyone else's.
    pub(super) async fn indexed_subject_weeks(
        &self,
        user: UserId,
    ) -> Result<Vec<SubjectWeek>, StoreError> {
        const CONTEXT: &str = "reading the event index by user";
        let fail = |error| engine_error(CONTEXT, error);
        self.blocking(move |tables| {
            let index = tables.get(Table::EventIndex);
            let week_of = |guard: Option<fjall::Guard>| -> Result<Option<Week>, StoreError> {
                match guard {
                    None => Ok(None),
                    Some(guard) => {
                        let key = guard.key().map_err(fail)?;
                        Ok(Some(
                            key.get(0..4)
                                .and_then(keys::decode_week)
                                .ok_or_else(|| corrupt(CONTEXT))?,
                        ))
                    }
                }
            };
            let (Some(first), Some(last)) = (
                week_of(index.first_key_value())?,
                week_of(index.last_key_value())?,
            ) else {
                return Ok(Vec::new());
            };
            let mut lines = BTreeSet::new();
            for week in first.get()..=last.get() {
                let week = Week::new(week);
                let prefix = key_in_week(week, IndexKey::User(user));
                let mut from = prefix.clone();
                while let Some(guard) = index.range(from.clone()..).next() {
                    let key = guard.key().map_err(fail)?;
                    if !key.starts_with(&prefix) {
                        break;
                    }
                    let advertiser = key
                        .get(21..PREFIX_LEN)
                        .and_then(|bytes| Uuid::from_slice(bytes).ok())
                        .ok_or_else(|| corrupt(CONTEXT))?;
                    lines.insert(SubjectWeek {
                        user_id: user,
                        advertiser_id: AdvertiserId::new(advertiser),
                        week,
                    });
                    // Past every entry of this advertiser: its prefix, then bytes above any tail.
                    from = key_prefix(AdvertiserId::new(advertiser), week, IndexKey::User(user));
                    from.extend_from_slice(&[0xFF; ENTRY_TAIL_LEN + 1]);
                }
            }
            Ok(lines.into_iter().collect())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::embedded::Fsync;

    fn open(folder: &tempfile::TempDir) -> EmbeddedStore {
        EmbeddedStore::open_for_test(folder.path(), Fsync::Always)
    }

    /// The index is written beside the commit thread, in several engine batches: every entry
    /// of a write is there once it returns, and after the folder is opened again.
    #[tokio::test]
    async fn a_write_of_many_batches_keeps_every_entry_across_a_reopen() {
        let folder = tempfile::tempdir().expect("temporary folder");
        let advertiser = AdvertiserId::new(Uuid::from_u128(1));
        let user = UserId::new(Uuid::from_u128(2));
        let at: DateTime<chrono::Utc> = "2026-11-28T10:00:00Z".parse().expect("time");
        let entries: Vec<IndexEntry> = (0..1_300)
            .map(|n| IndexEntry {
                advertiser_id: advertiser,
                key: IndexKey::User(user),
                timestamp: EventTime::from_stored(at + chrono::TimeDelta::seconds(n)),
                kind: IndexedKind::Impression,
                impression_id: ImpressionId::new(Uuid::from_u128(1_000 + n as u128)),
                campaign_id: CampaignId::new(Uuid::from_u128(4)),
                ad_id: AdId::new(Uuid::from_u128(5)),
                user_id: Some(user),
                received: at,
                valid: true,
            })
            .collect();
        let week = Week::of(at);
        {
            let store = open(&folder);
            store.write_index(&entries).await.expect("written");
            let read = store
                .read_index(advertiser, week, IndexKey::User(user))
                .await
                .expect("read");
            assert_eq!(read.len(), entries.len());
        }
        let store = open(&folder);
        let mut read = store
            .read_index(advertiser, week, IndexKey::User(user))
            .await
            .expect("read after reopening");
        read.sort_by_key(|entry| entry.timestamp);
        assert_eq!(read, entries);
    }

    #[test]
    fn an_entry_decodes_back_from_its_row() {
        let at = |text: &str| text.parse::<DateTime<chrono::Utc>>().expect("time");
        let entry = IndexEntry {
            advertiser_id: AdvertiserId::new(Uuid::from_u128(1)),
            key: IndexKey::User(UserId::new(Uuid::from_u128(2))),
            timestamp: EventTime::from_stored(at("2026-11-28T10:00:00.123Z")),
            kind: IndexedKind::Click,
            impression_id: ImpressionId::new(Uuid::from_u128(3)),
            campaign_id: CampaignId::new(Uuid::from_u128(4)),
            ad_id: AdId::new(Uuid::from_u128(5)),
            user_id: Some(UserId::new(Uuid::from_u128(2))),
            received: at("2026-11-28T10:00:01.5Z"),
            valid: true,
        };
        let decoded = decode_entry(&entry_key(&entry), &entry_value(&entry));
        assert_eq!(decoded, Some(entry.clone()));
        let thin = IndexEntry {
            user_id: None,
            valid: false,
            ..entry
        };
        assert_eq!(
            decode_entry(&entry_key(&thin), &entry_value(&thin)),
            Some(thin.clone())
        );
        // Format 4's key of the same entry: the advertiser first, then the week and the key.
        let new = entry_key(&thin);
        let mut old = new[21..37].to_vec();
        old.extend_from_slice(&new[0..21]);
        old.extend_from_slice(&new[37..]);
        assert_eq!(old[0..16], *thin.advertiser_id.as_uuid().as_bytes());
        assert_eq!(rekeyed_from_format_4(&old), Some(new));
        assert_eq!(rekeyed_from_format_4(&old[1..]), None);
    }
}
