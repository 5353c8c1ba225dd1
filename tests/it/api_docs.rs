//! The self-description of the service: its OpenAPI document and its metrics.

use crate::common::events::{Campaign, at, post_all};
use crate::common::{Backend, http};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use uuid::Uuid;

async fn the_openapi_document_describes_every_route_and_every_route_exists(backend: Backend) {
    let server = backend.server().await;
    let client = http();

    let doc: Value = client
        .get(server.url("/openapi.json"))
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON");

    assert!(
        doc["openapi"].as_str().unwrap_or("").starts_with("3."),
        "{doc}"
    );
    // The bounds the server enforces are stated, as for impressions.
    let conversion = &doc["components"]["schemas"]["Conversion"]["properties"];
    for field in ["conversion_id", "action", "value", "currency"] {
        assert!(
            conversion[field]["pattern"].is_string(),
            "{field}: {conversion}"
        );
    }
    assert_eq!(conversion["conversion_id"]["maxLength"], 64, "{conversion}");
    let group_by = doc["paths"]["/v1/advertisers/{advertiser_id}/conversions"]["get"]["parameters"]
        .as_array()
        .and_then(|parameters| parameters.iter().find(|p| p["name"] == "group_by"))
        .map(|parameter| parameter["schema"]["enum"].clone());
    assert_eq!(
        group_by,
        Some(serde_json::json!(["day", "action", "campaign", "none"]))
    );
    // Each body form the server reads: one event, an array of them, or NDJSON.
    for path in ["/v1/impressions", "/v1/clicks", "/v1/conversions"] {
        let content = &doc["paths"][path]["post"]["requestBody"]["content"];
        let forms = content["application/json"]["schema"]["oneOf"].as_array();
        assert_eq!(forms.map(Vec::len), Some(2), "{path}: {content}");
        assert!(
            content["application/x-ndjson"]["schema"]["$ref"].is_string(),
            "{path}: {content}"
        );
    }
    // Every schema can be met: no `allOf` asks a timestamp to be an object too, or a row that
    // flattens optional measures to be null.
    let mut unmeetable = Vec::new();
    unmeetable_all_of(&doc, "#", &mut unmeetable);
    assert!(unmeetable.is_empty(), "{unmeetable:#?}");
    let paths = doc["paths"].as_object().expect("paths");
    let mut documented: Vec<&str> = paths.keys().map(String::as_str).collect();
    documented.sort_unstable();
    assert_eq!(
        documented,
        [
            "/c",
            "/dashboard",
            "/healthz",
            "/i",
            "/metrics",
            "/openapi.json",
            "/readyz",
            "/t.js",
            "/track",
            "/v",
            "/v.js",
            "/v1/advertisers/{advertiser_id}/campaigns",
            "/v1/advertisers/{advertiser_id}/campaigns/{campaign_id}",
            "/v1/advertisers/{advertiser_id}/campaigns/{campaign_id}/delivery",
            "/v1/advertisers/{advertiser_id}/campaigns/{campaign_id}/impressions",
            "/v1/advertisers/{advertiser_id}/campaigns/{campaign_id}/impressions/recent",
            "/v1/advertisers/{advertiser_id}/campaigns/{campaign_id}/report",
            "/v1/advertisers/{advertiser_id}/campaigns/{campaign_id}/summary",
            "/v1/advertisers/{advertiser_id}/conversions",
            "/v1/advertisers/{advertiser_id}/tag-secrets",
            "/v1/advertisers/{advertiser_id}/tag-secrets/{id}",
            "/v1/clicks",
            "/v1/conversions",
            "/v1/freshness",
            "/v1/impressions",
            "/v1/keys",
            "/v1/keys/self",
            "/v1/keys/{id}",
            "/v1/privacy/erasures",
            "/v1/privacy/erasures/{id}",
            "/v1/privacy/subjects",
            "/v1/sites",
            "/v1/sites/{site}",
            "/v1/sites/{site}/features",
            "/v1/sites/{site}/uniques",
        ]
    );
    let campaign = Campaign::fresh();
    for (path, operations) in paths {
        let concrete = path
            .replace("{advertiser_id}", &campaign.advertiser_id.to_string())
            .replace("{campaign_id}", &campaign.campaign_id.to_string())
            .replace("{site}", "example.com")
            .replace("{id}", &uuid::Uuid::new_v4().to_string());
        for (name, operation) in operations.as_object().expect("operations") {
            let method = match name.as_str() {
                "get" => Method::GET,
                "put" => Method::PUT,
                "post" => Method::POST,
                _ => continue, // "parameters"
            };
            let response = client
                .request(method.clone(), server.url(&concrete))
                .send()
                .await
                .expect("answered");
            // A route that documents a 404 (no such erasure) may answer one for a random id.
            if operation["responses"].get("404").is_none() {
                assert_ne!(response.status(), StatusCode::NOT_FOUND, "{method} {path}");
            }
            assert_ne!(
                response.status(),
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}"
            );
        }
    }
}

/// The paths of `allOf` items no value meets beside the others: an object that only carries a
/// description, or a choice that includes null.
fn unmeetable_all_of(value: &Value, path: &str, found: &mut Vec<String>) {
    match value {
        Value::Object(object) => {
            for (index, item) in object
                .get("allOf")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let only_describes = item.as_object().is_some_and(|item| {
                    item.len() == 2
                        && item.get("type").is_some_and(|kind| kind == "object")
                        && item.contains_key("description")
                });
                let may_be_null = item["oneOf"]
                    .as_array()
                    .is_some_and(|choices| choices.iter().any(|choice| choice["type"] == "null"));
                if only_describes || may_be_null {
                    found.push(format!("{path}/allOf/{index}"));
                }
            }
            for (key, child) in object {
                unmeetable_all_of(child, &format!("{path}/{key}"), found);
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                unmeetable_all_of(child, &format!("{path}/{index}"), found);
            }
        }
        _ => {}
    }
}

async fn framework_rejections_use_the_error_shape(backend: Backend) {
    let server = backend.server().await;

    let response = http()
        .delete(server.url("/v1/impressions"))
        .send()
        .await
        .expect("answered");

    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(body["error"]["code"], "method_not_allowed");
}

async fn metrics_count_requests_by_route_and_events_accepted(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let events = [campaign.impression(Uuid::new_v4(), Uuid::new_v4(), at("2026-10-25T10:00:00Z"))];
    post_all(&server, "/v1/impressions", &events, 1).await;

    let text = crate::common::metrics_text(&server).await;

    assert!(
        text.lines()
            .any(|line| line.starts_with("adevents_http_requests_total")
                && line.contains("route=\"/v1/impressions\"")
                && line.contains("status=\"2xx\"")),
        "{text}"
    );
    assert!(
        text.contains("adevents_events_accepted_total{kind=\"impression\"}"),
        "{text}"
    );
    assert!(
        text.contains("adevents_store_call_duration_seconds_bucket{operation=\"write_impressions\",outcome=\"ok\""),
        "{text}"
    );
}

conformance!(
    the_openapi_document_describes_every_route_and_every_route_exists,
    framework_rejections_use_the_error_shape,
    metrics_count_requests_by_route_and_events_accepted,
);
