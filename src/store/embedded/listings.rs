//! What the dashboard lists in the embedded store: each owner's first and last days (a row
//! per listing and owner, kept beside the day index) and sealed site-days' visits per feature
//! value (a row per site, day, feature and value).

use super::EmbeddedStore;
use super::engine::{Table, corrupt, engine_error};
use super::keys::{day_bytes, decode_day};
use super::site_keys;
use crate::domain::beacon::SiteId;
use crate::domain::owner::{Listing, Owner, OwnerDays};
use crate::domain::time::Day;
use crate::store::{FeatureVisits, StoreError};

/// The listing's key, a 0 byte, then the owner's key (neither contains a 0 byte).
fn listing_key(listing: Listing, owner: &Owner) -> Vec<u8> {
    let mut key = listing_prefix(listing);
    key.extend_from_slice(owner.to_key().as_bytes());
    key
}

fn listing_prefix(listing: Listing) -> Vec<u8> {
    let mut key = listing.to_key().into_bytes();
    key.push(0);
    key
}

/// Site prefix, day, then feature, a 0 byte, value.
fn feature_prefix(site: &SiteId, day: Day) -> Vec<u8> {
    let mut key = site_keys::site_prefix(site);
    key.extend_from_slice(&day_bytes(day));
    key
}

impl EmbeddedStore {
    /// Widens `owner`'s first and last days to hold `day`: read and rewritten under a lock,
    /// since this folder has one writer process.
    pub(super) async fn note_listing(&self, owner: &Owner, day: Day) -> Result<(), StoreError> {
        const CONTEXT: &str = "writing the owner listing";
        let key = listing_key(Listing::of(owner), owner);
        let _writing = self.listing_writes.lock().await;
        let lookup = key.clone();
        let stored = self
            .blocking(move |tables| {
                tables
                    .get(Table::OwnerListing)
                    .get(&lookup)
                    .map_err(|error| engine_error(CONTEXT, error))
            })
            .await?;
        let (first, last) = match stored.as_deref().map(decode_range) {
            None => (day, day),
            Some(Some((first, last))) if first <= day && day <= last => return Ok(()),
            Some(Some((first, last))) => (first.min(day), last.max(day)),
            Some(None) => return Err(corrupt(CONTEXT)),
        };
        let mut value = day_bytes(first).to_vec();
        value.extend_from_slice(&day_bytes(last));
        self.write(CONTEXT, vec![(Table::OwnerListing, key, value)])
            .await
    }

    pub(super) async fn read_listing(
        &self,
        listing: Listing,
    ) -> Result<Vec<OwnerDays>, StoreError> {
        const CONTEXT: &str = "reading the owner listing";
        let prefix = listing_prefix(listing);
        let prefix_len = prefix.len();
        let rows = self
            .scan(Table::OwnerListing, prefix, None, CONTEXT)
            .await?;
        rows.iter()
            .map(|(key, value)| {
                let owner = key
                    .get(prefix_len..)
                    .and_then(|owner| std::str::from_utf8(owner).ok())
                    .and_then(Owner::from_key)
                    .ok_or_else(|| corrupt(CONTEXT))?;
                let (first_day, last_day) = decode_range(value).ok_or_else(|| corrupt(CONTEXT))?;
                Ok(OwnerDays {
                    owner,
                    first_day,
                    last_day,
                })
            })
            .collect()
    }

    pub(super) async fn write_features(
        &self,
        site: &SiteId,
        day: Day,
        values: &[FeatureVisits],
    ) -> Result<(), StoreError> {
        let prefix = feature_prefix(site, day);
        let rows = values
            .iter()
            .map(|entry| {
                let mut key = prefix.clone();
                key.extend_from_slice(entry.feature.as_bytes());
                key.push(0);
                key.extend_from_slice(entry.value.as_bytes());
                (
                    Table::SiteFeatures,
                    key,
                    entry.visits.to_be_bytes().to_vec(),
                )
            })
            .collect();
        self.write("writing a site-day's feature values", rows)
            .await
    }

    pub(super) async fn read_features(
        &self,
        site: &SiteId,
        day: Day,
    ) -> Result<Vec<FeatureVisits>, StoreError> {
        const CONTEXT: &str = "reading a site-day's feature values";
        let prefix = feature_prefix(site, day);
        let prefix_len = prefix.len();
        let rows = self
            .scan(Table::SiteFeatures, prefix, None, CONTEXT)
            .await?;
        rows.iter()
            .map(|(key, value)| {
                let rest = key.get(prefix_len..).ok_or_else(|| corrupt(CONTEXT))?;
                let split = rest
                    .iter()
                    .position(|byte| *byte == 0)
                    .ok_or_else(|| corrupt(CONTEXT))?;
                let text = |bytes: &[u8]| {
                    std::str::from_utf8(bytes)
                        .map(str::to_owned)
                        .map_err(|_| corrupt(CONTEXT))
                };
                let visits = <[u8; 8]>::try_from(value.as_ref())
                    .map(u64::from_be_bytes)
                    .map_err(|_| corrupt(CONTEXT))?;
                Ok(FeatureVisits {
                    feature: text(&rest[..split])?,
                    value: text(&rest[split + 1..])?,
                    visits,
                })
            })
            .collect()
    }
}

fn decode_range(value: &[u8]) -> Option<(Day, Day)> {
    Some((decode_day(value.get(0..4)?)?, decode_day(value.get(4..8)?)?))
}
