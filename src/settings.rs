//! Campaign settings as requests see them: read from the store and cached in the process for a
//! short lifetime. A change is scheduled at least that lifetime ahead (API.md), so every server
//! process has seen it before it applies; readers also widen their bucket coverage by the same
//! lifetime (`SettingsHistory::buckets_to_read`).

use crate::domain::campaign::SettingsHistory;
use crate::domain::ids::CampaignKey;
use crate::store::{Store, StoreError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Past this many cached campaigns, expired entries are dropped on the next insert.
const PRUNE_ABOVE: usize = 100_000;

pub struct SettingsCache {
    store: Arc<dyn Store>,
    lifetime: Duration,
    entries: Mutex<HashMap<CampaignKey, (Instant, Arc<SettingsHistory>)>>,
}

impl SettingsCache {
    pub fn new(store: Arc<dyn Store>, lifetime: Duration) -> Self {
        Self {
            store,
            lifetime,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// How long a cached configuration may be used.
    pub fn lifetime(&self) -> Duration {
        self.lifetime
    }

    pub async fn history(&self, campaign: CampaignKey) -> Result<Arc<SettingsHistory>, StoreError> {
        if let Some(history) = self.cached(campaign) {
            return Ok(history);
        }
        let history = Arc::new(self.store.campaign_settings(campaign).await?);
        let mut entries = self.lock();
        if entries.len() > PRUNE_ABOVE {
            let lifetime = self.lifetime;
            entries.retain(|_, (fetched, _)| fetched.elapsed() < lifetime);
        }
        entries.insert(campaign, (Instant::now(), Arc::clone(&history)));
        Ok(history)
    }

    /// Drops a campaign's entry, after this process changed its settings.
    pub fn forget(&self, campaign: CampaignKey) {
        self.lock().remove(&campaign);
    }

    fn cached(&self, campaign: CampaignKey) -> Option<Arc<SettingsHistory>> {
        let entries = self.lock();
        let (fetched, history) = entries.get(&campaign)?;
        (fetched.elapsed() < self.lifetime).then(|| Arc::clone(history))
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<CampaignKey, (Instant, Arc<SettingsHistory>)>> {
        // A panic while holding this lock cannot leave the map inconsistent: keep using it.
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
