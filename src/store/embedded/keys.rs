//! Key layout of the embedded store. Every key starts with its partition's key, so a partition
//! is one contiguous key range, and continues with the clustering columns encoded so that
//! byte order is Cassandra's clustering order (newest first for events).

use crate::domain::conversion::index::Week;
use crate::domain::ids::{CampaignKey, ImpressionId};
use crate::domain::partition::EventPartition;
use crate::domain::time::Day;
use chrono::{DateTime, NaiveDate, Utc};
use uuid::Uuid;

/// A campaign: advertiser (16 bytes) + campaign (16).
pub(crate) const CAMPAIGN_LEN: usize = 32;
/// Campaign + UTC day (4) + bucket (2).
pub(crate) const PARTITION_LEN: usize = CAMPAIGN_LEN + 6;
/// An event key: partition, then time (8), then impression id (16).
pub(crate) const EVENT_KEY_LEN: usize = PARTITION_LEN + 8 + 16;

fn campaign_bytes(key: &mut Vec<u8>, campaign: CampaignKey) {
    key.extend_from_slice(campaign.advertiser_id.as_uuid().as_bytes());
    key.extend_from_slice(campaign.campaign_id.as_uuid().as_bytes());
}

/// Signed integers with the sign bit flipped sort like the numbers they encode.
pub(crate) fn ordered_i64(value: i64) -> [u8; 8] {
    ((value as u64) ^ (1 << 63)).to_be_bytes()
}

pub(crate) fn decode_ordered_i64(bytes: &[u8]) -> Option<i64> {
    Some((u64::from_be_bytes(bytes.try_into().ok()?) ^ (1 << 63)) as i64)
}

fn ordered_i32(value: i32) -> [u8; 4] {
    ((value as u32) ^ (1 << 31)).to_be_bytes()
}

fn days_since_epoch(day: NaiveDate) -> i32 {
    (day - NaiveDate::default()).num_days() as i32
}

/// A UTC day in key order.
pub(crate) fn day_bytes(day: Day) -> [u8; 4] {
    ordered_i32(days_since_epoch(day.date()))
}

/// A UTC day back from [`day_bytes`].
pub(crate) fn decode_day(bytes: &[u8]) -> Option<Day> {
    let days = (u32::from_be_bytes(bytes.try_into().ok()?) ^ (1 << 31)) as i32;
    NaiveDate::default()
        .checked_add_signed(chrono::TimeDelta::days(i64::from(days)))
        .map(Day::new)
}

/// A week of the event index in key order.
pub(crate) fn week_bytes(week: Week) -> [u8; 4] {
    ordered_i32(week.get())
}

/// A week back from [`week_bytes`].
pub(crate) fn decode_week(bytes: &[u8]) -> Option<Week> {
    let week = (u32::from_be_bytes(bytes.try_into().ok()?) ^ (1 << 31)) as i32;
    Some(Week::new(week))
}

/// The key prefix every row of `partition` starts with.
pub(crate) fn partition_prefix(partition: &EventPartition) -> Vec<u8> {
    let mut key = Vec::with_capacity(EVENT_KEY_LEN);
    campaign_bytes(&mut key, partition.campaign);
    key.extend_from_slice(&day_bytes(partition.day));
    key.extend_from_slice(&partition.bucket.get().to_be_bytes());
    key
}

/// An event row: newest first within the partition, then by impression id.
pub(crate) fn event_key(
    partition: &EventPartition,
    at: DateTime<Utc>,
    id: ImpressionId,
) -> Vec<u8> {
    let mut key = partition_prefix(partition);
    key.extend_from_slice(&ordered_i64(!at.timestamp_millis()));
    key.extend_from_slice(id.as_uuid().as_bytes());
    key
}

/// Time and impression id back from an event key.
pub(crate) fn decode_event_key(key: &[u8]) -> Option<(DateTime<Utc>, ImpressionId)> {
    let time: [u8; 8] = key.get(PARTITION_LEN..PARTITION_LEN + 8)?.try_into().ok()?;
    let id = Uuid::from_slice(key.get(PARTITION_LEN + 8..EVENT_KEY_LEN)?).ok()?;
    let millis = !((u64::from_be_bytes(time) ^ (1 << 63)) as i64);
    Some((
        DateTime::from_timestamp_millis(millis)?,
        ImpressionId::new(id),
    ))
}

