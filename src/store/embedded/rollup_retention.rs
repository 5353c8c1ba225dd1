//! `--retain-aggregates` on the embedded store: the rollups of every owner's days before the
//! first kept one. A rollup key starts with its owner (campaign or site) and then the UTC day,
//! so an owner's expired days are one key range per table, dropped as raw days are
//! (`retention`). Owners are found in the rollup tables themselves, one seek per owner: the
//! day index that the raw sweep reads has lost the lines of days whose raw events are gone.

use super::EmbeddedStore;
use super::engine::Table;
use super::{keys, site_keys};
use crate::domain::owner::OwnerKind;
use crate::domain::time::Day;
use crate::store::{StoreError, Swept};

const CONTEXT: &str = "dropping expired rollups";

/// The rollup tables of an owner kind (a site's include its days' feature values); seal
/// states and delivery's sealed totals are not among them.
fn rollup_tables(kind: OwnerKind) -> &'static [Table] {
    match kind {
        OwnerKind::Campaign => &[Table::CampaignRollup, Table::CampaignReach],
        OwnerKind::Site => &[Table::SiteVisits, Table::SiteReach, Table::SiteFeatures],
    }
}

/// How long the owner part of a rollup key is.
fn owner_len(kind: OwnerKind, key: &[u8]) -> Option<usize> {
    let len = match kind {
        OwnerKind::Campaign => keys::CAMPAIGN_LEN,
        OwnerKind::Site => site_keys::site_prefix_len(key)?,
    };
    (key.len() >= len).then_some(len)
}

/// The first key past every key that starts with `prefix` (`None`: no key is).
fn past_prefix(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut next = prefix.to_vec();
    while let Some(last) = next.pop() {
        if last < u8::MAX {
            next.push(last + 1);
            return Some(next);
        }
    }
    None
}

impl EmbeddedStore {
    /// Drops, owner by owner, the rows of `table` of days before `kept`: an owner's first key
    /// is its earliest day, so an owner with nothing expired costs that one seek.
    async fn drop_rollups_before(
        &self,
        table: Table,
        kind: OwnerKind,
        kept: Day,
    ) -> Result<Swept, StoreError> {
        let mut swept = Swept::default();
        let mut from = Vec::new();
        loop {
            let next = self
                .scan_range_at_most(table, from, None, 1, CONTEXT)
                .await?;
            let Some((first, _)) = next.into_iter().next() else {
                break;
            };
            let first = first.to_vec();
            let Some(owner) = owner_len(kind, &first).and_then(|len| first.get(..len)) else {
                // One damaged key must not stop the sweep of every owner after it.
                tracing::warn!(?table, key = ?first, "a rollup key that names no owner: skipped");
                from = first;
                from.push(0);
                continue;
            };
            let owner = owner.to_vec();
            let mut end = owner.clone();
            end.extend_from_slice(&keys::day_bytes(kept));
            if first < end {
                swept += self.drop_key_range(table, owner.clone(), end).await?;
            }
            match past_prefix(&owner) {
                Some(next) => from = next,
                None => break,
            }
        }
        Ok(swept)
    }

