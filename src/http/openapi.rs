//! `GET /openapi.json`: the OpenAPI 3 document of the API, generated from the handlers'
//! annotations and the answer types themselves (utoipa), so it cannot drift from the code.
//! docs/API.md says the same in prose; a test checks the document names every route served.

use super::error::{ErrorAnswer, ErrorDetail, FieldError};
use axum::http::header;
use axum::response::IntoResponse;
use std::sync::OnceLock;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

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
        (name = "keys", description = "API keys: scopes admin, ingest, read and metrics."),
        (name = "ingestion", description = "Ad servers post impressions and clicks."),
        (name = "beacons", description = "Script tags on customers' pages send page views."),
        (name = "queries", description = "Dashboards read summaries, reports, exports and uniques."),
        (name = "delivery", description = "Ad servers poll delivery against caps; dashboards ask whether numbers are final."),
        (name = "settings", description = "Campaign and site configuration."),
        (name = "operations", description = "Health, readiness, metrics and this document."),
    )
)]
pub struct ApiDoc;

/// Declares the bearer scheme, and gives every operation that needs a key its 401 and 403
/// answers (each operation's `security` names the scopes that may call it).
struct KeysEverywhere;

impl Modify for KeysEverywhere {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "A key made by POST /v1/keys (or the operator's ADEVENTS_ADMIN_KEY), \
                         sent as `Authorization: Bearer <key>`.",
                    ))
                    .build(),
            ),
        );
        let error = |description: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        utoipa::openapi::ContentBuilder::new()
                            .schema(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                                "ErrorAnswer",
                            ))))
                            .build(),
                    )
                    .build(),
            )
        };
        for item in openapi.paths.paths.values_mut() {
            for operation in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                if operation.security.as_ref().is_none_or(Vec::is_empty) {
                    continue;
                }
                let responses = &mut operation.responses.responses;
                responses.entry("401".into()).or_insert_with(|| {
                    error("No key, an unknown or revoked key, or not the Bearer scheme")
                });
                responses.entry("403".into()).or_insert_with(|| {
                    error("A valid key without the scope or the owner this needs")
                });
            }
        }
    }
}

/// The document as served, rendered once from what the router collected.
static DOCUMENT: OnceLock<String> = OnceLock::new();

/// Completes the document the router built from its handlers and keeps it (every router of a
/// process builds the same one).
pub fn publish(mut document: utoipa::openapi::OpenApi) {
    KeysEverywhere.modify(&mut document);
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
