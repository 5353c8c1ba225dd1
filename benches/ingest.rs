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
//! mode, keys on; alone, and beside a second listed server process) with the raw driver's
//! batches, in rounds long enough to take in the node's memtable flushes and compactions
//! (default 1,000,000 events per variant and 5 rounds), and reports what the node did during
//! each: a burst of 50,000 events fits in the node's memtable and measures the client, a
//! sustained run measures the node.
//!
//! Every service variant runs its own server, stopped as `adevents serve` stops (it leaves the
//! list of processes); a second process listed makes a server publish its billable windows,
//! so processes an interrupted earlier run left listed are removed first (burst mode). The
//! sustained mode writes to `<bench keyspace>_sustained`, dropped and made anew at each run.

mod support;

use adevents::access::{AccessOptions, AuthMode};
use adevents::app::{App, Options};
use adevents::domain::access::Grant;
use adevents::domain::ids::AdvertiserId;
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

/// A variant's events per second, and what the node did while they were sent.
struct Measured {
    rate: f64,
    node: support::node::NodeActivity,
}

/// Whether another server process shares the store while the measured one ingests.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Peers {
    /// One process: nothing to compare billable windows with, so none is published.
    Alone,
    /// A second, idle process is listed: the measured one publishes the users whose billable
    /// window it counts, four times a second, and compares them once each window closes.
    Listed,
}

/// A server of the service in this process, listed like any running one until stopped.
struct BenchServer {
    address: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl BenchServer {
    async fn start(app: App) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            app.serve(listener, async {
                let _ = stopped.await;
            })
            .await
        });
        Self {
            address,
            stop,
            task,
        }
    }

    /// Stops it as `adevents serve` stops: its last flush, then it leaves the list of
    /// processes, so the next variant's server finds itself alone.
    async fn stop(self) {
        let _ = self.stop.send(());
        self.task
            .await
            .expect("the server task")
            .expect("the server stopped cleanly");
    }
}

/// Removes the processes an interrupted earlier run left listed in the benchmark keyspace, so
/// that the measured server is alone unless a variant lists a peer on purpose.
async fn clear_leftover_processes(store: &dyn Store) {
    let leftovers = store.processes().await.expect("listed processes");
    for report in &leftovers {
        store
            .remove_process(report.id)
            .await
            .expect("a leftover process removed");
    }
    if !leftovers.is_empty() {
        println!(
            "(removed {} processes an earlier run left listed)\n",
            leftovers.len()
        );
    }
}

