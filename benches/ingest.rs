//! Ingestion throughput: events per second through HTTP (batches of 500, concurrent clients)
//! against raw prepared inserts of the same rows with the same driver to the same node, the
//! service's two write modes (unlogged single-partition batches, concurrent single-row
//! inserts), the embedded store, and each with keys on (an ingest key on every request) and
//! off, measured side by side in interleaved rounds.
//!
//! `scripts/bench ingest` (starts the Cassandra node if needed). Knobs: BENCH_EVENTS (per
//! variant and round, default 50000), BENCH_ROUNDS (default 3), BENCH_CLIENTS (default 8).
//!
//! `BENCH_MODE=sustained scripts/bench ingest` compares only the service on Cassandra (batch
//! mode, keys on) with the raw driver's batches, in rounds long enough to take in the node's
//! memtable flushes and compactions (default 1,000,000 events per variant and 5 rounds), and
//! reports what the node did during each: a burst of 50,000 events fits in the node's memtable
//! and measures the client, a sustained run measures the node.

mod support;

use adevents::access::{AccessOptions, AuthMode};
use adevents::domain::access::Grant;
use adevents::domain::ids::AdvertiserId;
use adevents::http::{AppState, ServiceOptions};
use adevents::store::Store;
use adevents::store::cassandra::CassandraStore;
use adevents::store::cassandra::config::WriteMode;
use adevents::store::embedded::Fsync;
use chrono::{DateTime, Duration, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use scylla::serialize::row::SerializeRow;
use scylla::statement::batch::{Batch, BatchType};
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

const BATCH: usize = 500;

struct Event {
    impression_id: Uuid,
    ad_id: Uuid,
    user_id: Uuid,
    timestamp: DateTime<Utc>,
}

/// Near-now, time-ordered events of one campaign: what a live ad server sends.
fn events(n: usize) -> Vec<Event> {
    let start = Utc::now() - Duration::hours(1);
    let ads: Vec<Uuid> = (0..20).map(|_| Uuid::new_v4()).collect();
    (0..n)
        .map(|i| Event {
            impression_id: Uuid::new_v4(),
            ad_id: ads[i % ads.len()],
            user_id: Uuid::new_v4(),
            timestamp: start + Duration::milliseconds(i as i64),
        })
        .collect()
}

fn body(advertiser: Uuid, campaign: Uuid, events: &[Event]) -> String {
    Value::Array(
        events
            .iter()
            .map(|e| {
                json!({
                    "impression_id": e.impression_id, "advertiser_id": advertiser, "campaign_id": campaign,
                    "ad_id": e.ad_id, "user_id": e.user_id, "timestamp": e.timestamp.timestamp_millis(),
                    "user_ip": "203.0.113.7", "user_data": {"country": "FR", "device": "mobile"},
                })
            })
            .collect(),
    )
    .to_string()
}

/// Whether the server checks keys: on, every request carries an ingest key of its advertiser.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keys {
    On,
    Off,
}

async fn through_http(store: Arc<dyn Store>, n: usize, clients: usize, keys: Keys) -> f64 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let options = ServiceOptions {
        access: AccessOptions {
            mode: if keys == Keys::On {
                AuthMode::Keys
            } else {
                AuthMode::Off
            },
            ..AccessOptions::default()
        },
        ..ServiceOptions::default()
    };
    let state = AppState::new(store, options);
    state.access.refresh().await.expect("keys read");
    let (advertiser, campaign) = (Uuid::new_v4(), Uuid::new_v4());
    let (_, key) = state
        .access
        .create_key(
            Grant::Ingest(AdvertiserId::new(advertiser)),
            None,
            Utc::now(),
        )
        .await
        .expect("an ingest key");
    let server = tokio::spawn(adevents::server::serve(
        listener,
        state,
        std::future::pending(),
    ));
    let all = events(n);
    let bodies: Vec<String> = all
        .chunks(BATCH)
        .map(|chunk| body(advertiser, campaign, chunk))
        .collect();
    let client = reqwest::Client::new();
    let url = format!("http://{address}/v1/impressions");
    let (result, elapsed) = support::timed(
        stream::iter(bodies)
            .map(|body| {
                let mut request = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body);
                if keys == Keys::On {
                    request = request.bearer_auth(&key.token);
                }
                async move {
                    let response = request.send().await?;
                    assert!(response.status().is_success(), "{}", response.status());
                    Ok::<_, reqwest::Error>(())
                }
            })
            .buffer_unordered(clients)
            .try_collect::<()>(),
    )
    .await;
    result.expect("every batch accepted");
    server.abort();
    n as f64 / elapsed.as_secs_f64()
}

/// How the raw-driver baseline sends its rows.
#[derive(Clone, Copy)]
enum Raw {
    /// One prepared insert per row, 256 in flight.
    Rows,
    /// Unlogged batches of 100 impressions (both rows of each), 16 in flight.
    Batches,
}

