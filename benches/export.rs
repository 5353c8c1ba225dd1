//! Bulk export: rows per second and the server's peak memory while it streams every
//! impression of a 31-day campaign of 1 million and of 5 million impressions, side by side in
//! interleaved rounds, on each store. Memory must not grow with the size of the export.
//!
//! The server is the real `adevents` binary, started afresh for every export and left to
//! finish its start-up work first; its resident memory is sampled every 10 ms during the
//! export. The client counts lines and drops them.
//!
//! `scripts/bench export` (starts the Cassandra node if needed). Knobs: BENCH_SIZES (default
//! "1000000,5000000"), BENCH_ROUNDS (default 3). Loaded campaigns are kept in
//! `target/bench-data/export` and the `adevents_bench` keyspace and reused.

mod support;

use adevents::domain::bucket::BucketCount;
use adevents::domain::campaign::CampaignSettings;
use adevents::domain::ids::CampaignKey;
use adevents::domain::owner::Owner;
use adevents::domain::time::EventTime;
use adevents::ingest::Ingestor;
use adevents::sealer::SealerOptions;
use adevents::settings::SettingsCache;
use adevents::store::Store;
use adevents::store::cassandra::config::WriteMode;
use adevents::store::embedded::Fsync;
use chrono::{Duration, NaiveDate};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

const DAYS: i64 = 31;
const BUCKETS: u16 = 4;

fn first_day() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 8, 1).expect("valid")
}

fn campaign_of(size: usize) -> CampaignKey {
    support::bench_campaign("export", size)
}

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data/export")
}

/// Written once a size is fully loaded into a store.
fn loaded_marker(store: &str, size: usize) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("target/bench-data/export-loaded-{store}-{size}"))
}

/// The operator key the benchmark's server accepts (keys are on, as in production).
const ADMIN_KEY: &str = "adevents-bench-admin-key-0123456789abcdef";

/// `size` impressions over the 31 days in 4 buckets, with attributes
/// ([`support::load_month`]).
async fn load(store: Arc<dyn Store>, size: usize) {
    let campaign = campaign_of(size);
    store
        .put_settings(
            &Owner::Campaign(campaign),
            &CampaignSettings {
                buckets: BucketCount::new(BUCKETS).expect("valid"),
                effective_from: EventTime::earliest(),
                daily_cap: None,
                total_cap: None,
                tz: chrono_tz::Tz::UTC,
                look_backs: adevents::domain::conversion::attribution::LookBacks::DEFAULT,
            },
        )
        .await
        .expect("settings");
    let settings = Arc::new(SettingsCache::new(
        store.clone(),
        std::time::Duration::from_secs(600),
    ));
    let ingestor = Ingestor::standalone(store, settings, 64, SealerOptions::default().rule);
    support::load_month(&ingestor, campaign, size, first_day(), DAYS, true).await;
}

