//! A site-day of millions of feature combinations sealed by `adevents rollup`: in one pass (a
//! `--seal-memory` no day reaches) against within the default and a smaller budget, each run a
//! process of its own on the same folder, its peak resident memory sampled every 100 ms, the
//! order alternating over the rounds.
//!
//! The day's beacons are written straight into an embedded store once (kept in
//! `target/bench-data/site-seal-N` between runs): 50,000 visitors, a page of 1,000 and a
//! campaign of 100, and a referrer and a search term of their own for each beacon, so 12 of
//! each beacon's 16 combinations are its own, as on a site whose referrers are full URLs.
//!
//! `cargo bench --bench site_seal`. Knobs: BENCH_BEACONS (default 200000), BENCH_ROUNDS
//! (default 2), BENCH_SEAL_MEMORY (default "64GiB,256MiB,64MiB"; the first is the reference).

mod support;

use adevents::domain::beacon::{Beacon, Features, Guid, SiteId};
use adevents::domain::bucket::BucketCount;
use adevents::domain::time::EventTime;
use adevents::store::VisitStore;
use adevents::store::embedded::Fsync;
use chrono::{DateTime, Utc};
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::time::Instant;

const SITE: &str = "seal-bench.example";
const DAY: &str = "2026-11-20";

fn folder(beacons: usize) -> String {
    format!("site-seal-{beacons}")
}

/// Writes the day's beacons, unless an earlier run did.
async fn load(beacons: usize) {
    let name = folder(beacons);
    let marker = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join("bench-data")
        .join(format!("{name}.loaded"));
    if marker.exists() {
        return;
    }
    let store = support::embedded_store(&name, Fsync::Never);
    let site = SiteId::parse(SITE).expect("a site");
    let start: DateTime<Utc> = format!("{DAY}T00:00:00Z").parse().expect("a day");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let step = 86_400_000 / beacons.max(1) as i64;
    let started = Instant::now();
    let all: Vec<Beacon> = (0..beacons)
        .map(|n| {
            let features = [
                ("page", format!("/p{}", rng.random_range(0..1_000))),
                ("campaign", format!("c{}", rng.random_range(0..100))),
                ("referrer", format!("https://r{n}.example/from")),
                ("term", format!("t{n}")),
            ]
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect();
            Beacon {
                site: site.clone(),
                guid: Guid::parse(&format!("visitor-{}", rng.random_range(0..50_000)))
                    .expect("a guid"),
                timestamp: EventTime::from_epoch_millis(
                    start.timestamp_millis() + n as i64 * step,
                    Utc::now(),
                )
                .expect("a time"),
                features: Features::new(features).expect("features"),
                user_agent: None,
                invalid: None,
            }
        })
        .collect();
    let partition = all[0].partition(BucketCount::ONE);
    for chunk in all.chunks(10_000) {
        store
            .write_visits(&partition, chunk, &[])
            .await
            .expect("stored");
    }
    drop(store);
    std::fs::write(&marker, b"").expect("marker");
    println!(
        "loaded {beacons} beacons in {:.0} s",
        started.elapsed().as_secs_f64()
    );
}

/// Seals the day with `memory`; (peak MiB, seconds).
async fn seal(beacons: usize, memory: &str) -> (f64, f64) {
    let data = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join("bench-data")
        .join(folder(beacons));
    let started = Instant::now();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_adevents"))
        .args(["rollup", "--site", SITE, "--from", DAY, "--to", DAY])
        .arg("--data-dir")
        .arg(&data)
        .args(["--seal-memory", memory])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("adevents rollup starts");
    let peak = support::PeakRss::start(child.id());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("waited")
        .expect("adevents rollup ends");
    let seconds = started.elapsed().as_secs_f64();
    let peak = peak.stop().await;
    assert!(
        status.success(),
        "adevents rollup --seal-memory {memory}: {status}"
    );
    (peak, seconds)
}

#[tokio::main]
async fn main() {
    let beacons = support::env_knob("BENCH_BEACONS", 200_000);
    let rounds = support::env_knob("BENCH_ROUNDS", 2);
    let memories: Vec<String> = std::env::var("BENCH_SEAL_MEMORY")
        .unwrap_or_else(|_| "64GiB,256MiB,64MiB".to_owned())
        .split(',')
        .map(|memory| memory.trim().to_owned())
        .collect();
    load(beacons).await;
    let mut results: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); memories.len()];
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..memories.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for index in order {
            let (peak, seconds) = seal(beacons, &memories[index]).await;
            println!(
                "  round {}: --seal-memory {}: peak {peak:.0} MiB, {seconds:.1} s",
                round + 1,
                memories[index]
            );
            results[index].0.push(peak);
            results[index].1.push(seconds);
        }
    }
    println!(
        "\n| {beacons} beacons: --seal-memory | peak RSS (MiB) | × one pass | seal (s) | × one pass |\n|---|---|---|---|---|"
    );
    let (base_peak, base_seconds) = (
        support::median(results[0].0.clone()),
        support::median(results[0].1.clone()),
    );
    for (memory, (peaks, seconds)) in memories.iter().zip(results) {
        let (peak, seconds) = (support::median(peaks), support::median(seconds));
        println!(
            "| {memory} | {peak:.0} | {:.2} | {seconds:.1} | {:.2} |",
            peak / base_peak,
            seconds / base_seconds
        );
    }
}
