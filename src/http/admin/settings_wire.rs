//! Campaign and site settings as clients send and read them. A `PUT` merges: fields absent
//! from its body keep their value.

use crate::domain::access::{OriginPattern, SiteProfile};
use crate::domain::bucket::BucketCount;
use crate::domain::conversion::LookBack;
use crate::http::edge::error::ApiError;
use crate::http::edge::openapi::texts::{OriginText, TimeZone, is_origin_text};
use crate::settings::{CurrentSettings, SettingsChange};
use chrono::{DateTime, SecondsFormat, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// Keeps "present but null" apart from "absent" (`None`): `"daily_cap": null` removes a cap.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// A campaign settings change (`PUT`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CampaignSettingsWire {
    /// Partitions per day the events are spread over, 1 to 256; the same count as now
    /// schedules nothing.
    #[schema(value_type = Option<u16>, minimum = 1, maximum = 256)]
    buckets: Option<Value>,
    /// When a new bucket count takes effect, RFC 3339; default and earliest: now plus the
    /// settings cache lifetime plus 10 minutes.
    #[schema(value_type = Option<String>, format = DateTime)]
    effective_from: Option<String>,
    /// Billable impressions per day, or null for none; takes effect at once.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u64>, maximum = 9223372036854775807_u64)]
    daily_cap: Option<Value>,
    /// Billable impressions over the campaign's life, or null for none; takes effect at once.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u64>, maximum = 9223372036854775807_u64)]
    total_cap: Option<Value>,
    /// IANA zone of the campaign's day for `daily_cap` and pacing (default `UTC`); takes
    /// effect at once.
    #[schema(value_type = Option<TimeZone>, inline)]
    tz: Option<String>,
    /// Post-click look-back of conversions, `"0s"` to `"90d"` (default `"30d"`): a duration
    /// of a whole number and a unit, d, h, m or s; takes effect at once.
    #[schema(pattern = "^[0-9]{1,7}[dhms]$", example = "30d")]
    click_window: Option<String>,
    /// Post-view look-back of conversions, `"0s"` (off) to `"30d"` (default `"1d"`); takes
    /// effect at once.
    #[schema(pattern = "^[0-9]{1,7}[dhms]$", example = "1d")]
    view_window: Option<String>,
}

/// A site settings change (`PUT`): also registers the site for beacons.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SiteSettingsWire {
    #[schema(value_type = Option<u16>, minimum = 1, maximum = 256)]
    buckets: Option<Value>,
    #[schema(value_type = Option<String>, format = DateTime)]
    effective_from: Option<String>,
    /// Origins whose pages may send the site's beacons (`https://shop.example`,
    /// `https://*.example.com`); empty: any. At most 100; each an http(s) scheme, an optional
    /// `*.`, a host name (its last label starting with a letter) or an IPv4 address, and an
    /// optional port.
    #[schema(max_items = 100, inline, value_type = Option<Vec<OriginText>>)]
    allowed_origins: Option<Vec<String>>,
    /// Whether a beacon must come from a page (Origin or Referer): refuses server-side senders.
    require_origin: Option<bool>,
    /// Whether a beacon sent with Global Privacy Control (`Sec-GPC: 1`) counts as a visit
    /// without a visitor: in `visits`, not in `unique_visitors`, its guid kept only as a hash
    /// under a key of its day (default `false`).
    respect_gpc: Option<bool>,
}

/// The most origins one site may list.
const MAX_ALLOWED_ORIGINS: usize = 100;

/// A settings body: a JSON object, `{}` at the least. No body is refused rather than read as
/// `{}`: a client that lost its body on the way must not schedule a default change. Serde would
/// also read a struct from an array of its fields in order, which no client means.
fn parse_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ApiError> {
    match body.trim_ascii_start().first() {
        None => {
            return Err(ApiError::invalid(
                "body",
                "is required: a JSON object of settings (`{}` changes nothing)",
            ));
        }
        Some(b'{') => {}
        Some(_) => {
            return Err(ApiError::invalid(
                "body",
                "must be a JSON object of settings",
            ));
        }
    }
    serde_json::from_slice(body).map_err(|error| {
        ApiError::invalid("body", format!("is not a JSON object of settings: {error}"))
    })
}

