//! Retention on the embedded store (docs/DESIGN.md, "Retention"): an owner's expired days
//! are one key range per table, since every raw key starts with the campaign (or site) and
//! then the day. A range is dropped in two steps: the engine's sorted files that lie wholly
//! inside it go at once (no read, no tombstone), then the keys left in it (in memory, or in a
//! file shared with rows outside the range) are removed a bounded batch per commit.

use super::EmbeddedStore;
use super::committer::Removals;
use super::engine::{KeyValues, Table, engine_error};
use super::{conversions, keys, rollup_keys, site_keys};
use crate::domain::beacon::SiteId;
use crate::domain::conversion::index::Week;
use crate::domain::ids::CampaignKey;
use crate::domain::time::Day;
use crate::store::{ExpiredDays, RetentionStore, StoreError, Swept};
use async_trait::async_trait;
use fjall::AbstractTree;

const CONTEXT: &str = "dropping expired days";

/// Keys removed in one commit, so no commit holds a busy day's rows in memory at once.
const DELETES_PER_COMMIT: usize = 20_000;
/// Decided conversions swept in one commit: each reads its copies and decision first.
const CONVERSIONS_PER_COMMIT: usize = 1_000;

/// A day's bytes for the end of a range: the day after the last one dropped.
fn end_day(last: Day) -> [u8; 4] {
    keys::day_bytes(last.next())
}

impl EmbeddedStore {
    /// Removes every row of `table` in `start..end`.
    async fn drop_key_range(
        &self,
        table: Table,
        start: Vec<u8>,
        end: Vec<u8>,
    ) -> Result<Swept, StoreError> {
        let (from, to) = (start.clone(), end.clone());
        // The engine's `drop_range` (a compaction that only deletes files) removes the files
        // whose every key lies in the range; it is not part of fjall's documented surface, but
        // it is the only way fjall 3 deletes without one tombstone per key.
        self.blocking(move |tables| {
            tables
                .get(table)
                .tree
                .drop_range(from..to)
                .map_err(|error| engine_error(CONTEXT, error.into()))
        })
        .await?;
        let mut swept = Swept { ranges: 1, rows: 0 };
        loop {
            let (from, to) = (start.clone(), end.clone());
            let left: Vec<Vec<u8>> = self
                .blocking(move |tables| {
                    tables
                        .get(table)
                        .range(from..to)
                        .take(DELETES_PER_COMMIT)
                        .map(|guard| {
                            guard
                                .key()
                                .map(|key| key.to_vec())
                                .map_err(|error| engine_error(CONTEXT, error))
                        })
                        .collect()
                })
                .await?;
            if left.is_empty() {
                return Ok(swept);
            }
            swept.rows += left.len() as u64;
            let removals: Removals = left.into_iter().map(|key| (table, key)).collect();
            self.committer
                .commit_replacing(CONTEXT, removals, Vec::new())
                .await?;
        }
    }

    /// The click index is keyed by impression, not by day: its rows are found from the
    /// clicks of the range (keys only), before the clicks themselves go.
    async fn drop_click_index(
        &self,
        campaign: CampaignKey,
        start: Vec<u8>,
        end: Vec<u8>,
    ) -> Result<Swept, StoreError> {
        let mut swept = Swept::default();
        let mut from = start;
        loop {
            let (first, to) = (from.clone(), end.clone());
            let clicks: Vec<Vec<u8>> = self
                .blocking(move |tables| {
                    tables
                        .get(Table::Click)
                        .range(first..to)
                        .take(DELETES_PER_COMMIT)
                        .map(|guard| {
                            guard
                                .key()
                                .map(|key| key.to_vec())
                                .map_err(|error| engine_error(CONTEXT, error))
                        })
                        .collect()
                })
                .await?;
            let Some(last) = clicks.last() else {
                return Ok(swept);
            };
            // Past the last key read: the next batch starts after it.
            from = last.clone();
            from.push(0);
            let removals: Removals = clicks
                .iter()
                .filter_map(|key| keys::decode_event_key(key))
                .map(|(at, impression)| {
                    (
                        Table::ClickByImpression,
                        keys::click_index_key(campaign, impression, at),
                    )
                })
                .collect();
            swept.rows += removals.len() as u64;
            self.committer
                .commit_replacing(CONTEXT, removals, Vec::new())
                .await?;
        }
    }

    /// The advertiser's decided conversions of every day up to `last`, each with its copies
    /// and decision (keyed by conversion, so in no day range) and, in weeks before
    /// `kept_week`, the directory line that led to it. From the advertiser's first day, not
    /// the campaign's: a conversion's day may hold no event of any campaign (an unattributed
    /// conversion), and once swept the range is empty for the advertiser's other campaigns.
    async fn drop_conversions(
        &self,
        advertiser: Vec<u8>,
        last: Day,
        kept_week: Week,
    ) -> Result<Swept, StoreError> {
        let mut end = advertiser.clone();
        end.extend_from_slice(&end_day(last));
        let mut swept = Swept::default();
        let mut from = advertiser;
        loop {
            let (first, to) = (from.clone(), end.clone());
            let decided: KeyValues = self
                .blocking(move |tables| {
                    tables
                        .get(Table::Conversion)
                        .range(first..to)
                        .take(CONVERSIONS_PER_COMMIT)
                        .map(|guard| {
                            guard
                                .into_inner()
                                .map_err(|error| engine_error(CONTEXT, error))
                        })
                        .collect()
                })
                .await?;
            let Some((last_key, _)) = decided.last() else {
                return Ok(swept);
            };
            from = last_key.to_vec();
            from.push(0);
            let mut removals = Removals::new();
            for (key, value) in &decided {
                removals.extend(
                    conversions::expired_conversion_removals(self, value, |conversion| {
                        Week::of(conversion.timestamp.instant()) < kept_week
                    })
                    .await?,
                );
                removals.push((Table::Conversion, key.to_vec()));
            }
            swept.rows += removals.len() as u64;
            self.committer
                .commit_replacing(CONTEXT, removals, Vec::new())
                .await?;
        }
    }

