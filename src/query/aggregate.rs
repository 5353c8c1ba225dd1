//! One UTC day of one campaign, aggregated from its raw partitions: impressions, clicks and
//! billable impressions per 15-minute slice and ad, and the users reached as sketches, for the
//! day and per UTC hour, for the campaign and per ad. Any query's rows are sums of slices
//! (exact in every zone whose offset is a multiple of 15 minutes, which is every zone) and
//! unions of day or hour sketches.
//!
//! Counting rules (docs/DESIGN.md, "Counting rules"): an impression counts once per UTC day, at its earliest
//! timestamp; a click counts once per impression, at that impression's first click ever (the
//! click index answers it); a billable impression counts once per user and window
//! (`floor(epoch_seconds / window) × window`), at the time and for the ad of the window's
//! earliest impression. The window divides a day, so no window spans two UTC days and a day is
//! aggregated on its own, exactly, whatever the order or delay in which its events arrived.

use crate::domain::conversion::DecidedConversion;
use crate::domain::conversion::counts::ConversionCounts;
use crate::domain::delivery::DaySlices;
use crate::domain::ids::{AdId, CampaignKey, ImpressionId, UserId};
use crate::domain::partition::EventPartition;
use crate::domain::sketch::{MemberHash, UniqueSketch};
use crate::domain::slices::Span;
use crate::domain::time::{Day, EventTime, HOUR_MILLIS, SLICE_MILLIS};
use crate::domain::traffic::any_valid;
use crate::domain::view::{ViewCounts, ViewWindow};
use crate::query::clicks::first_clicks;
use crate::query::id_map::IdMap;
use crate::query::views::ViewJoin;
use crate::store::{
    ClickRow, EventStore, ImpressionSummaryRow, ReachLevel, Rollup, RollupReach, RollupSlice,
    Store, StoreError,
};
use chrono::{DateTime, Utc};
use futures::{StreamExt, stream};
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::time::Duration;

/// The billable-impression window: a whole number of seconds that divides a day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BillableWindow(u32);

impl BillableWindow {
    pub(crate) const DEFAULT: Self = Self(40);

    pub(crate) fn new(window: Duration) -> Result<Self, String> {
        let seconds = window.as_secs();
        if window.subsec_nanos() != 0 || seconds == 0 || 86_400 % seconds != 0 {
            return Err(
                "must be a whole number of seconds that divides 24 hours (e.g. 40s, 1m, 5m)".into(),
            );
        }
        Ok(Self(seconds as u32))
    }

    /// The window holding `at`.
    pub(crate) fn of(&self, at: EventTime) -> i64 {
        at.epoch_millis().div_euclid(self.millis())
    }

    /// When window `window` (as [`of`](Self::of) numbers it) starts.
    pub(crate) fn start_of(&self, window: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(window.saturating_mul(self.millis()))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }

    /// How long a window lasts.
    pub(crate) fn length(&self) -> chrono::TimeDelta {
        chrono::TimeDelta::seconds(i64::from(self.0))
    }

    fn millis(&self) -> i64 {
        i64::from(self.0) * 1000
    }
}

/// Additive counts of one slice (or any sum of slices). `impressions`, `clicks` and
/// `billable_impressions` count valid events only; invalid traffic is counted beside them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SliceCounts {
    pub(crate) impressions: u64,
    pub(crate) clicks: u64,
    pub(crate) billable_impressions: u64,
    pub(crate) invalid_impressions: u64,
    pub(crate) invalid_clicks: u64,
    /// The view measures of the valid impressions counted here.
    pub(crate) views: ViewCounts,
    /// The conversions credited to the slice's ad at a time in the slice.
    pub(crate) conversions: ConversionCounts,
}

impl SliceCounts {
    pub(crate) fn add(&mut self, other: &SliceCounts) {
        self.impressions += other.impressions;
        self.clicks += other.clicks;
        self.billable_impressions += other.billable_impressions;
        self.invalid_impressions += other.invalid_impressions;
        self.invalid_clicks += other.invalid_clicks;
        self.views.add(&other.views);
        self.conversions.add(&other.conversions);
    }

