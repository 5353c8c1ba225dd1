//! Campaign summaries: impressions, clicks, billable impressions and users reached, per local
//! day, local clock hour and ad, and in total.
//!
//! Each UTC day of the range is aggregated on its own ([`aggregate_day`]: 15-minute slices
//! and hourly user sketches), a few days at once, and folded into the answer as soon as it is
//! done, so only the days in flight are held in memory. Additive counts are sums of slices, so
//! days and hours in any zone are exact; users reached are unions of hourly sketches, an hour
//! belonging to the period that holds its midpoint (exact for whole-hour zones, the nearest
//! UTC hour for 30- and 45-minute ones, as docs/API.md allows). A day not yet sealed is read
//! from its closed slices' aggregates and the stretches no aggregate answers for
//! ([`super::open_day`]).

use super::Reader;
use super::aggregate::{BillableWindow, DayAggregate, DayRead, SliceCounts, aggregate_day};
use super::budget::{PartitionBudget, QueryError};
use super::open_day::{OpenDayRead, read_open_day};
use super::plan::campaign_partitions;
use super::range::QueryRange;
use crate::domain::conversion::counts::ConversionCounts;
use crate::domain::ids::{AdId, CampaignKey};
use crate::domain::owner::Owner;
use crate::domain::partition::EventPartition;
use crate::domain::sketch::UniqueSketch;
use crate::domain::time::{Day, HOUR_MILLIS, SLICE_MILLIS, SLICES_PER_HOUR};
use crate::domain::view::ViewCounts;
use crate::store::{ReachLevel, SealState, StoreError};
use chrono::{DateTime, NaiveDate, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use std::collections::HashMap;

/// The counts of one row (or of the totals).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub impressions: u64,
    pub clicks: u64,
    pub(crate) billable_impressions: u64,
    pub(crate) unique_users: u64,
    pub(crate) invalid_impressions: u64,
    pub(crate) invalid_clicks: u64,
    /// The view measures of the valid impressions.
    pub(crate) views: ViewCounts,
    /// Conversions credited to the row's ads at their own time.
    pub(crate) conversions: ConversionCounts,
}

impl Counts {
    /// Conversions credited (for tools and benches outside the crate).
    pub fn credited_conversions(&self) -> u64 {
        self.conversions.conversions
    }

    /// Clicks per impression; 0 when there are no impressions.
    pub(crate) fn ctr(&self) -> f64 {
        if self.impressions == 0 {
            0.0
        } else {
            self.clicks as f64 / self.impressions as f64
        }
    }
}

/// A campaign's counts over a range.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub totals: Counts,
    /// Every local day of the range, zeros included, oldest first. Rows carry users reached
    /// only for the grouping asked for.
    pub(crate) by_day: Vec<(NaiveDate, Counts)>,
    /// Every local clock hour of the range, zeros included, oldest first, labelled with its
    /// offset (a repeated DST hour appears twice).
    pub(crate) by_hour: Vec<(String, Counts)>,
    /// Every ad with an impression or a click in the range, most impressions first, then by id.
    pub(crate) by_ad: Vec<(AdId, Counts)>,
    /// UTC days answered from their rollup rather than their raw partitions.
    pub sealed_days: usize,
    /// Slices of days not yet sealed answered from their aggregates.
    pub aggregated_slices: usize,
}

/// Which rows an answer lists besides its totals: only those get users reached (each
/// costs a sketch union per hour), the additive counts are cheap and always summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grouping {
    Day,
    Hour,
    Ad,
    None,
}

/// A row being summed: additive counts and the users seen.
#[derive(Default)]
struct Tally {
    counts: SliceCounts,
    users: UniqueSketch,
    /// The impressions of the hours whose users the row counts (each hour's in the row of its
    /// midpoint): the same as `counts.impressions` in whole-hour zones; in a half-hour zone
    /// the hour across a row's edge puts its users in one row and its impressions in two.
    impressions_of_users: u64,
}

impl Tally {
    fn finish(self) -> Counts {
        let reached = self.users.estimate();
        Counts {
            impressions: self.counts.impressions,
            clicks: self.counts.clicks,
            billable_impressions: self.counts.billable_impressions,
            // Never more users than the impressions they were counted from (an estimate must
            // not contradict exact counts).
            unique_users: reached.min(self.impressions_of_users),
            invalid_impressions: self.counts.invalid_impressions,
            invalid_clicks: self.counts.invalid_clicks,
            views: self.counts.views,
            conversions: self.counts.conversions,
        }
    }
}

