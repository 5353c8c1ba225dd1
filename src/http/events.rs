//! `POST /v1/impressions` and `POST /v1/clicks`: read, validate whole, write, then answer.

use super::AppState;
use super::body::{body_format, read_body, split_items};
use super::client_ip::client_ip;
use super::error::ApiError;
use super::wire::{ClickWire, Context, ImpressionWire, IntoEvent, parse_events};
use axum::Json;
use axum::extract::{Request, State};
use serde_json::{Value, json};

pub async fn post_impressions(
    State(state): State<AppState>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let (events, accepted) = read_events::<ImpressionWire>(&state, request, "impression").await?;
    state.ingestor.impressions(events).await?;
    Ok(accepted_answer("impression", accepted))
}

pub async fn post_clicks(
    State(state): State<AppState>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let (events, accepted) = read_events::<ClickWire>(&state, request, "click").await?;
    state.ingestor.clicks(events).await?;
    Ok(accepted_answer("click", accepted))
}

/// The request's events (repeats of one id folded) and how many it held.
async fn read_events<W: IntoEvent>(
    state: &AppState,
    request: Request,
    kind: &'static str,
) -> Result<(Vec<W::Event>, usize), ApiError> {
    let (parts, body) = request.into_parts();
    let result = async {
        let format = body_format(&parts.headers)?;
        let bytes = read_body(&parts.headers, body, state.options.body_limits).await?;
        let items = split_items(&bytes, format, state.options.body_limits.max_events)?;
        let context = Context {
            now: chrono::Utc::now(),
            client_ip: client_ip(&parts, &state.options.trusted_proxies),
        };
        let events = parse_events::<W>(&items, &context)?;
        Ok((events, items.len()))
    }
    .await;
    if result.is_err() {
        metrics::counter!("adevents_requests_rejected_total", "kind" => kind).increment(1);
    }
    result
}

fn accepted_answer(kind: &'static str, accepted: usize) -> Json<Value> {
    metrics::counter!("adevents_events_accepted_total", "kind" => kind).increment(accepted as u64);
    Json(json!({ "accepted": accepted }))
}
