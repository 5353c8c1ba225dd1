//! What every process keeps of all erasures: the store's key for subject hashes, the hashes
//! of erased subjects and of the impressions their erasures found, so that a re-sent old event
//! of an erased subject, and a click or view report of an erased impression, is dropped at
//! ingest (docs/API.md, "Privacy"). Loaded at start and again every [`REFRESH`], so an erasure
//! made on another process is known here within that time.

use crate::domain::beacon::{Guid, SiteId};
use crate::domain::ids::{AdvertiserId, ImpressionId, UserId};
use crate::domain::privacy::{ErasedSubject, ErasureId, PrivacyKey, Subject, SubjectHash};
use crate::store::{StoreError, SubjectStore};
use chrono::{DateTime, Utc};
use futures::{StreamExt, stream};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// How often the erased subjects are read again.
pub(crate) const REFRESH: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Known {
    key: Option<PrivacyKey>,
    erased: HashMap<SubjectHash, Vec<ErasedSubject>>,
    /// The keyed hash of every impression an erasure found (32 bytes each, for as long as the
    /// erasure's record is kept).
    impressions: HashSet<SubjectHash>,
    /// Erasures whose impressions were read once after they were done, and again a refresh
    /// later: their set no longer grows. (The second read is for a store whose replicas
    /// answer the pending list's delete before the last hashes.)
    done_once: HashSet<ErasureId>,
    impressions_final: HashSet<ErasureId>,
    /// Whether a refresh has succeeded since the process started: until then a re-sent event
    /// could slip through, so the process is not ready.
    loaded: bool,
}

/// Erasures' impressions read at once.
const READS_AT_ONCE: usize = 16;

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

    /// Reads every erasure's subject again, and the impressions of each erasure that is
    /// pending or newly done.
    pub(crate) async fn refresh(&self) -> Result<(), StoreError> {
        self.key().await?;
        let subjects = self.store.erased_subjects().await?;
        // Read before the impressions: a job records them all before it is done, so an
        // erasure off this list has its whole set stored by now.
        let pending: HashSet<ErasureId> =
            self.store.pending_erasures().await?.into_iter().collect();
        let unread: Vec<ErasureId> = {
            let known = self.read();
            subjects
                .iter()
                .map(|subject| subject.id)
                .filter(|id| !known.impressions_final.contains(id))
                .collect::<HashSet<_>>()
                .into_iter()
                .collect()
        };
        let store = &self.store;
        let read: Vec<(ErasureId, Result<Vec<SubjectHash>, StoreError>)> = stream::iter(unread)
            .map(|id| async move { (id, store.erased_impressions(id).await) })
            .buffer_unordered(READS_AT_ONCE)
            .collect()
            .await;
        let mut erased: HashMap<SubjectHash, Vec<ErasedSubject>> = HashMap::new();
        for subject in subjects {
            erased
                .entry(subject.subject_hash)
                .or_default()
                .push(subject);
        }
        let mut known = self.write();
        known.erased = erased;
        let mut failed = None;
        for (id, hashes) in read {
            // One erasure's set that cannot be read stays unread; the subjects are known.
            let hashes = match hashes {
                Ok(hashes) => hashes,
                Err(error) => {
                    failed = Some(error);
                    continue;
                }
            };
            known.impressions.extend(hashes);
            if !pending.contains(&id) && !known.done_once.insert(id) {
                known.done_once.remove(&id);
                known.impressions_final.insert(id);
            }
        }
        match failed {
            Some(error) => Err(error),
            None => {
                known.loaded = true;
                Ok(())
            }
        }
    }

    /// Whether every erasure was read once since the process started.
    pub(crate) fn is_loaded(&self) -> bool {
        self.read().loaded
    }

    /// Reads every erasure again every [`REFRESH`], on its own timer: a job waits that long
    /// (and a margin) for every process to know what it recorded, so no other work may hold
    /// a refresh back.
    pub(crate) fn spawn_refresh(self: Arc<Self>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut ticks = crate::periodic::ticks(REFRESH);
            let mut failures = crate::periodic::OutageLog::new(
                "cannot read the erased subjects; re-sent events of erasures made since may be stored",
                Some("erased subjects read again"),
            );
            loop {
                ticks.tick().await;
                failures.record(&self.refresh().await);
            }
        })
    }

    /// Knows an erasure's impressions at once on the process that recorded them.
    pub(crate) fn add_impressions(&self, hashes: impl IntoIterator<Item = SubjectHash>) {
        self.write().impressions.extend(hashes);
    }

    /// Whether a click or view report of `impression` of `advertiser` names an impression an
    /// erasure found: stored, nothing could find it to erase it.
    pub(crate) fn drops_of_impression(
        &self,
        advertiser: AdvertiserId,
        impression: ImpressionId,
    ) -> bool {
        self.matches(
            |known| known.impressions.is_empty(),
            |known, key| {
                known
                    .impressions
                    .contains(&key.hash_impression(advertiser, impression))
            },
        )
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
        self.matches(
            |known| known.erased.is_empty(),
            |known, key| {
                known
                    .erased
                    .get(&key.hash(&Subject::User(user)))
                    .is_some_and(|erasures| {
                        erasures.iter().any(|erased| erased.covers(advertiser, at))
                    })
            },
        )
    }

    /// Whether a beacon of the visitor `guid` of `site`, timed `at`, belongs to an erasure.
    pub(crate) fn drops_beacon(&self, site: &SiteId, guid: &Guid, at: DateTime<Utc>) -> bool {
        self.matches(
            |known| known.erased.is_empty(),
            |known, key| {
                let visitor = Subject::Visitor {
                    site: site.clone(),
                    guid: guid.clone(),
                };
                known
                    .erased
                    .get(&key.hash(&visitor))
                    .is_some_and(|erasures| erasures.iter().any(|erased| erased.covers_beacon(at)))
            },
        )
    }

    /// `found` of what is known, under the store's key; false without computing a hash while
    /// `none` says nothing of the kind was ever erased.
    fn matches(
        &self,
        none: impl Fn(&Known) -> bool,
        found: impl Fn(&Known, &PrivacyKey) -> bool,
    ) -> bool {
        let known = self.read();
        if none(&known) {
            return false;
        }
        known.key.as_ref().is_some_and(|key| found(&known, key))
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