/// The rows of a range and which rows each 15-minute slice falls in.
struct Rows {
    grouping: Grouping,
    totals: Tally,
    days: Vec<(NaiveDate, Tally)>,
    hours: Vec<(String, Tally)>,
    ads: HashMap<AdId, Tally>,
    /// Slice (since the epoch) → (day row, hour row), for every slice of the range.
    slice_rows: HashMap<i64, (usize, usize)>,
}

impl Rows {
    fn new(range: &QueryRange, grouping: Grouping) -> Self {
        let days: Vec<(NaiveDate, Tally)> = range
            .local_days()
            .map(|day| (day, Tally::default()))
            .collect();
        let day_index: HashMap<NaiveDate, usize> = days
            .iter()
            .enumerate()
            .map(|(index, (day, _))| (*day, index))
            .collect();
        let mut hours: Vec<(String, Tally)> = Vec::new();
        let mut slice_rows = HashMap::new();
        let first = range.start().timestamp_millis().div_euclid(SLICE_MILLIS);
        let end = range.end().timestamp_millis().div_euclid(SLICE_MILLIS);
        for slice in first..end {
            let Some(instant) = DateTime::<Utc>::from_timestamp_millis(slice * SLICE_MILLIS) else {
                continue;
            };
            let local = instant.with_timezone(&range.tz());
            let label = local.format("%Y-%m-%dT%H:00:00%:z").to_string();
            if hours.last().map(|(last, _)| last) != Some(&label) {
                hours.push((label, Tally::default()));
            }
            if let Some(day) = day_index.get(&local.date_naive()) {
                slice_rows.insert(slice, (*day, hours.len() - 1));
            }
        }
        Self {
            grouping,
            totals: Tally::default(),
            days,
            hours,
            ads: HashMap::new(),
            slice_rows,
        }
    }