async fn through_http(
    store: Arc<dyn Store>,
    n: usize,
    clients: usize,
    keys: Keys,
    peers: Peers,
) -> Measured {
    let peer = match peers {
        Peers::Alone => None,
        Peers::Listed => {
            let peer = BenchServer::start(App::new(Arc::clone(&store), Options::default())).await;
            // The measured server sees the peer at its first comparison, within a second.
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            Some(peer)
        }
    };
    let mut options = Options::default();
    options.service.access = AccessOptions {
        mode: if keys == Keys::On {
            AuthMode::Keys
        } else {
            AuthMode::Off
        },
        ..AccessOptions::default()
    };
    let app = App::new(store, options);
    app.access().refresh().await.expect("keys read");
    let (advertiser, campaign) = (Uuid::new_v4(), Uuid::new_v4());
    let (_, key) = app
        .access()
        .create_key(
            Grant::Ingest(AdvertiserId::new(advertiser)),
            None,
            Utc::now(),
        )
        .await
        .expect("an ingest key");
    let server = BenchServer::start(app).await;
    let all = events(n);
    let bodies: Vec<String> = all
        .chunks(BATCH)
        .map(|chunk| body(advertiser, campaign, chunk))
        .collect();
    let client = reqwest::Client::new();
    let url = format!("http://{}/v1/impressions", server.address);
    let (result, elapsed, node) = support::node::watched(
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
    server.stop().await;
    if let Some(peer) = peer {
        peer.stop().await;
    }
    Measured {
        rate: n as f64 / elapsed.as_secs_f64(),
        node,
    }
}

/// How the raw-driver baseline sends its rows.
#[derive(Clone, Copy)]
enum Raw {
    /// One prepared insert per row, 256 in flight.
    Rows,
    /// Unlogged batches of 100 impressions (both rows of each), 16 in flight.
    Batches,
}

/// The same two rows per impression, with the same cells (`valid` included, as the service
/// writes for valid traffic), straight through the driver: no HTTP, no JSON, no validation,
/// no grouping.
async fn raw_driver(store: &CassandraStore, n: usize, mode: Raw) -> Measured {
    let session = store.session();
    let keyspace = store.keyspace();
    let mut insert = session
        .prepare(format!(
            "INSERT INTO {keyspace}.impression (advertiser_id, campaign_id, day, bucket_id, timestamp, impression_id, \
             ad_id, user_id, user_ip, user_data, valid) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, true)"
        ))
        .await
        .expect("prepare");
    insert.set_is_idempotent(true);
    let mut thin = session
        .prepare(format!(
            "INSERT INTO {keyspace}.impression_summary (advertiser_id, campaign_id, day, bucket_id, timestamp, \
             impression_id, ad_id, user_id, valid) VALUES (?, ?, ?, ?, ?, ?, ?, ?, true)"
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
    let (result, elapsed, node) = match mode {
        Raw::Rows => {
            support::node::watched(
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
            support::node::watched(
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
    Measured {
        rate: n as f64 / elapsed.as_secs_f64(),
        node,
    }
}

/// The sustained variants, in the order of the first round.
const SUSTAINED: [&str; 3] = [
    "raw driver, batches of 100, 16 in flight",
    "service over HTTP, batch mode, keys on, one process",
    "same, a second server process listed",
];

/// The sustained comparison: raw batches against the service alone and beside a second
/// process, interleaved, with the node's activity beside each.
async fn sustained(clients: usize) {
    let n = support::env_knob("BENCH_EVENTS", 1_000_000);
    let rounds = support::env_knob("BENCH_ROUNDS", 5);
    // A keyspace of its own, new each run: the rounds write millions of rows into a few
    // partitions, and a 1 GiB node that also holds earlier runs' has run out of heap.
    let keyspace = format!("{}_sustained", support::bench_keyspace());
    support::store(WriteMode::Rows)
        .await
        .session()
        .query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ())
        .await
        .expect("the previous run's keyspace dropped");
    let raw_store = support::store_in(&keyspace, WriteMode::Rows).await;
    let service: Arc<dyn Store> = Arc::new(support::store_in(&keyspace, WriteMode::Batch).await);
    raw_driver(&raw_store, 20_000, Raw::Batches).await;
    through_http(
        Arc::clone(&service),
        20_000,
        clients,
        Keys::On,
        Peers::Alone,
    )
    .await;
    println!(
        "## Sustained ingest on Cassandra: {n} events per variant and round, {rounds} rounds\n"
    );
    println!(
        "| round | variant | events/s | seconds | node cores | bench process cores | flushes | compactions | GC pauses ≥200 ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut rates: [Vec<f64>; 3] = Default::default();
    let mut ratios: [Vec<f64>; 2] = Default::default();
    for round in 1..=rounds {
        // Each round starts with the next variant: whichever runs later meets the flushes and
        // compactions the earlier ones left behind.
        let mut measured = [0.0; 3];
        for turn in 0..3 {
            let variant = (turn + round - 1) % 3;
            let run = match variant {
                0 => raw_driver(&raw_store, n, Raw::Batches).await,
                1 => through_http(Arc::clone(&service), n, clients, Keys::On, Peers::Alone).await,
                _ => through_http(Arc::clone(&service), n, clients, Keys::On, Peers::Listed).await,
            };
            let Measured { rate, node } = run;
            println!(
                "| {round} | {} | {rate:.0} | {:.1} | {:.2} | {:.2} | {} | {} | {} |",
                SUSTAINED[variant],
                n as f64 / rate,
                node.node_cores,
                node.bench_cores,
                node.flushes,
                node.compactions,
                node.gc_pauses
            );
            measured[variant] = rate;
        }
        for (all, rate) in rates.iter_mut().zip(measured) {
            all.push(rate);
        }
        ratios[0].push(measured[1] / measured[0]);
        ratios[1].push(measured[2] / measured[0]);
    }
    let [raw, alone, listed] = rates.map(support::median);
    let [alone_ratio, listed_ratio] = ratios.map(support::median);
    println!(
        "\nmedian: raw driver {raw:.0}/s; service alone {alone:.0}/s, {:.2} of raw (median of the rounds' ratios: {alone_ratio:.2}); \
         beside a listed process {listed:.0}/s, {:.2} of raw (median of the rounds' ratios: {listed_ratio:.2})",
        alone / raw,
        listed / raw,
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
    clear_leftover_processes(&raw_store).await;
    // Warm-up: JIT of the node, connection pools, statement caches.
    raw_driver(&raw_store, 20_000, Raw::Batches).await;
    let cassandra = |mode| async move { Arc::new(support::store(mode).await) as Arc<dyn Store> };
    let synced: Arc<dyn Store> = Arc::new(support::embedded_store(
        "ingest-fsync-always",
        Fsync::Always,
    ));
    let unsynced: Arc<dyn Store> =
        Arc::new(support::embedded_store("ingest-fsync-never", Fsync::Never));
    through_http(
        cassandra(WriteMode::Batch).await,
        20_000,
        clients,
        Keys::On,
        Peers::Alone,
    )
    .await;
    through_http(synced.clone(), 20_000, clients, Keys::On, Peers::Alone).await;

    let mut results: [Vec<f64>; 8] = Default::default();
    for round in 1..=rounds {
        // Keys on and off run back to back, in turns first: whichever runs second meets a
        // node (or memtable) that the first has just filled.
        let on_first = round % 2 == 1;
        let pair = |store: Arc<dyn Store>| async move {
            if on_first {
                let on = through_http(Arc::clone(&store), n, clients, Keys::On, Peers::Alone)
                    .await
                    .rate;
                (
                    on,
                    through_http(store, n, clients, Keys::Off, Peers::Alone)
                        .await
                        .rate,
                )
            } else {
                let off = through_http(Arc::clone(&store), n, clients, Keys::Off, Peers::Alone)
                    .await
                    .rate;
                (
                    through_http(store, n, clients, Keys::On, Peers::Alone)
                        .await
                        .rate,
                    off,
                )
            }
        };
        let raw_batches = raw_driver(&raw_store, n, Raw::Batches).await.rate;
        let (batch_on, batch_off) = pair(cassandra(WriteMode::Batch).await).await;
        let raw_rows = raw_driver(&raw_store, n, Raw::Rows).await.rate;
        let rows_on = through_http(
            cassandra(WriteMode::Rows).await,
            n,
            clients,
            Keys::On,
            Peers::Alone,
        )
        .await
        .rate;
        let (synced_on, synced_off) = pair(synced.clone()).await;
        let unsynced_on = through_http(unsynced.clone(), n, clients, Keys::On, Peers::Alone)
            .await
            .rate;
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
