//! The event index in the embedded store: one row per entry and arrival under (advertiser,
//! week, key), so one key's week is one contiguous range. An ordered engine needs no buckets.

use super::engine::{Table, corrupt};
use super::{EmbeddedStore, keys};
use crate::domain::conversion::index::{IndexEntry, IndexKey, IndexedKind, Week};
use crate::domain::ids::{AdId, AdvertiserId, CampaignId, ImpressionId, UserId};
use crate::domain::time::EventTime;
use crate::store::{EventIndexStore, StoreError};
use async_trait::async_trait;
use chrono::DateTime;
use uuid::Uuid;

/// Advertiser (16), week (4), key kind (1), key id (16).
const PREFIX_LEN: usize = 37;

/// Every entry of `key` in the advertiser's `week` starts so (also what erasing the key
/// deletes).
pub(super) fn key_prefix(advertiser: AdvertiserId, week: Week, key: IndexKey) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(PREFIX_LEN + 49);
    bytes.extend_from_slice(advertiser.as_uuid().as_bytes());
    bytes.extend_from_slice(&keys::week_bytes(week));
    bytes.push(key.code() as u8);
    bytes.extend_from_slice(key.id().as_bytes());
    bytes
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
    let index_key = IndexKey::from_parts(*key.get(20)? as i8, uuid(key.get(21..37))?)?;
    Some(IndexEntry {
        advertiser_id: AdvertiserId::new(uuid(key.get(0..16))?),
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
            .map(|entry| (Table::EventIndex, entry_key(entry), entry_value(entry)))
            .collect();
        self.write("writing the event index", rows).await
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
            Some(thin)
        );
    }
}
