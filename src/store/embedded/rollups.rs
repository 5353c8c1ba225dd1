//! Sealed campaign-days and site-days in the embedded store. A rollup and its seal are one
//! atomic batch (one process owns the folder, so a later seal's batch simply lands after an
//! earlier one's).

use super::committer::Removals;
use super::engine::Rows;
use super::engine::{Table, corrupt};
use super::rollup_keys::{self, SealCell};
use super::seals::{millis_value, seal_cell};
use super::{EmbeddedStore, site_keys};
use crate::domain::beacon::SiteId;
use crate::domain::ids::CampaignKey;
use crate::domain::owner::Owner;
use crate::domain::time::Day;
use crate::store::{
    FeatureVisits, ReachLevel, Rollup, RollupPart, RollupSlice, RollupStore, SiteRollup,
    SketchPartition, SliceVisits, StoreError,
};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use std::collections::HashSet;

#[async_trait]
impl RollupStore for EmbeddedStore {
    async fn write_campaign_rollup(
        &self,
        campaign: CampaignKey,
        day: Day,
        rollup: &Rollup,
        read_started: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut rows: Rows = rollup
            .slices
            .iter()
            .map(|row| {
                (
                    Table::CampaignRollup,
                    rollup_keys::rollup_key(campaign, day, row.slice, row.ad_id),
                    rollup_keys::row_value(&row.counts(), &row.conversions.value),
                )
            })
            .collect();
        rows.extend(rollup.reach.iter().map(|row| {
            (
                Table::CampaignReach,
                rollup_keys::reach_key(campaign, day, row),
                row.sketch.clone(),
            )
        }));
        let (table, key) = seal_cell(&Owner::Campaign(campaign), day, SealCell::SealedFrom);
        rows.push((table, key, millis_value(read_started)));
        // Rows of an earlier seal that this one has no more (a click that moved to another
        // day as a late, earlier first click arrived) must not linger.
        let new_keys: HashSet<&[u8]> = rows.iter().map(|(_, key, _)| key.as_slice()).collect();
        let prefix = rollup_keys::campaign_day_prefix(campaign, day);
        let mut removals: Removals = Vec::new();
        for table in [Table::CampaignRollup, Table::CampaignReach] {
            for (key, _) in self
                .scan(table, prefix.clone(), None, "reading a rollup")
                .await?
            {
                if !new_keys.contains(key.as_ref()) {
                    removals.push((table, key.to_vec()));
                }
            }
        }
        self.committer
            .commit_replacing("writing a rollup", removals, rows)
            .await
    }

    async fn read_campaign_rollup(
        &self,
        campaign: CampaignKey,
        day: Day,
        reach: &[ReachLevel],
    ) -> Result<Rollup, StoreError> {
        const CONTEXT: &str = "reading a rollup";
        let prefix = rollup_keys::campaign_day_prefix(campaign, day);
        let slices = self
            .scan(Table::CampaignRollup, prefix, None, CONTEXT)
            .await?;
        let mut reach_rows = Vec::new();
        for level in reach {
            let level_prefix = rollup_keys::reach_level_prefix(campaign, day, *level);
            for (key, value) in self
                .scan(Table::CampaignReach, level_prefix, None, CONTEXT)
                .await?
            {
                reach_rows.push(
                    rollup_keys::decode_reach_row(&key, &value).ok_or_else(|| corrupt(CONTEXT))?,
                );
            }
        }
        Ok(Rollup {
            slices: slices
                .iter()
                .map(|(key, value)| {
                    let (slice, ad_id) =
                        rollup_keys::decode_rollup_key(key).ok_or_else(|| corrupt(CONTEXT))?;
                    let (counts, value) =
                        rollup_keys::decode_row_value(value, 3).ok_or_else(|| corrupt(CONTEXT))?;
                    Ok(RollupSlice::from_counts(slice, ad_id, counts, value))
                })
                .collect::<Result<_, StoreError>>()?,
            reach: reach_rows,
        })
    }

    async fn write_site_rollup(
        &self,
        site: &SiteId,
        day: Day,
        combinations: &[(String, SiteRollup)],
        read_started: DateTime<Utc>,
        part: RollupPart,
    ) -> Result<(), StoreError> {
        let mut rows: Rows = Vec::new();
        for (combination, rollup) in combinations {
            let partition = SketchPartition {
                site: site.clone(),
                day,
                combination: combination.clone(),
            };
            rows.extend(rollup.visits.iter().map(|(slice, visits)| {
                (
                    Table::SiteVisits,
                    site_keys::rollup_unit_key(&partition, *slice),
                    rollup_keys::counts_value(&[visits.valid, visits.invalid]),
                )
            }));
            rows.extend(rollup.reach.iter().map(|(hour, sketch)| {
                (
                    Table::SiteReach,
                    site_keys::rollup_unit_key(&partition, *hour),
                    sketch.clone(),
                )
            }));
        }
        if part == RollupPart::Last {
            let (table, key) = seal_cell(&Owner::Site(site.clone()), day, SealCell::SealedFrom);
            rows.push((table, key, millis_value(read_started)));
        }
        self.write("writing a site rollup", rows).await
    }

    async fn write_site_features(
        &self,
        site: &SiteId,
        day: Day,
        values: &[FeatureVisits],
    ) -> Result<(), StoreError> {
        self.write_features(site, day, values).await
    }

    async fn read_site_features(
        &self,
        site: &SiteId,
        day: Day,
    ) -> Result<Vec<FeatureVisits>, StoreError> {
        self.read_features(site, day).await
    }

    async fn read_site_rollup(
        &self,
        partition: &SketchPartition,
    ) -> Result<SiteRollup, StoreError> {
        const CONTEXT: &str = "reading a site rollup";
        let prefix = site_keys::sketch_prefix(partition);
        let prefix_len = prefix.len();
        let visits = self
            .scan(Table::SiteVisits, prefix.clone(), None, CONTEXT)
            .await?;
        let reach = self.scan(Table::SiteReach, prefix, None, CONTEXT).await?;
        let unit = |key: &[u8]| {
            site_keys::decode_rollup_unit(key, prefix_len).ok_or_else(|| corrupt(CONTEXT))
        };
        Ok(SiteRollup {
            visits: visits
                .iter()
                .map(|(key, value)| {
                    let [valid, invalid] = rollup_keys::decode_counts_value(value, 1)
                        .ok_or_else(|| corrupt(CONTEXT))?;
                    Ok((unit(key)?, SliceVisits { valid, invalid }))
                })
                .collect::<Result<_, StoreError>>()?,
            reach: reach
                .iter()
                .map(|(key, value)| Ok((unit(key)?, value.to_vec())))
                .collect::<Result<_, StoreError>>()?,
        })
    }
}
