//! The day index, seal states and the late index in the embedded store. A seal state is two
//! cells under the owner-day's key, `S` (sealed_from) and `L` (late_at), each holding epoch
//! milliseconds. The late index is keyed by the UTC day a mark was written, then owner and day,
//! so the sealer reads the recent marks as one key range; marks older than
//! [`LATE_INDEX_DAYS`] are dropped as it reads.

use super::committer::Removals;
use super::engine::{KeyValues, Table, corrupt};
use super::keys::day_bytes;
use super::rollup_keys::{self, SealCell};
use super::{EmbeddedStore, site_keys};
use crate::domain::beacon::SiteId;
use crate::domain::owner::{Listing, Owner, OwnerDays, OwnerKind};
use crate::domain::sealing::LateMark;
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
pub(crate) fn seal_cell(owner: &Owner, day: Day, cell: SealCell) -> (Table, Vec<u8>) {
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
pub(crate) fn millis_value(at: DateTime<Utc>) -> Vec<u8> {
    at.timestamp_millis().to_be_bytes().to_vec()
}

/// How many days the late index keeps a mark (the Cassandra table's TTL).
const LATE_INDEX_DAYS: i64 = 10;

/// A late-index key: the day the mark was written, the owner, the owner's day.
fn late_index_key(marked_on: Day, owner: &Owner, day: Day) -> Vec<u8> {
    let owner = owner.to_key();
    let mut key = Vec::with_capacity(owner.len() + 10);
    key.extend_from_slice(&day_bytes(marked_on));
    // An owner key is far shorter than 65,535 bytes (a site id is at most 253).
    key.extend_from_slice(&(owner.len() as u16).to_be_bytes());
    key.extend_from_slice(owner.as_bytes());
    key.extend_from_slice(&day_bytes(day));
    key
}

fn decode_late_index(key: &[u8], value: &[u8]) -> Option<LateMark> {
    let len = usize::from(u16::from_be_bytes(key.get(4..6)?.try_into().ok()?));
    let owner = Owner::from_key(std::str::from_utf8(key.get(6..6 + len)?).ok()?)?;
    let day = super::keys::decode_day(key.get(6 + len..10 + len)?)?;
    let late_at = DateTime::from_timestamp_millis(i64::from_be_bytes(value.try_into().ok()?))?;
    Some(LateMark {
        owner,
        day,
        late_at,
    })
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
        self.write("writing the day index", vec![row]).await?;
        self.note_listing(owner, day).await
    }

    async fn listed_owners(&self, listing: Listing) -> Result<Vec<OwnerDays>, StoreError> {
        self.read_listing(listing).await
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
        let marked_on = Day::new(at.date_naive());
        let rows = vec![
            (table, key, millis_value(at)),
            (
                Table::LateDay,
                late_index_key(marked_on, owner, day),
                millis_value(at),
            ),
        ];
        self.write("marking a late event", rows).await
    }

    async fn seal_state(&self, owner: &Owner, day: Day) -> Result<SealState, StoreError> {
        const CONTEXT: &str = "reading a seal";
        let rows = self
            .scan(seal_table(owner), seal_prefix(owner, day), None, CONTEXT)
            .await?;
        decode_seal(&rows).ok_or_else(|| corrupt(CONTEXT))
    }

    async fn late_marks(&self, since: Day) -> Result<Vec<LateMark>, StoreError> {
        const CONTEXT: &str = "reading the late index";
        let start = day_bytes(since).to_vec();
        let rows = self
            .scan_range(Table::LateDay, start, None, CONTEXT)
            .await?;
        let mut latest: std::collections::BTreeMap<(Owner, Day), LateMark> = Default::default();
        for (key, value) in &rows {
            let mark = decode_late_index(key, value).ok_or_else(|| corrupt(CONTEXT))?;
            let slot = latest
                .entry((mark.owner.clone(), mark.day))
                .or_insert(mark.clone());
            slot.late_at = slot.late_at.max(mark.late_at);
        }
        // Marks past the index's lifetime go, like expired rows of the Cassandra table.
        let expired_before = day_bytes(Day::new(
            since.date() - chrono::TimeDelta::days(LATE_INDEX_DAYS),
        ));
        let expired = self
            .scan_range(
                Table::LateDay,
                Vec::new(),
                Some(expired_before.to_vec()),
                CONTEXT,
            )
            .await?;
        if !expired.is_empty() {
            let removals: Removals = expired
                .iter()
                .map(|(key, _)| (Table::LateDay, key.to_vec()))
                .collect();
            self.committer
                .commit_replacing("dropping old late marks", removals, Vec::new())
                .await?;
        }
        Ok(latest.into_values().collect())
    }
}
