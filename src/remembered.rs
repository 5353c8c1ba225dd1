//! A bounded memory of what this process already wrote once (a day-index entry), so repeated
//! requests skip the write. Past its capacity it starts over: forgetting only costs one more
//! idempotent write.

use std::collections::HashSet;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};

pub(crate) struct Remembered<K> {
    keys: Mutex<HashSet<K>>,
    capacity: usize,
}

impl<K: Hash + Eq> Remembered<K> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            keys: Mutex::new(HashSet::new()),
            capacity: capacity.max(1),
        }
    }

    pub(crate) fn contains(&self, key: &K) -> bool {
        self.lock().contains(key)
    }

    pub(crate) fn remember(&self, keys: impl IntoIterator<Item = K>) {
        let mut remembered = self.lock();
        for key in keys {
            if remembered.len() >= self.capacity {
                remembered.clear();
            }
            remembered.insert(key);
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<K>> {
        // A set of markers stays usable whatever panicked while holding it.
        self.keys
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_up_to_its_capacity_then_starts_over() {
        let remembered = Remembered::new(2);
        remembered.remember([1, 2]);
        assert!(remembered.contains(&1) && remembered.contains(&2));
        remembered.remember([3]);
        assert!(remembered.contains(&3) && !remembered.contains(&1));
    }
}
