//! Impressions and clicks as clients send them, and their conversion into domain events.
//! Every problem is reported with the item's index and the field's name; a request with any
//! problem stores nothing.

use crate::domain::address::StoreIp;
use crate::domain::echo::echo;
use crate::domain::event::{Click, Impression};
use crate::domain::ids::{
    AdId, AdvertiserId, CampaignId, CampaignKey, IdError, ImpressionId, UserId, parse_uuid,
};
use crate::domain::retention::Retention;
use crate::domain::time::{EventTime, EventTimeError};
use crate::domain::traffic::UserAgent;
use crate::domain::user_data::UserData;
use crate::http::edge::body::{BodyFormat, RawItem, check_count, scan, split_items};
use crate::http::edge::error::{ApiError, FieldError};
use crate::http::edge::openapi::texts::{Id, IpAddress, Timestamp, UserData as UserDataText};
use crate::ivt::{Classifier, Signals};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use utoipa::ToSchema;
use uuid::Uuid;

/// An event timestamp as sent: RFC 3339 text or epoch milliseconds. Deserialized by hand
/// rather than as an untagged enum, which would buffer every value first.
#[derive(Debug)]
pub(crate) enum WireTimestamp<'a> {
    Millis(i64),
    Text(Cow<'a, str>),
    Other,
}

impl<'de: 'a, 'a> Deserialize<'de> for WireTimestamp<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TimestampVisitor<'a>(std::marker::PhantomData<&'a ()>);

        impl<'de: 'a, 'a> Visitor<'de> for TimestampVisitor<'a> {
            type Value = WireTimestamp<'a>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an RFC 3339 string or an integer of epoch milliseconds")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(WireTimestamp::Millis(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(i64::try_from(v).map_or(WireTimestamp::Other, WireTimestamp::Millis))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
                Ok(WireTimestamp::Other)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
                Ok(WireTimestamp::Other)
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(WireTimestamp::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(WireTimestamp::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(WireTimestamp::Other)
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map
                    .next_entry::<de::IgnoredAny, de::IgnoredAny>()?
                    .is_some()
                {}
                Ok(WireTimestamp::Other)
            }
        }

        deserializer.deserialize_any(TimestampVisitor(std::marker::PhantomData))
    }
}

/// An impression as an ad server sends it. Borrowed from the body where the JSON needs no
/// unescaping: no allocation per field. Unknown fields are ignored.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = Impression)]
pub(crate) struct ImpressionWire<'a> {
    /// Chosen by the ad server; it also goes into the click URL.
    #[serde(borrow)]
    #[schema(value_type = Id, inline)]
    impression_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    #[schema(value_type = Id, inline)]
    advertiser_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    #[schema(value_type = Id, inline)]
    campaign_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    #[schema(value_type = Id, inline)]
    ad_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    #[schema(value_type = Id, inline)]
    user_id: Option<Cow<'a, str>>,
    /// RFC 3339, or an integer of epoch **milliseconds**: when the ad was served.
    #[serde(borrow)]
    #[schema(value_type = Timestamp, inline)]
    timestamp: Option<WireTimestamp<'a>>,
    /// IPv4 or IPv6; default: the client address.
    #[serde(borrow)]
    #[schema(value_type = Option<IpAddress>, inline)]
    user_ip: Option<Cow<'a, str>>,
    /// At most 64 entries; key ≤ 64 bytes, value ≤ 1024 bytes.
    #[schema(value_type = Option<UserDataText>, inline)]
    user_data: Option<BTreeMap<String, String>>,
    /// The viewer's browser user agent (not the ad server's own client's); at most 512 bytes
    /// are kept. Classifies the impression as invalid traffic when it is a known bot.
    #[serde(borrow)]
    user_agent: Option<Cow<'a, str>>,
}

/// A click as an ad server sends it: the impression clicked and when.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = Click)]
pub(crate) struct ClickWire<'a> {
    #[serde(borrow)]
    #[schema(value_type = Id, inline)]
    impression_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    #[schema(value_type = Id, inline)]
    advertiser_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    #[schema(value_type = Id, inline)]
    campaign_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    #[schema(value_type = Id, inline)]
    ad_id: Option<Cow<'a, str>>,
    /// RFC 3339, or an integer of epoch **milliseconds**: when the ad was clicked.
    #[serde(borrow)]
    #[schema(value_type = Timestamp, inline)]
    timestamp: Option<WireTimestamp<'a>>,
    /// The clicker's browser user agent; at most 512 bytes are kept.
    #[serde(borrow)]
    user_agent: Option<Cow<'a, str>>,
}

