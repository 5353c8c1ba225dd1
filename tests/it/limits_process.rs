//! Limits only a whole server process shows, on the real binary: its memory under beacons with
//! fresh feature values, its repair after a kill -9, its background sealer on a backfill, and
//! its readiness when the embedded store cannot write.

use crate::common::beacons::{register_site, within_accuracy};
use crate::common::events::Campaign;
use crate::common::process::{ServerProcess, adevents};
use crate::common::{
    Backend, cassandra_nodes, eventually, http, private_keyspace, shared_keyspace,
};
use adevents::store::cassandra::config::KeyspaceName;
use chrono::{Duration, Utc};
use futures::{StreamExt, stream};
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Instant;
use uuid::Uuid;

conformance!(
    beacons_with_fresh_feature_values_keep_the_sketches_within_their_memory_budget,
    a_kill_9_after_beacons_ten_days_old_is_repaired_before_the_restart_is_ready,
    a_backfilled_month_a_year_ago_is_sealed_by_the_background_sealer_alone,
);

/// Where a process of `backend` keeps its data: a fresh folder, or the shared keyspace.
struct Place {
    args: Vec<String>,
    _folder: Option<tempfile::TempDir>,
}

impl Place {
    fn new(backend: Backend) -> Self {
        Self::with_keyspace(backend, shared_keyspace)
    }

    /// A place no other test's process uses: a fresh folder, or a keyspace of its own. For
    /// tests whose answer another process would change by doing its job (a sealer seals every
    /// marked day of its keyspace, whoever's it is).
    fn isolated(backend: Backend, purpose: &str) -> Self {
        Self::with_keyspace(backend, || private_keyspace(purpose))
    }

    /// `keyspace` is asked for on Cassandra only: a private keyspace is named once a test
    /// needs it.
    fn with_keyspace(backend: Backend, keyspace: impl FnOnce() -> KeyspaceName) -> Self {
        match backend {
            Backend::Embedded => {
                let folder = tempfile::tempdir().expect("a temporary folder");
                let args = ["--store", "embedded", "--fsync", "never", "--data-dir"]
                    .map(str::to_owned)
                    .into_iter()
                    .chain([folder.path().display().to_string()])
                    .collect();
                Self {
                    args,
                    _folder: Some(folder),
                }
            }
            Backend::Cassandra => Self {
                args: vec![
                    "--store".into(),
                    "cassandra".into(),
                    "--keyspace".into(),
                    keyspace().to_string(),
                    "--cassandra-nodes".into(),
                    cassandra_nodes().join(","),
                ],
                _folder: None,
            },
        }
    }

    async fn start(&self, extra: &[&str]) -> ServerProcess {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
        args.extend(self.args.iter().map(String::as_str));
        args.extend(extra);
        ServerProcess::start(adevents(&args, &[])).await
    }
}

/// `GET /v1/sites/{site}/uniques` for one UTC day, with a feature filter.
async fn uniques_of(server: &ServerProcess, site: &str, day: &str, filter: &str) -> Value {
    let response = http()
        .get(server.url(&format!(
            "/v1/sites/{site}/uniques?from={day}&to={day}{filter}"
        )))
        .send()
        .await
        .expect("answered");
    let status = response.status();
    let answer: Value = response.json().await.expect("JSON");
    assert_eq!(status, StatusCode::OK, "{answer}");
    answer
}

