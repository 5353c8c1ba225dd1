//! Rebuilding a site-day's unique-visitor sketches from its stored beacons: after a restart
//! (the open days a crashed process may not have flushed) and on an operator's demand.
//!
//! A rebuild writes under one fixed writer id: each rebuild reads every beacon stored so far,
//! a superset of what any rebuild that started earlier read, and its rows carry its start time,
//! so an earlier rebuild finishing later never overwrites it (Cassandra `USING TIMESTAMP`).

use super::live::capture_time;
use crate::domain::beacon::SiteId;
use crate::domain::sketch::{MemberHash, UniqueSketch};
use crate::domain::time::{Day, HOUR_MILLIS, SLICE_MILLIS};
use crate::query::FanOut;
use crate::query::plan::visit_partitions;
use crate::settings::SettingsCache;
use crate::store::{SketchPartition, SketchRow, Store, StoreError};
use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use std::collections::{BTreeMap, HashMap};
use uuid::Uuid;

/// One feature combination of a site-day, from its stored beacons.
#[derive(Debug, Default)]
pub struct CombinationDay {
    /// Visits by 15-minute slice since the epoch.
    pub slices: BTreeMap<i64, u64>,
    /// Visitors by hour since the epoch.
    pub hours: BTreeMap<i64, UniqueSketch>,
}

/// Every feature combination of a site-day.
#[derive(Debug, Default)]
pub struct SiteDay {
    pub combinations: HashMap<String, CombinationDay>,
    /// Beacons read.
    pub beacons: usize,
}

fn hour_start(hour: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(hour * HOUR_MILLIS).unwrap_or_default()
}

/// Reads every stored beacon of `site` for UTC `day` and adds it to every subset of its
/// features: exact visits per 15-minute slice, visitors per hour.
pub async fn aggregate_site_day(
    store: &dyn Store,
    settings: &SettingsCache,
    site: &SiteId,
    day: Day,
    fan_out: FanOut,
) -> Result<SiteDay, StoreError> {
    let history = settings.site_history(site).await?;
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
                *entry.slices.entry(slice).or_default() += 1;
                entry.hours.entry(hour).or_default().insert(member);
            }
            aggregate.beacons += 1;
        }
    }
    Ok(aggregate)
}

/// The writer id of rebuilt sketches.
pub const REBUILD_WRITER: Uuid = Uuid::nil();

/// Rebuilds every sketch of `site` for UTC `day`; returns how many beacons were read.
pub async fn rebuild_site_day(
    store: &dyn Store,
    settings: &SettingsCache,
    site: &SiteId,
    day: Day,
    fan_out: FanOut,
) -> Result<usize, StoreError> {
    // Captured before the first read: a rebuild that read earlier never overwrites one that
    // read later, whichever finishes last.
    let captured_at = capture_time();
    let day_aggregate = aggregate_site_day(store, settings, site, day, fan_out).await?;
    let beacons = day_aggregate.beacons;
    let sketches = day_aggregate.combinations;
    stream::iter(sketches)
        .map(|(combination, combination_day)| async move {
            let partition = SketchPartition {
                site: site.clone(),
                day,
                combination,
            };
            let rows: Vec<SketchRow> = combination_day
                .hours
                .into_iter()
                .map(|(hour, sketch)| SketchRow {
                    hour: hour_start(hour),
                    writer: REBUILD_WRITER,
                    sketch: sketch.to_bytes(),
                    captured_at,
                })
                .collect();
            store.write_sketches(&partition, &rows).await
        })
        .buffer_unordered(fan_out.concurrency.max(1))
        .try_collect::<()>()
        .await?;
    Ok(beacons)
}

/// Rebuilds the sketches of every site that received beacons on `days` (the day index).
pub async fn rebuild_days(
    store: &dyn Store,
    settings: &SettingsCache,
    days: &[Day],
    fan_out: FanOut,
) -> Result<usize, StoreError> {
    let mut beacons = 0;
    for day in days {
        for site in store.sites_of_day(*day).await? {
            beacons += rebuild_site_day(store, settings, &site, *day, fan_out).await?;
        }
    }
    Ok(beacons)
}
