//! `PUT`/`GET /v1/sites/{site}` (a site's bucket count) and `GET /v1/sites/{site}/uniques`.

use super::AppState;
use super::campaigns::{parse_buckets, parse_effective_from};
use super::error::ApiError;
use super::params::{Params, site_id};
use crate::domain::campaign::CampaignSettings;
use crate::query::uniques::{Granularity, VisitCounts, site_uniques};
use crate::settings::SettingsOwner;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use chrono::{SecondsFormat, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
struct SiteSettingsWire {
    buckets: Option<Value>,
    effective_from: Option<String>,
}

pub async fn put_settings(
    State(state): State<AppState>,
    Path(site): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let site = site_id(&site)?;
    let wire: SiteSettingsWire = serde_json::from_slice(&body).map_err(|error| {
        ApiError::invalid("body", format!("is not a JSON object of settings: {error}"))
    })?;
    let settings = CampaignSettings {
        buckets: parse_buckets(wire.buckets)?,
        effective_from: parse_effective_from(&state, wire.effective_from)?,
        daily_cap: None,
    };
    state.store.put_site_settings(&site, &settings).await?;
    state.settings.forget(&SettingsOwner::Site(site));
    Ok(Json(settings_json(&settings)))
}

pub async fn get_settings(
    State(state): State<AppState>,
    Path(site): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let site = site_id(&site)?;
    let history = state.store.site_settings(&site).await?;
    let mut answer = settings_json(&history.latest());
    answer["in_force"] = json!(history.buckets_at(Utc::now()).get());
    Ok(Json(answer))
}

fn settings_json(settings: &CampaignSettings) -> Value {
    json!({
        "buckets": settings.buckets.get(),
        "effective_from": settings.effective_from.to_rfc3339_opts(SecondsFormat::Millis, true),
    })
}

pub async fn get_uniques(
    State(state): State<AppState>,
    Path(site): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let site = site_id(&site)?;
    let (params, filter) =
        Params::parse_with_features(query.as_deref(), &["from", "to", "tz", "granularity"])?;
    let range = params.range()?;
    let granularity = match params.get("granularity").unwrap_or("total") {
        "total" => Granularity::Total,
        "month" => Granularity::Month,
        "week" => Granularity::Week,
        "day" => Granularity::Day,
        other => {
            return Err(ApiError::invalid(
                "granularity",
                format!("{other:?} is not one of total, month, week, day"),
            ));
        }
    };
    let uniques = site_uniques(
        state.store.as_ref(),
        &state.settings,
        &site,
        &filter,
        &range,
        granularity,
        state.options.fan_out,
    )
    .await?;
    let counts = |counts: &VisitCounts| json!({"visits": counts.visits, "unique_visitors": counts.unique_visitors});
    let rows: Vec<Value> = uniques
        .rows
        .iter()
        .map(|(period, row)| {
            let mut value = counts(row);
            value["period"] = json!(period);
            value
        })
        .collect();
    Ok(Json(json!({
        "site": site.as_str(),
        "from": range.from().format("%Y-%m-%d").to_string(),
        "to": range.to().format("%Y-%m-%d").to_string(),
        "tz": range.tz().name(),
        "granularity": params.get("granularity").unwrap_or("total"),
        "filter": filter.entries(),
        "total": counts(&uniques.total),
        // How many UTC days were answered from their rollup (the rest from stored beacons).
        "sealed_days": uniques.sealed_days,
        "rows": rows,
    })))
}