async fn beacons_with_fresh_feature_values_keep_the_sketches_within_their_memory_budget(
    backend: Backend,
) {
    const BUDGET_MIB: f64 = 16.0;
    const BEACONS: usize = 20_000;
    let place = Place::new(backend);
    // No seal pass in its minutes on the shared keyspace: it would seal other tests' days.
    let server = place
        .start(&[
            "--sketch-memory",
            "16MiB",
            "--rate-limit-beacons",
            "off",
            "--seal-interval",
            "1h",
        ])
        .await;
    let site = format!("site-{}.test", Uuid::new_v4().simple());
    register_site(&server.url(""), &site).await;
    // Settled after start-up: the baseline the sketches are measured against.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let baseline = server.rss_mib();
    let now = Utc::now().timestamp();
    let url = server.url("/track");
    let client = http();
    // Three features, two of them fresh in every beacon: six new sketches per beacon, about
    // 120,000 in all, far more than 16 MiB holds.
    let mut sends = stream::iter(0..BEACONS)
        .map(|n| {
            let body = format!(
                "site={site}&guid=visitor-{n}&timestamp={now}&page=/p/{n}&ref=r{n}.example&campaign=c{}",
                n % 10
            );
            let (client, url) = (client.clone(), url.clone());
            async move {
                // A beacon refused while the flusher catches up (503) is sent again, as a
                // page's script would on its next view; nothing else may fail.
                loop {
                    let status = client
                        .post(&url)
                        .header("content-type", "application/x-www-form-urlencoded")
                        .body(body.clone())
                        .send()
                        .await
                        .expect("answered")
                        .status();
                    if status != StatusCode::SERVICE_UNAVAILABLE {
                        return status;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        })
        .buffer_unordered(32);
    let mut peak = baseline;
    let mut sent = 0;
    while let Some(status) = sends.next().await {
        assert_eq!(status, StatusCode::NO_CONTENT);
        sent += 1;
        if sent % 500 == 0 {
            peak = peak.max(server.rss_mib());
        }
    }
    peak = peak.max(server.rss_mib());
    // The budget, a quarter over it while the flusher catches up, and room for the allocator
    // and the requests in flight.
    let allowed = baseline + BUDGET_MIB * 1.25 + 64.0;
    assert!(
        peak <= allowed,
        "peak resident {peak:.0} MiB against {baseline:.0} MiB at start and {allowed:.0} allowed"
    );
    // Counts are unchanged by the evictions: each sketch was stored before it was dropped.
    // The last flush of this load takes a while (every beacon made new sketches): an answer
    // holds what was acknowledged up to then.
    // The beacons' day, though the load may have run past midnight.
    let day = chrono::DateTime::from_timestamp(now, 0)
        .expect("a time")
        .date_naive()
        .to_string();
    let counts_right = || async {
        let all = uniques_of(&server, &site, &day, "").await;
        let one_campaign = uniques_of(&server, &site, &day, "&feature.campaign=c3").await;
        let visitors = |answer: &Value| answer["total"]["unique_visitors"].as_u64();
        all["total"]["visits"] == BEACONS
            && visitors(&all).is_some_and(|served| within_accuracy(served, BEACONS as u64))
            && one_campaign["total"]["visits"] == BEACONS / 10
            && visitors(&one_campaign)
                .is_some_and(|served| within_accuracy(served, BEACONS as u64 / 10))
    };
    let right = eventually(std::time::Duration::from_secs(60), counts_right).await;
    assert!(
        right,
        "{} {}",
        uniques_of(&server, &site, &day, "").await,
        uniques_of(&server, &site, &day, "&feature.campaign=c3").await
    );
    for n in [0, 7_777, BEACONS - 1] {
        let one_page = uniques_of(&server, &site, &day, &format!("&feature.page=/p/{n}")).await;
        assert_eq!(one_page["total"]["visits"], 1, "{one_page}");
        assert_eq!(one_page["total"]["unique_visitors"], 1, "{one_page}");
    }
}

async fn a_kill_9_after_beacons_ten_days_old_is_repaired_before_the_restart_is_ready(
    backend: Backend,
) {
    // Its own keyspace: another test's sealer would seal the marked day before the query.
    let place = Place::isolated(backend, "repair");
    // Sketches never flushed and days never sealed while the test runs: only the start-up
    // repair can make the counts right.
    let flags = ["--sketch-flush-interval", "1h", "--seal-interval", "1h"];
    let mut crashing = place.start(&flags).await;
    let site = format!("site-{}.test", Uuid::new_v4().simple());
    register_site(&crashing.url(""), &site).await;
    let day = Utc::now().date_naive() - Duration::days(10);
    let noon = day
        .and_hms_opt(12, 0, 0)
        .expect("valid")
        .and_utc()
        .timestamp();
    for n in 0..30 {
        let response = http()
            .get(crashing.url(&format!(
                "/track?site={site}&guid=visitor-{n}&timestamp={}",
                noon + n
            )))
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), StatusCode::OK);
    }
    crashing.send_signal("KILL");
    crashing.wait(std::time::Duration::from_secs(10)).await;

    let restarted = place.start(&flags).await;
    let started = Instant::now();
    let mut not_ready = 0;
    loop {
        let response = http()
            .get(restarted.url("/readyz"))
            .send()
            .await
            .expect("answered");
        if response.status() == StatusCode::OK {
            // Ready only once the repair is done (it logs before it lets readiness go).
            assert!(
                restarted.output().contains("repaired the live state"),
                "ready before the repair:\n{}",
                restarted.output()
            );
            break;
        }
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        not_ready += 1;
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "never ready:\n{}",
            restarted.output()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    if backend == Backend::Cassandra {
        // The crashed process reported a moment ago: the new one watches it fall silent first.
        assert!(
            not_ready > 0,
            "ready at once, before watching the crashed process"
        );
    }
    let answer = uniques_of(&restarted, &site, &day.to_string(), "").await;
    assert_eq!(
        answer["sealed_days"], 0,
        "answered from the repaired sketches: {answer}"
    );
    assert_eq!(answer["total"]["visits"], 30, "{answer}");
    assert_eq!(answer["total"]["unique_visitors"], 30, "{answer}");
    drop(restarted);
}

async fn a_backfilled_month_a_year_ago_is_sealed_by_the_background_sealer_alone(backend: Backend) {
    // Its own keyspace: a sealer every 2 seconds on the shared one would seal every test's
    // late days, changing their answers and loading the node for all.
    let place = Place::isolated(backend, "backfill");
    // The look-back stays the default 7 days: only the late index can find these days.
    let server = place.start(&["--seal-interval", "2s"]).await;
    let campaign = Campaign::fresh();
    let site = format!("site-{}.test", Uuid::new_v4().simple());
    register_site(&server.url(""), &site).await;
    let first = Utc::now().date_naive() - Duration::days(400);
    let days: Vec<chrono::NaiveDate> = (0..30).map(|n| first + Duration::days(n)).collect();
    let impressions: Vec<Value> = days
        .iter()
        .flat_map(|day| {
            let noon = day.and_hms_opt(12, 0, 0).expect("valid").and_utc();
            (0..3).map(move |n| noon + Duration::minutes(n))
        })
        .map(|at| campaign.impression(Uuid::new_v4(), Uuid::new_v4(), at))
        .collect();
    let response = http()
        .post(server.url("/v1/impressions"))
        .json(&impressions)
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::OK);
    for (n, day) in days.iter().enumerate() {
        let at = day
            .and_hms_opt(9, 0, 0)
            .expect("valid")
            .and_utc()
            .timestamp();
        for visitor in 0..2 {
            let response = http()
                .get(server.url(&format!(
                    "/track?site={site}&guid=v{n}-{visitor}&timestamp={at}"
                )))
                .send()
                .await
                .expect("answered");
            assert_eq!(response.status(), StatusCode::OK);
        }
    }
    let (from, to) = (days[0], days[29]);
    let summary_url = server.url(&format!(
        "{}/summary?from={from}&to={to}&group_by=none",
        campaign.path()
    ));
    let uniques_url = server.url(&format!("/v1/sites/{site}/uniques?from={from}&to={to}"));
    let answer = |url: String| async move {
        http()
            .get(url)
            .send()
            .await
            .expect("answered")
            .json::<Value>()
            .await
            .expect("JSON")
    };
    let sealed = eventually(std::time::Duration::from_secs(120), || async {
        answer(summary_url.clone()).await["sealed_days"] == 30
            && answer(uniques_url.clone()).await["sealed_days"] == 30
    })
    .await;
    assert!(
        sealed,
        "not sealed: {} {}\n{}",
        answer(summary_url.clone()).await,
        answer(uniques_url.clone()).await,
        server.output()
    );
    let summary = answer(summary_url).await;
    assert_eq!(summary["totals"]["impressions"], 90, "{summary}");
    let uniques = answer(uniques_url).await;
    assert_eq!(uniques["total"]["visits"], 60, "{uniques}");
    assert_eq!(uniques["total"]["unique_visitors"], 60, "{uniques}");
    drop(server);
}

/// Runs `prlimit` on a running process: lowers its file-size limit.
fn limit_file_size(pid: u32, bytes: u64) {
    let status = std::process::Command::new("prlimit")
        .args([format!("--pid={pid}"), format!("--fsize={bytes}:")])
        .status()
        .expect("run prlimit (util-linux)");
    assert!(status.success(), "prlimit failed");
}

/// An embedded store whose journal can no longer be written (here: the process's file-size
/// limit, lowered under the journal's next write) answers writes 503 and turns `/readyz` 503,
/// and the process lives on.
#[tokio::test]
async fn an_embedded_store_that_cannot_write_its_journal_is_not_ready() {
    let place = Place::new(Backend::Embedded);
    let server = place.start(&[]).await;
    let ready = http()
        .get(server.url("/readyz"))
        .send()
        .await
        .expect("answered");
    assert_eq!(ready.status(), StatusCode::OK);
    limit_file_size(server.pid(), 1_000_000);
    let campaign = Campaign::fresh();
    let noon = (Utc::now() - Duration::days(1))
        .date_naive()
        .and_hms_opt(12, 0, 0)
        .expect("valid")
        .and_utc();
    let mut refused = false;
    for _ in 0..40 {
        let batch: Vec<Value> = (0..500)
            .map(|_| {
                let mut impression = campaign.impression(Uuid::new_v4(), Uuid::new_v4(), noon);
                impression["user_data"] = serde_json::json!({"padding": "x".repeat(200)});
                impression
            })
            .collect();
        let response = http()
            .post(server.url("/v1/impressions"))
            .json(&batch)
            .send()
            .await
            .expect("answered");
        if response.status() == StatusCode::SERVICE_UNAVAILABLE {
            assert!(response.headers().contains_key("retry-after"));
            refused = true;
            break;
        }
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert!(refused, "the journal passed 1 MB without a failed write");
    let response = http()
        .get(server.url("/readyz"))
        .send()
        .await
        .expect("the process is still there");
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        server
            .output()
            .contains("the last write to the data folder failed"),
        "{}",
        server.output()
    );
}
