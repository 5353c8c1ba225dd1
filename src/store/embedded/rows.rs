//! Value encodings of the embedded store's rows: fixed-width ids first, then the optional
//! parts. Keys carry the time and the impression id.
//!
//! Rows written before invalid traffic was classified end where their fixed part ends (or,
//! for a full impression, go from the address to `user_data`): they read as valid with no
//! user agent. Newer rows add the traffic part: a reason code (0: valid), then the user agent.

use crate::domain::address::StoreIp;
use crate::domain::conversion::LookBack;
use crate::domain::conversion::attribution::LookBacks;
use crate::domain::delivery::Caps;
use crate::domain::event::Impression;
use crate::domain::ids::{AdId, UserId};
use crate::domain::traffic::{InvalidReason, UserAgent};
use crate::domain::view::{AgentTag, Client, Network};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use std::collections::BTreeMap;
use std::net::IpAddr;
use uuid::Uuid;

/// Marks the traffic part of a full impression row; JSON (`user_data`) never starts so.
const TRAFFIC_MARK: u8 = 0xFE;

/// The traffic part of a row: the copy's reason code, then its user agent (the rest).
pub(crate) fn traffic_suffix(
    invalid: Option<InvalidReason>,
    user_agent: Option<&UserAgent>,
) -> Vec<u8> {
    let mut bytes = vec![invalid.map_or(0, InvalidReason::code)];
    if let Some(agent) = user_agent {
        bytes.extend_from_slice(agent.as_str().as_bytes());
    }
    bytes
}

/// [`traffic_suffix`] back; an empty part (an older row) is valid with no user agent.
pub(crate) fn decode_traffic_suffix(
    bytes: &[u8],
) -> Option<(Option<InvalidReason>, Option<UserAgent>)> {
    let Some((code, agent)) = bytes.split_first() else {
        return Some((None, None));
    };
    let invalid = InvalidReason::from_code(*code).ok()?;
    let agent = std::str::from_utf8(agent).ok().and_then(UserAgent::new);
    Some((invalid, agent))
}

/// Whether a row whose traffic part starts at `at` is a valid copy (the guard of an invalid
/// copy's write: see [`super::committer::Guarded`]).
fn valid_from(value: &[u8], at: usize) -> bool {
    value.get(at).is_none_or(|code| *code == 0)
}

pub(crate) fn summary_is_valid(value: &[u8]) -> bool {
    valid_from(value, 32)
}

/// Whether a thin row is a valid copy that came through the pixel (see [`client_part`]).
pub(crate) fn summary_is_valid_pixel(value: &[u8]) -> bool {
    summary_is_valid(value) && value.get(33).is_some_and(|flags| flags & HAS_PIXEL != 0)
}

pub(crate) fn click_is_valid(value: &[u8]) -> bool {
    valid_from(value, 16)
}

pub(crate) fn visit_is_valid(value: &[u8]) -> bool {
    valid_from(value, 0)
}

pub(crate) fn impression_is_valid(value: &[u8]) -> bool {
    decode_impression_value(value).is_some_and(|row| row.invalid.is_none())
}

/// The full impression row: ad, user, ip (tag 0, 4 or 6, then the address), the traffic part
/// (its mark, reason code, user agent length and bytes), user_data (JSON).
pub(crate) fn impression_value(event: &Impression) -> Vec<u8> {
    let mut value = Vec::with_capacity(64);
    value.extend_from_slice(event.ad_id.as_uuid().as_bytes());
    value.extend_from_slice(event.user_id.as_uuid().as_bytes());
    push_address(&mut value, event.user_ip);
    value.push(TRAFFIC_MARK);
    value.push(event.invalid.map_or(0, InvalidReason::code));
    let agent = event.user_agent.as_ref().map_or("", UserAgent::as_str);
    // A stored user agent is at most 512 bytes.
    value.extend_from_slice(&(agent.len() as u16).to_be_bytes());
    value.extend_from_slice(agent.as_bytes());
    if !event.user_data.is_empty() {
        // A map of strings always serialises.
        value.extend_from_slice(&serde_json::to_vec(event.user_data.entries()).unwrap_or_default());
    }
    value
}

