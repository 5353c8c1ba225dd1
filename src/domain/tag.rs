//! Signed ad tags (docs/API.md, "Ad tags"): an advertiser's ad server signs the impression
//! pixel and click redirect URLs it writes into ads with a tag secret, so that nobody else can
//! make the server count an impression or a click for that advertiser. The signature is
//! `base64url_nopad(HMAC-SHA256(secret, Q))`, `Q` the exact bytes of the query string before
//! `&s=`; it is compared in constant time.

use super::ids::AdvertiserId;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;
use uuid::Uuid;

/// A tag secret's id: the `k` parameter of a signed URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TagSecretId(Uuid);

impl TagSecretId {
    pub(crate) const fn new(id: Uuid) -> Self {
        Self(id)
    }

    pub(crate) const fn as_uuid(&self) -> Uuid {
        self.0
    }

    pub(crate) fn parse(text: &str) -> Option<Self> {
        super::ids::parse_uuid(text).ok().map(Self)
    }
}

impl fmt::Display for TagSecretId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// One advertiser's signing key.
#[derive(Clone, PartialEq, Eq)]
pub struct TagSecret {
    pub(crate) id: TagSecretId,
    pub(crate) advertiser: AdvertiserId,
    pub(crate) secret: [u8; 32],
    pub(crate) created_at: DateTime<Utc>,
}

impl fmt::Debug for TagSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The secret never goes to a log.
        f.debug_struct("TagSecret")
            .field("id", &self.id)
            .field("advertiser", &self.advertiser)
            .field("created_at", &self.created_at)
            .finish_non_exhaustive()
    }
}

type HmacSha256 = Hmac<Sha256>;

/// How early a tag may arrive before its `t`: the ad server's clock may run ahead.
pub(crate) const EARLY_TOLERANCE: chrono::TimeDelta = chrono::TimeDelta::minutes(10);

/// Why a tag's time `t` does not admit it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TagTimeRefusal {
    #[error("the link has expired")]
    Expired,
    #[error("the link's time t is more than 10 minutes in the future")]
    Early,
}

/// Whether a tag issued at `issued` may count at `now`, within `ttl` after it (or up to
/// [`EARLY_TOLERANCE`] before it).
pub(crate) fn admits_at(
    issued: DateTime<Utc>,
    now: DateTime<Utc>,
    ttl: std::time::Duration,
) -> Result<(), TagTimeRefusal> {
    if issued > now + EARLY_TOLERANCE {
        return Err(TagTimeRefusal::Early);
    }
    let ttl = chrono::TimeDelta::from_std(ttl).unwrap_or(chrono::TimeDelta::MAX);
    if now.signed_duration_since(issued) > ttl {
        return Err(TagTimeRefusal::Expired);
    }
    Ok(())
}

impl TagSecret {
    /// A new random secret for `advertiser`.
    pub(crate) fn generate(advertiser: AdvertiserId, now: DateTime<Utc>) -> Self {
        Self {
            id: TagSecretId(Uuid::new_v4()),
            advertiser,
            secret: rand::random(),
            created_at: now,
        }
    }

    /// The secret as the ad server is given it: base64url without padding.
    pub(crate) fn encoded(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.secret)
    }

    /// The signature of `signed` (what a URL's `s` must be).
    #[cfg(test)]
    pub(crate) fn sign(&self, signed: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(signed).finalize().into_bytes())
    }

    /// Whether `signature` (base64url, no padding) is this secret's signature of `signed`,
    /// compared in constant time.
    pub(crate) fn verifies(&self, signed: &[u8], signature: &str) -> bool {
        let Ok(given) = URL_SAFE_NO_PAD.decode(signature) else {
            return false;
        };
        self.mac(signed).verify_slice(&given).is_ok()
    }

    fn mac(&self, signed: &[u8]) -> HmacSha256 {
        // HMAC takes a key of any length; 32 bytes is always accepted.
        let mut mac = match HmacSha256::new_from_slice(&self.secret) {
            Ok(mac) => mac,
            Err(_) => unreachable!("HMAC accepts keys of any length"),
        };
        mac.update(signed);
        mac
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> TagSecret {
        TagSecret {
            id: TagSecretId(Uuid::from_u128(1)),
            advertiser: AdvertiserId::new(Uuid::from_u128(2)),
            secret: [7; 32],
            created_at: Utc::now(),
        }
    }

    #[test]
    fn a_signature_verifies_its_exact_bytes_only() {
        let secret = secret();
        let query = b"a=1&c=2&ad=3&imp=4&u=5&t=1764158400000&k=6";
        let signature = secret.sign(query);
        assert!(!signature.contains('='), "no padding: {signature}");
        assert!(secret.verifies(query, &signature));
        assert!(!secret.verifies(b"a=1&c=2&ad=3&imp=4&u=5&t=1764158400001&k=6", &signature));
        assert!(!secret.verifies(query, "not base64!"));
        assert!(!secret.verifies(query, ""));
        let other = TagSecret {
            secret: [8; 32],
            ..secret.clone()
        };
        assert!(!other.verifies(query, &signature));
    }

    #[test]
    fn a_tag_counts_from_ten_minutes_before_its_time_to_its_ttl_after() {
        let issued = Utc::now();
        let hour = std::time::Duration::from_secs(3600);
        let minutes = chrono::TimeDelta::minutes;
        assert_eq!(admits_at(issued, issued, hour), Ok(()));
        assert_eq!(admits_at(issued, issued + minutes(60), hour), Ok(()));
        assert_eq!(
            admits_at(issued, issued + minutes(61), hour),
            Err(TagTimeRefusal::Expired)
        );
        assert_eq!(admits_at(issued, issued - minutes(9), hour), Ok(()));
        assert_eq!(
            admits_at(issued, issued - minutes(11), hour),
            Err(TagTimeRefusal::Early)
        );
    }

    #[test]
    fn the_signature_is_hmac_sha256_as_openssl_computes_it() {
        // printf 'a=1' | openssl dgst -sha256 -mac HMAC -macopt hexkey:0707…07 (32 bytes) -binary
        //   | base64 | tr '+/' '-_' | tr -d '='
        let secret = secret();
        assert_eq!(
            secret.sign(b"a=1"),
            "7QzUYhu4CMhDD96z2Ui4gr9AVEHByOaKh9W0TE1guyE"
        );
        assert_eq!(secret.encoded().len(), 43);
    }
}
