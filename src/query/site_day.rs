//! One UTC day of one site, added up from its stored beacons: exact visits per 15-minute
//! slice and visitors per hour, for every feature combination. Invalid traffic is counted
//! beside the visits (never as one), and never as a visitor; nor is a beacon sent under Global
//! Privacy Control (docs/API.md, "Privacy"). The sealer stores it as the
//! day's rollup; the start-up repair stores its sketches as the day's live state. A day whose
//! combinations would outgrow [`SITE_DAY_BYTES`] is added up in parts, a pass over its beacons
//! each, so that neither holds more than the budget.

use super::FanOut;
use super::plan::visit_partitions;
use crate::domain::beacon::SiteId;
use crate::domain::owner::Owner;
use crate::domain::sketch::{BufferedSketch, MemberHash};
use crate::domain::time::{Day, HOUR_MILLIS, SLICE_MILLIS};
use crate::settings::SettingsCache;
use crate::store::{SliceVisits, StoreError, VisitStore};
use futures::{StreamExt, stream};
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};

/// One feature combination of a site-day, from its stored beacons.
#[derive(Debug, Default)]
pub(crate) struct CombinationDay {
    /// Visits by 15-minute slice since the epoch.
    pub(crate) slices: BTreeMap<i64, SliceVisits>,
    /// Visitors by hour since the epoch (a busy hour's sketch takes its members in batches).
    pub(crate) hours: BTreeMap<i64, BufferedSketch>,
}

/// Every feature combination of a site-day.
#[derive(Debug, Default)]
pub(crate) struct SiteDay {
    pub(crate) combinations: HashMap<String, CombinationDay>,
    /// Beacons read.
    pub(crate) beacons: usize,
}

/// What the combinations one pass over a site-day holds may take in memory, estimated: a
/// day whose combinations need more is aggregated in parts, each a pass over its beacons
/// keeping only the combinations that hash into it. Feature values come from the pages
/// (referrers, paths), so a busy site, or hostile beacons, can give a day millions of them.
pub(crate) const SITE_DAY_BYTES: usize = 256 * 1024 * 1024;

/// A B-tree's leaf node of entries of `entry` bytes: room for eleven, a parent link, lengths.
const fn leaf_bytes(entry: usize) -> usize {
    11 * entry + 16
}
const SLICE_ENTRY: usize = std::mem::size_of::<(i64, SliceVisits)>();
const HOUR_ENTRY: usize = std::mem::size_of::<(i64, BufferedSketch)>();
/// What a combination costs besides its key's text and its sketches' heap: its map entry (at
/// the map's load) and the first leaf of each of its trees, which holds one entry or eleven.
const COMBINATION_OVERHEAD: usize = std::mem::size_of::<(String, CombinationDay)>() * 8 / 7
    + leaf_bytes(SLICE_ENTRY)
    + leaf_bytes(HOUR_ENTRY);
/// What a slice's visits and an hour's sketch add to their trees past the first leaf (nodes
/// about two thirds full).
const SLICE_BYTES: usize = SLICE_ENTRY * 3 / 2;
const HOUR_BYTES: usize = HOUR_ENTRY * 3 / 2;
/// Parts a day is cut into at most: a part is kept whatever it holds once it is this small
/// (or holds one combination, which no cut makes smaller).
const MOST_PARTS: u64 = 1 << 20;

/// The combinations one pass keeps: those whose key hashes to `index` among `parts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Part {
    index: u64,
    parts: u64,
}

impl Part {
    const WHOLE: Part = Part { index: 0, parts: 1 };

    fn holds(&self, combination: &str) -> bool {
        self.parts == 1
            || xxhash_rust::xxh3::xxh3_64(combination.as_bytes()) % self.parts == self.index
    }

    /// This part's combinations in two parts.
    fn halves(self) -> [Part; 2] {
        let parts = self.parts.saturating_mul(2);
        [
            Part {
                index: self.index,
                parts,
            },
            Part {
                index: self.index + self.parts,
                parts,
            },
        ]
    }
}