    /// The counts a rollup or slice aggregate row keeps.
    pub(crate) fn of_row(row: &RollupSlice) -> Self {
        Self {
            impressions: row.impressions,
            clicks: row.clicks,
            billable_impressions: row.billable_impressions,
            invalid_impressions: row.invalid_impressions,
            invalid_clicks: row.invalid_clicks,
            views: row.views,
            conversions: row.conversions.clone(),
        }
    }

    /// The row that keeps these counts of `slice` and `ad_id`.
    pub(crate) fn to_row(&self, slice: i64, ad_id: AdId) -> RollupSlice {
        RollupSlice {
            slice,
            ad_id,
            impressions: self.impressions,
            clicks: self.clicks,
            billable_impressions: self.billable_impressions,
            invalid_impressions: self.invalid_impressions,
            invalid_clicks: self.invalid_clicks,
            views: self.views,
            conversions: self.conversions.clone(),
        }
    }

    /// Counts each of `conversions` (a campaign's, of one UTC day) that `keep` holds, in its
    /// slice and credited ad.
    pub(crate) fn count_conversions(
        slices: &mut BTreeMap<(i64, AdId), SliceCounts>,
        conversions: &[DecidedConversion],
        keep: impl Fn(DateTime<Utc>) -> bool,
    ) {
        for decided in conversions {
            let at = decided.conversion.timestamp;
            let Some(ad) = decided.ad_id().filter(|_| keep(at.instant())) else {
                continue;
            };
            let slice = at.epoch_millis().div_euclid(SLICE_MILLIS);
            slices
                .entry((slice, ad))
                .or_default()
                .conversions
                .count(decided);
        }
    }
}

/// The users reached in one UTC day, at the levels it was read or aggregated with (`None`
/// for the others; see [`ReachLevel`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Reach {
    pub(crate) day: Option<UniqueSketch>,
    pub(crate) ads: Option<HashMap<AdId, UniqueSketch>>,
    /// By hour since the epoch.
    pub(crate) hours: Option<BTreeMap<i64, UniqueSketch>>,
    /// By (hour since the epoch, ad).
    pub(crate) ad_hours: Option<BTreeMap<(i64, AdId), UniqueSketch>>,
}

impl Reach {
    pub(crate) fn with_levels(levels: &[ReachLevel]) -> Self {
        let has = |level| levels.contains(&level);
        Self {
            day: has(ReachLevel::CampaignDay).then(UniqueSketch::new),
            ads: has(ReachLevel::AdDay).then(HashMap::new),
            hours: has(ReachLevel::CampaignHour).then(BTreeMap::new),
            ad_hours: has(ReachLevel::AdHour).then(BTreeMap::new),
        }
    }

    /// Unions `other`'s users into these, level by level (the levels both were read with).
    fn merge(&mut self, other: Reach) {
        match (&mut self.day, other.day) {
            (Some(mine), Some(theirs)) => mine.merge(&theirs),
            (mine @ None, theirs) => *mine = theirs,
            (Some(_), None) => {}
        }
        if let (Some(mine), Some(theirs)) = (&mut self.ads, other.ads) {
            for (ad, users) in theirs {
                mine.entry(ad).or_default().merge(&users);
            }
        }
        if let (Some(mine), Some(theirs)) = (&mut self.hours, other.hours) {
            for (hour, users) in theirs {
                mine.entry(hour).or_default().merge(&users);
            }
        }
        if let (Some(mine), Some(theirs)) = (&mut self.ad_hours, other.ad_hours) {
            for (key, users) in theirs {
                mine.entry(key).or_default().merge(&users);
            }
        }
    }

    fn insert(&mut self, hour: i64, ad: AdId, user: MemberHash) {
        if let Some(day) = &mut self.day {
            day.insert(user);
        }
        if let Some(ads) = &mut self.ads {
            ads.entry(ad).or_default().insert(user);
        }
        if let Some(hours) = &mut self.hours {
            hours.entry(hour).or_default().insert(user);
        }
        if let Some(ad_hours) = &mut self.ad_hours {
            ad_hours.entry((hour, ad)).or_default().insert(user);
        }
    }
}

/// One UTC day of a campaign.
#[derive(Debug, Clone, Default)]
pub(crate) struct DayAggregate {
    /// By (15-minute slice since the epoch, ad).
    pub(crate) slices: BTreeMap<(i64, AdId), SliceCounts>,
    pub(crate) reach: Reach,
}

