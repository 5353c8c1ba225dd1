//! Key layout of the embedded store's rollup tables: the campaign day index, the seal state,
//! and the slice and reach rows of a sealed campaign-day.

use super::keys::{campaign_prefix, day_bytes, decode_ordered_i64, ordered_i64};
use crate::domain::conversion::money::{Currency, ValueSums};
use crate::domain::ids::{AdId, AdvertiserId, CampaignId, CampaignKey};
use crate::domain::time::Day;
use crate::store::{ReachLevel, RollupReach};
use uuid::Uuid;

/// Campaign (32 bytes) + day (4).
const DAY_PREFIX_LEN: usize = 36;

/// Every row of one campaign-day in a rollup table starts with this.
pub(crate) fn campaign_day_prefix(campaign: CampaignKey, day: Day) -> Vec<u8> {
    let mut key = campaign_prefix(campaign);
    key.extend_from_slice(&day_bytes(day));
    key
}

/// A slice or reach row: its time unit (slice or hour since the epoch), then the ad.
pub(crate) fn rollup_key(campaign: CampaignKey, day: Day, unit: i64, ad: AdId) -> Vec<u8> {
    let mut key = campaign_day_prefix(campaign, day);
    key.extend_from_slice(&ordered_i64(unit));
    key.extend_from_slice(ad.as_uuid().as_bytes());
    key
}

/// A reach row: its level, hour (since the epoch) and ad (nil for campaign levels), so one
/// level of a day is one prefix.
pub(crate) fn reach_key(campaign: CampaignKey, day: Day, row: &RollupReach) -> Vec<u8> {
    let mut key = reach_level_prefix(campaign, day, row.level);
    key.extend_from_slice(&ordered_i64(row.hour));
    let ad = row.ad_id.map(|ad| ad.as_uuid()).unwrap_or_default();
    key.extend_from_slice(ad.as_bytes());
    key
}

pub(crate) fn reach_level_prefix(campaign: CampaignKey, day: Day, level: ReachLevel) -> Vec<u8> {
    let mut key = campaign_day_prefix(campaign, day);
    key.push(level.code());
    key
}

pub(crate) fn decode_reach_row(key: &[u8], sketch: &[u8]) -> Option<RollupReach> {
    let level = ReachLevel::from_code(*key.get(DAY_PREFIX_LEN)?)?;
    let hour = decode_ordered_i64(key.get(DAY_PREFIX_LEN + 1..DAY_PREFIX_LEN + 9)?)?;
    let ad = Uuid::from_slice(key.get(DAY_PREFIX_LEN + 9..DAY_PREFIX_LEN + 25)?).ok()?;
    Some(RollupReach {
        level,
        hour,
        ad_id: level.per_ad().then_some(AdId::new(ad)),
        sketch: sketch.to_vec(),
    })
}

pub(crate) fn decode_rollup_key(key: &[u8]) -> Option<(i64, AdId)> {
    let unit = decode_ordered_i64(key.get(DAY_PREFIX_LEN..DAY_PREFIX_LEN + 8)?)?;
    let ad = Uuid::from_slice(key.get(DAY_PREFIX_LEN + 8..DAY_PREFIX_LEN + 24)?).ok()?;
    Some((unit, AdId::new(ad)))
}

