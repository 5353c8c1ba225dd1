//! `GET /v1/advertisers/{advertiser_id}/campaigns/{campaign_id}/summary`.

use crate::domain::conversion::counts::ConversionCounts;
use crate::domain::conversion::money::ValueSums;
use crate::domain::echo::echo;
use crate::domain::view::ViewCounts;
use crate::http::AppState;
use crate::http::edge::error::{ApiError, ErrorAnswer};
use crate::http::edge::openapi::texts::Id;
use crate::http::edge::params::{Params, RangeQuery, campaign_key};
use crate::query::summary::{Counts, Grouping};
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use serde::Serialize;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// The counts of one row, or of the totals.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct CountsAnswer {
    /// Distinct valid impressions (each id once per UTC day, at its earliest timestamp; valid
    /// if any copy is).
    pub(crate) impressions: u64,
    /// Valid impressions first clicked in the period (valid if any click copy is).
    pub(crate) clicks: u64,
    /// clicks ÷ impressions (0 without impressions).
    pub(crate) ctr: f64,
    /// Distinct users of valid impressions (HyperLogLog++: exact or ±1 below 1,000, within
    /// 2 % above).
    pub(crate) unique_users: u64,
    /// Valid impressions once per user and billable window.
    pub(crate) billable_impressions: u64,
    /// Impressions every copy of which is invalid traffic (a bot, a prefetch, a denied
    /// address): kept, never counted above.
    pub(crate) invalid_impressions: u64,
    /// First clicks every copy of which is invalid traffic.
    pub(crate) invalid_clicks: u64,
    #[serde(flatten)]
    pub(crate) views: ViewMeasuresAnswer,
    #[serde(flatten)]
    pub(crate) conversions: ConversionMeasuresAnswer,
}

/// The conversions credited to the row (at the conversion's own time, and the credited ad).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct ConversionMeasuresAnswer {
    /// Conversions attributed to the row's ads.
    pub(crate) conversions: u64,
    /// Attributed to a click within its campaign's `click_window`.
    pub(crate) post_click_conversions: u64,
    /// Attributed to an impression within its campaign's `view_window`.
    pub(crate) post_view_conversions: u64,
    /// post-click conversions ÷ clicks (0 without clicks); a row's may exceed 1, since
    /// conversions count at their own time and clicks at theirs.
    pub(crate) conversion_rate: f64,
    /// Exact sums of the conversions' values per currency, with the currency's minor digits
    /// (`{"EUR": "1234.50", "JPY": "300"}`; `{}` when none).
    pub(crate) conversion_value: BTreeMap<String, String>,
}

impl ConversionMeasuresAnswer {
    pub(crate) fn new(conversions: &ConversionCounts, clicks: u64) -> Self {
        Self {
            conversions: conversions.conversions,
            post_click_conversions: conversions.post_click,
            post_view_conversions: conversions.post_view,
            conversion_rate: conversions.rate(clicks),
            conversion_value: value_strings(&conversions.value),
        }
    }
}

/// Sums per currency as the answer shows them.
pub(crate) fn value_strings(value: &ValueSums) -> BTreeMap<String, String> {
    value
        .to_decimal_strings()
        .into_iter()
        .map(|(code, sum)| (code.to_owned(), sum))
        .collect()
}

/// The viewability measures of valid impressions, from the reports of `/v.js` joined to them.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct ViewMeasuresAnswer {
    /// Valid impressions an accepted view report said were measured (`measurable` or
    /// `viewable`).
    pub(crate) measurable_impressions: u64,
    /// Valid impressions an accepted view report said were viewable (the MRC rule).
    pub(crate) viewable_impressions: u64,
    /// viewable ÷ measurable impressions; `null` when none was measured.
    pub(crate) viewable_rate: Option<f64>,
    /// The mean `in_view_ms` of the viewable impressions that reported one, rounded half up;
    /// `null` when none did.
    pub(crate) avg_in_view_ms: Option<u64>,
    /// Valid impressions with at least one engagement (hover, click, expand, play, pause,
    /// complete).
    pub(crate) engaged_impressions: u64,
}

impl From<&Counts> for CountsAnswer {
    fn from(counts: &Counts) -> Self {
        Self {
            impressions: counts.impressions,
            clicks: counts.clicks,
            ctr: counts.ctr(),
            unique_users: counts.unique_users,
            billable_impressions: counts.billable_impressions,
            invalid_impressions: counts.invalid_impressions,
            invalid_clicks: counts.invalid_clicks,
            views: ViewMeasuresAnswer::from(&counts.views),
            conversions: ConversionMeasuresAnswer::new(&counts.conversions, counts.clicks),
        }
    }
}