impl DayAggregate {
    /// Adds `other`, the same day at the same levels: its counts (of other slices, or more of
    /// the same) and its users, unioned at each level.
    pub(crate) fn merge(&mut self, other: DayAggregate) {
        for (key, counts) in other.slices {
            self.slices.entry(key).or_default().add(&counts);
        }
        self.reach.merge(other.reach);
    }

    /// The day's billable impressions per 15-minute slice, every ad together: what delivery
    /// against caps keeps of a sealed or rebuilt day.
    pub(crate) fn billable_slices(&self, day: Day) -> DaySlices {
        let mut slices = DaySlices::default();
        for ((slice, _), counts) in &self.slices {
            let at = slice * SLICE_MILLIS;
            slices.add(DaySlices::slice_of(day, at), counts.billable_impressions);
        }
        slices
    }

    /// The rows a sealed day keeps. The campaign-day row and all 24 campaign-hour rows are
    /// always written, empty or not: their presence tells a complete rollup.
    pub(crate) fn to_rollup(&self, day: Day) -> Rollup {
        let first_hour = day.first_hour();
        let row = |level, hour, ad_id, sketch: &UniqueSketch| RollupReach {
            level,
            hour,
            ad_id,
            sketch: sketch.to_bytes(),
        };
        let empty = UniqueSketch::new();
        let mut reach = vec![row(
            ReachLevel::CampaignDay,
            first_hour,
            None,
            self.reach.day.as_ref().unwrap_or(&empty),
        )];
        for (ad, sketch) in self.reach.ads.iter().flatten() {
            reach.push(row(ReachLevel::AdDay, first_hour, Some(*ad), sketch));
        }
        for hour in first_hour..first_hour + 24 {
            let sketch = self.reach.hours.as_ref().and_then(|hours| hours.get(&hour));
            reach.push(row(
                ReachLevel::CampaignHour,
                hour,
                None,
                sketch.unwrap_or(&empty),
            ));
        }
        for ((hour, ad), sketch) in self.reach.ad_hours.iter().flatten() {
            reach.push(row(ReachLevel::AdHour, *hour, Some(*ad), sketch));
        }
        Rollup {
            slices: self
                .slices
                .iter()
                .map(|((slice, ad_id), counts)| counts.to_row(*slice, *ad_id))
                .collect(),
            reach,
        }
    }

    /// A sealed day back from its rows, read at `levels`; `None` if a sketch does not decode
    /// or the rollup predates these levels (the caller then reads the raw partitions).
    pub(crate) fn from_rollup(rollup: Rollup, levels: &[ReachLevel]) -> Option<Self> {
        let mut day = Self {
            slices: BTreeMap::new(),
            reach: Reach::with_levels(levels),
        };
        for row in rollup.slices {
            day.slices
                .insert((row.slice, row.ad_id), SliceCounts::of_row(&row));
        }
        let (mut day_rows, mut hour_rows) = (0, 0);
        for row in rollup.reach {
            if !levels.contains(&row.level) {
                continue;
            }
            let sketch = UniqueSketch::from_bytes(&row.sketch).ok()?;
            let reach = &mut day.reach;
            match (row.level, row.ad_id) {
                (ReachLevel::CampaignDay, None) => {
                    day_rows += 1;
                    reach.day = Some(sketch);
                }
                (ReachLevel::AdDay, Some(ad)) => {
                    reach.ads.as_mut()?.insert(ad, sketch);
                }
                (ReachLevel::CampaignHour, None) => {
                    hour_rows += 1;
                    reach.hours.as_mut()?.insert(row.hour, sketch);
                }
                (ReachLevel::AdHour, Some(ad)) => {
                    reach.ad_hours.as_mut()?.insert((row.hour, ad), sketch);
                }
                _ => return None,
            }
        }
        let complete = (!levels.contains(&ReachLevel::CampaignDay) || day_rows == 1)
            && (!levels.contains(&ReachLevel::CampaignHour) || hour_rows == 24);
        complete.then_some(day)
    }

