//! A site's visitor as a data-protection subject: its beacons found through the visitor index,
//! listed by subject access, erased leaving every other visitor's beacons alone, and its
//! re-sent old beacons dropped after.

use crate::common::beacons::{registered_site, uniques};
use crate::common::events::{get, post};
use crate::common::{Backend, TestServer, clear_of_midnight, eventually, http};
use crate::privacy::{access, access_listing, erase, kinds};
use chrono::{DateTime, Duration, DurationRound, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};

conformance!(
    a_visitors_erasure_removes_its_beacons_and_leaves_other_visitors_intact,
    subject_access_lists_a_visitors_beacons,
    a_resent_old_beacon_of_an_erased_visitor_is_dropped_and_a_new_one_is_kept,
    visitor_requests_are_checked_like_beacons,
    gpc_beacons_count_as_visits_without_a_visitor_and_cannot_be_found,
    gpc_is_ignored_where_the_site_does_not_respect_it,
    a_site_visited_only_under_gpc_has_visits_and_no_visitor,
    a_day_of_gpc_visits_alone_has_no_visitor_beside_a_day_with_visitors,
);

/// Some minutes ago, to the millisecond: a day no seal has closed.
fn minutes_ago(minutes: i64) -> DateTime<Utc> {
    (Utc::now() - Duration::minutes(minutes))
        .duration_trunc(Duration::milliseconds(1))
        .expect("truncates")
}

/// The user agent beacons are sent with: a browser's, so they are valid traffic.
const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";

/// Form-posts one beacon to `/track`, which must store it.
async fn track(server: &TestServer, site: &str, guid: &str, at: DateTime<Utc>, page: &str) {
    track_with(server, site, guid, at, page, false).await;
}

/// Form-posts one beacon, with `Sec-GPC: 1` when `gpc`, as a browser with Global Privacy
/// Control on sends it.
async fn track_with(
    server: &TestServer,
    site: &str,
    guid: &str,
    at: DateTime<Utc>,
    page: &str,
    gpc: bool,
) {
    let timestamp = format!("{}.{:03}", at.timestamp(), at.timestamp_subsec_millis());
    let mut request = http()
        .post(server.url("/track"))
        .header("User-Agent", BROWSER);
    if gpc {
        request = request.header("Sec-GPC", "1");
    }
    let response = request
        .form(&[
            ("site", site),
            ("guid", guid),
            ("timestamp", &timestamp),
            ("page", page),
        ])
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
}

/// The site's uniques of yesterday and today, a row per UTC day.
async fn two_days(server: &TestServer, site: &str) -> Value {
    let today = Utc::now().date_naive();
    let query = [
        ("from", (today - Duration::days(1)).to_string()),
        ("to", today.to_string()),
        ("tz", "UTC".to_owned()),
        ("granularity", "day".to_owned()),
    ]
    .map(|(name, value)| (name.to_owned(), value));
    uniques(&server.url(""), site, &query).await
}

/// Today's and yesterday's totals of the site: `{"visits", "unique_visitors", …}`.
async fn totals(server: &TestServer, site: &str) -> Value {
    two_days(server, site).await["total"].clone()
}

fn visitor(site: &str, guid: &str) -> String {
    serde_urlencoded::to_string([("site", site), ("guid", guid)]).expect("encodes")
}

async fn a_visitors_erasure_removes_its_beacons_and_leaves_other_visitors_intact(backend: Backend) {
    let server = backend.server().await;
    let site = registered_site(&server.url("")).await;
    let (erased, kept) = ("visitor-to-erase", "visitor-to-keep");
    for (guid, minutes, page) in [
        (erased, 10, "/a"),
        (erased, 9, "/b"),
        (erased, 8, "/a"),
        (kept, 7, "/a"),
        (kept, 6, "/c"),
        ("another visitor", 5, "/a"),
    ] {
        track(&server, &site, guid, minutes_ago(minutes), page).await;
    }
    let counted = eventually(std::time::Duration::from_secs(10), || async {
        totals(&server, &site).await["unique_visitors"] == 3
    })
    .await;
    assert!(counted, "{}", totals(&server, &site).await);
    access_listing(&server, &visitor(&site, erased), 3).await;

    let record = erase(&server, json!({"site": site, "guid": erased})).await;

    assert_eq!(
        record["erased"],
        json!({"impressions": 0, "clicks": 0, "view_reports": 0, "conversions": 0, "visits": 3}),
        "{record}"
    );
    assert_eq!(record["advertiser_id"], Value::Null, "{record}");
    assert!(access(&server, &visitor(&site, erased)).await.is_empty());
    // Visits of a day not yet sealed are counted from the stored beacons: exact at once.
    // Its live unique-visitor sketches are corrected by the day's seal.
    let after = totals(&server, &site).await;
    assert_eq!(after["visits"], 3, "{after}");
    assert!(after["unique_visitors"].as_u64() >= Some(2), "{after}");
    let left = access(&server, &visitor(&site, kept)).await;
    assert_eq!(kinds(&left), ["visit", "visit"], "{left:#?}");
    assert_eq!(
        access(&server, &visitor(&site, "another visitor"))
            .await
            .len(),
        1
    );
    // Run again, the erasure finds nothing more and says so.
    let again = erase(&server, json!({"site": site, "guid": erased})).await;
    assert_eq!(again["erased"]["visits"], 0, "{again}");
}

