//! Page-view beacons from script tags: a site, a visitor guid, a time and a few features, valid
//! by construction. A beacon is identified by all four (docs/API.md, "Beacons"): the same
//! beacon re-sent counts once. The parameters a beacon arrives as are read at the HTTP edge
//! (`http::beacon_params`).

use super::bucket::{BucketCount, BucketId};
use super::time::{Day, EventTime};
use std::collections::BTreeMap;
use std::fmt;

pub(crate) const MAX_SITE_CHARS: usize = 128;
pub(crate) const MAX_GUID_CHARS: usize = 128;
pub(crate) const MAX_FEATURE_NAME_CHARS: usize = 64;
pub(crate) const MAX_FEATURE_VALUE_BYTES: usize = 512;
/// Features per beacon unless configured otherwise.
pub(crate) const DEFAULT_MAX_FEATURES: usize = 4;

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

/// The first character of what a GPC beacon's guid is stored as ([`Guid::without_visitor`]).
const NO_VISITOR: char = '\u{1}';

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
    pub(crate) fn from_stored(text: String) -> Self {
        Self(text)
    }

    /// What a beacon sent under Global Privacy Control is stored under instead of its guid:
    /// `token` (a keyed hash of the visitor under its day's key, or random), behind a control
    /// character that no guid a page sends may hold, so that it is never taken for a visitor.
    pub(crate) fn without_visitor(token: &str) -> Self {
        Self(format!("{NO_VISITOR}{token}"))
    }

    /// Whether this guid names a visitor (it is not what a GPC beacon was stored under).
    pub(crate) fn is_visitor(&self) -> bool {
        !self.0.starts_with(NO_VISITOR)
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether `name` may name a feature: 1–64 characters of `[A-Za-z0-9_.-]`.
pub(crate) fn is_feature_name(name: &str) -> bool {
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

    pub(crate) fn entries(&self) -> &BTreeMap<String, String> {
        &self.0
    }

    /// Whether every feature of `filter` is one of these, with the same value.
    pub(crate) fn matches(&self, filter: &Features) -> bool {
        filter
            .0
            .iter()
            .all(|(name, value)| self.0.get(name) == Some(value))
    }

    /// The canonical text of this set of features: the key its sketches are stored under, and
    /// how a stored beacon keeps them. Names sorted, then urlencoded, so equal sets always give
    /// equal text and the text decodes back without ambiguity.
    pub(crate) fn combination_key(&self) -> String {
        serde_urlencoded::to_string(&self.0).unwrap_or_default()
    }

    /// Features back from their canonical text, as stored.
    pub(crate) fn from_combination_key(text: &str) -> Option<Self> {
        serde_urlencoded::from_str::<BTreeMap<String, String>>(text)
            .ok()
            .map(Self)
    }

    /// Each feature as its urlencoded `name=value`, in name order: the parts every
    /// [`combination_key`](Self::combination_key) of a subset is joined from (with `&`).
    pub(crate) fn encoded_pairs(&self) -> Vec<String> {
        self.0
            .iter()
            .map(|pair| serde_urlencoded::to_string([pair]).unwrap_or_default())
            .collect()
    }

    /// The [`combination_key`](Self::combination_key) of every subset of these features (2^n
    /// of them, the empty set included): the combinations whose unique visitors one beacon
    /// counts towards.
    pub(crate) fn subset_keys(&self) -> Vec<String> {
        let mut keys = self.each_subset_key();
        let mut all = Vec::with_capacity(1 << self.0.len());
        while let Some(key) = keys.next_key() {
            all.push(key.to_owned());
        }
        all
    }

    /// The same keys as [`subset_keys`](Self::subset_keys), one at a time in one reused
    /// buffer: each pair is encoded once and the subsets joined from them, since this runs for
    /// every beacon.
    pub(crate) fn each_subset_key(&self) -> SubsetKeys {
        let pairs = self.encoded_pairs();
        let key = String::with_capacity(pairs.iter().map(|pair| pair.len() + 1).sum());
        SubsetKeys {
            pairs,
            key,
            next_mask: 0,
        }
    }
}

/// The combination keys of every subset of one beacon's features, built one at a time
/// ([`Features::each_subset_key`]).
pub(crate) struct SubsetKeys {
    pairs: Vec<String>,
    key: String,
    next_mask: u32,
}

impl SubsetKeys {
    /// The next subset's key, or `None` after the last.
    pub(crate) fn next_key(&mut self) -> Option<&str> {
        let mask = self.next_mask;
        if mask >= 1 << self.pairs.len() {
            return None;
        }
        self.next_mask += 1;
        self.key.clear();
        for (bit, pair) in self.pairs.iter().enumerate() {
            if mask & (1 << bit) != 0 {
                if !self.key.is_empty() {
                    self.key.push('&');
                }
                self.key.push_str(pair);
            }
        }
        Some(&self.key)
    }
}

/// One page view.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Beacon {
    pub site: SiteId,
    pub guid: Guid,
    pub timestamp: EventTime,
    pub features: Features,
    /// The browser's user agent.
    pub user_agent: Option<super::traffic::UserAgent>,
    /// Why this beacon is invalid traffic; `None`: valid.
    pub invalid: Option<super::traffic::InvalidReason>,
}

/// The partition a beacon is stored in: site, UTC day and bucket (from the guid).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VisitPartition {
    pub(crate) site: SiteId,
    pub(crate) day: Day,
    pub(crate) bucket: BucketId,
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

/// What a beacon's parameters are checked against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BeaconRules {
    pub(crate) max_features: usize,
}

impl Default for BeaconRules {
    fn default() -> Self {
        Self {
            max_features: DEFAULT_MAX_FEATURES,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
