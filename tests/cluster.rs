//! The fault test (`scripts/cluster-test`, which starts the three-node cluster this needs):
//! two `adevents serve` processes on a keyspace replicated three times, a client that sends
//! impressions, clicks and beacons to both like an ad server (a 503, a timeout or a refused
//! connection is retried on the other server), and during the load: one Cassandra node killed
//! and restarted, two nodes stopped and started, one server killed and restarted. At the end
//! every acknowledged event must be counted exactly once.
//!
//! Not part of `cargo test` (it needs the cluster): `cargo test --release --test cluster`.

use chrono::Utc;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};
use uuid::Uuid;

const ADMIN_KEY: &str = "adevents-fault-test-admin-key-0123456789";
const WORKERS: usize = 6;
const USERS: usize = 400;
const VISITORS: usize = 300;
/// Beacon timestamps: the test's start plus a sequence number, so no two beacons share a
/// millisecond (the clock plus a sequence could).
static BEACON_EPOCH_MILLIS: std::sync::LazyLock<i64> =
    std::sync::LazyLock::new(|| Utc::now().timestamp_millis());
/// Spreads beacons over milliseconds of their own (see the beacon's timestamp).
static BEACON_SEQUENCE: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

fn nodes() -> String {
    std::env::var("ADEVENTS_CASSANDRA_NODES")
        .expect("ADEVENTS_CASSANDRA_NODES: run scripts/cluster-test")
}

/// `scripts/cassandra cluster ARGS` with the caller's cluster settings.
async fn cluster(args: &[&str]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/cassandra");
    let status = Command::new(script)
        .arg("cluster")
        .args(args)
        .stdout(Stdio::null())
        .status()
        .await
        .expect("scripts/cassandra runs");
    assert!(
        status.success(),
        "scripts/cassandra cluster {args:?} failed"
    );
}

/// One `adevents serve` on a fixed port, so a restart keeps its address.
struct Server {
    port: u16,
    keyspace: String,
    child: Option<Child>,
}

