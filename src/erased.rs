//! What every process keeps of all erasures: the store's key for subject hashes and the hashes
//! of erased subjects, so that a re-sent old event of an erased subject is dropped at ingest
//! (docs/API.md, "Privacy"). Loaded at start and again every [`REFRESH`], so an erasure made
//! on another process is known here within that time.

use crate::domain::beacon::{Guid, SiteId};
use crate::domain::ids::{AdvertiserId, UserId};
use crate::domain::privacy::{ErasedSubject, PrivacyKey, Subject, SubjectHash};
use crate::store::{StoreError, SubjectStore};
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// How often the erased subjects are read again.
pub(crate) const REFRESH: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Known {
    key: Option<PrivacyKey>,
    erased: HashMap<SubjectHash, Vec<ErasedSubject>>,
}

pub(crate) struct ErasedSubjects {
    store: Arc<dyn SubjectStore>,
    known: RwLock<Known>,
}

impl ErasedSubjects {
    pub(crate) fn new(store: Arc<dyn SubjectStore>) -> Self {
        Self {
            store,
            known: RwLock::new(Known::default()),
        }
    }

    /// The store's key, created by the first process that needs one.
    pub(crate) async fn key(&self) -> Result<PrivacyKey, StoreError> {
        if let Some(key) = self.read().key.clone() {
            return Ok(key);
        }
        let key = self.store.privacy_key(&PrivacyKey::generate()).await?;
        self.write().key = Some(key.clone());
        Ok(key)
    }

    /// Reads every erasure's subject again.
    pub(crate) async fn refresh(&self) -> Result<(), StoreError> {
        self.key().await?;
        let mut erased: HashMap<SubjectHash, Vec<ErasedSubject>> = HashMap::new();
        for subject in self.store.erased_subjects().await? {
            erased
                .entry(subject.subject_hash)
                .or_default()
                .push(subject);
        }
        self.write().erased = erased;
        Ok(())
    }

    /// Knows an erasure at once on the process that recorded it.
    pub(crate) fn add(&self, subject: ErasedSubject) {
        let mut known = self.write();
        let same = known.erased.entry(subject.subject_hash).or_default();
        if !same.contains(&subject) {
            same.push(subject);
        }
    }

    /// Whether an event of `user`, of `advertiser`, timed `at`, belongs to an erasure: stored
    /// before it was requested, it would have been erased.
    pub(crate) fn drops(&self, user: UserId, advertiser: AdvertiserId, at: DateTime<Utc>) -> bool {
        let known = self.read();
        // No hash is computed while nothing was ever erased.
        if known.erased.is_empty() {
            return false;
        }
        let Some(key) = &known.key else {
            return false;
        };
        known
            .erased
            .get(&key.hash(&Subject::User(user)))
            .is_some_and(|erasures| erasures.iter().any(|erased| erased.covers(advertiser, at)))
    }

    /// Whether a beacon of the visitor `guid` of `site`, timed `at`, belongs to an erasure.
    pub(crate) fn drops_beacon(&self, site: &SiteId, guid: &Guid, at: DateTime<Utc>) -> bool {
        let known = self.read();
        if known.erased.is_empty() {
            return false;
        }
        let Some(key) = &known.key else {
            return false;
        };
        let visitor = Subject::Visitor {
            site: site.clone(),
            guid: guid.clone(),
        };
        known
            .erased
            .get(&key.hash(&visitor))
            .is_some_and(|erasures| erasures.iter().any(|erased| erased.covers_beacon(at)))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Known> {
        self.known
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Known> {
        self.known
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
