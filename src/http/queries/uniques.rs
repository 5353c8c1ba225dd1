//! `GET /v1/sites/{site}/uniques`: a site's visits and unique visitors over a range, by
//! period, filtered by feature values.

use crate::domain::echo::echo;
use crate::http::AppState;
use crate::http::edge::error::{ApiError, ErrorAnswer};
use crate::http::edge::openapi::texts::Site;
use crate::http::edge::params::{Params, RangeQuery, site_id};
use crate::query::uniques::{Granularity, UniquesQuery, VisitCounts};
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use serde::Serialize;
use std::collections::BTreeMap;
use utoipa::ToSchema;

/// The values of `granularity`, for the document.
#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub(crate) enum GranularityName {
    Total,
    Month,
    Week,
    Day,
}

/// Visits (exact) and unique visitors (HyperLogLog++) of a period or of the whole range.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct VisitCountsAnswer {
    /// Valid beacons.
    pub(crate) visits: u64,
    /// Distinct guids of valid beacons.
    pub(crate) unique_visitors: u64,
    /// Beacons from bots, prefetches or denied addresses: kept, never counted above.
    pub(crate) invalid_visits: u64,
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
pub(crate) struct PeriodRow {
    /// `YYYY-MM-DD`, `YYYY-Www` (ISO week) or `YYYY-MM`.
    pub(crate) period: String,
    #[serde(flatten)]
    pub(crate) counts: VisitCountsAnswer,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct UniquesAnswer {
    pub(crate) site: String,
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) tz: String,
    pub(crate) granularity: String,
    /// The feature filter: every beacon counted has these features.
    pub(crate) filter: BTreeMap<String, String>,
    pub(crate) total: VisitCountsAnswer,
    /// How many UTC days were answered from their rollup (the rest from stored beacons).
    pub(crate) sealed_days: usize,
    /// Every period of the range, oldest first, zeros included; none for `total`.
    pub(crate) rows: Vec<PeriodRow>,
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
pub(crate) async fn get_uniques(
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
