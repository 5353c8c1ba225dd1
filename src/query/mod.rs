//! The read side: which partitions a question needs (pure planning), reading them with a
//! bounded number in flight, and adding the rows up. Shared by every store.
//!
//! [`Queries`] is the service the HTTP layer asks: it owns the store, the settings cache and
//! the fan-out limits, so a handler only names what it wants to know.

pub(crate) mod aggregate;
pub(crate) mod budget;
pub(crate) mod clicks;
pub(crate) mod conversions;
pub(crate) mod export;
pub(crate) mod features;
pub(crate) mod id_map;
pub(crate) mod impressions;
pub(crate) mod open_day;
pub(crate) mod plan;
pub mod range;
pub(crate) mod recent;
pub(crate) mod report;
pub(crate) mod site_day;
pub(crate) mod slice_memo;
pub(crate) mod span;
pub(crate) mod stretch_cache;
pub mod summary;
pub(crate) mod uniques;
pub(crate) mod views;

use crate::domain::beacon::SiteId;
use crate::domain::ids::CampaignKey;
use crate::domain::owner::{Listing, OwnerDays};
use crate::domain::slices::SliceRule;
use crate::domain::view::ViewWindow;
use crate::settings::SettingsCache;
use crate::store::{Store, StoreError};
use aggregate::BillableWindow;
use budget::PartitionBudget;
pub(crate) use budget::QueryError;
use chrono::{DateTime, Utc};
use range::QueryRange;
use std::sync::Arc;

/// How reads fan out.
#[derive(Debug, Clone, Copy)]
pub struct FanOut {
    /// Partition reads in flight at once for one query.
    pub concurrency: usize,
}

/// What every read needs: where to read, how the owners are configured, how wide to fan out,
/// how much one query may read.
#[derive(Clone)]
pub(crate) struct Reader {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) settings: Arc<SettingsCache>,
    pub(crate) fan_out: FanOut,
    pub(crate) budget: PartitionBudget,
    /// When slices of days not yet sealed close; `None`: such days are read raw, whole.
    pub(crate) open_days: Option<SliceRule>,
    /// How long after an impression its view reports count.
    pub(crate) view_window: ViewWindow,
    /// What summaries read raw of open days, kept by piece.
    pub(crate) kept_stretches: Option<Arc<stretch_cache::StretchCache>>,
    /// What summaries decoded of open days' slice aggregates.
    pub(crate) slice_memo: Arc<slice_memo::SliceMemo>,
}

/// The query side's tunables.
#[derive(Debug, Clone, Copy)]
pub struct QueryOptions {
    pub fan_out: FanOut,
    /// Billable impressions count once per user and campaign in each window this long.
    pub billable_window: BillableWindow,
    /// How many UTC days before today `impressions/recent` looks back.
    pub recent_lookback_days: u32,
    /// The most partitions one query may read (a sealed day counts as one).
    pub max_partitions: u64,
    /// An export's `clicked` means clicked within this many UTC days after the impression's.
    pub click_lookback_days: u32,
    /// Days not yet sealed are answered from their closed slices' aggregates by this rule
    /// (`None`: read raw, whole; the composition root sets it from the service's options).
    pub open_days: Option<SliceRule>,
    /// How long after an impression its view reports count.
    pub view_window: ViewWindow,
    /// Whether summaries keep what they read raw of open days, where the store allows it
    /// (`false`: read raw every time; benchmarks compare the two).
    pub keep_open_stretches: bool,
}

impl Default for QueryOptions {
    fn default() -> Self {
        Self {
            fan_out: FanOut { concurrency: 64 },
            billable_window: BillableWindow::DEFAULT,
            recent_lookback_days: 7,
            max_partitions: 20_000,
            click_lookback_days: 30,
            open_days: Some(SliceRule::default()),
            view_window: ViewWindow::default(),
            keep_open_stretches: true,
        }
    }
}

/// Answers the dashboards' questions.
pub struct Queries {
    reader: Reader,
    options: QueryOptions,
}

