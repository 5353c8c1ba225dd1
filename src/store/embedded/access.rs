//! API keys, registered sites and tag secrets in the embedded store: one row per key (by id),
//! per site and per tag secret, each value a small postcard record, and the bootstrap marker in the folder's `meta`.

use super::EmbeddedStore;
use super::engine::{Table, corrupt};
use crate::domain::access::{ApiKey, Grant, KeyId, OriginPattern, SecretHash, SiteProfile};
use crate::domain::beacon::SiteId;
use crate::domain::ids::AdvertiserId;
use crate::domain::tag::{TagSecret, TagSecretId};
use crate::store::{AccessStore, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The marker of the bootstrap admin key in `meta`.
const BOOTSTRAP_MARKER: &str = "admin_bootstrapped";

#[derive(Serialize, Deserialize)]
struct StoredKey {
    scope: String,
    advertiser: Option<[u8; 16]>,
    site: Option<String>,
    name: Option<String>,
    hash: [u8; 32],
    created_millis: i64,
}

#[derive(Serialize, Deserialize)]
struct StoredSite {
    allowed_origins: Vec<String>,
    require_origin: bool,
    created_millis: i64,
    respect_gpc: bool,
}

/// A site profile as stored before `respect_gpc`: postcard records are not self-describing,
/// so a row of that layout decodes only as this (and respects no GPC signal).
#[derive(Deserialize)]
struct StoredSiteBeforeGpc {
    allowed_origins: Vec<String>,
    require_origin: bool,
    created_millis: i64,
}

fn key_value(key: &ApiKey) -> Vec<u8> {
    let stored = StoredKey {
        scope: key.grant.scope().to_owned(),
        advertiser: key.grant.advertiser().map(|id| *id.as_uuid().as_bytes()),
        site: key.grant.site().map(|site| site.as_str().to_owned()),
        name: key.name.clone(),
        hash: *key.hash.as_bytes(),
        created_millis: key.created_at.timestamp_millis(),
    };
    // Plain data into a Vec: serialising cannot fail.
    postcard::to_stdvec(&stored).unwrap_or_default()
}

fn decode_key(id: &[u8], value: &[u8]) -> Option<ApiKey> {
    let stored: StoredKey = postcard::from_bytes(value).ok()?;
    let advertiser = stored
        .advertiser
        .map(|bytes| AdvertiserId::new(Uuid::from_bytes(bytes)));
    let grant = match (stored.scope.as_str(), advertiser, stored.site) {
        ("admin", None, None) => Grant::Admin,
        ("metrics", None, None) => Grant::Metrics,
        ("ingest", Some(advertiser), None) => Grant::Ingest(advertiser),
        ("read", Some(advertiser), None) => Grant::ReadAdvertiser(advertiser),
        ("read", None, Some(site)) => Grant::ReadSite(SiteId::parse(&site).ok()?),
        _ => return None,
    };
    Some(ApiKey {
        id: KeyId::new(Uuid::from_slice(id).ok()?),
        grant,
        name: stored.name,
        created_at: DateTime::from_timestamp_millis(stored.created_millis)?,
        hash: SecretHash::from_stored(&stored.hash)?,
    })
}

/// A site profile as stored (also written by the format upgrade that registers old sites).
pub(crate) fn site_value(profile: &SiteProfile) -> Vec<u8> {
    let stored = StoredSite {
        allowed_origins: profile
            .allowed_origins
            .iter()
            .map(ToString::to_string)
            .collect(),
        require_origin: profile.require_origin,
        created_millis: profile.created_at.timestamp_millis(),
        respect_gpc: profile.respect_gpc,
    };
    postcard::to_stdvec(&stored).unwrap_or_default()
}

fn decode_site(site: &[u8], value: &[u8]) -> Option<SiteProfile> {
    let stored: StoredSite = postcard::from_bytes(value).ok().or_else(|| {
        let old: StoredSiteBeforeGpc = postcard::from_bytes(value).ok()?;
        Some(StoredSite {
            allowed_origins: old.allowed_origins,
            require_origin: old.require_origin,
            created_millis: old.created_millis,
            respect_gpc: false,
        })
    })?;
    Some(SiteProfile {
        site: SiteId::parse(std::str::from_utf8(site).ok()?).ok()?,
        allowed_origins: stored
            .allowed_origins
            .iter()
            .map(|pattern| OriginPattern::parse(pattern).ok())
            .collect::<Option<_>>()?,
        require_origin: stored.require_origin,
        respect_gpc: stored.respect_gpc,
        created_at: DateTime::<Utc>::from_timestamp_millis(stored.created_millis)?,
    })
}

#[derive(Serialize, Deserialize)]
struct StoredTagSecret {
    advertiser: [u8; 16],
    secret: [u8; 32],
    created_millis: i64,
}

fn tag_secret_value(secret: &TagSecret) -> Vec<u8> {
    let stored = StoredTagSecret {
        advertiser: *secret.advertiser.as_uuid().as_bytes(),
        secret: secret.secret,
        created_millis: secret.created_at.timestamp_millis(),
    };
    postcard::to_stdvec(&stored).unwrap_or_default()
}

fn decode_tag_secret(id: &[u8], value: &[u8]) -> Option<TagSecret> {
    let stored: StoredTagSecret = postcard::from_bytes(value).ok()?;
    Some(TagSecret {
        id: TagSecretId::new(Uuid::from_slice(id).ok()?),
        advertiser: AdvertiserId::new(Uuid::from_bytes(stored.advertiser)),
        secret: stored.secret,
        created_at: DateTime::from_timestamp_millis(stored.created_millis)?,
    })
}

#[async_trait]
impl AccessStore for EmbeddedStore {
    async fn keys(&self) -> Result<Vec<ApiKey>, StoreError> {
        const CONTEXT: &str = "reading keys";
        let rows = self.scan(Table::ApiKey, Vec::new(), None, CONTEXT).await?;
        rows.iter()
            .map(|(id, value)| decode_key(id, value).ok_or_else(|| corrupt(CONTEXT)))
            .collect()
    }

    async fn put_key(&self, key: &ApiKey) -> Result<(), StoreError> {
        let row = (
            Table::ApiKey,
            key.id.as_uuid().as_bytes().to_vec(),
            key_value(key),
        );
        self.write("writing a key", vec![row]).await
    }

    async fn delete_key(&self, id: KeyId) -> Result<(), StoreError> {
        let removal = (Table::ApiKey, id.as_uuid().as_bytes().to_vec());
        self.committer
            .commit_replacing("deleting a key", vec![removal], Vec::new())
            .await
    }

    async fn sites(&self) -> Result<Vec<SiteProfile>, StoreError> {
        const CONTEXT: &str = "reading sites";
        let rows = self
            .scan(Table::SiteRegistry, Vec::new(), None, CONTEXT)
            .await?;
        rows.iter()
            .map(|(site, value)| decode_site(site, value).ok_or_else(|| corrupt(CONTEXT)))
            .collect()
    }

    async fn put_site(&self, site: &SiteProfile) -> Result<(), StoreError> {
        let row = (
            Table::SiteRegistry,
            site.site.as_str().as_bytes().to_vec(),
            site_value(site),
        );
        self.write("registering a site", vec![row]).await
    }

    async fn admin_bootstrapped(&self) -> Result<bool, StoreError> {
        let rows = self
            .scan(
                Table::Meta,
                BOOTSTRAP_MARKER.as_bytes().to_vec(),
                Some(1),
                "reading the bootstrap marker",
            )
            .await?;
        Ok(!rows.is_empty())
    }

    async fn mark_admin_bootstrapped(&self) -> Result<(), StoreError> {
        let row = (Table::Meta, BOOTSTRAP_MARKER.as_bytes().to_vec(), vec![1]);
        self.write("writing the bootstrap marker", vec![row]).await
    }

    async fn tag_secrets(&self) -> Result<Vec<TagSecret>, StoreError> {
        const CONTEXT: &str = "reading tag secrets";
        let rows = self
            .scan(Table::TagSecret, Vec::new(), None, CONTEXT)
            .await?;
        rows.iter()
            .map(|(id, value)| decode_tag_secret(id, value).ok_or_else(|| corrupt(CONTEXT)))
            .collect()
    }

    async fn put_tag_secret(&self, secret: &TagSecret) -> Result<(), StoreError> {
        let row = (
            Table::TagSecret,
            secret.id.as_uuid().as_bytes().to_vec(),
            tag_secret_value(secret),
        );
        self.write("writing a tag secret", vec![row]).await
    }

    async fn delete_tag_secret(&self, id: TagSecretId) -> Result<(), StoreError> {
        let removal = (Table::TagSecret, id.as_uuid().as_bytes().to_vec());
        self.committer
            .commit_replacing("deleting a tag secret", vec![removal], Vec::new())
            .await
    }
}
