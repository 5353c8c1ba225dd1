//! `GET /openapi.json`: the OpenAPI 3 document of the API (`openapi.json` beside this file),
//! kept in step with API.md; a test checks it names every route the router serves.

use axum::http::header;
use axum::response::IntoResponse;

pub const DOCUMENT: &str = include_str!("openapi.json");

pub async fn get_openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT)
}
