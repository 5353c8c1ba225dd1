//! Retention on the embedded store (docs/DESIGN.md, "Retention"): an owner's expired days
//! are one key range per table, since every raw key starts with the campaign (or site) and
//! then the day. A range is dropped in two steps: the engine's sorted files that lie wholly
//! inside it go at once (no read, no tombstone), then the keys left in it (in memory, or in a
//! file shared with rows outside the range) are removed a bounded batch per commit.

use super::EmbeddedStore;
use super::committer::Removals;
use super::engine::{KeyValues, Table, engine_error};
use super::{conversions, keys, rollup_keys, site_keys, subject_keys};
use crate::domain::beacon::SiteId;
use crate::domain::conversion::index::Week;
use crate::domain::ids::CampaignKey;
use crate::domain::owner::OwnerKind;
use crate::domain::time::Day;
use crate::store::{ExpiredDays, RetentionStore, StoreError, Swept};
use async_trait::async_trait;
use fjall::AbstractTree;
use std::collections::BTreeSet;

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
    pub(super) async fn drop_key_range(
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
        self.remove_in_batches(Table::Click, start, end, DELETES_PER_COMMIT, |clicks| {
            let removals: Removals = clicks
                .iter()
                .filter_map(|(key, _)| keys::decode_event_key(key))
                .map(|(at, impression)| {
                    (
                        Table::ClickByImpression,
                        keys::click_index_key(campaign, impression, at),
                    )
                })
                .collect();
            async move { Ok(removals) }
        })
        .await
    }

    /// The advertiser's decided conversions of every day before `kept`, each with its copies
    /// and decision (keyed by conversion, so in no day range).
    async fn drop_conversions(&self, advertiser: Vec<u8>, kept: Day) -> Result<Swept, StoreError> {
        let mut end = advertiser.clone();
        end.extend_from_slice(&keys::day_bytes(kept));
        self.remove_in_batches(
            Table::Conversion,
            advertiser,
            end,
            CONVERSIONS_PER_COMMIT,
            |decided| async move {
                let mut removals = Removals::new();
                for (key, value) in &decided {
                    match conversions::expired_conversion_removals(self, value).await? {
                        // Its user's entry stays until its week has wholly expired: the entry
                        // is what finds the directory line then (`drop_subject_conversions`),
                        // and until then it leads to nothing.
                        Some(rows) => removals.extend(
                            rows.into_iter()
                                .filter(|(table, _)| *table != Table::SubjectConversion),
                        ),
                        // One damaged row must not stop every owner's sweep: it goes alone.
                        None => tracing::warn!(
                            key = ?key,
                            "a decided conversion that does not decode: its list row is removed alone"
                        ),
                    }
                    removals.push((Table::Conversion, key.to_vec()));
                }
                Ok(removals)
            },
        )
        .await
    }

    /// The entries of users' conversions in `start..end` (weeks wholly expired), each with
    /// the directory line that leads to it: the line is keyed by user, so only the entry's key
    /// finds it.
    async fn drop_subject_conversions(
        &self,
        start: Vec<u8>,
        end: Vec<u8>,
    ) -> Result<Swept, StoreError> {
        self.remove_in_batches(
            Table::SubjectConversion,
            start,
            end,
            DELETES_PER_COMMIT,
            |entries| {
                let lines: BTreeSet<Vec<u8>> = entries
                    .iter()
                    .filter_map(|(key, _)| subject_keys::line_of_subject_conversion(key))
                    .map(|line| subject_keys::subject_week_key(&line))
                    .collect();
                let removals: Removals = entries
                    .iter()
                    .map(|(key, _)| (Table::SubjectConversion, key.to_vec()))
                    .chain(lines.into_iter().map(|line| (Table::SubjectWeek, line)))
                    .collect();
                async move { Ok(removals) }
            },
        )
        .await
    }

    /// Reads `table`'s rows in `start..end` `limit` at a time, in key order, and commits the
    /// removals `removals_of` makes of each batch (the batch's own rows included or not),
    /// until the range holds no row past the last one read.
    async fn remove_in_batches<F, Fut>(
        &self,
        table: Table,
        start: Vec<u8>,
        end: Vec<u8>,
        limit: usize,
        mut removals_of: F,
    ) -> Result<Swept, StoreError>
    where
        F: FnMut(KeyValues) -> Fut,
        Fut: std::future::Future<Output = Result<Removals, StoreError>>,
    {
        let mut swept = Swept::default();
        let mut from = start;
        loop {
            let rows = self
                .scan_range_at_most(table, from, Some(end.clone()), limit, CONTEXT)
                .await?;
            let Some((last, _)) = rows.last() else {
                return Ok(swept);
            };
            // Past the last key read: the next batch starts after it.
            from = last.to_vec();
            from.push(0);
            let removals = removals_of(rows).await?;
            swept.rows += removals.len() as u64;
            self.committer
                .commit_replacing(CONTEXT, removals, Vec::new())
                .await?;
        }
    }

    async fn drop_campaign_days(
        &self,
        campaign: CampaignKey,
        (first, last): (Day, Day),
        days: &[Day],
        kept: Day,
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
        self.changed([(campaign, first.start_utc())]);
        // The advertiser's conversions of those days, and its index entries (events', and
        // conversions' by user) of weeks wholly
        // expired (a week that reaches past `last` may hold days still kept).
        // The advertiser's rows keyed by day or week rather than by campaign, from its first
        // day up to the first kept one (its days need not be this campaign's; once swept, the
        // ranges are empty for its other campaigns): its conversions, and its users'
        // conversion entries of the weeks wholly expired.
        let advertiser = campaign.advertiser_id.as_uuid().as_bytes().to_vec();
        let kept_week = Week::of(kept.start_utc());
        swept += self.drop_conversions(advertiser.clone(), kept).await?;
        let mut end = advertiser.clone();
        end.extend_from_slice(&keys::week_bytes(kept_week));
        swept += self.drop_subject_conversions(advertiser, end).await?;
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
            ExpiredDays::Campaign {
                campaign,
                days,
                kept,
                ..
            } => {
                let (Some(first), Some(last)) = (days.iter().min(), days.iter().max()) else {
                    return Ok(Swept::default());
                };
                self.drop_campaign_days(*campaign, (*first, *last), days, *kept)
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

    async fn drop_expired_rollups(&self, kind: OwnerKind, kept: Day) -> Result<Swept, StoreError> {
        self.drop_rollups_of_kind(kind, kept).await
    }
}
