//! `PUT` and `GET /v1/advertisers/{advertiser_id}/campaigns/{campaign_id}`: a campaign's
//! bucket count (and daily cap), scheduled to take effect at an instant.

use super::AppState;
use super::error::{ApiError, ErrorAnswer};
use super::params::campaign_key;
use super::settings_wire::{SettingsAnswer, SettingsWire};
use crate::domain::owner::Owner;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use chrono::Utc;

#[utoipa::path(
    put,
    path = "/v1/advertisers/{advertiser_id}/campaigns/{campaign_id}",
    tag = "settings",
    summary = "Schedule a bucket-count (and daily cap) change.",
    description = "The change applies to events whose timestamp is at or after `effective_from` \
        (default and earliest: now plus the settings cache lifetime plus 10 minutes).",
    params(
        ("advertiser_id" = uuid::Uuid, Path),
        ("campaign_id" = uuid::Uuid, Path),
    ),
    request_body = SettingsWire,
    responses(
        (status = 200, description = "The change as recorded", body = SettingsAnswer),
        (status = 400, description = "A field is invalid", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable", body = ErrorAnswer),
    )
)]
pub async fn put_settings(
    State(state): State<AppState>,
    Path((advertiser_id, campaign_id)): Path<(String, String)>,
    body: Bytes,
) -> Result<Json<SettingsAnswer>, ApiError> {
    let owner = Owner::Campaign(campaign_key(&advertiser_id, &campaign_id)?);
    let change = SettingsWire::parse(&body)?.into_change()?;
    let settings = state.settings.change(&owner, change, Utc::now()).await?;
    Ok(Json(SettingsAnswer::campaign(&settings, None)))
}

#[utoipa::path(
    get,
    path = "/v1/advertisers/{advertiser_id}/campaigns/{campaign_id}",
    tag = "settings",
    summary = "The campaign's newest settings (a never-configured campaign has 1 bucket).",
    params(
        ("advertiser_id" = uuid::Uuid, Path),
        ("campaign_id" = uuid::Uuid, Path),
    ),
    responses(
        (status = 200, description = "OK", body = SettingsAnswer),
        (status = 400, description = "Invalid input: the error names the field or parameter; nothing was stored", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub async fn get_settings(
    State(state): State<AppState>,
    Path((advertiser_id, campaign_id)): Path<(String, String)>,
) -> Result<Json<SettingsAnswer>, ApiError> {
    let owner = Owner::Campaign(campaign_key(&advertiser_id, &campaign_id)?);
    let current = state.settings.current(&owner, Utc::now()).await?;
    Ok(Json(SettingsAnswer::campaign(
        &current.latest,
        Some(current.in_force),
    )))
}
