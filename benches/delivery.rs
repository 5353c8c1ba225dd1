//! `GET …/campaigns/{c}/delivery` on the real binary, its two promises measured:
//!
//! 1. Latency that does not grow with a campaign's age: a campaign with 1 month (30 days) and
//!    one with 12 months (365 days) of sealed history at the same rate (BENCH_PER_DAY
//!    impressions a day, each of a distinct user, spread over the day, plus as many today),
//!    backfilled over HTTP with an admin key and sealed by the server's own sealer
//!    (`--seal-interval 1s`: the backfilled days are late and sealed whatever their age), then
//!    BENCH_REQUESTS sequential `delivery` requests alternating between the two campaigns (the
//!    order flipped every pair), on the embedded store and on Cassandra: median and p99 of each
//!    and their ratio 12 months ÷ 1 month. On Cassandra, measured again once the seals'
//!    deletions of live rows are compacted away (as they are for a campaign that aged a day at
//!    a time; see [`compact_sealed_deletions`]).
//! 2. Staleness under load on Cassandra: two `adevents serve` processes on one keyspace;
//!    senders post 50-impression batches of distinct users to one campaign as fast as they
//!    can, each alternating between the servers; every 100 ms a checker takes the number of
//!    impressions acknowledged so far (counted after each 2xx), waits 1 s and asks `delivery`
//!    (alternating servers): the gap `acknowledged before − lifetime billable` must be 0
//!    (impressions acknowledged during that second can hide a shortfall, so beside each check
//!    a probe posts one batch of a fresh campaign to one server and asks the other 1 s after
//!    its acknowledgement: all 50 must be there).
//!
//! `scripts/bench delivery` (starts the Cassandra node if needed). The Cassandra servers use a
//! fresh keyspace `bench_delivery_<random>`, dropped at the end. Knobs: BENCH_PER_DAY (200),
//! BENCH_REQUESTS (per store, both campaigns together, default 2000), BENCH_SECONDS (load of
//! part 2, default 20), BENCH_SENDERS (concurrent senders per server, default 3).

mod support;

use chrono::{DateTime, Duration as Span, NaiveDate, TimeDelta, Utc};
use futures::{StreamExt, stream};
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use support::server::{ADMIN_KEY, Server, admin};
use uuid::Uuid;

/// Days of sealed history of the two campaigns of part 1.
const MONTH_DAYS: i64 = 30;
const YEAR_DAYS: i64 = 365;
/// Impressions per request of part 2.
const LOAD_BATCH: usize = 50;

/// An `adevents serve` process on Cassandra (the embedded one is [`Server`]).
struct CassandraServer {
    child: Child,
    base: String,
}

