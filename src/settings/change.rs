//! The rules of a settings change: when it may take effect, and how it is recorded. A bucket
//! count applies to events by their own timestamp, so a change must take effect after every
//! event already accepted (timestamps may run [`MAX_FUTURE_SKEW`] ahead of the clock) and after
//! every server process has dropped its cached copy (the cache lifetime): no stored event is
//! ever read under a bucket count it was not written with.

use super::cache::SettingsCache;
use crate::domain::bucket::BucketCount;
use crate::domain::campaign::CampaignSettings;
use crate::domain::conversion::LookBack;
use crate::domain::conversion::attribution::LookBacks;
use crate::domain::delivery::Caps;
use crate::domain::owner::Owner;
use crate::domain::time::MAX_FUTURE_SKEW;
use crate::store::{SettingsStore, StoreError};
use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;
use std::sync::Arc;

/// How far ahead a change may be scheduled.
pub(crate) const MAX_SCHEDULE_DAYS: i64 = 366;
/// How many changes may wait to take effect at once (the history every event write reads
/// stays small).
pub(crate) const MAX_SCHEDULED: usize = 100;

/// A change as asked for, already parsed. Absent fields keep their value (a `PUT` merges).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SettingsChange {
    /// A new bucket count; the same count as now schedules nothing.
    pub(crate) buckets: Option<BucketCount>,
    /// When a new bucket count takes effect; `None`: the earliest instant allowed.
    pub(crate) effective_from: Option<DateTime<Utc>>,
    /// Campaigns only: `Some(None)` removes the cap. It takes effect at once.
    pub(crate) daily_cap: Option<Option<u64>>,
    /// Campaigns only, like `daily_cap`: billable impressions over the campaign's life.
    pub(crate) total_cap: Option<Option<u64>>,
    /// Campaigns only: the zone of the campaign's day. It takes effect at once.
    pub(crate) tz: Option<Tz>,
    pub(crate) click_window: Option<LookBack>,
    pub(crate) view_window: Option<LookBack>,
}

/// Why a change was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ChangeError {
    #[error("is in the past; a change can only apply to events still to come")]
    InThePast,
    #[error(
        "must be at least {lead_seconds} seconds ahead: events may carry timestamps 10 minutes \
         ahead of the clock, and every server process must learn the change first"
    )]
    TooSoon { lead_seconds: i64 },
    #[error("is more than {MAX_SCHEDULE_DAYS} days ahead")]
    TooFar,
    #[error("would be the {} scheduled change; at most {MAX_SCHEDULED} changes may wait to take effect", ordinal(MAX_SCHEDULED + 1))]
    TooManyScheduled,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `n` as an English ordinal: 1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, 101st, 111th.
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// A configuration as it is now: the newest entry and the bucket count in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CurrentSettings {
    /// The newest configuration, possibly scheduled for the future.
    pub(crate) latest: CampaignSettings,
    pub(crate) in_force: BucketCount,
}

/// Reads and changes campaign and site settings.
pub(crate) struct Settings {
    store: Arc<dyn SettingsStore>,
    cache: Arc<SettingsCache>,
}

impl Settings {
    pub(crate) fn new(store: Arc<dyn SettingsStore>, cache: Arc<SettingsCache>) -> Self {
        Self { store, cache }
    }

    /// How far ahead of `now` a change must take effect.
    fn lead(&self) -> TimeDelta {
        TimeDelta::from_std(self.cache.lifetime()).unwrap_or_default() + MAX_FUTURE_SKEW
    }

    /// When a change asked for at `now` takes effect: the instant given, or the earliest
    /// allowed.
    pub(crate) fn effective_from(
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
            Some(instant) if instant > now + TimeDelta::days(MAX_SCHEDULE_DAYS) => {
                Err(ChangeError::TooFar)
            }
            Some(instant) => Ok(instant),
        }
    }

    /// Merges `change` into `owner`'s settings and forgets this process's cached copy; returns
    /// the settings now in store. A new bucket count is a new entry, scheduled at its
    /// `effective_from`; caps and zone alone replace the newest entry's (same instant, nothing
    /// scheduled), so they apply at once.
    pub(crate) async fn change(
        &self,
        owner: &Owner,
        change: SettingsChange,
        now: DateTime<Utc>,
    ) -> Result<CurrentSettings, ChangeError> {
        // Checked whenever given, even if the bucket count does not change: a client that
        // sends a time in the past hears about it.
        let effective_from = self.effective_from(change.effective_from, now)?;
        let history = self.store.settings(owner).await?;
        let latest = history.latest();
        let caps = match owner {
            Owner::Campaign(_) => Caps {
                daily_cap: change.daily_cap.unwrap_or(latest.daily_cap),
                total_cap: change.total_cap.unwrap_or(latest.total_cap),
                tz: change.tz.unwrap_or(latest.tz),
            },
            Owner::Site(_) => CampaignSettings::unconfigured().caps(),
        };
        let look_backs = LookBacks {
            click: change.click_window.unwrap_or(latest.look_backs.click),
            view: change.view_window.unwrap_or(latest.look_backs.view),
        };
        let with_caps = |entry: CampaignSettings| CampaignSettings {
            daily_cap: caps.daily_cap,
            total_cap: caps.total_cap,
            tz: caps.tz,
            look_backs,
            ..entry
        };
        let written = match change.buckets.filter(|buckets| *buckets != latest.buckets) {
            Some(_) if history.scheduled_after(now) >= MAX_SCHEDULED => {
                return Err(ChangeError::TooManyScheduled);
            }
            Some(buckets) => Some(with_caps(CampaignSettings {
                buckets,
                effective_from,
                ..latest.clone()
            })),
            None if caps != latest.caps() || look_backs != latest.look_backs => {
                Some(with_caps(latest.clone()))
            }
            None => None,
        };
        if let Some(settings) = written {
            self.store.put_settings(owner, &settings).await?;
            self.cache.forget(owner);
        }
        Ok(self.current(owner, now).await?)
    }

    /// The owner's configuration as stored now (not from the cache: an operator checking a
    /// change sees it at once).
    pub(crate) async fn current(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_take_their_english_suffix() {
        let written: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111, 112, 1000]
            .into_iter()
            .map(ordinal)
            .collect();
        assert_eq!(
            written,
            [
                "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st",
                "111th", "112th", "1000th"
            ]
        );
        assert!(
            ChangeError::TooManyScheduled
                .to_string()
                .starts_with("would be the 101st scheduled change"),
        );
    }
}
