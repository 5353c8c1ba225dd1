//! The embedded engine's memory settings side by side: flat-out ingest of impressions on the
//! real binary (`wrk -c16`, `benches/impressions.lua`: NDJSON batches of 500 fresh
//! impressions), a fresh embedded folder per run, the server's resident memory sampled every
//! 100 ms. Each variant sets `--embedded-memtable`, `--embedded-cache` and
//! `--embedded-journal`; the rounds interleave the variants (the order flipped every round),
//! and the table gives each variant's median events/s, its ratio to fjall's own defaults, and
//! the highest peak seen.
//!
//! `scripts/bench engine`. Knobs: BENCH_SECONDS (per variant and round, default 20),
//! BENCH_ROUNDS (3), BENCH_CONNECTIONS (16), BENCH_BATCH (impressions per request, 500).

mod support;

use support::server::{ADMIN_KEY, Server};

/// (name, memtable, cache, journal). The first is what the store used before the flags:
/// 16 MiB memtables and fjall's own cache and journal sizes.
const VARIANTS: [(&str, &str, &str, &str); 4] = [
    ("before the flags", "16MiB", "32MiB", "512MiB"),
    ("defaults", "8MiB", "16MiB", "64MiB"),
    ("small", "4MiB", "8MiB", "64MiB"),
    ("large", "32MiB", "64MiB", "512MiB"),
];

/// One run: (events/s, errors, peak resident MiB).
async fn ingest(
    extra: &[String],
    seconds: usize,
    connections: usize,
    batch: usize,
) -> (f64, String, f64) {
    let server = Server::start(env!("CARGO_BIN_EXE_adevents"), extra).await;
    let sampler = support::PeakRss::start(server.child.id());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/impressions.lua");
    let url = format!("{}/v1/impressions", server.base);
    let batch_text = batch.to_string();
    let result = support::server::wrk(
        &url,
        Some(script),
        seconds,
        connections,
        &[("BENCH_KEY", ADMIN_KEY), ("BENCH_BATCH", &batch_text)],
    )
    .await;
    let peak = sampler.stop().await;
    server.stop();
    (result.per_second * batch as f64, result.errors, peak)
}

#[tokio::main]
async fn main() {
    let seconds = support::env_knob("BENCH_SECONDS", 20);
    let rounds = support::env_knob("BENCH_ROUNDS", 3);
    let connections = support::env_knob("BENCH_CONNECTIONS", 16);
    let batch = support::env_knob("BENCH_BATCH", 500);
    println!(
        "## Embedded engine memory: ingest of impressions ({connections} connections, batches of {batch}, {seconds} s per variant and round)\n"
    );
    let mut results: Vec<(&str, f64, f64)> = Vec::new();
    for round in 1..=rounds {
        let mut order: Vec<_> = VARIANTS.iter().collect();
        if round % 2 == 0 {
            order.reverse();
        }
        for (name, memtable, cache, journal) in order {
            let extra: Vec<String> = [
                "--embedded-memtable",
                memtable,
                "--embedded-cache",
                cache,
                "--embedded-journal",
                journal,
                "--rate-limit-ingest",
                "off",
            ]
            .iter()
            .map(|text| (*text).to_owned())
            .collect();
            let (rate, errors, peak) = ingest(&extra, seconds, connections, batch).await;
            println!(
                "round {round}: {name}: {rate:.0} events/s, peak {peak:.0} MiB{}",
                if errors.is_empty() {
                    String::new()
                } else {
                    format!(" (errors: {errors})")
                }
            );
            results.push((name, rate, peak));
        }
    }
    let summary = |name: &str| {
        let rows: Vec<_> = results.iter().filter(|row| row.0 == name).collect();
        let rate = support::median(rows.iter().map(|row| row.1).collect());
        let peak = rows.iter().map(|row| row.2).fold(0.0, f64::max);
        (rate, peak)
    };
    let (before_rate, _) = summary(VARIANTS[0].0);
    println!(
        "\n| variant | memtable | cache | journal | events/s (median) | ÷ before the flags | peak resident MiB (max) |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (name, memtable, cache, journal) in VARIANTS {
        let (rate, peak) = summary(name);
        println!(
            "| {name} | {memtable} | {cache} | {journal} | {rate:.0} | **{:.2}** | {peak:.0} |",
            rate / before_rate.max(1.0)
        );
    }
}
