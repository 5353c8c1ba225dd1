//! `/track`: every form a script tag sends a beacon in is stored and counted, CORS lets any
//! page send one, and a bad beacon is a 400 naming the field that stores nothing.

use crate::common::beacons::{fresh_site, registered_site, uniques};
use crate::common::{Backend, eventually, http};
use futures::{StreamExt, stream};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

conformance!(
    every_beacon_form_is_counted,
    the_preflight_and_every_answer_carry_cors_headers,
    invalid_beacons_name_the_field_and_store_nothing,
    site_settings_are_scheduled_like_campaign_settings,
    beacons_sent_at_once_are_each_stored_once,
);

/// 2026-11-01T10:00:00Z, in epoch seconds.
const TEN_AM: i64 = 1_793_527_200;

fn day_query(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut query = vec![
        ("from".to_owned(), "2026-11-01".to_owned()),
        ("to".to_owned(), "2026-11-01".to_owned()),
    ];
    query.extend(
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    query
}

/// Waits (up to the sketch flush and a margin) until the site's 2026-11-01 total is `expected`.
async fn day_total_becomes(base: &str, site: &str, expected: Value) {
    let counted = eventually(Duration::from_secs(10), || async {
        uniques(base, site, &day_query(&[])).await["total"] == expected
    })
    .await;
    let all = uniques(base, site, &day_query(&[])).await;
    assert!(counted, "{all}");
}

async fn every_beacon_form_is_counted(backend: Backend) {
    let server = backend.server().await;
    let site = registered_site(&server.url("")).await;
    let client = http();
    let track = server.url("/track");
    let at = |minute: i64| (TEN_AM + minute * 60).to_string();

    let form = client
        .post(&track)
        .form(&[
            ("site", site.as_str()),
            ("guid", "a"),
            ("timestamp", &at(1)),
            ("ref", "x"),
        ])
        .send()
        .await
        .expect("answered");
    let beacon_text = client
        .post(&track)
        .header("content-type", "text/plain;charset=UTF-8")
        .body(format!(
            "site={site}&guid=b&timestamp={}&ref=x&cb=17",
            at(2)
        ))
        .send()
        .await
        .expect("answered");
    let beacon_json = client
        .post(&track)
        .header("content-type", "text/plain;charset=UTF-8")
        .body(json!({"site": site, "guid": "c", "timestamp": TEN_AM + 180, "ref": "y"}).to_string())
        .send()
        .await
        .expect("answered");
    let plain_json = client
        .post(&track)
        .json(&json!({"site": site, "guid": "d", "timestamp": at(4), "ref": "y"}))
        .send()
        .await
        .expect("answered");
    let pixel = client
        .get(&track)
        .query(&[
            ("site", site.as_str()),
            ("guid", "e"),
            ("timestamp", &at(5)),
            ("_", "1"),
        ])
        .send()
        .await
        .expect("answered");
    let from_origin = client
        .post(&track)
        .header("origin", format!("https://{site}"))
        .form(&[("guid", "f"), ("timestamp", &at(6))])
        .send()
        .await
        .expect("answered");
    let from_referer = client
        .post(&track)
        .header("referer", format!("https://{site}/pricing?plan=pro"))
        .form(&[("guid", "g"), ("timestamp", &at(7))])
        .send()
        .await
        .expect("answered");

    for response in [
        form,
        beacon_text,
        beacon_json,
        plain_json,
        from_origin,
        from_referer,
    ] {
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
    }
    assert_eq!(pixel.status(), StatusCode::OK);
    assert_eq!(pixel.headers()["content-type"], "image/gif");
    assert_eq!(pixel.headers()["cache-control"], "no-store");
    let gif = pixel.bytes().await.expect("body");
    assert!(gif.starts_with(b"GIF89a"), "{gif:?}");

    let base = server.url("");
    day_total_becomes(
        &base,
        &site,
        json!({"visits": 7, "unique_visitors": 7, "invalid_visits": 0}),
    )
    .await;
    let x = uniques(&base, &site, &day_query(&[("feature.ref", "x")])).await;
    assert_eq!(
        x["total"],
        json!({"visits": 2, "unique_visitors": 2, "invalid_visits": 0}),
        "{x}"
    );
    assert_eq!(x["filter"], json!({"ref": "x"}));
    let y = uniques(&base, &site, &day_query(&[("feature.ref", "y")])).await;
    assert_eq!(
        y["total"],
        json!({"visits": 2, "unique_visitors": 2, "invalid_visits": 0}),
        "{y}"
    );
}

async fn the_preflight_and_every_answer_carry_cors_headers(backend: Backend) {
    let server = backend.server().await;
    let client = http();
    let origin = "https://shop.example.com";
    let site = registered_site(&server.url("")).await;

    let preflight = client
        .request(reqwest::Method::OPTIONS, server.url("/track"))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .send()
        .await
        .expect("answered");
    let accepted = client
        .post(server.url("/track"))
        .header("origin", origin)
        .form(&[("site", site.as_str()), ("guid", "a")])
        .send()
        .await
        .expect("answered");
    let refused = client
        .post(server.url("/track"))
        .header("origin", origin)
        .form(&[("site", site.as_str())])
        .send()
        .await
        .expect("answered");

    assert!(preflight.status().is_success(), "{}", preflight.status());
    assert_eq!(preflight.headers()["access-control-allow-origin"], "*");
    let methods = preflight.headers()["access-control-allow-methods"]
        .to_str()
        .expect("text");
    assert!(
        methods.contains("POST") && methods.contains("GET"),
        "{methods}"
    );
    assert!(
        preflight.headers()["access-control-allow-headers"]
            .to_str()
            .expect("text")
            .contains("content-type")
    );
    assert_eq!(accepted.status(), StatusCode::NO_CONTENT);
    assert_eq!(accepted.headers()["access-control-allow-origin"], "*");
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert_eq!(refused.headers()["access-control-allow-origin"], "*");
}

/// Includes a `HEAD` (a prefetch, not a page view), which answers but is not a visit.
async fn invalid_beacons_name_the_field_and_store_nothing(backend: Backend) {
    let server = backend.server().await;
    let site = fresh_site();
    let client = http();
    let at = TEN_AM.to_string();
    let long_value = "v".repeat(513);
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (vec![("site", &site), ("timestamp", &at)], "guid"),
        (vec![("guid", "a"), ("timestamp", &at)], "site"),
        (vec![("site", "not a site!"), ("guid", "a")], "site"),
        (
            vec![
                ("site", &site),
                ("guid", "a"),
                ("timestamp", "last tuesday"),
            ],
            "timestamp",
        ),
        (
            vec![("site", &site), ("guid", "a"), ("timestamp", "946684799")],
            "timestamp",
        ),
        (
            vec![
                ("site", &site),
                ("guid", "a"),
                ("timestamp", &at),
                ("a", "1"),
                ("b", "2"),
                ("c", "3"),
                ("d", "4"),
                ("e", "5"),
            ],
            "features",
        ),
        (
            vec![
                ("site", &site),
                ("guid", "a"),
                ("timestamp", &at),
                ("page", &long_value),
            ],
            "page",
        ),
        (
            vec![
                ("site", &site),
                ("guid", "a"),
                ("timestamp", &at),
                ("bad name", "x"),
            ],
            "bad name",
        ),
        (
            vec![
                ("site", &site),
                ("guid", "a"),
                ("guid", "b"),
                ("timestamp", &at),
            ],
            "guid",
        ),
    ];

    for (params, field) in &cases {
        let response = client
            .post(server.url("/track"))
            .form(params)
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{params:?}");
        let body: Value = response.json().await.expect("JSON error");
        assert_eq!(body["error"]["code"], "invalid_request", "{body}");
        let fields: Vec<&str> = body["error"]["errors"]
            .as_array()
            .expect("errors listed")
            .iter()
            .filter_map(|error| error["field"].as_str())
            .collect();
        assert!(fields.contains(field), "{field} not named in {body}");
    }
    let unsupported = client
        .post(server.url("/track"))
        .header("content-type", "application/xml")
        .body("<beacon/>")
        .send()
        .await
        .expect("answered");
    assert_eq!(unsupported.status(), StatusCode::BAD_REQUEST);
    let body: Value = unsupported.json().await.expect("JSON error");
    assert_eq!(
        body["error"]["errors"][0]["field"], "Content-Type",
        "{body}"
    );
    let head = client
        .head(server.url("/track"))
        .query(&[
            ("site", site.as_str()),
            ("guid", "prefetch"),
            ("timestamp", &at),
        ])
        .send()
        .await
        .expect("answered");
    assert_eq!(head.status(), StatusCode::OK);

    tokio::time::sleep(Duration::from_millis(1500)).await;
    let counted = uniques(&server.url(""), &site, &day_query(&[])).await;
    assert_eq!(
        counted["total"],
        json!({"visits": 0, "unique_visitors": 0, "invalid_visits": 0}),
        "{counted}"
    );
}