impl CassandraServer {
    async fn start(nodes: &str, keyspace: &str) -> Self {
        let address = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port");
        let child = Command::new(env!("CARGO_BIN_EXE_adevents"))
            .args([
                "serve",
                "--listen",
                &address.to_string(),
                "--store",
                "cassandra",
                "--cassandra-nodes",
                nodes,
                "--keyspace",
                keyspace,
                "--seal-interval",
                "1s",
            ])
            .env("ADEVENTS_ADMIN_KEY", ADMIN_KEY)
            .env("ADEVENTS_LOG_LEVEL", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start adevents");
        let mut server = Self {
            child,
            base: format!("http://{address}"),
        };
        let client = reqwest::Client::new();
        // The first process on a fresh keyspace creates it and its tables first.
        for _ in 0..1200 {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("adevents exited before it was ready: {status}");
            }
            if let Ok(response) = client.get(format!("{}/readyz", server.base)).send().await
                && response.status().is_success()
            {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
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

/// A campaign of part 1: its ids, its sealed days and the billable impressions it holds.
#[derive(Clone, Copy)]
struct Campaign {
    advertiser: Uuid,
    campaign: Uuid,
    first: NaiveDate,
    last: NaiveDate,
    days: i64,
    expected: u64,
}

impl Campaign {
    fn delivery_url(&self, base: &str) -> String {
        format!(
            "{base}/v1/advertisers/{}/campaigns/{}/delivery",
            self.advertiser, self.campaign
        )
    }
}

fn impression(advertiser: Uuid, campaign: Uuid, ad: Uuid, at: DateTime<Utc>) -> Value {
    json!({
        "impression_id": Uuid::new_v4(), "advertiser_id": advertiser, "campaign_id": campaign,
        "ad_id": ad, "user_id": Uuid::new_v4(), "timestamp": at.timestamp_millis(),
    })
}

/// Posts `batch` and panics unless every impression was accepted.
async fn post(client: &reqwest::Client, base: &str, batch: &[Value]) {
    let response = client
        .post(format!("{base}/v1/impressions"))
        .json(batch)
        .send()
        .await
        .expect("ingestion answered");
    let status = response.status();
    let body: Value = response.json().await.unwrap_or_default();
    assert!(status.is_success(), "{status}: {body}");
    assert_eq!(body["accepted"], json!(batch.len()), "{body}");
}

/// A campaign of `days` days ending the day before yesterday (sealable whatever the hour),
/// `per_day` impressions each spread over the day, and `per_day` more in the minutes before
/// now (today's live counts): posted, one request a day, four at once.
async fn load(base: &str, days: i64, per_day: usize) -> Campaign {
    let client = admin();
    let (advertiser, campaign, ad) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let now = Utc::now();
    let today = now.date_naive();
    let last = today - TimeDelta::days(2);
    let first = last - TimeDelta::days(days - 1);
    let step = 86_400_000 / per_day as i64;
    let mut batches: Vec<Vec<Value>> = (0..days)
        .map(|offset| {
            let start = (first + TimeDelta::days(offset))
                .and_hms_opt(0, 0, 0)
                .expect("midnight")
                .and_utc();
            (0..per_day)
                .map(|i| {
                    let at = start + Span::milliseconds(step * i as i64 + 1_000);
                    impression(advertiser, campaign, ad, at)
                })
                .collect()
        })
        .collect();
    let midnight = today.and_hms_opt(0, 0, 0).expect("midnight").and_utc();
    let recent = (now - Span::seconds(per_day as i64)).max(midnight);
    batches.push(
        (0..per_day)
            .map(|i| {
                impression(
                    advertiser,
                    campaign,
                    ad,
                    recent + Span::milliseconds(i as i64),
                )
            })
            .collect(),
    );
    let started = Instant::now();
    stream::iter(batches)
        .for_each_concurrent(4, |batch| {
            let client = &client;
            async move { post(client, base, &batch).await }
        })
        .await;
    println!(
        "  loaded {} impressions over {days} days and today in {:.1} s",
        per_day as i64 * (days + 1),
        started.elapsed().as_secs_f64()
    );
    Campaign {
        advertiser,
        campaign,
        first,
        last,
        days,
        expected: per_day as u64 * (days as u64 + 1),
    }
}

async fn get_json(client: &reqwest::Client, url: &str) -> Value {
    let response = client.get(url).send().await.expect("answered");
    let status = response.status();
    let body: Value = response.json().await.unwrap_or_default();
    assert!(status.is_success(), "{url}: {status}: {body}");
    body
}

/// Waits until the server's sealer has no late day left and each campaign's summary answers
/// every day of its history from a rollup. Should the sealer report no late day while some
/// day stays unsealed for a minute (a seal it remembers as current that the store does not
/// take as current: it never seals that day again), says so and goes on: `delivery` reads the
/// day's sealed total, which that seal wrote. Panics after ten minutes.
async fn wait_sealed(base: &str, campaigns: &[Campaign]) {
    let client = admin();
    let started = Instant::now();
    let mut reported = Instant::now();
    let mut unchanged_since = (Vec::new(), Instant::now());
    loop {
        let freshness = get_json(&client, &format!("{base}/v1/freshness")).await;
        let late = freshness["late_days"].as_u64().unwrap_or(u64::MAX);
        let mut sealed = Vec::new();
        for campaign in campaigns {
            let summary = get_json(
                &client,
                &format!(
                    "{base}/v1/advertisers/{}/campaigns/{}/summary?from={}&to={}&group_by=none",
                    campaign.advertiser, campaign.campaign, campaign.first, campaign.last
                ),
            )
            .await;
            sealed.push(summary["sealed_days"].as_i64().unwrap_or(0));
        }
        let done = late == 0
            && sealed
                .iter()
                .zip(campaigns)
                .all(|(sealed, campaign)| *sealed == campaign.days);
        if done {
            println!(
                "  sealed in {:.0} s: late days 0, sealed days {sealed:?}",
                started.elapsed().as_secs_f64()
            );
            return;
        }
        if unchanged_since.0 != sealed || late != 0 {
            unchanged_since = (sealed.clone(), Instant::now());
        } else if unchanged_since.1.elapsed() > Duration::from_secs(60) {
            let expected: Vec<i64> = campaigns.iter().map(|campaign| campaign.days).collect();
            println!(
                "  NOTE: the sealer reports no late day, yet the summaries answer {sealed:?} of {expected:?} days from rollups, unchanged for 60 s: measuring anyway"
            );
            return;
        }
        if reported.elapsed() > Duration::from_secs(15) {
            println!("  sealing: late days {late}, sealed days {sealed:?}");
            reported = Instant::now();
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "not sealed after 10 minutes: late days {late}, sealed days {sealed:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One `delivery` request: its latency in ms (to the last byte of the body) and the answer.
async fn delivery(client: &reqwest::Client, url: &str) -> (f64, Value) {
    let started = Instant::now();
    let response = client.get(url).send().await.expect("delivery answered");
    let status = response.status();
    let bytes = response.bytes().await.expect("delivery body");
    let elapsed = started.elapsed().as_secs_f64() * 1e3;
    let body: Value = serde_json::from_slice(&bytes).unwrap_or_default();
    assert!(status.is_success(), "{status}: {body}");
    (elapsed, body)
}

fn percentile(values: &[f64], fraction: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let index = ((sorted.len() as f64 * fraction).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

/// `requests` sequential `delivery` requests, half to each campaign, alternating (the order of
/// each pair flipped every pair) after 100 of warm-up: the latencies of each, in ms.
async fn latencies(base: &str, month: Campaign, year: Campaign, requests: usize) -> [Vec<f64>; 2] {
    let client = admin();
    let urls = [month.delivery_url(base), year.delivery_url(base)];
    for (url, campaign) in urls.iter().zip([month, year]) {
        let (_, answer) = delivery(&client, url).await;
        let lifetime = answer["lifetime"]["billable_impressions"].as_u64();
        assert_eq!(
            lifetime,
            Some(campaign.expected),
            "{} days: lifetime billable impressions: {answer}",
            campaign.days
        );
        for _ in 0..50 {
            delivery(&client, url).await;
        }
    }
    let mut measured = [Vec::new(), Vec::new()];
    for pair in 0..requests / 2 {
        let order = if pair % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let (ms, _) = delivery(&client, &urls[which]).await;
            measured[which].push(ms);
        }
    }
    measured
}

/// Part 1 on one store: loads and seals the two campaigns, then measures them; prints a line
/// per campaign and returns the campaigns and the table rows.
async fn history_latency(
    store: &str,
    base: &str,
    per_day: usize,
    requests: usize,
) -> ([Campaign; 2], Vec<String>) {
    println!("{store}:");
    let month = load(base, MONTH_DAYS, per_day).await;
    let year = load(base, YEAR_DAYS, per_day).await;
    wait_sealed(base, &[month, year]).await;
    let rows = measure_history(store, base, [month, year], requests).await;
    ([month, year], rows)
}

/// `requests` answers for the two campaigns, as two table rows.
async fn measure_history(
    label: &str,
    base: &str,
    [month, year]: [Campaign; 2],
    requests: usize,
) -> Vec<String> {
    let [short, long] = latencies(base, month, year, requests).await;
    let stats = |values: &[f64]| (percentile(values, 0.5), percentile(values, 0.99));
    let ((short_median, short_p99), (long_median, long_p99)) = (stats(&short), stats(&long));
    for (history, (median, p99)) in [
        ("1 month", (short_median, short_p99)),
        ("12 months", (long_median, long_p99)),
    ] {
        println!("  {history}: median {median:.2} ms, p99 {p99:.2} ms");
    }
    vec![
        format!(
            "| {label} | 1 month ({MONTH_DAYS} days) | {} | {short_median:.2} | {short_p99:.2} | 1.00 | 1.00 |",
            month.expected
        ),
        format!(
            "| {label} | 12 months ({YEAR_DAYS} days) | {} | {long_median:.2} | {long_p99:.2} | **{:.2}** | **{:.2}** |",
            year.expected,
            long_median / short_median,
            long_p99 / short_p99
        ),
    ]
}

/// What a real year-old campaign's live-row partition looks like: the backfill sealed every
/// day within a minute, leaving a deletion per day that the node steps over on each read
/// until compaction drops it, which only happens after `gc_grace_seconds`. A campaign that
/// aged a day at a time carries only its last few seals' deletions. Lets the node drop them
/// now (grace 0 for the bench keyspace's table, a flush and a major compaction through
/// `scripts/cassandra nodetool`), then restores the grace. False when the node is not the
/// repository's own (nodetool cannot reach it).
async fn compact_sealed_deletions(nodes: &[String], keyspace: &str) -> bool {
    let session = match scylla::client::session_builder::SessionBuilder::new()
        .known_nodes(nodes)
        .build()
        .await
    {
        Ok(session) => session,
        Err(error) => {
            eprintln!("no session to compact with: {error}");
            return false;
        }
    };
    let grace = |seconds: u32| {
        format!("ALTER TABLE {keyspace}.delivery_live WITH gc_grace_seconds = {seconds}")
    };
    if let Err(error) = session.query_unpaged(grace(0), ()).await {
        eprintln!("could not lower the grace: {error}");
        return false;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/cassandra");
    let compacted = ["flush", "compact"].iter().all(|step| {
        Command::new(script)
            .args(["nodetool", step, keyspace, "delivery_live"])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    });
    if let Err(error) = session.query_unpaged(grace(864_000), ()).await {
        eprintln!("could not restore the grace: {error}");
    }
    compacted
}

/// One check of part 2: the gap, the server asked, the latency of its answer and whether the
/// answer said it was complete.
struct Check {
    gap: i64,
    server: usize,
    ms: f64,
    complete: bool,
}

/// What part 2 found.
struct Staleness {
    acked: u64,
    refused: u64,
    seconds: f64,
    /// Against the total acknowledged before (later acknowledgements can hide a shortfall).
    checks: Vec<Check>,
    /// Of a fresh campaign's one batch, asked on the other server (nothing can hide one);
    /// none where the probe's batch was refused.
    probes: Vec<Option<Check>>,
    /// Each server's lifetime billable impressions 3 s after the load stopped.
    settled: Vec<u64>,
}

/// Asks `url` for `delivery`: the gap between `expected` and its lifetime billable impressions.
async fn check(client: &reqwest::Client, url: &str, expected: u64, server: usize) -> Check {
    let (ms, answer) = delivery(client, url).await;
    let billable = answer["lifetime"]["billable_impressions"]
        .as_u64()
        .expect("lifetime billable impressions");
    Check {
        gap: expected as i64 - billable as i64,
        server,
        ms,
        complete: answer["complete"].as_bool().unwrap_or(false),
    }
}

/// Posts one batch of a fresh campaign to server `index % 2`, waits 1 s after its 2xx and asks
/// the other server: all of it must be there.
async fn probe(client: reqwest::Client, bases: Arc<[String; 2]>, index: usize) -> Option<Check> {
    let (advertiser, campaign, ad) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let now = Utc::now();
    let batch: Vec<Value> = (0..LOAD_BATCH)
        .map(|_| impression(advertiser, campaign, ad, now))
        .collect();
    let posted = client
        .post(format!("{}/v1/impressions", bases[index % 2]))
        .json(&batch)
        .send()
        .await;
    if !posted.is_ok_and(|response| response.status().is_success()) {
        return None;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let other = (index + 1) % 2;
    let url = format!(
        "{}/v1/advertisers/{advertiser}/campaigns/{campaign}/delivery",
        bases[other]
    );
    Some(check(&client, &url, LOAD_BATCH as u64, other).await)
}

/// Part 2: the load, the checks, and each server's answer once the load is over.
async fn staleness(bases: &[String; 2], seconds: u64, senders_per_server: usize) -> Staleness {
    let (advertiser, campaign) = (Uuid::new_v4(), Uuid::new_v4());
    let ads: Vec<Uuid> = (0..20).map(|_| Uuid::new_v4()).collect();
    let acked = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let loading = Arc::new(AtomicBool::new(true));
    let bases = Arc::new(bases.clone());
    let senders: Vec<_> = (0..2 * senders_per_server)
        .map(|sender| {
            let (acked, refused, loading, bases, ads) = (
                Arc::clone(&acked),
                Arc::clone(&refused),
                Arc::clone(&loading),
                Arc::clone(&bases),
                ads.clone(),
            );
            tokio::spawn(async move {
                let client = admin();
                let mut turn = sender;
                while loading.load(Ordering::SeqCst) {
                    let now = Utc::now();
                    let batch: Vec<Value> = (0..LOAD_BATCH)
                        .map(|i| impression(advertiser, campaign, ads[(turn + i) % ads.len()], now))
                        .collect();
                    let url = format!("{}/v1/impressions", bases[turn % 2]);
                    turn += 1;
                    match client.post(url).json(&batch).send().await {
                        Ok(response) if response.status().is_success() => {
                            acked.fetch_add(LOAD_BATCH as u64, Ordering::SeqCst);
                        }
                        _ => {
                            refused.fetch_add(LOAD_BATCH as u64, Ordering::SeqCst);
                        }
                    }
                }
            })
        })
        .collect();
    let url = |server: usize| {
        format!(
            "{}/v1/advertisers/{advertiser}/campaigns/{campaign}/delivery",
            bases[server]
        )
    };
    let started = Instant::now();
    let checker = admin();
    let (mut checks, mut probes) = (Vec::new(), Vec::new());
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    let mut index = 0;
    while started.elapsed() < Duration::from_secs(seconds) {
        ticks.tick().await;
        let before = acked.load(Ordering::SeqCst);
        let (client, url, server) = (checker.clone(), url(index % 2), index % 2);
        checks.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            check(&client, &url, before, server).await
        }));
        probes.push(tokio::spawn(probe(
            checker.clone(),
            Arc::clone(&bases),
            index,
        )));
        index += 1;
    }
    loading.store(false, Ordering::SeqCst);
    for sender in senders {
        sender.await.expect("sender");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let mut done = Vec::new();
    for check in checks {
        done.push(check.await.expect("check"));
    }
    let mut probed = Vec::new();
    for probe in probes {
        probed.push(probe.await.expect("probe"));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut settled = Vec::new();
    for server in 0..2 {
        let (_, answer) = delivery(&checker, &url(server)).await;
        settled.push(
            answer["lifetime"]["billable_impressions"]
                .as_u64()
                .unwrap_or_default(),
        );
    }
    Staleness {
        acked: acked.load(Ordering::SeqCst),
        refused: refused.load(Ordering::SeqCst),
        seconds: elapsed,
        checks: done,
        probes: probed,
        settled,
    }
}

/// A table row for one kind of check.
fn check_row(label: &str, checks: &[&Check], refused: usize) -> String {
    let gaps: Vec<i64> = checks.iter().map(|check| check.gap).collect();
    let largest = gaps.iter().copied().max().unwrap_or_default();
    let short = gaps.iter().filter(|gap| **gap > 0).count();
    let incomplete = checks.iter().filter(|check| !check.complete).count();
    let ms: Vec<f64> = checks.iter().map(|check| check.ms).collect();
    format!(
        "| {label} | {}{} | **{largest}** | {short} | {incomplete} | {:.1} / {:.1} |",
        checks.len(),
        if refused > 0 {
            format!(" ({refused} not run: batch refused)")
        } else {
            String::new()
        },
        percentile(&ms, 0.5),
        percentile(&ms, 0.99)
    )
}

async fn drop_keyspace(nodes: &[String], keyspace: &str) {
    let session = scylla::client::session_builder::SessionBuilder::new()
        .known_nodes(nodes)
        .build()
        .await;
    let dropped = match session {
        Ok(session) => session
            .query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ())
            .await
            .map(|_| ())
            .map_err(|error| error.to_string()),
        Err(error) => Err(error.to_string()),
    };
    if let Err(error) = dropped {
        eprintln!("could not drop keyspace {keyspace}: {error}");
    }
}

#[tokio::main]
async fn main() {
    let per_day = support::env_knob("BENCH_PER_DAY", 200);
    let requests = support::env_knob("BENCH_REQUESTS", 2000);
    let seconds = support::env_knob("BENCH_SECONDS", 20) as u64;
    let senders = support::env_knob("BENCH_SENDERS", 3);
    let nodes = support::config(adevents::store::cassandra::config::WriteMode::Batch).nodes;
    let keyspace = format!(
        "bench_delivery_{}",
        &Uuid::new_v4().simple().to_string()[..12]
    );
    let binary = env!("CARGO_BIN_EXE_adevents");

    println!(
        "## `delivery` latency by sealed history ({requests} sequential requests per store, the two campaigns alternating; {per_day} impressions a day of distinct users, the same today)\n"
    );
    let embedded = Server::start(binary, &["--seal-interval".to_owned(), "1s".to_owned()]).await;
    let (_, mut rows) = history_latency("embedded", &embedded.base, per_day, requests).await;
    embedded.stop();
    let first = CassandraServer::start(&nodes.join(","), &keyspace).await;
    let (campaigns, cassandra_rows) =
        history_latency("Cassandra", &first.base, per_day, requests).await;
    rows.extend(cassandra_rows);
    if compact_sealed_deletions(&nodes, &keyspace).await {
        let label = "Cassandra, seals' deletions compacted";
        println!("{label}:");
        rows.extend(measure_history(label, &first.base, campaigns, requests).await);
    } else {
        println!("(the seals' deletions were not compacted: nodetool could not reach the node)");
    }
    println!(
        "\n| store | sealed history | billable impressions | median ms | p99 ms | median ÷ 1 month | p99 ÷ 1 month |"
    );
    println!("|---|---|---|---|---|---|---|");
    for row in rows {
        println!("{row}");
    }

    println!(
        "\n## Staleness under load (Cassandra, 2 server processes, {} senders of {LOAD_BATCH}-impression batches alternating between them, {seconds} s; every 100 ms a check asks `delivery` 1 s after reading the acknowledged count, and a probe posts one batch of a fresh campaign to one server and asks the other 1 s after its acknowledgement)\n",
        2 * senders
    );
    println!("(keyspace {keyspace})");
    let second = CassandraServer::start(&nodes.join(","), &keyspace).await;
    let bases = [first.base.clone(), second.base.clone()];
    let found = staleness(&bases, seconds, senders).await;
    first.stop();
    second.stop();
    drop_keyspace(&nodes, &keyspace).await;

    for server in 0..2 {
        let gaps: Vec<i64> = found
            .checks
            .iter()
            .filter(|check| check.server == server)
            .map(|check| check.gap)
            .collect();
        println!(
            "server {}: {} checks of the total, largest gap {}; lifetime billable 3 s after the load {} of {} acknowledged",
            server + 1,
            gaps.len(),
            gaps.iter().copied().max().unwrap_or_default(),
            found.settled[server],
            found.acked
        );
    }
    println!(
        "\n| load | impressions acknowledged | impressions/s | refused |\n|---|---|---|---|\n| {} senders, {LOAD_BATCH} a batch, 2 servers | {} | {:.0} | {} |",
        2 * senders,
        found.acked,
        found.acked as f64 / found.seconds,
        found.refused
    );
    println!(
        "\n| check, 1 s after | checks | largest gap | checks with a gap > 0 | answers not complete | `delivery` median / p99 ms under load |"
    );
    println!("|---|---|---|---|---|---|");
    let totals: Vec<&Check> = found.checks.iter().collect();
    println!(
        "{}",
        check_row(
            "everything acknowledged before − lifetime billable (either server)",
            &totals,
            0
        )
    );
    let probes: Vec<&Check> = found.probes.iter().flatten().collect();
    let refused = found.probes.len() - probes.len();
    println!(
        "{}",
        check_row(
            &format!(
                "a fresh campaign's {LOAD_BATCH} acknowledged by one server − billable on the other"
            ),
            &probes,
            refused
        )
    );
}