/// The seal state's two cells, each with one writer: `sealed_from` and `late_at`.
pub(crate) fn seal_key(campaign: CampaignKey, day: Day, cell: SealCell) -> Vec<u8> {
    let mut key = campaign_day_prefix(campaign, day);
    key.push(cell as u8);
    key
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum SealCell {
    SealedFrom = b'S' as isize,
    LateAt = b'L' as isize,
}

pub(crate) fn day_index_prefix(day: Day) -> Vec<u8> {
    day_bytes(day).to_vec()
}

pub(crate) fn day_index_key(day: Day, campaign: CampaignKey) -> Vec<u8> {
    let mut key = day_index_prefix(day);
    key.extend_from_slice(&campaign_prefix(campaign));
    key
}

pub(crate) fn decode_day_index_key(key: &[u8]) -> Option<CampaignKey> {
    Some(CampaignKey {
        advertiser_id: AdvertiserId::new(Uuid::from_slice(key.get(4..20)?).ok()?),
        campaign_id: CampaignId::new(Uuid::from_slice(key.get(20..36)?).ok()?),
    })
}

/// Counts, 8 bytes each: impressions, clicks, billable impressions, invalid impressions,
/// invalid clicks (a site slice: valid and invalid visits).
pub(crate) fn counts_value(counts: &[u64]) -> Vec<u8> {
    counts
        .iter()
        .flat_map(|count| count.to_be_bytes())
        .collect()
}

/// A rollup or slice aggregate row's value: its 13 counts ([`counts_value`]), then each
/// currency's sum of conversion values: the code (3 bytes) and the sum (16, big-endian).
pub(crate) fn row_value(counts: &[u64; 13], value: &ValueSums) -> Vec<u8> {
    let mut bytes = counts_value(counts);
    for (currency, minor) in value.entries() {
        bytes.extend_from_slice(currency.code().as_bytes());
        bytes.extend_from_slice(&minor.to_be_bytes());
    }
    bytes
}

/// [`row_value`] back; a row written before conversions holds 5 or 10 counts only.
pub(crate) fn decode_row_value(value: &[u8], required: usize) -> Option<([u64; 13], ValueSums)> {
    const COUNTS: usize = 13 * 8;
    if value.len() <= 10 * 8 {
        return Some((decode_counts_value(value, required)?, ValueSums::default()));
    }
    let counts = decode_counts_value(value.get(..COUNTS)?, required)?;
    let sums = value.get(COUNTS..)?;
    if !sums.len().is_multiple_of(19) {
        return None;
    }
    let entries = sums
        .chunks_exact(19)
        .map(|entry| {
            let code = std::str::from_utf8(entry.get(..3)?).ok()?;
            let currency = Currency::from_code(code).ok()?;
            Some((
                currency,
                i128::from_be_bytes(entry.get(3..)?.try_into().ok()?),
            ))
        })
        .collect::<Option<Vec<_>>>()?;
    Some((counts, ValueSums::from_entries(entries)))
}

/// [`counts_value`] back, `N` counts: those an older row lacks (written before invalid
/// traffic was counted) are 0; fewer than `required` is a damaged row.
pub(crate) fn decode_counts_value<const N: usize>(
    value: &[u8],
    required: usize,
) -> Option<[u64; N]> {
    if !value.len().is_multiple_of(8) || value.len() < required * 8 {
        return None;
    }
    let mut counts = [0u64; N];
    for (count, bytes) in counts.iter_mut().zip(value.chunks_exact(8)) {
        *count = u64::from_be_bytes(bytes.try_into().ok()?);
    }
    Some(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollup_keys_and_values_decode_back() {
        let campaign = CampaignKey {
            advertiser_id: AdvertiserId::new(Uuid::new_v4()),
            campaign_id: CampaignId::new(Uuid::new_v4()),
        };
        let day = Day::new("2026-10-01".parse().expect("date"));
        let ad = AdId::new(Uuid::new_v4());
        let key = rollup_key(campaign, day, 1_900_000, ad);
        assert!(key.starts_with(&campaign_day_prefix(campaign, day)));
        assert_eq!(decode_rollup_key(&key), Some((1_900_000, ad)));
        assert_eq!(
            decode_day_index_key(&day_index_key(day, campaign)),
            Some(campaign)
        );
        assert_eq!(
            decode_counts_value::<5>(&counts_value(&[1, 2, 3, 4, 5]), 3),
            Some([1, 2, 3, 4, 5])
        );
        assert_eq!(
            decode_counts_value::<5>(&counts_value(&[1, 2, 3]), 3),
            Some([1, 2, 3, 0, 0]),
            "a row sealed before invalid traffic was counted"
        );
        assert_eq!(decode_counts_value::<5>(&[0; 12], 3), None);
        for (level, ad_id) in [
            (ReachLevel::CampaignDay, None),
            (ReachLevel::AdHour, Some(ad)),
        ] {
            let row = RollupReach {
                level,
                hour: 493_000,
                ad_id,
                sketch: vec![1, 2, 3],
            };
            let key = reach_key(campaign, day, &row);
            assert!(key.starts_with(&reach_level_prefix(campaign, day, level)));
            assert_eq!(decode_reach_row(&key, &[1, 2, 3]), Some(row));
        }
    }
}
