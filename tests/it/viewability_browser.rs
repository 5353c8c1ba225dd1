//! The measurement script (`/v.js`) in a real headless Chromium ([`Browser`]): ads on a
//! publisher's page, each with its signed pixel and the script, served by an [`AdSite`] that
//! records every report on its way to adevents' `POST /v`. Each test asserts what the script
//! sent, body by body (the kinds, `in_view_ms`, `max_visible`, at most 5 reports), and what
//! the server made of it (the summary's measures and the export's fields).

use crate::common::ad_site::{Ad, AdSite, Report};
use crate::common::browser::{Browser, DESKTOP_CHROME};
use crate::common::events::{Campaign, export_records, summary};
use crate::common::tags::{Secret, create_secret};
use crate::common::{Backend, TestServer};
use chrono::Utc;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;

/// A 300×250 box, 100 px from the page's top left corner: in view at once.
const IN_VIEW: &str =
    "position:absolute;left:100px;top:100px;width:300px;height:250px;background:#ddd";

/// Today and yesterday (a test that straddles midnight still sees its impressions), in total.
fn range() -> String {
    let today = Utc::now().date_naive();
    format!(
        "from={}&to={today}&tz=UTC&group_by=none",
        today - chrono::Duration::days(1)
    )
}

/// Waits (up to 15 s) until the campaign's totals hold `expected`; asserts it.
async fn assert_totals(server: &TestServer, campaign: &Campaign, expected: Value) {
    let expected = expected.as_object().expect("an object").clone();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let totals = summary(server, campaign, &range()).await["totals"].clone();
        if expected.iter().all(|(name, value)| &totals[name] == value) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "totals {} against {totals}",
            Value::Object(expected)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The export's record of `ad` (null when there is none).
async fn exported(server: &TestServer, campaign: &Campaign, ad: &Ad) -> Value {
    let today = Utc::now().date_naive();
    let query = format!("from={}&to={today}", today - chrono::Duration::days(1));
    let records = export_records(server, campaign, &query).await;
    records
        .get(&ad.impression.to_string())
        .cloned()
        .unwrap_or(Value::Null)
}

/// The first report, sent as the script starts, before the observer's first answer.
fn assert_measurable_first(reports: &[Report], ad: &Ad) {
    let first = &reports[0];
    assert_eq!(first.body, "e=measurable&in_view_ms=0&max_visible=0");
    assert_eq!(first.query, ad.query, "the pixel's signed query, as it is");
    assert_eq!(first.content_type, "application/x-www-form-urlencoded");
}

async fn setup() -> (TestServer, Campaign, Secret, AdSite, Browser) {
    let server = Backend::Embedded.server().await;
    let campaign = Campaign::fresh();
    let secret = create_secret(&server, campaign.advertiser_id).await;
    let site = AdSite::start(&server).await;
    let browser = Browser::start().await;
    (server, campaign, secret, site, browser)
}

#[tokio::test]
async fn an_ad_in_view_for_a_second_is_viewable_with_its_time_in_view() {
    let (server, campaign, secret, site, browser) = setup().await;
    let ad = Ad::new(&campaign, &secret, "ad", IN_VIEW);
    site.open(&browser, &server, "", &[&ad]).await;

    let reports = site.wait_for(&ad, 2).await;
    assert_measurable_first(&reports, &ad);
    let viewable = &reports[1];
    assert_eq!(viewable.kinds(), ["viewable"], "{viewable:?}");
    assert!(
        (1000..3000).contains(&viewable.in_view_ms()),
        "{viewable:?}"
    );
    assert_eq!(viewable.max_visible(), 100);
    assert!(viewable.at - reports[0].at >= Duration::from_millis(900));
    // Leaving the page: a last report with the time in view since, and nothing new else.
    tokio::time::sleep(Duration::from_millis(300)).await;
    browser.hide().await;
    let reports = site.wait_for(&ad, 3).await;
    let last = &reports[2];
    assert_eq!(last.kinds(), Vec::<String>::new(), "{last:?}");
    assert!(last.in_view_ms() >= viewable.in_view_ms() + 250, "{last:?}");
    assert_eq!(last.max_visible(), 100);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(site.reports(&ad).len(), 3, "nothing more while hidden");

    site.assert_accepted(&ad).await;
    assert_totals(
        &server,
        &campaign,
        json!({"impressions": 1, "measurable_impressions": 1, "viewable_impressions": 1,
               "viewable_rate": 1.0, "avg_in_view_ms": last.in_view_ms(),
               "engaged_impressions": 0}),
    )
    .await;
    let record = exported(&server, &campaign, &ad).await;
    assert_eq!(record["measurable"], true, "{record}");
    assert_eq!(record["viewable"], true, "{record}");
    assert_eq!(record["in_view_ms"], last.in_view_ms(), "{record}");
    assert_eq!(record["engagements"], json!([]), "{record}");
}

#[tokio::test]
async fn an_ad_below_the_fold_is_measurable_and_viewable_only_once_scrolled_into_view() {
    let (server, campaign, secret, site, browser) = setup().await;
    let ad = Ad::new(
        &campaign,
        &secret,
        "ad",
        "position:absolute;left:100px;top:3000px;width:300px;height:250px;background:#ddd",
    );
    site.open(
        &browser,
        &server,
        "<style>body{min-height:5000px}</style>",
        &[&ad],
    )
    .await;

    let reports = site.wait_for(&ad, 1).await;
    assert_measurable_first(&reports, &ad);
    assert_totals(
        &server,
        &campaign,
        json!({"measurable_impressions": 1, "viewable_impressions": 0}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(site.reports(&ad).len(), 1, "{:#?}", site.reports(&ad));

    browser
        .eval("document.getElementById('ad').scrollIntoView({block: 'center'}); return true;")
        .await;
    let reports = site.wait_for(&ad, 2).await;
    let viewable = &reports[1];
    assert_eq!(viewable.kinds(), ["viewable"], "{viewable:?}");
    assert!(viewable.in_view_ms() >= 1000, "{viewable:?}");
    site.assert_accepted(&ad).await;
    assert_totals(
        &server,
        &campaign,
        json!({"measurable_impressions": 1, "viewable_impressions": 1, "viewable_rate": 1.0}),
    )
    .await;
}

#[tokio::test]
async fn an_ad_40_percent_in_view_is_not_viewable_and_a_large_one_35_percent_in_view_is() {
    let (server, campaign, secret, site, browser) = setup().await;
    // 100 of its 250 px above the viewport's top edge: 40 % in view.
    let small = Ad::new(
        &campaign,
        &secret,
        "small",
        "position:fixed;left:100px;top:-150px;width:300px;height:250px;background:#ddd",
    );
    // 970×250 = 242,500 px², 87.5 of its 250 px above the bottom edge: 35 % in view.
    let large = Ad::new(
        &campaign,
        &secret,
        "large",
        "position:fixed;left:100px;bottom:-162.5px;width:970px;height:250px;background:#ddd",
    );
    site.open(&browser, &server, "", &[&small, &large]).await;

    let reports = site.wait_for(&large, 2).await;
    assert_measurable_first(&reports, &large);
    assert_eq!(reports[1].kinds(), ["viewable"], "{:?}", reports[1]);
    assert!(reports[1].in_view_ms() >= 1000, "{:?}", reports[1]);
    assert!(
        (34..=36).contains(&reports[1].max_visible()),
        "{:?}",
        reports[1]
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reports = site.reports(&small);
    assert_eq!(reports.len(), 1, "{reports:#?}");
    assert_measurable_first(&reports, &small);
    // Its last report says how much of it was seen, and that it never was in view.
    browser.hide().await;
    let reports = site.wait_for(&small, 2).await;
    assert_eq!(reports[1].kinds(), Vec::<String>::new(), "{:?}", reports[1]);
    assert_eq!(reports[1].in_view_ms(), 0);
    assert!(
        (39..=41).contains(&reports[1].max_visible()),
        "{:?}",
        reports[1]
    );

    site.assert_accepted(&small).await;
    site.assert_accepted(&large).await;
    assert_totals(
        &server,
        &campaign,
        json!({"impressions": 2, "measurable_impressions": 2, "viewable_impressions": 1,
               "viewable_rate": 0.5}),
    )
    .await;
    let record = exported(&server, &campaign, &small).await;
    assert_eq!(record["measurable"], true, "{record}");
    assert_eq!(record["viewable"], false, "{record}");
    assert_eq!(record["in_view_ms"], 0, "{record}");
}

#[tokio::test]
async fn a_video_ad_needs_two_seconds_in_view() {
    let (server, campaign, secret, site, browser) = setup().await;
    let mut ad = Ad::new(&campaign, &secret, "video", IN_VIEW);
    ad.attributes = " data-format=\"video\"";
    site.open(&browser, &server, "", &[&ad]).await;

    let reports = site.wait_for(&ad, 1).await;
    assert_measurable_first(&reports, &ad);
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(site.reports(&ad).len(), 1, "not viewable after a second");
    let reports = site.wait_for(&ad, 2).await;
    let viewable = &reports[1];
    assert_eq!(viewable.kinds(), ["viewable"], "{viewable:?}");
    assert!(
        (2000..4000).contains(&viewable.in_view_ms()),
        "{viewable:?}"
    );
    assert!(viewable.at - reports[0].at >= Duration::from_millis(1900));
    site.assert_accepted(&ad).await;
    assert_totals(
        &server,
        &campaign,
        json!({"viewable_impressions": 1, "avg_in_view_ms": viewable.in_view_ms()}),
    )
    .await;
}

#[tokio::test]
async fn a_page_hidden_before_the_second_ends_restarts_it() {
    let (server, campaign, secret, site, browser) = setup().await;
    let ad = Ad::new(&campaign, &secret, "ad", IN_VIEW);
    // A browser without sendBeacon: the reports go by fetch (keepalive) instead.
    site.open(
        &browser,
        &server,
        "<script>delete Navigator.prototype.sendBeacon;</script>",
        &[&ad],
    )
    .await;

    let reports = site.wait_for(&ad, 1).await;
    assert_measurable_first(&reports, &ad);
    // Hidden well before the second ends, however slow the machine is to minimize.
    tokio::time::sleep(Duration::from_millis(300)).await;
    browser.hide().await;
    let reports = site.wait_for(&ad, 2).await;
    let hidden = &reports[1];
    assert_eq!(hidden.kinds(), Vec::<String>::new(), "{hidden:?}");
    assert!(hidden.in_view_ms() < 1000, "{hidden:?}");
    assert_eq!(hidden.max_visible(), 100);
    assert_eq!(hidden.content_type, "application/x-www-form-urlencoded");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(site.reports(&ad).len(), 2, "{:#?}", site.reports(&ad));
    assert_totals(
        &server,
        &campaign,
        json!({"measurable_impressions": 1, "viewable_impressions": 0}),
    )
    .await;

    // Shown again: a whole second from then.
    let shown = Instant::now();
    browser.show().await;
    let reports = site.wait_for(&ad, 3).await;
    let viewable = &reports[2];
    assert_eq!(viewable.kinds(), ["viewable"], "{viewable:?}");
    assert!(viewable.in_view_ms() >= 1000, "{viewable:?}");
    assert!(viewable.at - shown >= Duration::from_millis(950));
    site.assert_accepted(&ad).await;
    assert_totals(
        &server,
        &campaign,
        json!({"measurable_impressions": 1, "viewable_impressions": 1}),
    )
    .await;
}

/// Dispatches the creative's engagement event `kind` on the element `id`.
async fn engage(browser: &Browser, id: &str, kind: &str) {
    browser
        .eval(&format!(
            "document.getElementById('{id}').dispatchEvent(\
             new CustomEvent('adevents:engage', {{detail: '{kind}'}})); return true;"
        ))
        .await;
}

#[tokio::test]
async fn a_creatives_play_and_a_hover_are_engagements_and_other_kinds_are_not() {
    let (server, campaign, secret, site, browser) = setup().await;
    let ad = Ad::new(&campaign, &secret, "ad", IN_VIEW);
    site.open(&browser, &server, "", &[&ad]).await;
    let reports = site.wait_for(&ad, 2).await;
    assert_eq!(reports[1].kinds(), ["viewable"], "{:?}", reports[1]);

    // Kinds the creative may not send, and a play sent twice.
    for kind in ["play", "dance", "hover", "viewable", "play"] {
        engage(&browser, "ad", kind).await;
    }
    let reports = site.wait_for(&ad, 3).await;
    assert_eq!(reports[2].kinds(), ["play"], "{:?}", reports[2]);
    // The pointer over the ad for more than half a second.
    browser.point_at("ad").await;
    let reports = site.wait_for(&ad, 4).await;
    assert_eq!(reports[3].kinds(), ["hover"], "{:?}", reports[3]);
    assert!(reports[3].in_view_ms() > reports[2].in_view_ms());

    site.assert_accepted(&ad).await;
    assert_totals(
        &server,
        &campaign,
        json!({"measurable_impressions": 1, "viewable_impressions": 1, "engaged_impressions": 1}),
    )
    .await;
    let record = exported(&server, &campaign, &ad).await;
    assert_eq!(record["engagements"], json!(["hover", "play"]), "{record}");
}

#[tokio::test]
async fn at_most_five_reports_the_fifth_kept_for_the_hidden_page() {
    let (server, campaign, secret, site, browser) = setup().await;
    let ad = Ad::new(&campaign, &secret, "ad", IN_VIEW);
    site.open(&browser, &server, "", &[&ad]).await;
    site.wait_for(&ad, 2).await;

    // Each a report of its own, 1 s apart, until one place is left.
    engage(&browser, "ad", "click").await;
    site.wait_for(&ad, 3).await;
    engage(&browser, "ad", "expand").await;
    site.wait_for(&ad, 4).await;
    engage(&browser, "ad", "play").await;
    engage(&browser, "ad", "pause").await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(site.reports(&ad).len(), 4, "the fifth place is kept");
    browser.hide().await;
    let reports = site.wait_for(&ad, 5).await;
    let kinds: Vec<Vec<String>> = reports.iter().map(Report::kinds).collect();
    assert_eq!(
        kinds,
        [
            vec!["measurable"],
            vec!["viewable"],
            vec!["click"],
            vec!["expand"],
            vec!["play", "pause"]
        ],
        "{reports:#?}"
    );
    let in_view: Vec<u64> = reports.iter().map(Report::in_view_ms).collect();
    assert!(in_view.is_sorted(), "{in_view:?}");
    // Shown, engaged and hidden again: no sixth report.
    browser.show().await;
    engage(&browser, "ad", "complete").await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    browser.hide().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(site.reports(&ad).len(), 5, "{:#?}", site.reports(&ad));

    site.assert_accepted(&ad).await;
    assert_totals(
        &server,
        &campaign,
        json!({"measurable_impressions": 1, "viewable_impressions": 1, "engaged_impressions": 1}),
    )
    .await;
    let record = exported(&server, &campaign, &ad).await;
    assert_eq!(
        record["engagements"],
        json!(["click", "expand", "pause", "play"]),
        "{record}"
    );
    assert_eq!(record["in_view_ms"], in_view[4], "{record}");
}

#[tokio::test]
async fn the_measurement_ends_with_a_last_report_and_nothing_after() {
    let (server, campaign, secret, site, browser) = setup().await;
    let ad = Ad::new(&campaign, &secret, "ad", IN_VIEW);
    // The page's clock runs the script's end (590 s) in 2.5 s.
    site.open(
        &browser,
        &server,
        "<script>(function(){var set=window.setTimeout;\
         window.setTimeout=function(f,ms){return set(f,ms>=590000?2500:ms)};})();</script>",
        &[&ad],
    )
    .await;

    let reports = site.wait_for(&ad, 3).await;
    assert_eq!(reports[1].kinds(), ["viewable"], "{:?}", reports[1]);
    let last = &reports[2];
    assert_eq!(last.kinds(), Vec::<String>::new(), "{last:?}");
    assert!(last.in_view_ms() > reports[1].in_view_ms(), "{last:?}");
    engage(&browser, "ad", "play").await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    browser.hide().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(site.reports(&ad).len(), 3, "{:#?}", site.reports(&ad));
    site.assert_accepted(&ad).await;
    assert_totals(
        &server,
        &campaign,
        json!({"viewable_impressions": 1, "engaged_impressions": 0}),
    )
    .await;
    // The pixel and the reports came from one browser: nothing invalid.
    let record = exported(&server, &campaign, &ad).await;
    assert_eq!(record["user_agent"], DESKTOP_CHROME, "{record}");
    assert_eq!(record["invalid"], Value::Null, "{record}");
}
