//! `GET /v1/advertisers/{advertiser_id}/campaigns/{campaign_id}/report`.

use crate::http::AppState;
use crate::http::edge::error::{ApiError, ErrorAnswer};
use crate::http::edge::openapi::texts::Id;
use crate::http::edge::params::{Params, RangeQuery, campaign_key};
use crate::http::queries::summary::{ConversionMeasuresAnswer, ViewMeasuresAnswer};
use crate::query::report::{DEFAULT_LIMIT, Dimension, MAX_LIMIT};
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use serde::Serialize;
use utoipa::ToSchema;

/// One value's counts.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ReportRowAnswer {
    /// The value; null for impressions without the `user_data` key, and for the row that sums
    /// the values past `limit`.
    pub(crate) value: Option<String>,
    pub(crate) impressions: u64,
    pub(crate) clicks: u64,
    pub(crate) ctr: f64,
    /// By `ad_id`: the summary's viewability measures of the ad.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub(crate) views: Option<ViewMeasuresAnswer>,
    /// By `ad_id`: the summary's conversion measures of the ad.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub(crate) conversions: Option<ConversionMeasuresAnswer>,
    /// Present and true on the one row summing every value past `limit`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) other: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ReportAnswer {
    pub(crate) advertiser_id: String,
    pub(crate) campaign_id: String,
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) tz: String,
    /// `ad_id` or `user_data.<key>`.
    pub(crate) dimension: String,
    /// Most impressions first, then by value; null last; past `limit`, one row with
    /// `"other": true` sums the rest.
    pub(crate) rows: Vec<ReportRowAnswer>,
    /// How many distinct values the range had, listed or summed.
    pub(crate) values: usize,
}

#[utoipa::path(
    get,
    path = "/v1/advertisers/{advertiser_id}/campaigns/{campaign_id}/report",
    tag = "queries",
    security(("bearer" = ["read"])),
    summary = "Impressions, clicks and CTR per value of ad_id or of one user_data key.",
    description = "By ad_id: the summary's ad rows (clicks as in the summary, answered from \
        rollups and slice aggregates). By user_data.<key>: clicks are the first clicks, in the \
        range, of impressions shown in the range (raw events). Rows: most impressions first, \
        then by value; null (impressions without the key) last.",
    params(
        ("advertiser_id" = inline(Id), Path),
        ("campaign_id" = inline(Id), Path),
        RangeQuery,
        ("dimension" = String, Query, pattern = "^(?:ad_id|user_data\\.[^\\u0000-\\u001F\\u007F-\\u009F]{1,64})$", description = "ad_id or user_data.<key> (a key of 1 to 64 bytes, no control character)"),
        ("limit" = Option<usize>, Query, minimum = 1, maximum = 10000, description = "Rows listed, 1 to 10000 (default 1000); the rest are summed into one row with \"other\": true"),
    ),
    responses(
        (status = 200, description = "OK", body = ReportAnswer),
        (status = 400, description = "Invalid input: the error names the field or parameter; nothing was stored", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn get_report(
    State(state): State<AppState>,
    Path((advertiser_id, campaign_id)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Json<ReportAnswer>, ApiError> {
    let campaign = campaign_key(&advertiser_id, &campaign_id)?;
    let params = Params::parse(
        query.as_deref(),
        &["from", "to", "tz", "dimension", "limit"],
    )?;
    let range = params.range()?;
    let dimension: Dimension = params
        .required("dimension")?
        .parse()
        .map_err(|message| ApiError::invalid("dimension", message))?;
    let limit = params.limit(DEFAULT_LIMIT, MAX_LIMIT)?;
    let report = state
        .queries
        .report(campaign, &range, &dimension, limit)
        .await?;
    Ok(Json(ReportAnswer {
        advertiser_id: campaign.advertiser_id.to_string(),
        campaign_id: campaign.campaign_id.to_string(),
        from: range.from().format("%Y-%m-%d").to_string(),
        to: range.to().format("%Y-%m-%d").to_string(),
        tz: range.tz().name().to_owned(),
        dimension: dimension.to_string(),
        rows: report
            .rows
            .iter()
            .map(|row| ReportRowAnswer {
                ctr: row.ctr(),
                value: row.value.clone(),
                impressions: row.impressions,
                clicks: row.clicks,
                views: row.views.as_ref().map(ViewMeasuresAnswer::from),
                conversions: row
                    .conversions
                    .as_ref()
                    .map(|conversions| ConversionMeasuresAnswer::new(conversions, row.clicks)),
                other: row.other,
            })
            .collect(),
        values: report.values,
    }))
}
