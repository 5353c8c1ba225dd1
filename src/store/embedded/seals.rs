//! The day index and seal states in the embedded store. A seal state is two cells under the
//! owner-day's key, `S` (sealed_from) and `L` (late_at), each holding epoch milliseconds.

use super::engine::{KeyValues, Table, corrupt};
use super::rollup_keys::{self, SealCell};
use super::{EmbeddedStore, site_keys};
use crate::domain::beacon::SiteId;
use crate::domain::owner::{Owner, OwnerKind};
use crate::domain::time::Day;
use crate::store::{SealState, SealStore, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

fn seal_table(owner: &Owner) -> Table {
    match owner {
        Owner::Campaign(_) => Table::CampaignSeal,
        Owner::Site(_) => Table::SiteSeal,
    }
}

/// The key of one cell of an owner-day's seal state (also written by the rollup writes).
pub fn seal_cell(owner: &Owner, day: Day, cell: SealCell) -> (Table, Vec<u8>) {
    let key = match owner {
        Owner::Campaign(campaign) => rollup_keys::seal_key(*campaign, day, cell),
        Owner::Site(site) => site_keys::site_seal_key(site, day, cell as u8),
    };
    (seal_table(owner), key)
}

fn seal_prefix(owner: &Owner, day: Day) -> Vec<u8> {
    match owner {
        Owner::Campaign(campaign) => rollup_keys::campaign_day_prefix(*campaign, day),
        Owner::Site(site) => site_keys::site_seal_prefix(site, day),
    }
}

/// An instant as a cell value.
pub fn millis_value(at: DateTime<Utc>) -> Vec<u8> {
    at.timestamp_millis().to_be_bytes().to_vec()
}

/// A seal state from its cells.
fn decode_seal(cells: &KeyValues) -> Option<SealState> {
    let mut state = SealState::default();
    for (key, value) in cells {
        let at =
            DateTime::from_timestamp_millis(i64::from_be_bytes(value.as_ref().try_into().ok()?))?;
        match key.last()? {
            b'S' => state.sealed_from = Some(at),
            b'L' => state.late_at = Some(at),
            _ => return None,
        }
    }
    Some(state)
}

#[async_trait]
impl SealStore for EmbeddedStore {
    async fn mark_day(&self, owner: &Owner, day: Day) -> Result<(), StoreError> {
        let row = match owner {
            Owner::Campaign(campaign) => (
                Table::CampaignDay,
                rollup_keys::day_index_key(day, *campaign),
                Vec::new(),
            ),
            Owner::Site(site) => (
                Table::SiteDay,
                site_keys::site_day_key(day, site),
                Vec::new(),
            ),
        };
        self.write("writing the day index", vec![row]).await
    }

    async fn owners_of_day(&self, kind: OwnerKind, day: Day) -> Result<Vec<Owner>, StoreError> {
        const CONTEXT: &str = "reading the day index";
        let (table, prefix) = match kind {
            OwnerKind::Campaign => (Table::CampaignDay, rollup_keys::day_index_prefix(day)),
            OwnerKind::Site => (Table::SiteDay, site_keys::site_day_prefix(day)),
        };
        let rows = self.scan(table, prefix, None, CONTEXT).await?;
        rows.iter()
            .map(|(key, _)| {
                match kind {
                    OwnerKind::Campaign => {
                        rollup_keys::decode_day_index_key(key).map(Owner::Campaign)
                    }
                    OwnerKind::Site => site_keys::decode_site_day_key(key)
                        .and_then(|site| SiteId::parse(site).ok())
                        .map(Owner::Site),
                }
                .ok_or_else(|| corrupt(CONTEXT))
            })
            .collect()
    }

    async fn mark_late(
        &self,
        owner: &Owner,
        day: Day,
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let (table, key) = seal_cell(owner, day, SealCell::LateAt);
        self.write("marking a late event", vec![(table, key, millis_value(at))])
            .await
    }

    async fn seal_state(&self, owner: &Owner, day: Day) -> Result<SealState, StoreError> {
        const CONTEXT: &str = "reading a seal";
        let rows = self
            .scan(seal_table(owner), seal_prefix(owner, day), None, CONTEXT)
            .await?;
        decode_seal(&rows).ok_or_else(|| corrupt(CONTEXT))
    }
}
