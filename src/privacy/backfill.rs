//! Indexing events stored before the subject index existed (`adevents privacy index-events`):
//! every impression and click of each campaign-day goes through the event index again, which
//! writes its user's directory lines too, and every beacon's visitor gets its (site, guid,
//! day) entry. Entries written twice are the same entries, so a run cut off anywhere is
//! resumed by running it again from the day it last reported.

use crate::domain::beacon::{Guid, SiteId};
use crate::domain::owner::{Owner, OwnerKind};
use crate::domain::privacy::VisitorDay;
use crate::domain::time::Day;
use crate::event_index::EventIndexer;
use crate::event_index::reindex::reindex_campaign_day;
use crate::query::plan::visit_partitions;
use crate::settings::SettingsCache;
use crate::store::{Store, StoreError};
use futures::{StreamExt, TryStreamExt, stream};
use std::collections::BTreeSet;

/// What indexing one UTC day went through.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DayIndexed {
    pub campaigns: usize,
    /// Impressions and clicks indexed.
    pub events: usize,
    pub sites: usize,
    /// Distinct (site, guid) visitors of the day given their entry.
    pub visitors: usize,
}

/// Indexes every event stored for UTC `day`, campaigns `concurrency` partitions at a time.
pub async fn index_day(
    store: &dyn Store,
    settings: &SettingsCache,
    indexer: &EventIndexer,
    day: Day,
    concurrency: usize,
) -> Result<DayIndexed, StoreError> {
    let mut indexed = DayIndexed::default();
    for owner in store.owners_of_day(OwnerKind::Campaign, day).await? {
        if let Owner::Campaign(campaign) = owner {
            indexed.events +=
                reindex_campaign_day(store, settings, indexer, campaign, day, concurrency).await?;
            indexed.campaigns += 1;
        }
    }
    for owner in store.owners_of_day(OwnerKind::Site, day).await? {
        if let Owner::Site(site) = owner {
            indexed.visitors += index_site_day(store, settings, &site, day, concurrency).await?;
            indexed.sites += 1;
        }
    }
    Ok(indexed)
}

/// Writes the visitor-index entry of every visitor of `site`'s `day`; returns how many.
async fn index_site_day(
    store: &dyn Store,
    settings: &SettingsCache,
    site: &SiteId,
    day: Day,
    concurrency: usize,
) -> Result<usize, StoreError> {
    let history = settings.history(&Owner::Site(site.clone())).await?;
    let partitions = visit_partitions(site, day, &history, settings.read_staleness());
    let guids: Vec<Vec<Guid>> = stream::iter(partitions.iter())
        .map(|partition| async move {
            let rows = store.read_visits(partition).await?;
            // A beacon sent under Global Privacy Control has no visitor to find.
            Ok::<_, StoreError>(
                rows.into_iter()
                    .map(|row| row.guid)
                    .filter(Guid::is_visitor)
                    .collect(),
            )
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await?;
    let visitors: Vec<VisitorDay> = guids
        .into_iter()
        .flatten()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(|guid| VisitorDay {
            site: site.clone(),
            guid,
            day,
        })
        .collect();
    let Some(partition) = partitions.first() else {
        return Ok(0);
    };
    // Entries alone, no beacons: the write that stores them beside beacons takes none too.
    for chunk in visitors.chunks(VISITORS_PER_WRITE) {
        store.write_visits(partition, &[], chunk).await?;
    }
    Ok(visitors.len())
}

/// Visitor entries per write: one commit (or batch) stays small whatever the day's size.
const VISITORS_PER_WRITE: usize = 500;
