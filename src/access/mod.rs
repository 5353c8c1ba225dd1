//! Who may call: every key's hash, every registered site and every tag secret held in this
//! process's memory,
//! refreshed from the store within the settings cache lifetime, so deciding a request costs no
//! store read (docs/DESIGN.md, "Keys, tenants and registered sites"). A key created or revoked
//! here works, or stops working, at once in this process; elsewhere within the lifetime.

pub(crate) mod bootstrap;
mod ring;

use crate::domain::access::{
    ApiKey, Grant, IssuedKey, KeyId, OriginRefusal, SecretHash, SiteProfile, key_id_of,
};
use crate::domain::beacon::SiteId;
use crate::domain::ids::AdvertiserId;
use crate::domain::tag::{TagSecret, TagSecretId};
use crate::store::{AccessStore, StoreError};
use chrono::{DateTime, Utc};
use ring::Ring;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Whether requests must present keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthMode {
    /// Every request is authenticated, every beacon's site registered (the default).
    Keys,
    /// Everything is let through, beacons for any site (a private network, a local trial).
    Off,
}

/// The shortest `ADEVENTS_ADMIN_KEY` accepted: guessing it must be out of reach.
pub(crate) const MIN_ADMIN_KEY_CHARS: usize = 32;

/// An operator's admin key from the environment: never stored, kept only as its hash.
#[derive(Clone)]
pub struct OperatorKey(SecretHash);

impl OperatorKey {
    pub fn new(secret: &str) -> Result<Self, String> {
        if secret.chars().count() < MIN_ADMIN_KEY_CHARS {
            return Err(format!(
                "ADEVENTS_ADMIN_KEY must have at least {MIN_ADMIN_KEY_CHARS} characters"
            ));
        }
        Ok(Self(SecretHash::of(secret)))
    }
}

impl std::fmt::Debug for OperatorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OperatorKey(..)")
    }
}

/// How access is configured.
#[derive(Debug, Clone)]
pub struct AccessOptions {
    pub mode: AuthMode,
    pub operator_key: Option<OperatorKey>,
    /// How long the in-memory keys and sites may be used before they are read again.
    pub refresh: Duration,
}

impl Default for AccessOptions {
    fn default() -> Self {
        Self {
            mode: AuthMode::Keys,
            operator_key: None,
            refresh: Duration::from_secs(10),
        }
    }
}

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Caller {
    /// The key presented; `None` for the operator's environment key and with `--auth off`.
    pub(crate) key: Option<KeyId>,
    pub(crate) grant: Grant,
}

/// Why a beacon's site refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SiteRefusal {
    #[error("is not a registered site (PUT /v1/sites/{{site}} registers it)")]
    Unregistered,
    #[error("{0}")]
    Origin(OriginRefusal),
}

impl SiteRefusal {
    /// The metric label of the refusal.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Self::Unregistered => "unregistered_site",
            Self::Origin(OriginRefusal::NotAllowed) => "origin_not_allowed",
            Self::Origin(OriginRefusal::Missing) => "origin_required",
        }
    }
}

/// The keys and sites of the deployment, as this process knows them.
pub struct Access {
    store: Arc<dyn AccessStore>,
    options: AccessOptions,
    keys: Ring<KeyId, ApiKey>,
    sites: Ring<SiteId, SiteProfile>,
    tag_secrets: Ring<TagSecretId, TagSecret>,
    /// When an unknown tag secret last made this process read the secrets again: a secret made
    /// on another process works here at once, yet made-up ids cost at most one read a second.
    secrets_read_on_miss: std::sync::Mutex<Option<Instant>>,
    /// Whether keys and sites were read at least once: until then no key can be judged.
    loaded: AtomicBool,
}

/// The least time between two reads of the tag secrets caused by unknown ids.
const SECRET_MISS_READ_INTERVAL: Duration = Duration::from_secs(1);

impl Access {
    pub(crate) fn new(store: Arc<dyn AccessStore>, options: AccessOptions) -> Self {
        let memory = 2 * options.refresh;
        Self {
            store,
            options,
            keys: Ring::new(memory),
            sites: Ring::new(memory),
            tag_secrets: Ring::new(memory),
            secrets_read_on_miss: std::sync::Mutex::new(None),
            loaded: AtomicBool::new(false),
        }
    }

    pub(crate) fn mode(&self) -> AuthMode {
        self.options.mode
    }

