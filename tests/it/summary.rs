//! Campaign summaries: exact counts per day, per ad and in total, in any time zone, whatever
//! the bucket layout or the retries.

use crate::common::Backend;
use crate::common::events::{Campaign, at, configure_buckets, get, post_all, summary};
use chrono::{Duration, NaiveDate};
use reqwest::StatusCode;
use serde_json::Value;
use std::collections::BTreeMap;
use uuid::Uuid;

async fn a_month_of_a_four_bucket_campaign_is_exact_per_day_per_ad_and_in_total(backend: Backend) {
    let campaign = Campaign::fresh();
    configure_buckets(backend, &campaign, 4, "always").await;
    let server = backend.server().await;
    let ads: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
    let october = NaiveDate::from_ymd_opt(2026, 10, 1).expect("valid");
    let (mut impressions, mut clicks, mut reclicks) = (Vec::new(), Vec::new(), Vec::new());
    let mut expected_days: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut expected_ads: BTreeMap<Uuid, (u64, u64)> = BTreeMap::new();
    for day in 0..31u32 {
        let date = october + Duration::days(i64::from(day));
        let entry = expected_days.entry(date.to_string()).or_default();
        if day % 6 == 4 {
            continue; // days without any event must still appear, with zeros
        }
        let count = (day * 7 % 13) + 3;
        for i in 0..count {
            let id = Uuid::new_v4();
            let ad = ads[(i % 3) as usize];
            let when = date.and_hms_opt(0, 0, 0).expect("valid").and_utc()
                + Duration::minutes(i64::from(i * 37));
            impressions.push(campaign.impression(id, ad, when));
            entry.0 += 1;
            expected_ads.entry(ad).or_default().0 += 1;
            if i % 4 == 0 {
                // Clicked a little later the same day, and clicked again later (not counted).
                clicks.push(campaign.click(id, ad, when + Duration::minutes(5)));
                reclicks.push(campaign.click(id, ad, when + Duration::minutes(9)));
                entry.1 += 1;
                expected_ads.entry(ad).or_default().1 += 1;
            }
        }
    }
    post_all(&server, "/v1/impressions", &impressions, 200).await;
    post_all(&server, "/v1/clicks", &clicks, 200).await;
    // One request may not hold two different clicks of one impression: re-clicks come later.
    post_all(&server, "/v1/clicks", &reclicks, 200).await;

    let by_day = summary(
        &server,
        &campaign,
        "from=2026-10-01&to=2026-10-31&group_by=day",
    )
    .await;
    let by_ad = summary(
        &server,
        &campaign,
        "from=2026-10-01&to=2026-10-31&group_by=ad",
    )
    .await;
    let none = summary(
        &server,
        &campaign,
        "from=2026-10-01&to=2026-10-31&group_by=none",
    )
    .await;

    let rows = by_day["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 31, "every day, zeros included");
    let days: BTreeMap<String, (u64, u64)> = rows
        .iter()
        .map(|row| {
            let day = row["day"].as_str().expect("day").to_owned();
            (
                day,
                (
                    row["impressions"].as_u64().expect("n"),
                    row["clicks"].as_u64().expect("n"),
                ),
            )
        })
        .collect();
    assert_eq!(days, expected_days);
    assert_eq!(rows[0]["day"], "2026-10-01", "oldest first");
    let total: (u64, u64) = expected_days
        .values()
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    assert_eq!(by_day["totals"]["impressions"], total.0);
    assert_eq!(by_day["totals"]["clicks"], total.1);
    let ctr = by_day["totals"]["ctr"].as_f64().expect("ctr");
    assert!((ctr - total.1 as f64 / total.0 as f64).abs() < 1e-9);

    let mut ranked: Vec<(Uuid, (u64, u64))> = expected_ads.into_iter().collect();
    ranked.sort_by(|a, b| b.1.0.cmp(&a.1.0).then(a.0.cmp(&b.0)));
    let got: Vec<(Uuid, (u64, u64))> = by_ad["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| {
            let ad = row["ad_id"].as_str().expect("ad").parse().expect("uuid");
            (
                ad,
                (
                    row["impressions"].as_u64().expect("n"),
                    row["clicks"].as_u64().expect("n"),
                ),
            )
        })
        .collect();
    assert_eq!(got, ranked);
    assert_eq!(none["rows"], Value::Array(Vec::new()));
    assert_eq!(none["totals"], by_day["totals"]);
}

