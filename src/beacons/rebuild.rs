//! Rebuilding a site-day's unique-visitor sketches from its stored beacons: after a restart
//! (the open days a crashed process may not have flushed) and on an operator's demand.
//!
//! A rebuild writes under one fixed writer id: each rebuild reads every beacon stored so far,
//! a superset of what any rebuild that started earlier read, and its rows carry its start time,
//! so an earlier rebuild finishing later never overwrites it (Cassandra `USING TIMESTAMP`).

use super::live::capture_time;
use crate::domain::beacon::SiteId;
use crate::domain::sketch::{MemberHash, UniqueSketch};
use crate::domain::time::Day;
use crate::query::FanOut;
use crate::query::plan::visit_partitions;
use crate::settings::SettingsCache;
use crate::store::{SketchPartition, SketchRow, Store, StoreError};
use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use std::collections::{BTreeMap, HashMap};
use uuid::Uuid;

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
    let history = settings.site_history(site).await?;
    let partitions = visit_partitions(site, day, &history, settings.read_staleness());
    let mut sketches: HashMap<String, BTreeMap<DateTime<Utc>, UniqueSketch>> = HashMap::new();
    let mut beacons = 0;
    let mut reads = stream::iter(partitions)
        .map(|partition| async move { store.read_visits(&partition).await })
        .buffer_unordered(fan_out.concurrency.max(1));
    while let Some(rows) = reads.next().await {
        for row in rows? {
            // Late-written rows of a neighbouring day never land here: a partition is one day.
            let hour = row
                .timestamp
                .instant()
                .duration_trunc(TimeDelta::hours(1))
                .unwrap_or_else(|_| row.timestamp.instant());
            let member = MemberHash::of(row.guid.as_str().as_bytes());
            for combination in row.features.subset_keys() {
                sketches
                    .entry(combination)
                    .or_default()
                    .entry(hour)
                    .or_default()
                    .insert(member);
            }
            beacons += 1;
        }
    }
    stream::iter(sketches)
        .map(|(combination, hours)| async move {
            let partition = SketchPartition {
                site: site.clone(),
                day,
                combination,
            };
            let rows: Vec<SketchRow> = hours
                .into_iter()
                .map(|(hour, sketch)| SketchRow {
                    hour,
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
