//! Campaign and site settings as clients send and read them.

use super::error::ApiError;
use crate::domain::bucket::BucketCount;
use crate::domain::campaign::CampaignSettings;
use crate::settings::SettingsChange;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// A settings change (`PUT`). Sites take only `buckets` and `effective_from`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct SettingsWire {
    /// Partitions per day the events are spread over, 1 to 256.
    #[schema(value_type = u16, minimum = 1, maximum = 256)]
    buckets: Option<Value>,
    /// RFC 3339; default and earliest: now plus the settings cache lifetime plus 10 minutes.
    #[schema(value_type = Option<String>, format = DateTime)]
    effective_from: Option<String>,
    /// Campaigns: billable impressions per day, or null for none.
    #[schema(value_type = Option<u64>)]
    daily_cap: Option<Value>,
}

impl SettingsWire {
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        serde_json::from_slice(body).map_err(|error| {
            ApiError::invalid("body", format!("is not a JSON object of settings: {error}"))
        })
    }

    /// The change asked for; `effective_from` is checked against the clock when it is made.
    pub fn into_change(self) -> Result<SettingsChange, ApiError> {
        let effective_from = self
            .effective_from
            .map(|text| {
                DateTime::parse_from_rfc3339(&text)
                    .map(|instant| instant.with_timezone(&Utc))
                    .map_err(|_| {
                        ApiError::invalid("effective_from", "must be an RFC 3339 date-time")
                    })
            })
            .transpose()?;
        let daily_cap = match self.daily_cap {
            None | Some(Value::Null) => None,
            Some(value) => Some(
                value
                    .as_u64()
                    .filter(|cap| i64::try_from(*cap).is_ok())
                    .ok_or_else(|| {
                        ApiError::invalid("daily_cap", "must be null or a whole number below 2^63")
                    })?,
            ),
        };
        Ok(SettingsChange {
            buckets: parse_buckets(self.buckets)?,
            effective_from,
            daily_cap,
        })
    }
}

fn parse_buckets(value: Option<Value>) -> Result<BucketCount, ApiError> {
    let value = value.ok_or_else(|| ApiError::invalid("buckets", "is required"))?;
    value
        .as_u64()
        .and_then(|count| u16::try_from(count).ok())
        .and_then(|count| BucketCount::new(count).ok())
        .ok_or_else(|| ApiError::invalid("buckets", "must be a whole number from 1 to 256"))
}

/// Settings as recorded or read back.
#[derive(Debug, Serialize, ToSchema)]
pub struct SettingsAnswer {
    pub buckets: u16,
    /// RFC 3339, UTC, milliseconds.
    pub effective_from: String,
    /// Campaigns only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daily_cap: Option<Option<u64>>,
    /// `GET` only: the bucket count in force now (`buckets` may be scheduled for later).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_force: Option<u16>,
}

impl SettingsAnswer {
    pub fn campaign(settings: &CampaignSettings, in_force: Option<BucketCount>) -> Self {
        Self {
            daily_cap: Some(settings.daily_cap),
            ..Self::site(settings, in_force)
        }
    }

    pub fn site(settings: &CampaignSettings, in_force: Option<BucketCount>) -> Self {
        Self {
            buckets: settings.buckets.get(),
            effective_from: settings
                .effective_from
                .to_rfc3339_opts(SecondsFormat::Millis, true),
            daily_cap: None,
            in_force: in_force.map(|count| count.get()),
        }
    }
}
