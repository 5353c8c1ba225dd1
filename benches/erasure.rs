//! Erasure and subject access of one user whose SUBJECT (default 10,000) impressions lie among
//! a small and a ten times larger store: the cost must follow the user's events, not the
//! store's size (docs/DESIGN.md, "Personal data").
//!
//! For each size, a fresh store is loaded through HTTP (a server in this process, keys off) with
//! that many impressions of 20 campaigns of 5 advertisers over the last 28 days, from a pool of
//! a million users, the subject's impressions spread among them (1 in 10 of them clicked).
//! Once the event index has caught up, subject access (`GET /v1/privacy/subjects`, every line
//! read) is timed ROUNDS (default 3) times, then one erasure from its `POST` until its record
//! says `done`. On the embedded store the data folder's size is given before the erasure, just
//! after it, and 60 s later (deletions are reclaimed as the engine compacts).
//!
//! `cargo bench --bench erasure` with the repository's node running (`scripts/cassandra
//! start`). Knobs: BENCH_STORES (default "embedded,cassandra"), BENCH_EMBEDDED_SIZES (default
//! "1000000,10000000"), BENCH_CASSANDRA_SIZES (default "200000,2000000"), BENCH_SUBJECT
//! (default 10000), BENCH_ROUNDS (default 3), BENCH_SETTLE (default 0: seconds to wait after
//! the load before timing, once access was timed just after it).

mod support;

use adevents::app::{App, Options};
use adevents::store::Store;
use adevents::store::cassandra::config::WriteMode;
use adevents::store::embedded::{EmbeddedConfig, EmbeddedStore, EngineMemory, Fsync};
use chrono::{Duration, Utc};
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use uuid::Uuid;

const ADVERTISERS: u128 = 5;
const CAMPAIGNS_EACH: u128 = 4;
const BATCH: usize = 1_000;
const SENDERS: usize = 4;

fn sizes(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .filter_map(|size| size.trim().parse().ok())
        .collect()
}

fn folder_bytes(path: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => folder_bytes(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

/// An impression of campaign `n` (of 20) for `user`, at a random time of the last 28 days.
fn impression(rng: &mut impl Rng, user: Uuid, now: chrono::DateTime<Utc>) -> Value {
    let campaign = rng.random_range(0..ADVERTISERS * CAMPAIGNS_EACH);
    let advertiser = campaign / CAMPAIGNS_EACH;
    let at = now - Duration::hours(1) - Duration::seconds(rng.random_range(0..27 * 86_400));
    json!({
        "impression_id": Uuid::from_u128(rng.random()),
        "advertiser_id": Uuid::from_u128(0xA0 + advertiser),
        "campaign_id": Uuid::from_u128(0xC0 + campaign),
        "ad_id": Uuid::from_u128(rng.random_range(1..=10u128)),
        "user_id": user,
        "timestamp": at.timestamp_millis(),
    })
}

/// Posts `body`, again after a `503` as an ad server does (a node busy compacting under the
/// load times out now and then: nothing of a 503 was stored).
async fn post(client: &reqwest::Client, base: &str, path: &str, body: &Value) -> Value {
    loop {
        let response = client
            .post(format!("{base}{path}"))
            .json(body)
            .send()
            .await
            .expect("answered");
        let status = response.status();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        if status == reqwest::StatusCode::SERVICE_UNAVAILABLE {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            continue;
        }
        assert!(status.is_success(), "{path}: {status} {answer}");
        return answer;
    }
}

/// Loads `size` impressions, `subject`'s among them, with a tenth of the subject's clicked.
async fn load(base: &str, size: usize, subject: Uuid, subject_events: usize) {
    let client = reqwest::Client::new();
    let sent = Arc::new(AtomicUsize::new(0));
    let subject_left = Arc::new(AtomicUsize::new(subject_events));
    let now = Utc::now();
    let started = Instant::now();
    let senders: Vec<_> = (0..SENDERS)
        .map(|sender| {
            let (client, sent, subject_left) =
                (client.clone(), Arc::clone(&sent), Arc::clone(&subject_left));
            let base = base.to_owned();
            tokio::spawn(async move {
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(sender as u64 + 1);
                // The subject's share of each batch, so its events spread over the load.
                let share = (subject_events * BATCH).div_ceil(size.max(1)).max(1);
                loop {
                    let taken = sent.fetch_add(BATCH, Ordering::Relaxed);
                    if taken >= size {
                        return;
                    }
                    let count = BATCH.min(size - taken);
                    let mut batch = Vec::with_capacity(count);
                    let mut clicks = Vec::new();
                    for i in 0..count {
                        let own = i < share
                            && subject_left
                                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                                    left.checked_sub(1)
                                })
                                .is_ok();
                        let user = if own {
                            subject
                        } else {
                            Uuid::from_u128(rng.random_range(1..1_000_001u128))
                        };
                        let event = impression(&mut rng, user, now);
                        if own && rng.random_range(0..10) == 0 {
                            let mut click = event.clone();
                            click.as_object_mut().expect("object").remove("user_id");
                            click["timestamp"] =
                                json!(event["timestamp"].as_i64().unwrap_or(0) + 20_000);
                            clicks.push(click);
                        }
                        batch.push(event);
                    }
                    post(&client, &base, "/v1/impressions", &Value::Array(batch)).await;
                    if !clicks.is_empty() {
                        post(&client, &base, "/v1/clicks", &Value::Array(clicks)).await;
                    }
                }
            })
        })
        .collect();
    for sender in senders {
        sender.await.expect("sender");
    }
    println!(
        "  loaded {size} impressions in {:.0} s",
        started.elapsed().as_secs_f64()
    );
}

