//! Delivery against caps and freshness, as an ad server and a dashboard see them: `stop` within
//! a second of the capping impression, each billable window once, the campaign's own day, and
//! whether the numbers are final.

use crate::common::events::{Campaign, get, post_all};
use crate::common::{Backend, TestServer, clear_of_midnight, eventually, http};
use adevents::domain::time::Day;
use adevents::sealer::{Sealer, SealerOptions};
use adevents::settings::SettingsCache;
use chrono::{DateTime, Duration, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

async fn delivery(server: &TestServer, campaign: &Campaign) -> Value {
    let (status, body) = get(server, &format!("{}/delivery", campaign.path()), "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn configure(server: &TestServer, campaign: &Campaign, body: Value) {
    let response = http()
        .put(server.url(&campaign.path()))
        .json(&body)
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::OK);
}

/// `count` impressions of distinct users at `at`.
fn impressions(campaign: &Campaign, count: usize, at: DateTime<Utc>) -> Vec<Value> {
    (0..count)
        .map(|_| campaign.impression(Uuid::new_v4(), Uuid::new_v4(), at))
        .collect()
}

async fn caps_stop_a_campaign_within_a_second_and_count_each_billable_window_once(
    backend: Backend,
) {
    // Today's count decides `stop`: the whole test runs within one UTC day.
    clear_of_midnight(std::time::Duration::from_secs(180)).await;
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    configure(
        &server,
        &campaign,
        json!({"daily_cap": 1000, "total_cap": 2500}),
    )
    .await;
    let now = Utc::now();
    let billable = impressions(&campaign, 999, now);
    post_all(&server, "/v1/impressions", &billable, 500).await;
    // None of these is a new billable impression: the same ids again, the same users again
    // within their window, and a crawler.
    let again: Vec<Value> = billable[..100].to_vec();
    let same_window: Vec<Value> = billable[100..200]
        .iter()
        .map(|impression| {
            let mut copy = impression.clone();
            copy["impression_id"] = json!(Uuid::new_v4());
            copy
        })
        .collect();
    let bots: Vec<Value> = impressions(&campaign, 50, now)
        .into_iter()
        .map(|mut impression| {
            impression["user_agent"] = json!("Mozilla/5.0 (compatible; Googlebot/2.1)");
            impression
        })
        .collect();
    for batch in [&again, &same_window, &bots] {
        post_all(&server, "/v1/impressions", batch, 500).await;
    }

    let before = delivery(&server, &campaign).await;
    assert_eq!(before["today"]["billable_impressions"], 999, "{before}");
    assert_eq!(before["today"]["remaining"], 1, "{before}");
    assert_eq!(before["stop"], false, "{before}");
    assert_eq!(before["complete"], true, "{before}");

    post_all(
        &server,
        "/v1/impressions",
        &impressions(&campaign, 1, now),
        1,
    )
    .await;
    let capped = std::time::Instant::now();
    let mut last = delivery(&server, &campaign).await;
    while last["stop"] != true && capped.elapsed() < std::time::Duration::from_secs(1) {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        last = delivery(&server, &campaign).await;
    }
    assert_eq!(
        last["stop"],
        true,
        "not stopped {:?} after the 1,000th: {last}",
        capped.elapsed()
    );
    assert_eq!(last["today"]["remaining"], 0, "{last}");

    // Earlier days count towards the lifetime only: a raised daily cap lets it serve again
    // until the lifetime cap.
    let yesterday = now - Duration::days(1);
    post_all(
        &server,
        "/v1/impressions",
        &impressions(&campaign, 1499, yesterday),
        500,
    )
    .await;
    configure(&server, &campaign, json!({"daily_cap": 2000})).await;
    let raised = delivery(&server, &campaign).await;
    assert_eq!(raised["today"]["billable_impressions"], 1000, "{raised}");
    assert_eq!(raised["lifetime"]["billable_impressions"], 2499, "{raised}");
    assert_eq!(raised["lifetime"]["remaining"], 1, "{raised}");
    assert_eq!(raised["stop"], false, "{raised}");
    post_all(
        &server,
        "/v1/impressions",
        &impressions(&campaign, 1, yesterday),
        1,
    )
    .await;
    let spent = delivery(&server, &campaign).await;
    assert_eq!(spent["lifetime"]["remaining"], 0, "{spent}");
    assert_eq!(spent["lifetime"]["total_cap"], 2500, "{spent}");
    assert_eq!(spent["stop"], true, "{spent}");
}

async fn pace_and_today_follow_the_campaign_zone(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let zone = chrono_tz::Pacific::Kiritimati;
    configure(
        &server,
        &campaign,
        json!({"daily_cap": 1000, "tz": "Pacific/Kiritimati"}),
    )
    .await;
    let now = Utc::now();
    let local_today = now.with_timezone(&zone).date_naive();
    // UTC+14: the local day began at 10:00 UTC of the day before.
    let local_midnight = local_today
        .and_hms_opt(0, 0, 0)
        .expect("midnight")
        .and_utc()
        - Duration::hours(14);
    post_all(
        &server,
        "/v1/impressions",
        &impressions(&campaign, 100, now),
        100,
    )
    .await;
    // The minute before the local midnight is the local yesterday.
    let before_midnight = local_midnight - Duration::minutes(1);
    post_all(
        &server,
        "/v1/impressions",
        &impressions(&campaign, 50, before_midnight),
        50,
    )
    .await;

    let answer = delivery(&server, &campaign).await;

    assert_eq!(
        answer["today"]["day"],
        local_today.format("%Y-%m-%d").to_string(),
        "{answer}"
    );
    assert_eq!(answer["today"]["billable_impressions"], 100, "{answer}");
    assert_eq!(answer["lifetime"]["billable_impressions"], 150, "{answer}");
    assert_eq!(answer["lifetime"]["total_cap"], Value::Null, "{answer}");
    let as_of: DateTime<Utc> = answer["as_of"]
        .as_str()
        .expect("as_of")
        .parse()
        .expect("RFC 3339");
    let elapsed = (as_of - local_midnight).num_milliseconds() as f64 / 86_400_000.0;
    let expected = 100.0 / (1000.0 * elapsed);
    let pace = answer["today"]["pace"].as_f64().expect("a pace with a cap");
    assert!(
        (pace - expected).abs() <= expected * 1e-6,
        "{pace} vs {expected}"
    );
    let (_, settings) = get(&server, &campaign.path(), "").await;
    assert_eq!(settings["tz"], "Pacific/Kiritimati", "{settings}");
}

async fn a_campaign_without_caps_never_stops_and_bad_settings_are_refused(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();

    let answer = delivery(&server, &campaign).await;
    assert_eq!(answer["stop"], false, "{answer}");
    assert_eq!(answer["today"]["pace"], Value::Null, "{answer}");
    assert_eq!(answer["today"]["remaining"], Value::Null, "{answer}");
    assert_eq!(answer["lifetime"]["billable_impressions"], 0, "{answer}");

    for (body, field) in [
        (json!({"tz": "Mars/Olympus_Mons"}), "tz"),
        (json!({"total_cap": -1}), "total_cap"),
        (json!({"total_cap": "many"}), "total_cap"),
    ] {
        let response = http()
            .put(server.url(&campaign.path()))
            .json(&body)
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body}");
        let error: Value = response.json().await.expect("JSON");
        assert_eq!(error["error"]["errors"][0]["field"], field, "{error}");
    }
    let (status, error) = get(
        &server,
        &format!("{}/delivery", campaign.path()),
        "from=2026-01-01",
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
}

async fn freshness_lists_this_process_and_the_days_sealed(backend: Backend) {
    let server = backend.server().await;

    let (status, answer) = get(&server, "/v1/freshness", "").await;

    assert_eq!(status, StatusCode::OK, "{answer}");
    let as_of: DateTime<Utc> = answer["as_of"]
        .as_str()
        .expect("as_of")
        .parse()
        .expect("time");
    let processes = answer["processes"].as_array().expect("processes");
    let recent = processes.iter().any(|process| {
        process["last_report_at"]
            .as_str()
            .and_then(|at| at.parse::<DateTime<Utc>>().ok())
            .is_some_and(|at| as_of - at < Duration::seconds(5))
    });
    assert!(recent, "this server reports every second: {answer}");
    if let Some(day) = answer["sealed_through"].as_str() {
        let day: chrono::NaiveDate = day.parse().expect("a date");
        assert!(day < as_of.date_naive(), "{answer}");
    }
    assert!(answer["late_days"].as_u64().is_some(), "{answer}");
    // A day is sealed once its last impression's view reports can have come: --tag-ttl (1 h)
    // plus --view-window (10 min) past its end, later than --rollup-grace (1 h), plus 5 s.
    assert_eq!(answer["seal_delay_seconds"], 3600 + 600 + 5, "{answer}");
}

/// A day sealed between two answers of another server counts once in each: first from the
/// taking server's live rows, then from its sealed total, never from neither (the sealer
/// deletes the live rows, and the asking server holds the sealed totals it read before).
async fn a_day_sealed_between_two_answers_is_counted_in_both(backend: Backend) {
    clear_of_midnight(std::time::Duration::from_secs(60)).await;
    let store = backend.store().await;
    let taking = TestServer::start(Arc::clone(&store)).await;
    let asked = TestServer::start(Arc::clone(&store)).await;
    let campaign = Campaign::fresh();
    let now = Utc::now();
    let closed = now - Duration::days(3);
    post_all(
        &taking,
        "/v1/impressions",
        &impressions(&campaign, 30, closed),
        30,
    )
    .await;
    post_all(
        &taking,
        "/v1/impressions",
        &impressions(&campaign, 20, now),
        20,
    )
    .await;
    let lifetime = |answer: &Value| answer["lifetime"]["billable_impressions"].clone();
    let seen = eventually(std::time::Duration::from_secs(5), || async {
        lifetime(&delivery(&asked, &campaign).await) == 50
    })
    .await;
    assert!(seen, "the other server's live rows are read");

    let settings = Arc::new(SettingsCache::new(
        store.clone(),
        std::time::Duration::from_secs(10),
    ));
    Sealer::new(
        store,
        settings,
        SealerOptions::default(),
        Default::default(),
    )
    .seal_campaign_day(campaign.key(), Day::new(closed.date_naive()))
    .await
    .expect("sealed");
    let after = delivery(&asked, &campaign).await;
    assert_eq!(lifetime(&after), 50, "{after}");
    assert_eq!(after["today"]["billable_impressions"], 20, "{after}");
}

conformance!(
    a_day_sealed_between_two_answers_is_counted_in_both,
    caps_stop_a_campaign_within_a_second_and_count_each_billable_window_once,
    pace_and_today_follow_the_campaign_zone,
    a_campaign_without_caps_never_stops_and_bad_settings_are_refused,
    freshness_lists_this_process_and_the_days_sealed,
);
