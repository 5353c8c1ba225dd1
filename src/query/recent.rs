//! The newest impressions of a campaign: the newest `limit` rows of each partition of the
//! current UTC day (and the next, for clocks a little ahead), merged; then earlier days one
//! at a time, only while fewer than `limit` were found, up to the look-back. Each partition
//! read is a `LIMIT` on the newest-first clustering: no day is read in full.

use super::Reader;
use super::plan::campaign_partitions;
use crate::domain::event::Impression;
use crate::domain::ids::CampaignKey;
use crate::domain::owner::Owner;
use crate::domain::partition::EventPartition;
use crate::domain::time::Day;
use crate::store::{EventStore, StoreError};
use chrono::{DateTime, Utc};
use futures::{StreamExt, stream};
use std::collections::HashSet;

/// At most this many impressions per answer.
pub(crate) const MAX_LIMIT: usize = 1_000;

/// A partition's rows read for `limit` distinct ids are at most this many times `limit`: an
/// id re-sent with many timestamps (a copy each) cannot make the list read a whole partition.
const ROWS_READ_PER_ID: usize = 8;

/// How many of the newest impressions, as of when, looking how far back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecentWindow {
    pub(crate) limit: usize,
    pub(crate) now: DateTime<Utc>,
    /// UTC days before today's that may be read.
    pub(crate) lookback_days: u32,
}

/// The newest `limit` impressions with a timestamp up to the end of tomorrow (UTC), newest
/// first, looking back `lookback_days` UTC days before today.
pub(crate) async fn newest_impressions(
    reader: &Reader,
    campaign: CampaignKey,
    window: &RecentWindow,
) -> Result<Vec<Impression>, StoreError> {
    let RecentWindow {
        limit,
        now,
        lookback_days,
    } = *window;
    let (store, settings) = (reader.store.as_ref(), &reader.settings);
    let history = settings.history(&Owner::Campaign(campaign)).await?;
    let today = Day::new(now.date_naive());
    let oldest = Day::new(now.date_naive() - chrono::Days::new(u64::from(lookback_days)));
    // Newest first: tomorrow and today together, then one earlier day at a time.
    let mut groups: Vec<Vec<Day>> = vec![vec![today.next(), today]];
    let mut day = today;
    while day > oldest {
        day = Day::new(day.date() - chrono::Days::new(1));
        groups.push(vec![day]);
    }
    let mut found: Vec<Impression> = Vec::new();
    for days in groups {
        let partitions: Vec<_> = campaign_partitions(
            campaign,
            days.into_iter(),
            &history,
            settings.read_staleness(),
        )
        .into_iter()
        .flat_map(|(_, partitions)| partitions)
        .collect();
        let mut reads = stream::iter(partitions)
            .map(|partition| newest_of_partition(store, partition, limit))
            .buffer_unordered(reader.fan_out.concurrency.max(1));
        while let Some(rows) = reads.next().await {
            found.extend(rows?);
            // Held: the newest `limit` so far and the partitions in flight, not every
            // partition's newest.
            if found.len() >= limit.saturating_mul(2) {
                found = newest_distinct(found, limit);
            }
        }
        found = newest_distinct(found, limit);
        // Every later group is older than everything found so far.
        if found.len() >= limit {
            break;
        }
    }
    Ok(found)
}

/// The newest rows of one partition holding `limit` distinct ids (or all its rows, or its
/// newest [`ROWS_READ_PER_ID`] × `limit`): an id stored twice (re-sent with another
/// timestamp) takes two rows of a `LIMIT`, and the rows it pushed out could be newer than
/// anything another partition or day offers.
async fn newest_of_partition(
    store: &dyn EventStore,
    partition: EventPartition,
    limit: usize,
) -> Result<Vec<Impression>, StoreError> {
    let most = limit.saturating_mul(ROWS_READ_PER_ID);
    let mut asked = limit;
    loop {
        let rows = store.read_newest_impressions(&partition, asked).await?;
        let distinct = rows
            .iter()
            .map(|impression| impression.impression_id)
            .collect::<HashSet<_>>()
            .len();
        if rows.len() < asked || distinct >= limit || asked >= most {
            return Ok(rows);
        }
        asked = asked.saturating_mul(2).min(most);
    }
}

/// The newest `limit` of `impressions`, newest first, each id once (its newest row).
fn newest_distinct(mut impressions: Vec<Impression>, limit: usize) -> Vec<Impression> {
    impressions.sort_by(|a, b| {
        b.timestamp
            .instant()
            .cmp(&a.timestamp.instant())
            .then_with(|| a.impression_id.cmp(&b.impression_id))
    });
    let mut seen = HashSet::new();
    impressions.retain(|impression| seen.insert(impression.impression_id));
    impressions.truncate(limit);
    impressions
}