impl From<&ViewCounts> for ViewMeasuresAnswer {
    fn from(views: &ViewCounts) -> Self {
        Self {
            measurable_impressions: views.measurable,
            viewable_impressions: views.viewable,
            viewable_rate: views.viewable_rate(),
            avg_in_view_ms: views.avg_in_view_ms(),
            engaged_impressions: views.engaged,
        }
    }
}

/// One row: a local day, a local clock hour or an ad, with its counts.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SummaryRow {
    /// `YYYY-MM-DD` (`group_by=day`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) day: Option<String>,
    /// `2026-11-01T13:00:00+01:00` (`group_by=hour`; a repeated DST hour appears twice).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) hour: Option<String>,
    /// `group_by=ad`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ad_id: Option<String>,
    #[serde(flatten)]
    pub(crate) counts: CountsAnswer,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SummaryAnswer {
    pub(crate) advertiser_id: String,
    pub(crate) campaign_id: String,
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) tz: String,
    pub(crate) group_by: &'static str,
    pub(crate) totals: CountsAnswer,
    /// How many UTC days were answered from their rollup (the rest from raw events).
    pub(crate) sealed_days: usize,
    /// How many 15-minute slices of days not yet sealed were answered from their stored
    /// aggregates (the rest of those days from raw events).
    pub(crate) aggregated_slices: usize,
    pub(crate) rows: Vec<SummaryRow>,
}

/// The values of `group_by`, for the document.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub(crate) enum GroupBy {
    Day,
    Hour,
    Ad,
    None,
}

fn row(counts: &Counts) -> SummaryRow {
    SummaryRow {
        day: None,
        hour: None,
        ad_id: None,
        counts: counts.into(),
    }
}

#[utoipa::path(
    get,
    path = "/v1/advertisers/{advertiser_id}/campaigns/{campaign_id}/summary",
    tag = "queries",
    security(("bearer" = ["read"])),
    summary = "Impressions, clicks, CTR, unique users and billable impressions per local day, clock hour or ad, and in total.",
    params(
        ("advertiser_id" = inline(Id), Path),
        ("campaign_id" = inline(Id), Path),
        RangeQuery,
        ("group_by" = inline(Option<GroupBy>), Query, description = "day (default), hour, ad, none"),
    ),
    responses(
        (status = 200, description = "OK", body = SummaryAnswer),
        (status = 400, description = "Invalid input: the error names the field or parameter; nothing was stored", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn get_summary(
    State(state): State<AppState>,
    Path((advertiser_id, campaign_id)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Json<SummaryAnswer>, ApiError> {
    let campaign = campaign_key(&advertiser_id, &campaign_id)?;
    let params = Params::parse(query.as_deref(), &["from", "to", "tz", "group_by"])?;
    let range = params.range()?;
    let (grouping, group_by) = match params.get("group_by").unwrap_or("day") {
        "day" => (Grouping::Day, "day"),
        "hour" => (Grouping::Hour, "hour"),
        "ad" => (Grouping::Ad, "ad"),
        "none" => (Grouping::None, "none"),
        other => {
            return Err(ApiError::invalid(
                "group_by",
                format!("{} is not one of day, hour, ad, none", echo(other)),
            ));
        }
    };
    let summary = state.queries.summary(campaign, &range, grouping).await?;
    let rows: Vec<SummaryRow> = match grouping {
        Grouping::Day => summary
            .by_day
            .iter()
            .map(|(day, counts)| SummaryRow {
                day: Some(day.format("%Y-%m-%d").to_string()),
                ..row(counts)
            })
            .collect(),
        Grouping::Hour => summary
            .by_hour
            .iter()
            .map(|(hour, counts)| SummaryRow {
                hour: Some(hour.clone()),
                ..row(counts)
            })
            .collect(),
        Grouping::Ad => summary
            .by_ad
            .iter()
            .map(|(ad, counts)| SummaryRow {
                ad_id: Some(ad.to_string()),
                ..row(counts)
            })
            .collect(),
        Grouping::None => Vec::new(),
    };
    Ok(Json(SummaryAnswer {
        advertiser_id: campaign.advertiser_id.to_string(),
        campaign_id: campaign.campaign_id.to_string(),
        from: range.from().format("%Y-%m-%d").to_string(),
        to: range.to().format("%Y-%m-%d").to_string(),
        tz: range.tz().name().to_owned(),
        group_by,
        totals: (&summary.totals).into(),
        sealed_days: summary.sealed_days,
        aggregated_slices: summary.aggregated_slices,
        rows,
    }))
}
