//! `GET /v1/advertisers/{advertiser_id}/conversions`: every conversion of an advertiser,
//! attributed or not, by day, action or campaign.

use crate::domain::conversion::counts::ConversionCounts;
use crate::domain::echo::echo;
use crate::http::AppState;
use crate::http::edge::error::{ApiError, ErrorAnswer};
use crate::http::edge::openapi::texts::Id;
use crate::http::edge::params::{Params, RangeQuery, id};
use crate::http::queries::summary::value_strings;
use crate::query::conversions::{ConversionGrouping, RowKey};
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use serde::Serialize;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// Every conversion of the range.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ConversionTotals {
    pub(crate) conversions: u64,
    /// Credited to a click or an impression of one of the advertiser's campaigns.
    pub(crate) attributed: u64,
    pub(crate) unattributed: u64,
    /// Exact sums per currency of every conversion's value (`{}` when none).
    pub(crate) conversion_value: BTreeMap<String, String>,
}

/// One day, action or campaign.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ConversionRow {
    /// `YYYY-MM-DD` in the range's zone (`group_by=day`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) day: Option<String>,
    /// `group_by=action`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) action: Option<String>,
    /// `group_by=campaign`: the credited campaign, `null` for the unattributed conversions.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub(crate) campaign_id: Option<Option<String>>,
    pub(crate) conversions: u64,
    pub(crate) post_click_conversions: u64,
    pub(crate) post_view_conversions: u64,
    pub(crate) conversion_value: BTreeMap<String, String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ConversionsAnswer {
    pub(crate) advertiser_id: String,
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) tz: String,
    pub(crate) group_by: &'static str,
    pub(crate) totals: ConversionTotals,
    /// `day`: every day of the range, zeros included, oldest first; `action` and `campaign`:
    /// most conversions first, then by value, the unattributed row last; `none`: empty.
    pub(crate) rows: Vec<ConversionRow>,
}

fn row(key: &RowKey, counts: &ConversionCounts) -> ConversionRow {
    let (mut day, mut action, mut campaign_id) = (None, None, None);
    match key {
        RowKey::Day(date) => day = Some(date.format("%Y-%m-%d").to_string()),
        RowKey::Action(name) => action = Some(name.clone()),
        RowKey::Campaign(campaign) => campaign_id = Some(campaign.map(|id| id.to_string())),
    }
    ConversionRow {
        day,
        action,
        campaign_id,
        conversions: counts.conversions,
        post_click_conversions: counts.post_click,
        post_view_conversions: counts.post_view,
        conversion_value: value_strings(&counts.value),
    }
}

/// The values of `group_by`, for the document.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub(crate) enum ConversionGroupBy {
    Day,
    Action,
    Campaign,
    None,
}

#[utoipa::path(
    get,
    path = "/v1/advertisers/{advertiser_id}/conversions",
    tag = "queries",
    security(("bearer" = ["read"])),
    summary = "Every conversion of an advertiser, attributed or not, per local day, action or campaign.",
    description = "A conversion appears once its attribution is decided, `--attribution-delay` \
        (default 1 minute) after it arrived. It counts at its own time in `tz`.",
    params(
        ("advertiser_id" = inline(Id), Path),
        RangeQuery,
        ("group_by" = inline(Option<ConversionGroupBy>), Query, description = "day (default), action, campaign, none"),
    ),
    responses(
        (status = 200, description = "OK", body = ConversionsAnswer),
        (status = 400, description = "Invalid input: the error names the parameter", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn get_conversions(
    State(state): State<AppState>,
    Path(advertiser_id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<ConversionsAnswer>, ApiError> {
    let advertiser = id("advertiser_id", &advertiser_id)?;
    let params = Params::parse(query.as_deref(), &["from", "to", "tz", "group_by"])?;
    let range = params.range()?;
    let (grouping, group_by) = match params.get("group_by").unwrap_or("day") {
        "day" => (ConversionGrouping::Day, "day"),
        "action" => (ConversionGrouping::Action, "action"),
        "campaign" => (ConversionGrouping::Campaign, "campaign"),
        "none" => (ConversionGrouping::None, "none"),
        other => {
            return Err(ApiError::invalid(
                "group_by",
                format!("{} is not one of day, action, campaign, none", echo(other)),
            ));
        }
    };
    let answer = state
        .queries
        .advertiser_conversions(advertiser, &range, grouping)
        .await?;
    let totals = &answer.totals;
    let attributed = totals.post_click + totals.post_view;
    Ok(Json(ConversionsAnswer {
        advertiser_id: advertiser.to_string(),
        from: range.from().to_string(),
        to: range.to().to_string(),
        tz: range.tz().name().to_owned(),
        group_by,
        totals: ConversionTotals {
            conversions: totals.conversions,
            attributed,
            unattributed: totals.conversions - attributed,
            conversion_value: value_strings(&totals.value),
        },
        rows: answer
            .rows
            .iter()
            .map(|(key, counts)| row(key, counts))
            .collect(),
    }))
}
