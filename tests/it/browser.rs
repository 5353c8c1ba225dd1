//! The browser side in a real headless Chromium ([`Browser`]): a page that includes `/t.js`
//! counts its page views, and the dashboard shows what the API answers.

use crate::common::beacons::{register_site, uniques};
use crate::common::browser::Browser;
use crate::common::events::{Campaign, get, post_all, summary};
use crate::common::tags::{create_secret, signed};
use crate::common::{Backend, create_key, eventually, test_options};
use axum::response::Html;
use chrono::{Duration, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

/// A customer's site on another origin: pages that include the tracker, served by a small
/// server of their own.
async fn customer_site(tracker: String, site: String) -> (String, tokio::task::JoinHandle<()>) {
    let page = move |title: &'static str| {
        let (tracker, site) = (tracker.clone(), site.clone());
        move || async move {
            Html(format!(
                "<!doctype html><html><head><title>{title}</title>\
                 <script defer src=\"{tracker}\" data-site=\"{site}\"></script></head>\
                 <body><h1>{title}</h1><a id=\"next\" href=\"/three.html\">next</a></body></html>"
            ))
        }
    };
    let app = axum::Router::new()
        .route("/one.html", axum::routing::get(page("one")))
        .route("/three.html", axum::routing::get(page("three")));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    // `localhost`, another origin than the adevents server's 127.0.0.1.
    (format!("http://localhost:{}", address.port()), task)
}

#[tokio::test]
async fn a_page_with_the_tracker_counts_its_views_and_one_visitor() {
    let server = Backend::Embedded.server().await;
    let site = format!("shop-{}.test", Uuid::new_v4().simple());
    register_site(&server.url(""), &site).await;
    let (origin, _pages) = customer_site(server.url("/t.js"), site.clone()).await;
    let browser = Browser::start().await;

    browser
        .client
        .goto(&format!(
            "{origin}/one.html?utm_source=newsletter&utm_campaign=autumn"
        ))
        .await
        .expect("page one loads");
    // A single-page navigation, then a full one.
    browser
        .eval("history.pushState({}, '', '/two'); return location.pathname;")
        .await;
    browser.click("next").await;
    browser
        .wait_for("return document.title;", &json!("three"))
        .await;

    let today = Utc::now().date_naive().to_string();
    let query = |filter: Option<(&str, &str)>| {
        let mut query = vec![
            ("from".to_owned(), today.clone()),
            ("to".to_owned(), today.clone()),
        ];
        if let Some((name, value)) = filter {
            query.push((format!("feature.{name}"), value.to_owned()));
        }
        query
    };
    let base = server.url("");
    let mut last = Value::Null;
    let counted = eventually(std::time::Duration::from_secs(15), || {
        let (base, site, query) = (&base, &site, query(None));
        async move { uniques(base, site, &query).await["total"]["visits"] == 3 }
    })
    .await;
    if !counted {
        last = uniques(&base, &site, &query(None)).await;
    }
    assert!(counted, "three page views: {last}");
    // Live sketches are stored about every second.
    let visitors = eventually(std::time::Duration::from_secs(5), || {
        let (base, site, query) = (&base, &site, query(None));
        async move { uniques(base, site, &query).await["total"]["unique_visitors"] == 1 }
    })
    .await;
    assert!(visitors, "one visitor");
    for (name, value, visits) in [
        ("page", "/one.html", 1),
        ("page", "/two", 1),
        ("page", "/three.html", 1),
        ("utm_source", "newsletter", 1),
        ("referrer", "direct", 1),
        ("referrer", "localhost", 2),
    ] {
        let answer = uniques(&base, &site, &query(Some((name, value)))).await;
        assert_eq!(
            answer["total"]["visits"], visits,
            "{name}={value}: {answer}"
        );
    }
    browser.client.clone().close().await.expect("closed");
}

/// The value the dashboard shows for `metric` in its totals.
fn shown(metric: &str) -> String {
    format!(
        "const cell = document.querySelector('#totals [data-metric=\"{metric}\"]'); \
         return cell ? Number(cell.getAttribute('data-value')) : null;"
    )
}