/// The same two rows per impression straight through the driver: no HTTP, no JSON, no
/// validation, no grouping.
async fn raw_driver(store: &CassandraStore, n: usize, mode: Raw) -> f64 {
    let session = store.session();
    let keyspace = store.keyspace();
    let mut insert = session
        .prepare(format!(
            "INSERT INTO {keyspace}.impression (advertiser_id, campaign_id, day, bucket_id, timestamp, impression_id, \
             ad_id, user_id, user_ip, user_data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        ))
        .await
        .expect("prepare");
    insert.set_is_idempotent(true);
    let mut thin = session
        .prepare(format!(
            "INSERT INTO {keyspace}.impression_summary (advertiser_id, campaign_id, day, bucket_id, timestamp, \
             impression_id, ad_id, user_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        ))
        .await
        .expect("prepare");
    thin.set_is_idempotent(true);
    let (advertiser, campaign) = (Uuid::new_v4(), Uuid::new_v4());
    let all = events(n);
    let ip: std::net::IpAddr = "203.0.113.7".parse().expect("ip");
    let user_data = std::collections::BTreeMap::from([
        ("country".to_owned(), "FR".to_owned()),
        ("device".to_owned(), "mobile".to_owned()),
    ]);
    let (insert, thin, user_data) = (&insert, &thin, &user_data);
    let full = |e: &Event| {
        let day = e.timestamp.date_naive();
        (
            advertiser,
            campaign,
            day,
            0i16,
            e.timestamp,
            e.impression_id,
            e.ad_id,
            e.user_id,
            ip,
            user_data,
        )
    };
    let summary = |e: &Event| {
        let day = e.timestamp.date_naive();
        (
            advertiser,
            campaign,
            day,
            0i16,
            e.timestamp,
            e.impression_id,
            e.ad_id,
            e.user_id,
        )
    };
    let (result, elapsed) = match mode {
        Raw::Rows => {
            support::timed(
                stream::iter(&all)
                    .map(|e| async move {
                        futures::try_join!(
                            session.execute_unpaged(insert, full(e)),
                            session.execute_unpaged(thin, summary(e))
                        )
                        .map(|_| ())
                    })
                    .buffer_unordered(256)
                    .try_collect::<()>(),
            )
            .await
        }
        Raw::Batches => {
            support::timed(
                stream::iter(all.chunks(100))
                    .map(|chunk| async move {
                        let mut batch = Batch::new(BatchType::Unlogged);
                        batch.set_is_idempotent(true);
                        let mut values: Vec<Box<dyn SerializeRow + Send + Sync>> = Vec::new();
                        for e in chunk {
                            batch.append_statement(insert.clone());
                            values.push(Box::new(full(e)));
                            batch.append_statement(thin.clone());
                            values.push(Box::new(summary(e)));
                        }
                        session.batch(&batch, values).await.map(|_| ())
                    })
                    .buffer_unordered(16)
                    .try_collect::<()>(),
            )
            .await
        }
    };
    result.expect("every insert acknowledged");
    n as f64 / elapsed.as_secs_f64()
}

/// The sustained comparison: raw batches against the service, interleaved, with the node's
/// activity beside each.
async fn sustained(clients: usize) {
    let n = support::env_knob("BENCH_EVENTS", 1_000_000);
    let rounds = support::env_knob("BENCH_ROUNDS", 5);
    let raw_store = support::store(WriteMode::Rows).await;
    let service: Arc<dyn Store> = Arc::new(support::store(WriteMode::Batch).await);
    raw_driver(&raw_store, 20_000, Raw::Batches).await;
    through_http(Arc::clone(&service), 20_000, clients, Keys::On).await;
    println!(
        "## Sustained ingest on Cassandra: {n} events per variant and round, {rounds} rounds\n"
    );
    println!(
        "| round | variant | events/s | seconds | node cores | bench process cores | flushes | compactions | GC pauses ≥200 ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let (mut raw, mut http, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=rounds {
        // In turns first: whichever runs second meets the flushes and compactions the first
        // left behind.
        let raw_first = round % 2 == 1;
        let mut measured = [0.0; 2];
        for turn in 0..2 {
            let is_raw = (turn == 0) == raw_first;
            let watch = support::node::NodeWatch::start();
            let rate = if is_raw {
                raw_driver(&raw_store, n, Raw::Batches).await
            } else {
                through_http(Arc::clone(&service), n, clients, Keys::On).await
            };
            let node = watch.stop();
            let name = if is_raw {
                "raw driver, batches of 100, 16 in flight"
            } else {
                "service over HTTP, batch mode, keys on"
            };
            println!(
                "| {round} | {name} | {rate:.0} | {:.1} | {:.2} | {:.2} | {} | {} | {} |",
                n as f64 / rate,
                node.node_cores,
                node.bench_cores,
                node.flushes,
                node.compactions,
                node.gc_pauses
            );
            measured[usize::from(!is_raw)] = rate;
        }
        raw.push(measured[0]);
        http.push(measured[1]);
        ratios.push(measured[1] / measured[0]);
    }
    let (raw, http) = (support::median(raw), support::median(http));
    println!(
        "\nmedian: raw driver {raw:.0}/s, service {http:.0}/s: {:.2} of raw (median of the rounds' ratios: {:.2})",
        http / raw,
        support::median(ratios)
    );
}

#[tokio::main]
async fn main() {
    if std::env::var("BENCH_MODE").is_ok_and(|mode| mode == "sustained") {
        sustained(support::env_knob("BENCH_CLIENTS", 8)).await;
        return;
    }
    let n = support::env_knob("BENCH_EVENTS", 50_000);
    let rounds = support::env_knob("BENCH_ROUNDS", 3);
    let clients = support::env_knob("BENCH_CLIENTS", 8);
    let raw_store = support::store(WriteMode::Rows).await;
    // Warm-up: JIT of the node, connection pools, statement caches.
    raw_driver(&raw_store, 20_000, Raw::Batches).await;
    let cassandra = |mode| async move { Arc::new(support::store(mode).await) as Arc<dyn Store> };
    let synced: Arc<dyn Store> = Arc::new(support::embedded_store(
        "ingest-fsync-always",
        Fsync::Always,
    ));
    let unsynced: Arc<dyn Store> =
        Arc::new(support::embedded_store("ingest-fsync-never", Fsync::Never));
    through_http(cassandra(WriteMode::Batch).await, 20_000, clients, Keys::On).await;
    through_http(synced.clone(), 20_000, clients, Keys::On).await;

    let mut results: [Vec<f64>; 8] = Default::default();
    for round in 1..=rounds {
        // Keys on and off run back to back, in turns first: whichever runs second meets a
        // node (or memtable) that the first has just filled.
        let on_first = round % 2 == 1;
        let pair = |store: Arc<dyn Store>| async move {
            if on_first {
                let on = through_http(Arc::clone(&store), n, clients, Keys::On).await;
                (on, through_http(store, n, clients, Keys::Off).await)
            } else {
                let off = through_http(Arc::clone(&store), n, clients, Keys::Off).await;
                (through_http(store, n, clients, Keys::On).await, off)
            }
        };
        let raw_batches = raw_driver(&raw_store, n, Raw::Batches).await;
        let (batch_on, batch_off) = pair(cassandra(WriteMode::Batch).await).await;
        let raw_rows = raw_driver(&raw_store, n, Raw::Rows).await;
        let rows_on = through_http(cassandra(WriteMode::Rows).await, n, clients, Keys::On).await;
        let (synced_on, synced_off) = pair(synced.clone()).await;
        let unsynced_on = through_http(unsynced.clone(), n, clients, Keys::On).await;
        let measured = [
            raw_batches,
            batch_on,
            batch_off,
            raw_rows,
            rows_on,
            synced_on,
            synced_off,
            unsynced_on,
        ];
        println!(
            "round {round}: raw batches {:.0}/s, HTTP batch mode {:.0}/s (keys off {:.0}/s), raw rows {:.0}/s, \
             HTTP rows mode {:.0}/s, embedded fsync always {:.0}/s (keys off {:.0}/s), embedded fsync never {:.0}/s",
            measured[0],
            measured[1],
            measured[2],
            measured[3],
            measured[4],
            measured[5],
            measured[6],
            measured[7]
        );
        for (all, value) in results.iter_mut().zip(measured) {
            all.push(value);
        }
    }
    let [
        raw_batches,
        http_batches,
        http_batches_open,
        raw_rows,
        http_rows,
        embedded_synced,
        embedded_synced_open,
        embedded_unsynced,
    ] = results.map(support::median);
    println!(
        "\n{n} events per variant and round; median of {rounds} rounds; keys on (an ingest key per request) unless marked.\n"
    );
    println!("| variant | events/s | ratio |");
    println!("|---|---|---|");
    println!(
        "| raw driver: unlogged batches of 100 impressions, 16 in flight | {raw_batches:.0} | 1.00 |"
    );
    println!(
        "| service over HTTP: batches of {BATCH}, {clients} clients, `--cassandra-write-mode batch` | {http_batches:.0} | {:.2} of raw batches |",
        http_batches / raw_batches
    );
    println!(
        "| same, `--auth off` | {http_batches_open:.0} | keys on: {:.3} of keys off |",
        http_batches / http_batches_open
    );
    println!(
        "| raw driver: single-row inserts, 256 in flight | {raw_rows:.0} | {:.2} of raw batches |",
        raw_rows / raw_batches
    );
    println!(
        "| service over HTTP: batches of {BATCH}, {clients} clients, `--cassandra-write-mode rows` | {http_rows:.0} | {:.2} of raw rows |",
        http_rows / raw_rows
    );
    println!(
        "| service over HTTP: batches of {BATCH}, {clients} clients, embedded store, `--fsync always` | {embedded_synced:.0} | {:.2} of Cassandra batch mode |",
        embedded_synced / http_batches
    );
    println!(
        "| same, `--auth off` | {embedded_synced_open:.0} | keys on: {:.3} of keys off |",
        embedded_synced / embedded_synced_open
    );
    println!(
        "| service over HTTP: batches of {BATCH}, {clients} clients, embedded store, `--fsync never` | {embedded_unsynced:.0} | {:.2} of Cassandra batch mode |",
        embedded_unsynced / http_batches
    );
}
