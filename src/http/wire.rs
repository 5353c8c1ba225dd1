//! Impressions and clicks as clients send them, and their conversion into domain events.
//! Every problem is reported with the item's index and the field's name; a request with any
//! problem stores nothing.

use super::body::RawItem;
use super::error::{ApiError, FieldError};
use crate::domain::event::{Click, Impression};
use crate::domain::ids::{AdId, AdvertiserId, CampaignId, CampaignKey, ImpressionId, UserId};
use crate::domain::time::EventTime;
use crate::domain::user_data::UserData;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use uuid::Uuid;

/// An event timestamp as sent: RFC 3339 text or epoch milliseconds.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum WireTimestamp {
    Millis(i64),
    Text(String),
    Other(serde::de::IgnoredAny),
}

#[derive(Debug, Deserialize)]
pub struct ImpressionWire {
    impression_id: Option<String>,
    advertiser_id: Option<String>,
    campaign_id: Option<String>,
    ad_id: Option<String>,
    user_id: Option<String>,
    timestamp: Option<WireTimestamp>,
    user_ip: Option<String>,
    user_data: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Deserialize)]
pub struct ClickWire {
    impression_id: Option<String>,
    advertiser_id: Option<String>,
    campaign_id: Option<String>,
    ad_id: Option<String>,
    timestamp: Option<WireTimestamp>,
}

/// What conversion needs besides the item itself.
pub struct Context {
    pub now: DateTime<Utc>,
    /// The client's address, used when an impression names no `user_ip`.
    pub client_ip: Option<IpAddr>,
}

/// Collects one item's field problems while converting it.
struct Item<'a> {
    index: usize,
    errors: &'a mut Vec<FieldError>,
}

impl Item<'_> {
    fn fail<T>(&mut self, field: &str, message: impl Into<String>) -> Option<T> {
        self.errors
            .push(FieldError::item(self.index, field, message));
        None
    }

    fn uuid(&mut self, field: &str, value: Option<String>) -> Option<Uuid> {
        match value {
            None => self.fail(field, "is required"),
            Some(text) => match Uuid::parse_str(&text) {
                Ok(id) => Some(id),
                Err(_) => self.fail(field, format!("{text:?} is not a UUID")),
            },
        }
    }

    fn timestamp(&mut self, value: Option<WireTimestamp>, now: DateTime<Utc>) -> Option<EventTime> {
        let parsed = match value {
            None => return self.fail("timestamp", "is required"),
            Some(WireTimestamp::Millis(millis)) => EventTime::from_epoch_millis(millis, now),
            Some(WireTimestamp::Text(text)) => EventTime::from_rfc3339(&text, now),
            Some(WireTimestamp::Other(_)) => {
                return self.fail(
                    "timestamp",
                    "must be an RFC 3339 string or an integer of epoch milliseconds",
                );
            }
        };
        match parsed {
            Ok(timestamp) => Some(timestamp),
            Err(error) => self.fail("timestamp", error.to_string()),
        }
    }
}

/// Conversion of one wire item into its domain event.
pub trait IntoEvent: DeserializeOwned {
    type Event: Clone + PartialEq;
    fn into_event(self, item: &mut ItemContext<'_>) -> Option<Self::Event>;
    fn identity(event: &Self::Event) -> ImpressionId;
}

/// Opaque to implementors outside this module: the item being converted and its context.
pub struct ItemContext<'a> {
    item: Item<'a>,
    context: &'a Context,
}

impl IntoEvent for ImpressionWire {
    type Event = Impression;

    fn into_event(self, cx: &mut ItemContext<'_>) -> Option<Impression> {
        let item = &mut cx.item;
        let impression_id = item.uuid("impression_id", self.impression_id);
        let advertiser_id = item.uuid("advertiser_id", self.advertiser_id);
        let campaign_id = item.uuid("campaign_id", self.campaign_id);
        let ad_id = item.uuid("ad_id", self.ad_id);
        let user_id = item.uuid("user_id", self.user_id);
        let timestamp = item.timestamp(self.timestamp, cx.context.now);
        let user_ip = match self.user_ip {
            None => cx.context.client_ip,
            Some(text) => match text.trim().parse::<IpAddr>() {
                Ok(ip) => Some(ip),
                Err(_) => item.fail(
                    "user_ip",
                    format!("{text:?} is not an IPv4 or IPv6 address"),
                ),
            },
        };
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
        })
    }

    fn identity(event: &Impression) -> ImpressionId {
        event.impression_id
    }
}

impl IntoEvent for ClickWire {
    type Event = Click;

