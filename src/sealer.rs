//! Sealing closed days (docs/DESIGN.md, "Sealing closed days"): once a UTC day is past the
//! grace period for late events, each campaign's and site's day is aggregated once from the
//! raw tables into a rollup, and summaries and unique-visitor queries read that small rollup
//! from then on. A late event for a sealed day marks it (the write paths mark by the event's
//! age, [`SealingRule::is_late`], never by reading the seal), which makes queries read the raw
//! partitions again until the next seal: answers stay exact throughout.
//!
//! Which days: every owner-day in the late index (a late event marked it, whatever its age: a
//! backfill of last year is sealed within minutes), and every day of the look-back window
//! found in the day index (days that never had a late event). One seal at a time, so sealing
//! never takes more of the store than one query does.
//!
//! Safe with several server processes: a seal writes absolute rows, the same from the same
//! raw data, and its `sealed_from` (the start of its read) decides with `late_at` whether the
//! rollup may answer; two seals of one day at once only repeat each other's work.

use crate::domain::beacon::SiteId;
use crate::domain::ids::CampaignKey;
use crate::domain::owner::{Owner, OwnerKind};
use crate::domain::retention::Retention;
use crate::domain::sealing::SealingRule;
use crate::domain::slices::SliceRule;
use crate::domain::time::Day;
use crate::domain::view::ViewWindow;
use crate::query::FanOut;
use crate::query::aggregate::{BillableWindow, DayRead, aggregate_day};
use crate::query::features::{most_visited_per_feature, sealed_feature_values};
use crate::query::open_day::{OpenDayRead, read_open_day};
use crate::query::site_day::{SITE_DAY_BYTES, SiteDayParts};
use crate::settings::SettingsCache;
use crate::store::{ReachLevel, RollupPart, SiteRollup, Store, StoreError};
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How many days of marks the sealer reads from the late index each pass (the index keeps ten).
const LATE_INDEX_SCAN_DAYS: i64 = 8;
/// How long before a day's raw events expire the sealer leaves it alone: longer than a seal
/// of one day takes, so no seal reads a day while it expires.
const EXPIRY_MARGIN: TimeDelta = TimeDelta::hours(1);
/// Owner-days whose seal this process knows, so marks it has handled cost no read; past this
/// many it starts over.
const KNOWN_SEALS: usize = 100_000;

/// When and how far back the sealer works.
#[derive(Debug, Clone, Copy)]
pub struct SealerOptions {
    /// When an event is late and a day may be sealed.
    pub rule: SealingRule,
    /// How many days back the background sealer scans the day index for days to seal; days
    /// with a late mark are found in the late index whatever their age.
    pub(crate) lookback_days: u32,
    /// How often the background sealer looks.
    pub(crate) interval: Duration,
    pub(crate) window: BillableWindow,
    pub(crate) view_window: ViewWindow,
    pub(crate) fan_out: FanOut,
    /// When slices of days not yet sealed close (`None`: slices are not aggregated, and a
    /// seal reads the day raw).
    pub(crate) open_days: Option<SliceRule>,
    /// How long raw events are kept (`--retain-raw`): a day whose raw events are gone, or go
    /// before a seal could finish, keeps the rollup it has.
    pub(crate) retain_raw: Retention,
    /// What one pass over a site-day may hold (`--seal-memory`).
    pub(crate) site_day_bytes: usize,
}

impl Default for SealerOptions {
    fn default() -> Self {
        Self {
            rule: SealingRule::default(),
            lookback_days: 7,
            interval: Duration::from_secs(60),
            window: BillableWindow::DEFAULT,
            view_window: ViewWindow::default(),
            fan_out: FanOut { concurrency: 64 },
            open_days: Some(SliceRule::default()),
            retain_raw: Retention::Forever,
            site_day_bytes: SITE_DAY_BYTES,
        }
    }
}

impl SealerOptions {
    /// These options with `bytes` for what one pass over a site-day may hold
    /// (`--seal-memory`).
    pub fn with_site_day_bytes(mut self, bytes: usize) -> Self {
        self.site_day_bytes = bytes;
        self
    }
}

/// What is sealed, as the latest pass found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealProgress {
    pub(crate) as_of: DateTime<Utc>,
    /// The newest day such that every closed day up to it is sealed (days older than the
    /// look-back window count as sealed unless the late index says otherwise).
    pub(crate) sealed_through: Option<Day>,
    /// Owner-days whose late events wait for their next seal.
    pub(crate) late_days: usize,
}

