//! The rules of a settings change: when it may take effect, and how it is recorded. A bucket
//! count applies to events by their own timestamp, so a change must take effect after every
//! event already accepted (timestamps may run [`MAX_FUTURE_SKEW`] ahead of the clock) and after
//! every server process has dropped its cached copy (the cache lifetime): no stored event is
//! ever read under a bucket count it was not written with.

use super::cache::SettingsCache;
use crate::domain::bucket::BucketCount;
use crate::domain::campaign::CampaignSettings;
use crate::domain::owner::Owner;
use crate::domain::time::MAX_FUTURE_SKEW;
use crate::store::{SettingsStore, StoreError};
use chrono::{DateTime, TimeDelta, Utc};
use std::sync::Arc;

/// A change as asked for, already parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsChange {
    pub buckets: BucketCount,
    /// `None`: the earliest instant allowed.
    pub effective_from: Option<DateTime<Utc>>,
    /// Campaigns only; ignored for sites.
    pub daily_cap: Option<u64>,
}

/// Why a change was refused.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    #[error("is in the past; a change can only apply to events still to come")]
    InThePast,
    #[error(
        "must be at least {lead_seconds} seconds ahead: events may carry timestamps 10 minutes \
         ahead of the clock, and every server process must learn the change first"
    )]
    TooSoon { lead_seconds: i64 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A configuration as it is now: the newest entry and the bucket count in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentSettings {
    /// The newest configuration, possibly scheduled for the future.
    pub latest: CampaignSettings,
    pub in_force: BucketCount,
}

/// Reads and changes campaign and site settings.
pub struct Settings {
    store: Arc<dyn SettingsStore>,
    cache: Arc<SettingsCache>,
}

impl Settings {
    pub fn new(store: Arc<dyn SettingsStore>, cache: Arc<SettingsCache>) -> Self {
        Self { store, cache }
    }

    /// How far ahead of `now` a change must take effect.
    fn lead(&self) -> TimeDelta {
        TimeDelta::from_std(self.cache.lifetime()).unwrap_or_default() + MAX_FUTURE_SKEW
    }

    /// When a change asked for at `now` takes effect: the instant given, or the earliest
    /// allowed.
    pub fn effective_from(
        &self,
        asked: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Result<DateTime<Utc>, ChangeError> {
        let earliest = now + self.lead();
        match asked {
            None => Ok(earliest),
            Some(instant) if instant < now => Err(ChangeError::InThePast),
            Some(instant) if instant < earliest => Err(ChangeError::TooSoon {
                lead_seconds: self.lead().num_seconds(),
            }),
            Some(instant) => Ok(instant),
        }
    }

    /// Records `change` for `owner` and forgets this process's cached copy.
    pub async fn change(
        &self,
        owner: &Owner,
        change: SettingsChange,
        now: DateTime<Utc>,
    ) -> Result<CampaignSettings, ChangeError> {
        let settings = CampaignSettings {
            buckets: change.buckets,
            effective_from: self.effective_from(change.effective_from, now)?,
            daily_cap: match owner {
                Owner::Campaign(_) => change.daily_cap,
                Owner::Site(_) => None,
            },
        };
        self.store.put_settings(owner, &settings).await?;
        self.cache.forget(owner);
        Ok(settings)
    }

    /// The owner's configuration as stored now (not from the cache: an operator checking a
    /// change sees it at once).
    pub async fn current(
        &self,
        owner: &Owner,
        now: DateTime<Utc>,
    ) -> Result<CurrentSettings, StoreError> {
        let history = self.store.settings(owner).await?;
        Ok(CurrentSettings {
            latest: history.latest(),
            in_force: history.buckets_at(now),
        })
    }
}
