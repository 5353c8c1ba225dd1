//! `PUT`/`GET /v1/sites/{site}` (a site's bucket count) and `GET /v1/sites/{site}/uniques`.

use super::AppState;
use super::body::small_body;
use super::error::{ApiError, ErrorAnswer};
use super::openapi::texts::Site;
use super::params::{Params, RangeQuery, site_id};
use super::settings_wire::{SiteSettingsAnswer, SiteSettingsWire};
use crate::domain::access::SiteProfile;
use crate::domain::echo::echo;
use crate::domain::owner::Owner;
use crate::query::uniques::{Granularity, UniquesQuery, VisitCounts};
use axum::Json;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use chrono::Utc;
use serde::Serialize;
use std::collections::BTreeMap;
use utoipa::ToSchema;

#[utoipa::path(
    put,
    path = "/v1/sites/{site}",
    tag = "settings",
    summary = "Register a site for beacons, set its allowed origins, or change its bucket count.",
    description = "The body merges: absent fields keep their value; `{}` registers the site as it is. \
        While keys are on, beacons are accepted only for registered sites.",
    params(("site" = inline(Site), Path, description = "1–128 characters of A-Z a-z 0-9 . _ : -")),
    request_body(content = SiteSettingsWire, content_type = "application/json", description = "A JSON object; `{}` registers the site as it is"),
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "The site after the change", body = SiteSettingsAnswer),
        (status = 400, description = "Invalid input: the error names the field; nothing was stored", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub async fn put_settings(
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
pub async fn get_settings(
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

/// The values of `granularity`, for the document.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum GranularityName {
    Total,
    Month,
    Week,
    Day,
}

/// Visits (exact) and unique visitors (HyperLogLog++) of a period or of the whole range.
#[derive(Debug, Serialize, ToSchema)]
pub struct VisitCountsAnswer {
    /// Valid beacons.
    pub visits: u64,
    /// Distinct guids of valid beacons.
    pub unique_visitors: u64,
    /// Beacons from bots, prefetches or denied addresses: kept, never counted above.
    pub invalid_visits: u64,
}

impl From<&VisitCounts> for VisitCountsAnswer {
    fn from(counts: &VisitCounts) -> Self {
        Self {
            visits: counts.visits,
            unique_visitors: counts.unique_visitors,
            invalid_visits: counts.invalid_visits,
        }
    }
}

/// One period's row.
#[derive(Debug, Serialize, ToSchema)]
pub struct PeriodRow {
    /// `YYYY-MM-DD`, `YYYY-Www` (ISO week) or `YYYY-MM`.
    pub period: String,
    #[serde(flatten)]
    pub counts: VisitCountsAnswer,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UniquesAnswer {
    pub site: String,
    pub from: String,
    pub to: String,
    pub tz: String,
    pub granularity: String,
    /// The feature filter: every beacon counted has these features.
    pub filter: BTreeMap<String, String>,
    pub total: VisitCountsAnswer,
    /// How many UTC days were answered from their rollup (the rest from stored beacons).
    pub sealed_days: usize,
    /// Every period of the range, oldest first, zeros included; none for `total`.
    pub rows: Vec<PeriodRow>,
}

#[utoipa::path(
    get,
    path = "/v1/sites/{site}/uniques",
    tag = "queries",
    summary = "Visits and unique visitors of a site over a range, for the beacons matching a feature filter.",
    security(("bearer" = ["read"])),
    description = "A feature filter is given as `feature.<name>=<value>` parameters (any subset of \
        a beacon's features; none = every visit of the site).",
    params(
        ("site" = inline(Site), Path),
        RangeQuery,
        ("granularity" = inline(Option<GranularityName>), Query, description = "total (default), month, week, day"),
    ),
    responses(
        (status = 200, description = "OK", body = UniquesAnswer),
        (status = 400, description = "Invalid input: the error names the field or parameter; nothing was stored", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub async fn get_uniques(
    State(state): State<AppState>,
    Path(site): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<UniquesAnswer>, ApiError> {
    let site = site_id(&site)?;
    let (params, filter) =
        Params::parse_with_features(query.as_deref(), &["from", "to", "tz", "granularity"])?;
    let range = params.range()?;
    let granularity_name = params.get("granularity").unwrap_or("total");
    let granularity = match granularity_name {
        "total" => Granularity::Total,
        "month" => Granularity::Month,
        "week" => Granularity::Week,
        "day" => Granularity::Day,
        other => {
            return Err(ApiError::invalid(
                "granularity",
                format!("{} is not one of total, month, week, day", echo(other)),
            ));
        }
    };
    let question = UniquesQuery {
        filter,
        range,
        granularity,
    };
    let uniques = state.queries.uniques(&site, &question).await?;
    Ok(Json(UniquesAnswer {
        site: site.as_str().to_owned(),
        from: range.from().format("%Y-%m-%d").to_string(),
        to: range.to().format("%Y-%m-%d").to_string(),
        tz: range.tz().name().to_owned(),
        granularity: granularity_name.to_owned(),
        filter: question.filter.entries().clone(),
        total: VisitCountsAnswer::from(&uniques.total),
        sealed_days: uniques.sealed_days,
        rows: uniques
            .rows
            .iter()
            .map(|(period, counts)| PeriodRow {
                period: period.clone(),
                counts: counts.into(),
            })
            .collect(),
    }))
}
