//! Page-view beacons from script tags: a site, a visitor guid, a time and a few features, valid
//! by construction. A beacon is identified by all four (API.md): the same beacon re-sent
//! counts once.

use super::bucket::{BucketCount, BucketId};
use super::time::{Day, EventTime, EventTimeError};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::fmt;

pub const MAX_SITE_CHARS: usize = 128;
pub const MAX_GUID_CHARS: usize = 128;
pub const MAX_FEATURE_NAME_CHARS: usize = 64;
pub const MAX_FEATURE_VALUE_BYTES: usize = 512;
/// Features per beacon unless configured otherwise.
pub const DEFAULT_MAX_FEATURES: usize = 4;
/// The most a deployment may allow: every subset of a beacon's features gets a sketch, so
/// this bounds the sketches one beacon touches (2^8 = 256).
pub const FEATURES_CEILING: usize = 8;

/// A site: 1–128 characters of `[A-Za-z0-9._:-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteId(String);

impl SiteId {
    pub fn parse(text: &str) -> Result<Self, String> {
        let valid_chars = text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
        if text.is_empty() || text.len() > MAX_SITE_CHARS || !valid_chars {
            return Err(format!(
                "must be 1 to {MAX_SITE_CHARS} characters of A-Z a-z 0-9 . _ : -"
            ));
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SiteId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A visitor id: 1–128 characters, no control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Guid(String);

impl Guid {
    pub fn parse(text: &str) -> Result<Self, String> {
        let chars = text.chars().count();
        if chars == 0 || chars > MAX_GUID_CHARS || text.chars().any(char::is_control) {
            return Err(format!(
                "must be 1 to {MAX_GUID_CHARS} characters without control characters"
            ));
        }
        Ok(Self(text.to_owned()))
    }

    /// A guid read back from a store, which only holds valid ones.
    pub fn from_stored(text: String) -> Self {
        Self(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether `name` may name a feature: 1–64 characters of `[A-Za-z0-9_.-]`.
pub fn is_feature_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_FEATURE_NAME_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Feature names and values, sorted by name: a beacon's features, or a query's filter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Features(BTreeMap<String, String>);

impl Features {
    /// Checks names and values (not the count, which is the caller's rule).
    pub fn new(entries: BTreeMap<String, String>) -> Result<Self, (String, String)> {
        for (name, value) in &entries {
            if !is_feature_name(name) {
                return Err((
                    name.clone(),
                    format!(
                        "is not a feature name: 1 to {MAX_FEATURE_NAME_CHARS} characters of A-Z a-z 0-9 _ . -"
                    ),
                ));
            }
            if value.len() > MAX_FEATURE_VALUE_BYTES {
                return Err((
                    name.clone(),
                    format!(
                        "is {} bytes; a feature value may have at most {MAX_FEATURE_VALUE_BYTES}",
                        value.len()
                    ),
                ));
            }
        }
        Ok(Self(entries))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn entries(&self) -> &BTreeMap<String, String> {
        &self.0
    }

    /// Whether every feature of `filter` is one of these, with the same value.
    pub fn matches(&self, filter: &Features) -> bool {
        filter
            .0
            .iter()
            .all(|(name, value)| self.0.get(name) == Some(value))
    }

    /// The canonical text of this set of features: the key its sketches are stored under, and
    /// how a stored beacon keeps them. Names sorted, then urlencoded, so equal sets always give
    /// equal text and the text decodes back without ambiguity.
    pub fn combination_key(&self) -> String {
        serde_urlencoded::to_string(&self.0).unwrap_or_default()
    }

    /// Features back from their canonical text, as stored.
    pub fn from_combination_key(text: &str) -> Option<Self> {
        serde_urlencoded::from_str::<BTreeMap<String, String>>(text)
            .ok()
            .map(Self)
    }

    /// Each feature as its urlencoded `name=value`, in name order: the parts every
    /// [`combination_key`](Self::combination_key) of a subset is joined from (with `&`).
    pub fn encoded_pairs(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|pair| serde_urlencoded::to_string([pair]).unwrap_or_default())
            .collect()
    }

    /// The [`combination_key`](Self::combination_key) of every subset of these features (2^n
    /// of them, the empty set included): the combinations whose unique visitors one beacon
    /// counts towards. Each pair is encoded once and the subsets joined from them, since this
    /// runs for every beacon.
    pub fn subset_keys(&self) -> Vec<String> {
        let pairs = self.encoded_pairs();
        (0u32..(1 << pairs.len()))
            .map(|mask| {
                let mut key = String::new();
                for (bit, pair) in pairs.iter().enumerate() {
                    if mask & (1 << bit) != 0 {
                        if !key.is_empty() {
                            key.push('&');
                        }
                        key.push_str(pair);
                    }
                }
                key
            })
            .collect()
    }
}

/// One page view.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Beacon {
    pub site: SiteId,
    pub guid: Guid,
    pub timestamp: EventTime,
    pub features: Features,
}

/// The partition a beacon is stored in: site, UTC day and bucket (from the guid).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VisitPartition {
    pub site: SiteId,
    pub day: Day,
    pub bucket: BucketId,
}

impl Beacon {
    /// Where this beacon is stored when its site has `buckets` in force at its time: a visitor's
    /// beacons of one day share a bucket.
    pub fn partition(&self, buckets: BucketCount) -> VisitPartition {
        VisitPartition {
            site: self.site.clone(),
            day: self.timestamp.utc_day(),
            bucket: buckets.bucket_of_bytes(self.guid.as_str().as_bytes()),
        }
    }
}

/// One problem with a beacon's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeaconError {
    pub field: String,
    pub message: String,
}

impl BeaconError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// What a beacon's parameters are checked against.
#[derive(Debug, Clone, Copy)]
pub struct BeaconRules {
    pub max_features: usize,
}

impl Default for BeaconRules {
    fn default() -> Self {
        Self {
            max_features: DEFAULT_MAX_FEATURES,
        }
    }
}

/// A beacon from its parameters (API.md, `/track`): `site`, `guid`, `timestamp`, cache busters
/// (`cb`, `_*`) ignored, every other name a feature. `site_fallback` is the host the request
/// came from (Origin, else Referer), used when no `site` is given; `now` is the receive time.
/// Every problem is reported, not just the first.
pub fn parse_beacon(
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
    let features =
        Features::new(features).map_err(|(field, message)| BeaconError::new(field, message));
    match (site, guid, timestamp, features) {
        (Ok(site), Ok(guid), Ok(timestamp), Ok(features)) if errors.is_empty() => Ok(Beacon {
            site,
            guid,
            timestamp,
            features,
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

    #[test]
    fn a_beacon_counts_towards_every_subset_of_its_features() {
        let features = Features::new(
            [("a", "1"), ("b", "2"), ("c", "3")]
                .into_iter()
                .map(|(n, v)| (n.to_owned(), v.to_owned()))
                .collect(),
        )
        .expect("valid");
        let keys: std::collections::BTreeSet<String> = features.subset_keys().into_iter().collect();
        assert_eq!(keys.len(), 8);
        assert!(keys.contains("") && keys.contains("a=1&c=3") && keys.contains("a=1&b=2&c=3"));
        for key in &keys {
            let back = Features::from_combination_key(key).expect("decodes");
            assert!(features.matches(&back));
            assert_eq!(&back.combination_key(), key);
        }
    }
}