/// A full row's address part: a tag (0: none, 4 or 6), then the address's bytes.
fn push_address(value: &mut Vec<u8>, address: Option<IpAddr>) {
    match address {
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
}

/// The address of a full row's value (see [`push_address`]) and the bytes after it.
fn split_address(value: &[u8]) -> Option<(Option<IpAddr>, &[u8])> {
    let rest = value.get(32..)?;
    match rest.first()? {
        0 => Some((None, rest.get(1..)?)),
        4 => {
            let octets: [u8; 4] = rest.get(1..5)?.try_into().ok()?;
            Some((Some(IpAddr::from(octets)), rest.get(5..)?))
        }
        6 => {
            let octets: [u8; 16] = rest.get(1..17)?.try_into().ok()?;
            Some((Some(IpAddr::from(octets)), rest.get(17..)?))
        }
        _ => None,
    }
}

/// A full row's value with its address as `policy` keeps it, everything else byte for byte;
/// `Some(None)` when it keeps it as it is (or there is none), `None` when the value does not
/// decode.
pub(crate) fn with_address_kept(value: &[u8], policy: StoreIp) -> Option<Option<Vec<u8>>> {
    let (address, rest) = split_address(value)?;
    let kept = policy.stored(address);
    if kept == address {
        return Some(None);
    }
    let mut rewritten = Vec::with_capacity(value.len());
    rewritten.extend_from_slice(value.get(..32)?);
    push_address(&mut rewritten, kept);
    rewritten.extend_from_slice(rest);
    Some(Some(rewritten))
}

/// The bytes of one entry of a copies-index row: its time, then its reason code.
pub(crate) const COPY_ENTRY_LEN: usize = 9;

/// A copies-index row's entries: (milliseconds since the epoch, reason code), 9 bytes each.
pub(crate) fn decode_copy_entries(value: &[u8]) -> Option<Vec<(i64, u8)>> {
    if !value.len().is_multiple_of(COPY_ENTRY_LEN) {
        return None;
    }
    value
        .chunks_exact(COPY_ENTRY_LEN)
        .map(|entry| {
            Some((
                i64::from_be_bytes(entry.get(..8)?.try_into().ok()?),
                *entry.get(8)?,
            ))
        })
        .collect()
}

/// The full row's fields besides its key.
pub(crate) struct FullRow {
    pub(crate) ad_id: AdId,
    pub(crate) user_id: UserId,
    pub(crate) user_ip: Option<IpAddr>,
    pub(crate) user_data: BTreeMap<String, String>,
    pub(crate) user_agent: Option<UserAgent>,
    pub(crate) invalid: Option<InvalidReason>,
}

/// Decodes [`impression_value`].
pub(crate) fn decode_impression_value(value: &[u8]) -> Option<FullRow> {
    let (ad, user) = decode_two_ids(value)?;
    let (ip, rest) = split_address(value)?;
    let (invalid, user_agent, rest) = match rest.split_first() {
        Some((&TRAFFIC_MARK, traffic)) => {
            let invalid = InvalidReason::from_code(*traffic.first()?).ok()?;
            let len = usize::from(u16::from_be_bytes(traffic.get(1..3)?.try_into().ok()?));
            let agent = std::str::from_utf8(traffic.get(3..3 + len)?).ok()?;
            (invalid, UserAgent::new(agent), traffic.get(3 + len..)?)
        }
        _ => (None, None, rest),
    };
    let user_data = if rest.is_empty() {
        BTreeMap::new()
    } else {
        serde_json::from_slice(rest).ok()?
    };
    Some(FullRow {
        ad_id: AdId::new(ad),
        user_id: UserId::new(user),
        user_ip: ip,
        user_data,
        user_agent,
        invalid,
    })
}

/// The thin row: ad, user, the copy's reason code, then its client part (see
/// [`client_part`]).
pub(crate) fn summary_value(event: &Impression) -> Vec<u8> {
    let mut value = Vec::with_capacity(60);
    value.extend_from_slice(event.ad_id.as_uuid().as_bytes());
    value.extend_from_slice(event.user_id.as_uuid().as_bytes());
    value.push(event.invalid.map_or(0, InvalidReason::code));
    value.extend(client_part(&event.client(), event.pixel_arrival));
    value
}

/// Which parts of the client part follow its flags byte.
const HAS_AGENT: u8 = 1;
const HAS_PIXEL: u8 = 2;

/// What the view join needs of a copy (a thin row) or a view report: flags, the user agent's
/// tag (8 bytes), the pixel's arrival (8 bytes of epoch milliseconds), the network (the rest:
/// 3 or 6 bytes, or none).
pub(crate) fn client_part(client: &Client, pixel_arrival: Option<DateTime<Utc>>) -> Vec<u8> {
    let mut part = vec![0];
    if let Some(agent) = client.agent {
        part[0] |= HAS_AGENT;
        part.extend(agent.stored().to_be_bytes());
    }
    if let Some(arrival) = pixel_arrival {
        part[0] |= HAS_PIXEL;
        part.extend(arrival.timestamp_millis().to_be_bytes());
    }
    if let Some(network) = client.network {
        part.extend_from_slice(network.as_bytes());
    }
    part
}

/// The thin row's reason (none in an older row).
pub(crate) fn decode_summary_invalid(value: &[u8]) -> Option<Option<InvalidReason>> {
    match value.get(32) {
        None => Some(None),
        Some(code) => InvalidReason::from_code(*code).ok(),
    }
}

/// The thin row's client and pixel arrival (none in a row written before viewability).
pub(crate) fn decode_summary_client(value: &[u8]) -> Option<(Client, Option<DateTime<Utc>>)> {
    decode_client_part(value.get(33..).unwrap_or_default())
}

/// [`client_part`] back; an empty part is an unknown client.
pub(crate) fn decode_client_part(part: &[u8]) -> Option<(Client, Option<DateTime<Utc>>)> {
    let Some((flags, mut rest)) = part.split_first() else {
        return Some((Client::default(), None));
    };
    let mut take8 = |present: bool| -> Option<Option<i64>> {
        if !present {
            return Some(None);
        }
        let bytes: [u8; 8] = rest.get(..8)?.try_into().ok()?;
        rest = rest.get(8..)?;
        Some(Some(i64::from_be_bytes(bytes)))
    };
    let agent = take8(flags & HAS_AGENT != 0)?.map(AgentTag::from_stored);
    let pixel = match take8(flags & HAS_PIXEL != 0)? {
        None => None,
        Some(millis) => Some(DateTime::from_timestamp_millis(millis)?),
    };
    let network = if rest.is_empty() {
        None
    } else {
        Some(Network::from_bytes(rest)?)
    };
    Some((Client { network, agent }, pixel))
}

pub(crate) fn decode_two_ids(value: &[u8]) -> Option<(Uuid, Uuid)> {
    Some((
        Uuid::from_slice(value.get(0..16)?).ok()?,
        Uuid::from_slice(value.get(16..32)?).ok()?,
    ))
}

pub(crate) fn decode_one_id(value: &[u8]) -> Option<Uuid> {
    Uuid::from_slice(value.get(0..16)?).ok()
}

/// Settings: bucket count (2 bytes), then the daily cap (8 bytes) when there is one.
/// Marks a settings value that carries every delivery setting; older values are 2 bytes
/// (buckets) or 10 (buckets and a daily cap).
const SETTINGS_WITH_CAPS: u8 = 2;
/// Marks a value that also carries the conversion look-backs (4 bytes each, before the zone).
const SETTINGS_WITH_LOOK_BACKS: u8 = 3;

/// A settings row's value: buckets, then (campaigns) the marker, both caps (a presence byte
/// and 8 bytes each) and the zone's name.
pub(crate) fn settings_value(buckets: u16, caps: Option<(&Caps, LookBacks)>) -> Vec<u8> {
    let mut value = buckets.to_be_bytes().to_vec();
    if let Some((caps, look_backs)) = caps {
        value.push(SETTINGS_WITH_LOOK_BACKS);
        for cap in [caps.daily_cap, caps.total_cap] {
            value.push(u8::from(cap.is_some()));
            value.extend_from_slice(&cap.unwrap_or(0).to_be_bytes());
        }
        value.extend_from_slice(&look_backs.click.seconds().to_be_bytes());
        value.extend_from_slice(&look_backs.view.seconds().to_be_bytes());
        value.extend_from_slice(caps.tz.name().as_bytes());
    }
    value
}

/// A settings value's bucket count, caps and look-backs (the defaults where it predates them).
pub(crate) fn decode_settings_value(value: &[u8]) -> Option<(u16, Caps, LookBacks)> {
    let mut look_backs = LookBacks::DEFAULT;
    let buckets = u16::from_be_bytes(value.get(0..2)?.try_into().ok()?);
    let mut caps = Caps {
        daily_cap: None,
        total_cap: None,
        tz: Tz::UTC,
    };
    match value.len() {
        2 => {}
        10 => caps.daily_cap = Some(u64::from_be_bytes(value.get(2..10)?.try_into().ok()?)),
        _ => {
            let marker = *value.get(2)?;
            if marker != SETTINGS_WITH_CAPS && marker != SETTINGS_WITH_LOOK_BACKS {
                return None;
            }
            let cap = |at: usize| -> Option<Option<u64>> {
                let present = *value.get(at)? == 1;
                let cap = u64::from_be_bytes(value.get(at + 1..at + 9)?.try_into().ok()?);
                Some(present.then_some(cap))
            };
            caps.daily_cap = cap(3)?;
            caps.total_cap = cap(12)?;
            let mut zone_at = 21;
            if marker == SETTINGS_WITH_LOOK_BACKS {
                let seconds = |at: usize| -> Option<LookBack> {
                    let bytes = value.get(at..at + 4)?.try_into().ok()?;
                    Some(LookBack::from_seconds(u32::from_be_bytes(bytes)))
                };
                look_backs = LookBacks {
                    click: seconds(21)?,
                    view: seconds(25)?,
                };
                zone_at = 29;
            }
            caps.tz = std::str::from_utf8(value.get(zone_at..)?)
                .ok()?
                .parse()
                .ok()?;
        }
    }
    Some((buckets, caps, look_backs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{AdvertiserId, CampaignId, CampaignKey, ImpressionId};
    use crate::domain::time::EventTime;
    use crate::domain::user_data::UserData;

    #[test]
    fn a_client_part_round_trips_and_an_empty_one_is_an_unknown_client() {
        let agent = UserAgent::new("Mozilla/5.0 (X11; Linux x86_64)");
        let client = Client::of(Some("2001:db8:7::1".parse().expect("ip")), agent.as_ref());
        let arrival = DateTime::from_timestamp_millis(1_764_000_000_123);
        for (client, arrival) in [(client, arrival), (client, None), (Client::default(), None)] {
            let part = client_part(&client, arrival);
            assert_eq!(decode_client_part(&part), Some((client, arrival)));
        }
        assert_eq!(decode_client_part(&[]), Some((Client::default(), None)));
    }

    #[test]
    fn a_full_rows_address_is_rewritten_in_place_and_only_when_it_changes() {
        let event = |ip: &str| Impression {
            impression_id: ImpressionId::new(Uuid::from_u128(1)),
            campaign: CampaignKey {
                advertiser_id: AdvertiserId::new(Uuid::from_u128(2)),
                campaign_id: CampaignId::new(Uuid::from_u128(3)),
            },
            ad_id: AdId::new(Uuid::from_u128(4)),
            user_id: UserId::new(Uuid::from_u128(5)),
            timestamp: EventTime::from_stored(chrono::Utc::now()),
            user_ip: ip.parse().ok(),
            user_data: UserData::new(BTreeMap::from([("country".into(), "FR".into())]))
                .expect("valid"),
            user_agent: UserAgent::new("Mozilla/5.0 (X11; Linux x86_64)"),
            invalid: Some(InvalidReason::DeniedAddress),
            pixel_arrival: None,
            ip_is_viewers: true,
        };
        for (stored, policy, expected) in [
            ("198.51.100.77", StoreIp::Truncated, Some("198.51.100.0")),
            ("2001:db8:1:2::9", StoreIp::Truncated, Some("2001:db8:1::")),
            ("2001:db8:1:2::9", StoreIp::None, Some("")),
            ("198.51.100.0", StoreIp::Truncated, None),
            ("198.51.100.77", StoreIp::Full, None),
            ("", StoreIp::Truncated, None),
        ] {
            let value = impression_value(&event(stored));
            let rewritten = with_address_kept(&value, policy).expect("decodes");
            match expected {
                None => assert_eq!(rewritten, None, "{stored} {policy}"),
                Some(kept) => {
                    let rewritten = rewritten.expect("rewritten");
                    assert_eq!(
                        rewritten,
                        impression_value(&event(kept)),
                        "{stored} {policy}"
                    );
                    let row = decode_impression_value(&rewritten).expect("decodes");
                    assert_eq!(row.invalid, Some(InvalidReason::DeniedAddress));
                    assert_eq!(row.user_data.len(), 1);
                }
            }
        }
        assert_eq!(with_address_kept(&[0; 20], StoreIp::Truncated), None);
    }

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
            user_agent: UserAgent::new("Mozilla/5.0 (X11; Linux x86_64)"),
            invalid: Some(InvalidReason::Prefetch),
            pixel_arrival: None,
            ip_is_viewers: true,
        };
        let row = decode_impression_value(&impression_value(&event)).expect("decodes");
        assert_eq!(
            (row.ad_id, row.user_id, row.user_ip),
            (event.ad_id, event.user_id, event.user_ip)
        );
        assert_eq!(&row.user_data, event.user_data.entries());
        assert_eq!(
            (row.user_agent, row.invalid),
            (event.user_agent.clone(), event.invalid)
        );
        assert!(!impression_is_valid(&impression_value(&event)));
        // A row of the layout before invalid traffic: ids, no address, user_data.
        let mut older = event.ad_id.as_uuid().as_bytes().to_vec();
        older.extend_from_slice(event.user_id.as_uuid().as_bytes());
        older.push(0);
        older.extend_from_slice(br#"{"country":"FR"}"#);
        let row = decode_impression_value(&older).expect("an older row decodes");
        assert_eq!((row.invalid, row.user_agent), (None, None));
        assert_eq!(row.user_data.len(), 1);
        assert!(summary_is_valid(&older[..32]));
        assert_eq!(
            decode_traffic_suffix(&traffic_suffix(Some(InvalidReason::BotUserAgent), None)),
            Some((Some(InvalidReason::BotUserAgent), None))
        );
        assert_eq!(
            decode_settings_value(&[0, 8, 0, 0, 0, 0, 0, 0, 0x13, 0x88])
                .map(|(b, caps, look_backs)| (b, caps.daily_cap, look_backs)),
            Some((8, Some(5000), LookBacks::DEFAULT)),
            "a value written before total_cap and tz"
        );
        let caps = Caps {
            daily_cap: Some(5000),
            total_cap: None,
            tz: chrono_tz::Pacific::Kiritimati,
        };
        let look_backs = LookBacks {
            click: LookBack::from_seconds(7 * 86_400),
            view: LookBack::from_seconds(0),
        };
        assert_eq!(
            decode_settings_value(&settings_value(8, Some((&caps, look_backs)))),
            Some((8, caps, look_backs))
        );
        let mut before_look_backs = settings_value(8, Some((&caps, look_backs)));
        before_look_backs[2] = 2;
        before_look_backs.drain(21..29);
        assert_eq!(
            decode_settings_value(&before_look_backs),
            Some((8, caps, LookBacks::DEFAULT)),
            "a value written before the look-backs"
        );
        assert_eq!(
            decode_settings_value(&settings_value(8, None)).map(|(b, caps, _)| (b, caps.daily_cap)),
            Some((8, None))
        );
    }
}
