//! What the browser side needs of the API: the tracker script and the dashboard's assets with
//! their headers, beacons posted as `multipart/form-data` (what `sendBeacon(url, formData)`
//! sends), the campaign and site listings, and a site's most visited feature values, raw and
//! sealed alike.

use crate::common::beacons::{registered_site, uniques};
use crate::common::events::{Campaign, get, post_all};
use crate::common::{Backend, TestServer, anonymous_http};
use adevents::domain::beacon::SiteId;
use adevents::domain::time::Day;
use adevents::sealer::{Sealer, SealerOptions};
use adevents::settings::SettingsCache;
use chrono::{Duration, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

/// A beacon as `sendBeacon(url, formData)` posts it.
async fn send_form_beacon(server: &TestServer, fields: &[(&str, &str)]) -> StatusCode {
    let boundary = "----adevents-test-boundary";
    let mut body = String::new();
    for (name, value) in fields {
        body.push_str(&format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
        ));
    }
    body.push_str(&format!("--{boundary}--\r\n"));
    anonymous_http()
        .post(server.url("/track"))
        .header(
            "Content-Type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await
        .expect("answered")
        .status()
}

async fn the_tracker_and_the_dashboard_are_served_with_their_headers(backend: Backend) {
    let server = backend.server().await;
    let browser = anonymous_http();

    let script = browser
        .get(server.url("/t.js"))
        .send()
        .await
        .expect("answered");
    assert_eq!(script.status(), StatusCode::OK);
    assert_eq!(
        script.headers()["content-type"],
        "text/javascript; charset=utf-8"
    );
    assert_eq!(script.headers()["x-content-type-options"], "nosniff");
    let text = script.text().await.expect("text");
    assert!(text.len() <= 2048 && text.contains("sendBeacon"), "{text}");

    for (path, kind) in [
        ("/dashboard", "text/html"),
        ("/dashboard/app.js", "text/javascript"),
        ("/dashboard/app.css", "text/css"),
    ] {
        let answer = browser
            .get(server.url(path))
            .send()
            .await
            .expect("answered");
        assert_eq!(answer.status(), StatusCode::OK, "{path}");
        let headers = answer.headers();
        assert!(
            headers["content-type"]
                .to_str()
                .is_ok_and(|value| value.starts_with(kind)),
            "{path}: {headers:?}"
        );
        assert!(
            headers["content-security-policy"]
                .to_str()
                .is_ok_and(|policy| policy.starts_with("default-src 'self'")),
            "{path}: {headers:?}"
        );
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
    }
}

async fn a_multipart_beacon_counts_like_any_other_and_a_file_is_refused(backend: Backend) {
    let server = backend.server().await;
    let site = registered_site(&server.url("")).await;
    let guid = Uuid::new_v4().to_string();

    let status = send_form_beacon(
        &server,
        &[
            ("site", &site),
            ("guid", &guid),
            ("referrer", "news.example"),
            ("page", "/pricing"),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    let today = Utc::now().date_naive().to_string();
    let query = [
        ("from".to_owned(), today.clone()),
        ("to".to_owned(), today),
        ("feature.page".to_owned(), "/pricing".to_owned()),
    ];
    let answer = uniques(&server.url(""), &site, &query).await;
    assert_eq!(answer["total"]["visits"], 1, "{answer}");

    let boundary = "b0undary";
    let file = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"page\"; filename=\"x.txt\"\r\n\r\nhi\r\n--{boundary}--\r\n"
    );
    let refused = anonymous_http()
        .post(server.url("/track"))
        .header(
            "Content-Type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(file)
        .send()
        .await
        .expect("answered");
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let error: Value = refused.json().await.expect("JSON");
    assert_eq!(error["error"]["errors"][0]["field"], "page", "{error}");
}

async fn campaigns_and_sites_are_listed_with_their_first_and_last_days(backend: Backend) {
    let server = backend.server().await;
    let first = Campaign::fresh();
    let second = Campaign {
        campaign_id: Uuid::new_v4(),
        ..first
    };
    let now = Utc::now();
    let (early, late) = (now - Duration::days(3), now - Duration::days(1));
    let events: Vec<Value> = [(first, early), (first, late), (second, late)]
        .iter()
        .map(|(campaign, at)| campaign.impression(Uuid::new_v4(), Uuid::new_v4(), *at))
        .collect();
    post_all(&server, "/v1/impressions", &events, 10).await;
    let site = registered_site(&server.url("")).await;
    let status = send_form_beacon(&server, &[("site", &site), ("guid", "visitor-1")]).await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    let (status, listed) = get(
        &server,
        &format!("/v1/advertisers/{}/campaigns", first.advertiser_id),
        "",
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let day = |at: chrono::DateTime<Utc>| at.date_naive().to_string();
    assert_eq!(
        listed,
        json!({"campaigns": [
            {"campaign_id": first.campaign_id, "first_day": day(early), "last_day": day(late)},
            {"campaign_id": second.campaign_id, "first_day": day(late), "last_day": day(late)},
        ]})
    );
    let (status, sites) = get(&server, "/v1/sites", "").await;
    assert_eq!(status, StatusCode::OK, "{sites}");
    let entry = sites["sites"]
        .as_array()
        .expect("sites")
        .iter()
        .find(|entry| entry["site"] == site.as_str())
        .cloned();
    assert_eq!(
        entry,
        Some(json!({"site": site, "first_day": day(now), "last_day": day(now)}))
    );
}

async fn features_list_the_most_visited_values_raw_and_sealed_alike(backend: Backend) {
    let store = backend.store().await;
    let server = TestServer::start(Arc::clone(&store)).await;
    let site = registered_site(&server.url("")).await;
    let three_days_ago = Utc::now() - Duration::days(3);
    // Referrers a, b, c with 3, 2 and 1 visits; a crawler's visit counts for nothing.
    let mut beacons = Vec::new();
    for (referrer, count) in [("a.example", 3), ("b.example", 2), ("c.example", 1)] {
        for _ in 0..count {
            beacons.push(json!({
                "site": site, "guid": Uuid::new_v4().to_string(), "referrer": referrer,
                "page": "/", "timestamp": three_days_ago.timestamp(),
            }));
        }
    }
    for beacon in &beacons {
        let response = anonymous_http()
            .post(server.url("/track"))
            .header(
                "User-Agent",
                "Mozilla/5.0 (X11; Linux x86_64) Firefox/133.0",
            )
            .json(beacon)
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
    }
    let bot = json!({"site": site, "guid": "crawler", "referrer": "bot.example", "timestamp": three_days_ago.timestamp()});
    let response = anonymous_http()
        .post(server.url("/track"))
        .header(
            "User-Agent",
            "Googlebot/2.1 (+http://www.google.com/bot.html)",
        )
        .json(&bot)
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    let day = three_days_ago.date_naive();
    let range = format!("from={day}&to={day}");
    let path = format!("/v1/sites/{site}/features");
    let expected = json!({"features": {
        "page": [{"value": "/", "visits": 6}],
        "referrer": [
            {"value": "a.example", "visits": 3},
            {"value": "b.example", "visits": 2},
            {"value": "c.example", "visits": 1},
        ],
    }});

    let (status, raw) = get(&server, &path, &range).await;
    assert_eq!(status, StatusCode::OK, "{raw}");
    assert_eq!(raw, expected, "from the stored beacons");

    // Late beacons marked their day; a seal whose read starts over 5 s after the mark answers.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    // Visitors counted by then (the live sketches flush every second).
    let uniques_path = format!("/v1/sites/{site}/uniques");
    let uniques_queries = [
        range.clone(),
        format!("{range}&feature.referrer=a.example"),
        format!("{range}&feature.page=/&feature.referrer=b.example"),
    ];
    let mut raw_uniques = Vec::new();
    for query in &uniques_queries {
        let (status, mut answer) = get(&server, &uniques_path, query).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        answer["sealed_days"] = Value::Null;
        raw_uniques.push(answer);
    }
    let settings = SettingsCache::new(
        Arc::clone(&store) as Arc<dyn adevents::store::SettingsStore>,
        std::time::Duration::from_secs(10),
    );
    // Sealed in parts of about 1 KiB of combinations (a few combinations each), as a day of
    // millions of feature values is: the parts add up to the day.
    let sealer = Sealer::new(
        Arc::clone(&store),
        Arc::new(settings),
        SealerOptions::default().with_site_day_bytes(1024),
        Default::default(),
    );
    let site_id = SiteId::parse(&site).expect("site");
    sealer
        .seal_site_day(&site_id, Day::new(day))
        .await
        .expect("sealed");
    let (_, sealed) = get(&server, &path, &range).await;
    assert_eq!(sealed, expected, "from the sealed day");
    for (query, raw) in uniques_queries.iter().zip(&raw_uniques) {
        let (_, mut answer) = get(&server, &uniques_path, query).await;
        assert_eq!(answer["sealed_days"], 1, "{answer}");
        answer["sealed_days"] = Value::Null;
        assert_eq!(
            &answer, raw,
            "{query}: the sealed day answers as its beacons did"
        );
    }
    // A range in a zone that cuts the day reads its beacons again, at their times.
    let (_, zoned) = get(&server, &path, &format!("{range}&tz=Pacific/Kiritimati")).await;
    assert!(zoned["features"].is_object(), "{zoned}");
}

conformance!(
    the_tracker_and_the_dashboard_are_served_with_their_headers,
    a_multipart_beacon_counts_like_any_other_and_a_file_is_refused,
    campaigns_and_sites_are_listed_with_their_first_and_last_days,
    features_list_the_most_visited_values_raw_and_sealed_alike,
);
