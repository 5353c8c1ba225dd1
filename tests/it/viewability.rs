//! View reports (`POST /v`) as `/v.js` sends them: signed with the impression pixel's query,
//! counted only from the client the ad was rendered for, at most 5 per client, inside the view
//! window, joined to their impression whichever arrives first, and counted alike raw, sealed
//! and in summaries, reports by ad and exports.

use crate::common::events::{Campaign, export_records, post_all, summary};
use crate::common::tags::{Secret, create_secret, fire_pixel, pixel_query, signed};
use crate::common::{Backend, TestServer, test_options};
use adevents::domain::time::Day;
use adevents::sealer::{Sealer, SealerOptions};
use adevents::settings::SettingsCache;
use adevents::store::Store;
use chrono::{DateTime, Duration, DurationRound, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

conformance!(
    reports_from_the_rendering_client_count_in_summaries_reports_and_exports,
    a_report_that_comes_before_its_impression_joins_it,
    a_server_to_server_impression_without_user_ip_counts_its_viewers_reports,
    reports_of_another_client_a_bot_past_five_or_past_the_window_count_nowhere,
    a_report_with_a_bad_signature_or_body_is_refused_and_stores_nothing,
    a_sealed_day_keeps_its_view_measures_and_a_late_report_reseals_it,
    closed_slices_count_their_views_as_the_raw_read_does,
    two_processes_taking_the_impression_and_its_reports_in_any_split_agree,
    any_page_may_post_a_report,
    a_report_of_an_erased_impression_is_dropped,
);

const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) \
    Chrome/131.0.0.0 Safari/537.36";
const OTHER_BROWSER: &str = "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_0) AppleWebKit/605.1.15 \
    (KHTML, like Gecko) Version/17.0 Safari/605.1.15";
const CRAWLER: &str = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";

/// The viewer's address and another in its /24.
const VIEWER: &str = "203.0.113.7";
const VIEWER_NEIGHBOUR: &str = "203.0.113.200";
const STRANGER: &str = "192.0.2.10";

/// A server that believes `X-Forwarded-For` from the test client, so each request can come
/// from the address the test names; pixels dated `tag_ttl` ago still count.
async fn server(backend: Backend, tag_ttl: std::time::Duration) -> (Arc<dyn Store>, TestServer) {
    let store = backend.store().await;
    let server = TestServer::with_options(Arc::clone(&store), options(tag_ttl, None)).await;
    (store, server)
}

/// The options of [`server`], with slices aggregated every `slices` (`None`: the tests' own
/// default).
fn options(
    tag_ttl: std::time::Duration,
    slices: Option<Option<std::time::Duration>>,
) -> adevents::app::Options {
    let mut options = test_options();
    options.edge.trusted_proxies = vec!["127.0.0.1/32".parse().expect("a CIDR")];
    options.edge.tag_ttl = tag_ttl;
    if let Some(interval) = slices {
        options.service.slice_interval = interval;
    }
    options
}

/// One ad on a page: its signed pixel query, and what the test needs to find it again.
struct Ad {
    impression: Uuid,
    ad: Uuid,
    query: String,
}

fn ad(campaign: &Campaign, secret: &Secret, ad: Uuid, t: DateTime<Utc>) -> Ad {
    let impression = Uuid::new_v4();
    Ad {
        impression,
        ad,
        query: signed(
            secret,
            &pixel_query(campaign, impression, ad, t.timestamp_millis(), secret),
        ),
    }
}

/// The pixel fired by the browser at `address` with `agent`.
async fn render(server: &TestServer, ad: &Ad, address: &str, agent: &str) {
    fire_pixel(
        server,
        &ad.query,
        &[("x-forwarded-for", address), ("user-agent", agent)],
    )
    .await;
}