/// The key of one impression id's row in a partition's copies index (every copy of the id in
/// the partition, merged into one value).
pub(crate) fn copy_prefix(partition: &EventPartition, id: ImpressionId) -> Vec<u8> {
    let mut key = partition_prefix(partition);
    key.extend_from_slice(id.as_uuid().as_bytes());
    key
}

/// The prefix of one impression's click-index rows.
pub(crate) fn click_index_prefix(campaign: CampaignKey, id: ImpressionId) -> Vec<u8> {
    let mut key = Vec::with_capacity(56);
    campaign_bytes(&mut key, campaign);
    key.extend_from_slice(id.as_uuid().as_bytes());
    key
}

/// A click-index row: oldest click first, so the first row is the first click.
pub(crate) fn click_index_key(
    campaign: CampaignKey,
    id: ImpressionId,
    at: DateTime<Utc>,
) -> Vec<u8> {
    let mut key = click_index_prefix(campaign, id);
    key.extend_from_slice(&ordered_i64(at.timestamp_millis()));
    key
}

pub(crate) fn decode_click_index_time(key: &[u8]) -> Option<DateTime<Utc>> {
    let time: [u8; 8] = key.get(48..56)?.try_into().ok()?;
    DateTime::from_timestamp_millis((u64::from_be_bytes(time) ^ (1 << 63)) as i64)
}

pub(crate) fn campaign_prefix(campaign: CampaignKey) -> Vec<u8> {
    let mut key = Vec::with_capacity(40);
    campaign_bytes(&mut key, campaign);
    key
}

/// A campaign-settings row, ordered by the instant it takes effect.
pub(crate) fn settings_key(campaign: CampaignKey, effective_from: DateTime<Utc>) -> Vec<u8> {
    let mut key = campaign_prefix(campaign);
    key.extend_from_slice(&ordered_i64(effective_from.timestamp_millis()));
    key
}

pub(crate) fn decode_settings_time(key: &[u8]) -> Option<DateTime<Utc>> {
    let time: [u8; 8] = key.get(32..40)?.try_into().ok()?;
    DateTime::from_timestamp_millis((u64::from_be_bytes(time) ^ (1 << 63)) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::bucket::BucketCount;
    use crate::domain::ids::{AdvertiserId, CampaignId};
    use crate::domain::time::Day;

    fn partition(day: &str, bucket: u16) -> EventPartition {
        EventPartition {
            campaign: CampaignKey {
                advertiser_id: AdvertiserId::new(Uuid::nil()),
                campaign_id: CampaignId::new(Uuid::max()),
            },
            day: Day::new(day.parse().expect("date")),
            bucket: BucketCount::new(256)
                .expect("valid")
                .ids()
                .nth(usize::from(bucket))
                .expect("bucket"),
        }
    }

    #[test]
    fn events_sort_newest_first_within_a_partition_and_partitions_are_contiguous() {
        let p = partition("2026-10-01", 3);
        let id = ImpressionId::new(Uuid::new_v4());
        let older = event_key(&p, "2026-10-01T01:00:00Z".parse().expect("t"), id);
        let newer = event_key(&p, "2026-10-01T02:00:00Z".parse().expect("t"), id);
        assert!(newer < older);
        let prefix = partition_prefix(&p);
        assert!(older.starts_with(&prefix) && newer.starts_with(&prefix));
        let next_bucket = partition_prefix(&partition("2026-10-01", 4));
        assert!(older < next_bucket);
        let earlier_day = partition_prefix(&partition("1969-12-31", 3));
        assert!(earlier_day < prefix);
    }

    #[test]
    fn keys_decode_back() {
        let p = partition("2026-10-01", 0);
        let id = ImpressionId::new(Uuid::new_v4());
        let at: DateTime<Utc> = "2026-10-01T01:02:03.456Z".parse().expect("t");
        assert_eq!(decode_event_key(&event_key(&p, at, id)), Some((at, id)));
        let campaign = p.campaign;
        assert_eq!(
            decode_click_index_time(&click_index_key(campaign, id, at)),
            Some(at)
        );
        assert_eq!(decode_settings_time(&settings_key(campaign, at)), Some(at));
        let earlier = click_index_key(campaign, id, at - chrono::Duration::seconds(1));
        assert!(
            earlier < click_index_key(campaign, id, at),
            "first click first"
        );
    }
}