#[tokio::test]
async fn the_dashboard_shows_what_the_api_answers_and_says_what_went_wrong() {
    // Conversions decided a second after they arrive, not a minute.
    let mut options = test_options();
    options.service.attribution_delay = std::time::Duration::from_secs(1);
    let server = Backend::Embedded.server_with(options).await;
    let campaign = Campaign::fresh();
    let now = Utc::now();
    let yesterday = now - Duration::days(1);
    let mut events = Vec::new();
    for (index, at) in [now, yesterday, yesterday]
        .iter()
        .cycle()
        .take(60)
        .enumerate()
    {
        let mut impression = campaign.impression(Uuid::new_v4(), Uuid::new_v4(), *at);
        impression["user_data"] = json!({"segment": format!("<img src=x onerror=alert({index})>")});
        events.push(impression);
    }
    post_all(&server, "/v1/impressions", &events, 60).await;
    let clicks: Vec<Value> = events[..7]
        .iter()
        .map(|impression| {
            let mut click = impression.clone();
            if let Some(fields) = click.as_object_mut() {
                fields.remove("user_id");
                fields.remove("user_data");
            }
            click
        })
        .collect();
    post_all(&server, "/v1/clicks", &clicks, 7).await;
    // Four of today's impressions measured in the browser: three viewable, one engaged.
    let secret = create_secret(&server, campaign.advertiser_id).await;
    for (impression, measured) in events.iter().step_by(3).zip([
        "e=measurable,viewable&in_view_ms=1500",
        "e=viewable,click&in_view_ms=2500",
        "e=measurable,viewable&in_view_ms=1200",
        "e=measurable&in_view_ms=300",
    ]) {
        let query = format!(
            "a={}&c={}&ad={}&imp={}&u={}&t={}&k={}",
            impression["advertiser_id"].as_str().expect("an id"),
            impression["campaign_id"].as_str().expect("an id"),
            impression["ad_id"].as_str().expect("an id"),
            impression["impression_id"].as_str().expect("an id"),
            impression["user_id"].as_str().expect("an id"),
            now.timestamp_millis(),
            secret.id
        );
        let response = crate::common::anonymous_http()
            .post(server.url(&format!("/v?{}", signed(&secret, &query))))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(measured)
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), StatusCode::NO_CONTENT, "{measured}");
    }
    // Two of today's orders: one after the click on the first impression (post-click), one
    // after another of today's impressions, never clicked (post-view).
    let order = |id: &str, impression: &Value, named: &str, value: &str, currency: &str| {
        json!({
            "conversion_id": id,
            "advertiser_id": campaign.advertiser_id,
            "action": "purchase",
            "timestamp": now.to_rfc3339(),
            named: impression["impression_id"],
            "value": value,
            "currency": currency,
        })
    };
    let orders = [
        order("order-1", &events[0], "click_id", "1234.50", "EUR"),
        order("order-2", &events[9], "impression_id", "300", "JPY"),
    ];
    post_all(&server, "/v1/conversions", &orders, 2).await;
    let from = yesterday.date_naive().to_string();
    let to = now.date_naive().to_string();
    let conversions_path = format!("/v1/advertisers/{}/conversions", campaign.advertiser_id);
    let conversions_query = format!("from={from}&to={to}&tz=UTC&group_by=none");
    let decided = eventually(std::time::Duration::from_secs(30), || {
        let (server, path, query) = (&server, &conversions_path, &conversions_query);
        async move { get(server, path, query).await.1["totals"]["attributed"] == 2 }
    })
    .await;
    let (_, answer) = get(&server, &conversions_path, &conversions_query).await;
    assert!(decided, "two conversions attributed: {answer}");
    let range = format!("from={from}&to={to}&tz=UTC&group_by=none");
    let joined = eventually(std::time::Duration::from_secs(15), || {
        let (server, range) = (&server, &range);
        async move {
            summary(server, &campaign, range).await["totals"]["viewable_impressions"] == 3
        }
    })
    .await;
    let api = summary(&server, &campaign, &range).await;
    assert!(joined, "three viewable impressions: {api}");
    assert_eq!(
        (
            &api["totals"]["conversions"],
            &api["totals"]["conversion_value"]
        ),
        (&json!(2), &json!({"EUR": "1234.50", "JPY": "300"})),
        "{api}"
    );
    let read_key = create_key(
        &server,
        json!({"scope": "read", "advertiser_id": campaign.advertiser_id, "name": "dashboard"}),
    )
    .await
    .0;
    let browser = Browser::start().await;

    browser
        .client
        .goto(&server.url("/dashboard"))
        .await
        .expect("dashboard loads");
    browser.type_into("key", &read_key).await;
    browser.click("save-key").await;
    browser
        .eval("const kind = document.getElementById('kind'); kind.value = 'campaign'; kind.dispatchEvent(new Event('change')); return true;")
        .await;
    browser
        .type_into("advertiser", &campaign.advertiser_id.to_string())
        .await;
    browser
        .type_into("campaign", &campaign.campaign_id.to_string())
        .await;
    browser.type_into("from", &from).await;
    browser.type_into("to", &to).await;
    browser.type_into("tz", "UTC").await;
    browser.click("show").await;

    for metric in [
        "impressions",
        "clicks",
        "unique_users",
        "billable_impressions",
        "viewable_rate",
        "engaged_impressions",
        "conversions",
        "conversion_rate",
    ] {
        let expected = &api["totals"][metric];
        let value = browser.wait_for(&shown(metric), expected).await;
        assert_eq!(
            &value, expected,
            "{metric} in the dashboard against the API"
        );
    }
    let rate = browser
        .eval(
            "return document.querySelector('#totals [data-metric=\"viewable_rate\"]').textContent;",
        )
        .await;
    assert!(
        rate.as_str()
            .is_some_and(|text| text.contains("75") && text.ends_with('%')),
        "the viewable rate as a percentage: {rate}"
    );
    // A percentage's digits, whatever the browser's separators.
    let digits = |text: &str| -> String {
        assert!(text.ends_with('%'), "a percentage: {text}");
        text.chars().filter(char::is_ascii_digit).collect()
    };
    // One post-click conversion for seven clicks; the value as the API's exact strings.
    let (conversion_rate, conversion_value) = (
        browser
            .eval("return document.querySelector('#totals [data-metric=\"conversion_rate\"]').textContent;")
            .await,
        browser
            .eval("return document.querySelector('#totals [data-metric=\"conversion_value\"]').textContent;")
            .await,
    );
    assert_eq!(digits(conversion_rate.as_str().unwrap_or_default()), "1429");
    assert_eq!(conversion_value, json!("EUR 1234.50 · JPY 300"));
    // By day: yesterday measured nothing, so its viewable rate is "—", not 0 %; it converted
    // nothing of its four clicks (0 %) and has no value.
    let by_day: Vec<Vec<String>> = serde_json::from_value(
        browser
            .eval(
                "const heads = [...document.querySelectorAll('#rows thead th')].map((th) => th.textContent); \
                 const columns = ['Viewable rate', 'Engaged impressions', 'Conversions', 'Conversion rate', 'Conversion value'] \
                   .map((label) => heads.indexOf(label)); \
                 return [...document.querySelectorAll('#rows tbody tr')] \
                   .map((tr) => [tr.cells[0].textContent, ...columns.map((i) => tr.cells[i].textContent)]);",
            )
            .await,
    )
    .expect("rows of text");
    assert_eq!(by_day.len(), 2, "{by_day:?}");
    let (past, today) = (&by_day[0], &by_day[1]);
    assert_eq!(past[..4], [from.as_str(), "—", "0", "0"], "{by_day:?}");
    assert_eq!(digits(&past[4]), "000", "{by_day:?}");
    assert_eq!(past[5], "—", "{by_day:?}");
    assert!(
        today[1].contains("75") && today[1].ends_with('%'),
        "{by_day:?}"
    );
    assert_eq!(today[2..4], ["1", "2"], "{by_day:?}");
    // Both orders today, one of them post-click, for three clicks.
    assert_eq!(digits(&today[4]), "3333", "{by_day:?}");
    assert_eq!(today[5], "EUR 1234.50 · JPY 300", "{by_day:?}");
    // By ad: each order's value on its own ad's row.
    let mut by_ad: Vec<Vec<String>> = serde_json::from_value(
        browser
            .eval(
                "const heads = [...document.querySelectorAll('#ads thead th')].map((th) => th.textContent); \
                 const value = heads.indexOf('Conversion value'); \
                 return [...document.querySelectorAll('#ads tbody tr')] \
                   .map((tr) => [tr.cells[0].textContent, tr.cells[value].textContent]) \
                   .filter(([, shown]) => shown !== '—');",
            )
            .await,
    )
    .expect("rows of text");
    by_ad.sort();
    let mut expected: Vec<Vec<String>> = [(&events[0], "EUR 1234.50"), (&events[9], "JPY 300")]
        .iter()
        .map(|(impression, value)| {
            let ad = impression["ad_id"].as_str().expect("an id");
            vec![ad.to_owned(), (*value).to_owned()]
        })
        .collect();
    expected.sort();
    assert_eq!(by_ad, expected);
    // Hostile values stay text: nothing was injected into the page.
    let images = browser
        .eval("return document.querySelectorAll('img').length;")
        .await;
    assert_eq!(images, json!(0));
    if let Ok(path) = std::env::var("ADEVENTS_DASHBOARD_SCREENSHOT") {
        let png = browser.client.screenshot().await.expect("a screenshot");
        std::fs::write(&path, png).expect("the screenshot written");
    }

    // A site, with a key of its own.
    let site = format!("shop-{}.test", Uuid::new_v4().simple());
    register_site(&server.url(""), &site).await;
    for guid in ["a", "b", "a"] {
        let response = crate::common::anonymous_http()
            .post(server.url("/track"))
            .header(
                "User-Agent",
                "Mozilla/5.0 (X11; Linux x86_64) Firefox/133.0",
            )
            .json(&json!({"site": site, "guid": guid, "referrer": "news.example"}))
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
    }
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let site_key = create_key(&server, json!({"scope": "read", "site": site}))
        .await
        .0;
    let day_query = vec![
        ("from".to_owned(), from.clone()),
        ("to".to_owned(), to.clone()),
        ("tz".to_owned(), "UTC".to_owned()),
    ];
    let site_api = uniques(&server.url(""), &site, &day_query).await;
    browser.click("forget-key").await;
    browser.type_into("key", &site_key).await;
    browser.click("save-key").await;
    browser
        .eval("const kind = document.getElementById('kind'); kind.value = 'site'; kind.dispatchEvent(new Event('change')); return true;")
        .await;
    browser.type_into("site", &site).await;
    browser.type_into("from", &from).await;
    browser.type_into("to", &to).await;
    browser.click("show").await;
    for metric in ["visits", "unique_visitors"] {
        let expected = &site_api["total"][metric];
        let value = browser.wait_for(&shown(metric), expected).await;
        // What the page said, should it show nothing: a failed request is worded there.
        let status = browser
            .eval("return document.getElementById('status').textContent;")
            .await;
        assert_eq!(
            &value, expected,
            "{metric} in the dashboard against the API; the page's status line: {status}"
        );
    }

    // A wrong key is told in words.
    browser.click("forget-key").await;
    browser.type_into("key", "adk_not-a-key-at-all").await;
    browser.click("save-key").await;
    browser.click("show").await;
    let status = browser
        .wait_for(
            "return document.getElementById('status').textContent.includes('401');",
            &json!(true),
        )
        .await;
    let text = browser
        .eval("return document.getElementById('status').textContent;")
        .await;
    assert_eq!(status, json!(true), "the status says 401: {text}");
    browser.client.clone().close().await.expect("closed");
}
