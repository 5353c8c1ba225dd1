//! `GET …/campaigns/{campaign_id}/delivery` (what an ad server polls to stop serving at a cap)
//! and `GET /v1/freshness` (whether numbers may still change).

use crate::http::AppState;
use crate::http::edge::error::{ApiError, ErrorAnswer};
use crate::http::edge::openapi::texts::Id;
use crate::http::edge::params::{Params, campaign_key};
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use utoipa::ToSchema;

fn rfc3339(instant: DateTime<Utc>) -> String {
    instant.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The campaign's current day, in its zone.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TodayAnswer {
    /// `YYYY-MM-DD` in the campaign's `tz`.
    pub(crate) day: String,
    /// The campaign's `tz`: the zone in which its day, and `daily_cap`, run.
    pub(crate) tz: String,
    pub(crate) billable_impressions: u64,
    pub(crate) daily_cap: Option<u64>,
    /// `daily_cap` − billable impressions, never below 0; null without a cap.
    pub(crate) remaining: Option<u64>,
    /// Billable impressions ÷ (daily cap × the fraction of the day elapsed); null without a cap.
    pub(crate) pace: Option<f64>,
}

/// The campaign's whole life.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct LifetimeAnswer {
    pub(crate) billable_impressions: u64,
    pub(crate) total_cap: Option<u64>,
    pub(crate) remaining: Option<u64>,
}

/// A campaign's delivery against its caps.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DeliveryAnswer {
    /// Every impression acknowledged by any server process at least 1 s before this instant
    /// is counted.
    pub(crate) as_of: String,
    /// False while a server process that took impressions for the campaign's current day has
    /// been silent for 10 s without its counts being rebuilt.
    pub(crate) complete: bool,
    pub(crate) today: TodayAnswer,
    pub(crate) lifetime: LifetimeAnswer,
    /// Either cap reached: stop serving the campaign.
    pub(crate) stop: bool,
}

#[utoipa::path(
    get,
    path = "/v1/advertisers/{advertiser_id}/campaigns/{campaign_id}/delivery",
    tag = "delivery",
    security(("bearer" = ["read", "ingest"])),
    summary = "Today's and the lifetime's billable impressions against the campaign's caps, fresh to a second on every server process.",
    params(
        ("advertiser_id" = inline(Id), Path),
        ("campaign_id" = inline(Id), Path),
    ),
    responses(
        (status = 200, description = "OK", body = DeliveryAnswer),
        (status = 400, description = "Invalid input: the error names the field or parameter", body = ErrorAnswer),
        (status = 401, description = "No valid key", body = ErrorAnswer),
        (status = 403, description = "Not the advertiser's read or ingest key, nor admin", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn get_delivery(
    State(state): State<AppState>,
    Path((advertiser_id, campaign_id)): Path<(String, String)>,
    RawQuery(query): RawQuery,
) -> Result<Json<DeliveryAnswer>, ApiError> {
    let campaign = campaign_key(&advertiser_id, &campaign_id)?;
    Params::parse(query.as_deref(), &[])?;
    let delivery = state.delivery.delivery(campaign).await?;
    let figures = &delivery.figures;
    Ok(Json(DeliveryAnswer {
        as_of: rfc3339(delivery.as_of),
        complete: delivery.complete,
        today: TodayAnswer {
            day: figures.today.format("%Y-%m-%d").to_string(),
            tz: delivery.tz.name().to_owned(),
            billable_impressions: figures.today_billable,
            daily_cap: delivery.daily_cap,
            remaining: figures.daily_remaining,
            pace: figures.pace,
        },
        lifetime: LifetimeAnswer {
            billable_impressions: figures.lifetime_billable,
            total_cap: delivery.total_cap,
            remaining: figures.total_remaining,
        },
        stop: figures.stop,
    }))
}

/// A server process sharing the store.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ProcessAnswer {
    pub(crate) id: String,
    pub(crate) started_at: String,
    pub(crate) last_report_at: String,
}

/// Whether numbers may still change.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct FreshnessAnswer {
    pub(crate) as_of: String,
    /// Every server process that reported and has not stopped cleanly (a silent one stays
    /// until a starting process repairs its counts).
    pub(crate) processes: Vec<ProcessAnswer>,
    /// The newest UTC day such that every closed day up to it is sealed: its numbers are
    /// final (until a late event marks a day again).
    pub(crate) sealed_through: Option<String>,
    /// Campaign- and site-days a late event marked, waiting for their next seal.
    pub(crate) late_days: usize,
    /// How long after a UTC day ends it is sealed: the longer of `--rollup-grace` and
    /// `--tag-ttl` plus `--view-window` (the view window of the day's last impression, whose
    /// pixel may come `--tag-ttl` late), plus 5 s.
    pub(crate) seal_delay_seconds: i64,
}

#[utoipa::path(
    get,
    path = "/v1/freshness",
    tag = "delivery",
    security(("bearer" = [])),
    summary = "The server processes and their last reports, the newest day up to which every closed day is sealed, and how many days wait to be sealed again.",
    responses(
        (status = 200, description = "OK", body = FreshnessAnswer),
        (status = 400, description = "A query parameter was given", body = ErrorAnswer),
        (status = 401, description = "No valid key", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn get_freshness(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Json<FreshnessAnswer>, ApiError> {
    Params::parse(query.as_deref(), &[])?;
    let as_of = Utc::now();
    let report = state.freshness.report().await?;
    Ok(Json(FreshnessAnswer {
        as_of: rfc3339(as_of),
        processes: report
            .processes
            .iter()
            .map(|report| ProcessAnswer {
                id: report.id.to_string(),
                started_at: rfc3339(report.started_at),
                last_report_at: rfc3339(report.last_report_at),
            })
            .collect(),
        sealed_through: report
            .sealed_through
            .map(|day| day.date().format("%Y-%m-%d").to_string()),
        late_days: report.late_days,
        seal_delay_seconds: report.seal_delay.num_seconds(),
    }))
}
