//! `PUT`/`GET /v1/sites/{site}`: a site's bucket count, allowed origins and whether beacons
//! need an origin.

use crate::domain::access::SiteProfile;
use crate::domain::owner::Owner;
use crate::http::AppState;
use crate::http::admin::settings_wire::{SiteSettingsAnswer, SiteSettingsWire};
use crate::http::edge::body::small_body;
use crate::http::edge::error::{ApiError, ErrorAnswer};
use crate::http::edge::openapi::texts::Site;
use crate::http::edge::params::site_id;
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use chrono::Utc;

#[utoipa::path(
    put,
    path = "/v1/sites/{site}",
    tag = "settings",
    summary = "Register a site for beacons, set its allowed origins, or change its bucket count.",
    description = "The body merges: absent fields keep their value; `{}` registers the site as it is. \
        While keys are on, beacons are accepted only for registered sites. `respect_gpc`: a \
        beacon sent with `Sec-GPC: 1` counts as a visit without a visitor.",
    params(("site" = inline(Site), Path, description = "1–128 characters of A-Z a-z 0-9 . _ : -")),
    request_body(content = SiteSettingsWire, content_type = "application/json", description = "A JSON object; `{}` registers the site as it is"),
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "The site after the change", body = SiteSettingsAnswer),
        (status = 400, description = "Invalid input: the error names the field; nothing was stored", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn put_settings(
    State(state): State<AppState>,
    Path(site): Path<String>,
    body: Body,
) -> Result<Json<SiteSettingsAnswer>, ApiError> {
    let site = site_id(&site)?;
    let change = SiteSettingsWire::parse(&small_body(body).await?)?.into_change()?;
    let now = Utc::now();
    // The settings first: a refused effective_from registers nothing.
    let owner = Owner::Site(site.clone());
    let current = state.settings.change(&owner, change.settings, now).await?;
    let stored = state.access.stored_site(&site).await?;
    let profile = SiteProfile {
        allowed_origins: change
            .allowed_origins
            .or_else(|| stored.as_ref().map(|p| p.allowed_origins.clone()))
            .unwrap_or_default(),
        require_origin: change
            .require_origin
            .or(stored.as_ref().map(|p| p.require_origin))
            .unwrap_or(false),
        respect_gpc: change
            .respect_gpc
            .or(stored.as_ref().map(|p| p.respect_gpc))
            .unwrap_or(false),
        created_at: stored.as_ref().map_or(now, |p| p.created_at),
        site,
    };
    state.access.register_site(profile.clone()).await?;
    Ok(Json(SiteSettingsAnswer::new(&current, Some(&profile))))
}

#[utoipa::path(
    get,
    path = "/v1/sites/{site}",
    tag = "settings",
    summary = "The site's settings and registration (a never-configured site has 1 bucket).",
    params(("site" = inline(Site), Path)),
    security(("bearer" = ["read"])),
    responses(
        (status = 200, description = "OK", body = SiteSettingsAnswer),
        (status = 400, description = "Invalid input: the error names the parameter", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn get_settings(
    State(state): State<AppState>,
    Path(site): Path<String>,
) -> Result<Json<SiteSettingsAnswer>, ApiError> {
    let site = site_id(&site)?;
    let current = state
        .settings
        .current(&Owner::Site(site.clone()), Utc::now())
        .await?;
    let profile = state.access.stored_site(&site).await?;
    Ok(Json(SiteSettingsAnswer::new(&current, profile.as_ref())))
}
