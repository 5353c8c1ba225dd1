//! The HTTP layer: routing, extraction and error mapping. It speaks to the store only through
//! the [`Store`] trait, never in CQL.

mod error;
mod health;

pub use error::ApiError;

use crate::store::Store;
use axum::Router;
use axum::http::{HeaderName, Request};
use axum::routing::get;
use std::sync::Arc;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

/// What every handler may use.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
}

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The whole API as one router, ready for `axum::serve` or for tests.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .fallback(error::not_found)
        .with_state(state)
        .layer(axum::middleware::from_fn(error::log_server_errors))
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &Request<_>| {
                let request_id = request
                    .headers()
                    .get(&REQUEST_ID)
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or_default();
                tracing::info_span!(
                    "request",
                    method = %request.method(),
                    path = %request.uri().path(),
                    request_id,
                )
            }),
        )
        // Outermost: a caller's X-Request-Id is kept, otherwise one is made, and it is echoed
        // back so a client can quote it when reporting a problem.
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
}
