//! Unique visitors of a site: visits (exact) and distinct guids (HyperLogLog++) per day, ISO
//! week or month of a range, for the beacons matching a feature filter.
//!
//! A sealed UTC day answers from its rollup: the filter's combination's exact visits per
//! 15-minute slice and merged sketch per hour. Any other day answers from its stored beacons
//! (visits, de-duplicated by the primary key) and every writer's live sketch of each hour.
//! Visits are placed at their exact time; an hour's visitors belong to the period holding the
//! hour's midpoint, which is exact for whole-hour zones and cuts at the nearest UTC hour for
//! 30/45-minute ones (docs/API.md).

use super::Reader;
use super::budget::{PartitionBudget, QueryError};
use super::plan::visit_partitions;
use super::range::QueryRange;
use crate::domain::beacon::{Features, SiteId};
use crate::domain::owner::Owner;
use crate::domain::sketch::UniqueSketch;
use crate::domain::time::{Day, HOUR_MILLIS, SLICE_MILLIS};
use crate::store::{SketchPartition, SliceVisits, StoreError};
use chrono::{DateTime, Datelike, NaiveDate, TimeDelta, Utc};
use futures::{StreamExt, stream};
use std::collections::HashMap;

/// How a range is divided into rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Granularity {
    Total,
    Month,
    Week,
    Day,
}

impl Granularity {
    /// The label of the period holding local `day`.
    fn label(self, day: NaiveDate) -> String {
        match self {
            Self::Total => String::new(),
            Self::Month => day.format("%Y-%m").to_string(),
            Self::Week => {
                let week = day.iso_week();
                format!("{}-W{:02}", week.year(), week.week())
            }
            Self::Day => day.format("%Y-%m-%d").to_string(),
        }
    }
}

/// Visits and unique visitors of one period (or of the whole range): valid beacons only;
/// invalid traffic is counted beside them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct VisitCounts {
    pub(crate) visits: u64,
    pub(crate) unique_visitors: u64,
    pub(crate) invalid_visits: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SiteUniques {
    pub(crate) total: VisitCounts,
    /// Every period of the range, oldest first (none for [`Granularity::Total`]).
    pub(crate) rows: Vec<(String, VisitCounts)>,
    /// UTC days answered from their rollup.
    pub(crate) sealed_days: usize,
}

/// The periods of a range: labels oldest first, and which period each local day is in.
struct Periods {
    labels: Vec<String>,
    of_day: HashMap<NaiveDate, usize>,
}

impl Periods {
    fn new(range: &QueryRange, granularity: Granularity) -> Self {
        let mut labels: Vec<String> = Vec::new();
        let mut of_day = HashMap::new();
        for day in range.local_days() {
            let label = granularity.label(day);
            if labels.last() != Some(&label) {
                labels.push(label);
            }
            of_day.insert(day, labels.len() - 1);
        }
        Self { labels, of_day }
    }
}

/// One period's running counts.
#[derive(Default)]
struct Tally {
    visits: u64,
    invalid_visits: u64,
    sketch: UniqueSketch,
    /// Some of its visits are of an hour whose visitors are counted in another period (or
    /// outside the range): in a zone a half hour off UTC, the hour that straddles midnight.
    visitors_elsewhere: bool,
    /// The valid visits of the hours whose visitors the period counts (each hour's in the
    /// period of its midpoint): `visits` in whole-hour zones.
    visits_of_visitors: u64,
}

impl Tally {
    /// The counts; unique visitors never exceed visits, nor are zero when there are visits
    /// whose visitors are counted here, or may be counted elsewhere while `any_visitor` says
    /// the answer has a visitor at all (an estimate must not contradict the exact count beside
    /// it). Visits without a visitor (Global Privacy Control) add to `visits` alone, so a
    /// period with only those has none.
    fn finish(self, any_visitor: bool) -> VisitCounts {
        let estimate = self.sketch.estimate();
        let has_visitor = !self.sketch.is_empty() || (self.visitors_elsewhere && any_visitor);
        VisitCounts {
            visits: self.visits,
            unique_visitors: if self.visits == 0 || !has_visitor {
                0
            } else {
                estimate.clamp(1, self.visits_of_visitors.max(1))
            },
            invalid_visits: self.invalid_visits,
        }
    }
}

/// What a uniques query asks.
#[derive(Debug, Clone)]
pub(crate) struct UniquesQuery {
    /// The beacons counted: those with every feature of the filter (none: all of them).
    pub(crate) filter: Features,
    pub(crate) range: QueryRange,
    pub(crate) granularity: Granularity,
}