/// Posts a report as `sendBeacon` does (a form in `text/plain`); the status and body.
async fn report(
    server: &TestServer,
    query: &str,
    body: &str,
    address: &str,
    agent: &str,
) -> (StatusCode, String) {
    let response = crate::common::tags::browser()
        .post(server.url(&format!("/v?{query}")))
        .header("x-forwarded-for", address)
        .header("user-agent", agent)
        .header("content-type", "text/plain;charset=UTF-8")
        .body(body.to_owned())
        .send()
        .await
        .expect("answered");
    let status = response.status();
    (status, response.text().await.unwrap_or_default())
}

async fn accepted(server: &TestServer, ad: &Ad, body: &str, address: &str, agent: &str) {
    let (status, text) = report(server, &ad.query, body, address, agent).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}: {text}");
}

fn today_and_yesterday() -> String {
    let today = Utc::now().date_naive();
    format!("from={}&to={today}", today - Duration::days(1))
}

/// The five measures of a counts object, in one value to compare.
fn measures(counts: &Value) -> Value {
    json!({
        "measurable": counts["measurable_impressions"],
        "viewable": counts["viewable_impressions"],
        "rate": counts["viewable_rate"],
        "avg": counts["avg_in_view_ms"],
        "engaged": counts["engaged_impressions"],
    })
}

fn expected(measurable: u64, viewable: u64, avg: Option<u64>, engaged: u64) -> Value {
    json!({
        "measurable": measurable,
        "viewable": viewable,
        "rate": (measurable > 0).then(|| viewable as f64 / measurable as f64),
        "avg": avg,
        "engaged": engaged,
    })
}

