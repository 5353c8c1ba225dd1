//! Liveness and readiness, for process supervisors and load balancers.

use crate::http::AppState;
use crate::http::edge::error::{ApiError, ErrorAnswer};
use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Status {
    /// `ok` (liveness) or `ready` (readiness).
    pub(crate) status: &'static str,
    /// Readiness only: `full` when the server holds as many connections as it may (new
    /// clients are refused with 503 until some close), else `available`. A full server stays
    /// ready: taking every saturated instance out of a load balancer at once helps nobody.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) connections: Option<&'static str>,
}

/// 200 while the process runs: a supervisor restarts the process only if this stops answering.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    summary = "Liveness: 200 while the process runs.",
    responses((status = 200, description = "OK", body = Status))
)]
pub(crate) async fn healthz() -> Json<Status> {
    Json(Status {
        status: "ok",
        connections: None,
    })
}

/// 200 when the store answers and its schema is current; 503 otherwise, so a load balancer
/// sends traffic elsewhere until the store is back (no restart needed: the driver reconnects).
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    summary = "Readiness: the store answers and its schema is current.",
    responses(
        (status = 200, description = "OK", body = Status),
        (status = 503, description = "The store is unavailable; retry after `Retry-After` seconds", body = ErrorAnswer),
    )
)]
pub(crate) async fn readyz(State(state): State<AppState>) -> Result<Json<Status>, ApiError> {
    state.readiness.check().await?;
    Ok(Json(Status {
        status: "ready",
        connections: Some(if state.connections.full() {
            "full"
        } else {
            "available"
        }),
    }))
}