/// A site-day aggregated in as many parts as its combinations need to stay within a byte
/// budget: [`Self::next`] gives each part once, and together they hold every combination
/// once.
pub(crate) struct SiteDayParts {
    budget: usize,
    /// Parts still to aggregate; a part that outgrew the budget comes back as its halves.
    waiting: Vec<Part>,
}

impl SiteDayParts {
    pub(crate) fn new(budget: usize) -> Self {
        Self {
            budget,
            waiting: vec![Part::WHOLE],
        }
    }

    /// The next part of `site`'s UTC `day`; `None` once every part was given.
    pub(crate) async fn next(
        &mut self,
        store: &dyn VisitStore,
        settings: &SettingsCache,
        (site, day): (&SiteId, Day),
        fan_out: FanOut,
    ) -> Result<Option<SiteDay>, StoreError> {
        while let Some(part) = self.waiting.pop() {
            match aggregate_part(store, settings, (site, day), fan_out, (part, self.budget)).await?
            {
                Some(aggregate) => return Ok(Some(aggregate)),
                None => {
                    metrics::counter!("adevents_site_day_parts_split_total").increment(1);
                    self.waiting.extend(part.halves());
                }
            }
        }
        Ok(None)
    }
}

/// Reads every stored beacon of `site` for UTC `day` and adds it to every subset of its
/// features, in one pass and without a bound on memory: the tests' reference.
#[cfg(test)]
pub(crate) async fn aggregate_site_day(
    store: &dyn VisitStore,
    settings: &SettingsCache,
    site: &SiteId,
    day: Day,
    fan_out: FanOut,
) -> Result<SiteDay, StoreError> {
    let whole = aggregate_part(
        store,
        settings,
        (site, day),
        fan_out,
        (Part::WHOLE, usize::MAX),
    )
    .await?;
    Ok(whole.unwrap_or_default())
}

