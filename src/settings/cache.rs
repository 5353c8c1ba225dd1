//! Campaign and site settings as requests see them: read from the store and cached in the
//! process for a short lifetime. A change is scheduled at least that lifetime ahead
//! ([`super::change`]), so every server process has seen it before it applies; readers also
//! widen their bucket coverage by the same lifetime (`SettingsHistory::buckets_to_read`).

use crate::domain::campaign::SettingsHistory;
use crate::domain::owner::Owner;
use crate::domain::time::MAX_FUTURE_SKEW;
use crate::store::{SettingsStore, StoreError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Past this many cached owners, expired entries are dropped on the next insert.
const PRUNE_ABOVE: usize = 100_000;

pub struct SettingsCache {
    store: Arc<dyn SettingsStore>,
    lifetime: Duration,
    entries: Mutex<Entries>,
}

struct Entries {
    map: HashMap<Owner, (Instant, Arc<SettingsHistory>)>,
    /// Size at which expired entries are next swept; doubles when a sweep frees little, so
    /// sweeping stays amortised O(1) per insert however many campaigns are live.
    sweep_at: usize,
}

impl SettingsCache {
    pub fn new(store: Arc<dyn SettingsStore>, lifetime: Duration) -> Self {
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
    pub(crate) fn lifetime(&self) -> Duration {
        self.lifetime
    }

    /// How far back readers widen a day's bucket coverage: as defence in depth, they also read
    /// what a change made closer than the write rules allow could have left behind (a stale
    /// cache, an event timestamped ahead of the clock).
    pub(crate) fn read_staleness(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.lifetime).unwrap_or_else(|_| chrono::Duration::zero())
            + MAX_FUTURE_SKEW
    }

    /// The owner's settings history, from the cache while it is fresh.
    pub(crate) async fn history(&self, owner: &Owner) -> Result<Arc<SettingsHistory>, StoreError> {
        if let Some(history) = self.cached(owner) {
            return Ok(history);
        }
        let history = Arc::new(self.store.settings(owner).await?);
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
            .insert(owner.clone(), (Instant::now(), Arc::clone(&history)));
        Ok(history)
    }

    /// Drops an entry, after this process changed those settings.
    pub(crate) fn forget(&self, owner: &Owner) {
        self.lock().map.remove(owner);
    }

    fn cached(&self, owner: &Owner) -> Option<Arc<SettingsHistory>> {
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
