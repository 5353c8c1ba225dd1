//! Campaign and site configuration in the embedded store: one row per `effective_from`,
//! in time order under the owner's prefix.

use super::engine::{Table, corrupt};
use super::{EmbeddedStore, keys, rows, site_keys};
use crate::domain::bucket::BucketCount;
use crate::domain::campaign::{CampaignSettings, SettingsHistory};
use crate::domain::owner::Owner;
use crate::store::{SettingsStore, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// Where an owner's settings rows live.
fn table(owner: &Owner) -> Table {
    match owner {
        Owner::Campaign(_) => Table::CampaignConfig,
        Owner::Site(_) => Table::SiteConfig,
    }
}

fn prefix(owner: &Owner) -> Vec<u8> {
    match owner {
        Owner::Campaign(campaign) => keys::campaign_prefix(*campaign),
        Owner::Site(site) => site_keys::site_prefix(site),
    }
}

fn key(owner: &Owner, effective_from: DateTime<Utc>) -> Vec<u8> {
    match owner {
        Owner::Campaign(campaign) => keys::settings_key(*campaign, effective_from),
        Owner::Site(site) => site_keys::site_settings_key(site, effective_from),
    }
}

#[async_trait]
impl SettingsStore for EmbeddedStore {
    async fn settings(&self, owner: &Owner) -> Result<SettingsHistory, StoreError> {
        const CONTEXT: &str = "reading settings";
        let prefix = prefix(owner);
        let prefix_len = prefix.len();
        let rows = self.scan(table(owner), prefix, None, CONTEXT).await?;
        let entries = rows
            .iter()
            .map(|(key, value)| {
                let effective_from = match owner {
                    Owner::Campaign(_) => keys::decode_settings_time(key),
                    Owner::Site(_) => site_keys::decode_site_settings_time(key, prefix_len),
                }
                .ok_or_else(|| corrupt(CONTEXT))?;
                let (buckets, caps, look_backs) =
                    rows::decode_settings_value(value).ok_or_else(|| corrupt(CONTEXT))?;
                Ok(CampaignSettings {
                    buckets: BucketCount::new(buckets).map_err(|_| corrupt(CONTEXT))?,
                    effective_from,
                    daily_cap: caps.daily_cap,
                    total_cap: caps.total_cap,
                    tz: caps.tz,
                    look_backs,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok(SettingsHistory::new(entries))
    }

    async fn put_settings(
        &self,
        owner: &Owner,
        settings: &CampaignSettings,
    ) -> Result<(), StoreError> {
        let caps = settings.caps();
        let caps = match owner {
            Owner::Campaign(_) => Some((&caps, settings.look_backs)),
            Owner::Site(_) => None,
        };
        let row = (
            table(owner),
            key(owner, settings.effective_from),
            rows::settings_value(settings.buckets.get(), caps),
        );
        self.write("writing settings", vec![row]).await
    }
}