/// What conversion needs besides the item itself.
pub(crate) struct Context {
    pub(crate) now: DateTime<Utc>,
    /// The client's address, used when an impression names no `user_ip`.
    pub(crate) client_ip: Option<IpAddr>,
    /// What of the impression's address is kept (`--store-ip`).
    pub(crate) store_ip: StoreIp,
    /// The only advertiser whose events the caller may send (an `ingest` key's); `None`: any.
    pub(crate) advertiser: Option<AdvertiserId>,
    /// Tells invalid traffic from the event's own `user_agent` and explicit `user_ip` (the
    /// request itself comes from the ad server, not the viewer).
    pub(crate) classifier: std::sync::Arc<Classifier>,
    /// Events of a UTC day that began longer ago than this are refused (`--retain-raw`).
    pub(crate) retain_raw: Retention,
}

/// Collects one item's field problems while converting it.
pub(super) struct Item<'a> {
    index: usize,
    errors: &'a mut Vec<FieldError>,
}

impl Item<'_> {
    pub(super) fn fail<T>(&mut self, field: &str, message: impl Into<String>) -> Option<T> {
        self.errors
            .push(FieldError::item(self.index, field, message));
        None
    }

    pub(super) fn uuid(&mut self, field: &str, value: Option<Cow<'_, str>>) -> Option<Uuid> {
        match value {
            None => self.fail(field, "is required"),
            Some(text) => match parse_uuid(&text) {
                Ok(id) => Some(id),
                Err(IdError::NotUuid) => {
                    self.fail(field, format!("{} {}", echo(&text), IdError::NotUuid))
                }
                Err(error) => self.fail(field, error.to_string()),
            },
        }
    }

    pub(super) fn timestamp(
        &mut self,
        value: Option<WireTimestamp>,
        context: &Context,
    ) -> Option<EventTime> {
        let now = context.now;
        let timestamp = self.event_time(value, now)?;
        if context.retain_raw.expired(timestamp.utc_day(), now) {
            return self.fail("timestamp", context.retain_raw.refusal());
        }
        Some(timestamp)
    }

    fn event_time(
        &mut self,
        value: Option<WireTimestamp>,
        now: DateTime<Utc>,
    ) -> Option<EventTime> {
        let value_millis = match &value {
            Some(WireTimestamp::Millis(millis)) => Some(*millis),
            _ => None,
        };
        let digits_as_text =
            matches!(&value, Some(WireTimestamp::Text(text)) if is_number_text(text));
        let parsed = match value {
            None => return self.fail("timestamp", "is required"),
            Some(WireTimestamp::Millis(millis)) => EventTime::from_epoch_millis(millis, now),
            Some(WireTimestamp::Text(text)) => EventTime::from_rfc3339(&text, now),
            Some(WireTimestamp::Other) => {
                return self.fail(
                    "timestamp",
                    "must be an RFC 3339 string or an integer of epoch milliseconds",
                );
            }
        };
        match parsed {
            Ok(timestamp) => Some(timestamp),
            Err(EventTimeError::TooOld) if looks_like_seconds(&value_millis) => self.fail(
                "timestamp",
                "is before 2000-01-01 as epoch milliseconds; it looks like epoch seconds \
                 (impressions and clicks take milliseconds, only /track beacons take seconds)",
            ),
            Err(_) if digits_as_text => self.fail(
                "timestamp",
                "is a number written as a string; send an integer of epoch milliseconds (not \
                 seconds, and not quoted) or an RFC 3339 string",
            ),
            Err(error) => self.fail("timestamp", error.to_string()),
        }
    }
}

/// Whether `text` is a number written as a string (`"1764300000"`, `"1764300000.5"`): the
/// usual mistake of a client that formats epoch seconds into JSON text.
fn is_number_text(text: &str) -> bool {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    !whole.is_empty()
        && whole.bytes().all(|byte| byte.is_ascii_digit())
        && fraction.bytes().all(|byte| byte.is_ascii_digit())
}

