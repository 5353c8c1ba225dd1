//! `GET /v1/sites/{site}/uniques`: exact visits and accurate unique visitors for every feature
//! combination, by month, ISO week and day, however often a beacon is re-sent and through
//! however many servers.

use crate::common::beacons::{fresh_site, october, send_visits, uniques, within_accuracy};
use crate::common::process::{ServerProcess, adevents, embedded_server};
use crate::common::{Backend, TestServer, cassandra_nodes, eventually, http, shared_keyspace};
use adevents::beacons::rebuild::rebuild_site_day;
use adevents::domain::beacon::SiteId;
use adevents::domain::time::Day;
use adevents::query::FanOut;
use adevents::settings::SettingsCache;
use adevents::simulate::traffic::SimulatedVisit;
use chrono::{DateTime, Datelike};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

conformance!(
    a_generated_month_agrees_with_exact_counts_for_every_combination,
    re_sent_beacons_and_a_second_server_never_inflate_counts,
    days_are_cut_in_the_query_time_zone,
    bad_queries_name_the_parameter,
    sketches_lost_in_a_crash_are_rebuilt_from_the_stored_beacons,
);

type Filter = Vec<(&'static str, String)>;

/// Every subset of a visit's two features.
fn filters_of(visit: &SimulatedVisit) -> Vec<Filter> {
    let features = visit.features();
    (0..4u8)
        .map(|mask| {
            features
                .iter()
                .enumerate()
                .filter(|(bit, _)| mask & (1 << bit) != 0)
                .map(|(_, (name, value))| (*name, (*value).to_owned()))
                .collect()
        })
        .collect()
}

/// The label of the UTC period holding `timestamp`, as docs/API.md writes it.
fn period(granularity: &str, timestamp: i64) -> String {
    let day = DateTime::from_timestamp(timestamp, 0)
        .expect("valid time")
        .date_naive();
    match granularity {
        "month" => day.format("%Y-%m").to_string(),
        "week" => format!("{}-W{:02}", day.iso_week().year(), day.iso_week().week()),
        _ => day.format("%Y-%m-%d").to_string(),
    }
}

/// Exact (visits, distinct guids) per filter, granularity and period, computed here from the
/// generated visits.
fn exact(visits: &[SimulatedVisit]) -> BTreeMap<(Filter, &'static str, String), (u64, u64)> {
    let mut sets: BTreeMap<(Filter, &'static str, String), (u64, HashSet<&str>)> = BTreeMap::new();
    // Identical beacons (same guid, second and features) are one visit.
    let distinct: HashSet<&SimulatedVisit> = visits.iter().collect();
    for visit in distinct {
        for filter in filters_of(visit) {
            for granularity in ["month", "week", "day"] {
                let key = (
                    filter.clone(),
                    granularity,
                    period(granularity, visit.timestamp),
                );
                let entry = sets.entry(key).or_default();
                entry.0 += 1;
                entry.1.insert(&visit.guid);
            }
        }
    }
    sets.into_iter()
        .map(|(key, (visits, guids))| (key, (visits, guids.len() as u64)))
        .collect()
}

fn october_query(granularity: &str, filter: &Filter) -> Vec<(String, String)> {
    let mut query = vec![
        ("from".to_owned(), "2018-10-01".to_owned()),
        ("to".to_owned(), "2018-10-31".to_owned()),
        ("granularity".to_owned(), granularity.to_owned()),
    ];
    query.extend(
        filter
            .iter()
            .map(|(name, value)| (format!("feature.{name}"), value.clone())),
    );
    query
}

/// Every disagreement between the served rows and the exact counts.
async fn mismatches(base: &str, site: &str, visits: &[SimulatedVisit]) -> Vec<String> {
    let expected = exact(visits);
    let filters: HashSet<Filter> = expected
        .keys()
        .map(|(filter, _, _)| filter.clone())
        .collect();
    let mut problems = Vec::new();
    for filter in &filters {
        for granularity in ["month", "week", "day"] {
            let answer = uniques(base, site, &october_query(granularity, filter)).await;
            let rows = answer["rows"].as_array().expect("rows");
            let expected_rows = match granularity {
                "month" => 1,
                "week" => 5,
                _ => 31,
            };
            if rows.len() != expected_rows {
                problems.push(format!("{filter:?} {granularity}: {} rows", rows.len()));
            }
            for row in rows {
                let label = row["period"].as_str().expect("period").to_owned();
                let (visits, guids) = expected
                    .get(&(filter.clone(), granularity, label.clone()))
                    .copied()
                    .unwrap_or((0, 0));
                let served_visits = row["visits"].as_u64().expect("visits");
                let served_uniques = row["unique_visitors"].as_u64().expect("uniques");
                if served_visits != visits || !within_accuracy(served_uniques, guids) {
                    problems.push(format!(
                        "{filter:?} {label}: served {served_visits} visits / {served_uniques} uniques, exact {visits} / {guids}"
                    ));
                }
            }
        }
    }
    problems
}

/// Asks until the served counts agree (sketches reach the store about a second after their
/// beacons) or 40 s pass; returns the last disagreements.
async fn mismatches_until_agreed(base: &str, site: &str, visits: &[SimulatedVisit]) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    loop {
        let problems = mismatches(base, site, visits).await;
        if problems.is_empty() || tokio::time::Instant::now() >= deadline {
            return problems;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn a_generated_month_agrees_with_exact_counts_for_every_combination(backend: Backend) {
    let server = backend.server().await;
    let site = fresh_site();
    let visits = october(300, 3000, 42);

    send_visits(&server.url(""), &site, &visits).await;

    let base = server.url("");
    let last = mismatches_until_agreed(&base, &site, &visits).await;
    assert!(
        last.is_empty(),
        "{} mismatches: {:#?}",
        last.len(),
        &last[..last.len().min(20)]
    );
}

/// The month and its days, with no filter and with one feature fixed.
async fn snapshot(base: &str, site: &str) -> Vec<Value> {
    let mut answers = Vec::new();
    for filter in [vec![], vec![("feature1", "facebook.com".to_owned())]] {
        for granularity in ["month", "day"] {
            let answer = uniques(base, site, &october_query(granularity, &filter)).await;
            answers.push(json!([answer["total"], answer["rows"]]));
        }
    }
    answers
}

async fn settled(base: &str, site: &str, visits: &[SimulatedVisit]) {
    let guids = visits
        .iter()
        .map(|v| v.guid.as_str())
        .collect::<HashSet<_>>()
        .len() as u64;
    let counted = eventually(Duration::from_secs(20), || async {
        let all = uniques(base, site, &october_query("total", &vec![])).await;
        all["total"]["visits"] == visits.iter().collect::<HashSet<_>>().len()
            && within_accuracy(all["total"]["unique_visitors"].as_u64().unwrap_or(0), guids)
    })
    .await;
    assert!(counted, "the beacons were not all counted");
    // One more flush period, so every sketch of the last beacons is stored.
    tokio::time::sleep(Duration::from_millis(1500)).await;
}

async fn re_sent_beacons_and_a_second_server_never_inflate_counts(backend: Backend) {
    let first = backend.server().await;
    let second = backend.server().await;
    let site = fresh_site();
    let visits = october(200, 1000, 7);

    send_visits(&first.url(""), &site, &visits).await;
    settled(&first.url(""), &site, &visits).await;
    let once = snapshot(&first.url(""), &site).await;
    send_visits(&first.url(""), &site, &visits).await;
    send_visits(&second.url(""), &site, &visits).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let thrice_through_two = snapshot(&first.url(""), &site).await;
    let asked_elsewhere = snapshot(&second.url(""), &site).await;

    assert_eq!(once, thrice_through_two);
    assert_eq!(once, asked_elsewhere);
}

async fn days_are_cut_in_the_query_time_zone(backend: Backend) {
    let server = backend.server().await;
    let site = crate::common::beacons::registered_site(&server.url("")).await;
    let client = http();
    // 2026-11-01 18:10 and 18:50 UTC: 23:40 on the 1st and 00:20 on the 2nd in Kolkata (+05:30).
    for (guid, timestamp) in [("a", "1793556600"), ("b", "1793559000")] {
        let response = client
            .post(server.url("/track"))
            .form(&[
                ("site", site.as_str()),
                ("guid", guid),
                ("timestamp", timestamp),
            ])
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
    }
    let query = |tz: &str| {
        vec![
            ("from".to_owned(), "2026-11-01".to_owned()),
            ("to".to_owned(), "2026-11-02".to_owned()),
            ("tz".to_owned(), tz.to_owned()),
            ("granularity".to_owned(), "day".to_owned()),
        ]
    };
    let base = server.url("");
    let counted = eventually(Duration::from_secs(10), || async {
        uniques(&base, &site, &query("UTC")).await["total"]["unique_visitors"] == 2
    })
    .await;
    assert!(counted);

    let kolkata = uniques(&base, &site, &query("Asia/Kolkata")).await;
    let utc = uniques(&base, &site, &query("UTC")).await;

    let visits = |answer: &Value| -> Vec<u64> {
        answer["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .map(|row| row["visits"].as_u64().expect("visits"))
            .collect()
    };
    assert_eq!(visits(&kolkata), [1, 1], "{kolkata}");
    assert_eq!(visits(&utc), [2, 0], "{utc}");
    assert_eq!(
        kolkata["total"],
        json!({"visits": 2, "unique_visitors": 2, "invalid_visits": 0})
    );
    assert_eq!(kolkata["tz"], "Asia/Kolkata");
}

async fn bad_queries_name_the_parameter(backend: Backend) {
    let server = backend.server().await;
    let client = http();
    let cases = [
        (
            "/v1/sites/ok/uniques?from=2018-10-01&to=2018-10-31&granularity=year",
            "granularity",
        ),
        ("/v1/sites/ok/uniques?from=2018-10-01", "to"),
        (
            "/v1/sites/ok/uniques?from=2018-10-01&to=2018-10-31&feature.bad%20name=x",
            "feature.bad name",
        ),
        (
            "/v1/sites/ok/uniques?from=2018-10-01&to=2018-10-31&colour=red",
            "colour",
        ),
        (
            "/v1/sites/not%20ok/uniques?from=2018-10-01&to=2018-10-31",
            "site",
        ),
    ];
    for (path, field) in cases {
        let response = client.get(server.url(path)).send().await.expect("answered");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{path}");
        let body: Value = response.json().await.expect("JSON");
        assert_eq!(body["error"]["errors"][0]["field"], field, "{body}");
    }
}

async fn sketches_lost_in_a_crash_are_rebuilt_from_the_stored_beacons(backend: Backend) {
    let store = backend.store().await;
    // A server that never gets to store its sketches, then stops without its last flush: a
    // crash, as far as the sketches are concerned.
    let crashing = TestServer::with_options(std::sync::Arc::clone(&store), {
        let mut options = crate::common::test_options();
        options.service.sketch_flush_interval = Duration::from_secs(3600);
        options
    })
    .await;
    // Past the flusher's first (immediate) tick.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let site = fresh_site();
    let visits: Vec<SimulatedVisit> = october(50, 300, 3)
        .into_iter()
        .filter(|visit| visit.timestamp < 1_538_438_400) // 2018-10-01 and -02 only
        .collect();
    let guids = visits
        .iter()
        .map(|v| v.guid.as_str())
        .collect::<HashSet<_>>()
        .len() as u64;
    send_visits(&crashing.url(""), &site, &visits).await;
    crashing.crash();
    let server = TestServer::start(std::sync::Arc::clone(&store)).await;
    let total = || async {
        uniques(&server.url(""), &site, &october_query("total", &vec![])).await["total"].clone()
    };
    let before = total().await;

    let settings = SettingsCache::new(store.clone(), Duration::from_secs(10));
    let site_id = SiteId::parse(&site).expect("valid site");
    let mut rebuilt = 0;
    for day in ["2018-10-01", "2018-10-02"] {
        let day = Day::new(day.parse().expect("date"));
        // In parts of about 8 KiB of combinations each (several passes a day): together
        // they rebuild what one pass would.
        rebuilt += rebuild_site_day(
            store.as_ref(),
            &settings,
            (&site_id, day),
            (FanOut { concurrency: 8 }, 8 * 1024),
        )
        .await
        .expect("rebuilt");
    }
    let after = total().await;

    let distinct = visits.iter().collect::<HashSet<_>>().len() as u64;
    assert_eq!(rebuilt as u64, distinct);
    assert_eq!(
        before["visits"], distinct,
        "visits come from the stored beacons: {before}"
    );
    assert!(
        before["unique_visitors"].as_u64().unwrap_or(0) < guids,
        "the crash lost the sketches: {before}"
    );
    assert_eq!(after["visits"], distinct);
    let served = after["unique_visitors"].as_u64().expect("uniques");
    assert!(
        within_accuracy(served, guids),
        "{after} against {guids} guids"
    );
}

/// Two real server processes on one Cassandra keyspace: beacons split between them, re-sent
/// through both, and one of them stopped (SIGTERM) right after answering, count exactly once.
#[tokio::test]
async fn two_server_processes_on_one_keyspace_count_like_one() {
    let keyspace = shared_keyspace();
    let nodes = cassandra_nodes().join(",");
    let start = || {
        ServerProcess::start(adevents(
            &[
                "serve",
                "--store",
                "cassandra",
                "--listen",
                "127.0.0.1:0",
                "--keyspace",
                keyspace.as_str(),
                "--cassandra-nodes",
                &nodes,
            ],
            &[],
        ))
    };
    let mut first = start().await;
    let second = start().await;
    let site = fresh_site();
    let visits = october(200, 1000, 11);
    let (odd, even): (Vec<SimulatedVisit>, Vec<SimulatedVisit>) = visits
        .iter()
        .cloned()
        .enumerate()
        .partition(|(index, _)| index % 2 == 1)
        .into_iter_pair();

    send_visits(&first.url(""), &site, &odd).await;
    send_visits(&second.url(""), &site, &even).await;
    send_visits(&first.url(""), &site, &even).await;
    // Stopped before its next flush: its last sketches are stored on the way out.
    first.send_signal("TERM");
    let status = first.wait(Duration::from_secs(30)).await;
    assert!(status.success(), "{}", first.output());

    let base = second.url("");
    let last = mismatches_until_agreed(&base, &site, &visits).await;
    assert!(
        last.is_empty(),
        "{} mismatches: {:#?}",
        last.len(),
        &last[..last.len().min(20)]
    );
}

/// One embedded server process stopped (SIGTERM) right after answering beacons it had not yet
/// flushed (its flush interval is a minute, so only the last flush on the way out stores
/// them): a restart on the same folder counts every visitor. A clean stop leaves the list of
/// processes, so no repair recounts them from the stored beacons: the count is the last
/// flush's.
#[tokio::test]
async fn beacons_answered_right_before_a_sigterm_are_counted_after_a_restart() {
    let folder = tempfile::tempdir().expect("temp dir");
    let data_dir = folder.path().to_str().expect("UTF-8 path");
    let start = || embedded_server(data_dir, &["--sketch-flush-interval", "60s"], &[]);
    let mut first = ServerProcess::start(start()).await;
    let site = fresh_site();
    let now = chrono::Utc::now();
    let visitors = 300;
    let pages = ["/a", "/b", "/c"];
    let visits: Vec<SimulatedVisit> = (0..visitors)
        .map(|n| SimulatedVisit {
            guid: format!("visitor-{n}"),
            timestamp: now.timestamp(),
            referer: "google.com".to_owned(),
            page: pages[n % pages.len()].to_owned(),
        })
        .collect();
    send_visits(&first.url(""), &site, &visits).await;
    first.send_signal("TERM");
    let status = first.wait(Duration::from_secs(30)).await;
    assert!(status.success(), "{}", first.output());

    let second = ServerProcess::start(start()).await;
    let day = now.date_naive().to_string();
    let query = |page: Option<&str>| {
        let mut query = vec![
            ("from".to_owned(), day.clone()),
            ("to".to_owned(), day.clone()),
            ("granularity".to_owned(), "day".to_owned()),
        ];
        query.extend(page.map(|page| ("feature.feature2".to_owned(), page.to_owned())));
        query
    };
    let answer = uniques(&second.url(""), &site, &query(None)).await;
    assert_eq!(answer["total"]["unique_visitors"], visitors, "{answer}");
    let answer = uniques(&second.url(""), &site, &query(Some("/b"))).await;
    assert_eq!(
        answer["total"]["unique_visitors"],
        visitors / pages.len(),
        "{answer}"
    );
}

/// Splits enumerated pairs back into two vectors of values.
trait IntoIterPair<T> {
    fn into_iter_pair(self) -> (Vec<T>, Vec<T>);
}

impl<T> IntoIterPair<T> for (Vec<(usize, T)>, Vec<(usize, T)>) {
    fn into_iter_pair(self) -> (Vec<T>, Vec<T>) {
        (
            self.0.into_iter().map(|(_, value)| value).collect(),
            self.1.into_iter().map(|(_, value)| value).collect(),
        )
    }
}