pub(crate) async fn site_uniques(
    reader: &Reader,
    site: &SiteId,
    question: &UniquesQuery,
) -> Result<SiteUniques, QueryError> {
    let (range, granularity) = (&question.range, question.granularity);
    let periods = Periods::new(range, granularity);
    let mut total = Tally::default();
    let mut tallies: Vec<Tally> = periods.labels.iter().map(|_| Tally::default()).collect();
    // Sealed days answer from their rollup; the others from stored beacons and live sketches.
    let store = reader.store.as_ref();
    let owner = &Owner::Site(site.clone());
    let days: Vec<Day> = range.utc_days().collect();
    let mut states = stream::iter(days.iter().copied())
        .map(|day| async move { Ok::<_, StoreError>((day, store.seal_state(owner, day).await?)) })
        .buffer_unordered(reader.fan_out.concurrency.max(1));
    let (mut sealed, mut open) = (Vec::new(), Vec::new());
    while let Some(state) = states.next().await {
        let (day, state) = state?;
        if state.is_current() {
            sealed.push(day);
        } else {
            open.push(day);
        }
    }
    let history = reader.settings.history(owner).await?;
    let staleness = reader.settings.read_staleness();
    reader.budget.check(PartitionBudget::cost(
        sealed
            .iter()
            .map(|_| (true, 1))
            .chain(open.iter().map(|day| {
                (
                    false,
                    visit_partitions(site, *day, &history, staleness).len(),
                )
            })),
    ))?;
    let mut tallies_of = Tallies {
        periods: &periods,
        range,
        total: &mut total,
        rows: &mut tallies,
    };
    let reads = SiteReads {
        reader,
        site,
        filter: &question.filter,
    };
    reads.merge_rollups(&sealed, &mut tallies_of).await?;
    reads.count_visits(&open, &mut tallies_of).await?;
    reads.merge_sketches(&open, &mut tallies_of).await?;
    let any_visitor = !total.sketch.is_empty();
    let rows = if granularity == Granularity::Total {
        Vec::new()
    } else {
        periods
            .labels
            .into_iter()
            .zip(tallies.into_iter().map(|tally| tally.finish(any_visitor)))
            .collect()
    };
    Ok(SiteUniques {
        total: total.finish(any_visitor),
        rows,
        sealed_days: sealed.len(),
    })
}

/// Where counts go: the total and the row of each period.
struct Tallies<'a> {
    periods: &'a Periods,
    range: &'a QueryRange,
    total: &'a mut Tally,
    rows: &'a mut [Tally],
}

impl Tallies<'_> {
    /// Visits at `at` (exact: a beacon's time, or the start of a 15-minute slice, which lies
    /// within one local day in every zone).
    fn visits(&mut self, at: DateTime<Utc>, visits: SliceVisits) {
        let visitors_in = self.period_of_visitors(at);
        if self.range.contains(Self::midpoint(at)) {
            self.total.visits_of_visitors += visits.valid;
        }
        if let Some(period) = visitors_in {
            self.rows[period].visits_of_visitors += visits.valid;
        }
        if !self.range.contains(at) {
            return;
        }
        self.total.visits += visits.valid;
        self.total.invalid_visits += visits.invalid;
        if visits.valid > 0 && !self.range.contains(Self::midpoint(at)) {
            self.total.visitors_elsewhere = true;
        }
        if let Some(&period) = self.periods.of_day.get(&self.range.local_day(at)) {
            let row = &mut self.rows[period];
            row.visits += visits.valid;
            row.invalid_visits += visits.invalid;
            if visits.valid > 0 && visitors_in != Some(period) {
                row.visitors_elsewhere = true;
            }
        }
    }

    /// The middle of the UTC hour holding `at`.
    fn midpoint(at: DateTime<Utc>) -> DateTime<Utc> {
        let hour = at.timestamp_millis().div_euclid(HOUR_MILLIS) * HOUR_MILLIS;
        DateTime::from_timestamp_millis(hour).unwrap_or(at) + TimeDelta::minutes(30)
    }

    /// The period whose sketch counts the visitors of the UTC hour holding `at`.
    fn period_of_visitors(&self, at: DateTime<Utc>) -> Option<usize> {
        let midpoint = Self::midpoint(at);
        if !self.range.contains(midpoint) {
            return None;
        }
        self.periods
            .of_day
            .get(&self.range.local_day(midpoint))
            .copied()
    }

    /// The visitors of the UTC hour starting at `hour`: in the period holding its midpoint.
    fn visitors(&mut self, hour: DateTime<Utc>, sketch: &UniqueSketch) {
        if !self.range.contains(Self::midpoint(hour)) {
            return;
        }
        self.total.sketch.merge(sketch);
        if let Some(period) = self.period_of_visitors(hour) {
            self.rows[period].sketch.merge(sketch);
        }
    }
}