/// Whether an integer timestamp refused as too old would be a time since 2000 in seconds: the
/// usual mistake of a client that sends beacons too.
fn looks_like_seconds(millis: &Option<i64>) -> bool {
    const YEAR_2000_SECONDS: i64 = 946_684_800;
    millis.is_some_and(|value| (YEAR_2000_SECONDS..100_000_000_000).contains(&value))
}

/// Conversion of one wire item into its domain event.
pub(crate) trait IntoEvent<'de>: Deserialize<'de> {
    type Event: Clone + PartialEq;
    /// What makes two events of one request the same event.
    type Identity: std::hash::Hash + Eq + std::fmt::Display;
    /// The field that carries the identity, named when one appears twice with other fields.
    const IDENTITY_FIELD: &'static str = "impression_id";
    fn into_event(self, item: &mut ItemContext<'_>) -> Option<Self::Event>;
    fn identity(event: &Self::Event) -> Self::Identity;
    fn advertiser(event: &Self::Event) -> AdvertiserId;
}

/// Opaque to implementors outside this module: the item being converted and its context.
pub(crate) struct ItemContext<'a> {
    item: Item<'a>,
    context: &'a Context,
}

impl<'a> ItemContext<'a> {
    /// The item's problems and the request's context, for conversions in a sibling module.
    pub(super) fn parts(&mut self) -> (&mut Item<'a>, &'a Context) {
        (&mut self.item, self.context)
    }
}

impl<'de> IntoEvent<'de> for ImpressionWire<'de> {
    type Event = Impression;
    type Identity = ImpressionId;

    fn into_event(self, cx: &mut ItemContext<'_>) -> Option<Impression> {
        let item = &mut cx.item;
        let impression_id = item.uuid("impression_id", self.impression_id);
        let advertiser_id = item.uuid("advertiser_id", self.advertiser_id);
        let campaign_id = item.uuid("campaign_id", self.campaign_id);
        let ad_id = item.uuid("ad_id", self.ad_id);
        let user_id = item.uuid("user_id", self.user_id);
        let timestamp = item.timestamp(self.timestamp, cx.context);
        let viewer_ip = match self.user_ip {
            None => None,
            Some(text) => match text.parse::<IpAddr>() {
                Ok(ip) => Some(ip),
                Err(_) => item.fail(
                    "user_ip",
                    format!("{} is not an IPv4 or IPv6 address", echo(&text)),
                ),
            },
        };
        let user_agent = self.user_agent.as_deref().and_then(UserAgent::new);
        // Judged on the full address: a denied range may be narrower than what is kept.
        let invalid = cx.context.classifier.classify(Signals {
            user_agent: user_agent.as_ref(),
            prefetch: false,
            address: viewer_ip,
        });
        // From here on only what `--store-ip` keeps: the event is what gets stored.
        let user_ip = cx
            .context
            .store_ip
            .stored(viewer_ip.or(cx.context.client_ip));
        let user_data = match UserData::new(self.user_data.unwrap_or_default()) {
            Ok(user_data) => Some(user_data),
            Err(message) => item.fail("user_data", message),
        };
        Some(Impression {
            impression_id: ImpressionId::new(impression_id?),
            campaign: CampaignKey {
                advertiser_id: AdvertiserId::new(advertiser_id?),
                campaign_id: CampaignId::new(campaign_id?),
            },
            ad_id: AdId::new(ad_id?),
            user_id: UserId::new(user_id?),
            timestamp: timestamp?,
            user_ip,
            user_data: user_data?,
            user_agent,
            invalid,
            pixel_arrival: None,
            ip_is_viewers: viewer_ip.is_some(),
        })
    }

    fn identity(event: &Impression) -> ImpressionId {
        event.impression_id
    }

    fn advertiser(event: &Impression) -> AdvertiserId {
        event.campaign.advertiser_id
    }
}