/// The latest progress, shared by the sealer and `/v1/freshness`.
pub(crate) type SharedProgress = Arc<Mutex<Option<SealProgress>>>;

/// Seals days: what the background task and `adevents rollup` share.
pub struct Sealer {
    store: Arc<dyn Store>,
    settings: Arc<SettingsCache>,
    options: SealerOptions,
    progress: SharedProgress,
    /// When the read behind each owner-day's seal started, as far as this process knows.
    known_seals: Mutex<HashMap<(Owner, Day), DateTime<Utc>>>,
}

impl Sealer {
    pub fn new(
        store: Arc<dyn Store>,
        settings: Arc<SettingsCache>,
        options: SealerOptions,
        progress: SharedProgress,
    ) -> Self {
        Self {
            store,
            settings,
            options,
            progress,
            known_seals: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn rule(&self) -> SealingRule {
        self.options.rule
    }

    /// Whether `day` is left as it is at `now`: its raw events are past `--retain-raw`, or
    /// will be within [`EXPIRY_MARGIN`], so a seal would read what is left of them (or what
    /// the sweep deletes meanwhile) and replace a complete rollup with a partial one.
    pub(crate) fn keeps_rollup(&self, day: Day, now: DateTime<Utc>) -> bool {
        self.options.retain_raw.expired(day, now + EXPIRY_MARGIN)
    }

    /// Aggregates one campaign-day from its raw partitions and stores the rollup.
    pub async fn seal_campaign_day(
        &self,
        campaign: CampaignKey,
        day: Day,
    ) -> Result<(), StoreError> {
        self.seal_campaign_day_from(campaign, day, read_start())
            .await
    }

    async fn seal_campaign_day_from(
        &self,
        campaign: CampaignKey,
        day: Day,
        read_started: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let settings = &self.settings;
        let history = settings.history(&Owner::Campaign(campaign)).await?;
        let read = DayRead::of_day(
            campaign,
            day,
            &history,
            settings.read_staleness(),
            (ReachLevel::ALL.to_vec(), self.options.view_window),
        );
        let store = self.store.as_ref();
        let concurrency = self.options.fan_out.concurrency;
        let owner = Owner::Campaign(campaign);
        // A day never sealed starts from its slice aggregates; one sealed before was read raw
        // since its late mark, and is sealed from its raw partitions again.
        let open_rule = self.options.open_days;
        let never_sealed = store.seal_state(&owner, day).await?.sealed_from.is_none();
        let aggregate = match open_rule.filter(|_| never_sealed) {
            Some(rule) => {
                let open = OpenDayRead {
                    campaign,
                    day,
                    partitions: read.partitions.clone(),
                    levels: read.levels.clone(),
                    window: self.options.window,
                    view_window: self.options.view_window,
                    rule,
                    now: Utc::now(),
                    concurrency,
                    find_duplicates: Some(history.counts_in_force(day, settings.read_staleness())),
                };
                read_open_day(store, &open, None, None).await?.0
            }
            None => aggregate_day(store, &read, self.options.window, concurrency).await?,
        };
        store
            .write_campaign_rollup(campaign, day, &aggregate.to_rollup(day), read_started)
            .await?;
        // Delivery counts the day from its sealed total from now on; the live rows of every
        // writer are no longer read for it.
        store
            .write_sealed_counts(campaign, day, &aggregate.billable_slices(day))
            .await?;
        store.delete_live_counts(campaign, day).await?;
        // The rollup answers for the day now: its slices and copies index are not read again.
        store.delete_open_day(campaign, day, &read.partitions).await
    }

    /// Aggregates one site-day from its stored beacons and stores the rollup: exact visits per
    /// 15-minute slice and one merged sketch per hour, for every feature combination. Returns
    /// how many beacons were read.
    pub async fn seal_site_day(&self, site: &SiteId, day: Day) -> Result<usize, StoreError> {
        self.seal_site_day_from(site, day, read_start()).await
    }

    async fn seal_site_day_from(
        &self,
        site: &SiteId,
        day: Day,
        read_started: DateTime<Utc>,
    ) -> Result<usize, StoreError> {
        let store = self.store.as_ref();
        // Half for the part's combinations, half for its rows built to be written.
        let mut parts = SiteDayParts::new(self.options.site_day_bytes / 2);
        let (mut beacons, mut feature_values) = (0, Vec::new());
        // Each part's combinations are stored as it is aggregated, and the day is marked
        // sealed once every part is: its feature values first, so that a sealed day always
        // has them.
        while let Some(aggregate) = parts
            .next(store, &self.settings, (site, day), self.options.fan_out)
            .await?
        {
            beacons = aggregate.beacons;
            feature_values.extend(sealed_feature_values(&aggregate));
            let combinations: Vec<(String, SiteRollup)> = aggregate
                .combinations
                .into_iter()
                .map(|(combination, combination_day)| {
                    let rollup = SiteRollup {
                        visits: combination_day.slices.into_iter().collect(),
                        reach: combination_day
                            .hours
                            .into_iter()
                            .map(|(hour, sketch)| (hour, sketch.into_sketch().to_bytes()))
                            .collect(),
                    };
                    (combination, rollup)
                })
                .collect();
            store
                .write_site_rollup(site, day, &combinations, read_started, RollupPart::More)
                .await?;
        }
        store
            .write_site_features(site, day, &most_visited_per_feature(feature_values))
            .await?;
        store
            .write_site_rollup(site, day, &[], read_started, RollupPart::Last)
            .await?;
        Ok(beacons)
    }

    /// Seals one owner-day with a read that starts at `read_started`.
    async fn seal(
        &self,
        owner: &Owner,
        day: Day,
        read_started: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        match owner {
            Owner::Campaign(campaign) => {
                self.seal_campaign_day_from(*campaign, day, read_started)
                    .await
            }
            Owner::Site(site) => self
                .seal_site_day_from(site, day, read_started)
                .await
                .map(|_| ()),
        }
    }

    /// Seals every owner-day that is due and not current: those in the late index whatever
    /// their age, oldest mark first, then those of the look-back window; returns how many were
    /// sealed, and publishes what is sealed now (`/v1/freshness`).
    pub(crate) async fn seal_due(&self, now: DateTime<Utc>) -> Result<usize, StoreError> {
        let (sealed, progress) = self.pass(now, true).await?;
        *lock(&self.progress) = Some(progress);
        Ok(sealed)
    }

    /// What is sealed now, found by the same reads as a pass but sealing nothing: what
    /// `/v1/freshness` answers before this process's first pass.
    pub(crate) async fn survey(&self, now: DateTime<Utc>) -> Result<SealProgress, StoreError> {
        let (_, progress) = self.pass(now, false).await?;
        let mut published = lock(&self.progress);
        Ok(published.get_or_insert(progress).clone())
    }

    async fn pass(
        &self,
        now: DateTime<Utc>,
        seal: bool,
    ) -> Result<(usize, SealProgress), StoreError> {
        let today = Day::new(now.date_naive());
        let store = self.store.as_ref();
        let mut sealed = 0;
        // Closed days some owner of which is not sealed at the end of this pass.
        let mut unsealed: BTreeSet<Day> = BTreeSet::new();
        let mut late_days = 0;
        let since = Day::new(today.date() - TimeDelta::days(LATE_INDEX_SCAN_DAYS));
        let mut marks = store.late_marks(since).await?;
        marks.sort_by_key(|mark| mark.late_at);
        for mark in marks {
            // A mark of a day past retention (an event stored just before it expired) is
            // not for a seal: the raw events it would read are gone, the rollup stays.
            if self.known_current(&mark.owner, mark.day, mark.late_at)
                || self.keeps_rollup(mark.day, now)
            {
                continue;
            }
            let state = store.seal_state(&mark.owner, mark.day).await?;
            if state.is_current() {
                if let Some(sealed_from) = state.sealed_from {
                    self.remember_seal(&mark.owner, mark.day, sealed_from);
                }
                continue;
            }
            if seal && self.options.rule.may_seal(mark.day, now) {
                self.seal_remembered(&mark.owner, mark.day).await?;
                sealed += 1;
            } else {
                late_days += 1;
                unsealed.insert(mark.day);
            }
        }
        for back in (1..=i64::from(self.options.lookback_days)).rev() {
            let day = Day::new(today.date() - TimeDelta::days(back));
            if self.keeps_rollup(day, now) {
                continue;
            }
            let may_seal = self.options.rule.may_seal(day, now);
            for kind in [OwnerKind::Campaign, OwnerKind::Site] {
                for owner in store.owners_of_day(kind, day).await? {
                    if store.seal_state(&owner, day).await?.is_current() {
                        continue;
                    }
                    if seal && may_seal {
                        self.seal_remembered(&owner, day).await?;
                        sealed += 1;
                    } else {
                        unsealed.insert(day);
                    }
                }
            }
        }
        let yesterday = Day::new(today.date() - TimeDelta::days(1));
        let sealed_through = match unsealed.first() {
            None => Some(yesterday),
            Some(oldest) => oldest.date().pred_opt().map(Day::new),
        };
        let progress = SealProgress {
            as_of: now,
            sealed_through,
            late_days,
        };
        Ok((sealed, progress))
    }

    /// Seals one owner-day and remembers when its read started: the very value the seal
    /// stored, so this process never takes as current a seal the store does not.
    async fn seal_remembered(&self, owner: &Owner, day: Day) -> Result<(), StoreError> {
        let read_started = read_start();
        self.seal(owner, day, read_started).await?;
        self.remember_seal(owner, day, read_started);
        Ok(())
    }

    fn remember_seal(&self, owner: &Owner, day: Day, sealed_from: DateTime<Utc>) {
        let mut known = self
            .known_seals
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if known.len() >= KNOWN_SEALS {
            known.clear();
        }
        known.insert((owner.clone(), day), sealed_from);
    }

    /// Whether a seal this process knows holds a late event marked `late_at` (by the rule of
    /// [`crate::domain::sealing::SealState::is_current`]).
    fn known_current(&self, owner: &Owner, day: Day, late_at: DateTime<Utc>) -> bool {
        let known = self
            .known_seals
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        known.get(&(owner.clone(), day)).is_some_and(|sealed_from| {
            crate::domain::sealing::SealState {
                sealed_from: Some(*sealed_from),
                late_at: Some(late_at),
            }
            .is_current()
        })
    }

    /// Seals due days every `interval` until the task is aborted.
    pub(crate) fn spawn(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let interval = self.options.interval;
            // The first pass waits like every other: start-up, its repair and the first
            // readiness probes go first.
            let first = tokio::time::Instant::now() + interval;
            let mut ticks = tokio::time::interval_at(first, interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                match self.seal_due(Utc::now()).await {
                    Ok(0) => {}
                    Ok(sealed) => {
                        tracing::info!(sealed, "sealed closed campaign- and site-days into rollups")
                    }
                    Err(error) => tracing::warn!(
                        error = %error.chain(),
                        "sealing closed days failed; retrying at the next pass"
                    ),
                }
            }
        })
    }
}