impl Queries {
    pub fn new(store: Arc<dyn Store>, settings: Arc<SettingsCache>, options: QueryOptions) -> Self {
        // Over a store other processes write, the slices' marks say what changed.
        let kept_stretches = options.keep_open_stretches.then(|| {
            Arc::new(match store.changes() {
                Some(changes) => stretch_cache::StretchCache::new(changes),
                None => stretch_cache::StretchCache::over_marks(),
            })
        });
        Self {
            reader: Reader {
                kept_stretches,
                slice_memo: Arc::new(slice_memo::SliceMemo::new()),
                store,
                settings,
                fan_out: options.fan_out,
                budget: PartitionBudget {
                    max: options.max_partitions,
                },
                open_days: options.open_days,
                view_window: options.view_window,
            },
            options,
        }
    }

    /// A campaign's counts over `range`, with the rows of `grouping`.
    pub async fn summary(
        &self,
        campaign: CampaignKey,
        range: &QueryRange,
        grouping: summary::Grouping,
    ) -> Result<summary::Summary, QueryError> {
        let window = self.options.billable_window;
        summary::campaign_summary(&self.reader, campaign, range, grouping, window).await
    }

    /// An advertiser's conversions over `range`, attributed or not.
    pub(crate) async fn advertiser_conversions(
        &self,
        advertiser: crate::domain::ids::AdvertiserId,
        range: &QueryRange,
        grouping: conversions::ConversionGrouping,
    ) -> Result<conversions::AdvertiserConversions, QueryError> {
        conversions::advertiser_conversions(&self.reader, advertiser, range, grouping).await
    }

    /// A campaign's impressions and clicks per value of `dimension`.
    pub(crate) async fn report(
        &self,
        campaign: CampaignKey,
        range: &QueryRange,
        dimension: &report::Dimension,
        limit: usize,
    ) -> Result<report::Report, QueryError> {
        match dimension {
            report::Dimension::AdId => {
                let window = self.options.billable_window;
                report::ad_report(&self.reader, campaign, range, window, limit).await
            }
            report::Dimension::UserData(_) => {
                report::campaign_report(&self.reader, campaign, range, dimension, limit).await
            }
        }
    }

    /// Opens a bulk export of a campaign's impressions over `range`.
    pub(crate) async fn export(
        &self,
        campaign: CampaignKey,
        range: &QueryRange,
        now: DateTime<Utc>,
    ) -> Result<export::Export, QueryError> {
        let lookback = self.options.click_lookback_days;
        export::Export::open(&self.reader, campaign, range, now, lookback).await
    }

    /// A campaign's newest `limit` impressions as of `now`.
    pub(crate) async fn recent(
        &self,
        campaign: CampaignKey,
        limit: usize,
        now: DateTime<Utc>,
    ) -> Result<Vec<crate::domain::event::Impression>, StoreError> {
        let window = recent::RecentWindow {
            limit,
            now,
            lookback_days: self.options.recent_lookback_days,
        };
        recent::newest_impressions(&self.reader, campaign, &window).await
    }

    /// A site's visits and unique visitors.
    pub(crate) async fn uniques(
        &self,
        site: &SiteId,
        question: &uniques::UniquesQuery,
    ) -> Result<uniques::SiteUniques, QueryError> {
        uniques::site_uniques(&self.reader, site, question).await
    }

    /// The most visited values of each of a site's features over `range`.
    pub(crate) async fn features(
        &self,
        site: &SiteId,
        range: &QueryRange,
    ) -> Result<features::FeatureValues, QueryError> {
        features::site_features(&self.reader, site, range).await
    }

    /// The owners of a listing (an advertiser's campaigns, every site) with their first and
    /// last days, oldest first activity first.
    pub(crate) async fn listing(&self, listing: Listing) -> Result<Vec<OwnerDays>, StoreError> {
        let mut owners = self.reader.store.listed_owners(listing).await?;
        owners.sort_by_key(|listed| (listed.first_day, listed.owner.to_key()));
        Ok(owners)
    }
}
