//! `PUT` and `GET /v1/advertisers/{advertiser_id}/campaigns/{campaign_id}`: a campaign's
//! bucket count (and daily cap), scheduled to take effect at an instant.

use crate::domain::owner::Owner;
use crate::http::AppState;
use crate::http::admin::settings_wire::{CampaignSettingsAnswer, CampaignSettingsWire};
use crate::http::edge::body::small_body;
use crate::http::edge::error::{ApiError, ErrorAnswer};
use crate::http::edge::openapi::texts::Id;
use crate::http::edge::params::campaign_key;
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use chrono::Utc;

#[utoipa::path(
    put,
    path = "/v1/advertisers/{advertiser_id}/campaigns/{campaign_id}",
    tag = "settings",
    summary = "Change a campaign's settings: a bucket count (scheduled) or its daily cap (at once).",
    description = "The body merges: absent fields keep their value. A new bucket count applies to \
        events whose timestamp is at or after `effective_from` (default and earliest: now plus \
        the settings cache lifetime plus 10 minutes); the same count as now schedules nothing.",
    params(
        ("advertiser_id" = inline(Id), Path),
        ("campaign_id" = inline(Id), Path),
    ),
    request_body(content = CampaignSettingsWire, content_type = "application/json", description = "A JSON object; `{}` changes nothing"),
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "The settings after the change", body = CampaignSettingsAnswer),
        (status = 400, description = "A field is invalid", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable", body = ErrorAnswer),
    )
)]
pub(crate) async fn put_settings(
    State(state): State<AppState>,
    Path((advertiser_id, campaign_id)): Path<(String, String)>,
    body: Body,
) -> Result<Json<CampaignSettingsAnswer>, ApiError> {
    let owner = Owner::Campaign(campaign_key(&advertiser_id, &campaign_id)?);
    let change = CampaignSettingsWire::parse(&small_body(body).await?)?.into_change()?;
    let current = state.settings.change(&owner, change, Utc::now()).await?;
    Ok(Json(CampaignSettingsAnswer::from(&current)))
}

#[utoipa::path(
    get,
    path = "/v1/advertisers/{advertiser_id}/campaigns/{campaign_id}",
    tag = "settings",
    summary = "The campaign's newest settings (a never-configured campaign has 1 bucket).",
    params(
        ("advertiser_id" = inline(Id), Path),
        ("campaign_id" = inline(Id), Path),
    ),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "OK", body = CampaignSettingsAnswer),
        (status = 400, description = "Invalid input: the error names the field or parameter; nothing was stored", body = ErrorAnswer),
        (status = 401, description = "No valid key", body = ErrorAnswer),
        (status = 403, description = "Not the advertiser's read key, nor admin", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn get_settings(
    State(state): State<AppState>,
    Path((advertiser_id, campaign_id)): Path<(String, String)>,
) -> Result<Json<CampaignSettingsAnswer>, ApiError> {
    let owner = Owner::Campaign(campaign_key(&advertiser_id, &campaign_id)?);
    let current = state.settings.current(&owner, Utc::now()).await?;
    Ok(Json(CampaignSettingsAnswer::from(&current)))
}
