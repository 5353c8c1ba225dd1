//! The write path: validated events are placed in their partitions (campaign, UTC day, bucket
//! in force at the event's own time) and written partition by partition, several at once.
//! An answer is given only after every write was acknowledged.

use crate::domain::bucket::BucketCount;
use crate::domain::campaign::SettingsHistory;
use crate::domain::event::{CampaignEvent, Click, Impression};
use crate::domain::ids::CampaignKey;
use crate::domain::partition::EventPartition;
use crate::settings::SettingsCache;
use crate::store::{Store, StoreError};
use futures::{StreamExt, TryStreamExt, stream};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

pub struct Ingestor {
    store: Arc<dyn Store>,
    settings: Arc<SettingsCache>,
    /// Partitions written at once for one request.
    write_concurrency: usize,
}

impl Ingestor {
    pub fn new(
        store: Arc<dyn Store>,
        settings: Arc<SettingsCache>,
        write_concurrency: usize,
    ) -> Self {
        Self {
            store,
            settings,
            write_concurrency: write_concurrency.max(1),
        }
    }

    pub async fn impressions(&self, events: Vec<Impression>) -> Result<(), StoreError> {
        let partitions = self.partition(events).await?;
        self.write_all(partitions, |store, partition, events| async move {
            store.write_impressions(partition, &events).await
        })
        .await
    }

    pub async fn clicks(&self, events: Vec<Click>) -> Result<(), StoreError> {
        let partitions = self.partition(events).await?;
        self.write_all(partitions, |store, partition, events| async move {
            store.write_clicks(partition, &events).await
        })
        .await
    }

    /// Groups events by the partition each belongs to.
    async fn partition<E: CampaignEvent>(
        &self,
        events: Vec<E>,
    ) -> Result<BTreeMap<EventPartition, Vec<E>>, StoreError> {
        let histories = self.histories(&events).await?;
        let mut partitions: BTreeMap<EventPartition, Vec<E>> = BTreeMap::new();
        for event in events {
            let campaign = event.campaign();
            let timestamp = event.timestamp();
            let buckets = histories
                .get(&campaign)
                .map_or(BucketCount::ONE, |history| {
                    history.buckets_at(timestamp.instant())
                });
            let partition = EventPartition {
                campaign,
                day: timestamp.utc_day(),
                bucket: buckets.bucket_of(event.bucket_key().as_uuid()),
            };
            partitions.entry(partition).or_default().push(event);
        }
        Ok(partitions)
    }

    /// The settings of every campaign in `events`, fetched concurrently: a batch may name
    /// many campaigns the cache has not seen.
    async fn histories<E: CampaignEvent>(
        &self,
        events: &[E],
    ) -> Result<HashMap<CampaignKey, Arc<SettingsHistory>>, StoreError> {
        let campaigns: HashSet<CampaignKey> = events.iter().map(CampaignEvent::campaign).collect();
        stream::iter(campaigns)
            .map(|campaign| async move { Ok((campaign, self.settings.history(campaign).await?)) })
            .buffer_unordered(self.write_concurrency)
            .try_collect()
            .await
    }

    async fn write_all<E, W, F>(
        &self,
        partitions: BTreeMap<EventPartition, Vec<E>>,
        write: W,
    ) -> Result<(), StoreError>
    where
        W: Fn(Arc<dyn Store>, EventPartition, Vec<E>) -> F,
        F: std::future::Future<Output = Result<(), StoreError>>,
    {
        stream::iter(partitions)
            .map(|(partition, events)| write(Arc::clone(&self.store), partition, events))
            .buffer_unordered(self.write_concurrency)
            .try_collect::<()>()
            .await
    }
}
