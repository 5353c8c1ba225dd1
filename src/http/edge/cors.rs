//! Lets the dashboard page that sent a refused query read why: the operator's origins
//! (`--cors-origins`) get their CORS header on a 401, 403, 429 or 503 as on a 200. The
//! query routes' own CORS layer sits inside the key check and the caps, so it never sees
//! what those refuse; without this, a browser shows a CORS failure instead of the error.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;

/// Adds `Access-Control-Allow-Origin` to an error answer that has none, for a listed origin.
pub(crate) async fn refusals_readable(
    State(origins): State<Arc<[HeaderValue]>>,
    request: Request,
    next: Next,
) -> Response {
    let origin = request
        .headers()
        .get(header::ORIGIN)
        .filter(|origin| origins.contains(origin))
        .cloned();
    let mut response = next.run(request).await;
    let status = response.status();
    if let Some(origin) = origin
        && (status.is_client_error() || status.is_server_error())
        && !response
            .headers()
            .contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN)
    {
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.append(header::VARY, HeaderValue::from_static("origin"));
    }
    response
}