    fn into_event(self, cx: &mut ItemContext<'_>) -> Option<Click> {
        let item = &mut cx.item;
        let impression_id = item.uuid("impression_id", self.impression_id);
        let advertiser_id = item.uuid("advertiser_id", self.advertiser_id);
        let campaign_id = item.uuid("campaign_id", self.campaign_id);
        let ad_id = item.uuid("ad_id", self.ad_id);
        let timestamp = item.timestamp(self.timestamp, cx.context.now);
        Some(Click {
            impression_id: ImpressionId::new(impression_id?),
            campaign: CampaignKey {
                advertiser_id: AdvertiserId::new(advertiser_id?),
                campaign_id: CampaignId::new(campaign_id?),
            },
            ad_id: AdId::new(ad_id?),
            timestamp: timestamp?,
        })
    }

    fn identity(event: &Click) -> ImpressionId {
        event.impression_id
    }
}

/// Converts every item; all valid gives the events (exact repeats of one id dropped), any
/// problem gives a 400 listing every problem.
pub fn parse_events<W: IntoEvent>(
    items: &[RawItem<'_>],
    context: &Context,
) -> Result<Vec<W::Event>, ApiError> {
    let mut errors = Vec::new();
    let mut events = Vec::with_capacity(items.len());
    let mut first_seen: HashMap<ImpressionId, usize> = HashMap::with_capacity(items.len());
    for (index, raw) in items.iter().enumerate() {
        let raw = match raw {
            Ok(raw) => raw,
            Err(message) => {
                errors.push(FieldError::whole_item(index, message.clone()));
                continue;
            }
        };
        if !raw.get().trim_start().starts_with('{') {
            errors.push(FieldError::whole_item(index, "must be a JSON object"));
            continue;
        }
        let mut deserializer = serde_json::Deserializer::from_str(raw.get());
        let wire: W = match serde_path_to_error::deserialize(&mut deserializer) {
            Ok(wire) => wire,
            Err(error) => {
                let field = error.path().to_string();
                errors.push(FieldError::item(
                    index,
                    field,
                    error.into_inner().to_string(),
                ));
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
                        "impression_id",
                        format!("{id} appears at index {first_index} with different fields"),
                    ));
                }
            }
        }
    }
    if errors.is_empty() {
        Ok(events.into_iter().map(|(_, event)| event).collect())
    } else {
        let invalid: std::collections::BTreeSet<_> =
            errors.iter().filter_map(|error| error.index).collect();
        Err(ApiError::InvalidRequest {
            message: format!(
                "{} of {} events are invalid; nothing was stored",
                invalid.len(),
                items.len()
            ),
            errors,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::body::{BodyFormat, split_items};

    fn context() -> Context {
        Context {
            now: "2026-11-26T12:00:00Z".parse().expect("valid"),
            client_ip: Some("203.0.113.9".parse().expect("valid")),
        }
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
        let items = split_items(body.as_bytes(), BodyFormat::Json, 10).expect("valid");
        let events = parse_events::<ImpressionWire>(&items, &context()).expect("valid");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].user_ip, context().client_ip);
        assert_eq!(events[0].timestamp.to_string(), "2025-11-26T12:00:00.000Z");
    }

    #[test]
    fn every_problem_is_listed_with_index_and_field() {
        let body = format!(
            "[{}, {}, {}]",
            impression(ID, "\"2026-11-26T11:00:00Z\""),
            impression("not-a-uuid", "\"2099-01-01T00:00:00Z\""),
            r#"{"impression_id": 5}"#
        );
        let items = split_items(body.as_bytes(), BodyFormat::Json, 10).expect("valid");
        let Err(ApiError::InvalidRequest { message, errors }) =
            parse_events::<ImpressionWire>(&items, &context())
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
    fn the_same_id_twice_is_dropped_when_identical_and_refused_when_different() {
        let same = format!("[{0}, {0}]", impression(ID, "1764158400000"));
        let items = split_items(same.as_bytes(), BodyFormat::Json, 10).expect("valid");
        assert_eq!(
            parse_events::<ImpressionWire>(&items, &context())
                .expect("valid")
                .len(),
            1
        );

        let different = format!(
            "[{}, {}]",
            impression(ID, "1764158400000"),
            impression(ID, "1764158400001")
        );
        let items = split_items(different.as_bytes(), BodyFormat::Json, 10).expect("valid");
        let Err(ApiError::InvalidRequest { errors, .. }) =
            parse_events::<ImpressionWire>(&items, &context())
        else {
            panic!("expected a 400");
        };
        assert_eq!(errors[0].index, Some(1));
    }
}
