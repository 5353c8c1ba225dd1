//! Who may do what: API keys (a scope and an owner each, the secret kept only as a hash) and
//! registered sites (which origins may send their beacons). Values here are valid by
//! construction; the per-process rings that hold them live in `crate::access`.

use super::beacon::SiteId;
use super::ids::AdvertiserId;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use std::fmt;
use subtle::ConstantTimeEq;
use uuid::Uuid;

/// A key's id: public, listed, used to revoke it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(Uuid);

impl KeyId {
    pub(crate) fn new(id: Uuid) -> Self {
        Self(id)
    }

    pub(crate) fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// What a key may do, and for whom.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Grant {
    /// Everything: keys, settings, every read and write.
    Admin,
    /// `POST /v1/impressions` and `/v1/clicks` for this advertiser's events, and its
    /// campaigns' delivery.
    Ingest(AdvertiserId),
    /// This advertiser's campaign reads.
    ReadAdvertiser(AdvertiserId),
    /// This site's reads.
    ReadSite(SiteId),
    /// `GET /metrics` only, for scrapers.
    Metrics,
}

impl Grant {
    /// The scope's name, as the API writes it.
    pub(crate) fn scope(&self) -> &'static str {
        match self {
            Self::Admin => "admin",
            Self::Ingest(_) => "ingest",
            Self::ReadAdvertiser(_) | Self::ReadSite(_) => "read",
            Self::Metrics => "metrics",
        }
    }

    /// The advertiser the key belongs to, if any.
    pub(crate) fn advertiser(&self) -> Option<AdvertiserId> {
        match self {
            Self::Ingest(advertiser) | Self::ReadAdvertiser(advertiser) => Some(*advertiser),
            _ => None,
        }
    }

    /// The site the key belongs to, if any.
    pub(crate) fn site(&self) -> Option<&SiteId> {
        match self {
            Self::ReadSite(site) => Some(site),
            _ => None,
        }
    }
}

/// The SHA-256 of a key's secret: all a store keeps of it. A fast hash is enough for secrets
/// of 256 random bits (nothing to brute-force); it is compared in constant time.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct SecretHash([u8; 32]);

impl SecretHash {
    pub(crate) fn of(secret: &str) -> Self {
        Self(Sha256::digest(secret.as_bytes()).into())
    }

    pub(crate) fn from_stored(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    pub(crate) fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Whether `secret` hashes to this, in time independent of where the bytes differ.
    pub(crate) fn verifies(&self, secret: &str) -> bool {
        Self::of(secret).0.ct_eq(&self.0).into()
    }
}

impl fmt::Debug for SecretHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretHash(..)")
    }
}

/// The prefix of every key this server issues: it tells a key from other tokens at a glance
/// (and secret scanners can find leaked ones).
pub(crate) const KEY_PREFIX: &str = "adk_";

/// A key as it is shown once, when created: `adk_<id>_<secret>`, the id in 32 hex digits and
/// 32 random bytes in base64url. The id lets a server find the key without comparing the
/// secret against every stored hash.
pub struct IssuedKey {
    pub(crate) id: KeyId,
    pub token: String,
}

impl IssuedKey {
    /// A new key with a random id and 256 random bits of secret.
    pub(crate) fn generate() -> Self {
        let id = KeyId(Uuid::new_v4());
        let secret: [u8; 32] = rand::random();
        let token = format!(
            "{KEY_PREFIX}{}_{}",
            id.0.simple(),
            URL_SAFE_NO_PAD.encode(secret)
        );
        Self { id, token }
    }

    pub(crate) fn hash(&self) -> SecretHash {
        SecretHash::of(&self.token)
    }
}

impl fmt::Debug for IssuedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedKey").field("id", &self.id).finish()
    }
}

/// The id named by a presented token of this server's form; `None` for any other token (it
/// may still be the operator's `ADEVENTS_ADMIN_KEY`).
pub(crate) fn key_id_of(token: &str) -> Option<KeyId> {
    let rest = token.strip_prefix(KEY_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    if id.len() != 32 || secret.len() != 43 {
        return None;
    }
    Uuid::try_parse(id).ok().map(KeyId)
}

/// An API key as stored and listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub(crate) id: KeyId,
    pub(crate) grant: Grant,
    /// The operator's label ("ad server eu-1"), at most 128 characters.
    pub(crate) name: Option<String>,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) hash: SecretHash,
}

/// The longest key name.
pub(crate) const MAX_KEY_NAME_CHARS: usize = 128;

/// Who may send a site's beacons: an exact origin (`https://shop.example`) or every subdomain
/// of one (`https://*.example.com`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OriginPattern {
    scheme: String,
    /// The host without the `*.` of a subdomain pattern.
    host: String,
    port: Option<u16>,
    subdomains: bool,
}

