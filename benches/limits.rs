//! The limits under load, on the real binary (embedded store, its defaults):
//!
//! 1. `/track` with fresh feature values in every beacon (wrk, `benches/track_fresh.lua`), the
//!    load that grows the live sketches fastest: beacons per second and the server's peak
//!    resident memory, beside the same load on a binary built before the limits
//!    (`BENCH_BASELINE_BIN`, which `scripts/bench limits` builds from `BENCH_BASELINE_REV`).
//! 2. Ingestion (8 clients posting 500-impression batches) with and without 1,000 half-open
//!    connections held against the server (each sends half a request head, and is opened again
//!    as soon as the server's header timeout closes it), in alternating rounds.
//!
//! `scripts/bench limits`. Knobs: BENCH_SECONDS (per `/track` variant and round, default 60),
//! BENCH_ROUNDS (default 1 for `/track`; ingestion always runs 3), BENCH_CONNECTIONS (64),
//! BENCH_INGEST_SECONDS (20), BENCH_IDLE (1000), BENCH_SKETCH_MEMORY (the new binary's
//! `--sketch-memory`, default its own default, 256MiB).

mod support;

use support::server::{Server, admin};

use futures::{StreamExt, stream};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

const SITE: &str = "bench-fresh.example";

/// One fresh-feature `/track` run: (beacons/s, non-2xx answers, resident MiB at the start,
/// peak resident MiB).
async fn fresh_track(
    binary: &str,
    extra: &[String],
    seconds: usize,
    connections: usize,
) -> (f64, String, f64, f64) {
    let server = Server::start(binary, extra).await;
    let registered = admin()
        .put(format!("{}/v1/sites/{SITE}", server.base))
        .json(&json!({}))
        .send()
        .await
        .expect("registration answered");
    assert!(registered.status().is_success(), "{}", registered.status());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let start = support::rss_mib(server.child.id());
    let sampler = support::PeakRss::start(server.child.id());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/track_fresh.lua");
    let url = format!("{}/track", server.base);
    let result = support::server::wrk(
        &url,
        Some(script),
        seconds,
        connections,
        &[("BENCH_SITE", SITE)],
    )
    .await;
    let (per_second, errors) = (result.per_second, result.errors);
    let peak = sampler.stop().await;
    server.stop();
    (per_second, errors, start, peak)
}

/// Impressions accepted per second by `clients` posting 500-event batches for `seconds`.
async fn ingest_rate(base: &str, seconds: usize, clients: usize) -> f64 {
    const BATCH: usize = 500;
    let (advertiser, campaign) = (Uuid::new_v4(), Uuid::new_v4());
    let noon = (chrono::Utc::now() - chrono::Duration::days(1))
        .date_naive()
        .and_hms_opt(12, 0, 0)
        .expect("valid")
        .and_utc()
        .to_rfc3339();
    let client = admin();
    let url = format!("{base}/v1/impressions");
    let deadline = Instant::now() + Duration::from_secs(seconds as u64);
    let accepted = AtomicU64::new(0);
    let started = Instant::now();
    stream::iter(0..clients)
        .for_each_concurrent(clients, |_| {
            let (client, url, noon, accepted) = (&client, &url, &noon, &accepted);
            async move {
                while Instant::now() < deadline {
                    let batch: Vec<serde_json::Value> = (0..BATCH)
                        .map(|_| {
                            json!({
                                "impression_id": Uuid::new_v4(), "advertiser_id": advertiser,
                                "campaign_id": campaign, "ad_id": Uuid::new_v4(),
                                "user_id": Uuid::new_v4(), "timestamp": noon,
                            })
                        })
                        .collect();
                    let response = client
                        .post(url)
                        .json(&batch)
                        .send()
                        .await
                        .expect("answered");
                    assert!(response.status().is_success(), "{}", response.status());
                    accepted.fetch_add(BATCH as u64, Ordering::Relaxed);
                }
            }
        })
        .await;
    accepted.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// Holds `count` half-open connections against `address` until `holding` turns false: each
/// sends half a request head and waits; when the server closes it (its header timeout), it is
/// opened again.
fn hold_half_open(
    address: std::net::SocketAddr,
    count: usize,
    holding: Arc<AtomicBool>,
    opened: Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..count)
        .map(|_| {
            let (holding, opened) = (Arc::clone(&holding), Arc::clone(&opened));
            tokio::spawn(async move {
                while holding.load(Ordering::SeqCst) {
                    let Ok(mut stream) = tokio::net::TcpStream::connect(address).await else {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    };
                    opened.fetch_add(1, Ordering::Relaxed);
                    let _ = stream
                        .write_all(b"POST /v1/impressions HTTP/1.1\r\nHost: x\r\nContent-Ty")
                        .await;
                    let mut sink = Vec::new();
                    let _ = tokio::time::timeout(
                        Duration::from_secs(30),
                        stream.read_to_end(&mut sink),
                    )
                    .await;
                }
            })
        })
        .collect()
}