impl<'de> IntoEvent<'de> for ClickWire<'de> {
    type Event = Click;
    type Identity = ImpressionId;

    fn into_event(self, cx: &mut ItemContext<'_>) -> Option<Click> {
        let item = &mut cx.item;
        let impression_id = item.uuid("impression_id", self.impression_id);
        let advertiser_id = item.uuid("advertiser_id", self.advertiser_id);
        let campaign_id = item.uuid("campaign_id", self.campaign_id);
        let ad_id = item.uuid("ad_id", self.ad_id);
        let timestamp = item.timestamp(self.timestamp, cx.context);
        let user_agent = self.user_agent.as_deref().and_then(UserAgent::new);
        let invalid = cx.context.classifier.classify(Signals {
            user_agent: user_agent.as_ref(),
            ..Signals::default()
        });
        Some(Click {
            impression_id: ImpressionId::new(impression_id?),
            campaign: CampaignKey {
                advertiser_id: AdvertiserId::new(advertiser_id?),
                campaign_id: CampaignId::new(campaign_id?),
            },
            ad_id: AdId::new(ad_id?),
            timestamp: timestamp?,
            user_agent,
            invalid,
        })
    }

    fn identity(event: &Click) -> ImpressionId {
        event.impression_id
    }

    fn advertiser(event: &Click) -> AdvertiserId {
        event.campaign.advertiser_id
    }
}

/// Reads the events of a decoded body: one pass straight into wire structs when every item
/// is well-formed (the common case), and an item-by-item pass only to say exactly what is
/// wrong with a malformed one. Any problem is a 400 listing every problem; more events than
/// `max_events` is a 413.
pub(crate) fn parse_body<'de, W: IntoEvent<'de>>(
    bytes: &'de [u8],
    format: BodyFormat,
    max_events: usize,
    context: &Context,
) -> Result<(Vec<W::Event>, usize), ApiError> {
    let shape = scan(bytes, format);
    check_count(shape.items, max_events)?;
    // Serde would also read a JSON array as a struct (fields by position): only objects are
    // events, so anything else takes the slow path, which names the item.
    let wires = shape
        .all_objects
        .then(|| well_formed::<W>(bytes, format))
        .flatten();
    let Some(wires) = wires else {
        let items = split_items(bytes, format, max_events)?;
        let count = items.len();
        return convert_items::<W>(&items, context).map(|events| (events, count));
    };
    let count = wires.len();
    convert(wires.into_iter().map(Ok), count, context).map(|events| (events, count))
}

/// Every item deserialized in one pass, or `None` if any is malformed.
fn well_formed<'de, W: Deserialize<'de>>(bytes: &'de [u8], format: BodyFormat) -> Option<Vec<W>> {
    match format {
        BodyFormat::Json => match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'[') => serde_json::from_slice(bytes).ok(),
            Some(b'{') => serde_json::from_slice(bytes).ok().map(|wire| vec![wire]),
            _ => None,
        },
        BodyFormat::Ndjson => bytes
            .split(|b| *b == b'\n')
            .filter(|line| line.iter().any(|b| !b.is_ascii_whitespace()))
            .map(|line| serde_json::from_slice(line).ok())
            .collect(),
    }
}