async fn a_click_counts_once_at_the_first_click_of_its_impression(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let (id, ad) = (Uuid::new_v4(), Uuid::new_v4());
    post_all(
        &server,
        "/v1/impressions",
        &[campaign.impression(id, ad, at("2026-10-02T10:00:00Z"))],
        1,
    )
    .await;
    let clicks = [
        campaign.click(id, ad, at("2026-10-05T10:00:00Z")),
        campaign.click(id, ad, at("2026-10-03T10:00:00Z")),
    ];
    // The later click arrives first; then both are retried.
    post_all(&server, "/v1/clicks", &clicks, 1).await;
    post_all(&server, "/v1/clicks", &clicks, 1).await;

    let month = summary(&server, &campaign, "from=2026-10-01&to=2026-10-10").await;
    let after_first = summary(&server, &campaign, "from=2026-10-04&to=2026-10-10").await;
    let first_day = summary(&server, &campaign, "from=2026-10-03&to=2026-10-03").await;

    assert_eq!(month["totals"]["clicks"], 1);
    assert_eq!(month["rows"][2]["clicks"], 1, "on 2026-10-03: {month}");
    assert_eq!(
        after_first["totals"]["clicks"], 0,
        "the later click never counts"
    );
    assert_eq!(first_day["totals"]["clicks"], 1);
}

async fn an_impression_stored_twice_counts_once_per_utc_day_at_its_earliest_time(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let (id, ad) = (Uuid::new_v4(), Uuid::new_v4());
    let same_day_later = campaign.impression(id, ad, at("2026-10-11T20:00:00Z"));
    let earliest = campaign.impression(id, ad, at("2026-10-11T02:00:00Z"));
    let next_day = campaign.impression(id, ad, at("2026-10-12T02:00:00Z"));
    for event in [&same_day_later, &earliest, &next_day] {
        post_all(&server, "/v1/impressions", std::slice::from_ref(event), 1).await;
    }

    // In New York (UTC-4) 02:00Z is still the 10th: the earliest time decides the day.
    let body = summary(
        &server,
        &campaign,
        "from=2026-10-10&to=2026-10-12&tz=America/New_York",
    )
    .await;

    let per_day: Vec<u64> = body["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| row["impressions"].as_u64().expect("n"))
        .collect();
    assert_eq!(per_day, [1, 1, 0], "{body}");
}

async fn an_event_at_23_30_utc_is_the_next_day_in_kolkata_and_the_same_day_in_utc(
    backend: Backend,
) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let (id, ad) = (Uuid::new_v4(), Uuid::new_v4());
    post_all(
        &server,
        "/v1/impressions",
        &[campaign.impression(id, ad, at("2026-10-20T23:30:00Z"))],
        1,
    )
    .await;
    post_all(
        &server,
        "/v1/clicks",
        &[campaign.click(id, ad, at("2026-10-20T23:31:00Z"))],
        1,
    )
    .await;

    let kolkata = summary(
        &server,
        &campaign,
        "from=2026-10-20&to=2026-10-21&tz=Asia/Kolkata",
    )
    .await;
    let utc = summary(&server, &campaign, "from=2026-10-20&to=2026-10-21&tz=UTC").await;

    assert_eq!(kolkata["tz"], "Asia/Kolkata");
    assert_eq!(kolkata["rows"][0]["impressions"], 0);
    assert_eq!(kolkata["rows"][1]["impressions"], 1);
    assert_eq!(kolkata["rows"][1]["clicks"], 1);
    assert_eq!(utc["rows"][0]["impressions"], 1);
    assert_eq!(utc["rows"][0]["clicks"], 1);
    assert_eq!(utc["rows"][1]["impressions"], 0);
}

