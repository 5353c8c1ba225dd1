//! The retention sweep (`--retain-raw`, docs/DESIGN.md "Retention"): every so often, the raw
//! events of UTC days that began more than the retention ago are deleted on either store,
//! found through the day index (which campaigns and sites had events on which day), never by
//! scanning events. Rollups stay: a summary of such a day answers from its seal, until its
//! rollups expire in turn (`--retain-aggregates`, swept here on the embedded store).

use crate::domain::owner::{Owner, OwnerKind};
use crate::domain::retention::Retention;
use crate::domain::time::{Day, EventTime};
use crate::periodic::{OutageLog, ticks};
use crate::query::plan::{campaign_partitions, visit_partitions};
use crate::settings::SettingsCache;
use crate::store::{ExpiredDays, Store, StoreError, Swept};
use chrono::{DateTime, TimeDelta, Utc};
use futures::{StreamExt, TryStreamExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Day-index partitions read at once by a pass.
const DAYS_IN_FLIGHT: usize = 16;

/// What is kept and how often the sweep looks.
#[derive(Debug, Clone, Copy)]
pub struct RetentionOptions {
    /// Raw events of a day are deleted this long after it began (`--retain-raw`).
    pub raw: Retention,
    /// Rollups of a day are deleted this long after it began (`--retain-aggregates`; on
    /// Cassandra by their TTL).
    pub aggregates: Retention,
    /// How often the sweep runs: days expire a day at a time, so hourly is plenty.
    pub interval: Duration,
}

impl Default for RetentionOptions {
    fn default() -> Self {
        Self {
            raw: Retention::Forever,
            aggregates: Retention::Forever,
            interval: Duration::from_secs(3600),
        }
    }
}

/// Deletes expired raw days.
pub struct Sweeper {
    store: Arc<dyn Store>,
    settings: Arc<SettingsCache>,
    options: RetentionOptions,
    /// The first day this process has not swept through yet (none: it has swept nothing).
    /// Its first pass reads the day index back to the earliest day an event may have.
    swept_before: Mutex<Option<Day>>,
    /// The first kept day of this process's last sweep of rollups: days expire a day at a
    /// time, so the hourly passes between two of them have nothing to do.
    rollups_swept_before: Mutex<Option<Day>>,
}

impl Sweeper {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        settings: Arc<SettingsCache>,
        options: RetentionOptions,
    ) -> Self {
        Self {
            store,
            settings,
            options,
            swept_before: Mutex::new(None),
            rollups_swept_before: Mutex::new(None),
        }
    }

    /// Deletes the raw events of every owner-day the day index lists before the first day
    /// kept at `now`, in the days this process has not swept yet.
    pub async fn sweep_once(&self, now: DateTime<Utc>) -> Result<Swept, StoreError> {
        let Some(kept) = self.options.raw.first_kept_day(now) else {
            return Ok(Swept::default());
        };
        let from = self
            .swept_before()
            .unwrap_or_else(|| Day::new(EventTime::earliest().date_naive()));
        if from >= kept {
            return Ok(Swept::default());
        }
        let last = Day::new(kept.date() - TimeDelta::days(1));
        let store = &self.store;
        let found: Vec<(Day, Vec<Owner>)> = futures::stream::iter(from.through(last))
            .map(|day| async move {
                let mut owners = store.owners_of_day(OwnerKind::Campaign, day).await?;
                owners.extend(store.owners_of_day(OwnerKind::Site, day).await?);
                Ok::<_, StoreError>((day, owners))
            })
            .buffered(DAYS_IN_FLIGHT)
            .try_filter(|(_, owners)| std::future::ready(!owners.is_empty()))
            .try_collect()
            .await?;
        let mut by_owner: HashMap<Owner, Vec<Day>> = HashMap::new();
        for (day, owners) in found {
            for owner in owners {
                by_owner.entry(owner).or_default().push(day);
            }
        }
        let mut swept = Swept::default();
        for (owner, days) in by_owner {
            swept += self.drop_days(&owner, days, kept).await?;
        }
        *lock(&self.swept_before) = Some(kept);
        Ok(swept)
    }

    /// Deletes one owner's raw events of the days from `first` up to the first day kept at
    /// `now`, whatever the day index lists: for an operator's clean-up of one campaign or
    /// site, and for tests, which must not sweep other tests' days.
    pub async fn sweep_owner(
        &self,
        owner: &Owner,
        first: Day,
        now: DateTime<Utc>,
    ) -> Result<Swept, StoreError> {
        let Some(kept) = self.options.raw.first_kept_day(now) else {
            return Ok(Swept::default());
        };
        let days: Vec<Day> = first.through(kept).filter(|day| *day < kept).collect();
        if days.is_empty() {
            return Ok(Swept::default());
        }
        self.drop_days(owner, days, kept).await
    }

    /// Deletes the rollups of days before the first kept at `now` under `--retain-aggregates`
    /// (on the embedded store; Cassandra's expire by their TTL), once per first kept day.
    pub async fn sweep_rollups(&self, now: DateTime<Utc>) -> Result<Swept, StoreError> {
        let Some(kept) = self.options.aggregates.first_kept_day(now) else {
            return Ok(Swept::default());
        };
        if lock(&self.rollups_swept_before).is_some_and(|day| day >= kept) {
            return Ok(Swept::default());
        }
        let mut swept = Swept::default();
        for (kind, label) in [(OwnerKind::Campaign, "campaign"), (OwnerKind::Site, "site")] {
            let dropped = self.store.drop_expired_rollups(kind, kept).await?;
            metrics::counter!("adevents_retention_swept_rollup_ranges_total", "owner" => label)
                .increment(dropped.ranges);
            metrics::counter!("adevents_retention_swept_rollup_rows_total", "owner" => label)
                .increment(dropped.rows);
            swept += dropped;
        }
        *lock(&self.rollups_swept_before) = Some(kept);
        Ok(swept)
    }

    fn swept_before(&self) -> Option<Day> {
        *lock(&self.swept_before)
    }

    async fn drop_days(
        &self,
        owner: &Owner,
        days: Vec<Day>,
        kept: Day,
    ) -> Result<Swept, StoreError> {
        let history = self.settings.history(owner).await?;
        let staleness = self.settings.read_staleness();
        let expired = match owner {
            Owner::Campaign(campaign) => ExpiredDays::Campaign {
                campaign: *campaign,
                partitions: campaign_partitions(
                    *campaign,
                    days.iter().copied(),
                    &history,
                    staleness,
                )
                .into_iter()
                .flat_map(|(_, partitions)| partitions)
                .collect(),
                days,
                kept,
            },
            Owner::Site(site) => ExpiredDays::Site {
                site: site.clone(),
                partitions: days
                    .iter()
                    .flat_map(|day| visit_partitions(site, *day, &history, staleness))
                    .collect(),
                days,
            },
        };
        let swept = self.store.drop_expired_days(&expired).await?;
        let kind = match owner {
            Owner::Campaign(_) => "campaign",
            Owner::Site(_) => "site",
        };
        metrics::counter!("adevents_retention_swept_ranges_total", "owner" => kind)
            .increment(swept.ranges);
        metrics::counter!("adevents_retention_swept_rows_total", "owner" => kind)
            .increment(swept.rows);
        Ok(swept)
    }

    /// Sweeps every `interval` until the task is aborted, the first time at once: a process
    /// that starts after a long stop catches up before it serves for long.
    pub(crate) fn spawn(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut ticks = ticks(self.options.interval);
            let mut outage = OutageLog::new(
                "deleting the raw events of days past --retain-raw failed; retrying at the next pass",
                Some("deleting expired raw events works again"),
            );
            let mut rollup_outage = OutageLog::new(
                "deleting the rollups of days past --retain-aggregates failed; retrying at the next pass",
                Some("deleting expired rollups works again"),
            );
            loop {
                ticks.tick().await;
                let outcome = self.sweep_once(Utc::now()).await;
                report(
                    &outcome,
                    &mut outage,
                    "the raw events of days past --retain-raw",
                );
                let outcome = self.sweep_rollups(Utc::now()).await;
                report(
                    &outcome,
                    &mut rollup_outage,
                    "the rollups of days past --retain-aggregates",
                );
            }
        })
    }
}