/// The slow path: each raw item on its own, so a type error names its item and field.
fn convert_items<'de, W: IntoEvent<'de>>(
    items: &[RawItem<'de>],
    context: &Context,
) -> Result<Vec<W::Event>, ApiError> {
    let wires = items.iter().enumerate().map(|(index, raw)| {
        let raw = raw
            .as_ref()
            .map_err(|message| FieldError::whole_item(index, message.clone()))?;
        if !raw.get().trim_start().starts_with('{') {
            return Err(FieldError::whole_item(index, "must be a JSON object"));
        }
        let mut deserializer = serde_json::Deserializer::from_str(raw.get());
        serde_path_to_error::deserialize::<_, W>(&mut deserializer).map_err(|error| {
            let field = error.path().to_string();
            FieldError::item(index, field, error.into_inner().to_string())
        })
    });
    convert(wires, items.len(), context)
}

/// Converts well-formed items into events, collecting every problem; exact repeats of one id
/// are dropped, different ones refused. With every item valid, events of an advertiser other
/// than the caller's refuse the whole request (403, their indexes listed).
fn convert<'de, W: IntoEvent<'de>>(
    wires: impl Iterator<Item = Result<W, FieldError>>,
    count: usize,
    context: &Context,
) -> Result<Vec<W::Event>, ApiError> {
    let mut errors = Vec::new();
    let mut foreign = Vec::new();
    let mut events = Vec::with_capacity(count);
    let mut first_seen: HashMap<W::Identity, usize> = HashMap::with_capacity(count);
    for (index, wire) in wires.enumerate() {
        let wire = match wire {
            Ok(wire) => wire,
            Err(error) => {
                errors.push(error);
                continue;
            }
        };
        let mut cx = ItemContext {
            item: Item {
                index,
                errors: &mut errors,
            },
            context,
        };
        let Some(event) = wire.into_event(&mut cx) else {
            continue;
        };
        if let Some(owner) = context.advertiser
            && W::advertiser(&event) != owner
        {
            foreign.push(FieldError::item(
                index,
                "advertiser_id",
                "belongs to another advertiser than the key's",
            ));
        }
        let id = W::identity(&event);
        match first_seen.get(&id) {
            None => {
                first_seen.insert(id, events.len());
                events.push((index, event));
            }
            Some(&position) => {
                let (first_index, first) = &events[position];
                if *first != event {
                    errors.push(FieldError::item(
                        index,
                        W::IDENTITY_FIELD,
                        format!("{id} appears at index {first_index} with different fields"),
                    ));
                }
            }
        }
    }
    if errors.is_empty() && foreign.is_empty() {
        Ok(events.into_iter().map(|(_, event)| event).collect())
    } else if errors.is_empty() {
        Err(ApiError::ForbiddenItems {
            message: format!(
                "{} of {count} events belong to another advertiser than the key's; nothing was stored",
                foreign.len()
            ),
            errors: foreign,
        })
    } else {
        let invalid: std::collections::BTreeSet<_> =
            errors.iter().filter_map(|error| error.index).collect();
        Err(ApiError::InvalidRequest {
            message: format!(
                "{} of {count} events are invalid; nothing was stored",
                invalid.len()
            ),
            errors,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> Context {
        Context {
            now: "2026-11-26T12:00:00Z".parse().expect("valid"),
            client_ip: Some("203.0.113.9".parse().expect("valid")),
            store_ip: StoreIp::Full,
            advertiser: None,
            classifier: std::sync::Arc::new(Classifier::default()),
            retain_raw: Retention::Forever,
        }
    }

    #[test]
    fn an_event_of_a_day_past_retention_is_refused_by_its_day() {
        let context = Context {
            retain_raw: Retention::parse("30days").expect("a retention"),
            ..context()
        };
        // Now is 2026-11-26 12:00: 2026-10-27 began 30.5 days ago, 2026-10-28 29.5 days ago.
        let body = format!(
            "[{}, {}]",
            impression(ID, "\"2026-10-27T23:59:59Z\""),
            impression(
                "11111111-6c08-4160-9196-f0050faffe62",
                "\"2026-10-28T00:00:00Z\""
            )
        );
        let Err(ApiError::InvalidRequest { errors, .. }) =
            parse_body::<ImpressionWire>(body.as_bytes(), BodyFormat::Json, 10, &context)
        else {
            panic!("expected a 400");
        };
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].index, Some(0));
        assert_eq!(errors[0].field.as_deref(), Some("timestamp"));
        assert!(errors[0].message.contains("--retain-raw"), "{errors:?}");
    }

    fn impression(id: &str, timestamp: &str) -> String {
        format!(
            r#"{{"impression_id":"{id}","advertiser_id":"{a}","campaign_id":"{a}","ad_id":"{a}","user_id":"{a}","timestamp":{timestamp},"extra":"ignored"}}"#,
            a = "00000000-0000-4000-8000-000000000001"
        )
    }

    const ID: &str = "962e0c3a-6c08-4160-9196-f0050faffe62";

    #[test]
    fn a_valid_impression_takes_the_client_address_when_it_names_none() {
        let body = impression(ID, "1764158400000");
        let (events, _) =
            parse_body::<ImpressionWire>(body.as_bytes(), BodyFormat::Json, 10, &context())
                .expect("valid");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].user_ip, context().client_ip);
        assert_eq!(events[0].timestamp.to_string(), "2025-11-26T12:00:00.000Z");
    }

    fn with_address(ip: &str) -> String {
        impression(ID, "1764158400000")
            .replace(r#""extra":"ignored""#, &format!(r#""user_ip":"{ip}""#))
    }

    #[test]
    fn the_address_kept_follows_store_ip_for_a_posted_and_a_client_address() {
        for (policy, posted, client) in [
            (
                StoreIp::Truncated,
                Some("198.51.100.0"),
                Some("203.0.113.0"),
            ),
            (StoreIp::Full, Some("198.51.100.77"), Some("203.0.113.9")),
            (StoreIp::None, None, None),
        ] {
            let context = Context {
                store_ip: policy,
                ..context()
            };
            let body = with_address("198.51.100.77");
            let (events, _) =
                parse_body::<ImpressionWire>(body.as_bytes(), BodyFormat::Json, 10, &context)
                    .expect("valid");
            assert_eq!(events[0].user_ip, posted.map(|ip| ip.parse().expect("ip")));
            let body = impression(ID, "1764158400000");
            let (events, _) =
                parse_body::<ImpressionWire>(body.as_bytes(), BodyFormat::Json, 10, &context)
                    .expect("valid");
            assert_eq!(events[0].user_ip, client.map(|ip| ip.parse().expect("ip")));
        }
    }

    #[test]
    fn a_denied_range_narrower_than_what_is_kept_still_matches_the_posted_address() {
        let context = Context {
            store_ip: StoreIp::Truncated,
            classifier: std::sync::Arc::new(Classifier::new(vec![
                "198.51.100.77/32".parse().expect("net"),
            ])),
            ..context()
        };
        let body = format!(
            "[{}, {}]",
            with_address("198.51.100.77"),
            with_address("198.51.100.78").replace(ID, "11111111-6c08-4160-9196-f0050faffe62")
        );
        let (events, _) =
            parse_body::<ImpressionWire>(body.as_bytes(), BodyFormat::Json, 10, &context)
                .expect("valid");
        assert_eq!(
            events.iter().map(|event| event.invalid).collect::<Vec<_>>(),
            [
                Some(crate::domain::traffic::InvalidReason::DeniedAddress),
                None
            ]
        );
        assert!(
            events
                .iter()
                .all(|event| event.user_ip == "198.51.100.0".parse().ok())
        );
    }

    #[test]
    fn every_problem_is_listed_with_index_and_field() {
        let body = format!(
            "[{}, {}, {}]",
            impression(ID, "\"2026-11-26T11:00:00Z\""),
            impression("not-a-uuid", "\"2099-01-01T00:00:00Z\""),
            r#"{"impression_id": 5}"#
        );
        let Err(ApiError::InvalidRequest { message, errors }) =
            parse_body::<ImpressionWire>(body.as_bytes(), BodyFormat::Json, 10, &context())
        else {
            panic!("expected a 400");
        };
        assert!(
            message.starts_with("2 of 3 events are invalid"),
            "{message}"
        );
        let fields: Vec<(Option<usize>, Option<&str>)> = errors
            .iter()
            .map(|e| (e.index, e.field.as_deref()))
            .collect();
        assert_eq!(
            fields,
            [
                (Some(1), Some("impression_id")),
                (Some(1), Some("timestamp")),
                (Some(2), Some("impression_id"))
            ]
        );
    }

    #[test]
    fn a_timestamp_of_digits_in_a_string_is_refused_with_a_hint() {
        assert!(is_number_text("1764300000"));
        assert!(is_number_text("1764300000.25"));
        assert!(!is_number_text("2026-11-28T00:00:00Z"));
        assert!(!is_number_text(""));
        assert!(!is_number_text(".5"));
        let body = impression(ID, "\"1764158400\"");
        let Err(ApiError::InvalidRequest { errors, .. }) =
            parse_body::<ImpressionWire>(body.as_bytes(), BodyFormat::Json, 10, &context())
        else {
            panic!("expected a 400");
        };
        assert_eq!(errors[0].field.as_deref(), Some("timestamp"));
        assert!(errors[0].message.contains("as a string"), "{errors:?}");
    }

    #[test]
    fn an_integer_timestamp_in_seconds_is_refused_with_a_hint() {
        let body = impression(ID, "1764158400");
        let Err(ApiError::InvalidRequest { errors, .. }) =
            parse_body::<ImpressionWire>(body.as_bytes(), BodyFormat::Json, 10, &context())
        else {
            panic!("expected a 400");
        };
        assert_eq!(errors[0].field.as_deref(), Some("timestamp"));
        assert!(errors[0].message.contains("epoch seconds"), "{errors:?}");
        let ancient = impression(ID, "5000");
        let Err(ApiError::InvalidRequest { errors, .. }) =
            parse_body::<ImpressionWire>(ancient.as_bytes(), BodyFormat::Json, 10, &context())
        else {
            panic!("expected a 400");
        };
        assert_eq!(errors[0].message, "is before 2000-01-01");
    }

    #[test]
    fn ndjson_goes_through_the_fast_path_and_a_bad_line_is_named() {
        let good = format!(
            "{}\n\n{}\n",
            impression(ID, "1764158400000"),
            impression(ID, "1764158400000")
        );
        let (events, count) =
            parse_body::<ImpressionWire>(good.as_bytes(), BodyFormat::Ndjson, 10, &context())
                .expect("valid");
        assert_eq!((events.len(), count), (1, 2));
        let bad = format!("{}\n{{oops\n", impression(ID, "1764158400000"));
        let Err(ApiError::InvalidRequest { errors, .. }) =
            parse_body::<ImpressionWire>(bad.as_bytes(), BodyFormat::Ndjson, 10, &context())
        else {
            panic!("expected a 400");
        };
        assert_eq!(errors[0].index, Some(1));
    }

    #[test]
    fn an_array_in_place_of_an_object_is_refused_on_every_path() {
        let body = r#"[["962e0c3a-6c08-4160-9196-f0050faffe62"]]"#;
        let Err(ApiError::InvalidRequest { errors, .. }) =
            parse_body::<ImpressionWire>(body.as_bytes(), BodyFormat::Json, 10, &context())
        else {
            panic!("expected a 400");
        };
        assert_eq!(errors[0].message, "must be a JSON object");
    }

    #[test]
    fn an_ingest_keys_batch_with_another_advertisers_event_is_refused_whole() {
        let other = ID.replace("962e", "0000");
        let foreign = impression(ID, "1764158400000").replace(
            "00000000-0000-4000-8000-000000000001\",\"campaign_id",
            &format!("{other}\",\"campaign_id"),
        );
        let body = format!(
            "[{}, {foreign}]",
            impression("11111111-6c08-4160-9196-f0050faffe62", "1764158400000")
        );
        let mut owned = context();
        owned.advertiser = Some(AdvertiserId::new(
            Uuid::parse_str("00000000-0000-4000-8000-000000000001").expect("uuid"),
        ));
        let Err(ApiError::ForbiddenItems { errors, .. }) =
            parse_body::<ImpressionWire>(body.as_bytes(), BodyFormat::Json, 10, &owned)
        else {
            panic!("expected a 403");
        };
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].index, Some(1));
    }

    #[test]
    fn an_oversized_request_is_refused_before_its_items_are_parsed() {
        let body = format!("[{}{{}}]", "{},".repeat(100));
        assert!(matches!(
            parse_body::<ImpressionWire>(body.as_bytes(), BodyFormat::Json, 100, &context()),
            Err(ApiError::PayloadTooLarge(_))
        ));
    }

    #[test]
    fn the_same_id_twice_is_dropped_when_identical_and_refused_when_different() {
        let same = format!("[{0}, {0}]", impression(ID, "1764158400000"));
        let (events, count) =
            parse_body::<ImpressionWire>(same.as_bytes(), BodyFormat::Json, 10, &context())
                .expect("valid");
        assert_eq!((events.len(), count), (1, 2));

        let different = format!(
            "[{}, {}]",
            impression(ID, "1764158400000"),
            impression(ID, "1764158400001")
        );
        let Err(ApiError::InvalidRequest { errors, .. }) =
            parse_body::<ImpressionWire>(different.as_bytes(), BodyFormat::Json, 10, &context())
        else {
            panic!("expected a 400");
        };
        assert_eq!(errors[0].index, Some(1));
    }
}
