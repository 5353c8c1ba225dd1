//! Beacons: single-beacon `/track` requests per second on each store (wrk, 64 connections),
//! side by side with `GET /healthz` on the same server (the HTTP ceiling of this machine), in
//! interleaved rounds; then a month's uniques query for a site with 1 million beacons of four
//! features, and the storage their hourly sketches take.
//!
//! `scripts/bench track` (starts the Cassandra node if needed, installs wrk if missing).
//! Knobs: BENCH_SECONDS (per variant and round, default 10), BENCH_ROUNDS (default 3),
//! BENCH_CONNECTIONS (default 64), BENCH_BEACONS (default 1000000), BENCH_QUERIES (default 5).

mod support;

use adevents::app::{App, Options};
use adevents::beacons::live::LiveSketches;
use adevents::domain::beacon::{Beacon, Features, Guid, SiteId};
use adevents::domain::bucket::BucketCount;
use adevents::domain::time::EventTime;
use adevents::store::Store;
use adevents::store::cassandra::config::WriteMode;
use adevents::store::embedded::Fsync;
use chrono::{NaiveDate, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use rand::distr::Distribution;
use rand::distr::weighted::WeightedIndex;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::server::wrk;

struct Server {
    address: SocketAddr,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// The operator key the benchmark's servers accept (keys are on, as in production).
const ADMIN_KEY: &str = "adevents-bench-admin-key-0123456789abcdef";

/// A server with keys on, `site` registered for beacons.
async fn serve(store: Arc<dyn Store>, site: &str) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let mut options = Options::default();
    options.service.access = adevents::access::AccessOptions {
        operator_key: Some(adevents::access::OperatorKey::new(ADMIN_KEY).expect("long enough")),
        ..adevents::access::AccessOptions::default()
    };
    // One load generator, one address: the per-address limit would measure itself.
    options.edge.rate_limits = adevents::http::RateLimits {
        beacons_per_second: None,
        ..adevents::http::RateLimits::default()
    };
    let app = App::new(store, options);
    app.access().refresh().await.expect("keys and sites read");
    app.access()
        .register_site(adevents::domain::access::SiteProfile {
            site: SiteId::parse(site).expect("valid site"),
            allowed_origins: Vec::new(),
            require_origin: false,
            respect_gpc: false,
            created_at: Utc::now(),
        })
        .await
        .expect("site registered");
    let task = tokio::spawn(async move { app.serve(listener, std::future::pending()).await });
    Server { address, task }
}

#[tokio::main]
async fn main() {
    let seconds = support::env_knob("BENCH_SECONDS", 10);
    let rounds = support::env_knob("BENCH_ROUNDS", 3);
    let connections = support::env_knob("BENCH_CONNECTIONS", 64);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/track.lua");

    let embedded_dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data/track");
    let _ = std::fs::remove_dir_all(&embedded_dir);
    let embedded: Arc<dyn Store> = Arc::new(support::embedded_store("track", Fsync::Always));
    let cassandra: Arc<dyn Store> = Arc::new(support::store(WriteMode::Batch).await);
    // The site track.lua sends.
    let site = std::env::var("BENCH_SITE").unwrap_or_else(|_| "bench-track".to_owned());
    let servers = [
        (
            "embedded (fsync always)",
            serve(Arc::clone(&embedded), &site).await,
        ),
        ("cassandra", serve(Arc::clone(&cassandra), &site).await),
    ];

    println!(
        "## /track throughput ({connections} connections, {seconds} s per variant and round)\n"
    );
    let mut results: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for round in 1..=rounds {
        let healthz = format!("http://{}/healthz", servers[0].1.address);
        let baseline = wrk(&healthz, None, seconds, connections, &[]).await;
        println!(
            "round {round}: GET /healthz {:.0}/s (p50 {}, p99 {})",
            baseline.per_second, baseline.p50, baseline.p99
        );
        results
            .entry("GET /healthz")
            .or_default()
            .push(baseline.per_second);
        for (name, server) in &servers {
            let track = format!("http://{}/track", server.address);
            let result = wrk(&track, Some(script), seconds, connections, &[]).await;
            println!(
                "round {round}: /track on {name} {:.0}/s (p50 {}, p99 {}){}",
                result.per_second,
                result.p50,
                result.p99,
                if result.errors.is_empty() {
                    String::new()
                } else {
                    format!(" errors: {}", result.errors)
                }
            );
            results.entry(name).or_default().push(result.per_second);
        }
    }
    let baseline = support::median(results["GET /healthz"].clone());
    println!("\n| variant | requests/s (median) | × GET /healthz |\n|---|---|---|");
    for (name, values) in &results {
        let median = support::median(values.clone());
        println!("| {name} | {median:.0} | {:.2} |", median / baseline);
    }
    for (_, server) in &servers {
        server.task.abort();
    }

    let beacons = support::env_knob("BENCH_BEACONS", 1_000_000);
    let queries = support::env_knob("BENCH_QUERIES", 5);
    println!("\n## A month's uniques for a site with {beacons} beacons of 4 features\n");
    for (name, store) in [("embedded", embedded), ("cassandra", cassandra)] {
        uniques_month(name, store, beacons, queries).await;
    }
}

/// A beacon from the generator's parameters (all valid): site, guid, epoch seconds, features.
fn beacon_of(params: Vec<(String, String)>, now: chrono::DateTime<Utc>) -> Beacon {
    let (mut site, mut guid, mut seconds) = (None, None, 0);
    let mut features = std::collections::BTreeMap::new();
    for (name, value) in params {
        match name.as_str() {
            "site" => site = Some(SiteId::parse(&value).expect("valid site")),
            "guid" => guid = Some(Guid::parse(&value).expect("valid guid")),
            "timestamp" => seconds = value.parse::<i64>().expect("seconds"),
            _ => {
                features.insert(name, value);
            }
        }
    }
    Beacon {
        site: site.expect("a site"),
        guid: guid.expect("a guid"),
        timestamp: EventTime::from_epoch_millis(seconds * 1000, now).expect("valid time"),
        features: Features::new(features).expect("valid features"),
        user_agent: None,
        invalid: None,
    }
}

/// The month's beacons: 100,000 visitors (a Zipf-like few return often), 5 referrers, 40
/// pages, 3 devices and 10 countries of uneven popularity, day-time heavy.
fn month_of_beacons(beacons: usize) -> Vec<Vec<(String, String)>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    let rank =
        |n: usize| WeightedIndex::new((0..n).map(|r| 1.0 / (r as f64 + 1.0))).expect("weights");
    let (visitors, referrers, pages, devices, countries) =
        (rank(100_000), rank(5), rank(40), rank(3), rank(10));
    let start = NaiveDate::from_ymd_opt(2018, 10, 1)
        .expect("date")
        .and_hms_opt(0, 0, 0)
        .expect("time")
        .and_utc()
        .timestamp();
    (0..beacons)
        .map(|i| {
            // Time-ordered across the month, as live traffic arrives.
            let timestamp =
                start + (i as i64 * 31 * 86_400) / beacons as i64 + rng.random_range(0..60);
            vec![
                (
                    "guid".to_owned(),
                    format!("visitor-{}", visitors.sample(&mut rng)),
                ),
                ("timestamp".to_owned(), timestamp.to_string()),
                (
                    "referrer".to_owned(),
                    format!("referrer-{}.com", referrers.sample(&mut rng)),
                ),
                (
                    "page".to_owned(),
                    format!("/page-{}", pages.sample(&mut rng)),
                ),
                (
                    "device".to_owned(),
                    format!("device-{}", devices.sample(&mut rng)),
                ),
                (
                    "country".to_owned(),
                    format!("C{}", countries.sample(&mut rng)),
                ),
            ]
        })
        .collect()
}

