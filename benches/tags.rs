//! The ad tags on the real binary (embedded store, its defaults, `--rate-limit-beacons off`:
//! the load comes from one address), in two parts.
//!
//! `scripts/bench tags`: what an impression pixel and a view report cost beside a beacon.
//! `wrk` fires signed `GET /i` pixels (each a fresh impression, `benches/pixels.lua`), view
//! reports `POST /v` signed with the same pixel queries (two distinct reports per impression,
//! `measurable` then `viewable`, so each is stored: `benches/views.lua`) and form-posted
//! `/track` beacons with four features (`benches/track.lua`) at the same server, in rotating
//! rounds (each round continues the pixel and report files where the last stopped), and
//! reports requests per second and the server's CPU per request for each. Knobs: BENCH_SECONDS
//! (per variant and round, default 15), BENCH_ROUNDS (3), BENCH_CONNECTIONS (64),
//! BENCH_PIXEL_URLS (distinct signed queries, default 1,000,000; past them they repeat).
//!
//! `scripts/bench views` (BENCH_PART=summary): a month's summary of sealed days with the five
//! view measures against the same summary without them. The same BENCH_VIEW_IMPRESSIONS
//! (default 200,000) impressions over 31 UTC days, fired as signed pixels (`--tag-ttl 60days`,
//! so a month-old `t` counts) into stores of their own: one campaign whose impressions also
//! get their view reports through `POST /v`, each right after its pixel (inside the view window
//! of the pixel's arrival); one without; and, with BENCH_BASELINE_BIN (`scripts/bench` builds it
//! from BENCH_BASELINE_REV), one loaded by the binary before viewability. Each month is sealed
//! with `adevents rollup` (timed) and checked (the exact view measures the load implies), then
//! `GET …/summary` by day and by ad is timed on each, alternating, over BENCH_ROUNDS (default
//! 21) rounds of BENCH_QUERIES (10) queries each, after a warm-up round (server CPU per round
//! from `/proc`). The loaded folders are kept in `target/bench-data/views-*` and reused.

mod support;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{Duration, NaiveDate, Utc};
use futures::StreamExt;
use hmac::{Hmac, Mac};
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use sha2::Sha256;
use std::io::Write;
use std::path::Path;
use std::time::Instant;
use support::server::{Server, admin, wrk};
use uuid::Uuid;

const SITE: &str = "bench-track.example";
const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36";

/// Seconds of CPU the process has used (user and system), from `/proc/<pid>/stat`.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |index: usize| fields.get(index).and_then(|v| v.parse::<f64>().ok());
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks_per_second = 100.0;
    (ticks(11).unwrap_or(0.0) + ticks(12).unwrap_or(0.0)) / ticks_per_second
}

/// `query&s=…`: the query signed as an ad server signs it.
fn signed(query: String, secret: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("any key length");
    mac.update(query.as_bytes());
    let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    format!("{query}&s={signature}")
}

/// A fresh advertiser's tag secret: (advertiser, secret id, secret).
async fn tag_secret(client: &reqwest::Client, base: &str) -> (Uuid, String, Vec<u8>) {
    let advertiser = Uuid::new_v4();
    let created: Value = client
        .post(format!("{base}/v1/advertisers/{advertiser}/tag-secrets"))
        .send()
        .await
        .expect("secret answered")
        .json()
        .await
        .expect("JSON");
    let secret = URL_SAFE_NO_PAD
        .decode(created["secret"].as_str().expect("a secret"))
        .expect("base64url");
    (
        advertiser,
        created["id"].as_str().expect("id").to_owned(),
        secret,
    )
}

/// Writes `count` signed pixel queries of a fresh campaign of `advertiser` to a file; returns
/// it and the campaign.
fn signed_pixels(
    count: usize,
    advertiser: Uuid,
    secret_id: &str,
    secret: &[u8],
) -> (tempfile::NamedTempFile, Uuid) {
    let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
    let campaign = Uuid::new_v4();
    let ads: Vec<Uuid> = (0..20).map(|_| Uuid::new_v4()).collect();
    let t = Utc::now().timestamp_millis();
    let mut lines = std::io::BufWriter::new(file.as_file_mut());
    for index in 0..count {
        let query = format!(
            "a={advertiser}&c={campaign}&ad={}&imp={}&u={}&t={t}&k={secret_id}",
            ads[index % ads.len()],
            Uuid::new_v4(),
            Uuid::new_v4()
        );
        writeln!(lines, "{}", signed(query, secret)).expect("write a URL");
    }
    lines.flush().expect("flush the URLs");
    drop(lines);
    (file, campaign)
}