fn decode_sketch(site: &SiteId, hour: DateTime<Utc>, bytes: &[u8]) -> Option<UniqueSketch> {
    // One unreadable row must not take the whole answer down; it is logged, and a rebuild
    // from the stored beacons replaces it.
    UniqueSketch::from_bytes(bytes)
        .inspect_err(
            |error| tracing::warn!(site = %site, %hour, %error, "left an unreadable sketch out of the answer"),
        )
        .ok()
}

/// The reads of one site's query, for its filter's combination.
struct SiteReads<'a> {
    reader: &'a Reader,
    site: &'a SiteId,
    filter: &'a Features,
}

impl SiteReads<'_> {
    /// The partitions (rollup or live sketches) of the filter's combination, one per day.
    fn combination_partitions(&self, days: &[Day]) -> Vec<SketchPartition> {
        let combination = self.filter.combination_key();
        days.iter()
            .map(|day| SketchPartition {
                site: self.site.clone(),
                day: *day,
                combination: combination.clone(),
            })
            .collect()
    }

    fn concurrency(&self) -> usize {
        self.reader.fan_out.concurrency.max(1)
    }

    /// Sealed days: the filter's combination's visits per slice and visitors per hour.
    async fn merge_rollups(
        &self,
        days: &[Day],
        tallies: &mut Tallies<'_>,
    ) -> Result<(), StoreError> {
        let store = self.reader.store.as_ref();
        let mut reads = stream::iter(self.combination_partitions(days))
            .map(|partition| async move { store.read_site_rollup(&partition).await })
            .buffer_unordered(self.concurrency());
        while let Some(rollup) = reads.next().await {
            let rollup = rollup?;
            for (slice, visits) in rollup.visits {
                if let Some(at) = DateTime::from_timestamp_millis(slice * SLICE_MILLIS) {
                    tallies.visits(at, visits);
                }
            }
            for (hour, bytes) in rollup.reach {
                let Some(at) = DateTime::from_timestamp_millis(hour * HOUR_MILLIS) else {
                    continue;
                };
                if let Some(sketch) = decode_sketch(self.site, at, &bytes) {
                    tallies.visitors(at, &sketch);
                }
            }
        }
        Ok(())
    }

    /// Open days: visits from the stored beacons (de-duplicated by their primary key).
    async fn count_visits(
        &self,
        days: &[Day],
        tallies: &mut Tallies<'_>,
    ) -> Result<(), StoreError> {
        let settings = &self.reader.settings;
        let history = settings.history(&Owner::Site(self.site.clone())).await?;
        let staleness = settings.read_staleness();
        let partitions: Vec<_> = days
            .iter()
            .flat_map(|day| visit_partitions(self.site, *day, &history, staleness))
            .collect();
        let store = self.reader.store.as_ref();
        let mut reads = stream::iter(partitions)
            .map(|partition| async move { store.read_visits(&partition).await })
            .buffer_unordered(self.concurrency());
        while let Some(rows) = reads.next().await {
            for row in rows? {
                if row.features.matches(self.filter) {
                    let visit = match row.invalid {
                        None => SliceVisits {
                            valid: 1,
                            invalid: 0,
                        },
                        Some(_) => SliceVisits {
                            valid: 0,
                            invalid: 1,
                        },
                    };
                    tallies.visits(row.timestamp.instant(), visit);
                }
            }
        }
        Ok(())
    }

    /// Open days: every writer's live sketch of each hour of the filter's combination.
    async fn merge_sketches(
        &self,
        days: &[Day],
        tallies: &mut Tallies<'_>,
    ) -> Result<(), StoreError> {
        let store = self.reader.store.as_ref();
        let mut reads = stream::iter(self.combination_partitions(days))
            .map(|partition| async move { store.read_sketches(&partition).await })
            .buffer_unordered(self.concurrency());
        while let Some(rows) = reads.next().await {
            for row in rows? {
                if let Some(sketch) = decode_sketch(self.site, row.hour, &row.sketch) {
                    tallies.visitors(row.hour, &sketch);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(from: &str, to: &str) -> QueryRange {
        QueryRange::new(
            from.parse().expect("date"),
            to.parse().expect("date"),
            chrono_tz::Tz::UTC,
        )
        .expect("valid")
    }

    #[test]
    fn periods_are_clipped_to_the_range_and_labelled_as_api_md_says() {
        let october = range("2018-10-01", "2018-10-31");
        let weeks = Periods::new(&october, Granularity::Week);
        assert_eq!(weeks.labels.first().map(String::as_str), Some("2018-W40"));
        assert_eq!(weeks.labels.last().map(String::as_str), Some("2018-W44"));
        assert_eq!(weeks.labels.len(), 5);
        let months = Periods::new(&range("2018-10-15", "2018-11-02"), Granularity::Month);
        assert_eq!(months.labels, ["2018-10", "2018-11"]);
        let days = Periods::new(&october, Granularity::Day);
        assert_eq!(days.labels.len(), 31);
        assert_eq!(days.labels[0], "2018-10-01");
        // ISO weeks belong to the ISO year: 2018-12-31 is in 2019-W01.
        let new_year = Periods::new(&range("2018-12-30", "2019-01-01"), Granularity::Week);
        assert_eq!(new_year.labels, ["2018-W52", "2019-W01"]);
    }

    #[test]
    fn an_estimate_never_contradicts_the_exact_visits() {
        // A period whose visits' visitors are counted in a neighbour's hour (a zone a half
        // hour off UTC), in an answer that has visitors.
        let tally = Tally {
            visits: 3,
            visitors_elsewhere: true,
            ..Tally::default()
        };
        assert_eq!(tally.finish(true).unique_visitors, 1);
    }

    #[test]
    fn visits_without_any_visitor_have_no_unique_visitor() {
        let tally = || Tally {
            visits: 3,
            visitors_elsewhere: true,
            ..Tally::default()
        };
        assert_eq!(tally().finish(false).unique_visitors, 0);
        // A period of GPC visits alone, beside periods with visitors.
        let gpc_only = Tally {
            visitors_elsewhere: false,
            ..tally()
        };
        assert_eq!(gpc_only.finish(true).unique_visitors, 0);
    }

    #[test]
    fn a_visit_in_the_hour_across_midnight_of_a_half_hour_zone_has_its_visitor_elsewhere() {
        let kolkata = QueryRange::new(
            "2018-10-01".parse().expect("date"),
            "2018-10-02".parse().expect("date"),
            chrono_tz::Asia::Kolkata,
        )
        .expect("valid");
        let periods = Periods::new(&kolkata, Granularity::Day);
        let (mut total, mut rows) = (Tally::default(), vec![Tally::default(), Tally::default()]);
        let mut tallies = Tallies {
            periods: &periods,
            range: &kolkata,
            total: &mut total,
            rows: &mut rows,
        };
        let one = SliceVisits {
            valid: 1,
            invalid: 0,
        };
        // 18:10 UTC is 23:40 on 1 October in Kolkata; its hour's midpoint, 18:30 UTC, is
        // midnight there, the 2nd.
        tallies.visits("2018-10-01T18:10:00Z".parse().expect("instant"), one);
        // 06:00 UTC on the 2nd: its morning, its hour's visitors counted on the 2nd.
        tallies.visits("2018-10-02T06:00:00Z".parse().expect("instant"), one);
        assert!(rows[0].visitors_elsewhere);
        assert!(!rows[1].visitors_elsewhere);
        // Both visits' visitors are the 2nd's, and may be as many as its two visits.
        assert_eq!(
            (rows[0].visits_of_visitors, rows[1].visits_of_visitors),
            (0, 2)
        );
    }

    #[test]
    fn a_period_may_count_more_visitors_than_its_visits_when_its_hours_hold_them() {
        // The 2nd in Kolkata holds the visitors of 18:00-19:00 UTC on the 1st: ten visits
        // on the 1st (18:10) and ten on the 2nd (18:40), twenty visitors.
        let mut sketch = UniqueSketch::new();
        for visitor in 0..20u8 {
            sketch.insert(crate::domain::sketch::MemberHash::of(&[visitor]));
        }
        let second = Tally {
            visits: 10,
            sketch,
            visits_of_visitors: 20,
            ..Tally::default()
        };
        assert_eq!(second.finish(true).unique_visitors, 20);
    }
}