async fn subject_access_lists_a_visitors_beacons(backend: Backend) {
    let server = backend.server().await;
    let (site, elsewhere) = (
        registered_site(&server.url("")).await,
        registered_site(&server.url("")).await,
    );
    let guid = "visitor-with-a-history";
    let (first, second) = (minutes_ago(30), minutes_ago(2));
    track(&server, &site, guid, first, "/index.html").await;
    track(&server, &site, guid, second, "/about").await;
    // The same guid on another site is another visitor; another guid is someone else.
    track(&server, &elsewhere, guid, minutes_ago(3), "/x").await;
    track(&server, &site, "someone else", minutes_ago(3), "/x").await;

    let lines = access_listing(&server, &visitor(&site, guid), 2).await;

    let expected: Vec<Value> = [(first, "/index.html"), (second, "/about")]
        .iter()
        .map(|(at, page)| {
            json!({
                "kind": "visit",
                "site": site,
                "timestamp": at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                "features": {"page": page},
                "user_agent": BROWSER,
                "invalid": null,
            })
        })
        .collect();
    assert_eq!(lines, expected);
    assert!(access(&server, &visitor(&site, "nobody")).await.is_empty());
}

async fn a_resent_old_beacon_of_an_erased_visitor_is_dropped_and_a_new_one_is_kept(
    backend: Backend,
) {
    let server = backend.server().await;
    let site = registered_site(&server.url("")).await;
    let guid = "visitor-who-asked";
    let old = minutes_ago(6);
    track(&server, &site, guid, old, "/a").await;
    access_listing(&server, &visitor(&site, guid), 1).await;
    erase(&server, json!({"site": site, "guid": guid})).await;

    // The page's script re-sends its old beacon; then the visitor comes back.
    track(&server, &site, guid, old, "/a").await;
    let new = Utc::now()
        .duration_trunc(Duration::milliseconds(1))
        .expect("truncates");
    track(&server, &site, guid, new, "/b").await;

    let left = access_listing(&server, &visitor(&site, guid), 1).await;
    assert_eq!(left[0]["features"], json!({"page": "/b"}), "{left:#?}");
    assert_eq!(totals(&server, &site).await["visits"], 1);
}

async fn visitor_requests_are_checked_like_beacons(backend: Backend) {
    let server = backend.server().await;
    let long = "g".repeat(129);
    let refusals = [
        (json!({"site": "not a site", "guid": "g"}), "site"),
        (json!({"site": "example.com"}), "guid"),
        (json!({"site": "example.com", "guid": ""}), "guid"),
        (json!({"site": "example.com", "guid": long}), "guid"),
        (json!({"site": "example.com", "guid": "a\u{7}b"}), "guid"),
        (
            json!({"site": "example.com", "guid": "g", "advertiser_id": uuid::Uuid::new_v4()}),
            "advertiser_id",
        ),
        (
            json!({"site": "example.com", "guid": "g", "user_id": uuid::Uuid::new_v4()}),
            "user_id",
        ),
    ];
    for (body, field) in refusals {
        let (status, answer) = post(&server, "/v1/privacy/erasures", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(
            answer["error"]["errors"][0]["field"], field,
            "{body}: {answer}"
        );
    }
    for (query, field) in [("site=example.com", "guid"), ("site=a%20b&guid=g", "site")] {
        let (status, answer) = get(&server, "/v1/privacy/subjects", query).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {answer}");
        assert_eq!(
            answer["error"]["errors"][0]["field"], field,
            "{query}: {answer}"
        );
    }
}

/// Registers a fresh site with `respect_gpc`; returns it.
async fn site_respecting_gpc(server: &TestServer, respect: bool) -> String {
    let site = crate::common::beacons::fresh_site();
    let response = http()
        .put(server.url(&format!("/v1/sites/{site}")))
        .json(&json!({"respect_gpc": respect}))
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::OK);
    let answer: Value = response.json().await.expect("JSON");
    assert_eq!(answer["respect_gpc"], respect, "{answer}");
    site
}

