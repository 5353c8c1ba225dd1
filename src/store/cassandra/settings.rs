//! Campaign and site configuration on Cassandra: `campaign_config` and `site_config`, one row
//! per `effective_from`.

use super::CassandraStore;
use super::config::KeyspaceName;
use super::errors::decode_error;
use super::statements::{execute, prepare_all, read_all};
use crate::domain::bucket::BucketCount;
use crate::domain::campaign::{CampaignSettings, SettingsHistory};
use crate::domain::conversion::LookBack;
use crate::domain::conversion::attribution::LookBacks;
use crate::domain::owner::Owner;
use crate::store::error::Message;
use crate::store::{SettingsStore, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use scylla::DeserializeRow;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;

pub(crate) struct SettingsStatements {
    select_campaign: PreparedStatement,
    insert_campaign: PreparedStatement,
    select_site: PreparedStatement,
    insert_site: PreparedStatement,
}

impl SettingsStatements {
    pub(crate) async fn prepare(
        session: &Session,
        keyspace: &KeyspaceName,
    ) -> Result<Self, StoreError> {
        let [select_campaign, insert_campaign, select_site, insert_site] = prepare_all(
            session,
            [
                format!(
                    "SELECT effective_from, buckets, daily_cap, total_cap, tz, click_window, view_window \
                     FROM {keyspace}.campaign_config \
                     WHERE advertiser_id = ? AND campaign_id = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.campaign_config (advertiser_id, campaign_id, effective_from, buckets, \
                     daily_cap, total_cap, tz, click_window, view_window, updated_at) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                ),
                format!(
                    "SELECT effective_from, buckets FROM {keyspace}.site_config WHERE site = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.site_config (site, effective_from, buckets, updated_at) \
                     VALUES (?, ?, ?, ?)"
                ),
            ],
        )
        .await?;
        Ok(Self {
            select_campaign,
            insert_campaign,
            select_site,
            insert_site,
        })
    }
}

/// A row of `campaign_config`, or of `site_config` without a cap.
#[derive(DeserializeRow)]
struct StoredSettings {
    effective_from: DateTime<Utc>,
    buckets: i16,
    daily_cap: Option<i64>,
    total_cap: Option<i64>,
    tz: Option<String>,
    click_window: Option<i32>,
    view_window: Option<i32>,
}

/// A row of `site_config`.
#[derive(DeserializeRow)]
struct StoredSiteSettings {
    effective_from: DateTime<Utc>,
    buckets: i16,
}

impl StoredSettings {
    fn into_settings(self) -> Result<CampaignSettings, StoreError> {
        let buckets = u16::try_from(self.buckets)
            .ok()
            .and_then(|count| BucketCount::new(count).ok())
            .ok_or_else(|| {
                decode_error(
                    "reading settings",
                    Message(format!("stored bucket count {} is invalid", self.buckets)),
                )
            })?;
        let tz = match self.tz {
            None => Tz::UTC,
            Some(name) => name.parse().map_err(|_| {
                decode_error(
                    "reading settings",
                    Message(format!("stored zone {name} is unknown")),
                )
            })?,
        };
        Ok(CampaignSettings {
            buckets,
            effective_from: self.effective_from,
            daily_cap: self.daily_cap.and_then(|cap| u64::try_from(cap).ok()),
            total_cap: self.total_cap.and_then(|cap| u64::try_from(cap).ok()),
            tz,
            look_backs: LookBacks {
                click: look_back(self.click_window, LookBacks::DEFAULT.click),
                view: look_back(self.view_window, LookBacks::DEFAULT.view),
            },
        })
    }
}

/// A stored look-back, or `default` for a row written before look-backs.
fn look_back(seconds: Option<i32>, default: LookBack) -> LookBack {
    seconds
        .and_then(|seconds| u32::try_from(seconds).ok())
        .map_or(default, LookBack::from_seconds)
}

#[async_trait]
impl SettingsStore for CassandraStore {
    async fn settings(&self, owner: &Owner) -> Result<SettingsHistory, StoreError> {
        const CONTEXT: &str = "reading settings";
        let statements = &self.prepared().await?.settings;
        let rows: Vec<StoredSettings> = match owner {
            Owner::Campaign(campaign) => {
                read_all(
                    &self.session,
                    &statements.select_campaign,
                    (
                        campaign.advertiser_id.as_uuid(),
                        campaign.campaign_id.as_uuid(),
                    ),
                    CONTEXT,
                )
                .await?
            }
            Owner::Site(site) => {
                let rows: Vec<StoredSiteSettings> = read_all(
                    &self.session,
                    &statements.select_site,
                    (site.as_str(),),
                    CONTEXT,
                )
                .await?;
                rows.into_iter()
                    .map(|row| StoredSettings {
                        effective_from: row.effective_from,
                        buckets: row.buckets,
                        daily_cap: None,
                        total_cap: None,
                        tz: None,
                        click_window: None,
                        view_window: None,
                    })
                    .collect()
            }
        };
        let entries = rows
            .into_iter()
            .map(StoredSettings::into_settings)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SettingsHistory::new(entries))
    }

    async fn put_settings(
        &self,
        owner: &Owner,
        settings: &CampaignSettings,
    ) -> Result<(), StoreError> {
        const CONTEXT: &str = "writing settings";
        let statements = &self.prepared().await?.settings;
        // At most 256.
        let buckets = settings.buckets.get() as i16;
        match owner {
            Owner::Campaign(campaign) => {
                let values = (
                    campaign.advertiser_id.as_uuid(),
                    campaign.campaign_id.as_uuid(),
                    settings.effective_from,
                    buckets,
                    settings.daily_cap.and_then(|cap| i64::try_from(cap).ok()),
                    settings.total_cap.and_then(|cap| i64::try_from(cap).ok()),
                    settings.tz.name(),
                    settings.look_backs.click.seconds() as i32,
                    settings.look_backs.view.seconds() as i32,
                    Utc::now(),
                );
                execute(&self.session, &statements.insert_campaign, values, CONTEXT).await
            }
            Owner::Site(site) => {
                let values = (site.as_str(), settings.effective_from, buckets, Utc::now());
                execute(&self.session, &statements.insert_site, values, CONTEXT).await
            }
        }
    }
}
