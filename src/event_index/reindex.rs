//! Indexing a campaign-day again from its raw events: what the start-up repair does for a
//! process that vanished with index entries still in memory. Entries written twice are the
//! same entries; the repaired ones carry the time of the repair as their arrival, so a
//! conversion decided before it never changes, and one decided after it finds them.

use super::EventIndexer;
use crate::domain::conversion::index::{IndexEntry, IndexKey, IndexedKind};
use crate::domain::ids::CampaignKey;
use crate::domain::owner::Owner;
use crate::domain::time::Day;
use crate::query::plan::campaign_partitions;
use crate::settings::SettingsCache;
use crate::store::{Store, StoreError};
use futures::{StreamExt, TryStreamExt, stream};

/// Queues every impression and click of `campaign`'s UTC `day` into `indexer`, then flushes
/// it; returns how many events were indexed.
pub(crate) async fn reindex_campaign_day(
    store: &dyn Store,
    settings: &SettingsCache,
    indexer: &EventIndexer,
    campaign: CampaignKey,
    day: Day,
    concurrency: usize,
) -> Result<usize, StoreError> {
    let history = settings.history(&Owner::Campaign(campaign)).await?;
    let plan = campaign_partitions(
        campaign,
        std::iter::once(day),
        &history,
        settings.read_staleness(),
    );
    let partitions: Vec<_> = plan
        .into_iter()
        .flat_map(|(_, partitions)| partitions)
        .collect();
    let read: Vec<Vec<IndexEntry>> = stream::iter(partitions)
        .map(|partition| async move {
            let (impressions, clicks) = futures::try_join!(
                store.read_impression_summaries(&partition),
                store.read_clicks(&partition)
            )?;
            let mut entries = Vec::with_capacity(impressions.len() * 2 + clicks.len());
            for row in impressions {
                let entry = |key| IndexEntry {
                    advertiser_id: campaign.advertiser_id,
                    key,
                    timestamp: row.timestamp,
                    kind: IndexedKind::Impression,
                    impression_id: row.impression_id,
                    campaign_id: campaign.campaign_id,
                    ad_id: row.ad_id,
                    user_id: Some(row.user_id),
                    // Set when queued.
                    received: chrono::DateTime::UNIX_EPOCH,
                    valid: row.invalid.is_none(),
                };
                entries.push(entry(IndexKey::Impression(row.impression_id)));
                entries.push(entry(IndexKey::User(row.user_id)));
            }
            entries.extend(clicks.into_iter().map(|row| IndexEntry {
                advertiser_id: campaign.advertiser_id,
                key: IndexKey::Impression(row.impression_id),
                timestamp: row.timestamp,
                kind: IndexedKind::Click,
                impression_id: row.impression_id,
                campaign_id: campaign.campaign_id,
                ad_id: row.ad_id,
                user_id: None,
                received: chrono::DateTime::UNIX_EPOCH,
                valid: row.invalid.is_none(),
            }));
            Ok::<_, StoreError>(entries)
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect()
        .await?;
    let entries: Vec<IndexEntry> = read.into_iter().flatten().collect();
    let events = entries
        .iter()
        .filter(|entry| entry.kind == IndexedKind::Click || matches!(entry.key, IndexKey::User(_)))
        .count();
    indexer.stored(entries);
    indexer.flush().await?;
    Ok(events)
}
