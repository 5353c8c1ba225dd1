//! Query-string parameters, parsed strictly: a parameter the endpoint does not know, a repeated
//! one or a malformed value is a 400 naming it.

use crate::domain::beacon::{Features, SiteId};
use crate::domain::echo::{MAX_ECHO_CHARS, cut, echo};
use crate::domain::ids::{CampaignKey, IdError};
use crate::http::edge::error::ApiError;
use crate::http::edge::openapi::texts::{LocalDay, TimeZone};
use crate::query::range::{QueryRange, RangeError};
use chrono::{Datelike, NaiveDate};
use chrono_tz::Tz;
use std::collections::{BTreeMap, HashMap};
use std::str::FromStr;
use utoipa::IntoParams;

pub(crate) struct Params(HashMap<String, String>);

/// `from`, `to` and `tz`, as every query over a range of days reads them ([`Params::range`]).
/// A documentation type: the handlers read their raw query strictly with [`Params`].
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct RangeQuery {
    /// First local day, `YYYY-MM-DD`, from 2000-01-01 to 9998-12-31.
    #[param(value_type = LocalDay, inline)]
    from: String,
    /// Last local day (inclusive): not before `from`, at most 366 days after it.
    #[param(value_type = LocalDay, inline)]
    to: String,
    /// IANA time zone, default `UTC`.
    #[param(value_type = Option<TimeZone>, inline)]
    tz: Option<String>,
}

impl Params {
    /// Parses `raw` and refuses any name outside `known`.
    pub(crate) fn parse(raw: Option<&str>, known: &[&str]) -> Result<Self, ApiError> {
        Self::from_pairs(pairs(raw)?, known)
    }

    /// Like [`parse`](Self::parse), and also takes `feature.<name>=<value>` parameters: the
    /// feature filter of a unique-visitors query.
    pub(crate) fn parse_with_features(
        raw: Option<&str>,
        known: &[&str],
    ) -> Result<(Self, Features), ApiError> {
        let mut filter = BTreeMap::new();
        let mut rest = Vec::new();
        for (name, value) in pairs(raw)? {
            match name.strip_prefix("feature.") {
                Some(feature) => {
                    if filter.insert(feature.to_owned(), value).is_some() {
                        return Err(ApiError::invalid(&name, "is given more than once"));
                    }
                }
                None => rest.push((name, value)),
            }
        }
        let filter = Features::new(filter).map_err(|(feature, message)| {
            ApiError::invalid(
                &format!("feature.{}", cut(&feature, MAX_ECHO_CHARS)),
                message,
            )
        })?;
        Ok((Self::from_pairs(rest, known)?, filter))
    }

    fn from_pairs(pairs: Vec<(String, String)>, known: &[&str]) -> Result<Self, ApiError> {
        let mut params = HashMap::with_capacity(pairs.len());
        for (name, value) in pairs {
            if !known.contains(&name.as_str()) {
                return Err(ApiError::invalid(
                    &cut(&name, MAX_ECHO_CHARS),
                    format!(
                        "is not a parameter of this endpoint (expected: {})",
                        known.join(", ")
                    ),
                ));
            }
            if params.insert(name.clone(), value).is_some() {
                return Err(ApiError::invalid(&name, "is given more than once"));
            }
        }
        Ok(Self(params))
    }

    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    pub(crate) fn required(&self, name: &str) -> Result<&str, ApiError> {
        self.get(name)
            .ok_or_else(|| ApiError::invalid(name, "is required"))
    }

    /// `from`, `to` (inclusive `YYYY-MM-DD`) and `tz` (IANA, default UTC).
    /// `limit`: `default` when absent, else a whole number from 1 to `max`.
    pub(crate) fn limit(&self, default: usize, max: usize) -> Result<usize, ApiError> {
        match self.get("limit") {
            None => Ok(default),
            Some(text) => text
                .parse::<usize>()
                .ok()
                .filter(|limit| (1..=max).contains(limit))
                .ok_or_else(|| {
                    ApiError::invalid("limit", format!("must be a whole number from 1 to {max}"))
                }),
        }
    }

    pub(crate) fn range(&self) -> Result<QueryRange, ApiError> {
        let date = |name: &str| {
            let text = self.required(name)?;
            // Exactly YYYY-MM-DD within the years events can have: chrono alone would also take
            // signed six-digit years, whose arithmetic overflows, and padding spaces.
            let shaped = text.len() == 10
                && text.bytes().enumerate().all(|(at, byte)| match at {
                    4 | 7 => byte == b'-',
                    _ => byte.is_ascii_digit(),
                });
            NaiveDate::parse_from_str(text, "%Y-%m-%d")
                .ok()
                .filter(|date| shaped && (2000..=9998).contains(&date.year()))
                .ok_or_else(|| {
                    ApiError::invalid(
                        name,
                        "must be a date YYYY-MM-DD from 2000-01-01 to 9998-12-31",
                    )
                })
        };
        let (from, to) = (date("from")?, date("to")?);
        let tz = match self.get("tz") {
            None => Tz::UTC,
            Some(name) => name.parse::<Tz>().map_err(|_| {
                ApiError::invalid("tz", format!("{} is not an IANA time zone", echo(name)))
            })?,
        };
        QueryRange::new(from, to, tz).map_err(|error| match error {
            RangeError::Reversed => ApiError::invalid("from", "must not be after to"),
            RangeError::TooLong(_) => ApiError::invalid("to", error),
        })
    }
}

fn pairs(raw: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    serde_urlencoded::from_str(raw.unwrap_or_default())
        .map_err(|error| ApiError::invalid("query string", format!("is malformed: {error}")))
}

/// The `{site}` of a path.
pub(crate) fn site_id(site: &str) -> Result<SiteId, ApiError> {
    SiteId::parse(site).map_err(|message| ApiError::invalid("site", message))
}

/// An id of a path or a body: the hyphenated or the 32-hex-digit form, never the nil UUID.
pub(crate) fn id<T: FromStr<Err = IdError>>(field: &str, text: &str) -> Result<T, ApiError> {
    text.parse()
        .map_err(|error| ApiError::invalid(field, error))
}

/// The `{advertiser_id}/{campaign_id}` of a path.
pub(crate) fn campaign_key(
    advertiser_id: &str,
    campaign_id: &str,
) -> Result<CampaignKey, ApiError> {
    Ok(CampaignKey {
        advertiser_id: id("advertiser_id", advertiser_id)?,
        campaign_id: id("campaign_id", campaign_id)?,
    })
}
