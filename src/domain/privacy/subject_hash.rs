//! The keyed hash an erasure keeps of its subject once done: enough to drop the subject's
//! re-sent old events, not enough to name the subject to anyone without the store's key.

use super::Subject;
use crate::domain::ids::{AdvertiserId, ImpressionId};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The store's secret for subject hashes, created once per store (the first writer wins).
#[derive(Clone)]
pub struct PrivacyKey([u8; 32]);

impl PrivacyKey {
    pub const fn new(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    pub fn generate() -> Self {
        Self(rand::random())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// HMAC-SHA256 of the subject under this key, with a prefix per kind of subject so two
    /// kinds never share a hash.
    pub fn hash(&self, subject: &Subject) -> SubjectHash {
        // A 32-byte key is always a valid HMAC key.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        match subject {
            Subject::User(user) => {
                mac.update(b"user:");
                mac.update(user.as_uuid().as_bytes());
            }
            Subject::Visitor { site, guid } => {
                // The site is at most 128 bytes of a fixed alphabet without a NUL: the
                // separator keeps ("a", "bc") apart from ("ab", "c").
                mac.update(b"visitor:");
                mac.update(site.as_str().as_bytes());
                mac.update(b"\0");
                mac.update(guid.as_str().as_bytes());
            }
        }
        SubjectHash(mac.finalize().into_bytes().into())
    }

    /// HMAC-SHA256 of an impression under this key: what an erasure keeps of each impression
    /// it found, so that a click or view report of one arriving later is dropped, without
    /// keeping the ad server's id of it.
    pub fn hash_impression(
        &self,
        advertiser: AdvertiserId,
        impression: ImpressionId,
    ) -> SubjectHash {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(b"impression:");
        mac.update(advertiser.as_uuid().as_bytes());
        mac.update(impression.as_uuid().as_bytes());
        SubjectHash(mac.finalize().into_bytes().into())
    }
}

impl std::fmt::Debug for PrivacyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PrivacyKey(…)")
    }
}

/// A subject's keyed hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubjectHash([u8; 32]);

impl SubjectHash {
    pub const fn new(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::UserId;

    #[test]
    fn the_hash_depends_on_the_key_and_the_subject() {
        let user = |n: u128| Subject::User(UserId::new(uuid::Uuid::from_u128(n)));
        let (one, two) = (PrivacyKey::new([1; 32]), PrivacyKey::new([2; 32]));
        assert_eq!(one.hash(&user(7)), one.hash(&user(7)));
        assert_ne!(one.hash(&user(7)), one.hash(&user(8)));
        assert_ne!(one.hash(&user(7)), two.hash(&user(7)));
    }

    #[test]
    fn an_impression_hash_names_its_advertiser_and_never_a_user() {
        let key = PrivacyKey::new([1; 32]);
        let id = uuid::Uuid::from_u128(7);
        let impression = ImpressionId::new(id);
        let advertiser = |n: u128| AdvertiserId::new(uuid::Uuid::from_u128(n));
        assert_eq!(
            key.hash_impression(advertiser(1), impression),
            key.hash_impression(advertiser(1), impression)
        );
        assert_ne!(
            key.hash_impression(advertiser(1), impression),
            key.hash_impression(advertiser(2), impression)
        );
        assert_ne!(
            key.hash_impression(advertiser(1), impression),
            key.hash(&Subject::User(crate::domain::ids::UserId::new(id)))
        );
    }

    #[test]
    fn a_visitor_hash_tells_the_site_from_the_guid() {
        use crate::domain::beacon::{Guid, SiteId};
        let visitor = |site: &str, guid: &str| Subject::Visitor {
            site: SiteId::parse(site).expect("site"),
            guid: Guid::parse(guid).expect("guid"),
        };
        let key = PrivacyKey::new([1; 32]);
        assert_eq!(key.hash(&visitor("a", "bc")), key.hash(&visitor("a", "bc")));
        assert_ne!(key.hash(&visitor("a", "bc")), key.hash(&visitor("ab", "c")));
        assert_ne!(key.hash(&visitor("a", "bc")), key.hash(&visitor("b", "bc")));
    }
}
