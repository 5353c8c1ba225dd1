//! Shared set-up for the benchmarks: the Cassandra node (the one `scripts/bench` started, or
//! `ADEVENTS_CASSANDRA_NODES`), a benchmark keyspace, and timing helpers.

#![allow(dead_code)]

pub mod node;
pub mod server;

use adevents::migrations;
use adevents::store::cassandra::CassandraStore;
use adevents::store::cassandra::config::{CassandraConfig, ConsistencyLevel, WriteMode};
use adevents::store::embedded::{EmbeddedConfig, EmbeddedStore, EngineMemory, Fsync};
use std::time::{Duration, Instant};

/// The benchmark keyspace: `ADEVENTS_BENCH_KEYSPACE`, or `adevents_bench`.
pub fn bench_keyspace() -> String {
    std::env::var("ADEVENTS_BENCH_KEYSPACE").unwrap_or_else(|_| "adevents_bench".to_owned())
}

pub fn config(write_mode: WriteMode) -> CassandraConfig {
    config_in(&bench_keyspace(), write_mode)
}

/// The configuration of a store on `keyspace`.
pub fn config_in(keyspace: &str, write_mode: WriteMode) -> CassandraConfig {
    let nodes =
        std::env::var("ADEVENTS_CASSANDRA_NODES").unwrap_or_else(|_| "127.0.0.1:9042".to_owned());
    CassandraConfig {
        nodes: nodes.split(',').map(str::to_owned).collect(),
        keyspace: keyspace.parse().expect("valid keyspace"),
        replication: "simple:1".parse().expect("valid replication"),
        consistency: ConsistencyLevel::LocalQuorum,
        local_datacenter: None,
        credentials: None,
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(60),
        write_mode,
        retain_raw: adevents::domain::retention::Retention::Forever,
        retain_aggregates: adevents::domain::retention::Retention::Forever,
    }
}

pub async fn store(write_mode: WriteMode) -> CassandraStore {
    store_in(&bench_keyspace(), write_mode).await
}

/// A migrated store on `keyspace`.
pub async fn store_in(keyspace: &str, write_mode: WriteMode) -> CassandraStore {
    let migrations = migrations::embedded().expect("embedded migrations");
    let store = CassandraStore::connect(config_in(keyspace, write_mode), &migrations)
        .await
        .expect("connect to Cassandra (scripts/bench starts it)");
    store.migrate(&migrations).await.expect("migrate");
    store.prepare().await.expect("prepare");
    store
}

/// Runs `f` and returns what it returned and how long it took.
pub async fn timed<T>(f: impl std::future::Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let value = f.await;
    (value, started.elapsed())
}

/// A numeric knob from the environment, or its default.
pub fn env_knob(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// The resident memory of process `pid` now, in MiB (Linux `/proc`; 0 once it is gone).
pub fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| {
            value
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .unwrap_or_default()
        / 1024.0
}

/// Samples a process's resident memory every 100 ms from [`PeakRss::start`] until
/// [`PeakRss::stop`], which gives the highest sample (in MiB).
pub struct PeakRss {
    sampling: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sampler: tokio::task::JoinHandle<f64>,
}

impl PeakRss {
    pub fn start(pid: u32) -> Self {
        let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let running = std::sync::Arc::clone(&sampling);
        let sampler = tokio::spawn(async move {
            let mut peak = rss_mib(pid);
            while running.load(std::sync::atomic::Ordering::SeqCst) {
                peak = peak.max(rss_mib(pid));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            peak
        });
        Self { sampling, sampler }
    }

    pub async fn stop(self) -> f64 {
        self.sampling
            .store(false, std::sync::atomic::Ordering::SeqCst);
        self.sampler.await.unwrap_or_default()
    }
}

/// The middle value; for an even count, the mean of the two middle ones (NaN for none).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    match values.len() {
        0 => f64::NAN,
        // An even count has two middles: reporting the higher one flattered two-round runs.
        even if even % 2 == 0 => (values[middle - 1] + values[middle]) / 2.0,
        _ => values[middle],
    }
}