    fn slice(&mut self, at: EventTime, ad: AdId) -> &mut SliceCounts {
        self.slices
            .entry((at.epoch_millis().div_euclid(SLICE_MILLIS), ad))
            .or_default()
    }
}

/// What to read of one UTC day of a campaign.
#[derive(Debug, Clone)]
pub(crate) struct DayRead {
    pub(crate) campaign: CampaignKey,
    /// Every partition of the day: each bucket of each bucket count in force that day.
    pub(crate) partitions: Vec<EventPartition>,
    /// The levels of users reached to count.
    pub(crate) levels: Vec<ReachLevel>,
    /// How long after an impression its view reports count.
    pub(crate) view_window: ViewWindow,
}

impl DayRead {
    /// Every partition of `campaign`'s UTC `day` under its settings `history` (widened by
    /// how stale a server's settings may be), with users reached at `levels`.
    pub(crate) fn of_day(
        campaign: CampaignKey,
        day: Day,
        history: &crate::domain::campaign::SettingsHistory,
        staleness: chrono::Duration,
        (levels, view_window): (Vec<ReachLevel>, ViewWindow),
    ) -> Self {
        let plan = crate::query::plan::campaign_partitions(
            campaign,
            std::iter::once(day),
            history,
            staleness,
        );
        Self {
            campaign,
            partitions: plan
                .into_iter()
                .flat_map(|(_, partitions)| partitions)
                .collect(),
            levels,
            view_window,
        }
    }
}

/// Keeps `row` if it is its id's earliest copy so far; the kept copy is valid if any is.
pub(crate) fn keep_earliest<S: BuildHasher>(
    earliest: &mut HashMap<ImpressionId, ImpressionSummaryRow, S>,
    row: ImpressionSummaryRow,
) {
    earliest
        .entry(row.impression_id)
        .and_modify(|seen| {
            let invalid = any_valid([seen.invalid, row.invalid]);
            if row.timestamp < seen.timestamp {
                *seen = row;
            }
            seen.invalid = invalid;
        })
        .or_insert(row);
}

/// Each impression id of `partitions` at its earliest copy, valid if any copy is; every copy
/// is shown to `views` when given.
async fn earliest_impressions(
    store: &dyn EventStore,
    partitions: &[EventPartition],
    concurrency: usize,
    mut views: Option<&mut ViewJoin>,
) -> Result<IdMap<ImpressionId, ImpressionSummaryRow>, StoreError> {
    let mut earliest: IdMap<ImpressionId, ImpressionSummaryRow> = IdMap::default();
    let mut reads = stream::iter(partitions.iter().copied())
        .map(|partition| async move { store.read_impression_summaries(&partition).await })
        .buffer_unordered(concurrency.max(1));
    while let Some(rows) = reads.next().await {
        let rows = rows?;
        earliest.reserve(rows.len());
        for row in rows {
            if let Some(views) = views.as_deref_mut() {
                views.see(&row);
            }
            keep_earliest(&mut earliest, row);
        }
    }
    Ok(earliest)
}

/// One UTC day's billable windows: each valid user's window (numbered as
/// [`BillableWindow::of`] does) with the time of its earliest impression.
pub(crate) async fn billable_windows_of_day(
    store: &dyn EventStore,
    read: &DayRead,
    window: BillableWindow,
    concurrency: usize,
) -> Result<IdMap<(UserId, i64), EventTime>, StoreError> {
    let earliest = earliest_impressions(store, &read.partitions, concurrency, None).await?;
    let mut windows: IdMap<(UserId, i64), EventTime> = IdMap::default();
    for row in earliest.into_values().filter(|row| row.invalid.is_none()) {
        windows
            .entry((row.user_id, window.of(row.timestamp)))
            .and_modify(|first| *first = (*first).min(row.timestamp))
            .or_insert(row.timestamp);
    }
    Ok(windows)
}

