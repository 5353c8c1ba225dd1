//! `GET /v1/advertisers/{advertiser_id}/campaigns/{campaign_id}/report`.

use super::AppState;
use super::error::ApiError;
use super::params::{Params, campaign_key};
use crate::query::report::{Dimension, campaign_report};
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use serde_json::{Value, json};
use std::sync::Arc;

pub async fn get_report(
    State(state): State<AppState>,
    Path((advertiser_id, campaign_id)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let campaign = campaign_key(&advertiser_id, &campaign_id)?;
    let params = Params::parse(query.as_deref(), &["from", "to", "tz", "dimension"])?;
    let range = params.range()?;
    let dimension: Dimension = params
        .required("dimension")?
        .parse()
        .map_err(|message| ApiError::invalid("dimension", message))?;
    let rows = campaign_report(
        Arc::clone(&state.store),
        &state.settings,
        campaign,
        &range,
        &dimension,
        state.options.fan_out,
    )
    .await?;
    Ok(Json(json!({
        "advertiser_id": campaign.advertiser_id.to_string(),
        "campaign_id": campaign.campaign_id.to_string(),
        "from": range.from().format("%Y-%m-%d").to_string(),
        "to": range.to().format("%Y-%m-%d").to_string(),
        "tz": range.tz().name(),
        "dimension": dimension.to_string(),
        "rows": rows
            .iter()
            .map(|row| json!({
                "value": row.value,
                "impressions": row.impressions,
                "clicks": row.clicks,
                "ctr": row.ctr(),
            }))
            .collect::<Vec<_>>(),
    })))
}
