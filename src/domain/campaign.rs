//! A campaign's settings over time. A bucket-count change takes effect at an instant, and an
//! event uses the count in force at its own timestamp, so a retried event always lands in the
//! same partition, before or after the change.

use super::bucket::BucketCount;
use super::conversion::attribution::LookBacks;
use super::delivery::Caps;
use super::time::{Day, EventTime};
use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;

/// One configuration of a campaign, in force from `effective_from` until the next one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CampaignSettings {
    pub buckets: BucketCount,
    pub effective_from: DateTime<Utc>,
    /// Billable impressions per local day of `tz`; these three take effect at once (every
    /// entry a change writes carries the newest values).
    pub daily_cap: Option<u64>,
    /// Billable impressions over the campaign's life.
    pub total_cap: Option<u64>,
    /// The zone of the campaign's day, for `daily_cap` and pacing.
    pub tz: Tz,
    /// Post-click and post-view look-backs of conversions; like the caps, the latest apply.
    pub look_backs: LookBacks,
}

impl CampaignSettings {
    /// What a never-configured campaign has: one bucket since the earliest event time.
    pub(crate) fn unconfigured() -> Self {
        Self {
            buckets: BucketCount::ONE,
            effective_from: EventTime::earliest(),
            daily_cap: None,
            total_cap: None,
            tz: Tz::UTC,
            look_backs: LookBacks::DEFAULT,
        }
    }

    /// The caps and the zone delivery is measured against.
    pub(crate) fn caps(&self) -> Caps {
        Caps {
            daily_cap: self.daily_cap,
            total_cap: self.total_cap,
            tz: self.tz,
        }
    }
}

/// Every configuration a campaign ever had, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SettingsHistory(Vec<CampaignSettings>);

impl SettingsHistory {
    pub(crate) fn new(mut entries: Vec<CampaignSettings>) -> Self {
        entries.sort_by_key(|entry| entry.effective_from);
        Self(entries)
    }

    /// The newest configuration (possibly scheduled for the future), or the default.
    /// How many entries take effect after `now` (scheduled, not yet in force).
    pub(crate) fn scheduled_after(&self, now: DateTime<Utc>) -> usize {
        self.0
            .iter()
            .filter(|entry| entry.effective_from > now)
            .count()
    }

    pub(crate) fn latest(&self) -> CampaignSettings {
        self.0
            .last()
            .cloned()
            .unwrap_or_else(CampaignSettings::unconfigured)
    }

    /// The bucket count an event at `instant` is written with.
    pub(crate) fn buckets_at(&self, instant: DateTime<Utc>) -> BucketCount {
        self.0
            .iter()
            .rev()
            .find(|entry| entry.effective_from <= instant)
            .map_or(BucketCount::ONE, |entry| entry.buckets)
    }

    /// Every bucket count in force at some instant of UTC `day` (widened backwards by
    /// `staleness`, as [`Self::buckets_to_read`]), fewest first: a copy of an event lies in
    /// the partition its id has under one of them.
    pub(crate) fn counts_in_force(&self, day: Day, staleness: Duration) -> Vec<BucketCount> {
        let start = day.start_utc() - staleness;
        let end = day.next().start_utc();
        let mut counts = vec![self.buckets_at(start)];
        for entry in &self.0 {
            if entry.effective_from > start && entry.effective_from < end {
                counts.push(entry.buckets);
            }
        }
        counts.sort();
        counts.dedup();
        counts
    }

    /// How many buckets a reader of UTC `day` must cover: every bucket id of every count in
    /// force at some instant of the day. `staleness` widens the window backwards by how long a
    /// server may have used a cached, older configuration, so a change at midnight that some
    /// server learned late cannot hide its events.
    pub(crate) fn buckets_to_read(&self, day: Day, staleness: Duration) -> BucketCount {
        let start = day.start_utc() - staleness;
        let end = day.next().start_utc();
        let mut widest = self.buckets_at(start);
        for entry in &self.0 {
            if entry.effective_from > start && entry.effective_from < end {
                widest = widest.max(entry.buckets);
            }
        }
        widest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("valid")
            .with_timezone(&Utc)
    }

    fn settings(buckets: u16, from: &str) -> CampaignSettings {
        CampaignSettings {
            buckets: BucketCount::new(buckets).expect("valid"),
            effective_from: at(from),
            daily_cap: None,
            total_cap: None,
            tz: chrono_tz::Tz::UTC,
            look_backs: LookBacks::DEFAULT,
        }
    }

    #[test]
    fn an_event_uses_the_count_in_force_at_its_own_time() {
        let history = SettingsHistory::new(vec![
            settings(8, "2026-11-10T12:00:00Z"),
            settings(2, "2026-11-20T00:00:00Z"),
        ]);
        assert_eq!(history.buckets_at(at("2026-11-10T11:59:59Z")).get(), 1);
        assert_eq!(history.buckets_at(at("2026-11-10T12:00:00Z")).get(), 8);
        assert_eq!(history.buckets_at(at("2026-11-25T00:00:00Z")).get(), 2);
    }

    #[test]
    fn readers_cover_every_count_in_force_during_the_day() {
        let history = SettingsHistory::new(vec![
            settings(8, "2026-11-10T12:00:00Z"),
            settings(2, "2026-11-20T00:00:00Z"),
        ]);
        let day = |d: u32| {
            Day::new(
                Utc.with_ymd_and_hms(2026, 11, d, 0, 0, 0)
                    .unwrap()
                    .date_naive(),
            )
        };
        let none = Duration::zero();
        assert_eq!(history.buckets_to_read(day(9), none).get(), 1);
        assert_eq!(history.buckets_to_read(day(10), none).get(), 8);
        assert_eq!(history.buckets_to_read(day(20), none).get(), 2);
        // A server may have written with 8 buckets for a few seconds after midnight.
        assert_eq!(
            history
                .buckets_to_read(day(20), Duration::seconds(10))
                .get(),
            8
        );
        assert_eq!(
            history
                .buckets_to_read(day(21), Duration::seconds(10))
                .get(),
            2
        );
        let counts = |d: u32, staleness: Duration| -> Vec<u16> {
            let counts = history.counts_in_force(day(d), staleness);
            counts.iter().map(BucketCount::get).collect()
        };
        assert_eq!(counts(9, none), [1]);
        assert_eq!(counts(10, none), [1, 8]);
        assert_eq!(counts(11, none), [8]);
        assert_eq!(counts(20, none), [2]);
        assert_eq!(counts(20, Duration::seconds(10)), [2, 8]);
    }

    #[test]
    fn a_never_configured_campaign_has_one_bucket() {
        let history = SettingsHistory::default();
        assert_eq!(history.latest(), CampaignSettings::unconfigured());
        assert_eq!(history.buckets_at(Utc::now()).get(), 1);
    }
}