/// Logs what a pass deleted, if anything, and its failure once per outage.
fn report(outcome: &Result<Swept, StoreError>, outage: &mut OutageLog, what: &str) {
    if let Ok(swept) = outcome
        && (swept.ranges > 0 || swept.rows > 0)
    {
        tracing::info!(ranges = swept.ranges, rows = swept.rows, "deleted {what}");
    }
    outage.record(outcome);
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A day remembered is usable whatever panicked while it was held.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::bucket::BucketCount;
    use crate::domain::conversion::index::Week;
    use crate::domain::conversion::{
        Action, Conversion, ConversionId, DecidedConversion, ReceivedConversion,
    };
    use crate::domain::event::Impression;
    use crate::domain::ids::{AdId, AdvertiserId, CampaignId, CampaignKey, ImpressionId, UserId};
    use crate::domain::partition::EventPartition;
    use crate::domain::user_data::UserData;
    use crate::store::SettingsStore;
    use crate::store::embedded::{EmbeddedStore, Fsync};
    use uuid::Uuid;

    fn impression(campaign: CampaignKey, at: DateTime<Utc>) -> Impression {
        Impression {
            impression_id: ImpressionId::new(Uuid::new_v4()),
            campaign,
            ad_id: AdId::new(Uuid::new_v4()),
            user_id: UserId::new(Uuid::new_v4()),
            timestamp: EventTime::from_stored(at),
            user_ip: None,
            user_data: UserData::default(),
            user_agent: None,
            invalid: None,
            pixel_arrival: None,
            ip_is_viewers: true,
        }
    }

    fn embedded_store(folder: &tempfile::TempDir) -> Arc<dyn Store> {
        Arc::new(EmbeddedStore::open_for_test(folder.path(), Fsync::Never))
    }

    /// A sweeper of `store` that keeps raw events 30 days.
    fn keeping_30_days(store: &Arc<dyn Store>) -> Sweeper {
        let settings: Arc<dyn SettingsStore> = store.clone();
        Sweeper::new(
            Arc::clone(store),
            Arc::new(SettingsCache::new(settings, Duration::from_secs(10))),
            RetentionOptions {
                raw: Retention::parse("30days").expect("a retention"),
                ..RetentionOptions::default()
            },
        )
    }

    /// Stores `count` impressions of `campaign` on `day` as ingestion does (the day indexed).
    async fn stored(store: &Arc<dyn Store>, campaign: CampaignKey, day: Day, count: usize) {
        let partition = EventPartition {
            campaign,
            day,
            bucket: BucketCount::ONE.bucket_of(Uuid::nil()),
        };
        let events: Vec<Impression> = (0..count)
            .map(|n| impression(campaign, day.start_utc() + TimeDelta::minutes(n as i64)))
            .collect();
        store
            .write_impressions(&partition, &events)
            .await
            .expect("written");
        store
            .mark_day(&Owner::Campaign(campaign), day)
            .await
            .expect("indexed");
    }

    async fn left(store: &Arc<dyn Store>, campaign: CampaignKey, day: Day) -> usize {
        let partition = EventPartition {
            campaign,
            day,
            bucket: BucketCount::ONE.bucket_of(Uuid::nil()),
        };
        store
            .read_impression_summaries(&partition)
            .await
            .expect("read")
            .len()
    }

    #[tokio::test]
    async fn a_pass_drops_the_days_the_day_index_lists_before_the_first_kept_one() {
        let folder = tempfile::tempdir().expect("temp dir");
        let store = embedded_store(&folder);
        let campaign = |n: u128| CampaignKey {
            advertiser_id: AdvertiserId::new(Uuid::from_u128(1)),
            campaign_id: CampaignId::new(Uuid::from_u128(n)),
        };
        let day = |text: &str| Day::new(text.parse().expect("date"));
        // Two campaigns side by side in key order, with expired and kept days each.
        for n in [1, 2] {
            stored(&store, campaign(n), day("2026-09-01"), 30).await;
            stored(&store, campaign(n), day("2026-09-20"), 30).await;
            stored(&store, campaign(n), day("2026-10-30"), 30).await;
        }
        let sweeper = keeping_30_days(&store);
        let now: DateTime<Utc> = "2026-10-31T12:00:00Z".parse().expect("instant");
        let swept = sweeper.sweep_once(now).await.expect("swept");
        assert!(swept.ranges > 0, "{swept:?}");
        for n in [1, 2] {
            assert_eq!(left(&store, campaign(n), day("2026-09-01")).await, 0);
            assert_eq!(left(&store, campaign(n), day("2026-09-20")).await, 0);
            assert_eq!(left(&store, campaign(n), day("2026-10-30")).await, 30);
        }
        // The day index no longer lists the swept days, and a second pass has nothing to do.
        let listed = store
            .owners_of_day(OwnerKind::Campaign, day("2026-09-20"))
            .await
            .expect("read");
        assert!(listed.is_empty(), "{listed:?}");
        assert_eq!(
            sweeper.sweep_once(now).await.expect("swept"),
            Swept::default()
        );
    }

    /// A conversion of `user` at `at`, decided unattributed, as the decider leaves it.
    async fn converted(store: &Arc<dyn Store>, id: &str, user: UserId, at: &str) -> ConversionId {
        let conversion_id = ConversionId::new(id).expect("an id");
        let conversion = Conversion {
            advertiser_id: AdvertiserId::new(Uuid::from_u128(1)),
            conversion_id: conversion_id.clone(),
            action: Action::new("purchase").expect("an action"),
            timestamp: EventTime::from_stored(at.parse().expect("instant")),
            click_id: None,
            impression_id: None,
            user_id: Some(user),
            value: None,
        };
        let received = conversion.timestamp.instant();
        let copy = ReceivedConversion {
            conversion: conversion.clone(),
            received,
            copy: Uuid::new_v4(),
        };
        store
            .write_conversion_copies(&[copy], &[])
            .await
            .expect("stored");
        let decided = DecidedConversion {
            conversion,
            received,
            attribution: None,
        };
        let decided = store.decide_conversion(&decided).await.expect("decided");
        store.write_decided(&[decided]).await.expect("listed");
        conversion_id
    }

    #[tokio::test]
    async fn a_pass_drops_expired_conversions_whole_and_the_lines_of_expired_weeks() {
        let folder = tempfile::tempdir().expect("temp dir");
        let store = embedded_store(&folder);
        let campaign = CampaignKey {
            advertiser_id: AdvertiserId::new(Uuid::from_u128(1)),
            campaign_id: CampaignId::new(Uuid::from_u128(2)),
        };
        let day = |text: &str| Day::new(text.parse().expect("date"));
        stored(&store, campaign, day("2026-09-01"), 3).await;
        stored(&store, campaign, day("2026-10-30"), 3).await;
        let user = UserId::new(Uuid::from_u128(7));
        // On a day of the campaign's events, on a day without any, and on a kept day.
        let expired = converted(&store, "on-an-event-day", user, "2026-09-01T10:00:00Z").await;
        let unlisted = converted(&store, "on-a-quiet-day", user, "2026-09-12T10:00:00Z").await;
        let kept = converted(&store, "kept", user, "2026-10-30T10:00:00Z").await;
        let sweeper = keeping_30_days(&store);
        let now: DateTime<Utc> = "2026-10-31T12:00:00Z".parse().expect("instant");
        sweeper.sweep_once(now).await.expect("swept");

        let advertiser = campaign.advertiser_id;
        for id in [&expired, &unlisted] {
            let record = store.conversion_record(advertiser, id).await.expect("read");
            assert!(
                record.copies().is_empty() && record.decision().is_none(),
                "{id:?}: {record:?}"
            );
        }
        let record = store
            .conversion_record(advertiser, &kept)
            .await
            .expect("read");
        assert_eq!(
            (record.copies().len(), record.decision().is_some()),
            (1, true)
        );
        // The directory keeps only the kept conversion's week.
        let lines = store.read_subject_weeks(user).await.expect("read");
        let kept_week = Week::of("2026-10-30T10:00:00Z".parse().expect("instant"));
        assert_eq!(
            lines.iter().map(|line| line.week).collect::<Vec<_>>(),
            [kept_week],
            "{lines:?}"
        );
    }
}