/// The value of the `adevents_tags_total` series of `tag` and `outcome` in a scrape.
fn tags_total(metrics: &str, tag: &str, outcome: &str) -> u64 {
    metrics
        .lines()
        .find(|line| {
            line.starts_with("adevents_tags_total")
                && line.contains(&format!("tag=\"{tag}\""))
                && line.contains(&format!("outcome=\"{outcome}\""))
        })
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

/// Every `adevents_tags_total` outcome of `tag` with its count, as `outcome count, …`.
fn outcomes(metrics: &str, tag: &str) -> String {
    let marker = format!("tag=\"{tag}\"");
    metrics
        .lines()
        .filter(|line| line.starts_with("adevents_tags_total") && line.contains(&marker))
        .filter_map(|line| {
            let outcome = line.split("outcome=\"").nth(1)?.split('"').next()?;
            Some(format!("{outcome} {}", line.rsplit(' ').next()?))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

async fn scrape(client: &reqwest::Client, base: &str) -> String {
    client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics answered")
        .text()
        .await
        .expect("metrics text")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Pixel,
    View,
    Beacon,
}

#[tokio::main]
async fn main() {
    match std::env::var("BENCH_PART").as_deref() {
        Ok("summary") => sealed_summary().await,
        Ok("rates") | Err(_) => rates().await,
        Ok(other) => panic!("BENCH_PART is rates (the default) or summary, not {other}"),
    }
}

async fn rates() {
    let seconds = support::env_knob("BENCH_SECONDS", 15);
    let rounds = support::env_knob("BENCH_ROUNDS", 3);
    let connections = support::env_knob("BENCH_CONNECTIONS", 64);
    let urls = support::env_knob("BENCH_PIXEL_URLS", 1_000_000);
    let binary = env!("CARGO_BIN_EXE_adevents");
    let server = Server::start(
        binary,
        &["--rate-limit-beacons".to_owned(), "off".to_owned()],
    )
    .await;
    let client = admin();
    let registered = client
        .put(format!("{}/v1/sites/{SITE}", server.base))
        .json(&json!({}))
        .send()
        .await
        .expect("registration answered");
    assert!(registered.status().is_success(), "{}", registered.status());
    let (advertiser, secret_id, secret) = tag_secret(&client, &server.base).await;
    let (pixels, campaign) = signed_pixels(urls, advertiser, &secret_id, &secret);
    let pixels_path = pixels.path().display().to_string();
    let pid = server.child.id();

    println!(
        "## `GET /i` pixels and `POST /v` view reports beside `POST /track` beacons ({connections} connections, {seconds} s per variant and round, embedded store)\n"
    );
    let variants = [Variant::Pixel, Variant::View, Variant::Beacon];
    let mut per_second: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    // Where the pixel and the report scripts start: each round sends fresh ones.
    let (mut pixel_start, mut report_start) = (0u64, 0u64);
    for round in 1..=rounds {
        let mut order = variants;
        order.rotate_left((round - 1) % variants.len());
        for variant in order {
            let before = cpu_seconds(pid);
            let start = match variant {
                Variant::Pixel => pixel_start,
                Variant::View => report_start,
                Variant::Beacon => 0,
            }
            .to_string();
            let (path, script, env): (&str, &str, Vec<(&str, &str)>) = match variant {
                Variant::Pixel => (
                    "/i",
                    concat!(env!("CARGO_MANIFEST_DIR"), "/benches/pixels.lua"),
                    vec![("BENCH_PIXELS", &pixels_path), ("BENCH_START", &start)],
                ),
                Variant::View => (
                    "/v",
                    concat!(env!("CARGO_MANIFEST_DIR"), "/benches/views.lua"),
                    vec![("BENCH_PIXELS", &pixels_path), ("BENCH_START", &start)],
                ),
                Variant::Beacon => (
                    "/track",
                    concat!(env!("CARGO_MANIFEST_DIR"), "/benches/track.lua"),
                    vec![("BENCH_SITE", SITE)],
                ),
            };
            let url = format!("{}{path}", server.base);
            let result = wrk(&url, Some(script), seconds, connections, &env).await;
            // Past what was answered and what may have been in flight at the end: each
            // round's pixels and reports are fresh.
            let sent = result.requests + connections as u64;
            match variant {
                Variant::Pixel => pixel_start += sent,
                Variant::View => report_start += sent,
                Variant::Beacon => {}
            }
            let (rate, errors) = (result.per_second, result.errors);
            let used = cpu_seconds(pid) - before;
            let micros = used * 1e6 / (rate * seconds as f64).max(1.0);
            println!(
                "round {round}: {variant:?}: {rate:.0} requests/s, {micros:.1} µs of server CPU each{}",
                if errors.is_empty() {
                    String::new()
                } else {
                    format!(" (errors: {errors})")
                }
            );
            let index = variants.iter().position(|v| *v == variant).expect("known");
            per_second[index].push(rate);
            cpu[index].push(micros);
        }
    }
    let metrics = scrape(&client, &server.base).await;
    // What the reports joined to: today's summary of the pixels' campaign.
    let today = Utc::now().date_naive();
    let summary: Value = client
        .get(format!(
            "{}/v1/advertisers/{advertiser}/campaigns/{campaign}/summary?from={today}&to={today}&group_by=none",
            server.base
        ))
        .send()
        .await
        .expect("summary answered")
        .json()
        .await
        .expect("summary JSON");
    server.stop();
    let totals = &summary["totals"];
    let [pixel, view, beacon] = [0, 1, 2].map(|index| {
        (
            support::median(per_second[index].clone()),
            support::median(cpu[index].clone()),
        )
    });
    println!("\n| request | requests/s (median of {rounds}) | server CPU µs each (median) |");
    println!("|---|---|---|");
    println!(
        "| `POST /track` beacon, 4 features | {:.0} | {:.1} |",
        beacon.0, beacon.1
    );
    println!(
        "| `GET /i` signed pixel | {:.0} | {:.1} |",
        pixel.0, pixel.1
    );
    println!(
        "| `POST /v` view report (text/plain form) | {:.0} | {:.1} |",
        view.0, view.1
    );
    println!(
        "\nA view report costs **{:.2}×** a pixel in server CPU (the server serves {:.2}× as many); a pixel {:.2}× a beacon.",
        view.1 / pixel.1,
        view.0 / pixel.0,
        pixel.1 / beacon.1
    );
    println!(
        "Pixels: {} (from {urls} queries). Reports: {} (two per impression).",
        outcomes(&metrics, "pixel"),
        outcomes(&metrics, "view")
    );
    println!(
        "Today's summary: {} impressions, {} measurable, {} viewable (avg {} ms in view).",
        totals["impressions"],
        totals["measurable_impressions"],
        totals["viewable_impressions"],
        totals["avg_in_view_ms"]
    );
}

/// A month of the same impressions in one campaign, in a folder of its own (`bench.json` says
/// what it holds).
struct Month {
    first: NaiveDate,
    advertiser: Uuid,
    campaign: Uuid,
    impressions: usize,
    /// Whether its impressions have view reports.
    measured: bool,
}

const MONTH_DAYS: i64 = 31;

impl Month {
    fn last(&self) -> NaiveDate {
        self.first + Duration::days(MONTH_DAYS - 1)
    }

    fn read(path: &Path) -> Option<Self> {
        let value: Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
        let uuid = |name: &str| value[name].as_str()?.parse::<Uuid>().ok();
        Some(Self {
            first: value["first"].as_str()?.parse().ok()?,
            advertiser: uuid("advertiser")?,
            campaign: uuid("campaign")?,
            impressions: value["impressions"].as_u64()? as usize,
            measured: value["measured"].as_bool()?,
        })
    }

    fn write(&self, path: &Path) {
        let value = json!({
            "first": self.first.to_string(),
            "advertiser": self.advertiser,
            "campaign": self.campaign,
            "impressions": self.impressions,
            "measured": self.measured,
        });
        std::fs::write(path, value.to_string()).expect("write bench.json");
    }

    fn summary_url(&self, base: &str, group_by: &str) -> String {
        format!(
            "{base}/v1/advertisers/{}/campaigns/{}/summary?from={}&to={}&tz=UTC&group_by={group_by}",
            self.advertiser,
            self.campaign,
            self.first,
            self.last()
        )
    }

    /// The reports impression `index` gets in a measured month: `measurable` always,
    /// `viewable` for two in three (1–10 s in view), and a `click` engagement for one in ten.
    fn reports(index: usize) -> Vec<String> {
        let mut bodies = vec!["e=measurable&in_view_ms=0".to_owned()];
        if !index.is_multiple_of(3) {
            bodies.push(format!(
                "e=viewable&in_view_ms={}&max_visible={}",
                1000 + (index * 7919) % 9000,
                50 + index % 51
            ));
        }
        if index.is_multiple_of(10) {
            bodies.push("e=click".to_owned());
        }
        bodies
    }

    /// What a measured month's totals must say: (measurable, viewable, engaged, average
    /// in-view ms rounded half up).
    fn expected(&self) -> (u64, u64, u64, u64) {
        let viewable: Vec<u64> = (0..self.impressions)
            .filter(|index| !index.is_multiple_of(3))
            .map(|index| 1000 + ((index * 7919) % 9000) as u64)
            .collect();
        let count = viewable.len() as u64;
        let total: u64 = viewable.iter().sum();
        let engaged = self.impressions.div_ceil(10) as u64;
        (
            self.impressions as u64,
            count,
            engaged,
            (total + count / 2) / count.max(1),
        )
    }
}

/// Fires the month's pixels through a server on `store` (a fresh folder), each followed by
/// its view reports when `measured`. Every folder gets the same impressions.
async fn fire_month(
    binary: &str,
    store: &Path,
    impressions: usize,
    first: NaiveDate,
    measured: bool,
) -> Month {
    let server = Server::start_in(
        binary,
        store,
        &[
            "--rate-limit-beacons".to_owned(),
            "off".to_owned(),
            // A month-old `t` still counts.
            "--tag-ttl".to_owned(),
            "60days".to_owned(),
        ],
    )
    .await;
    let client = admin();
    let (advertiser, secret_id, secret) = tag_secret(&client, &server.base).await;
    let month = Month {
        first,
        advertiser,
        campaign: Uuid::new_v4(),
        impressions,
        measured,
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(impressions as u64);
    let ads: Vec<Uuid> = (0..20).map(|_| Uuid::from_u128(rng.random())).collect();
    let users = (impressions / 5).max(1) as u128;
    let start = first.and_hms_opt(0, 0, 0).expect("valid").and_utc();
    let step_ms = MONTH_DAYS * 86_400_000 / impressions as i64;
    let queries: Vec<String> = (0..impressions)
        .map(|index| {
            let t = (start + Duration::milliseconds(step_ms * index as i64)).timestamp_millis();
            let (ad, imp) = (
                ads[rng.random_range(0..ads.len())],
                Uuid::from_u128(rng.random()),
            );
            // Never the nil UUID, which no tag may carry.
            let user = Uuid::from_u128(rng.random_range(1..=users));
            signed(
                format!(
                    "a={advertiser}&c={}&ad={ad}&imp={imp}&u={user}&t={t}&k={secret_id}",
                    month.campaign
                ),
                &secret,
            )
        })
        .collect();
    let browser = reqwest::Client::builder()
        .user_agent(BROWSER)
        .build()
        .expect("client");
    let base = server.base.clone();
    let started = Instant::now();
    // Each impression's reports right after its pixel, as `/v.js` sends them: inside the view
    // window that opens at the pixel's arrival.
    futures::stream::iter(queries.into_iter().enumerate())
        .map(|(index, query)| {
            let (browser, base) = (&browser, &base);
            async move {
                let pixel = browser
                    .get(format!("{base}/i?{query}"))
                    .send()
                    .await
                    .expect("pixel answered");
                assert!(pixel.status().is_success(), "pixel: {}", pixel.status());
                let bodies = if measured {
                    Month::reports(index)
                } else {
                    Vec::new()
                };
                for body in bodies {
                    let report = browser
                        .post(format!("{base}/v?{query}"))
                        .header("content-type", "text/plain;charset=UTF-8")
                        .body(body)
                        .send()
                        .await
                        .expect("report answered");
                    let status = report.status();
                    let text = report.text().await.unwrap_or_default();
                    assert_eq!(status, 204, "a report: {text}");
                }
            }
        })
        .buffer_unordered(32)
        .collect::<()>()
        .await;
    let metrics = scrape(&client, &server.base).await;
    let reports: usize = if measured {
        (0..impressions).map(|i| Month::reports(i).len()).sum()
    } else {
        0
    };
    println!(
        "  loaded {impressions} pixels and {reports} reports in {:.0} s (pixels: {}; reports: {})",
        started.elapsed().as_secs_f64(),
        outcomes(&metrics, "pixel"),
        outcomes(&metrics, "view")
    );
    assert_eq!(tags_total(&metrics, "pixel", "counted"), impressions as u64);
    assert_eq!(tags_total(&metrics, "view", "stored"), reports as u64);
    server.stop();
    month
}

/// Seals the month with `binary`'s `adevents rollup`; returns the seconds it took.
fn seal(binary: &str, store: &Path, month: &Month) -> f64 {
    let started = Instant::now();
    let output = std::process::Command::new(binary)
        .args(["rollup", "--store", "embedded", "--data-dir"])
        .arg(store)
        .args([
            "--advertiser".to_owned(),
            month.advertiser.to_string(),
            "--campaign".to_owned(),
            month.campaign.to_string(),
            "--from".to_owned(),
            month.first.to_string(),
            "--to".to_owned(),
            month.last().to_string(),
        ])
        .env("ADEVENTS_LOG_LEVEL", "warn")
        .output()
        .expect("run adevents rollup");
    assert!(
        output.status.success(),
        "adevents rollup: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    started.elapsed().as_secs_f64()
}

async fn get_summary(client: &reqwest::Client, url: &str) -> Value {
    let response = client.get(url).send().await.expect("summary answered");
    assert!(response.status().is_success(), "{}", response.status());
    response.json().await.expect("summary JSON")
}

/// Whether an answer over the sealed month says what was loaded: every impression, every day
/// sealed, the view measures (none from the binary before viewability, `before`).
fn check(answer: &Value, month: &Month, before: bool) -> Result<(), String> {
    let totals = &answer["totals"];
    let (m, v, e, a) = month.expected();
    let views = [
        "measurable_impressions",
        "viewable_impressions",
        "engaged_impressions",
        "avg_in_view_ms",
    ]
    .map(|name| totals.get(name).cloned());
    let expected = match (before, month.measured) {
        (true, _) => [None, None, None, None],
        (false, true) => [json!(m), json!(v), json!(e), json!(a)].map(Some),
        (false, false) => [json!(0), json!(0), json!(0), Value::Null].map(Some),
    };
    if totals["impressions"] != month.impressions
        || answer["sealed_days"] != MONTH_DAYS
        || views != expected
    {
        return Err(format!(
            "{} sealed days, totals {totals}",
            answer["sealed_days"]
        ));
    }
    Ok(())
}

/// A month loaded and sealed in `target/bench-data/NAME` by `binary` (once; a folder of another
/// size or whose answers differ is loaded anew), and a server on it.
async fn sealed_month(
    binary: &str,
    name: &str,
    impressions: usize,
    first: NaiveDate,
    measured: bool,
    before: bool,
) -> (Month, Server) {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/bench-data")
        .join(name);
    let (store, meta) = (folder.join("store"), folder.join("bench.json"));
    if let Some(month) = Month::read(&meta)
        && month.impressions == impressions
        && month.measured == measured
    {
        let server = Server::start_in(binary, &store, &[]).await;
        let answer = get_summary(&admin(), &month.summary_url(&server.base, "none")).await;
        match check(&answer, &month, before) {
            Ok(()) => {
                println!("{name}: the month loaded before");
                return (month, server);
            }
            Err(problem) => println!("{name}: loaded anew ({problem})"),
        }
    }
    println!("{name}:");
    let _ = std::fs::remove_dir_all(&folder);
    std::fs::create_dir_all(&store).expect("create the bench folder");
    let month = fire_month(binary, &store, impressions, first, measured).await;
    // Past the clock margin after the late marks the load wrote.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    println!(
        "  sealed the 31 days in {:.1} s (`adevents rollup`)",
        seal(binary, &store, &month)
    );
    let server = Server::start_in(binary, &store, &[]).await;
    let answer = get_summary(&admin(), &month.summary_url(&server.base, "none")).await;
    if let Err(problem) = check(&answer, &month, before) {
        panic!("{name}: the sealed month says {problem}");
    }
    month.write(&meta);
    (month, server)
}

async fn sealed_summary() {
    let impressions = support::env_knob("BENCH_VIEW_IMPRESSIONS", 200_000);
    let rounds = support::env_knob("BENCH_ROUNDS", 21);
    let queries = support::env_knob("BENCH_QUERIES", 10);
    let binary = env!("CARGO_BIN_EXE_adevents");
    // The month ends three days ago: every day past any grace.
    let first = Utc::now().date_naive() - Duration::days(MONTH_DAYS + 2);
    // Each month in a store of its own, loaded and sealed the same way, so that no variant
    // reads its rollups through another's rows.
    let mut months = vec![
        (
            "without reports",
            sealed_month(binary, "views-unmeasured", impressions, first, false, false).await,
        ),
        (
            "with reports",
            sealed_month(binary, "views-measured", impressions, first, true, false).await,
        ),
    ];
    // The binary before viewability (BENCH_BASELINE_BIN, from BENCH_BASELINE_REV).
    if let Ok(old) = std::env::var("BENCH_BASELINE_BIN") {
        let rev = std::env::var("BENCH_BASELINE_REV").unwrap_or_else(|_| "bin".to_owned());
        let name = format!("views-before-{rev}");
        let loaded = sealed_month(&old, &name, impressions, first, false, true).await;
        months.push(("before viewability", loaded));
    }
    let client = admin();
    let variants: Vec<(&str, &str, String, u32)> = ["day", "ad"]
        .into_iter()
        .flat_map(|group_by| {
            months.iter().map(move |(label, (month, server))| {
                let url = month.summary_url(&server.base, group_by);
                (group_by, *label, url, server.child.id())
            })
        })
        .collect();
    // Per variant: wall ms of each query, server CPU ms per query of each round.
    let mut wall: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    for round in 0..=rounds {
        let mut order: Vec<usize> = (0..variants.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for index in order {
            let (_, _, url, pid) = &variants[index];
            let before = cpu_seconds(*pid);
            let mut times = Vec::with_capacity(queries);
            for _ in 0..queries {
                let started = Instant::now();
                let answer = get_summary(&client, url).await;
                times.push(started.elapsed().as_secs_f64() * 1e3);
                assert_eq!(answer["totals"]["impressions"], impressions);
            }
            // Round 0 warms every store's cache.
            if round > 0 {
                wall[index].extend(times);
                cpu[index].push((cpu_seconds(*pid) - before) * 1e3 / queries as f64);
            }
        }
    }
    let (m, v, e, a) = months[1].1.0.expected();
    println!(
        "\n## A sealed month's summary with the view measures and without ({impressions} impressions, 31 days, 20 ads; with reports: {m} measurable, {v} viewable, {e} engaged, avg {a} ms; embedded store)\n"
    );
    println!(
        "| `GET …/summary` | campaign | ms (median of {}) | server CPU ms each (median of {rounds}) | × without reports (ms) | × (CPU) |",
        rounds * queries
    );
    println!("|---|---|---|---|---|---|");
    let mut base = (f64::NAN, f64::NAN);
    for (index, (group_by, label, _, _)) in variants.iter().enumerate() {
        let ms = support::median(wall[index].clone());
        let cpu_ms = support::median(cpu[index].clone());
        if *label == "without reports" {
            base = (ms, cpu_ms);
        }
        println!(
            "| group_by={group_by} | {label} | {ms:.1} | {cpu_ms:.1} | **{:.2}** | {:.2} |",
            ms / base.0,
            cpu_ms / base.1
        );
    }
}
