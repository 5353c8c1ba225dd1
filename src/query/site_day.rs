//! One UTC day of one site, added up from its stored beacons: exact visits per 15-minute
//! slice and visitors per hour, for every feature combination. Invalid traffic is counted
//! beside the visits (never as one), and never as a visitor; nor is a beacon sent under Global
//! Privacy Control (docs/API.md, "Privacy"). The sealer stores it as the
//! day's rollup; the start-up repair stores its sketches as the day's live state.

use super::FanOut;
use super::plan::visit_partitions;
use crate::domain::beacon::SiteId;
use crate::domain::owner::Owner;
use crate::domain::sketch::{BufferedSketch, MemberHash};
use crate::domain::time::{Day, HOUR_MILLIS, SLICE_MILLIS};
use crate::settings::SettingsCache;
use crate::store::{SliceVisits, StoreError, VisitStore};
use futures::{StreamExt, stream};
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

/// Reads every stored beacon of `site` for UTC `day` and adds it to every subset of its
/// features.
pub(crate) async fn aggregate_site_day(
    store: &dyn VisitStore,
    settings: &SettingsCache,
    site: &SiteId,
    day: Day,
    fan_out: FanOut,
) -> Result<SiteDay, StoreError> {
    let history = settings.history(&Owner::Site(site.clone())).await?;
    let partitions = visit_partitions(site, day, &history, settings.read_staleness());
    let mut aggregate = SiteDay::default();
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
                let entry = aggregate.combinations.entry(combination).or_default();
                let visits = entry.slices.entry(slice).or_default();
                if row.invalid.is_some() {
                    visits.invalid += 1;
                    continue;
                }
                visits.valid += 1;
                // A beacon sent under Global Privacy Control is a visit without a visitor.
                if row.guid.is_visitor() {
                    entry.hours.entry(hour).or_default().insert(member);
                }
            }
            aggregate.beacons += 1;
        }
    }
    Ok(aggregate)
}