/// An embedded store in `target/bench-data/NAME` (kept between runs, so loaded data is reused).
pub fn embedded_store(name: &str, fsync: Fsync) -> EmbeddedStore {
    let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join("bench-data")
        .join(name);
    EmbeddedStore::open(&EmbeddedConfig {
        data_dir: folder,
        fsync,
        memory: EngineMemory::default(),
    })
    .expect("open the embedded store")
}

/// A campaign of its own for each benchmark and size, the same ids on every run, so loaded
/// data is found again.
pub fn bench_campaign(bench: &str, size: usize) -> adevents::domain::ids::CampaignKey {
    use adevents::domain::ids::{AdvertiserId, CampaignId, CampaignKey};
    let id = |name: &str| {
        uuid::Uuid::new_v5(
            &uuid::Uuid::NAMESPACE_OID,
            format!("adevents-bench-{bench}-{name}-{size}").as_bytes(),
        )
    };
    CampaignKey {
        advertiser_id: AdvertiserId::new(id("advertiser")),
        campaign_id: CampaignId::new(id("campaign")),
    }
}

/// Ingests `size` impressions of `campaign` spread evenly over `days` UTC days from `first`:
/// 20 ads, users drawn from size/5 (returning users), 1 % clicked 20 s later. With
/// `attributes`, each also carries an IP and two `user_data` keys. Seeded by `size`, so a
/// reload writes the same events.
pub async fn load_month(
    ingestor: &adevents::ingest::Ingestor,
    campaign: adevents::domain::ids::CampaignKey,
    size: usize,
    first: chrono::NaiveDate,
    days: i64,
    attributes: bool,
) {
    use adevents::domain::event::{Click, Impression};
    use adevents::domain::ids::{AdId, ImpressionId, UserId};
    use adevents::domain::time::EventTime;
    use adevents::domain::user_data::UserData;
    use chrono::Duration as Span;
    use rand::{Rng, SeedableRng};
    use uuid::Uuid;

    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(size as u64);
    let ads: Vec<AdId> = (0..20)
        .map(|_| AdId::new(Uuid::from_u128(rng.random())))
        .collect();
    let users = (size / 5).max(1) as u128;
    let countries = ["DE", "FR", "US", "IN", "BR", "JP"];
    let start = first.and_hms_opt(0, 0, 0).expect("valid").and_utc();
    let step_micros = days * 86_400_000_000 / size as i64;
    let started = Instant::now();
    let (mut batch, mut clicks) = (Vec::with_capacity(5000), Vec::new());
    for i in 0..size {
        let mut impression = Impression {
            impression_id: ImpressionId::new(Uuid::from_u128(rng.random())),
            campaign,
            ad_id: ads[rng.random_range(0..ads.len())],
            user_id: UserId::new(Uuid::from_u128(rng.random_range(0..users))),
            timestamp: EventTime::from_stored(start + Span::microseconds(step_micros * i as i64)),
            user_ip: None,
            user_data: UserData::default(),
            user_agent: None,
            invalid: None,
            pixel_arrival: None,
            ip_is_viewers: true,
        };
        if attributes {
            let country = countries[rng.random_range(0..countries.len())];
            let age = rng.random_range(18..80).to_string();
            impression.user_ip = Some(std::net::IpAddr::from([198, 51, 100, (i % 250) as u8]));
            impression.user_data = UserData::from_stored(
                [
                    ("country".to_owned(), country.to_owned()),
                    ("age".to_owned(), age),
                ]
                .into(),
            );
        }
        if i % 100 == 0 {
            clicks.push(Click {
                impression_id: impression.impression_id,
                campaign,
                ad_id: impression.ad_id,
                timestamp: EventTime::from_stored(
                    impression.timestamp.instant() + Span::seconds(20),
                ),
                user_agent: None,
                invalid: None,
            });
        }
        batch.push(impression);
        if batch.len() == 5000 || i + 1 == size {
            ingestor
                .impressions(std::mem::take(&mut batch))
                .await
                .expect("loaded");
            ingestor
                .clicks(std::mem::take(&mut clicks))
                .await
                .expect("loaded");
        }
    }
    println!(
        "  loaded {size} impressions in {:.0} s",
        started.elapsed().as_secs_f64()
    );
}