async fn uniques_month(name: &str, store: Arc<dyn Store>, beacons: usize, queries: usize) {
    let site = format!("bench-uniques-{beacons}");
    let server = serve(Arc::clone(&store), &site).await;
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {ADMIN_KEY}").parse().expect("header"),
    );
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .default_headers(headers)
        .build()
        .expect("client");
    let base = format!(
        "http://{}/v1/sites/{site}/uniques?from=2018-10-01&to=2018-10-31",
        server.address
    );
    let total = |answer: &serde_json::Value| answer["total"]["visits"].as_u64().unwrap_or(0);
    let ask = |query: String| {
        let client = client.clone();
        async move {
            let started = Instant::now();
            let answer: serde_json::Value = client
                .get(query)
                .send()
                .await
                .expect("answered")
                .json()
                .await
                .expect("JSON");
            (answer, started.elapsed())
        }
    };
    let (existing, _) = ask(base.clone()).await;
    if total(&existing) != beacons as u64 {
        let (flushed, elapsed) = support::timed(load(&site, Arc::clone(&store), beacons)).await;
        println!(
            "{name}: loaded {beacons} beacons in {:.0} s; their hourly sketches: {} rows, {:.1} MB of sketch state ({:.0} bytes per beacon)",
            elapsed.as_secs_f64(),
            flushed.0,
            flushed.1 as f64 / 1e6,
            flushed.1 as f64 / beacons as f64
        );
    } else {
        println!(
            "{name}: {beacons} beacons already loaded (target/bench-data or the adevents_bench keyspace)"
        );
    }
    println!(
        "\n| {name}: query (month, {beacons} beacons) | median latency | visits | unique visitors |\n|---|---|---|---|"
    );
    for (label, filter) in [
        ("no filter", ""),
        ("referrer", "&feature.referrer=referrer-0.com"),
        (
            "referrer + page",
            "&feature.referrer=referrer-0.com&feature.page=%2Fpage-3",
        ),
        ("no filter, by day", "&granularity=day"),
    ] {
        let mut latencies = Vec::new();
        let mut last = serde_json::Value::Null;
        for _ in 0..queries {
            let (answer, elapsed) = ask(format!("{base}{filter}")).await;
            latencies.push(elapsed.as_secs_f64());
            last = answer;
        }
        println!(
            "| {label} | {:.0} ms | {} | {} |",
            support::median(latencies) * 1000.0,
            last["total"]["visits"],
            last["total"]["unique_visitors"]
        );
    }
    println!();
    server.task.abort();
}

