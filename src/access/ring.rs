//! A map this process reads from memory and refreshes whole from the store, keeping its own
//! recent changes: a refresh whose read started before a change made here (a key created or
//! revoked) must not undo it, or a revoked key would work again until the next refresh.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

pub(crate) struct Ring<K, V> {
    map: RwLock<HashMap<K, V>>,
    /// Changes made here, newest last, kept for `memory`: `None` is a removal.
    recent: Mutex<Vec<(Instant, K, Option<V>)>>,
    memory: Duration,
}

/// When a refresh's read started.
#[derive(Clone, Copy)]
pub(crate) struct ReadStart(Instant);

impl<K: Eq + Hash + Clone, V: Clone> Ring<K, V> {
    /// A ring that remembers its own changes for `memory` (longer than a refresh takes).
    pub(crate) fn new(memory: Duration) -> Self {
        Self {
            map: RwLock::new(HashMap::new()),
            recent: Mutex::new(Vec::new()),
            memory,
        }
    }

    /// Runs `look` on the value under `key`, if any.
    pub(crate) fn with<T>(&self, key: &K, look: impl FnOnce(&V) -> T) -> Option<T> {
        self.read().get(key).map(look)
    }

    pub(crate) fn insert(&self, key: K, value: V) {
        self.remember(key.clone(), Some(value.clone()));
        self.write().insert(key, value);
    }

    pub(crate) fn remove(&self, key: K) {
        self.remember(key.clone(), None);
        self.write().remove(&key);
    }

    /// Marks the start of a read of the whole map from the store.
    pub(crate) fn read_starts(&self) -> ReadStart {
        ReadStart(Instant::now())
    }

    /// Replaces the map with what a read that started at `start` found, then applies again
    /// every change made here since that read started.
    pub(crate) fn replace(&self, start: ReadStart, entries: impl IntoIterator<Item = (K, V)>) {
        let mut map: HashMap<K, V> = entries.into_iter().collect();
        let mut recent = self.recent();
        recent.retain(|(at, _, _)| at.elapsed() < self.memory);
        for (at, key, value) in recent.iter() {
            if *at >= start.0 {
                match value {
                    Some(value) => map.insert(key.clone(), value.clone()),
                    None => map.remove(key),
                };
            }
        }
        *self.write() = map;
    }

    fn remember(&self, key: K, value: Option<V>) {
        self.recent().push((Instant::now(), key, value));
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<K, V>> {
        // A plain map stays usable whatever panicked while it was held.
        self.map
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<K, V>> {
        self.map
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, Vec<(Instant, K, Option<V>)>> {
        self.recent
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refresh_read_before_a_local_change_does_not_undo_it() {
        let ring: Ring<&str, u32> = Ring::new(Duration::from_secs(60));
        ring.insert("kept", 1);
        let read = ring.read_starts();
        ring.insert("created", 2);
        ring.remove("kept");
        // The store's answer predates both changes.
        ring.replace(read, [("kept", 1), ("other", 3)]);
        assert_eq!(ring.with(&"created", |v| *v), Some(2));
        assert_eq!(ring.with(&"kept", |v| *v), None);
        assert_eq!(ring.with(&"other", |v| *v), Some(3));
        // A later read sees the store as it is.
        ring.replace(ring.read_starts(), [("other", 3)]);
        assert_eq!(ring.with(&"created", |v| *v), None);
    }
}