    /// The users sketches a UTC day needs, the coarsest that answer: the day's union where
    /// every hour of the day falls in one listed row, hours where a row boundary (or the
    /// range's edge) cuts the day, per-ad sketches only for `group_by=ad`.
    fn reach_levels(&self, day: Day) -> &'static [ReachLevel] {
        let first_hour = day.first_hour();
        let rows: Vec<Option<(usize, usize)>> = (first_hour..first_hour + 24)
            .map(|hour| self.slice_rows.get(&midpoint_slice(hour)).copied())
            .collect();
        let whole = rows.iter().all(Option::is_some);
        let one_day_row = rows
            .windows(2)
            .all(|pair| pair[0].map(|(day_row, _)| day_row) == pair[1].map(|(day_row, _)| day_row));
        match self.grouping {
            Grouping::None if whole => &[ReachLevel::CampaignDay],
            Grouping::Day if whole && one_day_row => &[ReachLevel::CampaignDay],
            Grouping::Ad if whole => &[ReachLevel::CampaignDay, ReachLevel::AdDay],
            Grouping::Ad => &[ReachLevel::CampaignHour, ReachLevel::AdHour],
            Grouping::None | Grouping::Day | Grouping::Hour => &[ReachLevel::CampaignHour],
        }
    }

    /// Folds in a UTC day read or aggregated at [`Self::reach_levels`].
    fn add_day(&mut self, utc_day: Day, day: DayAggregate) {
        // Ad rows only when they are listed: a campaign's ad ids are the caller's to choose.
        let by_ad = self.grouping == Grouping::Ad;
        for ((slice, ad), counts) in &day.slices {
            let Some((day_row, hour_row)) = self.slice_rows.get(slice).copied() else {
                continue;
            };
            self.totals.counts.add(counts);
            self.days[day_row].1.counts.add(counts);
            self.hours[hour_row].1.counts.add(counts);
            if by_ad {
                self.ads.entry(*ad).or_default().counts.add(counts);
            }
        }
        for ((slice, ad), counts) in &day.slices {
            let hour = slice.div_euclid(SLICES_PER_HOUR);
            let Some((day_row, hour_row)) = self.slice_rows.get(&midpoint_slice(hour)).copied()
            else {
                continue;
            };
            for tally in [
                &mut self.totals,
                &mut self.days[day_row].1,
                &mut self.hours[hour_row].1,
            ] {
                tally.impressions_of_users += counts.impressions;
            }
            if by_ad {
                self.ads.entry(*ad).or_default().impressions_of_users += counts.impressions;
            }
        }
        let reach = day.reach;
        if let Some(users) = reach.day {
            // The whole day lies in one row of each kind the answer lists.
            if self.grouping == Grouping::Day
                && let Some((day_row, _)) =
                    self.slice_rows.get(&midpoint_slice(utc_day.first_hour()))
            {
                self.days[*day_row].1.users.merge(&users);
            }
            if !self.rows_cover_users() {
                self.totals.users.merge(&users);
            }
        }
        for (ad, users) in reach.ads.iter().flatten() {
            self.ads.entry(*ad).or_default().users.merge(users);
        }
        for (hour, users) in reach.hours.iter().flatten() {
            let Some((day_row, hour_row)) = self.slice_rows.get(&midpoint_slice(*hour)).copied()
            else {
                continue;
            };
            match self.grouping {
                Grouping::Day => self.days[day_row].1.users.merge(users),
                Grouping::Hour => self.hours[hour_row].1.users.merge(users),
                Grouping::Ad | Grouping::None => {}
            }
            if !self.rows_cover_users() {
                self.totals.users.merge(users);
            }
        }
        for ((hour, ad), users) in reach.ad_hours.iter().flatten() {
            if self.slice_rows.contains_key(&midpoint_slice(*hour)) {
                self.ads.entry(*ad).or_default().users.merge(users);
            }
        }
    }

    /// Whether every user counted goes into exactly one listed row (days or hours), so the
    /// totals' users are the union of the rows' (a row per day is far fewer unions than
    /// one per hour and day).
    fn rows_cover_users(&self) -> bool {
        matches!(self.grouping, Grouping::Day | Grouping::Hour)
    }

    fn finish(mut self) -> Summary {
        match self.grouping {
            Grouping::Day => {
                for (_, row) in &self.days {
                    self.totals.users.merge(&row.users);
                }
            }
            Grouping::Hour => {
                for (_, row) in &self.hours {
                    self.totals.users.merge(&row.users);
                }
            }
            Grouping::Ad | Grouping::None => {}
        }
        let mut by_ad: Vec<(AdId, Counts)> = self
            .ads
            .into_iter()
            .map(|(ad, tally)| (ad, tally.finish()))
            .filter(|(_, counts)| {
                counts.impressions > 0
                    || counts.clicks > 0
                    || counts.invalid_impressions > 0
                    || counts.invalid_clicks > 0
                    || counts.conversions.conversions > 0
            })
            .collect();
        by_ad
            .sort_by(|(a_id, a), (b_id, b)| b.impressions.cmp(&a.impressions).then(a_id.cmp(b_id)));
        Summary {
            totals: self.totals.finish(),
            by_day: self
                .days
                .into_iter()
                .map(|(day, tally)| (day, tally.finish()))
                .collect(),
            by_hour: self
                .hours
                .into_iter()
                .map(|(hour, tally)| (hour, tally.finish()))
                .collect(),
            by_ad,
            sealed_days: 0,
            aggregated_slices: 0,
        }
    }
}

/// The 15-minute slice holding the midpoint of `hour` (since the epoch): the hour's users
/// belong to the row of that slice.
fn midpoint_slice(hour: i64) -> i64 {
    (hour * HOUR_MILLIS + HOUR_MILLIS / 2).div_euclid(SLICE_MILLIS)
}

/// Where a UTC day's answer came from.
enum Source {
    Rollup,
    /// Its slices: this many from their aggregates, the rest raw.
    Slices(usize),
}

/// Raw days aggregated at once (each holds a day's impressions while it is counted); each
/// reads its buckets with a share of the query's fan-out.
const RAW_DAYS_IN_FLIGHT: usize = 4;

/// Sealed days read at once: one small rollup partition each.
const SEALED_DAYS_IN_FLIGHT: usize = 16;

