//! `PUT` and `GET /v1/advertisers/{advertiser_id}/campaigns/{campaign_id}`: a campaign's
//! bucket count (and daily cap), scheduled to take effect at an instant.

use super::AppState;
use super::error::ApiError;
use super::params::campaign_key;
use crate::domain::bucket::BucketCount;
use crate::domain::campaign::CampaignSettings;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
struct SettingsWire {
    buckets: Option<serde_json::Value>,
    effective_from: Option<String>,
    daily_cap: Option<serde_json::Value>,
}

pub async fn put_settings(
    State(state): State<AppState>,
    Path((advertiser_id, campaign_id)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let campaign = campaign_key(&advertiser_id, &campaign_id)?;
    let wire: SettingsWire = serde_json::from_slice(&body).map_err(|error| {
        ApiError::invalid("body", format!("is not a JSON object of settings: {error}"))
    })?;
    let now = Utc::now();
    let settings = CampaignSettings {
        buckets: parse_buckets(wire.buckets)?,
        effective_from: match wire.effective_from {
            // Far enough ahead that every server process has refreshed its cached settings.
            None => now + chrono::Duration::from_std(state.settings.lifetime()).unwrap_or_default(),
            Some(text) => {
                let instant = DateTime::parse_from_rfc3339(&text)
                    .map_err(|_| {
                        ApiError::invalid("effective_from", "must be an RFC 3339 date-time")
                    })?
                    .with_timezone(&Utc);
                if instant < now {
                    return Err(ApiError::invalid(
                        "effective_from",
                        "is in the past; a change can only apply to events still to come",
                    ));
                }
                instant
            }
        },
        daily_cap: match wire.daily_cap {
            None | Some(Value::Null) => None,
            Some(value) => {
                Some(value.as_u64().ok_or_else(|| {
                    ApiError::invalid("daily_cap", "must be null or a whole number")
                })?)
            }
        },
    };
    state
        .store
        .put_campaign_settings(campaign, &settings)
        .await?;
    state.settings.forget(campaign);
    Ok(Json(settings_json(&settings)))
}

pub async fn get_settings(
    State(state): State<AppState>,
    Path((advertiser_id, campaign_id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let campaign = campaign_key(&advertiser_id, &campaign_id)?;
    let history = state.store.campaign_settings(campaign).await?;
    let mut answer = settings_json(&history.latest());
    answer["in_force"] = json!(history.buckets_at(Utc::now()).get());
    Ok(Json(answer))
}

fn parse_buckets(value: Option<Value>) -> Result<BucketCount, ApiError> {
    let value = value.ok_or_else(|| ApiError::invalid("buckets", "is required"))?;
    value
        .as_u64()
        .and_then(|count| u16::try_from(count).ok())
        .ok_or(())
        .and_then(|count| BucketCount::new(count).map_err(|_| ()))
        .map_err(|()| ApiError::invalid("buckets", "must be a whole number from 1 to 256"))
}

fn settings_json(settings: &CampaignSettings) -> Value {
    json!({
        "buckets": settings.buckets.get(),
        "effective_from": settings.effective_from.to_rfc3339_opts(SecondsFormat::Millis, true),
        "daily_cap": settings.daily_cap,
    })
}
