//! `PUT` and `GET /v1/advertisers/{advertiser_id}/campaigns/{campaign_id}`: a campaign's
//! bucket count (and daily cap), scheduled to take effect at an instant.

use super::AppState;
use super::error::ApiError;
use super::params::campaign_key;
use crate::domain::bucket::BucketCount;
use crate::domain::campaign::CampaignSettings;
use crate::domain::time::MAX_FUTURE_SKEW;
use crate::settings::SettingsOwner;
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
    let effective_from = parse_effective_from(&state, wire.effective_from)?;
    let daily_cap = match wire.daily_cap {
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
    let settings = CampaignSettings {
        buckets: parse_buckets(wire.buckets)?,
        effective_from,
        daily_cap,
    };
    state
        .store
        .put_campaign_settings(campaign, &settings)
        .await?;
    state.settings.forget(&SettingsOwner::Campaign(campaign));
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

pub(super) fn parse_buckets(value: Option<Value>) -> Result<BucketCount, ApiError> {
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

/// When a settings change takes effect: the time given, or by default the earliest allowed.
pub(super) fn parse_effective_from(
    state: &AppState,
    effective_from: Option<String>,
) -> Result<DateTime<Utc>, ApiError> {
    // The earliest instant a change may take effect: later than any event already accepted
    // (timestamps may run 10 minutes ahead of the clock) and than any other process's cached
    // settings, so no stored event is ever placed under a bucket count it was not written with.
    let now = Utc::now();
    let lifetime = chrono::Duration::from_std(state.settings.lifetime()).unwrap_or_default();
    let earliest = now + lifetime + MAX_FUTURE_SKEW;
    Ok(match effective_from {
        None => earliest,
        Some(text) => {
            let instant = DateTime::parse_from_rfc3339(&text)
                .map_err(|_| ApiError::invalid("effective_from", "must be an RFC 3339 date-time"))?
                .with_timezone(&Utc);
            if instant < now {
                return Err(ApiError::invalid(
                    "effective_from",
                    "is in the past; a change can only apply to events still to come",
                ));
            }
            if instant < earliest {
                return Err(ApiError::invalid(
                    "effective_from",
                    format!(
                        "must be at least {} seconds ahead: events may carry timestamps 10 minutes \
                         ahead of the clock, and every server process must learn the change first",
                        (lifetime + MAX_FUTURE_SKEW).num_seconds()
                    ),
                ));
            }
            instant
        }
    })
}