/// The start of a seal's read, in the milliseconds the stores keep. A remembered time finer
/// than the stored one could be current where the stored one is not (a mark exactly
/// [`crate::domain::sealing::SealState::MARGIN`] earlier), and the day would then never be
/// sealed again by this process while `/v1/freshness` counted it as sealed.
pub(crate) fn read_start() -> DateTime<Utc> {
    let now = Utc::now();
    DateTime::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Progress and known seals stay valid whatever panicked while they were held.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{AdvertiserId, CampaignId};
    use crate::store::SettingsStore;
    use crate::store::embedded::{EmbeddedStore, Fsync};
    use uuid::Uuid;

    #[tokio::test]
    async fn what_the_sealer_remembers_of_a_seal_is_what_the_store_keeps() {
        let folder = tempfile::tempdir().expect("temp dir");
        let store: Arc<dyn Store> =
            Arc::new(EmbeddedStore::open_for_test(folder.path(), Fsync::Never));
        let settings: Arc<dyn SettingsStore> = store.clone();
        let sealer = Sealer::new(
            store.clone(),
            Arc::new(SettingsCache::new(settings, Duration::from_secs(10))),
            SealerOptions::default(),
            SharedProgress::default(),
        );
        let day = Day::new("2026-10-01".parse().expect("date"));
        for n in 0..20u128 {
            let owner = Owner::Campaign(CampaignKey {
                advertiser_id: AdvertiserId::new(Uuid::from_u128(1)),
                campaign_id: CampaignId::new(Uuid::from_u128(n + 1)),
            });
            sealer.seal_remembered(&owner, day).await.expect("sealed");
            let stored = store
                .seal_state(&owner, day)
                .await
                .expect("read")
                .sealed_from;
            let remembered = lock(&sealer.known_seals)
                .get(&(owner.clone(), day))
                .copied();
            assert!(stored.is_some());
            assert_eq!(remembered, stored);
        }
    }
}
