//! Rollups of closed days: a summary gives the same answer from raw events, from sealed
//! rollups, and after a late event for a sealed day (read raw until the day is sealed again),
//! and `adevents rollup` seals days from the command line. A click that changes what a sealed
//! day counts (an earlier first click, a valid click of an invalid first one) has it read raw
//! until it is sealed again.

use crate::common::events::{Campaign, at, post_all, summary};
use crate::common::process::{ServerProcess, adevents, embedded_server, run_to_end};
use crate::common::{Backend, cassandra_nodes, eventually, http, migrated_store, shared_keyspace};
use adevents::domain::time::Day;
use adevents::sealer::{Sealer, SealerOptions};
use adevents::settings::SettingsCache;
use adevents::simulate::traffic::SimulatedVisit;
use adevents::store::Store;
use chrono::{Duration, DurationRound, Utc};
use serde_json::Value;
use std::sync::Arc;
use uuid::Uuid;

conformance!(
    a_click_moved_by_a_late_earlier_first_click_leaves_its_old_day_on_reseal,
    a_valid_click_today_makes_the_invalid_first_click_of_a_sealed_day_count,
    the_same_events_give_the_same_summary_raw_sealed_and_after_a_late_event,
    the_same_beacons_give_the_same_uniques_raw_sealed_and_after_a_late_beacon,
);

const CRAWLER: &str = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";

/// Between them, these read every level of users sketches a rollup keeps: whole UTC days
/// (UTC rows, and the inner days of a Kolkata range) and hours (the days New York and
/// Kathmandu rows cut, and a Kolkata range's edges), for the campaign and per ad.
const QUERIES: [&str; 6] = [
    "from=2026-10-01&to=2026-10-03&group_by=day&tz=America/New_York",
    "from=2026-10-01&to=2026-10-03&group_by=hour&tz=Asia/Kathmandu",
    "from=2026-10-01&to=2026-10-03&group_by=ad",
    "from=2026-10-01&to=2026-10-03&group_by=ad&tz=Asia/Kolkata",
    "from=2026-10-01&to=2026-10-03&group_by=day",
    "from=2026-10-01&to=2026-10-03&tz=Asia/Kolkata",
];

fn days() -> Vec<Day> {
    [
        "2026-09-30",
        "2026-10-01",
        "2026-10-02",
        "2026-10-03",
        "2026-10-04",
    ]
    .iter()
    .map(|day| Day::new(day.parse().expect("date")))
    .collect()
}

async fn answers(server: &crate::common::TestServer, campaign: &Campaign) -> Vec<Value> {
    let mut all = Vec::new();
    for query in QUERIES {
        all.push(summary(server, campaign, query).await);
    }
    all
}

/// The answers without `sealed_days`, which says where they came from.
fn counts(answers: &[Value]) -> Vec<Value> {
    answers
        .iter()
        .map(|answer| {
            let mut answer = answer.clone();
            answer
                .as_object_mut()
                .expect("object")
                .remove("sealed_days");
            answer
        })
        .collect()
}