/// Reads one UTC day's impression and click partitions and aggregates them, with users
/// reached at the levels asked for; `concurrency` partition reads at a time.
pub(crate) async fn aggregate_day(
    store: &dyn Store,
    read: &DayRead,
    window: BillableWindow,
    concurrency: usize,
) -> Result<DayAggregate, StoreError> {
    let DayRead {
        campaign,
        partitions,
        levels,
        view_window,
    } = read;
    let concurrency = concurrency.max(1);
    let mut views = ViewJoin::read(store, partitions, None, *view_window, concurrency).await?;
    let earliest = earliest_impressions(store, partitions, concurrency, Some(&mut views)).await?;
    let mut day = DayAggregate {
        slices: BTreeMap::new(),
        reach: Reach::with_levels(levels),
    };
    let mut windows: IdMap<(UserId, i64), (EventTime, AdId)> = IdMap::default();
    for row in earliest.into_values() {
        if row.invalid.is_some() {
            // Kept and counted apart: never an impression, a user reached or billable.
            day.slice(row.timestamp, row.ad_id).invalid_impressions += 1;
            continue;
        }
        let counts = day.slice(row.timestamp, row.ad_id);
        counts.impressions += 1;
        counts.views.count(&views.views_of(row.impression_id));
        day.reach.insert(
            row.timestamp.epoch_millis().div_euclid(HOUR_MILLIS),
            row.ad_id,
            MemberHash::of(row.user_id.as_uuid().as_bytes()),
        );
        windows
            .entry((row.user_id, window.of(row.timestamp)))
            .and_modify(|first| {
                if (row.timestamp, row.ad_id) < *first {
                    *first = (row.timestamp, row.ad_id);
                }
            })
            .or_insert((row.timestamp, row.ad_id));
    }
    for (at, ad) in windows.into_values() {
        day.slice(at, ad).billable_impressions += 1;
    }

    // Clicks: each impression clicked this day, counted here only if its first click ever
    // is this day's (that click's own row is in this day's partitions).
    let Some(utc_day) = partitions.first().map(|partition| partition.day) else {
        return Ok(day);
    };
    for ClickRow {
        ad_id,
        timestamp,
        invalid,
        ..
    } in first_clicks(store, *campaign, partitions.clone(), concurrency, |_| true).await?
    {
        if timestamp.utc_day() == utc_day {
            let slice = day.slice(timestamp, ad_id);
            match invalid {
                None => slice.clicks += 1,
                Some(_) => slice.invalid_clicks += 1,
            }
        }
    }
    // Conversions credited to the campaign, at their own time this day.
    let conversions = store
        .read_campaign_conversions(*campaign, utc_day, Span::of_day(utc_day))
        .await?;
    SliceCounts::count_conversions(&mut day.slices, &conversions, |_| true);
    Ok(day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_must_divide_a_day() {
        assert!(BillableWindow::new(Duration::from_secs(40)).is_ok());
        assert!(BillableWindow::new(Duration::from_secs(300)).is_ok());
        assert!(BillableWindow::new(Duration::from_secs(7)).is_err());
        assert!(BillableWindow::new(Duration::from_millis(1500)).is_err());
        assert!(BillableWindow::new(Duration::ZERO).is_err());
    }

    #[test]
    fn a_rollup_answers_only_with_the_rows_every_seal_writes() {
        let day = Day::new("2026-08-10".parse().expect("date"));
        let ad = AdId::new(uuid::Uuid::from_u128(7));
        let mut aggregate = DayAggregate {
            slices: BTreeMap::new(),
            reach: Reach::with_levels(&ReachLevel::ALL),
        };
        aggregate
            .reach
            .insert(day.first_hour() + 3, ad, MemberHash::of(b"user"));
        let rollup = aggregate.to_rollup(day);
        // 1 day row, 1 ad-day row, 24 hour rows (23 of them empty), 1 ad-hour row.
        assert_eq!(rollup.reach.len(), 27);
        let daily = DayAggregate::from_rollup(rollup.clone(), &[ReachLevel::CampaignDay])
            .expect("complete");
        assert_eq!(daily.reach.day.map(|users| users.estimate()), Some(1));
        let hourly = DayAggregate::from_rollup(rollup.clone(), &[ReachLevel::CampaignHour])
            .expect("complete");
        assert_eq!(hourly.reach.hours.map(|hours| hours.len()), Some(24));

        let mut older_layout = rollup;
        older_layout
            .reach
            .retain(|row| row.level != ReachLevel::CampaignDay);
        assert!(DayAggregate::from_rollup(older_layout, &[ReachLevel::CampaignDay]).is_none());
    }
}
