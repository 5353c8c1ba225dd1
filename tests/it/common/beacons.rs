//! Sending beacons the way script tags send them, asking for unique visitors the way a
//! dashboard asks, and the accuracy rule of docs/API.md.

use adevents::simulate::traffic::{SimulatedVisit, TrafficSpec, generate};
use futures::{StreamExt, stream};
use reqwest::StatusCode;
use serde_json::Value;
use uuid::Uuid;

/// A fresh site per test: the isolation of a shared keyspace or data folder. Not registered:
/// a server with keys on refuses its beacons until [`register_site`].
pub fn fresh_site() -> String {
    format!("site-{}.test", Uuid::new_v4().simple())
}

/// Registers `site` for beacons (`PUT /v1/sites/{site}` with the admin key).
pub async fn register_site(base_url: &str, site: &str) {
    let response = super::http()
        .put(format!("{base_url}/v1/sites/{site}"))
        .json(&serde_json::json!({}))
        .send()
        .await
        .expect("registration answered");
    assert_eq!(response.status(), StatusCode::OK, "registering {site}");
}

/// A fresh site, registered on the server at `base_url`.
pub async fn registered_site(base_url: &str) -> String {
    let site = fresh_site();
    register_site(base_url, &site).await;
    site
}

/// A month of realistic traffic (October 2018) for two features.
pub fn october(guids: usize, visits: usize, seed: u64) -> Vec<SimulatedVisit> {
    generate(&TrafficSpec {
        guids,
        visits,
        referers: vec!["facebook.com".into(), "google.com".into()],
        pages: vec![
            "/index.html".into(),
            "/index2.html".into(),
            "/index3.html".into(),
        ],
        from: "2018-10-01".parse().expect("date"),
        to: "2018-11-01".parse().expect("date"),
        seed,
    })
    .expect("valid spec")
}

/// Registers `site` and form-posts every visit to `base_url`'s `/track`, 32 at a time,
/// asserting each is a 204.
pub async fn send_visits(base_url: &str, site: &str, visits: &[SimulatedVisit]) {
    register_site(base_url, site).await;
    let client = super::http();
    let url = format!("{base_url}/track");
    let mut sends = stream::iter(visits)
        .map(|visit| {
            let request = client
                .post(&url)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(visit.form_body(site));
            async move { request.send().await }
        })
        .buffer_unordered(32);
    while let Some(response) = sends.next().await {
        let response = response.expect("beacon answered");
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
    }
}

/// `GET /v1/sites/{site}/uniques?{query}`, which must be a 200.
pub async fn uniques(base_url: &str, site: &str, query: &[(String, String)]) -> Value {
    let query = serde_urlencoded::to_string(query).expect("encodable");
    let response = super::http()
        .get(format!("{base_url}/v1/sites/{site}/uniques?{query}"))
        .send()
        .await
        .expect("uniques answered");
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.expect("JSON answer")
}

/// docs/API.md: exact or within ±1 below 1,000, within 2 % above.
pub fn within_accuracy(served: u64, exact: u64) -> bool {
    if exact < 1000 {
        served.abs_diff(exact) <= 1
    } else {
        served.abs_diff(exact) as f64 <= exact as f64 * 0.02
    }
}
