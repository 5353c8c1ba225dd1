//! A beacon's parameters, as `/track` receives them (query string, form or JSON body), turned
//! into a [`Beacon`]: `site`, `guid`, `timestamp` (epoch seconds), cache busters (`cb`, `_*`)
//! ignored, every other name a feature. Every problem is named, not just the first.

use crate::domain::beacon::{Beacon, BeaconRules, Features, Guid, SiteId};
use crate::domain::echo::{MAX_ECHO_CHARS, cut};
use crate::domain::time::{EventTime, EventTimeError};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

/// One problem with a beacon's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BeaconError {
    pub(crate) field: String,
    pub(crate) message: String,
}

impl BeaconError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A beacon from its parameters (docs/API.md, "Beacons"): `site`, `guid`, `timestamp`, cache
/// busters (`cb`, `_*`) ignored, every other name a feature. `site_fallback` is the host the request
/// came from (Origin, else Referer), used when no `site` is given; `now` is the receive time.
/// Every problem is reported, not just the first.
pub(crate) fn parse_beacon(
    params: Vec<(String, String)>,
    site_fallback: Option<&str>,
    now: DateTime<Utc>,
    rules: BeaconRules,
) -> Result<Beacon, Vec<BeaconError>> {
    let mut errors = Vec::new();
    let mut site = None;
    let mut guid = None;
    let mut timestamp = None;
    let mut features = BTreeMap::new();
    for (name, value) in params {
        let slot = match name.as_str() {
            "site" => &mut site,
            "guid" => &mut guid,
            "timestamp" => &mut timestamp,
            "cb" => continue,
            _ if name.starts_with('_') => continue,
            _ => {
                match features.entry(name) {
                    Entry::Occupied(entry) => errors.push(BeaconError::new(
                        entry.key().clone(),
                        "is given more than once",
                    )),
                    Entry::Vacant(entry) => {
                        entry.insert(value);
                    }
                }
                continue;
            }
        };
        if slot.is_some() {
            errors.push(BeaconError::new(name, "is given more than once"));
        } else {
            *slot = Some(value);
        }
    }
    let site = match site.as_deref().or(site_fallback) {
        None => Err(BeaconError::new(
            "site",
            "is required: give site, or send the beacon from a page (Origin or Referer header)",
        )),
        Some(text) => SiteId::parse(text).map_err(|message| BeaconError::new("site", message)),
    };
    let guid = match guid {
        None => Err(BeaconError::new("guid", "is required")),
        Some(text) => Guid::parse(&text).map_err(|message| BeaconError::new("guid", message)),
    };
    let timestamp = match timestamp {
        None => EventTime::new(now, now)
            .map_err(|error| BeaconError::new("timestamp", error.to_string())),
        Some(text) => parse_epoch_seconds(&text, now)
            .map_err(|message| BeaconError::new("timestamp", message)),
    };
    if features.len() > rules.max_features {
        errors.push(BeaconError::new(
            "features",
            format!(
                "are too many: {} given, at most {} allowed per beacon",
                features.len(),
                rules.max_features
            ),
        ));
    }
    // A name the client chose, repeated at most as long as any value is.
    let features = Features::new(features)
        .map_err(|(field, message)| BeaconError::new(cut(&field, MAX_ECHO_CHARS), message));
    match (site, guid, timestamp, features) {
        // Who sent it is the request's business, not the parameters' (see `track`).
        (Ok(site), Ok(guid), Ok(timestamp), Ok(features)) if errors.is_empty() => Ok(Beacon {
            site,
            guid,
            timestamp,
            features,
            user_agent: None,
            invalid: None,
        }),
        (site, guid, timestamp, features) => {
            errors.extend(site.err());
            errors.extend(guid.err());
            errors.extend(timestamp.err());
            errors.extend(features.err());
            Err(errors)
        }
    }
}

/// Epoch seconds with an optional decimal fraction, kept to the millisecond.
fn parse_epoch_seconds(text: &str, now: DateTime<Utc>) -> Result<EventTime, String> {
    const SHAPE: &str = "must be epoch seconds, e.g. 1522802128 or 1522802128.25";
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || whole.len() > 12 || !digits(whole) || !digits(fraction) {
        return Err(SHAPE.to_owned());
    }
    let seconds: i64 = whole.parse().map_err(|_| SHAPE.to_owned())?;
    let millis_digits: String = fraction.chars().chain("000".chars()).take(3).collect();
    let millis: i64 = millis_digits.parse().map_err(|_| SHAPE.to_owned())?;
    EventTime::from_epoch_millis(seconds * 1000 + millis, now).map_err(|error| match error {
        EventTimeError::OutOfRange => SHAPE.to_owned(),
        other => other.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        "2026-11-26T12:00:00Z".parse().expect("valid")
    }

    fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect()
    }

    #[test]
    fn the_example_from_the_field_parses() {
        let beacon = parse_beacon(
            params(&[
                ("guid", "962e0c3a-6c08-4160-9196-f0050faffe62"),
                ("timestamp", "1522802128"),
                ("feature1", "facebook.com"),
                ("feature2", "/index.html"),
                ("cb", "123"),
                ("_", "456"),
            ]),
            Some("www.example.com"),
            now(),
            BeaconRules::default(),
        )
        .expect("valid");
        assert_eq!(beacon.site.as_str(), "www.example.com");
        assert_eq!(beacon.timestamp.epoch_millis(), 1_522_802_128_000);
        assert_eq!(
            beacon.features.combination_key(),
            "feature1=facebook.com&feature2=%2Findex.html"
        );
    }

    #[test]
    fn every_problem_is_named() {
        let errors = parse_beacon(
            params(&[
                ("timestamp", "yesterday"),
                ("a", "1"),
                ("b", "2"),
                ("c", "3"),
                ("d", "4"),
                ("e", "5"),
                ("bad name!", "x"),
            ]),
            None,
            now(),
            BeaconRules::default(),
        )
        .expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(|error| error.field.as_str()).collect();
        for field in ["site", "guid", "timestamp", "features"] {
            assert!(fields.contains(&field), "{field} missing from {fields:?}");
        }
    }

    #[test]
    fn fractional_seconds_keep_milliseconds_and_bounds_apply() {
        let at = |text: &str| parse_epoch_seconds(text, now());
        assert_eq!(
            at("1522802128.2567").map(|t| t.epoch_millis()),
            Ok(1_522_802_128_256)
        );
        assert_eq!(
            at("1522802128.5").map(|t| t.epoch_millis()),
            Ok(1_522_802_128_500)
        );
        assert!(at("946684799").is_err(), "before 2000");
        assert!(at("1e9").is_err());
        assert!(at("-5").is_err());
        assert!(at("99999999999999999999").is_err());
        let ahead = (now().timestamp() + 11 * 60).to_string();
        assert!(at(&ahead).is_err());
    }
}