/// The server as its own process, on a free port, once it answers `/readyz` (after its
/// start-up work: the repair of any process that went away), so that work's memory is not
/// taken for the export's.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    async fn start(store: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let mut args = vec![
            "serve".to_owned(),
            "--listen".to_owned(),
            format!("127.0.0.1:{port}"),
            "--store".to_owned(),
            store.to_owned(),
        ];
        match store {
            "embedded" => args.extend(["--data-dir".to_owned(), data_dir().display().to_string()]),
            _ => args.extend([
                "--keyspace".to_owned(),
                support::config(WriteMode::Batch).keyspace.to_string(),
            ]),
        }
        let child = Command::new(env!("CARGO_BIN_EXE_adevents"))
            .args(&args)
            .env("ADEVENTS_LOG_LEVEL", "info")
            .env("ADEVENTS_LOG_FORMAT", "json")
            .env("ADEVENTS_ADMIN_KEY", ADMIN_KEY)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start adevents");
        let base = format!("http://127.0.0.1:{port}");
        let mut server = Self { child, base };
        let client = reqwest::Client::new();
        // Opening a large folder replays its journal first, which can take a while.
        for _ in 0..3000 {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("adevents exited before it was ready: {status}");
            }
            if let Ok(response) = client.get(format!("{}/readyz", server.base)).send().await
                && response.status().is_success()
            {
                return server;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        server.stop();
        panic!("adevents did not become ready");
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// One export: (rows, seconds to the first byte, seconds in all, resident MiB before it,
/// peak resident MiB during it, sampled every 10 ms).
async fn export(store: &str, size: usize) -> (u64, f64, f64, f64, f64) {
    let server = Server::start(store).await;
    let pid = server.child.id();
    let before = support::rss_mib(pid);
    let exporting = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampling = Arc::clone(&exporting);
    let sampler = tokio::spawn(async move {
        let mut peak = 0.0f64;
        while sampling.load(std::sync::atomic::Ordering::SeqCst) {
            peak = peak.max(support::rss_mib(pid));
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        peak
    });
    let campaign = campaign_of(size);
    let last = first_day() + Duration::days(DAYS - 1);
    let url = format!(
        "{}/v1/advertisers/{}/campaigns/{}/impressions?from={}&to={last}",
        server.base,
        campaign.advertiser_id,
        campaign.campaign_id,
        first_day()
    );
    let started = Instant::now();
    let mut response = reqwest::Client::new()
        .get(url)
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .expect("export answered");
    assert!(response.status().is_success(), "{}", response.status());
    let (mut rows, mut first_byte) = (0u64, None);
    while let Some(chunk) = response.chunk().await.expect("the export's bytes") {
        first_byte.get_or_insert_with(|| started.elapsed().as_secs_f64());
        rows += chunk.iter().filter(|byte| **byte == b'\n').count() as u64;
    }
    let seconds = started.elapsed().as_secs_f64();
    exporting.store(false, std::sync::atomic::Ordering::SeqCst);
    let peak = sampler.await.expect("sampler").max(support::rss_mib(pid));
    server.stop();
    (rows, first_byte.unwrap_or(seconds), seconds, before, peak)
}

#[tokio::main]
async fn main() {
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES")
        .unwrap_or_else(|_| "1000000,5000000".to_owned())
        .split(',')
        .filter_map(|size| size.trim().parse().ok())
        .collect();
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    for store_name in ["embedded", "cassandra"] {
        println!("## {store_name}");
        let missing: Vec<usize> = sizes
            .iter()
            .copied()
            .filter(|size| !loaded_marker(store_name, *size).exists())
            .collect();
        if !missing.is_empty() {
            // Loaded in this process, which then lets go of the store for the servers.
            let store: Arc<dyn Store> = match store_name {
                "embedded" => Arc::new(support::embedded_store("export", Fsync::Never)),
                _ => Arc::new(support::store(WriteMode::Batch).await),
            };
            for size in missing {
                load(Arc::clone(&store), size).await;
                std::fs::write(loaded_marker(store_name, size), b"").expect("marker");
            }
        }
        // size index → (rows/s, first byte s, MiB before, peak MiB) per round.
        let mut results: Vec<Vec<(f64, f64, f64, f64)>> = vec![Vec::new(); sizes.len()];
        for round in 0..rounds {
            for (index, size) in sizes.iter().enumerate() {
                let (rows, first_byte, seconds, before, peak) = export(store_name, *size).await;
                assert_eq!(rows, *size as u64, "every impression exported once");
                println!(
                    "  round {round}: {size}: {:.0} rows/s, first byte after {:.0} ms, {before:.0} MiB before, peak {peak:.0} MiB",
                    rows as f64 / seconds,
                    first_byte * 1000.0
                );
                results[index].push((rows as f64 / seconds, first_byte, before, peak));
            }
        }
        println!(
            "\n| {store_name} | rows/s (median) | first byte (median) | resident before | peak during the export (median) | peak × smallest |\n|---|---|---|---|---|---|"
        );
        let base_peak = support::median(results[0].iter().map(|r| r.3).collect());
        for (size, values) in sizes.iter().zip(&results) {
            let peak = support::median(values.iter().map(|r| r.3).collect());
            println!(
                "| {size} impressions | {:.0} | {:.0} ms | {:.0} MiB | {peak:.0} MiB | {:.2} |",
                support::median(values.iter().map(|r| r.0).collect()),
                support::median(values.iter().map(|r| r.1).collect()) * 1000.0,
                support::median(values.iter().map(|r| r.2).collect()),
                peak / base_peak
            );
        }
        println!();
    }
}
