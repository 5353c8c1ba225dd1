//! `GET /openapi.json`: the OpenAPI 3 document of the API, generated from the handlers'
//! annotations and the answer types themselves (utoipa), so it cannot drift from the code.
//! docs/API.md says the same in prose; a test checks the document names every route served.

use super::error::{ErrorAnswer, ErrorDetail, FieldError};
use axum::http::header;
use axum::response::IntoResponse;
use std::sync::OnceLock;
use utoipa::OpenApi;

/// What the document says besides its paths.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "adevents",
        version = "1",
        description = "Ad-event ingestion, beacons and campaign summaries. Every error is \
            `{\"error\": {\"code\", \"message\", \"errors\"?}}`; a 503 carries `Retry-After`. \
            The contract in prose: docs/API.md."
    ),
    components(schemas(ErrorAnswer, ErrorDetail, FieldError)),
    tags(
        (name = "ingestion", description = "Ad servers post impressions and clicks."),
        (name = "beacons", description = "Script tags on customers' pages send page views."),
        (name = "queries", description = "Dashboards read summaries, reports, exports and uniques."),
        (name = "settings", description = "Campaign and site configuration."),
        (name = "operations", description = "Health, readiness, metrics and this document."),
    )
)]
pub struct ApiDoc;

/// The document as served, rendered once from what the router collected.
static DOCUMENT: OnceLock<String> = OnceLock::new();

/// Keeps the document the router built (every router of a process builds the same one).
pub fn publish(document: &utoipa::openapi::OpenApi) {
    DOCUMENT.get_or_init(|| document.to_pretty_json().unwrap_or_default());
}

#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    summary = "This document.",
    responses((status = 200, description = "OpenAPI 3", content_type = "application/json"))
)]
pub async fn get_openapi() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.get().cloned().unwrap_or_default(),
    )
}
