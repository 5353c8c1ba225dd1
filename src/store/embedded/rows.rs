//! Value encodings of the embedded store's rows: fixed-width ids first, then the optional
//! parts. Keys carry the time and the impression id.

use crate::domain::event::Impression;
use crate::domain::ids::{AdId, UserId};
use std::collections::BTreeMap;
use std::net::IpAddr;
use uuid::Uuid;

/// The full impression row: ad, user, ip (tag 0, 4 or 6, then the address), user_data (JSON).
pub fn impression_value(event: &Impression) -> Vec<u8> {
    let mut value = Vec::with_capacity(64);
    value.extend_from_slice(event.ad_id.as_uuid().as_bytes());
    value.extend_from_slice(event.user_id.as_uuid().as_bytes());
    match event.user_ip {
        None => value.push(0),
        Some(IpAddr::V4(ip)) => {
            value.push(4);
            value.extend_from_slice(&ip.octets());
        }
        Some(IpAddr::V6(ip)) => {
            value.push(6);
            value.extend_from_slice(&ip.octets());
        }
    }
    if !event.user_data.is_empty() {
        // A map of strings always serialises.
        value.extend_from_slice(&serde_json::to_vec(event.user_data.entries()).unwrap_or_default());
    }
    value
}

/// The full row's fields besides its key: ad, user, ip and user_data.
pub type FullRow = (AdId, UserId, Option<IpAddr>, BTreeMap<String, String>);

/// Decodes [`impression_value`].
pub fn decode_impression_value(value: &[u8]) -> Option<FullRow> {
    let (ad, user) = decode_two_ids(value)?;
    let rest = value.get(32..)?;
    let (ip, rest) = match rest.first()? {
        0 => (None, rest.get(1..)?),
        4 => {
            let octets: [u8; 4] = rest.get(1..5)?.try_into().ok()?;
            (Some(IpAddr::from(octets)), rest.get(5..)?)
        }
        6 => {
            let octets: [u8; 16] = rest.get(1..17)?.try_into().ok()?;
            (Some(IpAddr::from(octets)), rest.get(17..)?)
        }
        _ => return None,
    };
    let user_data = if rest.is_empty() {
        BTreeMap::new()
    } else {
        serde_json::from_slice(rest).ok()?
    };
    Some((AdId::new(ad), UserId::new(user), ip, user_data))
}

/// The thin row: ad and user.
pub fn summary_value(event: &Impression) -> Vec<u8> {
    let mut value = Vec::with_capacity(32);
    value.extend_from_slice(event.ad_id.as_uuid().as_bytes());
    value.extend_from_slice(event.user_id.as_uuid().as_bytes());
    value
}

pub fn decode_two_ids(value: &[u8]) -> Option<(Uuid, Uuid)> {
    Some((
        Uuid::from_slice(value.get(0..16)?).ok()?,
        Uuid::from_slice(value.get(16..32)?).ok()?,
    ))
}

pub fn decode_one_id(value: &[u8]) -> Option<Uuid> {
    Uuid::from_slice(value.get(0..16)?).ok()
}

/// Settings: bucket count (2 bytes), then the daily cap (8 bytes) when there is one.
pub fn settings_value(buckets: u16, daily_cap: Option<u64>) -> Vec<u8> {
    let mut value = buckets.to_be_bytes().to_vec();
    if let Some(cap) = daily_cap {
        value.extend_from_slice(&cap.to_be_bytes());
    }
    value
}

pub fn decode_settings_value(value: &[u8]) -> Option<(u16, Option<u64>)> {
    let buckets = u16::from_be_bytes(value.get(0..2)?.try_into().ok()?);
    let cap = match value.get(2..10) {
        Some(bytes) => Some(u64::from_be_bytes(bytes.try_into().ok()?)),
        None => None,
    };
    Some((buckets, cap))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{AdvertiserId, CampaignId, CampaignKey, ImpressionId};
    use crate::domain::time::EventTime;
    use crate::domain::user_data::UserData;

    #[test]
    fn the_full_row_round_trips() {
        let event = Impression {
            impression_id: ImpressionId::new(Uuid::new_v4()),
            campaign: CampaignKey {
                advertiser_id: AdvertiserId::new(Uuid::new_v4()),
                campaign_id: CampaignId::new(Uuid::new_v4()),
            },
            ad_id: AdId::new(Uuid::new_v4()),
            user_id: UserId::new(Uuid::new_v4()),
            timestamp: EventTime::from_stored(chrono::Utc::now()),
            user_ip: Some("2001:db8::1".parse().expect("ip")),
            user_data: UserData::new(BTreeMap::from([("country".into(), "FR".into())]))
                .expect("valid"),
        };
        let (ad, user, ip, data) =
            decode_impression_value(&impression_value(&event)).expect("decodes");
        assert_eq!((ad, user, ip), (event.ad_id, event.user_id, event.user_ip));
        assert_eq!(&data, event.user_data.entries());
        assert_eq!(
            decode_settings_value(&settings_value(8, Some(5000))),
            Some((8, Some(5000)))
        );
        assert_eq!(
            decode_settings_value(&settings_value(8, None)),
            Some((8, None))
        );
    }
}
