//! Finds one user's stored events without scanning: the subject directory names the
//! advertiser-weeks that hold the user's index entries, the entries name each impression and
//! its copies, and an impression's clicks and view reports are read by its keys. So the cost
//! follows the subject's events, not the store's size. A site's visitor is found the same way
//! through the visitor index: its days, then one visit partition per day.

use crate::domain::beacon::{Guid, SiteId, VisitPartition};
use crate::domain::conversion::ConversionId;
use crate::domain::conversion::index::{IndexEntry, IndexKey, IndexedKind};
use crate::domain::ids::{AdvertiserId, CampaignKey, ImpressionId, UserId};
use crate::domain::owner::Owner;
use crate::domain::partition::EventPartition;
use crate::domain::privacy::{SubjectWeek, VisitorDay};
use crate::domain::slices::Span;
use crate::domain::time::EventTime;
use crate::domain::view::StoredReport;
use crate::settings::SettingsCache;
use crate::store::{ClickRow, ConversionRecord, EventAt, Store, StoreError, VisitRow};
use chrono::{DateTime, TimeDelta, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Reads at once while finding.
const CONCURRENCY: usize = 16;

/// One impression of the subject, with what hangs off it.
#[derive(Debug, Clone)]
pub(crate) struct FoundImpression {
    pub(crate) campaign: CampaignKey,
    pub(crate) impression_id: ImpressionId,
    /// Each stored copy (an impression re-sent with another timestamp is stored twice).
    pub(crate) copies: Vec<EventAt>,
    /// Each stored click, where its row is.
    pub(crate) clicks: Vec<(EventAt, ClickRow)>,
}

/// Everything of one visitor that the visitor index leads to.
#[derive(Debug, Clone, Default)]
pub(crate) struct VisitorEvents {
    /// The visitor's entries in the index.
    pub(crate) days: Vec<VisitorDay>,
    /// The visitor's stored beacons, by partition, oldest partition first.
    pub(crate) visits: Vec<(VisitPartition, Vec<VisitRow>)>,
}

impl VisitorEvents {
    /// Stored beacons, each once.
    pub(crate) fn count(&self) -> u64 {
        self.visits.iter().map(|(_, rows)| rows.len() as u64).sum()
    }
}

/// Everything of one subject that the index leads to.
#[derive(Debug, Clone, Default)]
pub(crate) struct SubjectEvents {
    pub(crate) weeks: Vec<SubjectWeek>,
    /// The user's own index entries that led here.
    pub(crate) entries: Vec<IndexEntry>,
    pub(crate) impressions: Vec<FoundImpression>,
    /// The conversions carrying the user, as stored (every copy, the decision once made).
    pub(crate) conversions: Vec<ConversionRecord>,
}

#[derive(Clone)]
pub(crate) struct SubjectFinder {
    store: Arc<dyn Store>,
    settings: Arc<SettingsCache>,
}

impl SubjectFinder {
    pub(crate) fn new(store: Arc<dyn Store>, settings: Arc<SettingsCache>) -> Self {
        Self { store, settings }
    }

    /// The user's events of every advertiser, or of `scope` only; with `stored_before`, only
    /// those stored or timed before then (an erasure leaves the user's later events be).
    pub(crate) async fn find(
        &self,
        user: UserId,
        scope: Option<AdvertiserId>,
        stored_before: Option<DateTime<Utc>>,
    ) -> Result<SubjectEvents, StoreError> {
        let weeks: Vec<SubjectWeek> = self
            .store
            .read_subject_weeks(user)
            .await?
            .into_iter()
            .filter(|line| line.user_id == user)
            .filter(|line| scope.is_none_or(|advertiser| advertiser == line.advertiser_id))
            .collect();
        let entries: Vec<_> = stream::iter(weeks.clone())
            .map(|line| {
                let store = Arc::clone(&self.store);
                async move {
                    store
                        .read_index(line.advertiser_id, line.week, IndexKey::User(user))
                        .await
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_concat()
            .await?;
        let entries: Vec<IndexEntry> = entries
            .into_iter()
            .filter(|entry| entry.user_id == Some(user))
            // Stored before, or timed before: ingestion drops the user's events timed before
            // an erasure once every process knows it, and a repair re-indexes events with its
            // own time as their arrival.
            .filter(|entry| {
                stored_before.is_none_or(|before| {
                    entry.received < before || entry.timestamp.instant() < before
                })
            })
            .collect();
        // Every impression the user's entries name: its copies from the impression entries
        // (a click entry names its impression too, whose copies may have gone already).
        let mut named: BTreeMap<(CampaignKey, ImpressionId), BTreeSet<EventTime>> = BTreeMap::new();
        for entry in &entries {
            let campaign = CampaignKey {
                advertiser_id: entry.advertiser_id,
                campaign_id: entry.campaign_id,
            };
            let copies = named.entry((campaign, entry.impression_id)).or_default();
            if entry.kind == IndexedKind::Impression {
                copies.insert(entry.timestamp);
            }
        }
        let mut impressions: Vec<FoundImpression> = stream::iter(named)
            .map(|((campaign, impression_id), copies)| {
                self.impression(campaign, impression_id, copies)
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect()
            .await?;
        // In the order the rows are stored (campaign, day, bucket, time): reading them one
        // after another then touches each of a table's filter and index partitions a few
        // times in a row, while they are cached, instead of all of them at random; among 10M
        // stored events a random order evicts them between two uses.
        impressions.sort_by_key(|impression| impression.copies.first().copied());
        let conversions = self.conversions(user, &weeks, stored_before).await?;
        Ok(SubjectEvents {
            weeks,
            entries,
            impressions,
            conversions,
        })
    }

    /// The conversions carrying `user` that the directory's advertiser-weeks lead to, stored
    /// or timed before `stored_before`, oldest first.
    async fn conversions(
        &self,
        user: UserId,
        weeks: &[SubjectWeek],
        stored_before: Option<DateTime<Utc>>,
    ) -> Result<Vec<ConversionRecord>, StoreError> {
        let ids: BTreeSet<(AdvertiserId, ConversionId)> = stream::iter(weeks.to_vec())
            .map(|line| {
                let store = Arc::clone(&self.store);
                async move {
                    let ids = store
                        .read_subject_conversions(line.advertiser_id, line.week, user)
                        .await?;
                    Ok::<_, StoreError>(
                        ids.into_iter()
                            .map(|id| (line.advertiser_id, id))
                            .collect::<Vec<_>>(),
                    )
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_concat()
            .await?
            .into_iter()
            .collect();
        let mut records: Vec<ConversionRecord> = stream::iter(ids)
            .map(|(advertiser, id)| {
                let store = Arc::clone(&self.store);
                async move { store.conversion_record(advertiser, &id).await }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect()
            .await?;
        // The id is the advertiser's: only its copies carrying this user are the user's.
        records.retain(|record| {
            record.copies.iter().any(|copy| {
                copy.conversion.user_id == Some(user)
                    && stored_before.is_none_or(|before| {
                        copy.received < before || copy.conversion.timestamp.instant() < before
                    })
            })
        });
        records.sort_by_key(|record| record.copies.iter().map(|copy| copy.received).min());
        Ok(records)
    }

    async fn impression(
        &self,
        campaign: CampaignKey,
        impression_id: ImpressionId,
        copies: BTreeSet<EventTime>,
    ) -> Result<FoundImpression, StoreError> {
        let history = self.settings.history(&Owner::Campaign(campaign)).await?;
        // Clicks are bucketed by their impression's id, under the count in force at their time.
        let at = |timestamp: EventTime| EventAt {
            partition: EventPartition {
                campaign,
                day: timestamp.utc_day(),
                bucket: history
                    .buckets_at(timestamp.instant())
                    .bucket_of(impression_id.as_uuid()),
            },
            timestamp,
            impression_id,
        };
        let clicks = self
            .store
            .clicks_of(campaign, impression_id)
            .await?
            .into_iter()
            .map(|click| (at(click.timestamp), click))
            .collect();
        Ok(FoundImpression {
            campaign,
            impression_id,
            copies: copies.into_iter().map(at).collect(),
            clicks,
        })
    }

    /// A site's visitor's beacons: the visitor's days from the visitor index, then for each
    /// day the one partition the guid hashes to under each bucket count in force that day
    /// (the way `/track` chose it), filtered to the guid.
    pub(crate) async fn find_visitor(
        &self,
        site: &SiteId,
        guid: &Guid,
    ) -> Result<VisitorEvents, StoreError> {
        let days = self.store.read_visitor_days(site, guid).await?;
        if days.is_empty() {
            return Ok(VisitorEvents::default());
        }
        let history = self.settings.history(&Owner::Site(site.clone())).await?;
        let staleness = self.settings.read_staleness();
        let partitions: BTreeSet<VisitPartition> = days
            .iter()
            .flat_map(|day| {
                history
                    .counts_in_force(*day, staleness)
                    .into_iter()
                    .map(|count| VisitPartition {
                        site: site.clone(),
                        day: *day,
                        bucket: count.bucket_of_bytes(guid.as_str().as_bytes()),
                    })
            })
            .collect();
        let mut visits: Vec<(VisitPartition, Vec<VisitRow>)> = stream::iter(partitions)
            .map(|partition| {
                let store = Arc::clone(&self.store);
                async move {
                    let rows: Vec<VisitRow> = store
                        .read_visits_with_agents(&partition)
                        .await?
                        .into_iter()
                        .filter(|row| row.guid == *guid)
                        .collect();
                    Ok::<_, StoreError>((partition, rows))
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_filter(|(_, rows)| std::future::ready(!rows.is_empty()))
            .try_collect()
            .await?;
        visits.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, rows) in &mut visits {
            rows.sort_by_key(|row| row.timestamp);
        }
        let days = days
            .into_iter()
            .map(|day| VisitorDay {
                site: site.clone(),
                guid: guid.clone(),
                day,
            })
            .collect();
        Ok(VisitorEvents { days, visits })
    }

    /// The view reports stored for one copy of an impression.
    pub(crate) async fn reports_of(&self, copy: &EventAt) -> Result<Vec<StoredReport>, StoreError> {
        let from = copy.timestamp.instant();
        let span = Span {
            from,
            to: from + TimeDelta::milliseconds(1),
        };
        Ok(self
            .store
            .read_view_reports(&copy.partition, Some(span))
            .await?
            .into_iter()
            .filter(|report| report.impression_id == copy.impression_id)
            .collect())
    }
}
