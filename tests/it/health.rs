//! Liveness, readiness and the error shape, through HTTP on a real socket.

use crate::common::{Backend, TestServer, config, eventually, http, private_keyspace, store_for};
use reqwest::StatusCode;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

async fn healthz_answers_while_the_process_runs(backend: Backend) {
    let server = backend.server().await;

    let response = http()
        .get(server.url("/healthz"))
        .send()
        .await
        .expect("GET /healthz");

    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.expect("JSON body");
    assert_eq!(body["status"], "ok");
}

async fn readyz_is_200_when_the_store_answers_and_the_schema_is_current(backend: Backend) {
    let server = backend.server().await;

    let response = http()
        .get(server.url("/readyz"))
        .send()
        .await
        .expect("GET /readyz");

    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.expect("JSON body");
    assert_eq!(body["status"], "ready");
}

#[tokio::test]
async fn readyz_is_503_with_retry_after_until_migrations_run() {
    let keyspace = private_keyspace("unmigrated");
    let server =
        TestServer::start(Arc::new(store_for(config(keyspace.clone()), false).await)).await;

    let response = http()
        .get(server.url("/readyz"))
        .send()
        .await
        .expect("GET /readyz");

    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    let body: Value = response.json().await.expect("JSON body");
    assert_eq!(body["error"]["code"], "storage_unavailable");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("schema"),
        "{body}"
    );

    // Migrating from elsewhere (`adevents migrate`) makes the same server ready. A probe is
    // polled, and its 2-second read may time out on a node still busy with the new schema.
    store_for(config(keyspace.clone()), true).await;
    let ready = || async {
        let response = http().get(server.url("/readyz")).send().await;
        response.is_ok_and(|response| response.status() == StatusCode::OK)
    };
    assert!(
        eventually(Duration::from_secs(30), ready).await,
        "/readyz answers 200 once the migrations are applied"
    );
}

async fn unknown_paths_answer_404_in_the_error_shape(backend: Backend) {
    let server = backend.server().await;

    let response = http()
        .get(server.url("/no/such/thing"))
        .send()
        .await
        .expect("GET");

    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let body: Value = response.json().await.expect("JSON body");
    assert_eq!(body["error"]["code"], "not_found");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("/no/such/thing")
    );
}

async fn every_answer_carries_a_request_id_and_keeps_the_callers(backend: Backend) {
    let server = backend.server().await;
    let client = http();

    let minted = client
        .get(server.url("/healthz"))
        .send()
        .await
        .expect("GET");
    let kept = client
        .get(server.url("/healthz"))
        .header("x-request-id", "trace-me-42")
        .send()
        .await
        .expect("GET");

    assert!(!minted.headers()["x-request-id"].is_empty());
    assert_eq!(kept.headers()["x-request-id"], "trace-me-42");
}

conformance!(
    healthz_answers_while_the_process_runs,
    readyz_is_200_when_the_store_answers_and_the_schema_is_current,
    unknown_paths_answer_404_in_the_error_shape,
    every_answer_carries_a_request_id_and_keeps_the_callers,
);