/// Reads every stored beacon of `site` for UTC `day` and adds it to every subset of its
/// features that `part` holds; `None` once those combinations (two or more) outgrow `budget`
/// bytes.
async fn aggregate_part(
    store: &dyn VisitStore,
    settings: &SettingsCache,
    (site, day): (&SiteId, Day),
    fan_out: FanOut,
    (part, budget): (Part, usize),
) -> Result<Option<SiteDay>, StoreError> {
    let history = settings.history(&Owner::Site(site.clone())).await?;
    let partitions = visit_partitions(site, day, &history, settings.read_staleness());
    let mut aggregate = SiteDay::default();
    let mut bytes = 0usize;
    let mut reads = stream::iter(partitions)
        .map(|partition| async move { store.read_visits(&partition).await })
        .buffer_unordered(fan_out.concurrency.max(1));
    while let Some(rows) = reads.next().await {
        for row in rows? {
            let millis = row.timestamp.epoch_millis();
            let (slice, hour) = (
                millis.div_euclid(SLICE_MILLIS),
                millis.div_euclid(HOUR_MILLIS),
            );
            let member = MemberHash::of(row.guid.as_str().as_bytes());
            for combination in row.features.subset_keys() {
                if !part.holds(&combination) {
                    continue;
                }
                let entry = match aggregate.combinations.entry(combination) {
                    Entry::Occupied(entry) => entry.into_mut(),
                    Entry::Vacant(entry) => {
                        bytes += entry.key().capacity() + COMBINATION_OVERHEAD;
                        entry.insert(CombinationDay::default())
                    }
                };
                let visits = entry.slices.entry(slice).or_insert_with(|| {
                    bytes += SLICE_BYTES;
                    SliceVisits::default()
                });
                if row.invalid.is_some() {
                    visits.invalid += 1;
                    continue;
                }
                visits.valid += 1;
                // A beacon sent under Global Privacy Control is a visit without a visitor.
                if row.guid.is_visitor() {
                    let sketch = entry.hours.entry(hour).or_insert_with(|| {
                        bytes += HOUR_BYTES;
                        BufferedSketch::default()
                    });
                    let before = sketch.heap_bytes();
                    if sketch.insert(member) {
                        bytes = (bytes + sketch.heap_bytes()).saturating_sub(before);
                    }
                }
            }
            aggregate.beacons += 1;
            if bytes > budget && aggregate.combinations.len() > 1 && part.parts < MOST_PARTS {
                return Ok(None);
            }
        }
    }
    Ok(Some(aggregate))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::beacon::{Beacon, Features, Guid, VisitPartition};
    use crate::domain::bucket::BucketCount;
    use crate::domain::time::EventTime;
    use crate::store::embedded::{EmbeddedStore, Fsync};
    use crate::store::{SettingsStore, Store};
    use chrono::{DateTime, Utc};
    use std::sync::Arc;

    /// A site-day whose combinations outgrow the budget is aggregated in parts that together
    /// hold exactly what one unbounded pass holds: each combination once, with the same
    /// visits and the same sketches.
    #[tokio::test]
    async fn a_day_too_large_for_one_pass_is_aggregated_in_parts_that_add_up_to_it() {
        let folder = tempfile::tempdir().expect("temp dir");
        let store: Arc<dyn Store> =
            Arc::new(EmbeddedStore::open_for_test(folder.path(), Fsync::Never));
        let settings_store: Arc<dyn SettingsStore> = store.clone();
        let settings = SettingsCache::new(settings_store, std::time::Duration::from_secs(10));
        let site = SiteId::parse("example.com").expect("a site");
        let day = Day::new("2026-11-01".parse().expect("a date"));
        let partition = VisitPartition {
            site: site.clone(),
            day,
            bucket: BucketCount::ONE.ids().next().expect("bucket 0"),
        };
        let start: DateTime<Utc> = "2026-11-01T10:00:00Z".parse().expect("a time");
        // 300 beacons of 60 visitors, each with its own referrer and one of 7 paths.
        let beacons: Vec<Beacon> = (0..300i64)
            .map(|n| Beacon {
                site: site.clone(),
                guid: Guid::parse(&format!("visitor-{}", n % 60)).expect("a guid"),
                timestamp: EventTime::from_epoch_millis(
                    (start.timestamp() + n * 97) * 1000,
                    start + chrono::Duration::days(1),
                )
                .expect("a time"),
                features: Features::new(
                    [
                        ("page".to_owned(), format!("/{}", n % 7)),
                        ("referrer".to_owned(), format!("r{n}.example")),
                    ]
                    .into(),
                )
                .expect("features"),
                user_agent: None,
                invalid: None,
            })
            .collect();
        store
            .write_visits(&partition, &beacons, &[])
            .await
            .expect("stored");
        let fan_out = FanOut { concurrency: 4 };
        let whole = aggregate_site_day(store.as_ref(), &settings, &site, day, fan_out)
            .await
            .expect("aggregated");
        assert_eq!(whole.combinations.len(), 1 + 7 + 300 + 300);

        let mut parts = SiteDayParts::new(16 * 1024);
        let mut combined: HashMap<String, CombinationDay> = HashMap::new();
        let mut count = 0;
        while let Some(part) = parts
            .next(store.as_ref(), &settings, (&site, day), fan_out)
            .await
            .expect("aggregated")
        {
            assert_eq!(part.beacons, 300);
            for (combination, counts) in part.combinations {
                assert!(
                    combined.insert(combination, counts).is_none(),
                    "each combination in one part"
                );
            }
            count += 1;
        }
        assert!(count > 4, "the budget took {count} parts");
        let sketches = |day: CombinationDay| -> Vec<(i64, Vec<u8>)> {
            day.hours
                .into_iter()
                .map(|(hour, sketch)| (hour, sketch.into_sketch().to_bytes()))
                .collect()
        };
        assert_eq!(combined.len(), whole.combinations.len());
        for (combination, expected) in whole.combinations {
            let found = combined.remove(&combination).expect("every combination");
            assert_eq!(found.slices, expected.slices, "{combination}");
            assert_eq!(sketches(found), sketches(expected), "{combination}");
        }
    }
}