fn sealed_days(answers: &[Value]) -> Vec<u64> {
    answers
        .iter()
        .map(|answer| answer["sealed_days"].as_u64().expect("sealed_days"))
        .collect()
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

async fn seal_all(store: &Arc<dyn Store>, campaign: &Campaign) {
    // The events just posted marked their (long closed) days late; a seal is taken as current
    // once its read started more than the clock margin after the latest mark.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let sealer = sealer(store);
    for day in days() {
        sealer
            .seal_campaign_day(campaign.key(), day)
            .await
            .expect("sealed");
    }
}

async fn the_same_events_give_the_same_summary_raw_sealed_and_after_a_late_event(backend: Backend) {
    let store = backend.store().await;
    let server = crate::common::TestServer::start(Arc::clone(&store)).await;
    let campaign = Campaign::fresh();
    let ads: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
    let users: Vec<Uuid> = (0..40).map(|_| Uuid::new_v4()).collect();
    let (mut impressions, mut clicks) = (Vec::new(), Vec::new());
    let mut ids = Vec::new();
    for i in 0..240i64 {
        let id = Uuid::new_v4();
        let when =
            at("2026-10-01T02:00:00Z") + Duration::minutes(i * 17) + Duration::seconds(i % 7);
        let mut event = campaign.impression(id, ads[(i % 3) as usize], when);
        event["user_id"] = Value::String(users[(i % 40) as usize].to_string());
        impressions.push(event);
        if i % 9 == 0 {
            clicks.push(campaign.click(id, ads[(i % 3) as usize], when + Duration::minutes(3)));
        }
        ids.push((id, when));
    }
    post_all(&server, "/v1/impressions", &impressions, 100).await;
    post_all(&server, "/v1/clicks", &clicks, 100).await;

    let raw = answers(&server, &campaign).await;
    seal_all(&store, &campaign).await;
    let sealed = answers(&server, &campaign).await;
    // A late impression and a late first click for a sealed day (October is long closed).
    let (clicked_id, clicked_at) = ids[5];
    post_all(
        &server,
        "/v1/impressions",
        &[campaign.impression(Uuid::new_v4(), ads[0], at("2026-10-02T12:00:00Z"))],
        1,
    )
    .await;
    post_all(
        &server,
        "/v1/clicks",
        &[campaign.click(clicked_id, ads[2], clicked_at + Duration::minutes(1))],
        1,
    )
    .await;
    let late = answers(&server, &campaign).await;
    seal_all(&store, &campaign).await;
    let resealed = answers(&server, &campaign).await;

    assert_eq!(sealed_days(&raw), [0; QUERIES.len()]);
    assert!(
        sealed_days(&sealed).iter().all(|n| *n >= 3),
        "{:?}",
        sealed_days(&sealed)
    );
    assert_eq!(
        counts(&raw),
        counts(&sealed),
        "a sealed day answers like its raw events"
    );
    assert_eq!(
        late[2]["totals"]["impressions"].as_u64(),
        raw[2]["totals"]["impressions"].as_u64().map(|n| n + 1),
        "the late impression is counted at once: {}",
        late[2]["totals"]
    );
    assert_eq!(
        late[2]["totals"]["clicks"].as_u64(),
        raw[2]["totals"]["clicks"].as_u64().map(|n| n + 1),
        "the late first click is counted at once: {}",
        late[2]["totals"]
    );
    assert!(
        sealed_days(&late)
            .iter()
            .zip(sealed_days(&sealed))
            .all(|(late, sealed)| *late < sealed),
        "days with a late event are read raw until sealed again"
    );
    assert_eq!(
        counts(&late),
        counts(&resealed),
        "re-sealing keeps the answer"
    );
    assert_eq!(sealed_days(&resealed), sealed_days(&sealed));
}

/// A click counts at its impression's first click; a late click with an earlier time moves
/// that count to its own day, and re-sealing the old day must drop it there.
async fn a_click_moved_by_a_late_earlier_first_click_leaves_its_old_day_on_reseal(
    backend: Backend,
) {
    let store = backend.store().await;
    let server = crate::common::TestServer::start(Arc::clone(&store)).await;
    let campaign = Campaign::fresh();
    let (id, ad) = (Uuid::new_v4(), Uuid::new_v4());
    post_all(
        &server,
        "/v1/impressions",
        &[campaign.impression(id, ad, at("2026-10-01T10:00:00Z"))],
        1,
    )
    .await;
    post_all(
        &server,
        "/v1/clicks",
        &[campaign.click(id, ad, at("2026-10-02T10:00:00Z"))],
        1,
    )
    .await;
    seal_all(&store, &campaign).await;
    let query = "from=2026-10-01&to=2026-10-02";
    let before = summary(&server, &campaign, query).await;
    post_all(
        &server,
        "/v1/clicks",
        &[campaign.click(id, ad, at("2026-10-01T11:00:00Z"))],
        1,
    )
    .await;
    seal_all(&store, &campaign).await;
    let after = summary(&server, &campaign, query).await;

    let clicks = |answer: &Value| -> Vec<u64> {
        answer["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|row| row["clicks"].as_u64().expect("clicks"))
            .collect()
    };
    assert_eq!(clicks(&before), [0, 1], "{before}");
    assert_eq!(clicks(&after), [1, 0], "{after}");
    assert_eq!(after["totals"]["clicks"], 1, "{after}");
    assert_eq!(after["sealed_days"], 2, "{after}");
}

/// A click counts once, at its impression's first click, and as valid if any of its clicks
/// is: a valid click of today changes the count of the day its invalid first click was
/// sealed in, which is read raw again until it is sealed again.
async fn a_valid_click_today_makes_the_invalid_first_click_of_a_sealed_day_count(backend: Backend) {
    let store = backend.store().await;
    let server = crate::common::TestServer::start(Arc::clone(&store)).await;
    let campaign = Campaign::fresh();
    let (id, ad) = (Uuid::new_v4(), Uuid::new_v4());
    // Mid-morning two days back, so that the click a minute later is on the same day.
    let served = (Utc::now() - Duration::days(2))
        .duration_trunc(Duration::days(1))
        .expect("a day")
        + Duration::hours(10);
    let day = Day::new(served.date_naive());
    post_all(
        &server,
        "/v1/impressions",
        &[campaign.impression(id, ad, served)],
        1,
    )
    .await;
    let mut crawler_click = campaign.click(id, ad, served + Duration::minutes(1));
    crawler_click["user_agent"] = Value::from(CRAWLER);
    post_all(&server, "/v1/clicks", &[crawler_click], 1).await;
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    sealer(&store)
        .seal_campaign_day(campaign.key(), day)
        .await
        .expect("sealed");
    let query = format!("from={}&to={}", served.date_naive(), served.date_naive());
    let sealed = summary(&server, &campaign, &query).await;
    assert_eq!(sealed["sealed_days"], 1, "{sealed}");
    assert_eq!(sealed["totals"]["clicks"], 0, "{sealed}");
    assert_eq!(sealed["totals"]["invalid_clicks"], 1, "{sealed}");

    let person_click = campaign.click(id, ad, Utc::now() - Duration::seconds(10));
    post_all(&server, "/v1/clicks", &[person_click], 1).await;
    let raw = summary(&server, &campaign, &query).await;
    assert_eq!(raw["sealed_days"], 0, "read raw again: {raw}");
    assert_eq!(raw["totals"]["clicks"], 1, "{raw}");
    assert_eq!(raw["totals"]["invalid_clicks"], 0, "{raw}");

    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    sealer(&store)
        .seal_campaign_day(campaign.key(), day)
        .await
        .expect("sealed");
    let resealed = summary(&server, &campaign, &query).await;
    assert_eq!(resealed["sealed_days"], 1, "{resealed}");
    assert_eq!(counts(&[resealed]), counts(&[raw]));
}

fn uniques_queries() -> Vec<Vec<(String, String)>> {
    let query = |granularity: &str, tz: &str, filter: Option<(&str, &str)>| {
        let mut query = vec![
            ("from".to_owned(), "2018-10-01".to_owned()),
            ("to".to_owned(), "2018-10-31".to_owned()),
            ("granularity".to_owned(), granularity.to_owned()),
            ("tz".to_owned(), tz.to_owned()),
        ];
        if let Some((name, value)) = filter {
            query.push((format!("feature.{name}"), value.to_owned()));
        }
        query
    };
    vec![
        query("month", "UTC", None),
        query("week", "UTC", Some(("feature1", "facebook.com"))),
        query("day", "Asia/Kolkata", Some(("feature2", "/index.html"))),
    ]
}

async fn uniques_answers(base: &str, site: &str) -> Vec<Value> {
    let mut all = Vec::new();
    for query in uniques_queries() {
        all.push(crate::common::beacons::uniques(base, site, &query).await);
    }
    all
}

async fn seal_site(store: &Arc<dyn Store>, site: &str) {
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let sealer = sealer(store);
    let site = adevents::domain::beacon::SiteId::parse(site).expect("valid site");
    let first = Day::new("2018-09-30".parse().expect("date"));
    for day in first.through(Day::new("2018-11-01".parse().expect("date"))) {
        sealer.seal_site_day(&site, day).await.expect("sealed");
    }
}

async fn the_same_beacons_give_the_same_uniques_raw_sealed_and_after_a_late_beacon(
    backend: Backend,
) {
    let store = backend.store().await;
    let server = crate::common::TestServer::start(Arc::clone(&store)).await;
    let base = server.url("");
    let site = crate::common::beacons::fresh_site();
    let visits = crate::common::beacons::october(120, 1500, 21);
    crate::common::beacons::send_visits(&base, &site, &visits).await;
    // Every live sketch stored (the flush runs about every second).
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;

    let raw = uniques_answers(&base, &site).await;
    seal_site(&store, &site).await;
    let sealed = uniques_answers(&base, &site).await;
    let late = SimulatedVisit {
        guid: "a-late-visitor".into(),
        timestamp: 1_539_000_000, // 2018-10-08T12:00:00Z
        referer: "facebook.com".into(),
        page: "/index.html".into(),
    };
    crate::common::beacons::send_visits(&base, &site, std::slice::from_ref(&late)).await;
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let after_late = uniques_answers(&base, &site).await;
    seal_site(&store, &site).await;
    let resealed = uniques_answers(&base, &site).await;

    assert_eq!(sealed_days(&raw), [0, 0, 0]);
    assert_eq!(sealed_days(&sealed), [31, 31, 32]);
    assert_eq!(
        counts(&raw),
        counts(&sealed),
        "a sealed day answers like its beacons"
    );
    for (before, after) in sealed.iter().zip(&after_late) {
        assert_eq!(
            after["total"]["visits"].as_u64(),
            before["total"]["visits"].as_u64().map(|n| n + 1),
            "the late beacon counts at once: {after}"
        );
        assert_eq!(
            after["total"]["unique_visitors"].as_u64(),
            before["total"]["unique_visitors"].as_u64().map(|n| n + 1),
            "and so does its new visitor: {after}"
        );
    }
    assert_eq!(sealed_days(&after_late), [30, 30, 31]);
    assert_eq!(
        counts(&after_late),
        counts(&resealed),
        "re-sealing keeps the answer"
    );
    assert_eq!(sealed_days(&resealed), sealed_days(&sealed));
}

/// `adevents rollup` seals a campaign's closed days; an open day is refused.
#[tokio::test]
async fn the_rollup_command_seals_closed_days_and_refuses_open_ones() {
    let store: Arc<dyn Store> = Arc::new(migrated_store().await);
    let server = crate::common::TestServer::start(Arc::clone(&store)).await;
    let campaign = Campaign::fresh();
    let events: Vec<Value> = (0..10)
        .map(|i| {
            campaign.impression(
                Uuid::new_v4(),
                Uuid::new_v4(),
                at("2026-10-05T10:00:00Z") + Duration::minutes(i),
            )
        })
        .collect();
    post_all(&server, "/v1/impressions", &events, 10).await;
    // Past the clock margin after the late marks these (long closed) events wrote.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let keyspace = shared_keyspace();
    let nodes = cassandra_nodes().join(",");
    let advertiser = campaign.advertiser_id.to_string();
    let campaign_id = campaign.campaign_id.to_string();
    let command = |from: &str, to: &str| {
        adevents(
            &[
                "rollup",
                "--store",
                "cassandra",
                "--keyspace",
                keyspace.as_str(),
                "--cassandra-nodes",
                &nodes,
                "--advertiser",
                &advertiser,
                "--campaign",
                &campaign_id,
                "--from",
                from,
                "--to",
                to,
            ],
            &[],
        )
    };

    let (sealed, output) = run_to_end(command("2026-10-04", "2026-10-06")).await;
    let today = chrono::Utc::now().date_naive().to_string();
    // A range that reaches today is refused whole: none of its closed days is sealed first.
    let (open, open_output) = run_to_end(command("2026-10-04", &today)).await;
    let answer = summary(&server, &campaign, "from=2026-10-05&to=2026-10-05").await;

    assert!(sealed.success(), "{output}");
    assert!(output.contains("sealed 2026-10-05"), "{output}");
    assert_eq!(answer["sealed_days"], 1, "{answer}");
    assert_eq!(answer["totals"]["impressions"], 10, "{answer}");
    assert!(!open.success(), "{open_output}");
    assert!(open_output.contains("is not closed yet"), "{open_output}");
    assert!(!open_output.contains("sealed "), "{open_output}");
}

/// The server seals closed days by itself: the real binary with a short grace and interval,
/// events for two past days, and summaries that come to be answered from both rollups with
/// the same counts.
#[tokio::test]
async fn the_background_sealer_seals_closed_days_by_itself() {
    let folder = tempfile::tempdir().expect("a temporary folder");
    let data_dir = folder.path().display().to_string();
    let extra = ["--rollup-grace", "1s", "--seal-interval", "2s"];
    let server = ServerProcess::start(embedded_server(&data_dir, &extra, &[])).await;
    let campaign = Campaign::fresh();
    let today = Utc::now().date_naive();
    let days = [today - Duration::days(3), today - Duration::days(2)];
    let events: Vec<Value> = days
        .iter()
        .flat_map(|day| {
            let noon = day.and_hms_opt(12, 0, 0).expect("valid").and_utc();
            (0..25).map(move |i| noon + Duration::minutes(i))
        })
        .map(|at| campaign.impression(Uuid::new_v4(), Uuid::new_v4(), at))
        .collect();
    let response = http()
        .post(server.url("/v1/impressions"))
        .json(&Value::Array(events))
        .send()
        .await
        .expect("ingest answered");
    assert_eq!(response.status(), reqwest::StatusCode::OK);

    let url = server.url(&format!(
        "{}/summary?from={}&to={}&group_by=day",
        campaign.path(),
        days[0],
        days[1]
    ));
    let summary = || async {
        let response = http().get(&url).send().await.expect("summary answered");
        response.json::<Value>().await.expect("JSON")
    };
    let sealed = eventually(std::time::Duration::from_secs(60), || async {
        summary().await["sealed_days"] == 2
    })
    .await;
    assert!(
        sealed,
        "not sealed: {}\n{}",
        summary().await,
        server.output()
    );
    let answer = summary().await;
    assert_eq!(answer["totals"]["impressions"], 50, "{answer}");
    let per_day: Vec<u64> = answer["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| row["impressions"].as_u64().expect("impressions"))
        .collect();
    assert_eq!(per_day, [25, 25]);
}
