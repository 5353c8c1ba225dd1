//! Campaign settings through HTTP: defaults, scheduling, and refusals.

use crate::common::events::{Campaign, get};
use crate::common::{Backend, TestServer, http};
use chrono::{DateTime, Duration, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn put(server: &TestServer, campaign: &Campaign, body: Value) -> (StatusCode, Value) {
    let response = http()
        .put(server.url(&campaign.path()))
        .json(&body)
        .send()
        .await
        .expect("answered");
    let status = response.status();
    (status, response.json().await.expect("JSON"))
}

async fn a_never_configured_campaign_has_one_bucket(backend: Backend) {
    let server = backend.server().await;

    let (status, body) = get(&server, &Campaign::fresh().path(), "").await;

    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["buckets"], 1);
    assert_eq!(body["daily_cap"], Value::Null);
}

async fn a_change_without_effective_from_waits_for_every_cache_to_expire(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let before = Utc::now();

    let (status, body) = put(
        &server,
        &campaign,
        json!({"buckets": 16, "daily_cap": 5000}),
    )
    .await;
    let (_, read_back) = get(&server, &campaign.path(), "").await;

    assert_eq!(status, StatusCode::OK, "{body}");
    let effective: DateTime<Utc> = body["effective_from"]
        .as_str()
        .expect("instant")
        .parse()
        .expect("RFC 3339");
    assert!(
        effective >= before + Duration::seconds(10),
        "{effective} vs {before}"
    );
    assert_eq!(read_back["buckets"], 16);
    assert_eq!(read_back["daily_cap"], 5000);
    assert_eq!(read_back["effective_from"], body["effective_from"]);
    assert_eq!(read_back["in_force"], 1, "not in force yet");
}

async fn a_change_scheduled_far_enough_ahead_is_stored_as_given(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    // Within the 366 days a change may be scheduled ahead.
    let later = (Utc::now() + Duration::days(300))
        .format("%Y-%m-%dT00:00:00.000Z")
        .to_string();

    let (status, body) = put(
        &server,
        &campaign,
        json!({"buckets": 4, "effective_from": later}),
    )
    .await;
    let (_, read_back) = get(&server, &campaign.path(), "").await;

    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(read_back["effective_from"], later);
    assert_eq!(read_back["buckets"], 4);
}

async fn invalid_settings_are_refused_naming_the_field(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let past = (Utc::now() - Duration::minutes(1)).to_rfc3339();
    // Events up to 10 minutes ahead may already be stored under the current bucket count.
    let soon = (Utc::now() + Duration::minutes(5)).to_rfc3339();
    let cases = [
        (json!({"buckets": 0}), "buckets"),
        (json!({"buckets": 257}), "buckets"),
        (json!({"buckets": "eight"}), "buckets"),
        (json!({"bucket": 8}), "body"),
        (
            json!({"buckets": 8, "effective_from": past}),
            "effective_from",
        ),
        (
            json!({"buckets": 8, "effective_from": "tomorrow"}),
            "effective_from",
        ),
        (
            json!({"buckets": 8, "effective_from": soon}),
            "effective_from",
        ),
        (json!({"buckets": 8, "daily_cap": -3}), "daily_cap"),
        (json!({"buckets": 8, "daily_cap": u64::MAX}), "daily_cap"),
    ];
    for (body, field) in cases {
        let (status, answer) = put(&server, &campaign, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(
            answer["error"]["errors"][0]["field"], field,
            "{body}: {answer}"
        );
    }
    let (_, read_back) = get(&server, &campaign.path(), "").await;
    assert_eq!(read_back["buckets"], 1, "nothing stored");
}

/// A `PUT` merges: absent fields keep their value, the same bucket count schedules nothing,
/// and a cap alone takes effect at once.
async fn a_settings_change_merges_into_what_is_there(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    // Within the 366 days a change may be scheduled ahead.
    let later = (Utc::now() + Duration::days(300))
        .format("%Y-%m-%dT00:00:00.000Z")
        .to_string();
    let (status, _) = put(
        &server,
        &campaign,
        json!({"buckets": 4, "effective_from": later, "daily_cap": 100}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    let (status, nothing) = put(&server, &campaign, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{nothing}");
    let (_, same_buckets) = put(&server, &campaign, json!({"buckets": 4})).await;
    let (_, cap_only) = put(&server, &campaign, json!({"daily_cap": 250})).await;
    let (_, read_back) = get(&server, &campaign.path(), "").await;

    for answer in [&nothing, &same_buckets] {
        assert_eq!(answer["buckets"], 4, "{answer}");
        assert_eq!(
            answer["effective_from"], later,
            "nothing rescheduled: {answer}"
        );
        assert_eq!(answer["daily_cap"], 100, "{answer}");
    }
    assert_eq!(cap_only["daily_cap"], 250, "{cap_only}");
    assert_eq!(cap_only["effective_from"], later, "{cap_only}");
    assert_eq!(read_back["daily_cap"], 250);
    let (_, cleared) = put(&server, &campaign, json!({"daily_cap": null})).await;
    assert_eq!(cleared["daily_cap"], Value::Null, "{cleared}");
    assert_eq!(cleared["buckets"], 4, "{cleared}");
}

async fn a_settings_put_without_a_json_object_body_is_refused_naming_the_body(backend: Backend) {
    let server = backend.server().await;
    let paths = [
        Campaign::fresh().path(),
        format!("/v1/sites/{}", crate::common::beacons::fresh_site()),
    ];
    for path in &paths {
        for body in ["", "  \n", "null", "[]", "[1]", "\"x\"", "5"] {
            let response = http()
                .put(server.url(path))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .expect("answered");
            let status = response.status();
            let answer: Value = response.json().await.expect("JSON");
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {body:?}: {answer}");
            assert_eq!(
                answer["error"]["errors"][0]["field"], "body",
                "{path} {body:?}: {answer}"
            );
        }
        let (status, answer) = get(&server, path, "").await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(answer["buckets"], 1, "nothing was scheduled: {answer}");
        if path.starts_with("/v1/sites/") {
            assert_eq!(answer["registered"], false, "{answer}");
        }
    }
}

conformance!(
    a_settings_change_merges_into_what_is_there,
    a_never_configured_campaign_has_one_bucket,
    a_change_scheduled_far_enough_ahead_is_stored_as_given,
    a_change_without_effective_from_waits_for_every_cache_to_expire,
    invalid_settings_are_refused_naming_the_field,
    a_settings_put_without_a_json_object_body_is_refused_naming_the_body,
);
