//! API keys, registered sites and tag secrets on Cassandra: `api_key`, `site_registry` and
//! `tag_secret`, each one small partition read whole (see `migrations/0006_access.cql` and
//! `0008_invalid_traffic.cql`), and `access_meta`.

use super::CassandraStore;
use super::config::KeyspaceName;
use super::errors::decode_error;
use super::statements::{execute, prepare_all, read_all, read_one};
use crate::domain::access::{ApiKey, Grant, KeyId, OriginPattern, SecretHash, SiteProfile};
use crate::domain::beacon::SiteId;
use crate::domain::ids::AdvertiserId;
use crate::domain::tag::{TagSecret, TagSecretId};
use crate::store::error::Message;
use crate::store::{AccessStore, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::MaybeUnset;
use scylla::{DeserializeRow, SerializeRow};
use uuid::Uuid;

/// Every key (and every registered site) lives in this partition.
const SHARD: i32 = 0;
const BOOTSTRAP_MARKER: &str = "admin_bootstrapped";

pub(crate) struct AccessStatements {
    select_keys: PreparedStatement,
    insert_key: PreparedStatement,
    delete_key: PreparedStatement,
    select_sites: PreparedStatement,
    insert_site: PreparedStatement,
    select_meta: PreparedStatement,
    insert_meta: PreparedStatement,
    select_tag_secrets: PreparedStatement,
    insert_tag_secret: PreparedStatement,
    delete_tag_secret: PreparedStatement,
}

impl AccessStatements {
    pub(crate) async fn prepare(
        session: &Session,
        keyspace: &KeyspaceName,
    ) -> Result<Self, StoreError> {
        let [
            select_keys,
            insert_key,
            delete_key,
            select_sites,
            insert_site,
            select_meta,
            insert_meta,
            select_tag_secrets,
            insert_tag_secret,
            delete_tag_secret,
        ] = prepare_all(
            session,
            [
                format!(
                    "SELECT id, scope, advertiser_id, site, name, secret_hash, created_at \
                     FROM {keyspace}.api_key WHERE shard = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.api_key (shard, id, scope, advertiser_id, site, name, \
                     secret_hash, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                format!("DELETE FROM {keyspace}.api_key WHERE shard = ? AND id = ?"),
                format!(
                    "SELECT site, allowed_origins, require_origin, created_at, respect_gpc \
                     FROM {keyspace}.site_registry WHERE shard = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.site_registry (shard, site, allowed_origins, \
                     require_origin, created_at, respect_gpc) VALUES (?, ?, ?, ?, ?, ?)"
                ),
                format!("SELECT value FROM {keyspace}.access_meta WHERE name = ?"),
                format!("INSERT INTO {keyspace}.access_meta (name, value) VALUES (?, ?)"),
                format!(
                    "SELECT id, advertiser_id, secret, created_at \
                     FROM {keyspace}.tag_secret WHERE shard = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.tag_secret (shard, id, advertiser_id, secret, created_at) \
                     VALUES (?, ?, ?, ?, ?)"
                ),
                format!("DELETE FROM {keyspace}.tag_secret WHERE shard = ? AND id = ?"),
            ],
        )
        .await?;
        Ok(Self {
            select_keys,
            insert_key,
            delete_key,
            select_sites,
            insert_site,
            select_meta,
            insert_meta,
            select_tag_secrets,
            insert_tag_secret,
            delete_tag_secret,
        })
    }
}

#[derive(DeserializeRow)]
struct StoredKey {
    id: Uuid,
    scope: String,
    advertiser_id: Option<Uuid>,
    site: Option<String>,
    name: Option<String>,
    secret_hash: Vec<u8>,
    created_at: DateTime<Utc>,
}

impl StoredKey {
    fn into_key(self) -> Option<ApiKey> {
        let advertiser = self.advertiser_id.map(AdvertiserId::new);
        let grant = match (self.scope.as_str(), advertiser, self.site) {
            ("admin", None, None) => Grant::Admin,
            ("metrics", None, None) => Grant::Metrics,
            ("ingest", Some(advertiser), None) => Grant::Ingest(advertiser),
            ("read", Some(advertiser), None) => Grant::ReadAdvertiser(advertiser),
            ("read", None, Some(site)) => Grant::ReadSite(SiteId::parse(&site).ok()?),
            _ => return None,
        };
        Some(ApiKey {
            id: KeyId::new(self.id),
            grant,
            name: self.name,
            created_at: self.created_at,
            hash: SecretHash::from_stored(&self.secret_hash)?,
        })
    }
}

#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct KeyValues<'a> {
    shard: i32,
    id: Uuid,
    scope: &'a str,
    // Unset, not null: a null would write a tombstone.
    advertiser_id: MaybeUnset<Uuid>,
    site: MaybeUnset<&'a str>,
    name: MaybeUnset<&'a str>,
    secret_hash: &'a [u8],
    created_at: DateTime<Utc>,
}

#[derive(DeserializeRow)]
struct StoredSite {
    site: String,
    allowed_origins: Option<Vec<String>>,
    require_origin: Option<bool>,
    created_at: Option<DateTime<Utc>>,
    respect_gpc: Option<bool>,
}

impl StoredSite {
    fn into_profile(self) -> Option<SiteProfile> {
        Some(SiteProfile {
            site: SiteId::parse(&self.site).ok()?,
            allowed_origins: self
                .allowed_origins
                .unwrap_or_default()
                .iter()
                .map(|pattern| OriginPattern::parse(pattern).ok())
                .collect::<Option<_>>()?,
            require_origin: self.require_origin.unwrap_or(false),
            respect_gpc: self.respect_gpc.unwrap_or(false),
            created_at: self.created_at.unwrap_or_default(),
        })
    }
}

#[derive(DeserializeRow)]
struct StoredTagSecret {
    id: Uuid,
    advertiser_id: Uuid,
    secret: Vec<u8>,
    created_at: DateTime<Utc>,
}

impl StoredTagSecret {
    fn into_secret(self) -> Option<TagSecret> {
        Some(TagSecret {
            id: TagSecretId::new(self.id),
            advertiser: AdvertiserId::new(self.advertiser_id),
            secret: self.secret.try_into().ok()?,
            created_at: self.created_at,
        })
    }
}

/// Registers `site` with no origin rule unless it is registered already: what migration 0006
/// does for every site that already received beacons or settings.
pub(crate) async fn register_stored_site(
    session: &Session,
    keyspace: &KeyspaceName,
    site: &SiteId,
) -> Result<(), StoreError> {
    const CONTEXT: &str = "registering the stored sites";
    let cql = format!(
        "INSERT INTO {keyspace}.site_registry (shard, site, allowed_origins, require_origin, created_at) \
         VALUES (?, ?, ?, ?, ?) IF NOT EXISTS"
    );
    let values = (
        SHARD,
        site.as_str(),
        Vec::<String>::new(),
        false,
        Utc::now(),
    );
    session
        .query_unpaged(cql, values)
        .await
        .map(|_| ())
        .map_err(|error| super::errors::execution_error(CONTEXT, error))
}

#[async_trait]
impl AccessStore for CassandraStore {
    async fn keys(&self) -> Result<Vec<ApiKey>, StoreError> {
        const CONTEXT: &str = "reading keys";
        let statements = &self.prepared().await?.access;
        let rows: Vec<StoredKey> =
            read_all(&self.session, &statements.select_keys, (SHARD,), CONTEXT).await?;
        rows.into_iter()
            .map(|row| {
                row.into_key().ok_or_else(|| {
                    decode_error(CONTEXT, Message("a stored key does not decode".into()))
                })
            })
            .collect()
    }

    async fn put_key(&self, key: &ApiKey) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.access;
        let site = key.grant.site().map(SiteId::as_str);
        let values = KeyValues {
            shard: SHARD,
            id: key.id.as_uuid(),
            scope: key.grant.scope(),
            advertiser_id: key
                .grant
                .advertiser()
                .map_or(MaybeUnset::Unset, |id| MaybeUnset::Set(id.as_uuid())),
            site: site.map_or(MaybeUnset::Unset, MaybeUnset::Set),
            name: key
                .name
                .as_deref()
                .map_or(MaybeUnset::Unset, MaybeUnset::Set),
            secret_hash: key.hash.as_bytes(),
            created_at: key.created_at,
        };
        execute(
            &self.session,
            &statements.insert_key,
            values,
            "writing a key",
        )
        .await
    }

    async fn delete_key(&self, id: KeyId) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.access;
        let values = (SHARD, id.as_uuid());
        execute(
            &self.session,
            &statements.delete_key,
            values,
            "deleting a key",
        )
        .await
    }

    async fn sites(&self) -> Result<Vec<SiteProfile>, StoreError> {
        const CONTEXT: &str = "reading sites";
        let statements = &self.prepared().await?.access;
        let rows: Vec<StoredSite> =
            read_all(&self.session, &statements.select_sites, (SHARD,), CONTEXT).await?;
        rows.into_iter()
            .map(|row| {
                row.into_profile().ok_or_else(|| {
                    decode_error(CONTEXT, Message("a stored site does not decode".into()))
                })
            })
            .collect()
    }

    async fn put_site(&self, site: &SiteProfile) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.access;
        let origins: Vec<String> = site
            .allowed_origins
            .iter()
            .map(ToString::to_string)
            .collect();
        let values = (
            SHARD,
            site.site.as_str(),
            origins,
            site.require_origin,
            site.created_at,
            site.respect_gpc,
        );
        let context = "registering a site";
        execute(&self.session, &statements.insert_site, values, context).await
    }

    async fn admin_bootstrapped(&self) -> Result<bool, StoreError> {
        let statements = &self.prepared().await?.access;
        let row: Option<(Option<String>,)> = read_one(
            &self.session,
            &statements.select_meta,
            (BOOTSTRAP_MARKER,),
            "reading the bootstrap marker",
        )
        .await?;
        Ok(row.is_some())
    }

    async fn mark_admin_bootstrapped(&self) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.access;
        let values = (BOOTSTRAP_MARKER, Utc::now().to_rfc3339());
        let context = "writing the bootstrap marker";
        execute(&self.session, &statements.insert_meta, values, context).await
    }

    async fn tag_secrets(&self) -> Result<Vec<TagSecret>, StoreError> {
        const CONTEXT: &str = "reading tag secrets";
        let statements = &self.prepared().await?.access;
        let rows: Vec<StoredTagSecret> = read_all(
            &self.session,
            &statements.select_tag_secrets,
            (SHARD,),
            CONTEXT,
        )
        .await?;
        rows.into_iter()
            .map(|row| {
                row.into_secret().ok_or_else(|| {
                    decode_error(
                        CONTEXT,
                        Message("a stored tag secret does not decode".into()),
                    )
                })
            })
            .collect()
    }

    async fn put_tag_secret(&self, secret: &TagSecret) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.access;
        let values = (
            SHARD,
            secret.id.as_uuid(),
            secret.advertiser.as_uuid(),
            secret.secret.as_slice(),
            secret.created_at,
        );
        let context = "writing a tag secret";
        execute(
            &self.session,
            &statements.insert_tag_secret,
            values,
            context,
        )
        .await
    }

    async fn delete_tag_secret(&self, id: TagSecretId) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.access;
        let values = (SHARD, id.as_uuid());
        let context = "deleting a tag secret";
        execute(
            &self.session,
            &statements.delete_tag_secret,
            values,
            context,
        )
        .await
    }
}
