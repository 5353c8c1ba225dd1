//! Rebuilding a site-day's unique-visitor sketches from its stored beacons: after a restart
//! (the open days a crashed process may not have flushed) and on an operator's demand.
//!
//! A rebuild writes under one fixed writer id: each rebuild reads every beacon stored so far,
//! a superset of what any rebuild that started earlier read, and its rows carry its start time,
//! so an earlier rebuild finishing later never overwrites it (Cassandra `USING TIMESTAMP`).

use super::live::capture_time;
use crate::domain::beacon::SiteId;
use crate::domain::time::{Day, HOUR_MILLIS};
use crate::query::FanOut;
use crate::query::site_day::SiteDayParts;
use crate::settings::SettingsCache;
use crate::store::{SketchPartition, SketchRow, StoreError, VisitStore};
use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use uuid::Uuid;

fn hour_start(hour: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(hour * HOUR_MILLIS).unwrap_or_default()
}

/// The writer id of rebuilt sketches.
pub(crate) const REBUILD_WRITER: Uuid = Uuid::nil();

/// Rebuilds every sketch of `site` for UTC `day`; returns how many beacons were read.
pub async fn rebuild_site_day(
    store: &dyn VisitStore,
    settings: &SettingsCache,
    (site, day): (&SiteId, Day),
    (fan_out, site_day_bytes): (FanOut, usize),
) -> Result<usize, StoreError> {
    // Captured before the first read: a rebuild that read earlier never overwrites one that
    // read later, whichever finishes last.
    let captured_at = capture_time();
    let mut parts = SiteDayParts::new(site_day_bytes);
    let mut beacons = 0;
    while let Some(part) = parts.next(store, settings, (site, day), fan_out).await? {
        beacons = part.beacons;
        stream::iter(part.combinations)
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
                        sketch: sketch.into_sketch().to_bytes(),
                        captured_at,
                    })
                    .collect();
                store.write_sketches(&[(partition, rows)]).await
            })
            .buffer_unordered(fan_out.concurrency.max(1))
            .try_collect::<()>()
            .await?;
    }
    Ok(beacons)
}