async fn gpc_beacons_count_as_visits_without_a_visitor_and_cannot_be_found(backend: Backend) {
    let server = backend.server().await;
    let site = site_respecting_gpc(&server, true).await;
    let (private, counted) = ("visitor-with-gpc", "visitor-without-gpc");
    let (first, second) = (minutes_ago(9), minutes_ago(8));
    track_with(&server, &site, private, first, "/a", true).await;
    track_with(&server, &site, private, second, "/b", true).await;
    // The browser re-sends its beacon: the same beacon, counted once.
    track_with(&server, &site, private, first, "/a", true).await;
    track(&server, &site, counted, minutes_ago(7), "/a").await;
    let (status, settings) = get(&server, &format!("/v1/sites/{site}"), "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(settings["respect_gpc"], true, "{settings}");

    let settled = eventually(std::time::Duration::from_secs(10), || async {
        let totals = totals(&server, &site).await;
        totals["visits"] == 3 && totals["unique_visitors"] == 1
    })
    .await;
    assert!(settled, "{}", totals(&server, &site).await);
    // Flushed sketches never count them later either.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let totals = totals(&server, &site).await;
    assert_eq!(totals["visits"], 3, "{totals}");
    assert_eq!(totals["unique_visitors"], 1, "{totals}");
    // Nothing stored names the visitor: no access lists it, no erasure finds it.
    assert!(access(&server, &visitor(&site, private)).await.is_empty());
    let record = erase(&server, json!({"site": site, "guid": private})).await;
    assert_eq!(record["erased"]["visits"], 0, "{record}");
    assert_eq!(
        access_listing(&server, &visitor(&site, counted), 1)
            .await
            .len(),
        1
    );
}

async fn gpc_is_ignored_where_the_site_does_not_respect_it(backend: Backend) {
    let server = backend.server().await;
    let site = site_respecting_gpc(&server, false).await;
    let guid = "visitor-with-gpc";
    track_with(&server, &site, guid, minutes_ago(4), "/a", true).await;
    let counted = eventually(std::time::Duration::from_secs(10), || async {
        totals(&server, &site).await["unique_visitors"] == 1
    })
    .await;
    assert!(counted, "{}", totals(&server, &site).await);
    access_listing(&server, &visitor(&site, guid), 1).await;
}

async fn a_site_visited_only_under_gpc_has_visits_and_no_visitor(backend: Backend) {
    let server = backend.server().await;
    let site = site_respecting_gpc(&server, true).await;
    track_with(&server, &site, "one", minutes_ago(6), "/a", true).await;
    track_with(&server, &site, "two", minutes_ago(5), "/b", true).await;

    let counted = eventually(std::time::Duration::from_secs(10), || async {
        totals(&server, &site).await["visits"] == 2
    })
    .await;
    assert!(counted, "{}", totals(&server, &site).await);
    // Flushed sketches hold no member either.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let totals = totals(&server, &site).await;
    assert_eq!(totals["visits"], 2, "{totals}");
    assert_eq!(totals["unique_visitors"], 0, "{totals}");
}

async fn a_day_of_gpc_visits_alone_has_no_visitor_beside_a_day_with_visitors(backend: Backend) {
    clear_of_midnight(std::time::Duration::from_secs(600)).await;
    let server = backend.server().await;
    let site = site_respecting_gpc(&server, true).await;
    let today = Utc::now().date_naive();
    let yesterday_noon = (today - Duration::days(1))
        .and_hms_opt(12, 0, 0)
        .expect("a time")
        .and_utc();
    track_with(&server, &site, "private", yesterday_noon, "/a", true).await;
    track(&server, &site, "counted", minutes_ago(5), "/b").await;

    let counted = eventually(std::time::Duration::from_secs(10), || async {
        totals(&server, &site).await["visits"] == 2
    })
    .await;
    assert!(counted);
    // Flushed sketches hold the one visitor, on the day of its visit.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let answer = two_days(&server, &site).await;
    let rows = &answer["rows"];
    assert_eq!(rows[0]["visits"], 1, "{answer}");
    assert_eq!(rows[0]["unique_visitors"], 0, "{answer}");
    assert_eq!(rows[1]["visits"], 1, "{answer}");
    assert_eq!(rows[1]["unique_visitors"], 1, "{answer}");
    assert_eq!(answer["total"]["unique_visitors"], 1, "{answer}");
}