async fn reports_from_the_rendering_client_count_in_summaries_reports_and_exports(
    backend: Backend,
) {
    let (_, server) = server(backend, std::time::Duration::from_secs(3600)).await;
    let campaign = Campaign::fresh();
    let secret = create_secret(&server, campaign.advertiser_id).await;
    let now = Utc::now();
    let (first_ad, second_ad) = (Uuid::new_v4(), Uuid::new_v4());
    let seen = ad(&campaign, &secret, first_ad, now);
    let seen_longer = ad(&campaign, &secret, first_ad, now);
    let measured_only = ad(&campaign, &secret, second_ad, now);
    let played = ad(&campaign, &secret, second_ad, now);
    for each in [&seen, &seen_longer, &measured_only, &played] {
        render(&server, each, VIEWER, BROWSER).await;
        accepted(&server, each, "e=measurable", VIEWER, BROWSER).await;
    }
    // The viewer's next request may leave from another address of its network.
    accepted(
        &server,
        &seen,
        "e=viewable&in_view_ms=1500&max_visible=80",
        VIEWER_NEIGHBOUR,
        BROWSER,
    )
    .await;
    accepted(
        &server,
        &seen_longer,
        "e=viewable&in_view_ms=1000",
        VIEWER,
        BROWSER,
    )
    .await;
    // A last report with only the in-view time: the largest counts.
    accepted(&server, &seen_longer, "e=&in_view_ms=2001", VIEWER, BROWSER).await;
    accepted(&server, &played, "e=play,hover", VIEWER, BROWSER).await;

    let answer = summary(
        &server,
        &campaign,
        &format!("{}&group_by=ad", today_and_yesterday()),
    )
    .await;
    // Means round half up: (1500 + 2001) / 2 = 1750.5.
    assert_eq!(
        measures(&answer["totals"]),
        expected(4, 2, Some(1751), 1),
        "{answer}"
    );
    let row = |ad: Uuid| {
        answer["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .find(|row| row["ad_id"] == ad.to_string())
            .cloned()
            .expect("the ad's row")
    };
    assert_eq!(measures(&row(first_ad)), expected(2, 2, Some(1751), 0));
    assert_eq!(measures(&row(second_ad)), expected(2, 0, None, 1));

    let hours = summary(
        &server,
        &campaign,
        &format!("{}&group_by=hour", today_and_yesterday()),
    )
    .await;
    let hour_sum: u64 = hours["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| row["viewable_impressions"].as_u64().expect("a count"))
        .sum();
    assert_eq!(hour_sum, 2);

    let (status, by_ad) = crate::common::events::get(
        &server,
        &format!("{}/report", campaign.path()),
        &format!("{}&dimension=ad_id", today_and_yesterday()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{by_ad}");
    let report_row = by_ad["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|row| row["value"] == first_ad.to_string())
        .cloned()
        .expect("the ad's report row");
    assert_eq!(measures(&report_row), expected(2, 2, Some(1751), 0));

    let records = export_records(&server, &campaign, &today_and_yesterday()).await;
    let record = |ad: &Ad| records[&ad.impression.to_string()].clone();
    assert_eq!(record(&seen)["viewable"], true);
    assert_eq!(record(&seen)["in_view_ms"], 1500);
    assert_eq!(record(&seen_longer)["in_view_ms"], 2001);
    assert_eq!(record(&measured_only)["measurable"], true);
    assert_eq!(record(&measured_only)["viewable"], false);
    assert_eq!(record(&measured_only)["in_view_ms"], Value::Null);
    assert_eq!(record(&played)["engagements"], json!(["hover", "play"]));
    assert_eq!(record(&seen)["engagements"], json!([]));
}

async fn a_report_that_comes_before_its_impression_joins_it(backend: Backend) {
    let (_, server) = server(backend, std::time::Duration::from_secs(3600)).await;
    let campaign = Campaign::fresh();
    let secret = create_secret(&server, campaign.advertiser_id).await;
    let now = Utc::now();
    let before_pixel = ad(&campaign, &secret, Uuid::new_v4(), now);
    let before_post = ad(&campaign, &secret, Uuid::new_v4(), now);
    let never_served = ad(&campaign, &secret, Uuid::new_v4(), now);
    for each in [&before_pixel, &before_post, &never_served] {
        accepted(&server, each, "e=viewable&in_view_ms=1200", VIEWER, BROWSER).await;
    }
    let empty = summary(&server, &campaign, &today_and_yesterday()).await;
    assert_eq!(
        measures(&empty["totals"]),
        expected(0, 0, None, 0),
        "a report whose impression never arrives counts nowhere"
    );

    render(&server, &before_pixel, VIEWER, BROWSER).await;
    // The ad server's own copy, posted after the report, carrying the viewer's client.
    let posted = json!([{
        "impression_id": before_post.impression,
        "advertiser_id": campaign.advertiser_id,
        "campaign_id": campaign.campaign_id,
        "ad_id": before_post.ad,
        "user_id": Uuid::new_v4(),
        "timestamp": now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "user_ip": VIEWER,
        "user_agent": BROWSER,
    }]);
    post_all(
        &server,
        "/v1/impressions",
        posted.as_array().expect("an array"),
        10,
    )
    .await;
    let answer = summary(&server, &campaign, &today_and_yesterday()).await;
    assert_eq!(
        measures(&answer["totals"]),
        expected(2, 2, Some(1200), 0),
        "{answer}"
    );
}

/// An ad server posting from its own address names no viewer: `user_ip` defaults to that
/// address (and is stored so), but it is not the client a report must come from, as it is not
/// the address judged as traffic.
async fn a_server_to_server_impression_without_user_ip_counts_its_viewers_reports(
    backend: Backend,
) {
    let (_, server) = server(backend, std::time::Duration::from_secs(3600)).await;
    let campaign = Campaign::fresh();
    let secret = create_secret(&server, campaign.advertiser_id).await;
    let served = ad(&campaign, &secret, Uuid::new_v4(), Utc::now());
    let posted = json!({
        "impression_id": served.impression,
        "advertiser_id": campaign.advertiser_id,
        "campaign_id": campaign.campaign_id,
        "ad_id": served.ad,
        "user_id": Uuid::new_v4(),
        "timestamp": Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    });
    post_all(&server, "/v1/impressions", &[posted], 1).await;

    accepted(
        &server,
        &served,
        "e=viewable&in_view_ms=1500",
        VIEWER,
        BROWSER,
    )
    .await;

    let answer = summary(&server, &campaign, &today_and_yesterday()).await;
    assert_eq!(
        measures(&answer["totals"]),
        expected(1, 1, Some(1500), 0),
        "{answer}"
    );
    let exported = export_records(&server, &campaign, &today_and_yesterday()).await;
    let record = &exported[&served.impression.to_string()];
    assert_eq!(record["user_ip"], "127.0.0.0", "{record}");
}

async fn reports_of_another_client_a_bot_past_five_or_past_the_window_count_nowhere(
    backend: Backend,
) {
    let (_, server) = server(backend, std::time::Duration::from_secs(3 * 3600)).await;
    let campaign = Campaign::fresh();
    let secret = create_secret(&server, campaign.advertiser_id).await;
    let now = Utc::now();
    let creative = Uuid::new_v4();
    // Someone who read the public query posts from another network, or with another browser.
    let forged = ad(&campaign, &secret, creative, now);
    render(&server, &forged, VIEWER, BROWSER).await;
    accepted(
        &server,
        &forged,
        "e=viewable&in_view_ms=600000",
        STRANGER,
        BROWSER,
    )
    .await;
    accepted(&server, &forged, "e=viewable", VIEWER, OTHER_BROWSER).await;
    // A crawler that rendered the ad and reports it from the viewer's own network.
    accepted(&server, &forged, "e=play", VIEWER, CRAWLER).await;

    // Five places: the five measurable reports take them, the sixth (viewable) none; the
    // first sent again (a retry) takes no new place.
    let busy = ad(&campaign, &secret, creative, now);
    render(&server, &busy, VIEWER, BROWSER).await;
    for ms in 0..5 {
        accepted(
            &server,
            &busy,
            &format!("e=measurable&in_view_ms={ms}"),
            VIEWER,
            BROWSER,
        )
        .await;
    }
    accepted(&server, &busy, "e=measurable&in_view_ms=0", VIEWER, BROWSER).await;
    accepted(
        &server,
        &busy,
        "e=viewable&in_view_ms=1000",
        VIEWER,
        BROWSER,
    )
    .await;

    // Rendered two hours ago: its reports came long after the view window closed.
    let old = ad(&campaign, &secret, creative, now - Duration::hours(2));
    crate::common::events::post_all(
        &server,
        "/v1/impressions",
        &[json!({
            "impression_id": old.impression,
            "advertiser_id": campaign.advertiser_id,
            "campaign_id": campaign.campaign_id,
            "ad_id": creative,
            "user_id": Uuid::new_v4(),
            "timestamp": (now - Duration::hours(2)).to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "user_ip": VIEWER,
            "user_agent": BROWSER,
        })],
        10,
    )
    .await;
    accepted(&server, &old, "e=viewable&in_view_ms=1000", VIEWER, BROWSER).await;

    let answer = summary(
        &server,
        &campaign,
        &format!("{}&group_by=ad", today_and_yesterday()),
    )
    .await;
    // Only the five measurable reports of `busy` count.
    assert_eq!(
        measures(&answer["totals"]),
        expected(1, 0, None, 0),
        "{answer}"
    );
}

async fn a_report_with_a_bad_signature_or_body_is_refused_and_stores_nothing(backend: Backend) {
    let (_, server) = server(backend, std::time::Duration::from_secs(3600)).await;
    let campaign = Campaign::fresh();
    let secret = create_secret(&server, campaign.advertiser_id).await;
    let shown = ad(&campaign, &secret, Uuid::new_v4(), Utc::now());
    render(&server, &shown, VIEWER, BROWSER).await;

    let forged_query = shown.query.replace("&s=", "&s=AAAA");
    let (status, text) = report(&server, &forged_query, "e=viewable", VIEWER, BROWSER).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{text}");
    let unsigned = shown.query.split("&s=").next().expect("a query").to_owned();
    let (status, _) = report(&server, &unsigned, "e=viewable", VIEWER, BROWSER).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    for (body, field) in [
        ("e=viewable&extra=1", "extra"),
        ("e=viewable,wink", "e"),
        ("e=viewable&in_view_ms=600001", "in_view_ms"),
        ("e=viewable&max_visible=101", "max_visible"),
        ("e=", "e"),
        ("in_view_ms=10", "e"),
        ("e=viewable&e=hover", "e"),
        (r#"{"e": "viewable", "in_view_ms": -1}"#, "in_view_ms"),
    ] {
        let (status, text) = report(&server, &shown.query, body, VIEWER, BROWSER).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {text}");
        let error: Value = serde_json::from_str(&text).expect("a JSON error");
        let fields: Vec<&str> = error["error"]["errors"]
            .as_array()
            .unwrap_or_else(|| panic!("{body}: {text}"))
            .iter()
            .filter_map(|error| error["field"].as_str())
            .collect();
        assert!(fields.contains(&field), "{body}: {text}");
    }
    // JSON is read too.
    let (status, _) = report(
        &server,
        &shown.query,
        r#"{"e": "measurable", "max_visible": 40}"#,
        VIEWER,
        BROWSER,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let answer = summary(&server, &campaign, &today_and_yesterday()).await;
    assert_eq!(measures(&answer["totals"]), expected(1, 0, None, 0));
}

/// A sealer with the defaults, as `adevents rollup` builds one.
fn sealer(store: &Arc<dyn Store>) -> Sealer {
    let settings = SettingsCache::new(store.clone(), std::time::Duration::from_secs(10));
    Sealer::new(
        store.clone(),
        Arc::new(settings),
        SealerOptions::default(),
        Default::default(),
    )
}

async fn a_sealed_day_keeps_its_view_measures_and_a_late_report_reseals_it(backend: Backend) {
    // Pixels of three days ago still count; their reports come within the window after them.
    let (store, server) = server(backend, std::time::Duration::from_secs(4 * 24 * 3600)).await;
    let campaign = Campaign::fresh();
    let secret = create_secret(&server, campaign.advertiser_id).await;
    let served = Utc::now().duration_trunc(Duration::days(1)).expect("a day") - Duration::days(3)
        + Duration::hours(10);
    let day = served.date_naive();
    let creative = Uuid::new_v4();
    let first = ad(&campaign, &secret, creative, served);
    let second = ad(&campaign, &secret, creative, served);
    for each in [&first, &second] {
        render(&server, each, VIEWER, BROWSER).await;
    }
    accepted(
        &server,
        &first,
        "e=viewable&in_view_ms=1100",
        VIEWER,
        BROWSER,
    )
    .await;
    let range = format!("from={day}&to={day}");
    let raw = summary(&server, &campaign, &range).await;
    assert_eq!(raw["sealed_days"], 0);
    assert_eq!(measures(&raw["totals"]), expected(1, 1, Some(1100), 0));

    let seal = || async {
        // A seal is current once its read started past the latest late mark and the margin.
        tokio::time::sleep(std::time::Duration::from_secs(6)).await;
        sealer(&store)
            .seal_campaign_day(campaign.key(), Day::new(day))
            .await
            .expect("sealed");
    };
    seal().await;
    let sealed = summary(&server, &campaign, &range).await;
    assert_eq!(sealed["sealed_days"], 1, "{sealed}");
    assert_eq!(measures(&sealed["totals"]), measures(&raw["totals"]));

    // The second ad's report arrives now (its pixel came late, so its window is still open):
    // the day is read raw again, then sealed with it.
    accepted(&server, &second, "e=measurable,hover", VIEWER, BROWSER).await;
    let marked = summary(&server, &campaign, &range).await;
    assert_eq!(marked["sealed_days"], 0, "{marked}");
    assert_eq!(measures(&marked["totals"]), expected(2, 1, Some(1100), 1));
    seal().await;
    let resealed = summary(&server, &campaign, &range).await;
    assert_eq!(resealed["sealed_days"], 1);
    assert_eq!(measures(&resealed["totals"]), measures(&marked["totals"]));
}

async fn closed_slices_count_their_views_as_the_raw_read_does(backend: Backend) {
    let hour = std::time::Duration::from_secs(3 * 3600);
    let store = backend.store().await;
    let aggregating = TestServer::with_options(
        Arc::clone(&store),
        options(hour, Some(Some(std::time::Duration::from_secs(1)))),
    )
    .await;
    let raw = TestServer::with_options(Arc::clone(&store), options(hour, Some(None))).await;
    let campaign = Campaign::fresh();
    let secret = create_secret(&aggregating, campaign.advertiser_id).await;
    // Served 40 minutes ago, in slices closed by now; their pixels and reports come now, so
    // each report marks a closed slice, which is aggregated again once its reports stop.
    let served = Utc::now() - Duration::minutes(40);
    let creative = Uuid::new_v4();
    let ads: Vec<Ad> = (0..6)
        .map(|i| {
            ad(
                &campaign,
                &secret,
                creative,
                served + Duration::minutes(5 * i),
            )
        })
        .collect();
    for (i, each) in ads.iter().enumerate() {
        render(&aggregating, each, VIEWER, BROWSER).await;
        accepted(&aggregating, each, "e=measurable", VIEWER, BROWSER).await;
        if i % 2 == 0 {
            let body = format!("e=viewable&in_view_ms={}", 1000 + i);
            accepted(&aggregating, each, &body, VIEWER, BROWSER).await;
        }
        if i == 5 {
            accepted(&aggregating, each, "e=click", VIEWER, BROWSER).await;
        }
    }
    let query = format!("{}&group_by=hour", today_and_yesterday());
    let reference = summary(&raw, &campaign, &query).await;
    assert_eq!(
        measures(&reference["totals"]),
        expected(6, 3, Some(1002), 1),
        "{reference}"
    );
    let from_slices = || async {
        let answer = summary(&aggregating, &campaign, &query).await;
        answer["aggregated_slices"].as_u64().unwrap_or(0) > 0
            && answer["totals"] == reference["totals"]
            && answer["rows"] == reference["rows"]
    };
    assert!(
        crate::common::eventually(std::time::Duration::from_secs(40), from_slices).await,
        "the slices' aggregates answer as the raw read: {reference}"
    );
}

async fn two_processes_taking_the_impression_and_its_reports_in_any_split_agree(backend: Backend) {
    let store = backend.store().await;
    let hour = std::time::Duration::from_secs(3600);
    let first = TestServer::with_options(Arc::clone(&store), options(hour, None)).await;
    let second = TestServer::with_options(Arc::clone(&store), options(hour, None)).await;
    let campaign = Campaign::fresh();
    let secret = create_secret(&first, campaign.advertiser_id).await;
    let now = Utc::now();
    let creative = Uuid::new_v4();
    let ads: Vec<Ad> = (0..4)
        .map(|_| ad(&campaign, &secret, creative, now))
        .collect();
    let servers = [&first, &second];
    for (i, each) in ads.iter().enumerate() {
        // The pixel on one process, the reports on either, each report sent to both (a
        // retry after a timeout): one place each, at its first arrival.
        render(servers[i % 2], each, VIEWER, BROWSER).await;
        for (k, body) in ["e=measurable", "e=viewable&in_view_ms=1500", "e=hover"]
            .iter()
            .enumerate()
        {
            accepted(servers[(i + k) % 2], each, body, VIEWER, BROWSER).await;
            accepted(servers[(i + k + 1) % 2], each, body, VIEWER, BROWSER).await;
        }
    }
    // Past 5: three distinct reports already hold places; three more on the other process
    // take the last two, and the sixth counts nowhere.
    let crowded = &ads[0];
    for body in ["e=play", "e=pause"] {
        accepted(&second, crowded, body, VIEWER, BROWSER).await;
    }
    // Arrival times are kept to the millisecond: this one surely comes after.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    accepted(
        &first,
        crowded,
        "e=complete&in_view_ms=9000",
        VIEWER,
        BROWSER,
    )
    .await;
    let query = format!("{}&group_by=ad", today_and_yesterday());
    let (one, other) = (
        summary(&first, &campaign, &query).await,
        summary(&second, &campaign, &query).await,
    );
    assert_eq!(one["totals"], other["totals"]);
    assert_eq!(
        measures(&one["totals"]),
        expected(4, 4, Some(1500), 4),
        "{one}"
    );
    let records = export_records(&second, &campaign, &today_and_yesterday()).await;
    assert_eq!(
        records[&crowded.impression.to_string()]["engagements"],
        json!(["hover", "pause", "play"])
    );
}

async fn any_page_may_post_a_report(backend: Backend) {
    let (_, server) = server(backend, std::time::Duration::from_secs(3600)).await;
    let campaign = Campaign::fresh();
    let secret = create_secret(&server, campaign.advertiser_id).await;
    let shown = ad(&campaign, &secret, Uuid::new_v4(), Utc::now());
    let origin = "https://news.example";
    // A JSON body is not a simple request: the browser asks first.
    let preflight = crate::common::tags::browser()
        .request(
            reqwest::Method::OPTIONS,
            server.url(&format!("/v?{}", shown.query)),
        )
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .send()
        .await
        .expect("answered");
    assert!(preflight.status().is_success(), "{}", preflight.status());
    let allowed = |response: &reqwest::Response, name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_ascii_lowercase)
    };
    assert_eq!(
        allowed(&preflight, "access-control-allow-origin").as_deref(),
        Some("*")
    );
    assert!(
        allowed(&preflight, "access-control-allow-methods").is_some_and(|m| m.contains("post"))
    );
    let posted = crate::common::tags::browser()
        .post(server.url(&format!("/v?{}", shown.query)))
        .header("origin", origin)
        .header("content-type", "application/json")
        .header("user-agent", BROWSER)
        .body(r#"{"e": "measurable"}"#)
        .send()
        .await
        .expect("answered");
    assert_eq!(posted.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        allowed(&posted, "access-control-allow-origin").as_deref(),
        Some("*")
    );
}

/// A report names only its impression: once the impression's user is erased, a report of it
/// that comes after is dropped, since nothing could find it to erase it.
async fn a_report_of_an_erased_impression_is_dropped(backend: Backend) {
    use adevents::domain::bucket::BucketCount;
    use adevents::domain::ids::{AdvertiserId, CampaignId, CampaignKey};
    use adevents::domain::partition::EventPartition;
    let (store, server) = server(backend, std::time::Duration::from_secs(3600)).await;
    let campaign = Campaign::fresh();
    let secret = create_secret(&server, campaign.advertiser_id).await;
    let served = Utc::now() - Duration::seconds(5);
    let seen = ad(&campaign, &secret, Uuid::new_v4(), served);
    render(&server, &seen, VIEWER, BROWSER).await;
    accepted(&server, &seen, "e=measurable", VIEWER, BROWSER).await;
    let user = seen
        .query
        .split('&')
        .find_map(|pair| pair.strip_prefix("u="))
        .expect("the pixel names its user");

    let record = crate::privacy::erase(&server, json!({"user_id": user})).await;
    assert_eq!(record["erased"]["impressions"], 1, "{record}");
    assert_eq!(record["erased"]["view_reports"], 1, "{record}");
    // The page rendered again: its pixel is the erased user's, timed before the erasure.
    render(&server, &seen, VIEWER, BROWSER).await;
    let metrics = crate::common::metrics_text(&server).await;
    assert!(
        metrics
            .lines()
            .any(|line| line.starts_with("adevents_tags_total")
                && line.contains("tag=\"pixel\"")
                && line.contains("outcome=\"erased\"")),
        "{metrics}"
    );
    accepted(
        &server,
        &seen,
        "e=viewable&in_view_ms=1500",
        VIEWER,
        BROWSER,
    )
    .await;

    let partition = EventPartition {
        campaign: CampaignKey {
            advertiser_id: AdvertiserId::new(campaign.advertiser_id),
            campaign_id: CampaignId::new(campaign.campaign_id),
        },
        day: Day::new(served.date_naive()),
        bucket: BucketCount::ONE.ids().next().expect("one bucket"),
    };
    let stored = store
        .read_view_reports(&partition, None)
        .await
        .expect("read");
    assert!(stored.is_empty(), "{stored:?}");
}
