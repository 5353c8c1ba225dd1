//! A site's most visited feature values over a range: what the dashboard offers as filters.
//!
//! A sealed UTC day that lies wholly inside the range answers from the visits per value the
//! sealer stored with it; any other day (not sealed, or cut by the range's local edges) from
//! its stored beacons, counted at their exact time. Valid visits only.

use super::Reader;
use super::budget::{PartitionBudget, QueryError};
use super::plan::visit_partitions;
use super::range::QueryRange;
use super::site_day::SiteDay;
use crate::domain::beacon::{Features, SiteId};
use crate::domain::owner::Owner;
use crate::domain::time::Day;
use crate::store::{FeatureVisits, StoreError};
use futures::{StreamExt, TryStreamExt, stream};
use std::collections::{BTreeMap, HashMap};

/// Values answered per feature.
pub(crate) const TOP_VALUES: usize = 50;
/// Values the sealer keeps per feature and day: a range's top values come from each day's
/// top values, and hostile pages cannot make a sealed day store values without bound.
pub(crate) const SEALED_VALUES_PER_FEATURE: usize = 1000;

/// The most visited values of each feature, most visits first, then by value.
pub(crate) type FeatureValues = BTreeMap<String, Vec<(String, u64)>>;

/// What a sealed site-day keeps of its feature values: the valid visits of each single-feature
/// combination, the most visited [`SEALED_VALUES_PER_FEATURE`] of each feature.
pub(crate) fn sealed_feature_values(day: &SiteDay) -> Vec<FeatureVisits> {
    let mut values = Vec::new();
    for (combination, counts) in &day.combinations {
        let Some(features) = Features::from_combination_key(combination) else {
            continue;
        };
        let mut entries = features.entries().iter();
        let (Some((name, value)), None) = (entries.next(), entries.next()) else {
            continue;
        };
        let visits: u64 = counts.slices.values().map(|visits| visits.valid).sum();
        if visits > 0 {
            values.push(FeatureVisits {
                feature: name.clone(),
                value: value.clone(),
                visits,
            });
        }
    }
    most_visited_per_feature(values)
}

/// The most visited [`SEALED_VALUES_PER_FEATURE`] of each feature among `values`, each value
/// of a feature given once: also how the lists of a site-day aggregated in parts are joined,
/// a combination lying in one part only.
pub(crate) fn most_visited_per_feature(values: Vec<FeatureVisits>) -> Vec<FeatureVisits> {
    let mut by_feature: HashMap<String, Vec<(String, u64)>> = HashMap::new();
    for FeatureVisits {
        feature,
        value,
        visits,
    } in values
    {
        by_feature.entry(feature).or_default().push((value, visits));
    }
    by_feature
        .into_iter()
        .flat_map(|(feature, values)| {
            top(values, SEALED_VALUES_PER_FEATURE)
                .into_iter()
                .map(move |(value, visits)| FeatureVisits {
                    feature: feature.clone(),
                    value,
                    visits,
                })
        })
        .collect()
}

fn top(mut values: Vec<(String, u64)>, limit: usize) -> Vec<(String, u64)> {
    values.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    values.truncate(limit);
    values
}

/// The [`TOP_VALUES`] most visited values of each feature of `site` over `range`.
pub(crate) async fn site_features(
    reader: &Reader,
    site: &SiteId,
    range: &QueryRange,
) -> Result<FeatureValues, QueryError> {
    let store = reader.store.as_ref();
    let owner = &Owner::Site(site.clone());
    let concurrency = reader.fan_out.concurrency.max(1);
    let days: Vec<Day> = range.utc_days().collect();
    let states: Vec<(Day, bool)> = stream::iter(days)
        .map(|day| async move {
            let sealed = store.seal_state(owner, day).await?.is_current();
            // A day the range cuts is counted beacon by beacon, at their times.
            let inside = day.start_utc() >= range.start() && day.next().start_utc() <= range.end();
            Ok::<_, StoreError>((day, sealed && inside))
        })
        .buffer_unordered(concurrency)
        .try_collect()
        .await?;
    let history = reader.settings.history(owner).await?;
    let staleness = reader.settings.read_staleness();
    let (sealed, raw): (Vec<_>, Vec<_>) = states.into_iter().partition(|(_, sealed)| *sealed);
    let raw_partitions: Vec<_> = raw
        .iter()
        .flat_map(|(day, _)| visit_partitions(site, *day, &history, staleness))
        .collect();
    reader.budget.check(PartitionBudget::cost(
        sealed
            .iter()
            .map(|_| (true, 1))
            .chain(std::iter::once((false, raw_partitions.len()))),
    ))?;
    let mut visits: HashMap<(String, String), u64> = HashMap::new();
    let mut sealed_reads = stream::iter(sealed)
        .map(|(day, _)| async move { store.read_site_features(site, day).await })
        .buffer_unordered(concurrency);
    while let Some(values) = sealed_reads.next().await {
        for entry in values? {
            *visits.entry((entry.feature, entry.value)).or_default() += entry.visits;
        }
    }
    let mut raw_reads = stream::iter(raw_partitions)
        .map(|partition| async move { store.read_visits(&partition).await })
        .buffer_unordered(concurrency);
    while let Some(rows) = raw_reads.next().await {
        for row in rows? {
            if row.invalid.is_some() || !range.contains(row.timestamp.instant()) {
                continue;
            }
            for (name, value) in row.features.entries() {
                *visits.entry((name.clone(), value.clone())).or_default() += 1;
            }
        }
    }
    let mut by_feature: HashMap<String, Vec<(String, u64)>> = HashMap::new();
    for ((feature, value), count) in visits {
        by_feature.entry(feature).or_default().push((value, count));
    }
    Ok(by_feature
        .into_iter()
        .map(|(feature, values)| (feature, top(values, TOP_VALUES)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_visited_come_first_then_by_value() {
        let values = vec![
            ("b".to_owned(), 3),
            ("a".to_owned(), 3),
            ("c".to_owned(), 9),
            ("d".to_owned(), 1),
        ];
        assert_eq!(
            top(values, 3),
            vec![
                ("c".to_owned(), 9),
                ("a".to_owned(), 3),
                ("b".to_owned(), 3)
            ]
        );
    }
}