    async fn drop_campaign_days(
        &self,
        campaign: CampaignKey,
        first: Day,
        last: Day,
        days: &[Day],
    ) -> Result<Swept, StoreError> {
        let mut swept = Swept::default();
        let range = |prefix: Vec<u8>| {
            let mut start = prefix.clone();
            start.extend_from_slice(&keys::day_bytes(first));
            let mut end = prefix;
            end.extend_from_slice(&end_day(last));
            (start, end)
        };
        let (start, end) = range(keys::campaign_prefix(campaign));
        swept += self
            .drop_click_index(campaign, start.clone(), end.clone())
            .await?;
        // Every table whose keys start with the campaign and then the UTC day.
        for table in [
            Table::Impression,
            Table::ImpressionSummary,
            Table::ImpressionCopy,
            Table::Click,
            Table::ViewReport,
            Table::CampaignConversion,
            Table::OpenDay,
        ] {
            swept += self
                .drop_key_range(table, start.clone(), end.clone())
                .await?;
        }
        // The advertiser's conversions of those days, and its index entries (events', and
        // conversions' by user) of weeks wholly
        // expired (a week that reaches past `last` may hold days still kept).
        let advertiser = campaign.advertiser_id.as_uuid().as_bytes().to_vec();
        let first_week = Week::of(first.start_utc());
        let kept_week = Week::of(last.next().start_utc());
        swept += self
            .drop_conversions(advertiser.clone(), last, kept_week)
            .await?;
        if first_week < kept_week {
            let mut start = advertiser.clone();
            start.extend_from_slice(&keys::week_bytes(first_week));
            let mut end = advertiser;
            end.extend_from_slice(&keys::week_bytes(kept_week));
            // The index of a user's conversions shares the key's start (advertiser, week).
            swept += self
                .drop_key_range(Table::SubjectConversion, start, end)
                .await?;
            // The event index begins with the week: every advertiser's entries of the weeks
            // before the kept one are expired too, since raw retention is the same for all.
            // Their range starts at the first week there can be; once dropped, it is empty.
            swept += self
                .drop_key_range(
                    Table::EventIndex,
                    Vec::new(),
                    keys::week_bytes(kept_week).to_vec(),
                )
                .await?;
        }
        // The day index last: until it goes, the next sweep finds the days again.
        let removals: Removals = days
            .iter()
            .map(|day| {
                (
                    Table::CampaignDay,
                    rollup_keys::day_index_key(*day, campaign),
                )
            })
            .collect();
        swept.rows += removals.len() as u64;
        self.committer
            .commit_replacing(CONTEXT, removals, Vec::new())
            .await?;
        Ok(swept)
    }

    async fn drop_site_days(
        &self,
        site: &SiteId,
        first: Day,
        last: Day,
        days: &[Day],
    ) -> Result<Swept, StoreError> {
        let mut swept = Swept::default();
        let prefix = site_keys::site_prefix(site);
        let mut start = prefix.clone();
        start.extend_from_slice(&keys::day_bytes(first));
        let mut end = prefix;
        end.extend_from_slice(&end_day(last));
        for table in [Table::Visit, Table::VisitLog, Table::VisitSketch] {
            swept += self
                .drop_key_range(table, start.clone(), end.clone())
                .await?;
        }
        let removals: Removals = days
            .iter()
            .map(|day| (Table::SiteDay, site_keys::site_day_key(*day, site)))
            .collect();
        swept.rows += removals.len() as u64;
        self.committer
            .commit_replacing(CONTEXT, removals, Vec::new())
            .await?;
        Ok(swept)
    }
}

#[async_trait]
impl RetentionStore for EmbeddedStore {
    async fn drop_expired_days(&self, expired: &ExpiredDays) -> Result<Swept, StoreError> {
        // One range from the first day to the last: the days between that the day index does
        // not list hold nothing of the owner's either.
        match expired {
            ExpiredDays::Campaign { campaign, days, .. } => {
                let (Some(first), Some(last)) = (days.iter().min(), days.iter().max()) else {
                    return Ok(Swept::default());
                };
                self.drop_campaign_days(*campaign, *first, *last, days)
                    .await
            }
            ExpiredDays::Site { site, days, .. } => {
                let (Some(first), Some(last)) = (days.iter().min(), days.iter().max()) else {
                    return Ok(Swept::default());
                };
                self.drop_site_days(site, *first, *last, days).await
            }
        }
    }
}