async fn site_settings_are_scheduled_like_campaign_settings(backend: Backend) {
    let server = backend.server().await;
    let site = fresh_site();
    let client = http();
    let path = server.url(&format!("/v1/sites/{site}"));

    let unconfigured: Value = client
        .get(&path)
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON");
    let scheduled = client
        .put(&path)
        .json(&json!({"buckets": 8}))
        .send()
        .await
        .expect("answered");
    let past = client
        .put(&path)
        .json(&json!({"buckets": 8, "effective_from": "2020-01-01T00:00:00Z"}))
        .send()
        .await
        .expect("answered");
    let too_many = client
        .put(&path)
        .json(&json!({"buckets": 257}))
        .send()
        .await
        .expect("answered");
    let after: Value = client
        .get(&path)
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON");

    assert_eq!(unconfigured["buckets"], 1, "{unconfigured}");
    assert_eq!(scheduled.status(), StatusCode::OK);
    assert_eq!(past.status(), StatusCode::BAD_REQUEST);
    assert_eq!(too_many.status(), StatusCode::BAD_REQUEST);
    assert_eq!(after["buckets"], 8, "{after}");
    assert_eq!(
        after["in_force"], 1,
        "a change applies only from its effective_from: {after}"
    );
}

/// Many beacons of one partition in flight at once (the store may write them together): each
/// is stored once, a bot's beacon stays invalid beside valid ones, and every one is answered
/// only once stored.
async fn beacons_sent_at_once_are_each_stored_once(backend: Backend) {
    const BEACONS: i64 = 600;
    const CRAWLER: &str =
        "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";
    let server = backend.server().await;
    let site = registered_site(&server.url("")).await;
    let client = http();
    let track = server.url("/track");
    let mut sends = stream::iter(0..BEACONS)
        .map(|index| {
            let mut request = client.post(&track).form(&[
                ("site", site.clone()),
                ("guid", format!("visitor-{index}")),
                ("timestamp", (TEN_AM + index).to_string()),
                ("ref", if index % 2 == 0 { "x" } else { "y" }.to_owned()),
            ]);
            if index % 10 == 0 {
                request = request.header("user-agent", CRAWLER);
            }
            async move { request.send().await }
        })
        .buffer_unordered(64);
    while let Some(response) = sends.next().await {
        assert_eq!(response.expect("answered").status(), StatusCode::NO_CONTENT);
    }

    let base = server.url("");
    day_total_becomes(
        &base,
        &site,
        json!({"visits": 540, "unique_visitors": 540, "invalid_visits": 60}),
    )
    .await;
    // Every bot's index is a multiple of ten, so even: all sixty sent `ref=x`. Polled too: a
    // flush stores the site-wide sketch and the `ref=x` one in separate writes, so the total
    // can be current a moment before the filtered count is.
    let expected = json!({"visits": 240, "unique_visitors": 240, "invalid_visits": 60});
    let filter = day_query(&[("feature.ref", "x")]);
    let counted = eventually(Duration::from_secs(10), || async {
        uniques(&base, &site, &filter).await["total"] == expected
    })
    .await;
    let x = uniques(&base, &site, &filter).await;
    assert!(counted, "{x}");
}