pub(crate) async fn campaign_summary(
    reader: &Reader,
    campaign: CampaignKey,
    range: &QueryRange,
    grouping: Grouping,
    window: BillableWindow,
) -> Result<Summary, QueryError> {
    let (store, settings, fan_out) = (reader.store.as_ref(), &reader.settings, reader.fan_out);
    let owner = Owner::Campaign(campaign);
    let history = settings.history(&owner).await?;
    let plan = campaign_partitions(
        campaign,
        range.utc_days(),
        &history,
        settings.read_staleness(),
    );
    let mut rows = Rows::new(range, grouping);
    // Owned, so the futures below borrow nothing of their input (see `get_summary`'s `Send`).
    let days: Vec<(Day, Vec<EventPartition>, Vec<ReachLevel>)> = plan
        .into_iter()
        .map(|(day, partitions)| (day, partitions, rows.reach_levels(day).to_vec()))
        .collect();
    // What is read raw of a day is kept only under one bucket count: copies of an id under two
    // lie in two partitions, where a write does not learn of the other.
    let one_count: Vec<Day> = days
        .iter()
        .map(|(day, ..)| *day)
        .filter(|day| {
            history
                .counts_in_force(*day, settings.read_staleness())
                .len()
                == 1
        })
        .collect();
    let one_count = &one_count;
    // Which days have a current rollup: one small read each, all at once.
    let utc_days: Vec<Day> = days.iter().map(|(day, ..)| *day).collect();
    let owner = &owner;
    let states: Vec<SealState> = stream::iter(utc_days)
        .map(|day| async move { store.seal_state(owner, day).await })
        .buffered(fan_out.concurrency.max(1))
        .try_collect()
        .await?;
    let current: Vec<bool> = states.iter().map(SealState::is_current).collect();
    reader.budget.check(PartitionBudget::cost(
        days.iter()
            .zip(&current)
            .map(|((_, partitions, _), sealed)| (*sealed, partitions.len())),
    ))?;
    let now = Utc::now();
    let open_rule = reader.open_days;
    let view_window = reader.view_window;
    let (sealed, raw): (Vec<_>, Vec<_>) = days
        .into_iter()
        .zip(states)
        .partition(|(_, state)| state.is_current());
    let per_day = (fan_out.concurrency / RAW_DAYS_IN_FLIGHT).max(1);
    let kept = reader.kept_stretches.as_deref();
    let memo = reader.slice_memo.as_ref();
    let aggregate_raw = move |day: Day,
                              partitions: Vec<EventPartition>,
                              levels: Vec<ReachLevel>,
                              state: SealState| async move {
        // A day never sealed is answered from its closed slices; one sealed and then marked
        // by a late event is read whole until its next seal.
        if let Some(rule) = open_rule.filter(|_| state.sealed_from.is_none()) {
            let read = OpenDayRead {
                campaign,
                day,
                partitions,
                levels,
                window,
                view_window,
                rule,
                now,
                concurrency: per_day,
                find_duplicates: None,
            };
            let kept = kept.filter(|_| one_count.contains(&day));
            let (open, aggregated) = read_open_day(store, &read, kept, Some(memo)).await?;
            return Ok::<_, StoreError>((day, open, Source::Slices(aggregated)));
        }
        let read = DayRead {
            campaign,
            partitions,
            levels,
            view_window,
        };
        let raw = aggregate_day(store, &read, window, per_day).await?;
        Ok::<_, StoreError>((day, raw, Source::Slices(0)))
    };
    let read_sealed = stream::iter(sealed)
        .map(|((day, partitions, levels), state)| async move {
            match DayAggregate::from_rollup(
                store.read_campaign_rollup(campaign, day, &levels).await?,
                &levels,
            ) {
                Some(sealed) => Ok((day, sealed, Source::Rollup)),
                // A rollup of an older layout, or a sketch that does not decode.
                None => aggregate_raw(day, partitions, levels, state).await,
            }
        })
        .buffer_unordered(SEALED_DAYS_IN_FLIGHT);
    let read_raw = stream::iter(raw)
        .map(|((day, partitions, levels), state)| aggregate_raw(day, partitions, levels, state))
        .buffer_unordered(RAW_DAYS_IN_FLIGHT);
    let mut days = stream::select(read_sealed, read_raw);
    let (mut sealed_days, mut aggregated_slices) = (0, 0);
    while let Some(day) = days.next().await {
        let (utc_day, day, source) = day?;
        match source {
            Source::Rollup => sealed_days += 1,
            Source::Slices(aggregated) => aggregated_slices += aggregated,
        }
        rows.add_day(utc_day, day);
    }
    let mut summary = rows.finish();
    summary.sealed_days = sealed_days;
    summary.aggregated_slices = aggregated_slices;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(from: &str, to: &str, tz: chrono_tz::Tz) -> QueryRange {
        QueryRange::new(from.parse().expect("date"), to.parse().expect("date"), tz).expect("valid")
    }

    #[test]
    fn every_local_clock_hour_is_a_row_and_a_repeated_dst_hour_appears_twice() {
        let berlin = Rows::new(
            &range("2026-10-25", "2026-10-25", chrono_tz::Europe::Berlin),
            Grouping::Hour,
        );
        let labels: Vec<&str> = berlin
            .hours
            .iter()
            .map(|(label, _)| label.as_str())
            .collect();
        assert_eq!(labels.len(), 25);
        assert_eq!(labels[2], "2026-10-25T02:00:00+02:00");
        assert_eq!(labels[3], "2026-10-25T02:00:00+01:00");
        let spring = Rows::new(
            &range("2026-03-29", "2026-03-29", chrono_tz::Europe::Berlin),
            Grouping::Hour,
        );
        assert_eq!(spring.hours.len(), 23);
        let kathmandu = Rows::new(
            &range("2026-11-01", "2026-11-01", chrono_tz::Asia::Kathmandu),
            Grouping::Hour,
        );
        assert_eq!(kathmandu.hours.len(), 24);
        assert_eq!(kathmandu.hours[0].0, "2026-11-01T00:00:00+05:45");
        assert_eq!(kathmandu.slice_rows.len(), 96);
    }

    #[test]
    fn whole_utc_days_in_one_row_read_only_the_days_users() {
        let day = |date: &str| Day::new(date.parse().expect("date"));
        let utc_month = Rows::new(
            &range("2026-08-01", "2026-08-31", chrono_tz::UTC),
            Grouping::Day,
        );
        assert_eq!(
            utc_month.reach_levels(day("2026-08-10")),
            [ReachLevel::CampaignDay]
        );
        // A Kolkata day holds parts of two UTC days: hours are needed for the daily rows,
        // not for the totals of a UTC day inside the range.
        let kolkata = range("2026-08-01", "2026-08-31", chrono_tz::Asia::Kolkata);
        let daily = Rows::new(&kolkata, Grouping::Day);
        assert_eq!(
            daily.reach_levels(day("2026-08-10")),
            [ReachLevel::CampaignHour]
        );
        let totals = Rows::new(&kolkata, Grouping::None);
        assert_eq!(
            totals.reach_levels(day("2026-08-10")),
            [ReachLevel::CampaignDay]
        );
        // The range's first local day starts at 18:30 UTC the day before.
        assert_eq!(
            totals.reach_levels(day("2026-07-31")),
            [ReachLevel::CampaignHour]
        );
        let by_ad = Rows::new(&kolkata, Grouping::Ad);
        assert_eq!(
            by_ad.reach_levels(day("2026-08-10")),
            [ReachLevel::CampaignDay, ReachLevel::AdDay]
        );
        assert_eq!(
            by_ad.reach_levels(day("2026-08-31")),
            [ReachLevel::CampaignHour, ReachLevel::AdHour]
        );
        let hourly = Rows::new(
            &range("2026-08-01", "2026-08-31", chrono_tz::UTC),
            Grouping::Hour,
        );
        assert_eq!(
            hourly.reach_levels(day("2026-08-10")),
            [ReachLevel::CampaignHour]
        );
    }

    #[test]
    fn in_a_half_hour_zone_the_users_of_the_hour_across_midnight_count_in_one_day() {
        use crate::domain::sketch::MemberHash;
        use crate::query::aggregate::Reach;
        use std::collections::BTreeMap;
        use uuid::Uuid;
        // Kolkata's midnight of the 24th is 18:30 UTC: ten users at 18:10 (23:40 on the 23rd)
        // and ten at 18:40 (00:10 on the 24th). The hour's users go to the 24th, the day
        // holding its midpoint; none may be lost for the other ten's impressions.
        let utc_day = Day::new("2026-11-23".parse().expect("date"));
        let hour = utc_day.first_hour() + 18;
        let ad = AdId::new(Uuid::from_u128(7));
        let mut day = DayAggregate {
            slices: BTreeMap::new(),
            reach: Reach::with_levels(&[ReachLevel::CampaignHour]),
        };
        for slice in [hour * SLICES_PER_HOUR, hour * SLICES_PER_HOUR + 2] {
            day.slices.insert(
                (slice, ad),
                SliceCounts {
                    impressions: 10,
                    ..SliceCounts::default()
                },
            );
        }
        let mut users = UniqueSketch::default();
        for user in 0..20u8 {
            users.insert(MemberHash::of(&[user]));
        }
        day.reach.hours = Some(BTreeMap::from([(hour, users)]));
        let mut rows = Rows::new(
            &range("2026-11-23", "2026-11-24", chrono_tz::Asia::Kolkata),
            Grouping::Day,
        );

        rows.add_day(utc_day, day);
        let summary = rows.finish();

        let by_day: Vec<(u64, u64)> = summary
            .by_day
            .iter()
            .map(|(_, counts)| (counts.impressions, counts.unique_users))
            .collect();
        assert_eq!(by_day, [(10, 0), (10, 20)]);
        assert_eq!(summary.totals.impressions, 20);
        assert_eq!(summary.totals.unique_users, 20);
    }
}
