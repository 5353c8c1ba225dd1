//! Delivery across server processes on one Cassandra keyspace: what one process acknowledged
//! is counted by the other within a second, and a process killed with -9 makes `complete`
//! false until a starting process repairs its counts; a user's billable window counted by both
//! processes counts once as soon as the window has closed, or as soon as one of them stops.

use crate::common::events::Campaign;
use crate::common::process::{ServerProcess, adevents};
use crate::common::{cassandra_nodes, eventually, http, private_keyspace};
use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;
use uuid::Uuid;

async fn start(keyspace: &str) -> ServerProcess {
    let nodes = cassandra_nodes().join(",");
    let server = ServerProcess::start(adevents(
        &[
            "serve",
            "--store",
            "cassandra",
            "--listen",
            "127.0.0.1:0",
            "--keyspace",
            keyspace,
            "--cassandra-nodes",
            &nodes,
        ],
        &[],
    ))
    .await;
    assert!(server.wait_ready().await, "{}", server.output());
    server
}

/// Two processes on `keyspace`, each having seen the other listed: a process compares every
/// second, and one that has not yet seen another listed has no one to publish its windows for.
async fn two_listed(keyspace: &str) -> (ServerProcess, ServerProcess) {
    let first = start(keyspace).await;
    let second = start(keyspace).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    (first, second)
}

/// Posts `events` as one batch; acknowledged.
async fn post_batch(server: &ServerProcess, events: &[Value]) {
    let response = http()
        .post(server.url("/v1/impressions"))
        .json(events)
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::OK, "{}", server.output());
}

/// Posts `count` impressions of distinct users now, in batches of 50; all acknowledged.
async fn post(server: &ServerProcess, campaign: &Campaign, count: usize) {
    let events: Vec<Value> = (0..count)
        .map(|_| campaign.impression(Uuid::new_v4(), Uuid::new_v4(), Utc::now()))
        .collect();
    for batch in events.chunks(50) {
        post_batch(server, batch).await;
    }
}

/// Posts one impression for each of `users` at `at`; all acknowledged.
async fn post_for(server: &ServerProcess, campaign: &Campaign, users: &[Uuid], at: DateTime<Utc>) {
    let events: Vec<Value> = users
        .iter()
        .map(|user| {
            let mut impression = campaign.impression(Uuid::new_v4(), Uuid::new_v4(), at);
            impression["user_id"] = serde_json::json!(user);
            impression
        })
        .collect();
    post_batch(server, &events).await;
}

async fn delivery(server: &ServerProcess, campaign: &Campaign) -> Value {
    let response = http()
        .get(server.url(&format!("{}/delivery", campaign.path())))
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.expect("JSON")
}

#[tokio::test]
async fn two_processes_count_each_others_impressions_and_a_killed_one_is_repaired() {
    let keyspace = private_keyspace("delivery");
    let first = start(keyspace.as_str()).await;
    let mut second = start(keyspace.as_str()).await;
    let campaign = Campaign::fresh();

    // Impressions are posted at their arrival: "today" holds them all unless UTC midnight
    // passes while the test runs, when only the lifetime count still does.
    let posted_on = chrono::Utc::now().date_naive().to_string();
    let today_holds = |answer: &serde_json::Value| answer["today"]["day"] == posted_on.as_str();
    post(&first, &campaign, 300).await;
    post(&second, &campaign, 200).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    for server in [&first, &second] {
        let answer = delivery(server, &campaign).await;
        if today_holds(&answer) {
            assert_eq!(answer["today"]["billable_impressions"], 500, "{answer}");
        }
        assert_eq!(answer["lifetime"]["billable_impressions"], 500, "{answer}");
        assert_eq!(answer["complete"], true, "{answer}");
    }

    // Killed right after its last answer: its last counts may never have been stored.
    post(&second, &campaign, 250).await;
    second.send_signal("KILL");
    let _ = second.wait(Duration::from_secs(10)).await;
    let killed = std::time::Instant::now();
    let incomplete = eventually(Duration::from_secs(12), || async {
        delivery(&first, &campaign).await["complete"] == false
    })
    .await;
    assert!(
        incomplete,
        "complete still true {:?} after kill -9",
        killed.elapsed()
    );

    let restarted = start(keyspace.as_str()).await;
    for server in [&first, &restarted] {
        let answer = delivery(server, &campaign).await;
        assert_eq!(answer["complete"], true, "{answer}");
        if today_holds(&answer) {
            assert_eq!(answer["today"]["billable_impressions"], 750, "{answer}");
        }
        assert_eq!(answer["lifetime"]["billable_impressions"], 750, "{answer}");
    }
    drop(restarted);
    drop(first);
}