/// Waits until the event index has written everything: its count of entries written
/// (`adevents_event_index_entries_total`) unchanged over 3 s, several flush periods.
async fn index_caught_up(base: &str) {
    let client = reqwest::Client::new();
    let mut last = -1.0;
    let mut steady = 0;
    while steady < 6 {
        let text = client
            .get(format!("{base}/metrics"))
            .send()
            .await
            .expect("answered")
            .text()
            .await
            .expect("text");
        let written = text
            .lines()
            .find(|line| line.starts_with("adevents_event_index_entries_total"))
            .and_then(|line| line.split_whitespace().last())
            .and_then(|value| value.parse::<f64>().ok())
            .unwrap_or(0.0);
        if written == last {
            steady += 1;
        } else {
            steady = 0;
            last = written;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}

/// Subject access read to its end: lines and seconds.
async fn access(base: &str, subject: Uuid) -> (usize, f64) {
    let started = Instant::now();
    let body = reqwest::Client::new()
        .get(format!("{base}/v1/privacy/subjects?user_id={subject}"))
        .send()
        .await
        .expect("answered")
        .text()
        .await
        .expect("body");
    (body.lines().count(), started.elapsed().as_secs_f64())
}

/// One erasure from its request to `done`: the record and seconds.
async fn erase(base: &str, subject: Uuid) -> (Value, f64) {
    let client = reqwest::Client::new();
    let started = Instant::now();
    let requested = post(
        &client,
        base,
        "/v1/privacy/erasures",
        &json!({"user_id": subject}),
    )
    .await;
    let id = requested["id"].as_str().expect("an id").to_owned();
    loop {
        let record: Value = client
            .get(format!("{base}/v1/privacy/erasures/{id}"))
            .send()
            .await
            .expect("answered")
            .json()
            .await
            .expect("JSON");
        if record["status"] == "done" {
            return (record, started.elapsed().as_secs_f64());
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

struct Row {
    size: usize,
    access_lines: usize,
    access_seconds: f64,
    erase_seconds: f64,
    erased: Value,
    disk: Option<(u64, u64, u64)>,
}

async fn measure(
    store: Arc<dyn Store>,
    size: usize,
    subject_events: usize,
    rounds: usize,
    folder: Option<&std::path::Path>,
) -> Row {
    let mut options = Options::default();
    options.service.access.mode = adevents::access::AuthMode::Off;
    options.edge.rate_limits.ingest_events_per_second = None;
    let app = App::new(store, options);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("port");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    let server = tokio::spawn(async move { app.serve(listener, std::future::pending()).await });
    let subject = Uuid::new_v4();
    load(&base, size, subject, subject_events).await;
    index_caught_up(&base).await;
    // Time for the engine to compact what the load left (a store at rest, not just loaded).
    let settle = support::env_knob("BENCH_SETTLE", 0);
    if settle > 0 {
        let (_, seconds) = access(&base, subject).await;
        println!("  subject access just after the load: {seconds:.2} s; settling {settle} s");
        tokio::time::sleep(std::time::Duration::from_secs(settle as u64)).await;
    }
    let mut times = Vec::new();
    let mut lines = 0;
    for _ in 0..rounds {
        let (count, seconds) = access(&base, subject).await;
        lines = count;
        times.push(seconds);
    }
    let before = folder.map(folder_bytes);
    let (record, erase_seconds) = erase(&base, subject).await;
    let after = folder.map(folder_bytes);
    let disk = match (before, after, folder) {
        (Some(before), Some(after), Some(folder)) => {
            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
            Some((before, after, folder_bytes(folder)))
        }
        _ => None,
    };
    let (left, _) = access(&base, subject).await;
    assert_eq!(left, 0, "the subject's records are gone");
    server.abort();
    Row {
        size,
        access_lines: lines,
        access_seconds: support::median(times),
        erase_seconds,
        erased: record["erased"].clone(),
        disk,
    }
}

fn report(name: &str, rows: &[Row]) {
    println!(
        "\n| {name} | stored impressions | subject access (median) | lines | erasure (request to done) | erased |\n|---|---|---|---|---|---|"
    );
    for row in rows {
        println!(
            "| | {} | {:.2} s | {} | {:.2} s | {} |",
            row.size, row.access_seconds, row.access_lines, row.erase_seconds, row.erased
        );
    }
    if let [small, .., large] = rows {
        println!(
            "| ratio largest ÷ smallest | {:.1}× | {:.2} | | {:.2} | |",
            large.size as f64 / small.size as f64,
            large.access_seconds / small.access_seconds,
            large.erase_seconds / small.erase_seconds
        );
    }
    for row in rows {
        if let Some((before, after, later)) = row.disk {
            println!(
                "\n{name} {}: data folder {:.1} MiB before the erasure, {:.1} MiB just after, {:.1} MiB 60 s later",
                row.size,
                before as f64 / 1048576.0,
                after as f64 / 1048576.0,
                later as f64 / 1048576.0
            );
        }
    }
}

#[tokio::main]
async fn main() {
    let stores = std::env::var("BENCH_STORES").unwrap_or_else(|_| "embedded,cassandra".into());
    let subject_events = support::env_knob("BENCH_SUBJECT", 10_000);
    let rounds = support::env_knob("BENCH_ROUNDS", 3);
    if stores.contains("embedded") {
        let mut rows = Vec::new();
        for size in sizes("BENCH_EMBEDDED_SIZES", "1000000,10000000") {
            let folder = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a folder");
            let store = EmbeddedStore::open(&EmbeddedConfig {
                data_dir: folder.path().to_owned(),
                fsync: Fsync::Always,
                memory: EngineMemory::default(),
            })
            .expect("open the embedded store");
            let store: Arc<dyn Store> = Arc::new(store);
            rows.push(measure(store, size, subject_events, rounds, Some(folder.path())).await);
        }
        report("embedded", &rows);
    }
    if stores.contains("cassandra") {
        let mut rows = Vec::new();
        for size in sizes("BENCH_CASSANDRA_SIZES", "200000,2000000") {
            // A keyspace of its own, new each run (the previous run's is dropped first).
            let keyspace = format!("{}_erasure_{size}", support::bench_keyspace());
            support::store(WriteMode::Batch)
                .await
                .session()
                .query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ())
                .await
                .expect("the previous run's keyspace dropped");
            let store = support::store_in(&keyspace, WriteMode::Batch).await;
            let store: Arc<dyn Store> = Arc::new(store);
            rows.push(measure(store, size, subject_events, rounds, None).await);
        }
        report("cassandra", &rows);
    }
}