fn parse_effective_from(text: Option<String>) -> Result<Option<DateTime<Utc>>, ApiError> {
    text.map(|text| {
        DateTime::parse_from_rfc3339(&text)
            .map(|instant| instant.with_timezone(&Utc))
            .map_err(|_| ApiError::invalid("effective_from", "must be an RFC 3339 date-time"))
    })
    .transpose()
}

/// A whole number as JSON may write it: `138` or `138.0` (JSON Schema's `integer` takes both).
fn whole(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|number| number.fract() == 0.0 && (0.0..9.0e15).contains(number))
            .map(|number| number as u64)
    })
}

fn parse_buckets(value: Option<Value>) -> Result<Option<BucketCount>, ApiError> {
    value
        .map(|value| {
            whole(&value)
                .and_then(|count| u16::try_from(count).ok())
                .and_then(|count| BucketCount::new(count).ok())
                .ok_or_else(|| ApiError::invalid("buckets", "must be a whole number from 1 to 256"))
        })
        .transpose()
}

/// A look-back as sent: absent (keep) or a duration up to `max`.
fn parse_look_back(
    field: &str,
    text: Option<String>,
    max: LookBack,
) -> Result<Option<LookBack>, ApiError> {
    text.map(|text| {
        LookBack::parse(&text, max).map_err(|message| ApiError::invalid(field, message))
    })
    .transpose()
}

/// A cap as sent: absent (keep), null (remove) or a whole number.
fn parse_cap(field: &str, value: Option<Value>) -> Result<Option<Option<u64>>, ApiError> {
    match value {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(value) => whole(&value)
            .filter(|cap| i64::try_from(*cap).is_ok())
            .map(|cap| Some(Some(cap)))
            .ok_or_else(|| ApiError::invalid(field, "must be null or a whole number below 2^63")),
    }
}

impl CampaignSettingsWire {
    pub(crate) fn parse(body: &[u8]) -> Result<Self, ApiError> {
        parse_json(body)
    }

    /// The change asked for; `effective_from` is checked against the clock when it is made.
    pub(crate) fn into_change(self) -> Result<SettingsChange, ApiError> {
        let effective_from = parse_effective_from(self.effective_from)?;
        let tz = self
            .tz
            .map(|name| {
                name.parse::<Tz>().map_err(|_| {
                    ApiError::invalid("tz", "must be an IANA time zone name such as Europe/Berlin")
                })
            })
            .transpose()?;
        Ok(SettingsChange {
            buckets: parse_buckets(self.buckets)?,
            effective_from,
            daily_cap: parse_cap("daily_cap", self.daily_cap)?,
            total_cap: parse_cap("total_cap", self.total_cap)?,
            tz,
            click_window: parse_look_back("click_window", self.click_window, LookBack::CLICK_MAX)?,
            view_window: parse_look_back("view_window", self.view_window, LookBack::VIEW_MAX)?,
        })
    }
}

/// What a site `PUT` asks for: a settings change and the site's registration.
pub(crate) struct SiteChange {
    pub(crate) settings: SettingsChange,
    pub(crate) allowed_origins: Option<Vec<OriginPattern>>,
    pub(crate) require_origin: Option<bool>,
    pub(crate) respect_gpc: Option<bool>,
}

impl SiteSettingsWire {
    pub(crate) fn parse(body: &[u8]) -> Result<Self, ApiError> {
        parse_json(body)
    }