/// Stores the beacons day by day (batches of 500, several at once) and counts them in live
/// sketches flushed after each day, as a server would over the month. Returns the sketch rows
/// and bytes written.
async fn load(site: &str, store: Arc<dyn Store>, beacons: usize) -> (usize, usize) {
    let now = Utc::now();
    let parsed: Vec<_> = month_of_beacons(beacons)
        .into_iter()
        .map(|mut params| {
            params.push(("site".to_owned(), site.to_owned()));
            beacon_of(params, now)
        })
        .collect();
    let live = LiveSketches::default();
    let (mut rows, mut bytes) = (0, 0);
    let mut by_day: BTreeMap<_, Vec<_>> = BTreeMap::new();
    for beacon in parsed {
        by_day
            .entry(beacon.timestamp.utc_day())
            .or_default()
            .push(beacon);
    }
    for (_, day) in by_day {
        stream::iter(day.chunks(500))
            .map(|chunk| {
                let store = Arc::clone(&store);
                let partition = chunk[0].partition(BucketCount::ONE);
                let chunk = chunk.to_vec();
                async move { store.write_visits(&partition, &chunk, &[]).await }
            })
            .buffer_unordered(8)
            .try_collect::<()>()
            .await
            .expect("beacons written");
        for beacon in &day {
            live.record(beacon);
        }
        let flushed = live.flush(store.as_ref()).await.expect("sketches written");
        rows += flushed.sketches;
        bytes += flushed.bytes;
        live.evict_idle(Duration::ZERO);
    }
    (rows, bytes)
}
