//! General invalid traffic: impressions, clicks and beacons from crawlers, prefetches and
//! denied addresses are stored with their reason and counted apart, never as valid, in raw
//! and in sealed days alike; an event stored more than once is valid if any copy is.

use crate::common::beacons::{register_site, uniques};
use crate::common::events::{Campaign, export_records, post, summary};
use crate::common::tags::{
    click_query, create_secret, fire_pixel, follow_click, pixel_query, signed,
};
use crate::common::{Backend, TestServer, http, test_options};
use adevents::domain::time::Day;
use adevents::sealer::{Sealer, SealerOptions};
use adevents::settings::SettingsCache;
use chrono::{DateTime, Duration, DurationRound, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

conformance!(invalid_traffic_is_counted_apart_raw_and_sealed_and_exported_with_its_reason);

const BROWSER: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";
const CRAWLER: &str = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";
const HEADLESS: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/131.0.0.0 Safari/537.36";

fn impression(campaign: &Campaign, id: Uuid, at: DateTime<Utc>, extra: Value) -> Value {
    let mut event = campaign.impression(id, Uuid::new_v4(), at);
    if let (Some(event), Some(extra)) = (event.as_object_mut(), extra.as_object()) {
        event.extend(extra.clone());
    }
    event
}

async fn the_counts(server: &TestServer, campaign: &Campaign, site: &str, range: &str) -> Value {
    let totals = summary(server, campaign, &format!("{range}&group_by=none")).await;
    let (from, to) = range
        .split_once('&')
        .map(|(from, to)| {
            (
                from.trim_start_matches("from="),
                to.trim_start_matches("to="),
            )
        })
        .expect("a range");
    let visits = uniques(
        &server.url(""),
        site,
        &[
            ("from".to_owned(), from.to_owned()),
            ("to".to_owned(), to.to_owned()),
            ("granularity".to_owned(), "total".to_owned()),
        ],
    )
    .await;
    json!({"totals": totals["totals"], "visits": visits["total"]})
}

async fn invalid_traffic_is_counted_apart_raw_and_sealed_and_exported_with_its_reason(
    backend: Backend,
) {
    let mut options = test_options();
    // Pixels dated three days ago still count, and one documentation range is denied.
    options.edge.tag_ttl = std::time::Duration::from_secs(5 * 24 * 3600);
    options.service.ivt_deny_cidrs = vec!["198.51.100.0/24".parse().expect("a CIDR")];
    let store = backend.store().await;
    let server = TestServer::with_options(Arc::clone(&store), options).await;
    let campaign = Campaign::fresh();
    let secret = create_secret(&server, campaign.advertiser_id).await;
    let served = Utc::now().duration_trunc(Duration::days(1)).expect("a day") - Duration::days(3)
        + Duration::hours(10);
    let day = served.date_naive();
    let ids: Vec<Uuid> = (0..6).map(|_| Uuid::new_v4()).collect();

    // An ad server posts three: a browser's, a crawler's, one from a denied address.
    let posted = json!([
        impression(&campaign, ids[0], served, json!({"user_agent": BROWSER})),
        impression(&campaign, ids[1], served, json!({"user_agent": CRAWLER})),
        impression(
            &campaign,
            ids[2],
            served,
            json!({"user_ip": "198.51.100.7"})
        ),
    ]);
    let (status, body) = post(&server, "/v1/impressions", &posted).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Pixels: a prefetch; a prefetch and then the render (valid: one copy is); a headless
    // browser.
    let pixel = |id: Uuid| {
        signed(
            &secret,
            &pixel_query(
                &campaign,
                id,
                Uuid::new_v4(),
                served.timestamp_millis(),
                &secret,
            ),
        )
    };
    let prefetch = [("user-agent", BROWSER), ("sec-purpose", "prefetch")];
    fire_pixel(&server, &pixel(ids[3]), &prefetch).await;
    let rendered = pixel(ids[4]);
    fire_pixel(
        &server,
        &rendered,
        &[("user-agent", BROWSER), ("purpose", "prefetch")],
    )
    .await;
    fire_pixel(&server, &rendered, &[("user-agent", BROWSER)]).await;
    fire_pixel(&server, &pixel(ids[5]), &[("user-agent", HEADLESS)]).await;
    // Clicks: the browser's impression clicked by a person, the denied one by a crawler.
    let click = campaign.click(ids[0], Uuid::new_v4(), served + Duration::minutes(1));
    let (status, body) = post(&server, "/v1/clicks", &click).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let link = signed(
        &secret,
        &click_query(
            &campaign,
            ids[2],
            Uuid::new_v4(),
            served.timestamp_millis(),
            "https://shop.example/",
            &secret,
        ),
    );
    let (status, _, body) = follow_click(&server, &link, &[("user-agent", CRAWLER)]).await;
    assert_eq!(status, StatusCode::FOUND, "{body}");
    // Beacons on that day: a person, a crawler, a prefetch.
    let site = format!("site-{}.test", Uuid::new_v4().simple());
    register_site(&server.url(""), &site).await;
    for (guid, headers) in [
        ("person", vec![("user-agent", BROWSER)]),
        ("crawler", vec![("user-agent", CRAWLER)]),
        (
            "prefetcher",
            vec![("user-agent", BROWSER), ("sec-purpose", "prefetch")],
        ),
    ] {
        let mut request = http()
            .post(server.url("/track"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!(
                "site={site}&guid={guid}&timestamp={}&referrer=news.example",
                served.timestamp()
            ));
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let response = request.send().await.expect("answered");
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
    }

    let today = Utc::now().date_naive();
    let range = format!("from={day}&to={today}");
    // Flushed live sketches first (about every second).
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let raw = the_counts(&server, &campaign, &site, &range).await;
    let totals = &raw["totals"];
    assert_eq!(totals["impressions"], 2, "{raw}");
    assert_eq!(totals["invalid_impressions"], 4, "{raw}");
    assert_eq!(totals["unique_users"], 2, "{raw}");
    assert_eq!(totals["billable_impressions"], 2, "{raw}");
    assert_eq!(totals["clicks"], 1, "{raw}");
    assert_eq!(totals["invalid_clicks"], 1, "{raw}");
    assert_eq!(raw["visits"]["visits"], 1, "{raw}");
    assert_eq!(raw["visits"]["unique_visitors"], 1, "{raw}");
    assert_eq!(raw["visits"]["invalid_visits"], 2, "{raw}");

    // Sealed: the same counts from the rollups.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let settings = SettingsCache::new(store.clone(), std::time::Duration::from_secs(10));
    let sealer = Sealer::new(
        Arc::clone(&store),
        Arc::new(settings),
        SealerOptions::default(),
        Default::default(),
    );
    let site_id = adevents::domain::beacon::SiteId::parse(&site).expect("site");
    for offset in 1..=3 {
        let closed = Day::new(today - Duration::days(offset));
        sealer
            .seal_campaign_day(campaign.key(), closed)
            .await
            .expect("sealed");
        sealer
            .seal_site_day(&site_id, closed)
            .await
            .expect("sealed");
    }
    let sealed = the_counts(&server, &campaign, &site, &range).await;
    assert_eq!(sealed, raw, "sealed against raw");
    let days = summary(&server, &campaign, &format!("{range}&group_by=none")).await;
    assert!(days["sealed_days"].as_u64().unwrap_or(0) >= 3, "{days}");

    // The export says who each impression came from and why it is invalid.
    let records = export_records(&server, &campaign, &format!("from={day}&to={day}")).await;
    let reason = |id: Uuid| records[&id.to_string()]["invalid"].clone();
    assert_eq!(records.len(), 6, "{records:?}");
    assert_eq!(reason(ids[0]), Value::Null);
    assert_eq!(reason(ids[1]), "bot_user_agent");
    assert_eq!(reason(ids[2]), "denied_address");
    assert_eq!(reason(ids[3]), "prefetch");
    assert_eq!(reason(ids[4]), Value::Null);
    assert_eq!(reason(ids[5]), "bot_user_agent");
    assert_eq!(records[&ids[0].to_string()]["user_agent"], BROWSER);
    assert_eq!(records[&ids[1].to_string()]["user_agent"], CRAWLER);
    assert_eq!(records[&ids[2].to_string()]["user_agent"], Value::Null);
}