impl OriginPattern {
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        const SHAPE: &str = "must be an origin like https://shop.example or https://*.example.com";
        let (scheme, rest) = text.split_once("://").ok_or(SHAPE)?;
        if !matches!(scheme, "http" | "https") || rest.is_empty() || rest.contains('/') {
            return Err(SHAPE.into());
        }
        let (subdomains, rest) = match rest.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, rest),
        };
        let url = url::Url::parse(&format!("{scheme}://{rest}")).map_err(|_| SHAPE)?;
        let host = url.host_str().ok_or(SHAPE)?.to_ascii_lowercase();
        if host.contains('*') || url.path() != "/" || url.query().is_some() {
            return Err(SHAPE.into());
        }
        Ok(Self {
            scheme: scheme.to_owned(),
            host,
            port: url.port(),
            subdomains,
        })
    }

    /// Whether `origin` (scheme, host and port of a page) is allowed by this pattern.
    pub(crate) fn admits(&self, origin: &url::Origin) -> bool {
        let url::Origin::Tuple(scheme, host, port) = origin else {
            return false;
        };
        let default_port = if scheme == "https" { 443 } else { 80 };
        let host = host.to_string().to_ascii_lowercase();
        let host_matches = if self.subdomains {
            host.strip_suffix(self.host.as_str())
                .is_some_and(|prefix| prefix.ends_with('.') && prefix.len() > 1)
        } else {
            host == self.host
        };
        *scheme == self.scheme && host_matches && *port == self.port.unwrap_or(default_port)
    }
}

impl fmt::Display for OriginPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let wildcard = if self.subdomains { "*." } else { "" };
        write!(f, "{}://{wildcard}{}", self.scheme, self.host)?;
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        Ok(())
    }
}

/// A site registered for beacons, and which pages may send them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteProfile {
    pub site: SiteId,
    /// Empty: any origin.
    pub allowed_origins: Vec<OriginPattern>,
    /// Whether a beacon must name its page (Origin or Referer): refuses server-side senders.
    pub require_origin: bool,
    /// Whether a beacon sent with Global Privacy Control (`Sec-GPC: 1`) counts as a visit
    /// without a visitor (docs/API.md, "Privacy").
    pub respect_gpc: bool,
    pub created_at: DateTime<Utc>,
}

/// Why a registered site refuses a beacon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum OriginRefusal {
    #[error("comes from an origin the site does not allow")]
    NotAllowed,
    #[error("names no page (Origin or Referer), and the site requires one")]
    Missing,
}

impl SiteProfile {
    /// Whether a beacon from the page at `origin` (none: a server-side sender) may count.
    pub(crate) fn admits(&self, origin: Option<&url::Origin>) -> Result<(), OriginRefusal> {
        match origin {
            None if self.require_origin => Err(OriginRefusal::Missing),
            None => Ok(()),
            Some(_) if self.allowed_origins.is_empty() => Ok(()),
            Some(origin) if self.allowed_origins.iter().any(|p| p.admits(origin)) => Ok(()),
            Some(_) => Err(OriginRefusal::NotAllowed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(text: &str) -> url::Origin {
        url::Url::parse(text).expect("url").origin()
    }

    #[test]
    fn issued_keys_name_their_id_and_verify_only_themselves() {
        let key = IssuedKey::generate();
        assert_eq!(key_id_of(&key.token), Some(key.id));
        assert_eq!(key.token.len(), KEY_PREFIX.len() + 32 + 1 + 43);
        let hash = key.hash();
        assert!(hash.verifies(&key.token));
        assert!(!hash.verifies(&IssuedKey::generate().token));
        assert_eq!(key_id_of("adk_nothex_x"), None);
        assert_eq!(key_id_of("an operator's own admin key of 32 chars"), None);
    }

    #[test]
    fn origin_patterns_match_exact_origins_and_subdomains_only() {
        let exact = OriginPattern::parse("https://shop.example").expect("valid");
        assert!(exact.admits(&origin("https://shop.example/cart")));
        assert!(!exact.admits(&origin("http://shop.example")));
        assert!(!exact.admits(&origin("https://evil-shop.example")));
        assert!(!exact.admits(&origin("https://shop.example:8443")));
        let sub = OriginPattern::parse("https://*.example.com").expect("valid");
        assert!(sub.admits(&origin("https://www.example.com")));
        assert!(sub.admits(&origin("https://a.b.example.com")));
        assert!(!sub.admits(&origin("https://example.com")));
        assert!(!sub.admits(&origin("https://badexample.com")));
        assert_eq!(sub.to_string(), "https://*.example.com");
        for bad in [
            "shop.example",
            "ftp://x.example",
            "https://x.example/path",
            "https://*",
        ] {
            assert!(OriginPattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_site_admits_by_its_patterns_and_its_origin_rule() {
        let site = SiteProfile {
            site: SiteId::parse("shop.example").expect("valid"),
            allowed_origins: vec![OriginPattern::parse("https://shop.example").expect("valid")],
            require_origin: false,
            respect_gpc: false,
            created_at: Utc::now(),
        };
        assert_eq!(site.admits(Some(&origin("https://shop.example"))), Ok(()));
        assert_eq!(
            site.admits(Some(&origin("https://other.example"))),
            Err(OriginRefusal::NotAllowed)
        );
        assert_eq!(site.admits(None), Ok(()));
        let strict = SiteProfile {
            require_origin: true,
            ..site
        };
        assert_eq!(strict.admits(None), Err(OriginRefusal::Missing));
    }
}
