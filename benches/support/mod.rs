//! Shared set-up for the benchmarks: the Cassandra node (the one `scripts/bench` started, or
//! `ADEVENTS_CASSANDRA_NODES`), a benchmark keyspace, and timing helpers.

#![allow(dead_code)]

use adevents::migrations;
use adevents::store::cassandra::CassandraStore;
use adevents::store::cassandra::config::{CassandraConfig, ConsistencyLevel, WriteMode};
use adevents::store::embedded::{EmbeddedConfig, EmbeddedStore, Fsync};
use std::time::{Duration, Instant};

pub fn config(write_mode: WriteMode) -> CassandraConfig {
    let nodes =
        std::env::var("ADEVENTS_CASSANDRA_NODES").unwrap_or_else(|_| "127.0.0.1:9042".to_owned());
    CassandraConfig {
        nodes: nodes.split(',').map(str::to_owned).collect(),
        keyspace: std::env::var("ADEVENTS_BENCH_KEYSPACE")
            .unwrap_or_else(|_| "adevents_bench".to_owned())
            .parse()
            .expect("valid keyspace"),
        replication: "simple:1".parse().expect("valid replication"),
        consistency: ConsistencyLevel::LocalQuorum,
        local_datacenter: None,
        credentials: None,
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(60),
        write_mode,
        retention: None,
    }
}

pub async fn store(write_mode: WriteMode) -> CassandraStore {
    let migrations = migrations::embedded().expect("embedded migrations");
    let store = CassandraStore::connect(config(write_mode), &migrations)
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

pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
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
    })
    .expect("open the embedded store")
}