    /// Whether requests can be judged: keys are off, or they were read from the store.
    pub(crate) fn is_ready(&self) -> bool {
        self.options.mode == AuthMode::Off || self.loaded.load(Ordering::Acquire)
    }

    /// Reads every key, site and tag secret from the store into memory.
    pub async fn refresh(&self) -> Result<(), StoreError> {
        let (keys_read, sites_read) = (self.keys.read_starts(), self.sites.read_starts());
        let secrets_read = self.tag_secrets.read_starts();
        let (keys, sites, secrets) = futures::try_join!(
            self.store.keys(),
            self.store.sites(),
            self.store.tag_secrets()
        )?;
        self.keys
            .replace(keys_read, keys.into_iter().map(|key| (key.id, key)));
        self.sites.replace(
            sites_read,
            sites
                .into_iter()
                .map(|profile| (profile.site.clone(), profile)),
        );
        self.tag_secrets.replace(
            secrets_read,
            secrets.into_iter().map(|secret| (secret.id, secret)),
        );
        self.loaded.store(true, Ordering::Release);
        Ok(())
    }

    /// Reads keys and sites again every refresh interval until the task is aborted; a failed
    /// read keeps the last ones known.
    pub(crate) fn spawn_refresh(self: Arc<Self>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut ticks = crate::periodic::ticks(self.options.refresh);
            let mut outage = crate::periodic::OutageLog::new(
                "cannot read keys and sites; keeping the last ones known",
                None,
            );
            loop {
                ticks.tick().await;
                outage.record(&self.refresh().await);
            }
        })
    }

    /// The caller a bearer token names, if any: this server's keys by their id, anything else
    /// against the operator's environment key; hashes compared in constant time.
    pub(crate) fn authenticate(&self, token: &str) -> Option<Caller> {
        if let Some(id) = key_id_of(token) {
            return self.keys.with(&id, |key| {
                key.hash.verifies(token).then(|| Caller {
                    key: Some(id),
                    grant: key.grant.clone(),
                })
            })?;
        }
        let operator = self.options.operator_key.as_ref()?;
        operator.0.verifies(token).then_some(Caller {
            key: None,
            grant: Grant::Admin,
        })
    }

    /// Makes a key with `grant`; its secret is in the answer and nowhere else.
    pub async fn create_key(
        &self,
        grant: Grant,
        name: Option<String>,
        now: DateTime<Utc>,
    ) -> Result<(ApiKey, IssuedKey), StoreError> {
        let issued = IssuedKey::generate();
        let key = self.store_issued_ref(&issued, grant, name, now).await?;
        Ok((key, issued))
    }

    /// Stores a key whose secret the caller already has (the bootstrap key, in its file).
    pub(crate) async fn store_issued(
        &self,
        issued: IssuedKey,
        grant: Grant,
        name: Option<String>,
        now: DateTime<Utc>,
    ) -> Result<ApiKey, StoreError> {
        self.store_issued_ref(&issued, grant, name, now).await
    }

    async fn store_issued_ref(
        &self,
        issued: &IssuedKey,
        grant: Grant,
        name: Option<String>,
        now: DateTime<Utc>,
    ) -> Result<ApiKey, StoreError> {
        let key = ApiKey {
            id: issued.id,
            grant,
            name,
            created_at: now,
            hash: issued.hash(),
        };
        self.store.put_key(&key).await?;
        self.keys.insert(key.id, key.clone());
        Ok(key)
    }

    /// Every key, as stored now (a listing for an administrator, not the in-memory ring).
    pub(crate) async fn keys(&self) -> Result<Vec<ApiKey>, StoreError> {
        let mut keys = self.store.keys().await?;
        keys.sort_by_key(|key| (key.created_at, key.id));
        Ok(keys)
    }

    /// A key as this process knows it.
    pub(crate) fn key(&self, id: KeyId) -> Option<ApiKey> {
        self.keys.with(&id, Clone::clone)
    }

    /// Revokes a key; `false` if there was no such key.
    pub(crate) async fn revoke(&self, id: KeyId) -> Result<bool, StoreError> {
        let existed = self.store.keys().await?.iter().any(|key| key.id == id);
        if existed {
            self.store.delete_key(id).await?;
        }
        self.keys.remove(id);
        Ok(existed)
    }

    /// Whether the store has an admin key (or the environment gives one).
    pub(crate) async fn has_admin(&self) -> Result<bool, StoreError> {
        if self.options.operator_key.is_some() {
            return Ok(true);
        }
        let keys = self.store.keys().await?;
        Ok(keys.iter().any(|key| key.grant == Grant::Admin))
    }

    /// A registered site as stored now (after a change, read before writing again).
    pub(crate) async fn stored_site(
        &self,
        site: &SiteId,
    ) -> Result<Option<SiteProfile>, StoreError> {
        let sites = self.store.sites().await?;
        Ok(sites.into_iter().find(|profile| &profile.site == site))
    }

    /// Registers a site or replaces its profile; it takes beacons here at once.
    pub async fn register_site(&self, profile: SiteProfile) -> Result<(), StoreError> {
        self.store.put_site(&profile).await?;
        self.sites.insert(profile.site.clone(), profile);
        Ok(())
    }

    /// Whether a beacon for `site` from the page at `origin` may be stored: any with keys off;
    /// otherwise only for a registered site, by its origin rule.
    pub(crate) fn admit_beacon(
        &self,
        site: &SiteId,
        origin: Option<&url::Origin>,
    ) -> Result<(), SiteRefusal> {
        if self.options.mode == AuthMode::Off {
            return Ok(());
        }
        self.sites
            .with(site, |profile| profile.admits(origin))
            .ok_or(SiteRefusal::Unregistered)?
            .map_err(SiteRefusal::Origin)
    }

    /// Whether `site` respects Global Privacy Control (its registration says so), whether or
    /// not keys are on.
    pub(crate) fn respects_gpc(&self, site: &SiteId) -> bool {
        self.sites
            .with(site, |profile| profile.respect_gpc)
            .unwrap_or(false)
    }

    /// Makes a tag secret for `advertiser`; it verifies URLs here as soon as this returns.
    pub(crate) async fn create_tag_secret(
        &self,
        advertiser: AdvertiserId,
        now: DateTime<Utc>,
    ) -> Result<TagSecret, StoreError> {
        let secret = TagSecret::generate(advertiser, now);
        self.store.put_tag_secret(&secret).await?;
        self.tag_secrets.insert(secret.id, secret.clone());
        Ok(secret)
    }

    /// `advertiser`'s tag secrets as stored now, oldest first.
    pub(crate) async fn stored_tag_secrets(
        &self,
        advertiser: AdvertiserId,
    ) -> Result<Vec<TagSecret>, StoreError> {
        let mut secrets: Vec<TagSecret> = self
            .store
            .tag_secrets()
            .await?
            .into_iter()
            .filter(|secret| secret.advertiser == advertiser)
            .collect();
        secrets.sort_by_key(|secret| (secret.created_at, secret.id));
        Ok(secrets)
    }

    /// Deletes `advertiser`'s tag secret `id`; `false` if it has no such secret.
    pub(crate) async fn delete_tag_secret(
        &self,
        advertiser: AdvertiserId,
        id: TagSecretId,
    ) -> Result<bool, StoreError> {
        let owned = self
            .store
            .tag_secrets()
            .await?
            .iter()
            .any(|secret| secret.id == id && secret.advertiser == advertiser);
        if owned {
            self.store.delete_tag_secret(id).await?;
            self.tag_secrets.remove(id);
        }
        Ok(owned)
    }

    /// The tag secret `id` of `advertiser`, as this process knows it; an id it does not know
    /// reads the secrets again, at most once a second.
    pub(crate) async fn tag_secret(
        &self,
        advertiser: AdvertiserId,
        id: TagSecretId,
    ) -> Option<TagSecret> {
        let known = |secret: &TagSecret| (secret.advertiser == advertiser).then(|| secret.clone());
        if let Some(found) = self.tag_secrets.with(&id, known) {
            return found;
        }
        if !self.may_read_secrets_on_miss() {
            return None;
        }
        let started = self.tag_secrets.read_starts();
        match self.store.tag_secrets().await {
            Ok(secrets) => self.tag_secrets.replace(
                started,
                secrets.into_iter().map(|secret| (secret.id, secret)),
            ),
            Err(error) => {
                tracing::warn!(error = %error.chain(), "cannot read tag secrets");
                return None;
            }
        }
        self.tag_secrets.with(&id, known).flatten()
    }

    fn may_read_secrets_on_miss(&self) -> bool {
        let now = Instant::now();
        let mut last = match self.secrets_read_on_miss.lock() {
            Ok(last) => last,
            Err(poisoned) => poisoned.into_inner(),
        };
        if last.is_some_and(|at| now.duration_since(at) < SECRET_MISS_READ_INTERVAL) {
            return false;
        }
        *last = Some(now);
        true
    }
}