    pub(crate) fn into_change(self) -> Result<SiteChange, ApiError> {
        let allowed_origins = self
            .allowed_origins
            .map(|origins| {
                if origins.len() > MAX_ALLOWED_ORIGINS {
                    return Err(ApiError::invalid(
                        "allowed_origins",
                        format!("lists more than {MAX_ALLOWED_ORIGINS} origins"),
                    ));
                }
                origins
                    .iter()
                    .map(|origin| {
                        if !is_origin_text(origin) {
                            return Err(ApiError::invalid(
                                "allowed_origins",
                                "must be an origin like https://shop.example or https://*.example.com",
                            ));
                        }
                        OriginPattern::parse(origin)
                            .map_err(|message| ApiError::invalid("allowed_origins", message))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        Ok(SiteChange {
            settings: SettingsChange {
                buckets: parse_buckets(self.buckets)?,
                effective_from: parse_effective_from(self.effective_from)?,
                ..SettingsChange::default()
            },
            allowed_origins,
            require_origin: self.require_origin,
            respect_gpc: self.respect_gpc,
        })
    }
}

fn rfc3339(instant: DateTime<Utc>) -> String {
    instant.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A campaign's settings as stored.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CampaignSettingsAnswer {
    /// The newest bucket count (possibly scheduled for later).
    pub(crate) buckets: u16,
    /// When `buckets` takes effect, RFC 3339, UTC, milliseconds.
    pub(crate) effective_from: String,
    pub(crate) daily_cap: Option<u64>,
    pub(crate) total_cap: Option<u64>,
    /// IANA zone of the campaign's day.
    pub(crate) tz: String,
    /// Post-click look-back, in the largest whole unit (`"30d"`).
    pub(crate) click_window: String,
    /// Post-view look-back, in the largest whole unit (`"1d"`; `"0s"`: off).
    pub(crate) view_window: String,
    /// The bucket count in force now.
    pub(crate) in_force: u16,
}

impl From<&CurrentSettings> for CampaignSettingsAnswer {
    fn from(current: &CurrentSettings) -> Self {
        Self {
            buckets: current.latest.buckets.get(),
            effective_from: rfc3339(current.latest.effective_from),
            daily_cap: current.latest.daily_cap,
            total_cap: current.latest.total_cap,
            tz: current.latest.tz.name().to_owned(),
            click_window: current.latest.look_backs.click.to_string(),
            view_window: current.latest.look_backs.view.to_string(),
            in_force: current.in_force.get(),
        }
    }
}

/// A site's settings and registration.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SiteSettingsAnswer {
    pub(crate) buckets: u16,
    pub(crate) effective_from: String,
    pub(crate) in_force: u16,
    /// Whether the site takes beacons while keys are on (a `PUT` registers it).
    pub(crate) registered: bool,
    pub(crate) allowed_origins: Vec<String>,
    pub(crate) require_origin: bool,
    /// Whether beacons sent with Global Privacy Control count without a visitor.
    pub(crate) respect_gpc: bool,
}

impl SiteSettingsAnswer {
    pub(crate) fn new(current: &CurrentSettings, profile: Option<&SiteProfile>) -> Self {
        Self {
            buckets: current.latest.buckets.get(),
            effective_from: rfc3339(current.latest.effective_from),
            in_force: current.in_force.get(),
            registered: profile.is_some(),
            allowed_origins: profile
                .map(|profile| {
                    profile
                        .allowed_origins
                        .iter()
                        .map(ToString::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            require_origin: profile.is_some_and(|profile| profile.require_origin),
            respect_gpc: profile.is_some_and(|profile| profile.respect_gpc),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_whole_number_may_be_written_with_a_zero_fraction() {
        assert_eq!(whole(&json!(138)), Some(138));
        assert_eq!(whole(&json!(138.0)), Some(138));
        assert_eq!(whole(&json!(138.5)), None);
        assert_eq!(whole(&json!(-1)), None);
        assert_eq!(whole(&json!("138")), None);
        let buckets = parse_buckets(Some(json!(16.0))).expect("a whole number");
        assert_eq!(buckets.map(|count| count.get()), Some(16));
    }
}
