//! Key layout of the embedded store's site tables (beacons, site settings, sketches, the day
//! index). Variable-length parts are length-prefixed, so one partition's prefix is never the
//! prefix of another's ("site1" against "site12"), and byte order is clustering order.

use super::keys::{day_bytes, decode_ordered_i64, ordered_i64};
use crate::domain::beacon::{SiteId, VisitPartition};
use crate::domain::time::Day;
use crate::store::SketchPartition;
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// Text of at most 65,535 bytes, length first.
fn text(key: &mut Vec<u8>, value: &str) {
    // Sites, guids and combinations are bounded far below this by validation.
    let len = u16::try_from(value.len()).unwrap_or(u16::MAX);
    key.extend_from_slice(&len.to_be_bytes());
    key.extend_from_slice(&value.as_bytes()[..usize::from(len)]);
}

/// Reads a length-prefixed text at the start of `bytes`; returns it and the rest.
fn read_text(bytes: &[u8]) -> Option<(&str, &[u8])> {
    let len = usize::from(u16::from_be_bytes(bytes.get(0..2)?.try_into().ok()?));
    let value = std::str::from_utf8(bytes.get(2..2 + len)?).ok()?;
    Some((value, bytes.get(2 + len..)?))
}

pub(crate) fn site_prefix(site: &SiteId) -> Vec<u8> {
    let mut key = Vec::with_capacity(64);
    text(&mut key, site.as_str());
    key
}

/// The site a site-settings (or any site-prefixed) key starts with.
pub(crate) fn decode_site_prefix(key: &[u8]) -> Option<&str> {
    read_text(key).map(|(site, _)| site)
}

/// How long the site prefix ([`site_prefix`]) that `key` starts with is.
pub(crate) fn site_prefix_len(key: &[u8]) -> Option<usize> {
    let (_, rest) = read_text(key)?;
    Some(key.len() - rest.len())
}

/// The key prefix every beacon of `partition` starts with.
pub(crate) fn visit_prefix(partition: &VisitPartition) -> Vec<u8> {
    let mut key = site_prefix(&partition.site);
    key.extend_from_slice(&day_bytes(partition.day));
    key.extend_from_slice(&partition.bucket.get().to_be_bytes());
    key
}

/// What tells one beacon of a partition from another: its time (oldest first), guid and
/// features' canonical text. A format 3 beacon row's key is its partition's prefix and this.
pub(crate) fn visit_identity(at: DateTime<Utc>, guid: &str, features: &str) -> Vec<u8> {
    let mut identity = Vec::with_capacity(8 + 2 + guid.len() + features.len());
    identity.extend_from_slice(&ordered_i64(at.timestamp_millis()));
    text(&mut identity, guid);
    identity.extend_from_slice(features.as_bytes());
    identity
}

/// A format 3 beacon row's key.
#[cfg(test)]
pub(crate) fn visit_key(
    partition: &VisitPartition,
    at: DateTime<Utc>,
    guid: &str,
    features: &str,
) -> Vec<u8> {
    let mut key = visit_prefix(partition);
    key.extend_from_slice(&visit_identity(at, guid, features));
    key
}

/// Time, guid and features back from a beacon key whose partition prefix is `prefix_len` long
/// (0 for an identity alone).
pub(crate) fn decode_visit_key(
    key: &[u8],
    prefix_len: usize,
) -> Option<(DateTime<Utc>, &str, &str)> {
    let at =
        DateTime::from_timestamp_millis(decode_ordered_i64(key.get(prefix_len..prefix_len + 8)?)?)?;
    let (guid, rest) = read_text(key.get(prefix_len + 8..)?)?;
    Some((at, guid, std::str::from_utf8(rest).ok()?))
}

/// The prefix of a visitor's entries in the visitor index: site, then guid.
pub(crate) fn visitor_prefix(site: &SiteId, guid: &str) -> Vec<u8> {
    let mut key = site_prefix(site);
    text(&mut key, guid);
    key
}

/// One entry of the visitor index: its visitor's prefix and the day, oldest first.
pub(crate) fn visitor_day_key(site: &SiteId, guid: &str, day: Day) -> Vec<u8> {
    let mut key = visitor_prefix(site, guid);
    key.extend_from_slice(&day_bytes(day));
    key
}

/// A site-settings row, ordered by the instant it takes effect.
pub(crate) fn site_settings_key(site: &SiteId, effective_from: DateTime<Utc>) -> Vec<u8> {
    let mut key = site_prefix(site);
    key.extend_from_slice(&ordered_i64(effective_from.timestamp_millis()));
    key
}

