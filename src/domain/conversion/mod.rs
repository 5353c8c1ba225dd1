//! Conversions (`POST /v1/conversions`): an advertiser's order, sign-up or lead, and the ad it
//! is attributed to. A conversion is (advertiser, `conversion_id`); the first stored copy is
//! the conversion, and its attribution is decided once, from the events stored up to
//! `--attribution-delay` after it arrived (docs/DESIGN.md, "Conversions").

pub mod attribution;
pub mod counts;
pub mod index;
pub mod look_back;
pub mod money;

use super::ids::{AdId, AdvertiserId, CampaignId, ImpressionId, UserId};
use super::time::{Day, EventTime};
use chrono::{DateTime, Utc};
use money::Money;
use std::fmt;

pub use attribution::{Attribution, AttributionKind};
pub use look_back::LookBack;

/// An order or lead id: 1–64 characters of `[A-Za-z0-9_.:-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConversionId(String);

impl ConversionId {
    pub fn new(text: &str) -> Result<Self, &'static str> {
        let allowed = |byte: u8| byte.is_ascii_alphanumeric() || b"_.:-".contains(&byte);
        if text.is_empty() || text.len() > 64 || !text.bytes().all(allowed) {
            return Err("must be 1-64 characters of A-Z, a-z, 0-9, '_', '.', ':' and '-'");
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ConversionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the conversion was: `purchase`, `signup`, …: 1–64 characters of `[a-z0-9_.-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Action(String);

impl Action {
    pub fn new(text: &str) -> Result<Self, &'static str> {
        let allowed =
            |byte: u8| byte.is_ascii_lowercase() || byte.is_ascii_digit() || b"_.-".contains(&byte);
        if text.is_empty() || text.len() > 64 || !text.bytes().all(allowed) {
            return Err("must be 1-64 characters of a-z, 0-9, '_', '.' and '-'");
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A conversion as its advertiser's back end posted it, valid by construction: it names an
/// impression, a user, or both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversion {
    pub advertiser_id: AdvertiserId,
    pub conversion_id: ConversionId,
    pub action: Action,
    pub timestamp: EventTime,
    pub click_id: Option<ImpressionId>,
    pub impression_id: Option<ImpressionId>,
    pub user_id: Option<UserId>,
    pub value: Option<Money>,
}

impl Conversion {
    /// The impression the conversion names (rule 1): `click_id` wins over `impression_id`.
    pub fn named_impression(&self) -> Option<ImpressionId> {
        self.click_id.or(self.impression_id)
    }

    pub fn day(&self) -> Day {
        self.timestamp.utc_day()
    }
}

/// One stored copy of a conversion: a re-sent one is another copy, and the earliest received
/// is the conversion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedConversion {
    pub conversion: Conversion,
    /// When this server stored it, to the millisecond.
    pub received: DateTime<Utc>,
    /// Tells copies received in the same millisecond apart, so the earliest is one copy.
    pub copy: uuid::Uuid,
}

impl ReceivedConversion {
    /// The order among copies: the first received is the conversion.
    pub(crate) fn order_key(&self) -> (DateTime<Utc>, uuid::Uuid) {
        (self.received, self.copy)
    }
}

/// A conversion whose attribution is decided (fixed from then on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecidedConversion {
    pub conversion: Conversion,
    /// When its first copy was received.
    pub received: DateTime<Utc>,
    pub attribution: Option<Attribution>,
}

impl DecidedConversion {
    pub fn campaign_id(&self) -> Option<CampaignId> {
        self.attribution.map(|attribution| attribution.campaign_id)
    }

    pub fn ad_id(&self) -> Option<AdId> {
        self.attribution.map(|attribution| attribution.ad_id)
    }
}

/// How many buckets an advertiser-day's decided conversions are spread over, by a hash of the
/// conversion id: a fixed count, so a day of a million conversions keeps partitions of about
/// 60,000 rows.
pub const CONVERSION_BUCKETS: u16 = 16;

/// The bucket of a conversion id among [`CONVERSION_BUCKETS`].
pub fn conversion_bucket(id: &ConversionId) -> u16 {
    (xxhash_rust::xxh3::xxh3_64(id.as_str().as_bytes()) % u64::from(CONVERSION_BUCKETS)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_actions_keep_to_their_alphabets() {
        assert!(ConversionId::new("order-2026.11:28_A").is_ok());
        assert!(ConversionId::new(&"x".repeat(64)).is_ok());
        for bad in ["", "a b", "ordér", "a/b", &"x".repeat(65)] {
            assert!(ConversionId::new(bad).is_err(), "{bad:?}");
        }
        assert!(Action::new("purchase").is_ok());
        assert!(Action::new("sign-up.v2_b").is_ok());
        for bad in ["", "Purchase", "buy now", "a:b", &"a".repeat(65)] {
            assert!(Action::new(bad).is_err(), "{bad:?}");
        }
    }
}
