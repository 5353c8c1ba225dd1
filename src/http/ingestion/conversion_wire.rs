//! Conversions as advertisers' back ends send them, and their conversion into domain
//! conversions: the same body forms, limits and whole-batch refusal as impressions.

use super::wire::{IntoEvent, ItemContext, WireTimestamp};
use crate::domain::conversion::money::{Currency, Money};
use crate::domain::conversion::{Action, Conversion, ConversionId};
use crate::domain::echo::echo;
use crate::domain::ids::{AdvertiserId, ImpressionId, UserId};
use crate::http::edge::openapi::texts::{Id, Timestamp};
use serde::Deserialize;
use std::borrow::Cow;
use utoipa::ToSchema;

/// A conversion: an order, sign-up or lead of the advertiser, naming the click or impression
/// that led to it (`click_id`, `impression_id`) or the user (`user_id`). Unknown fields are
/// ignored.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(as = Conversion)]
pub(crate) struct ConversionWire<'a> {
    /// The order or lead id, 1–64 characters of `[A-Za-z0-9_.:-]`: with the advertiser, what
    /// makes a conversion one (sent again, it changes nothing).
    #[serde(borrow)]
    #[schema(value_type = String, min_length = 1, max_length = 64, pattern = r"^[A-Za-z0-9_.:-]+$", example = "order-20261128-0042")]
    conversion_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    #[schema(value_type = Id, inline)]
    advertiser_id: Option<Cow<'a, str>>,
    /// What converted, 1–64 characters of `[a-z0-9_.-]`: `purchase`, `signup`, …
    #[serde(borrow)]
    #[schema(value_type = String, min_length = 1, max_length = 64, pattern = r"^[a-z0-9_.-]+$", example = "purchase")]
    action: Option<Cow<'a, str>>,
    /// RFC 3339, or an integer of epoch **milliseconds**: when the conversion happened.
    #[serde(borrow)]
    #[schema(value_type = Timestamp, inline)]
    timestamp: Option<WireTimestamp<'a>>,
    /// The `impression_id` of the clicked impression, as the ad server put it into the
    /// landing URL; wins over `impression_id` when both are given.
    #[serde(borrow)]
    #[schema(value_type = Option<Id>, inline)]
    click_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    #[schema(value_type = Option<Id>, inline)]
    impression_id: Option<Cow<'a, str>>,
    /// The user, when no click or impression is named: attributed to the user's latest click,
    /// else latest impression, of any campaign of the advertiser.
    #[serde(borrow)]
    #[schema(value_type = Option<Id>, inline)]
    user_id: Option<Cow<'a, str>>,
    /// A decimal string (never a JSON number): ≥ 0, at most 10^12, no more decimals than the
    /// currency's minor unit (EUR 2, JPY 0, KWD 3).
    #[serde(borrow)]
    #[schema(value_type = Option<String>, pattern = r"^[0-9]+(\.[0-9]+)?$", example = "129.90")]
    value: Option<Cow<'a, str>>,
    /// ISO 4217 code; required with `value`, refused without it.
    #[serde(borrow)]
    #[schema(value_type = Option<String>, pattern = "^[A-Z]{3}$", example = "EUR")]
    currency: Option<Cow<'a, str>>,
}

/// What makes a conversion one: its advertiser and its id (shown as the id).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct ConversionKey(AdvertiserId, ConversionId);

impl std::fmt::Display for ConversionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.1.fmt(f)
    }
}

impl<'de> IntoEvent<'de> for ConversionWire<'de> {
    type Event = Conversion;
    type Identity = ConversionKey;
    const IDENTITY_FIELD: &'static str = "conversion_id";

    fn into_event(self, cx: &mut ItemContext<'_>) -> Option<Conversion> {
        let (item, context) = cx.parts();
        let conversion_id = match self.conversion_id {
            None => item.fail("conversion_id", "is required"),
            Some(text) => ConversionId::new(&text)
                .map_err(|message| {
                    item.fail::<()>("conversion_id", format!("{} {message}", echo(&text)))
                })
                .ok(),
        };
        let advertiser_id = item.uuid("advertiser_id", self.advertiser_id);
        let action = match self.action {
            None => item.fail("action", "is required"),
            Some(text) => Action::new(&text)
                .map_err(|message| item.fail::<()>("action", format!("{} {message}", echo(&text))))
                .ok(),
        };
        let timestamp = item.timestamp(self.timestamp, context);
        let mut optional_id = |field: &str, value: Option<Cow<'_, str>>| match value {
            None => Some(None),
            Some(text) => item.uuid(field, Some(text)).map(Some),
        };
        let click_id = optional_id("click_id", self.click_id);
        let impression_id = optional_id("impression_id", self.impression_id);
        let user_id = optional_id("user_id", self.user_id);
        let value = match (self.value, self.currency) {
            (None, None) => Some(None),
            (None, Some(_)) => item.fail("currency", "is given without a value"),
            (Some(_), None) => item.fail("currency", "is required with a value"),
            (Some(value), Some(code)) => match Currency::from_code(&code) {
                Err(error) => item.fail("currency", format!("{} {error}", echo(&code))),
                Ok(currency) => match Money::parse(&value, currency) {
                    Ok(money) => Some(Some(money)),
                    Err(error) => item.fail("value", format!("{} {error}", echo(&value))),
                },
            },
        };
        let (click_id, impression_id, user_id) = (click_id?, impression_id?, user_id?);
        if click_id.is_none() && impression_id.is_none() && user_id.is_none() {
            return item.fail(
                "click_id",
                "one of click_id, impression_id and user_id is required",
            );
        }
        Some(Conversion {
            advertiser_id: AdvertiserId::new(advertiser_id?),
            conversion_id: conversion_id?,
            action: action?,
            timestamp: timestamp?,
            click_id: click_id.map(ImpressionId::new),
            impression_id: impression_id.map(ImpressionId::new),
            user_id: user_id.map(UserId::new),
            value: value?,
        })
    }

    fn identity(event: &Conversion) -> ConversionKey {
        ConversionKey(event.advertiser_id, event.conversion_id.clone())
    }

    fn advertiser(event: &Conversion) -> AdvertiserId {
        event.advertiser_id
    }
}
