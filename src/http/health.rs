//! Liveness and readiness, for process supervisors and load balancers.

use super::{AppState, error::ApiError};
use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

/// 200 while the process runs: a supervisor restarts the process only if this stops answering.
pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// 200 when the store answers and its schema is current; 503 otherwise, so a load balancer
/// sends traffic elsewhere until the store is back (no restart needed: the driver reconnects).
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    state
        .store
        .check_ready()
        .await
        .map_err(ApiError::NotReady)?;
    Ok(Json(json!({"status": "ready"})))
}
