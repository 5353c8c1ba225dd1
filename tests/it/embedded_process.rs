//! The embedded store as an operator meets it: data kept across restarts, nothing
//! acknowledged lost to a kill -9, and a second process on the same folder refused.

use crate::common::events::Campaign;
use crate::common::http;
use crate::common::process::{ServerProcess, embedded_server, run_to_end};
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;
use uuid::Uuid;

async fn start(data_dir: &str) -> ServerProcess {
    start_with(data_dir, "always").await
}

async fn start_with(data_dir: &str, fsync: &str) -> ServerProcess {
    ServerProcess::start(embedded_server(data_dir, &["--fsync", fsync], &[])).await
}

/// Posts `count` impressions of `campaign` on 2026-10-03, in batches of 100, each acknowledged.
async fn ingest(server: &ServerProcess, campaign: &Campaign, count: usize) {
    let start = chrono::DateTime::parse_from_rfc3339("2026-10-03T00:00:00Z")
        .expect("valid")
        .with_timezone(&chrono::Utc);
    let events: Vec<Value> = (0..count)
        .map(|i| {
            campaign.impression(
                Uuid::new_v4(),
                Uuid::new_v4(),
                start + chrono::Duration::seconds(i as i64),
            )
        })
        .collect();
    for chunk in events.chunks(100) {
        let response = http()
            .post(server.url("/v1/impressions"))
            .json(&chunk)
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), StatusCode::OK);
    }
}

async fn summary(server: &ServerProcess, campaign: &Campaign) -> Value {
    let url = server.url(&format!(
        "{}/summary?from=2026-10-01&to=2026-10-05",
        campaign.path()
    ));
    let response = http().get(url).send().await.expect("answered");
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.expect("JSON")
}

#[tokio::test]
async fn a_restart_on_the_same_folder_answers_the_same_summary() {
    let folder = tempfile::tempdir().expect("temp dir");
    let data_dir = folder.path().to_str().expect("UTF-8 path");
    let campaign = Campaign::fresh();
    let mut first = start(data_dir).await;
    ingest(&first, &campaign, 500).await;
    let before = summary(&first, &campaign).await;
    first.send_signal("TERM");
    assert!(
        first.wait(Duration::from_secs(30)).await.success(),
        "{}",
        first.output()
    );

    let second = start(data_dir).await;
    let after = summary(&second, &campaign).await;

    assert_eq!(before["totals"]["impressions"], 500);
    assert_eq!(after, before);
}

#[tokio::test]
async fn a_kill_9_right_after_a_200_loses_nothing_acknowledged() {
    killed_right_after_acknowledging("always").await;
}

/// `--fsync never` still hands every batch to the OS before answering: a process crash
/// (not a machine crash) loses nothing.
#[tokio::test]
async fn without_fsync_a_kill_9_still_loses_nothing_acknowledged() {
    killed_right_after_acknowledging("never").await;
}

async fn killed_right_after_acknowledging(fsync: &str) {
    let folder = tempfile::tempdir().expect("temp dir");
    let data_dir = folder.path().to_str().expect("UTF-8 path");
    let campaign = Campaign::fresh();
    let mut victim = start_with(data_dir, fsync).await;
    ingest(&victim, &campaign, 1000).await;
    victim.send_signal("KILL");
    victim.wait(Duration::from_secs(30)).await;

    let survivor = start(data_dir).await;
    let after = summary(&survivor, &campaign).await;

    assert_eq!(after["totals"]["impressions"], 1000, "{after}");
}

#[tokio::test]
async fn a_second_process_on_the_same_folder_is_refused() {
    let folder = tempfile::tempdir().expect("temp dir");
    let data_dir = folder.path().to_str().expect("UTF-8 path");
    let _owner = start(data_dir).await;

    let (status, output) = run_to_end(embedded_server(data_dir, &["--fsync", "always"], &[])).await;

    assert!(!status.success());
    assert!(
        output.contains("in use by another adevents process"),
        "{output}"
    );
}
