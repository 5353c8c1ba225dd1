//! Realistic, reproducible mock traffic for one site: returning visitors (a few visit often,
//! most once or twice), referrers and landing pages of uneven popularity, and more visits by
//! day than by night. The same spec and seed always give the same visits.

use chrono::{NaiveDate, NaiveTime};
use rand::distr::Distribution;
use rand::distr::weighted::WeightedIndex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Share of visits per UTC hour of the day (a day-time peak).
const HOURLY_WEIGHTS: [u32; 24] = [
    2, 1, 1, 1, 1, 2, 3, 5, 7, 8, 9, 9, 9, 9, 9, 9, 9, 8, 8, 7, 6, 5, 4, 3,
];

/// Feature names the simulated beacons carry, as in the field example.
pub(crate) const REFERER_FEATURE: &str = "feature1";
pub(crate) const PAGE_FEATURE: &str = "feature2";

#[derive(Debug, Clone)]
pub struct TrafficSpec {
    pub guids: usize,
    pub visits: usize,
    pub referers: Vec<String>,
    pub pages: Vec<String>,
    pub from: NaiveDate,
    /// Exclusive.
    pub to: NaiveDate,
    pub seed: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SimulatedVisit {
    pub guid: String,
    /// Epoch seconds.
    pub timestamp: i64,
    pub referer: String,
    pub page: String,
}

impl SimulatedVisit {
    pub fn features(&self) -> [(&'static str, &str); 2] {
        [
            (REFERER_FEATURE, self.referer.as_str()),
            (PAGE_FEATURE, self.page.as_str()),
        ]
    }

    /// The urlencoded body of the beacon a script tag would post.
    pub fn form_body(&self, site: &str) -> String {
        let timestamp = self.timestamp.to_string();
        let mut params = vec![
            ("site", site),
            ("guid", self.guid.as_str()),
            ("timestamp", timestamp.as_str()),
        ];
        params.extend(self.features());
        serde_urlencoded::to_string(params).unwrap_or_default()
    }
}

/// Why a spec cannot generate traffic.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("--to must be after --from")]
    EmptyRange,
    #[error("at least one guid, referer and page are needed")]
    Empty,
}

/// Popularity falling with rank (a Zipf-like law): the first item is the most common.
fn by_rank(count: usize, exponent: f64) -> Result<WeightedIndex<f64>, SpecError> {
    WeightedIndex::new((0..count).map(|rank| 1.0 / ((rank + 1) as f64).powf(exponent)))
        .map_err(|_| SpecError::Empty)
}

pub fn generate(spec: &TrafficSpec) -> Result<Vec<SimulatedVisit>, SpecError> {
    let days = (spec.to - spec.from).num_days();
    if days <= 0 {
        return Err(SpecError::EmptyRange);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    let guids: Vec<String> = (0..spec.guids)
        .map(|_| {
            uuid::Builder::from_random_bytes(rng.random())
                .into_uuid()
                .to_string()
        })
        .collect();
    let guid_index = by_rank(guids.len(), 0.7)?;
    let referer_index = by_rank(spec.referers.len(), 1.0)?;
    let page_index = by_rank(spec.pages.len(), 1.0)?;
    let hour_index = WeightedIndex::new(HOURLY_WEIGHTS).map_err(|_| SpecError::Empty)?;
    let start = spec.from.and_time(NaiveTime::MIN).and_utc().timestamp();
    Ok((0..spec.visits)
        .map(|_| {
            let day = rng.random_range(0..days);
            let hour = hour_index.sample(&mut rng) as i64;
            let second = rng.random_range(0..3600);
            SimulatedVisit {
                guid: guids[guid_index.sample(&mut rng)].clone(),
                timestamp: start + day * 86_400 + hour * 3600 + second,
                referer: spec.referers[referer_index.sample(&mut rng)].clone(),
                page: spec.pages[page_index.sample(&mut rng)].clone(),
            }
        })
        .collect())
}

/// A feature filter: the features it fixes, by name.
pub(crate) type Filter = BTreeMap<&'static str, String>;

/// Exact visits and distinct guids of `visits` for every feature combination that occurs
/// (the empty filter, each referrer, each page, each referrer and page), keyed by filter.
pub(crate) fn exact_counts(visits: &[SimulatedVisit]) -> BTreeMap<Filter, (u64, u64)> {
    let mut guids: HashMap<Filter, (u64, HashSet<&str>)> = HashMap::new();
    // A beacon is its guid, time and features: two identical ones are one visit (docs/API.md, "Beacons").
    let distinct: HashSet<&SimulatedVisit> = visits.iter().collect();
    for visit in distinct {
        let features = visit.features();
        for mask in 0..(1u8 << features.len()) {
            let filter: Filter = features
                .iter()
                .enumerate()
                .filter(|(bit, _)| mask & (1 << bit) != 0)
                .map(|(_, (name, value))| (*name, (*value).to_owned()))
                .collect();
            let entry = guids.entry(filter).or_default();
            entry.0 += 1;
            entry.1.insert(visit.guid.as_str());
        }
    }
    guids
        .into_iter()
        .map(|(filter, (visits, guids))| (filter, (visits, guids.len() as u64)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(seed: u64) -> TrafficSpec {
        TrafficSpec {
            guids: 100,
            visits: 500,
            referers: vec!["facebook.com".into(), "google.com".into()],
            pages: vec![
                "/index.html".into(),
                "/index2.html".into(),
                "/index3.html".into(),
            ],
            from: "2018-10-01".parse().expect("date"),
            to: "2018-11-01".parse().expect("date"),
            seed,
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_traffic_within_the_range() {
        let visits = generate(&spec(7)).expect("valid");
        assert_eq!(visits, generate(&spec(7)).expect("valid"));
        assert_ne!(visits, generate(&spec(8)).expect("valid"));
        let (start, end) = (1_538_352_000, 1_541_030_400);
        assert!(visits.iter().all(|v| (start..end).contains(&v.timestamp)));
    }

    #[test]
    fn every_combination_is_counted() {
        let visits = generate(&spec(1)).expect("valid");
        let counts = exact_counts(&visits);
        // 1 + 2 referrers + 3 pages + 6 pairs.
        assert_eq!(counts.len(), 12);
        let all = counts[&Filter::new()];
        assert_eq!(all.0, 500);
        assert!(all.1 <= 100 && all.1 > 50, "{all:?}");
    }
}
