//! `POST /v1/impressions`, `/v1/clicks` and `/v1/conversions`: read, validate whole, write,
//! then answer.

use crate::access::Caller;
use crate::domain::access::Grant;
use crate::http::AppState;
use crate::http::edge::body::{body_format, read_body, scan};
use crate::http::edge::client_ip::client_ip;
use crate::http::edge::error::{ApiError, ErrorAnswer};
use crate::http::ingestion::conversion_wire::ConversionWire;
use crate::http::ingestion::wire::{ClickWire, Context, ImpressionWire, IntoEvent, parse_body};
use axum::Json;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use bytes::Bytes;
use serde::Serialize;
use utoipa::ToSchema;

/// How many events the request held (re-sent ones included); every one is durable.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Accepted {
    pub(crate) accepted: usize,
}

#[utoipa::path(
    post,
    path = "/v1/impressions",
    tag = "ingestion",
    summary = "Ingest impressions. An impression is its impression_id: re-sending never changes a count.",
    security(("bearer" = ["ingest"])),
    description = "One JSON object, a JSON array of objects, or NDJSON \
        (`Content-Type: application/x-ndjson`); `Content-Encoding: gzip` accepted. A request \
        with any invalid event stores nothing.",
    request_body(content = Vec<ImpressionWire>, content_type = "application/json"),
    responses(
        (status = 200, description = "Every event is durable", body = Accepted),
        (status = 400, description = "Nothing stored; `errors` lists every problem by index and field", body = ErrorAnswer),
        (status = 403, description = "An event of another advertiser than the ingest key's; nothing stored, `errors` lists their indexes", body = ErrorAnswer),
        (status = 413, description = "The body or the number of events is over the limit", body = ErrorAnswer),
        (status = 415, description = "A content type or encoding this endpoint does not read", body = ErrorAnswer),
        (status = 429, description = "The key is past its rate (`--rate-limit-ingest`); nothing stored, retry after `Retry-After` seconds", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable, the event index is behind, or the server is at its in-flight cap; nothing stored, retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn post_impressions(
    State(state): State<AppState>,
    request: Request,
) -> Result<Json<Accepted>, ApiError> {
    state.ingestor.check_index_room()?;
    let (parts, bytes) = read_request(&state, request, "impression").await?;
    let (events, accepted) = events_rejected_counted(
        "impression",
        &parts,
        &bytes,
        parse::<ImpressionWire>(&state, &parts, &bytes),
    )?;
    admit(&state, &parts, "impression", accepted)?;
    state.ingestor.impressions(events).await?;
    Ok(accepted_answer("impression", accepted))
}

#[utoipa::path(
    post,
    path = "/v1/clicks",
    tag = "ingestion",
    summary = "Ingest clicks. A click counts once per impression, at the impression's first click.",
    security(("bearer" = ["ingest"])),
    description = "Same body forms as impressions.",
    request_body(content = Vec<ClickWire>, content_type = "application/json"),
    responses(
        (status = 200, description = "Every event is durable", body = Accepted),
        (status = 400, description = "Invalid input: the error names the field or parameter; nothing was stored", body = ErrorAnswer),
        (status = 413, description = "The body or the number of events is over the limit", body = ErrorAnswer),
        (status = 415, description = "A content type or encoding this endpoint does not read", body = ErrorAnswer),
        (status = 429, description = "The key is past its rate (`--rate-limit-ingest`); nothing stored, retry after `Retry-After` seconds", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable, the event index is behind, or the server is at its in-flight cap; nothing stored, retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn post_clicks(
    State(state): State<AppState>,
    request: Request,
) -> Result<Json<Accepted>, ApiError> {
    state.ingestor.check_index_room()?;
    let (parts, bytes) = read_request(&state, request, "click").await?;
    let (events, accepted) = events_rejected_counted(
        "click",
        &parts,
        &bytes,
        parse::<ClickWire>(&state, &parts, &bytes),
    )?;
    admit(&state, &parts, "click", accepted)?;
    state.ingestor.clicks(events).await?;
    Ok(accepted_answer("click", accepted))
}

#[utoipa::path(
    post,
    path = "/v1/conversions",
    tag = "ingestion",
    summary = "Ingest conversions. A conversion is (advertiser_id, conversion_id): re-sending never changes a count, the first stored wins.",
    security(("bearer" = ["ingest"])),
    description = "Same body forms and limits as impressions. Each conversion is attributed \
        once, `--attribution-delay` (default 1 minute) after it arrives, from the events \
        stored by then: the named click or impression, else the user's latest click, else \
        latest impression, within the campaigns' look-backs.",
    request_body(content = Vec<ConversionWire>, content_type = "application/json"),
    responses(
        (status = 200, description = "Every conversion is durable", body = Accepted),
        (status = 400, description = "Nothing stored; `errors` lists every problem by index and field", body = ErrorAnswer),
        (status = 403, description = "A conversion of another advertiser than the ingest key's; nothing stored", body = ErrorAnswer),
        (status = 413, description = "The body or the number of conversions is over the limit", body = ErrorAnswer),
        (status = 415, description = "A content type or encoding this endpoint does not read", body = ErrorAnswer),
        (status = 429, description = "The key is past its rate (`--rate-limit-ingest`); nothing stored, retry after `Retry-After` seconds", body = ErrorAnswer),
        (status = 503, description = "The store is unavailable, or the server is at its in-flight cap; nothing stored, retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn post_conversions(
    State(state): State<AppState>,
    request: Request,
) -> Result<Json<Accepted>, ApiError> {
    let (parts, bytes) = read_request(&state, request, "conversion").await?;
    let (conversions, accepted) = events_rejected_counted(
        "conversion",
        &parts,
        &bytes,
        parse::<ConversionWire>(&state, &parts, &bytes),
    )?;
    admit(&state, &parts, "conversion", accepted)?;
    state.conversions.accept(conversions).await?;
    Ok(accepted_answer("conversion", accepted))
}

/// The request's head and decoded body, within the limits.
async fn read_request(
    state: &AppState,
    request: Request,
    kind: &'static str,
) -> Result<(Parts, Bytes), ApiError> {
    let (parts, body) = request.into_parts();
    // An unreadable content type is refused before any of the body is read.
    rejected_counted(kind, body_format(&parts.headers))?;
    let bytes = rejected_counted(
        kind,
        read_body(&parts.headers, body, state.options.body_limits).await,
    )?;
    Ok((parts, bytes))
}

/// The body's events (repeats of one id folded) and how many it held.
fn parse<'de, W: IntoEvent<'de>>(
    state: &AppState,
    parts: &Parts,
    bytes: &'de [u8],
) -> Result<(Vec<W::Event>, usize), ApiError> {
    let format = body_format(&parts.headers)?;
    let advertiser = match parts.extensions.get::<Caller>().map(|caller| &caller.grant) {
        Some(Grant::Ingest(advertiser)) => Some(*advertiser),
        _ => None,
    };
    let context = Context {
        now: chrono::Utc::now(),
        client_ip: client_ip(parts, &state.options.trusted_proxies),
        store_ip: state.options.store_ip,
        advertiser,
        classifier: std::sync::Arc::clone(&state.classifier),
        retain_raw: state.options.retain_raw,
    };
    parse_body::<W>(
        bytes,
        format,
        state.options.body_limits.max_events,
        &context,
    )
}

/// Takes the request's events from its key's bucket (`--rate-limit-ingest`); past the rate,
/// 429 and nothing is stored.
fn admit(
    state: &AppState,
    parts: &Parts,
    kind: &'static str,
    events: usize,
) -> Result<(), ApiError> {
    let Some(key) = parts
        .extensions
        .get::<Caller>()
        .and_then(|caller| caller.key)
    else {
        return Ok(());
    };
    rejected_counted(kind, state.limiters.admit_events(key, events))
}

fn rejected_counted<T>(kind: &'static str, result: Result<T, ApiError>) -> Result<T, ApiError> {
    if result.is_err() {
        metrics::counter!("adevents_requests_rejected_total", "kind" => kind).increment(1);
    }
    result
}

/// Counts the rejected request and every event it held (none of them was stored).
fn events_rejected_counted<T>(
    kind: &'static str,
    parts: &Parts,
    bytes: &[u8],
    result: Result<T, ApiError>,
) -> Result<T, ApiError> {
    if result.is_err()
        && let Ok(format) = body_format(&parts.headers)
    {
        let events = scan(bytes, format).items as u64;
        metrics::counter!("adevents_events_rejected_total", "kind" => kind).increment(events);
    }
    rejected_counted(kind, result)
}

fn accepted_answer(kind: &'static str, accepted: usize) -> Json<Accepted> {
    metrics::counter!("adevents_events_accepted_total", "kind" => kind).increment(accepted as u64);
    Json(Accepted { accepted })
}