impl Server {
    fn new(keyspace: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        Self {
            port,
            keyspace: keyspace.to_owned(),
            child: None,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    async fn start(&mut self) {
        let log = std::fs::File::create(
            std::env::temp_dir().join(format!("adevents-fault-{}.log", self.port)),
        )
        .expect("a log file");
        let child = Command::new(env!("CARGO_BIN_EXE_adevents"))
            .args([
                "serve",
                "--store",
                "cassandra",
                "--cassandra-nodes",
                &nodes(),
                "--keyspace",
                &self.keyspace,
                "--replication",
                "simple:3",
                "--consistency",
                "local-quorum",
                "--listen",
                &format!("127.0.0.1:{}", self.port),
            ])
            .env("ADEVENTS_ADMIN_KEY", ADMIN_KEY)
            .env("ADEVENTS_RATE_LIMIT_BEACONS", "off")
            .env("ADEVENTS_LOG_LEVEL", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("adevents starts");
        self.child = Some(child);
        let started = Instant::now();
        // The first start on a fresh keyspace creates every table, each waiting for the three
        // nodes to agree on the schema.
        while started.elapsed() < Duration::from_secs(300) {
            if readiness(self).await == Some(StatusCode::OK) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("server on port {} not ready after 300 s", self.port);
    }

    async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.start_kill().expect("kill -9");
            let _ = child.wait().await;
        }
    }
}

fn client() -> reqwest::Client {
    client_waiting(Duration::from_secs(15))
}

/// A client with the admin key that waits up to `timeout` for an answer.
fn client_waiting(timeout: Duration) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {ADMIN_KEY}").parse().expect("header"),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .timeout(timeout)
        .build()
        .expect("client")
}

/// `/readyz`'s status, or `None` when it does not answer within 5 s.
async fn readiness(server: &Server) -> Option<StatusCode> {
    client()
        .get(server.url("/readyz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()
        .map(|response| response.status())
}

/// What the client sent and the servers acknowledged.
#[derive(Default)]
struct Ledger {
    impressions: Vec<(Uuid, Uuid)>,
    clicks: HashSet<Uuid>,
    beacons: usize,
    guids: HashSet<String>,
    /// Per phase: failed attempts, and the longest time one request took to be acknowledged
    /// while attempts failed.
    failures: BTreeMap<&'static str, (usize, Duration)>,
    /// A 503 without Retry-After, or a 5xx other than 503.
    bad_errors: Vec<String>,
}

struct Load {
    ports: [u16; 2],
    campaign: (Uuid, Uuid),
    site: String,
    phase: Mutex<&'static str>,
    ledger: Mutex<Ledger>,
    stop: AtomicBool,
}

impl Load {
    fn phase(&self) -> &'static str {
        *self.phase.lock().expect("lock")
    }

    /// Sends one request until a server acknowledges it, alternating servers on failure.
    async fn deliver(&self, http: &reqwest::Client, first: usize, path: &str, body: &Value) {
        let began = Instant::now();
        let mut failed = 0;
        for attempt in 0.. {
            let port = self.ports[(first + attempt) % 2];
            let url = format!("http://127.0.0.1:{port}{path}");
            match http.post(&url).json(body).send().await {
                Ok(response) if response.status().is_success() => break,
                Ok(response) => {
                    let status = response.status();
                    let retry_after = response.headers().contains_key("retry-after");
                    if status != StatusCode::SERVICE_UNAVAILABLE || !retry_after {
                        let text = response.text().await.unwrap_or_default();
                        let error = format!(
                            "{} {path}: {status} (Retry-After: {retry_after}) {text}",
                            self.phase()
                        );
                        self.ledger.lock().expect("lock").bad_errors.push(error);
                    }
                    failed += 1;
                }
                Err(_) => failed += 1,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if failed > 0 {
            let mut ledger = self.ledger.lock().expect("lock");
            let entry = ledger.failures.entry(self.phase()).or_default();
            entry.0 += failed;
            entry.1 = entry.1.max(began.elapsed());
        }
    }

    async fn worker(self: Arc<Self>, index: usize) {
        let http = client();
        let mut round = 0usize;
        while !self.stop.load(Ordering::Relaxed) {
            let first = (index + round) % 2;
            round += 1;
            let now = Utc::now();
            // Impressions, then a click on one of them, then a beacon.
            let impressions: Vec<(Uuid, Uuid)> = (0..10)
                .map(|_| {
                    (
                        Uuid::new_v4(),
                        Uuid::from_u128(rand_below(USERS) as u128 + 1),
                    )
                })
                .collect();
            let batch: Vec<Value> = impressions
                .iter()
                .map(|(id, user)| {
                    json!({"impression_id": id, "advertiser_id": self.campaign.0,
                           "campaign_id": self.campaign.1, "ad_id": self.campaign.1,
                           "user_id": user, "timestamp": now.to_rfc3339()})
                })
                .collect();
            self.deliver(&http, first, "/v1/impressions", &json!(batch))
                .await;
            self.ledger
                .lock()
                .expect("lock")
                .impressions
                .extend(impressions.iter().copied());
            let clicked = impressions[round % impressions.len()].0;
            let click = json!([{"impression_id": clicked, "advertiser_id": self.campaign.0,
                                "campaign_id": self.campaign.1, "ad_id": self.campaign.1,
                                "timestamp": now.timestamp_millis()}]);
            self.deliver(&http, first + 1, "/v1/clicks", &click).await;
            self.ledger.lock().expect("lock").clicks.insert(clicked);
            let guid = format!("visitor-{}", rand_below(VISITORS));
            // An explicit timestamp makes a retried beacon the same beacon, and a millisecond
            // of its own (the precision kept) keeps two workers' beacons of one visitor apart.
            let millis = *BEACON_EPOCH_MILLIS + BEACON_SEQUENCE.fetch_add(1, Ordering::Relaxed);
            let beacon = json!({"site": self.site, "guid": guid, "page": "/",
                                "timestamp": format!("{}.{:03}", millis / 1000, millis % 1000)});
            self.deliver(&http, first, "/track", &beacon).await;
            let mut ledger = self.ledger.lock().expect("lock");
            ledger.beacons += 1;
            ledger.guids.insert(guid);
        }
    }
}

fn rand_below(bound: usize) -> usize {
    (Uuid::new_v4().as_u128() % bound as u128) as usize
}

/// Waits until both servers' `/readyz` answer `expected`, each within 5 s; returns how long.
async fn until_ready_is(servers: &[&Server], expected: StatusCode, limit: Duration) -> Duration {
    let began = Instant::now();
    loop {
        let mut all = true;
        for server in servers {
            let answer = readiness(server).await;
            assert!(answer.is_some(), "/readyz hung on port {}", server.port);
            all &= answer == Some(expected);
        }
        if all {
            return began.elapsed();
        }
        assert!(
            began.elapsed() < limit,
            "/readyz not {expected} within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_acknowledged_is_lost_through_node_and_server_failures() {
    let test_began = Instant::now();
    let keyspace = format!("fault_{}", &Uuid::new_v4().simple().to_string()[..8]);
    let mut first = Server::new(&keyspace);
    let mut second = Server::new(&keyspace);
    first.start().await;
    second.start().await;
    let campaign = (Uuid::new_v4(), Uuid::new_v4());
    let site = format!("site-{}.test", Uuid::new_v4().simple());
    let registered = client()
        .put(first.url(&format!("/v1/sites/{site}")))
        .json(&json!({}))
        .send()
        .await
        .expect("answered");
    assert_eq!(registered.status(), StatusCode::OK);
    // Both servers know the site before the load (the access cache refreshes every 10 s).
    tokio::time::sleep(Duration::from_secs(11)).await;
    let load = Arc::new(Load {
        ports: [first.port, second.port],
        campaign,
        site: site.clone(),
        phase: Mutex::new("warm-up"),
        ledger: Mutex::new(Ledger::default()),
        stop: AtomicBool::new(false),
    });
    let workers: Vec<_> = (0..WORKERS)
        .map(|index| tokio::spawn(Arc::clone(&load).worker(index)))
        .collect();
    let set_phase = |name: &'static str| {
        *load.phase.lock().expect("lock") = name;
        println!("[{:>5.1}s] {name}", test_began.elapsed().as_secs_f64());
    };
    tokio::time::sleep(Duration::from_secs(10)).await;

    set_phase("node 3 killed");
    cluster(&["kill", "3"]).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    set_phase("node 3 down, quorum holds");
    tokio::time::sleep(Duration::from_secs(10)).await;
    set_phase("node 3 restarting");
    cluster(&["restart", "3"]).await;

    set_phase("nodes 2 and 3 stopped");
    cluster(&["stop", "2"]).await;
    cluster(&["stop", "3"]).await;
    let unready = until_ready_is(
        &[&first, &second],
        StatusCode::SERVICE_UNAVAILABLE,
        Duration::from_secs(60),
    )
    .await;
    println!(
        "          /readyz 503 on both servers after {:.1}s",
        unready.as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    set_phase("nodes 2 and 3 starting");
    // Together: each restart returns once all three nodes are up.
    tokio::join!(cluster(&["restart", "2"]), cluster(&["restart", "3"]));
    let ready = until_ready_is(&[&first, &second], StatusCode::OK, Duration::from_secs(120)).await;
    println!(
        "          /readyz 200 on both servers {:.1}s after the nodes were up",
        ready.as_secs_f64()
    );

    set_phase("server 2 killed");
    second.kill().await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    set_phase("server 2 restarting");
    second.start().await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    set_phase("all up");
    tokio::time::sleep(Duration::from_secs(5)).await;
    load.stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await.expect("worker");
    }
    // Live counts are stored within a second; give the sketches two.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let ledger = std::mem::take(&mut *load.ledger.lock().expect("lock"));
    let acked: HashSet<Uuid> = ledger.impressions.iter().map(|(id, _)| *id).collect();
    let users: HashSet<Uuid> = ledger.impressions.iter().map(|(_, user)| *user).collect();
    // The day's raw partitions are read whole at LOCAL_QUORUM: give them time.
    let http = client_waiting(Duration::from_secs(300));
    let today = Utc::now().date_naive();
    let yesterday = today.pred_opt().expect("a day");
    let range = format!("from={yesterday}&to={today}&tz=UTC");
    let path = format!("/v1/advertisers/{}/campaigns/{}", campaign.0, campaign.1);
    let summary: Value = http
        .get(first.url(&format!("{path}/summary?{range}&group_by=none")))
        .send()
        .await
        .expect("summary")
        .json()
        .await
        .expect("JSON");
    let export = http
        .get(second.url(&format!("{path}/impressions?{range}")))
        .send()
        .await
        .expect("export")
        .text()
        .await
        .expect("text");
    let exported: Vec<Uuid> = export
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|record| {
            record["impression_id"]
                .as_str()
                .and_then(|id| id.parse().ok())
        })
        .collect();
    let exported_set: HashSet<Uuid> = exported.iter().copied().collect();
    let lost = acked.difference(&exported_set).count();
    let duplicated = exported.len() - exported_set.len();
    // Windows counted by both servers count once as soon as they have closed and each server
    // has compared them: within the window (40 s) and a few seconds after the load.
    let billable = summary["totals"]["billable_impressions"]
        .as_u64()
        .unwrap_or(0);
    let compared_by = Instant::now() + Duration::from_secs(60);
    let delivery: Value = loop {
        let delivery: Value = http
            .get(first.url(&format!("{path}/delivery")))
            .send()
            .await
            .expect("delivery")
            .json()
            .await
            .expect("JSON");
        let delivered = delivery["lifetime"]["billable_impressions"].as_u64();
        if delivered == Some(billable) || Instant::now() >= compared_by {
            break delivery;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let uniques: Value = http
        .get(second.url(&format!("/v1/sites/{site}/uniques?{range}")))
        .send()
        .await
        .expect("uniques")
        .json()
        .await
        .expect("JSON");
    let totals = &summary["totals"];
    println!("summary: {totals}");
    println!("uniques: {}", uniques["total"]);
    println!("delivery: {}", delivery["lifetime"]);
    for (phase, (failed, longest)) in &ledger.failures {
        println!(
            "          {phase}: {failed} failed attempts, longest wait for an acknowledgement {:.1}s",
            longest.as_secs_f64()
        );
    }
    for error in ledger.bad_errors.iter().take(10) {
        println!("          unexpected error: {error}");
    }
    let spans: Vec<String> = ledger
        .failures
        .iter()
        .map(|(phase, (_, longest))| format!("{phase} {:.1}s", longest.as_secs_f64()))
        .collect();
    println!(
        "acknowledged {} impressions, {} clicks, {} beacons; counted {} impressions, {} clicks, {} visits; lost {lost}; duplicated {duplicated}; longest failed span: {}",
        acked.len(),
        ledger.clicks.len(),
        ledger.beacons,
        totals["impressions"],
        totals["clicks"],
        uniques["total"]["visits"],
        if spans.is_empty() {
            "none".to_owned()
        } else {
            spans.join(", ")
        }
    );
    assert_eq!(lost, 0, "acknowledged impressions missing from the export");
    assert_eq!(duplicated, 0, "impressions exported twice");
    assert_eq!(totals["impressions"], json!(acked.len()));
    assert_eq!(totals["clicks"], json!(ledger.clicks.len()));
    assert_eq!(uniques["total"]["visits"], json!(ledger.beacons));
    let visitors = uniques["total"]["unique_visitors"].as_u64().unwrap_or(0);
    let exact = ledger.guids.len() as u64;
    assert!(
        visitors.abs_diff(exact) <= 1,
        "{visitors} unique visitors against {exact}"
    );
    let unique_users = totals["unique_users"].as_u64().unwrap_or(0);
    assert!(
        unique_users.abs_diff(users.len() as u64) <= 1,
        "{unique_users} unique users against {}",
        users.len()
    );
    let delivered = delivery["lifetime"]["billable_impressions"]
        .as_u64()
        .unwrap_or(0);
    println!("          delivery counts {delivered} billable impressions, the summary {billable}");
    assert_eq!(delivered, billable, "delivery against the summary");
    assert!(
        ledger.bad_errors.is_empty(),
        "errors other than 503 with Retry-After"
    );
    assert!(
        !ledger.failures.contains_key("node 3 down, quorum holds"),
        "requests failed with one node of three down"
    );

    first.kill().await;
    second.kill().await;
}