#[tokio::test]
async fn a_window_counted_by_both_processes_counts_once() {
    let keyspace = private_keyspace("delivery_windows");
    let (first, second) = two_listed(keyspace.as_str()).await;
    let campaign = Campaign::fresh();
    let shared: Vec<Uuid> = (0..120).map(|_| Uuid::new_v4()).collect();
    let first_only: Vec<Uuid> = (0..30).map(|_| Uuid::new_v4()).collect();
    let second_only: Vec<Uuid> = (0..20).map(|_| Uuid::new_v4()).collect();
    // A window that has closed: each process compares it within seconds of publishing. The
    // first process sees some users earlier, the second others, in each order.
    // Five seconds into a 40-second billable window, so the copies a second later share it.
    let at = (Utc::now() - TimeDelta::seconds(90))
        .duration_trunc(TimeDelta::seconds(40))
        .expect("a window start")
        + TimeDelta::seconds(5);
    let (early, late) = shared.split_at(60);
    post_for(&first, &campaign, early, at).await;
    post_for(&second, &campaign, late, at).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    post_for(&second, &campaign, early, at + TimeDelta::seconds(1)).await;
    post_for(&first, &campaign, late, at + TimeDelta::seconds(1)).await;
    post_for(&first, &campaign, &first_only, at).await;
    post_for(&second, &campaign, &second_only, at).await;
    let users = shared.len() + first_only.len() + second_only.len();

    let deadline = std::time::Instant::now() + Duration::from_secs(45);
    let answers = loop {
        let mut answers = Vec::new();
        for server in [&first, &second] {
            answers.push(delivery(server, &campaign).await["lifetime"].clone());
        }
        let once = answers
            .iter()
            .all(|lifetime| lifetime["billable_impressions"] == users);
        if once || std::time::Instant::now() >= deadline {
            break answers;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let once = answers
        .iter()
        .all(|lifetime| lifetime["billable_impressions"] == users);
    assert!(once, "{users} users, delivery {answers:?}");

    let day = at.date_naive();
    let response = http()
        .get(first.url(&format!(
            "{}/summary?from={day}&to={day}&group_by=none",
            campaign.path()
        )))
        .send()
        .await
        .expect("answered");
    let summary: Value = response.json().await.expect("JSON");
    assert_eq!(
        summary["totals"]["billable_impressions"], users,
        "{summary}"
    );
    drop(second);
    drop(first);
}

#[tokio::test]
async fn a_process_stopping_cleanly_gives_up_the_open_windows_another_counted_first() {
    let keyspace = private_keyspace("delivery_stop");
    let (staying, mut stopping) = two_listed(keyspace.as_str()).await;
    let campaign = Campaign::fresh();
    let users: Vec<Uuid> = (0..80).map(|_| Uuid::new_v4()).collect();
    // The window these impressions share is still open when the second process stops.
    let at = Utc::now();
    post_for(&staying, &campaign, &users, at).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    post_for(&stopping, &campaign, &users, at).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    stopping.send_signal("TERM");
    let status = stopping.wait(Duration::from_secs(20)).await;
    assert!(status.success(), "{}", stopping.output());

    let answer = delivery(&staying, &campaign).await;
    assert_eq!(
        answer["lifetime"]["billable_impressions"],
        users.len(),
        "{answer}"
    );
    drop(staying);
}