    pub(super) async fn drop_rollups_of_kind(
        &self,
        kind: OwnerKind,
        kept: Day,
    ) -> Result<Swept, StoreError> {
        let mut swept = Swept::default();
        for table in rollup_tables(kind) {
            swept += self.drop_rollups_before(*table, kind, kept).await?;
        }
        Ok(swept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::beacon::SiteId;
    use crate::domain::conversion::money::ValueSums;
    use crate::domain::ids::{AdId, AdvertiserId, CampaignId, CampaignKey};
    use crate::store::embedded::Fsync;
    use crate::store::{
        FeatureVisits, ReachLevel, Rollup, RollupReach, RollupSlice, RollupStore, SiteRollup,
        SketchPartition, SliceVisits,
    };
    use uuid::Uuid;

    fn day(text: &str) -> Day {
        Day::new(text.parse().expect("date"))
    }

    fn rollup(day: Day, impressions: u64) -> Rollup {
        Rollup {
            slices: vec![RollupSlice::from_counts(
                day.first_slice(),
                AdId::new(Uuid::from_u128(9)),
                [impressions, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                ValueSums::default(),
            )],
            reach: vec![RollupReach {
                level: ReachLevel::CampaignDay,
                hour: day.first_hour(),
                ad_id: None,
                sketch: vec![1, 2, 3],
            }],
        }
    }

    /// Three campaigns side by side in key order: one with expired and kept days, one with
    /// expired days only, one with kept days only. Each loses its expired days and nothing
    /// else, and the walk over owners reaches the last of them.
    #[tokio::test]
    async fn every_owners_days_before_the_first_kept_go_and_the_rest_stay() {
        let folder = tempfile::tempdir().expect("temporary folder");
        let store = EmbeddedStore::open_for_test(folder.path(), Fsync::Never);
        let campaign = |n: u128| CampaignKey {
            advertiser_id: AdvertiserId::new(Uuid::from_u128(1)),
            campaign_id: CampaignId::new(Uuid::from_u128(n)),
        };
        let (expired, also_expired, kept) =
            (day("2026-01-05"), day("2026-03-01"), day("2026-03-02"));
        let written = [
            (campaign(1), vec![expired, kept]),
            (campaign(2), vec![expired, also_expired]),
            (campaign(3), vec![kept]),
        ];
        for (campaign, days) in &written {
            for day in days {
                store
                    .write_campaign_rollup(*campaign, *day, &rollup(*day, 7), chrono::Utc::now())
                    .await
                    .expect("written");
            }
        }
        let swept = store
            .drop_rollups_of_kind(OwnerKind::Campaign, kept)
            .await
            .expect("swept");
        // Slices and reach of the two campaigns with expired days.
        assert_eq!(swept.ranges, 4, "{swept:?}");
        for (campaign, days) in &written {
            for day in days {
                let left = store
                    .read_campaign_rollup(*campaign, *day, &[ReachLevel::CampaignDay])
                    .await
                    .expect("read");
                if *day < kept {
                    assert_eq!(left, Rollup::default(), "{campaign:?} {day:?}");
                } else {
                    assert_eq!(left, rollup(*day, 7), "{campaign:?} {day:?}");
                }
            }
        }
    }

    #[test]
    fn past_a_prefix_is_past_every_key_that_starts_with_it() {
        assert_eq!(past_prefix(&[1, 2, 3]), Some(vec![1, 2, 4]));
        assert_eq!(past_prefix(&[1, 0xFF, 0xFF]), Some(vec![2]));
        assert_eq!(past_prefix(&[0xFF, 0xFF]), None);
        let next = past_prefix(&[7, 0xFF]).expect("a key past it");
        assert!(next.as_slice() > [7, 0xFF, 0xFF, 0xFF, 0xFF].as_slice());
        assert!(next.as_slice() <= [8].as_slice());
    }

    /// What a site-day's rollup holds, as read back: visits, reach and feature values.
    async fn site_day(store: &EmbeddedStore, site: &SiteId, day: Day) -> (SiteRollup, usize) {
        let partition = SketchPartition {
            site: site.clone(),
            day,
            combination: String::new(),
        };
        let rollup = store.read_site_rollup(&partition).await.expect("read");
        let features = store.read_site_features(site, day).await.expect("read");
        (rollup, features.len())
    }

    /// Two sites, one's name the start of the other's, each with an expired and a kept day:
    /// each loses its expired day's visits, reach and feature values, and keeps the rest.
    #[tokio::test]
    async fn a_sites_expired_visits_reach_and_features_go_and_its_kept_days_stay() {
        let folder = tempfile::tempdir().expect("temporary folder");
        let store = EmbeddedStore::open_for_test(folder.path(), Fsync::Never);
        let sites = ["a.example", "a.example.org"].map(|site| SiteId::parse(site).expect("site"));
        let (expired, kept) = (day("2026-02-10"), day("2026-03-02"));
        let rollup = |day: Day| SiteRollup {
            visits: vec![(
                day.first_slice(),
                SliceVisits {
                    valid: 3,
                    invalid: 1,
                },
            )],
            reach: vec![(day.first_hour(), vec![4, 5, 6])],
        };
        for site in &sites {
            for day in [expired, kept] {
                store
                    .write_site_rollup(
                        site,
                        day,
                        &[(String::new(), rollup(day))],
                        chrono::Utc::now(),
                        crate::store::RollupPart::Last,
                    )
                    .await
                    .expect("written");
                let feature = FeatureVisits {
                    feature: "referrer".to_owned(),
                    value: "r.example".to_owned(),
                    visits: 3,
                };
                store
                    .write_site_features(site, day, &[feature])
                    .await
                    .expect("written");
            }
        }
        let swept = store
            .drop_rollups_of_kind(OwnerKind::Site, kept)
            .await
            .expect("swept");
        assert_eq!(swept.ranges, 6, "three tables of two sites: {swept:?}");
        for site in &sites {
            assert_eq!(
                site_day(&store, site, expired).await,
                (SiteRollup::default(), 0),
                "{site:?}"
            );
            assert_eq!(
                site_day(&store, site, kept).await,
                (rollup(kept), 1),
                "{site:?}"
            );
        }
    }
}
