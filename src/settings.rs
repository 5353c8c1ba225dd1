//! Campaign and site settings as requests see them: read from the store and cached in the process for a
//! short lifetime. A change is scheduled at least that lifetime ahead (API.md), so every server
//! process has seen it before it applies; readers also widen their bucket coverage by the same
//! lifetime (`SettingsHistory::buckets_to_read`).

use crate::domain::beacon::SiteId;
use crate::domain::campaign::SettingsHistory;
use crate::domain::ids::CampaignKey;
use crate::domain::time::MAX_FUTURE_SKEW;
use crate::store::{Store, StoreError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Whose settings: campaigns and sites share the cache and its rules.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SettingsOwner {
    Campaign(CampaignKey),
    Site(SiteId),
}

/// Past this many cached campaigns, expired entries are dropped on the next insert.
const PRUNE_ABOVE: usize = 100_000;

pub struct SettingsCache {
    store: Arc<dyn Store>,
    lifetime: Duration,
    entries: Mutex<Entries>,
}

struct Entries {
    map: HashMap<SettingsOwner, (Instant, Arc<SettingsHistory>)>,
    /// Size at which expired entries are next swept; doubles when a sweep frees little, so
    /// sweeping stays amortised O(1) per insert however many campaigns are live.
    sweep_at: usize,
}

impl SettingsCache {
    pub fn new(store: Arc<dyn Store>, lifetime: Duration) -> Self {
        Self {
            store,
            lifetime,
            entries: Mutex::new(Entries {
                map: HashMap::new(),
                sweep_at: PRUNE_ABOVE,
            }),
        }
    }

    /// How long a cached configuration may be used.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// How far back readers widen a day's bucket coverage: as defence in depth, they also read
    /// what a change made closer than the write rules allow could have left behind (a stale
    /// cache, an event timestamped ahead of the clock).
    pub fn read_staleness(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.lifetime).unwrap_or_else(|_| chrono::Duration::zero())
            + MAX_FUTURE_SKEW
    }

    pub async fn history(&self, campaign: CampaignKey) -> Result<Arc<SettingsHistory>, StoreError> {
        self.get(SettingsOwner::Campaign(campaign)).await
    }

    pub async fn site_history(&self, site: &SiteId) -> Result<Arc<SettingsHistory>, StoreError> {
        self.get(SettingsOwner::Site(site.clone())).await
    }

    async fn get(&self, owner: SettingsOwner) -> Result<Arc<SettingsHistory>, StoreError> {
        if let Some(history) = self.cached(&owner) {
            return Ok(history);
        }
        let history = Arc::new(match &owner {
            SettingsOwner::Campaign(campaign) => self.store.campaign_settings(*campaign).await?,
            SettingsOwner::Site(site) => self.store.site_settings(site).await?,
        });
        let mut entries = self.lock();
        if entries.map.len() >= entries.sweep_at {
            let lifetime = self.lifetime;
            entries
                .map
                .retain(|_, (fetched, _)| fetched.elapsed() < lifetime);
            entries.sweep_at = PRUNE_ABOVE.max(entries.map.len() * 2);
        }
        entries
            .map
            .insert(owner, (Instant::now(), Arc::clone(&history)));
        Ok(history)
    }

    /// Drops an entry, after this process changed those settings.
    pub fn forget(&self, owner: &SettingsOwner) {
        self.lock().map.remove(owner);
    }

    fn cached(&self, owner: &SettingsOwner) -> Option<Arc<SettingsHistory>> {
        let entries = self.lock();
        let (fetched, history) = entries.map.get(owner)?;
        (fetched.elapsed() < self.lifetime).then(|| Arc::clone(history))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A panic while holding this lock cannot leave the map inconsistent: keep using it.
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