async fn a_bucket_change_in_the_middle_of_a_day_neither_hides_nor_double_counts(backend: Backend) {
    let campaign = Campaign::fresh();
    configure_buckets(backend, &campaign, 8, "2026-10-15T12:00:00Z").await;
    let server = backend.server().await;
    let ad = Uuid::new_v4();
    let start = at("2026-10-15T00:00:00Z");
    let events: Vec<Value> = (0..96)
        .map(|i| campaign.impression(Uuid::new_v4(), ad, start + Duration::minutes(i * 15)))
        .collect();
    let clicks: Vec<Value> = events
        .iter()
        .step_by(3)
        .map(|event| {
            let id = event["impression_id"]
                .as_str()
                .expect("id")
                .parse()
                .expect("uuid");
            let when = at(event["timestamp"].as_str().expect("timestamp")) + Duration::minutes(1);
            campaign.click(id, ad, when)
        })
        .collect();

    post_all(&server, "/v1/impressions", &events, 50).await;
    post_all(&server, "/v1/clicks", &clicks, 50).await;
    // Every event re-sent, in other batch shapes: each lands where it landed the first time.
    post_all(&server, "/v1/impressions", &events, 7).await;
    post_all(&server, "/v1/clicks", &clicks, 7).await;

    let body = summary(&server, &campaign, "from=2026-10-15&to=2026-10-15").await;
    assert_eq!(body["totals"]["impressions"], 96, "{body}");
    assert_eq!(body["totals"]["clicks"], 32, "{body}");
    let (status, settings) = get(&server, &campaign.path(), "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(settings["buckets"], 8);
}

async fn a_campaign_without_events_answers_zeros(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();

    let body = summary(&server, &campaign, "from=2026-10-01&to=2026-10-03").await;

    assert_eq!(body["totals"]["impressions"], 0);
    assert_eq!(body["totals"]["ctr"], 0.0);
    assert_eq!(body["rows"].as_array().map(Vec::len), Some(3));
    assert_eq!(body["campaign_id"], campaign.campaign_id.to_string());
}

async fn bad_query_parameters_are_400s_naming_the_parameter(backend: Backend) {
    let server = backend.server().await;
    let path = format!("{}/summary", Campaign::fresh().path());
    let cases = [
        ("to=2026-10-03", "from"),
        ("from=2026-10-01&to=2026/10/03", "to"),
        ("from=2026-10-05&to=2026-10-03", "from"),
        ("from=2025-01-01&to=2026-01-02", "to"),
        ("from=2026-10-01&to=2026-10-03&tz=Mars/Olympus", "tz"),
        ("from=2026-10-01&to=2026-10-03&group_by=week", "group_by"),
        ("from=2026-10-01&to=2026-10-03&colour=blue", "colour"),
        ("from=2026-10-01&from=2026-10-02&to=2026-10-03", "from"),
        ("from=%2B262142-12-31&to=%2B262142-12-31", "from"),
        ("from=1999-12-31&to=2000-01-01", "from"),
    ];
    for (query, field) in cases {
        let (status, body) = get(&server, &path, query).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(
            body["error"]["errors"][0]["field"], field,
            "{query}: {body}"
        );
    }
    let (status, body) = get(
        &server,
        "/v1/advertisers/x/campaigns/y/summary",
        "from=2026-10-01&to=2026-10-01",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["errors"][0]["field"], "advertiser_id");
}

conformance!(
    a_month_of_a_four_bucket_campaign_is_exact_per_day_per_ad_and_in_total,
    a_click_counts_once_at_the_first_click_of_its_impression,
    an_impression_stored_twice_counts_once_per_utc_day_at_its_earliest_time,
    an_event_at_23_30_utc_is_the_next_day_in_kolkata_and_the_same_day_in_utc,
    a_bucket_change_in_the_middle_of_a_day_neither_hides_nor_double_counts,
    a_campaign_without_events_answers_zeros,
    bad_query_parameters_are_400s_naming_the_parameter,
);

/// Dashboards call the query endpoints from a browser: only the origins an operator lists get
/// CORS headers, and by default none do.
#[tokio::test]
async fn query_endpoints_send_cors_headers_only_for_configured_origins() {
    let mut options = crate::common::test_options();
    options.edge.cors_origins = vec!["https://dash.example".parse().expect("header value")];
    let configured = Backend::Embedded.server_with(options).await;
    let default = Backend::Embedded.server().await;
    let path = format!(
        "{}/summary?from=2026-10-01&to=2026-10-01",
        Campaign::fresh().path()
    );
    let allowed_origin = |server: &crate::common::TestServer, origin: &'static str| {
        let url = server.url(&path);
        async move {
            let response = crate::common::http()
                .get(url)
                .header("origin", origin)
                .send()
                .await
                .expect("answered");
            assert_eq!(response.status(), StatusCode::OK);
            response
                .headers()
                .get("access-control-allow-origin")
                .map(|value| value.to_str().unwrap_or_default().to_owned())
        }
    };

    let listed = allowed_origin(&configured, "https://dash.example").await;
    let unlisted = allowed_origin(&configured, "https://evil.example").await;
    let by_default = allowed_origin(&default, "https://dash.example").await;

    assert_eq!(listed.as_deref(), Some("https://dash.example"));
    assert_eq!(unlisted, None);
    assert_eq!(by_default, None);

    // A refusal too (no key here), so that the page can read why.
    for (origin, expected) in [
        ("https://dash.example", Some("https://dash.example")),
        ("https://evil.example", None),
    ] {
        let refused = crate::common::anonymous_http()
            .get(configured.url(&path))
            .header("origin", origin)
            .send()
            .await
            .expect("answered");
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
        let allowed = refused
            .headers()
            .get("access-control-allow-origin")
            .and_then(|value| value.to_str().ok());
        assert_eq!(allowed, expected, "{origin}");
    }
}
