//! Unique visitors of a site: visits (exact) and distinct guids (HyperLogLog++) per day, ISO
//! week or month of a range, for the beacons matching a feature filter.
//!
//! Visits are counted from the stored beacons, which the primary key de-duplicates. Unique
//! visitors are unions of the hourly sketches of the filter's feature combination, every
//! writer's row merged; an hour belongs to the period holding its midpoint, which is exact for
//! whole-hour zones and cuts at the nearest UTC hour for 30/45-minute ones (API.md).

use super::FanOut;
use super::plan::visit_partitions;
use super::range::QueryRange;
use crate::domain::beacon::{Features, SiteId};
use crate::domain::sketch::UniqueSketch;
use crate::settings::SettingsCache;
use crate::store::{SketchPartition, Store, StoreError};
use chrono::{Datelike, NaiveDate, TimeDelta};
use futures::{StreamExt, stream};
use std::collections::HashMap;

/// How a range is divided into rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
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

/// Visits and unique visitors of one period (or of the whole range).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VisitCounts {
    pub visits: u64,
    pub unique_visitors: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteUniques {
    pub total: VisitCounts,
    /// Every period of the range, oldest first (none for [`Granularity::Total`]).
    pub rows: Vec<(String, VisitCounts)>,
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
    sketch: UniqueSketch,
}

impl Tally {
    /// The counts; unique visitors never exceed visits, nor are zero when there are visits
    /// (an estimate must not contradict the exact count beside it).
    fn finish(mut self) -> VisitCounts {
        let estimate = self.sketch.estimate();
        VisitCounts {
            visits: self.visits,
            unique_visitors: if self.visits == 0 {
                0
            } else {
                estimate.clamp(1, self.visits)
            },
        }
    }
}

pub async fn site_uniques(
    store: &dyn Store,
    settings: &SettingsCache,
    site: &SiteId,
    filter: &Features,
    range: &QueryRange,
    granularity: Granularity,
    fan_out: FanOut,
) -> Result<SiteUniques, StoreError> {
    let periods = Periods::new(range, granularity);
    let mut total = Tally::default();
    let mut tallies: Vec<Tally> = periods.labels.iter().map(|_| Tally::default()).collect();
    count_visits(
        store,
        settings,
        site,
        filter,
        range,
        fan_out,
        &periods,
        &mut total,
        &mut tallies,
    )
    .await?;
    merge_sketches(
        store,
        site,
        filter,
        range,
        fan_out,
        &periods,
        &mut total,
        &mut tallies,
    )
    .await?;
    let rows = if granularity == Granularity::Total {
        Vec::new()
    } else {
        periods
            .labels
            .into_iter()
            .zip(tallies.into_iter().map(Tally::finish))
            .collect()
    };
    Ok(SiteUniques {
        total: total.finish(),
        rows,
    })
}

#[allow(clippy::too_many_arguments)]
async fn count_visits(
    store: &dyn Store,
    settings: &SettingsCache,
    site: &SiteId,
    filter: &Features,
    range: &QueryRange,
    fan_out: FanOut,
    periods: &Periods,
    total: &mut Tally,
    tallies: &mut [Tally],
) -> Result<(), StoreError> {
    let history = settings.site_history(site).await?;
    let staleness = settings.read_staleness();
    let partitions: Vec<_> = range
        .utc_days()
        .flat_map(|day| visit_partitions(site, day, &history, staleness))
        .collect();
    let mut reads = stream::iter(partitions)
        .map(|partition| async move { store.read_visits(&partition).await })
        .buffer_unordered(fan_out.concurrency.max(1));
    while let Some(rows) = reads.next().await {
        for row in rows? {
            let at = row.timestamp.instant();
            if !range.contains(at) || !row.features.matches(filter) {
                continue;
            }
            total.visits += 1;
            if let Some(period) = periods.of_day.get(&range.local_day(at)) {
                tallies[*period].visits += 1;
            }
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn merge_sketches(
    store: &dyn Store,
    site: &SiteId,
    filter: &Features,
    range: &QueryRange,
    fan_out: FanOut,
    periods: &Periods,
    total: &mut Tally,
    tallies: &mut [Tally],
) -> Result<(), StoreError> {
    let combination = filter.combination_key();
    let partitions: Vec<SketchPartition> = range
        .utc_days()
        .map(|day| SketchPartition {
            site: site.clone(),
            day,
            combination: combination.clone(),
        })
        .collect();
    let mut reads = stream::iter(partitions)
        .map(|partition| async move { store.read_sketches(&partition).await })
        .buffer_unordered(fan_out.concurrency.max(1));
    while let Some(rows) = reads.next().await {
        for row in rows? {
            let midpoint = row.hour + TimeDelta::minutes(30);
            if !range.contains(midpoint) {
                continue;
            }
            // One unreadable row must not take the whole answer down; it is logged, and a
            // rebuild from the stored beacons replaces it.
            let sketch = match UniqueSketch::from_bytes(&row.sketch) {
                Ok(sketch) => sketch,
                Err(error) => {
                    tracing::warn!(site = %site, hour = %row.hour, writer = %row.writer, %error, "skipping an unreadable sketch");
                    continue;
                }
            };
            total.sketch.merge(&sketch);
            if let Some(period) = periods.of_day.get(&range.local_day(midpoint)) {
                tallies[*period].sketch.merge(&sketch);
            }
        }
    }
    Ok(())
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
        let tally = Tally {
            visits: 3,
            sketch: UniqueSketch::new(),
        };
        assert_eq!(tally.finish().unique_visitors, 1);
    }
}