pub(crate) fn decode_site_settings_time(key: &[u8], prefix_len: usize) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(decode_ordered_i64(key.get(prefix_len..prefix_len + 8)?)?)
}

pub(crate) fn sketch_prefix(partition: &SketchPartition) -> Vec<u8> {
    let mut key = site_prefix(&partition.site);
    key.extend_from_slice(&day_bytes(partition.day));
    text(&mut key, &partition.combination);
    key
}

/// One writer's sketch of one hour: by hour, then writer.
pub(crate) fn sketch_key(
    partition: &SketchPartition,
    hour: DateTime<Utc>,
    writer: Uuid,
) -> Vec<u8> {
    let mut key = sketch_prefix(partition);
    key.extend_from_slice(&ordered_i64(hour.timestamp_millis()));
    key.extend_from_slice(writer.as_bytes());
    key
}

pub(crate) fn decode_sketch_key(key: &[u8], prefix_len: usize) -> Option<(DateTime<Utc>, Uuid)> {
    let hour =
        DateTime::from_timestamp_millis(decode_ordered_i64(key.get(prefix_len..prefix_len + 8)?)?)?;
    let writer = Uuid::from_slice(key.get(prefix_len + 8..prefix_len + 24)?).ok()?;
    Some((hour, writer))
}

/// The seal state of a site-day: one key per cell (`S`: sealed_from, `L`: late_at).
pub(crate) fn site_seal_prefix(site: &SiteId, day: Day) -> Vec<u8> {
    let mut key = site_prefix(site);
    key.extend_from_slice(&day_bytes(day));
    key
}

pub(crate) fn site_seal_key(site: &SiteId, day: Day, cell: u8) -> Vec<u8> {
    let mut key = site_seal_prefix(site, day);
    key.push(cell);
    key
}

/// A sealed site-day's row of one combination: its slice or hour since the epoch.
pub(crate) fn rollup_unit_key(partition: &SketchPartition, unit: i64) -> Vec<u8> {
    let mut key = sketch_prefix(partition);
    key.extend_from_slice(&ordered_i64(unit));
    key
}

pub(crate) fn decode_rollup_unit(key: &[u8], prefix_len: usize) -> Option<i64> {
    decode_ordered_i64(key.get(prefix_len..prefix_len + 8)?)
}

pub(crate) fn site_day_prefix(day: Day) -> Vec<u8> {
    day_bytes(day).to_vec()
}

pub(crate) fn site_day_key(day: Day, site: &SiteId) -> Vec<u8> {
    let mut key = site_day_prefix(day);
    key.extend_from_slice(site.as_str().as_bytes());
    key
}

pub(crate) fn decode_site_day_key(key: &[u8]) -> Option<&str> {
    std::str::from_utf8(key.get(4..)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::bucket::BucketCount;

    fn partition(site: &str) -> VisitPartition {
        VisitPartition {
            site: SiteId::parse(site).expect("valid"),
            day: Day::new("2026-11-01".parse().expect("date")),
            bucket: BucketCount::ONE.ids().next().expect("bucket 0"),
        }
    }

    #[test]
    fn a_site_partition_is_not_a_prefix_of_a_longer_sites() {
        let short = visit_prefix(&partition("site1"));
        let long = visit_key(&partition("site12"), Utc::now(), "g", "");
        assert!(!long.starts_with(&short));
    }

    #[test]
    fn beacon_and_sketch_keys_decode_back() {
        let p = partition("example.com");
        let at: DateTime<Utc> = "2026-11-01T10:11:12.345Z".parse().expect("time");
        let key = visit_key(&p, at, "guid-1", "a=1&b=%2F");
        assert_eq!(
            decode_visit_key(&key, visit_prefix(&p).len()),
            Some((at, "guid-1", "a=1&b=%2F"))
        );
        let sketches = SketchPartition {
            site: p.site.clone(),
            day: p.day,
            combination: "a=1".into(),
        };
        let writer = Uuid::new_v4();
        let key = sketch_key(&sketches, at, writer);
        assert_eq!(
            decode_sketch_key(&key, sketch_prefix(&sketches).len()),
            Some((at, writer))
        );
        let index = site_day_key(p.day, &p.site);
        assert_eq!(decode_site_day_key(&index), Some("example.com"));
    }
}
