//! `POST /v?QUERY`: a view report from `/v.js`, signed with its impression pixel's own query
//! (docs/API.md, "Viewability and engagement"). The signature is checked before the body is
//! read; a report is stored as an event of its own and joined to its impression when counted.
//! The signed query is public (it sits in the ad's markup), so the join counts a report only
//! from the client the impression was rendered for; here it is only bounded and classified.

use crate::domain::tag::TagTimeRefusal;
use crate::domain::view::{Client, ViewReport, ViewReportError, ViewReportEvent};
use crate::http::AppState;
use crate::http::beacons::track::body_params;
use crate::http::edge::body::{BodyLimits, read_body};
use crate::http::edge::client_ip::client_ip;
use crate::http::edge::error::{ApiError, ErrorAnswer};
use crate::http::edge::viewer::Viewer;
use crate::http::tags::pixel_click::{TagRefusal, count, signed_impression};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;

/// A report is a few short fields; anything larger is not one.
const MAX_REPORT_BYTES: usize = 2 * 1024;

#[utoipa::path(
    post,
    path = "/v",
    tag = "ad tags",
    summary = "A view report of /v.js: measurable, viewable and engagement, joined to its impression.",
    description = "The query is the impression pixel's signed query, exactly as for `/i` (`s` \
        last). Body (form, `text/plain` holding a form, or JSON): `e` (comma-separated kinds: \
        measurable, viewable, hover, click, expand, play, pause, complete; may be empty only \
        beside `in_view_ms`), optional `in_view_ms` (0–600000) and `max_visible` (0–100); any \
        other field is a 400. Counted when it arrives within `--view-window` after the \
        impression's `t` (or its pixel's arrival, when later), from the client the impression \
        was rendered for, among the first 5 distinct reports of that client. No key; any \
        origin.",
    request_body(content = String, description = "`e=viewable&in_view_ms=1200&max_visible=80`", content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 204, description = "Received (also when ignored: outside the window, past the 5 reports, repeated)"),
        (status = 400, description = "A body field is unknown, repeated or out of range (named)", body = ErrorAnswer),
        (status = 403, description = "A missing or bad signature or a malformed query", body = ErrorAnswer),
        (status = 413, description = "The body is larger than 2 KiB", body = ErrorAnswer),
        (status = 429, description = "The client address is past its rate (`--rate-limit-beacons`)", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable or the server at its in-flight cap; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn post_view_report(
    State(state): State<AppState>,
    request: Request,
) -> Result<StatusCode, ApiError> {
    let (parts, body) = request.into_parts();
    let address = client_ip(&parts, &state.options.trusted_proxies);
    // Before the signature: past its rate, an address costs no HMAC and no read of its body.
    state
        .limiters
        .admit_beacon(address)
        .inspect_err(|_| count("view", "rate_limited"))?;
    let now = Utc::now();
    let query = parts.uri.query().unwrap_or_default();
    let window = state
        .options
        .tag_ttl
        .saturating_add(state.options.view_window);
    let impression = match signed_impression(&state, query, now, window).await {
        Ok(impression) => impression,
        Err(TagRefusal::Time(refusal)) => {
            // A signed report outside every window it could count in: ignored.
            count(
                "view",
                match refusal {
                    TagTimeRefusal::Expired => "expired",
                    TagTimeRefusal::Early => "early",
                },
            );
            return Ok(StatusCode::NO_CONTENT);
        }
        Err(refusal) => {
            count("view", refusal.label());
            return Err(ApiError::Forbidden(format!(
                "the view report is refused: {refusal}"
            )));
        }
    };
    // A report is stored under its impression's UTC day: past --retain-raw that day's events
    // are gone, so the report is answered like one out of its window and not recorded (the
    // script on the page could do nothing with a 400).
    if state
        .options
        .retain_raw
        .expired(impression.timestamp.utc_day(), now)
    {
        count("view", "past_retention");
        return Ok(StatusCode::NO_CONTENT);
    }
    let limits = BodyLimits {
        max_bytes: MAX_REPORT_BYTES,
        max_events: 1,
    };
    let bytes = read_body(&parts.headers, body, limits).await?;
    let report =
        ViewReport::from_fields(body_params(&parts.headers, &bytes)?).map_err(|errors| {
            count("view", "invalid_body");
            invalid_report(errors)
        })?;
    let viewer = Viewer::of(&parts.headers, address);
    let event = ViewReportEvent {
        campaign: impression.campaign,
        impression_id: impression.impression_id,
        impression_time: impression.timestamp,
        received: now,
        // The network the join compares is what `--store-ip` keeps of the address: the same
        // /24 (/48) whether truncated or full, and none at all with `none`, as for impressions.
        client: Client::of(
            state.options.store_ip.stored(address),
            viewer.user_agent.as_ref(),
        ),
        report,
        invalid: state.classifier.classify(viewer.signals()),
    };
    let Some(_slot) = state.limiters.try_write_slot() else {
        count("view", "overloaded");
        return Err(ApiError::Overloaded);
    };
    let outcome = state.views.report(event).await?;
    count("view", outcome.label());
    Ok(StatusCode::NO_CONTENT)
}

/// `OPTIONS /v`: what a browser's preflight learns (the CORS layer answers it).
pub(crate) async fn options_view_report() -> Response {
    (StatusCode::NO_CONTENT, [(header::ALLOW, "POST, OPTIONS")]).into_response()
}

fn invalid_report(errors: Vec<ViewReportError>) -> ApiError {
    ApiError::invalid_fields(
        "the view report",
        errors
            .into_iter()
            .map(|error| (error.field, error.message))
            .collect(),
    )
}
