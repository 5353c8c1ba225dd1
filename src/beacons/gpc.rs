//! Global Privacy Control (docs/API.md, "Privacy"): a beacon sent with `Sec-GPC: 1` to a site
//! that respects it is stored without its visitor. Its guid is replaced by a keyed hash under
//! the key of the beacon's UTC day, so a re-sent beacon is the same beacon (it counts once)
//! while nothing stored links the visitor across days, and no key outlives 48 hours after its
//! day began: a GPC beacon of a day whose key is gone is stored under a random token, with no
//! identity at all.
//!
//! Each day's key is created once per store (the first writer wins: a lightweight transaction
//! on Cassandra, a guarded write on the embedded store) and remembered by each process until
//! its end of life. Cassandra lets the key expire (`USING TTL`); [`DayKeys::start`] deletes the
//! embedded store's, and forgets the remembered ones, every few minutes.

use crate::domain::beacon::{Guid, SiteId};
use crate::domain::privacy::{PrivacyKey, Subject};
use crate::domain::time::Day;
use crate::store::{StoreError, SubjectStore};
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How long after its day begins a day's key is deleted.
pub(crate) const DAY_KEY_LIFETIME: TimeDelta = TimeDelta::hours(48);
/// How often keys past their lifetime are deleted and forgotten.
const SWEEP_PERIOD: Duration = Duration::from_secs(300);
/// Bytes of the keyed hash kept: 128 bits, so two visitors of a day never share one.
const TOKEN_BYTES: usize = 16;

pub(crate) struct DayKeys {
    store: Arc<dyn SubjectStore>,
    known: Mutex<BTreeMap<Day, PrivacyKey>>,
}

/// When `day`'s key is gone.
fn end_of_life(day: Day) -> DateTime<Utc> {
    day.start_utc() + DAY_KEY_LIFETIME
}

/// The first day whose key may still live at `now`: every earlier day's is gone.
fn first_living_day(now: DateTime<Utc>) -> Day {
    Day::new((now - DAY_KEY_LIFETIME).date_naive()).next()
}

fn hex(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        // Writing into a String cannot fail.
        let _ = write!(text, "{byte:02x}");
    }
    text
}

impl DayKeys {
    pub(crate) fn new(store: Arc<dyn SubjectStore>) -> Self {
        Self {
            store,
            known: Mutex::new(BTreeMap::new()),
        }
    }

    /// What a GPC beacon of `site`'s visitor `guid`, of UTC `day`, is stored under at `now`.
    pub(crate) async fn guid_of(
        &self,
        site: &SiteId,
        guid: &Guid,
        day: Day,
        now: DateTime<Utc>,
    ) -> Result<Guid, StoreError> {
        let Some(key) = self.key_of(day, now).await? else {
            metrics::counter!("adevents_gpc_beacons_total", "identity" => "none").increment(1);
            return Ok(Guid::without_visitor(
                &uuid::Uuid::new_v4().simple().to_string(),
            ));
        };
        let visitor = Subject::Visitor {
            site: site.clone(),
            guid: guid.clone(),
        };
        let hash = key.hash(&visitor);
        metrics::counter!("adevents_gpc_beacons_total", "identity" => "day").increment(1);
        Ok(Guid::without_visitor(&hex(&hash.as_bytes()[..TOKEN_BYTES])))
    }

    /// `day`'s key, created by the first process that needs it; `None` once it is gone.
    async fn key_of(&self, day: Day, now: DateTime<Utc>) -> Result<Option<PrivacyKey>, StoreError> {
        let expires = end_of_life(day);
        if now >= expires {
            return Ok(None);
        }
        if let Some(key) = self.lock().get(&day) {
            return Ok(Some(key.clone()));
        }
        let key = self
            .store
            .day_key(day, &PrivacyKey::generate(), expires)
            .await?;
        self.lock().insert(day, key.clone());
        Ok(Some(key))
    }

    /// Forgets the keys past their lifetime and deletes them from the store.
    pub(crate) async fn sweep(&self, now: DateTime<Utc>) -> Result<(), StoreError> {
        let first = first_living_day(now);
        self.lock().retain(|day, _| *day >= first);
        self.store.delete_day_keys(first).await
    }

    /// Sweeps every [`SWEEP_PERIOD`] until the task is aborted.
    pub(crate) fn start(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let keys = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                if let Err(error) = keys.sweep(Utc::now()).await {
                    tracing::warn!(error = %error.chain(), "cannot delete old day keys; retrying");
                }
                tokio::time::sleep(SWEEP_PERIOD).await;
            }
        })
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<Day, PrivacyKey>> {
        // A map of keys stays usable whatever panicked while holding it.
        self.known
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().expect("time")
    }

    fn day(text: &str) -> Day {
        Day::new(text.parse().expect("date"))
    }

    #[test]
    fn a_days_key_lives_48_hours_from_the_days_start() {
        assert_eq!(end_of_life(day("2026-11-28")), at("2026-11-30T00:00:00Z"));
        assert_eq!(
            first_living_day(at("2026-11-30T00:00:00Z")),
            day("2026-11-29")
        );
        assert_eq!(
            first_living_day(at("2026-11-29T23:59:59Z")),
            day("2026-11-28")
        );
    }

    #[tokio::test]
    async fn a_visitor_is_one_token_a_day_and_another_the_next_and_none_once_the_key_is_gone() {
        use crate::store::embedded::{EmbeddedStore, Fsync};
        let folder = tempfile::tempdir().expect("temp dir");
        let store = Arc::new(EmbeddedStore::open_for_test(folder.path(), Fsync::Never));
        let keys = DayKeys::new(Arc::clone(&store) as Arc<dyn SubjectStore>);
        let others = DayKeys::new(store as Arc<dyn SubjectStore>);
        let site = SiteId::parse("shop.example").expect("site");
        let guid = Guid::parse("visitor").expect("guid");
        let now = at("2026-11-29T10:00:00Z");
        let today = keys
            .guid_of(&site, &guid, day("2026-11-29"), now)
            .await
            .expect("a guid");
        assert!(!today.is_visitor());
        assert!(!today.as_str().contains("visitor"));
        // The same on another process of the store: the first key stored wins.
        let elsewhere = others
            .guid_of(&site, &guid, day("2026-11-29"), now)
            .await
            .expect("a guid");
        assert_eq!(today, elsewhere);
        let yesterday = keys
            .guid_of(&site, &guid, day("2026-11-28"), now)
            .await
            .expect("a guid");
        assert_ne!(today, yesterday);
        // Two days later the 29th's key is gone: each beacon gets a token of its own.
        let later = at("2026-12-01T00:00:00Z");
        keys.sweep(later).await.expect("swept");
        let gone = [
            keys.guid_of(&site, &guid, day("2026-11-29"), later).await,
            others.guid_of(&site, &guid, day("2026-11-29"), later).await,
        ];
        let [one, two] = gone.map(|guid| guid.expect("a guid"));
        assert_ne!(one, two);
        assert!(!one.is_visitor());
        assert_ne!(one, today);
    }
}