#[tokio::main]
async fn main() {
    let seconds = support::env_knob("BENCH_SECONDS", 60);
    let rounds = support::env_knob("BENCH_ROUNDS", 1);
    let connections = support::env_knob("BENCH_CONNECTIONS", 64);
    let ingest_seconds = support::env_knob("BENCH_INGEST_SECONDS", 20);
    let idle = support::env_knob("BENCH_IDLE", 1000);
    let current = env!("CARGO_BIN_EXE_adevents").to_owned();
    let baseline = std::env::var("BENCH_BASELINE_BIN")
        .ok()
        .filter(|path| !path.is_empty());
    let mut flags = vec!["--rate-limit-beacons".to_owned(), "off".to_owned()];
    let budget = std::env::var("BENCH_SKETCH_MEMORY").unwrap_or_else(|_| "256MiB".to_owned());
    flags.extend(["--sketch-memory".to_owned(), budget.clone()]);

    println!(
        "## /track with fresh feature values ({connections} connections, {seconds} s per binary and round, embedded store)\n"
    );
    let mut results: Vec<(&str, f64, f64, f64)> = Vec::new();
    for round in 1..=rounds {
        let mut variants: Vec<(&str, &str, Vec<String>)> =
            vec![("limits", current.as_str(), flags.clone())];
        if let Some(baseline) = &baseline {
            variants.push(("before the limits", baseline.as_str(), Vec::new()));
        }
        if round % 2 == 0 {
            variants.reverse();
        }
        for (name, binary, extra) in variants {
            let (per_second, errors, start, peak) =
                fresh_track(binary, &extra, seconds, connections).await;
            println!(
                "round {round}: {name}: {per_second:.0} beacons/s, resident {start:.0} MiB at start, peak {peak:.0} MiB{}",
                if errors.is_empty() {
                    String::new()
                } else {
                    format!(" (errors: {errors})")
                }
            );
            results.push((name, per_second, start, peak));
        }
    }
    println!("\n| binary | beacons/s (median) | peak resident MiB (max) | ratio of beacons/s |");
    println!("|---|---|---|---|");
    let summarise = |name: &str| {
        let rows: Vec<&(&str, f64, f64, f64)> =
            results.iter().filter(|row| row.0 == name).collect();
        let rate = support::median(rows.iter().map(|row| row.1).collect());
        let peak = rows.iter().map(|row| row.3).fold(0.0, f64::max);
        (rate, peak)
    };
    let (limits_rate, limits_peak) = summarise("limits");
    match &baseline {
        Some(_) => {
            let (before_rate, before_peak) = summarise("before the limits");
            println!("| before the limits | {before_rate:.0} | {before_peak:.0} | 1.00 |");
            println!(
                "| limits, `--sketch-memory {budget}` | {limits_rate:.0} | {limits_peak:.0} | **{:.2}** |",
                limits_rate / before_rate
            );
        }
        None => println!(
            "| limits, `--sketch-memory {budget}` | {limits_rate:.0} | {limits_peak:.0} | (no BENCH_BASELINE_BIN) |"
        ),
    }

    println!(
        "\n## Ingestion with and without {idle} half-open connections (8 clients, 500-event batches, {ingest_seconds} s per variant and round, embedded store)\n"
    );
    let server = Server::start(&current, &[]).await;
    let mut quiet = Vec::new();
    let mut held = Vec::new();
    for round in 1..=3 {
        let mut order = [false, true];
        if round % 2 == 0 {
            order.reverse();
        }
        for with_idle in order {
            let holding = Arc::new(AtomicBool::new(with_idle));
            let opened = Arc::new(AtomicU64::new(0));
            let holders = if with_idle {
                let holders = hold_half_open(
                    server.address,
                    idle,
                    Arc::clone(&holding),
                    Arc::clone(&opened),
                );
                // Let them all connect and send their half heads first.
                tokio::time::sleep(Duration::from_secs(2)).await;
                holders
            } else {
                Vec::new()
            };
            let rate = ingest_rate(&server.base, ingest_seconds, 8).await;
            holding.store(false, Ordering::SeqCst);
            for holder in holders {
                holder.abort();
            }
            let reopened = opened.load(Ordering::Relaxed);
            if with_idle {
                println!(
                    "round {round}: with {idle} half-open connections: {rate:.0} events/s (connections opened: {reopened})"
                );
                held.push(rate);
            } else {
                println!("round {round}: without: {rate:.0} events/s");
                quiet.push(rate);
            }
        }
    }
    server.stop();
    let (quiet, held) = (support::median(quiet), support::median(held));
    println!("\n| variant | events/s (median of 3) | ratio |");
    println!("|---|---|---|");
    println!("| ingestion alone | {quiet:.0} | 1.00 |");
    println!(
        "| ingestion beside {idle} half-open connections | {held:.0} | **{:.2}** |",
        held / quiet
    );
}
