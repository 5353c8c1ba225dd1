//! What an impression pixel costs beside a beacon, on the real binary (embedded store, its
//! defaults, `--rate-limit-beacons off`: the load comes from one address): `wrk` fires signed
//! `GET /i` pixels (each a fresh impression, `benches/pixels.lua`) and then form-posted `/track`
//! beacons with four features (`benches/track.lua`) at the same server, in alternating
//! rounds, and reports requests per second and the server's CPU per request for each.
//!
//! `scripts/bench tags`. Knobs: BENCH_SECONDS (per variant and round, default 20), BENCH_ROUNDS
//! (default 3), BENCH_CONNECTIONS (64), BENCH_PIXEL_URLS (distinct signed URLs, default 200,000;
//! past them the URLs repeat, and a repeated pixel still goes through the whole write path).

mod support;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use std::io::Write;
use support::server::{Server, admin, wrk};
use uuid::Uuid;

const SITE: &str = "bench-track.example";

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

/// Writes `count` signed pixel queries for a fresh campaign of `advertiser` to a file.
fn signed_pixels(
    count: usize,
    advertiser: Uuid,
    secret_id: &str,
    secret: &[u8],
) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
    let campaign = Uuid::new_v4();
    let ads: Vec<Uuid> = (0..20).map(|_| Uuid::new_v4()).collect();
    let t = chrono::Utc::now().timestamp_millis();
    let mut lines = std::io::BufWriter::new(file.as_file_mut());
    for index in 0..count {
        let query = format!(
            "a={advertiser}&c={campaign}&ad={}&imp={}&u={}&t={t}&k={secret_id}",
            ads[index % ads.len()],
            Uuid::new_v4(),
            Uuid::new_v4()
        );
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("any key length");
        mac.update(query.as_bytes());
        let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        writeln!(lines, "{query}&s={signature}").expect("write a URL");
    }
    lines.flush().expect("flush the URLs");
    drop(lines);
    file
}

#[tokio::main]
async fn main() {
    let seconds = support::env_knob("BENCH_SECONDS", 20);
    let rounds = support::env_knob("BENCH_ROUNDS", 3);
    let connections = support::env_knob("BENCH_CONNECTIONS", 64);
    let urls = support::env_knob("BENCH_PIXEL_URLS", 200_000);
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
    let advertiser = Uuid::new_v4();
    let created: Value = client
        .post(format!(
            "{}/v1/advertisers/{advertiser}/tag-secrets",
            server.base
        ))
        .send()
        .await
        .expect("secret answered")
        .json()
        .await
        .expect("JSON");
    let secret = URL_SAFE_NO_PAD
        .decode(created["secret"].as_str().expect("a secret"))
        .expect("base64url");
    let pixels = signed_pixels(
        urls,
        advertiser,
        created["id"].as_str().expect("id"),
        &secret,
    );
    let pixels_path = pixels.path().display().to_string();
    let pid = server.child.id();

    println!(
        "## `GET /i` pixels beside `POST /track` beacons ({connections} connections, {seconds} s per variant and round, embedded store)\n"
    );
    let (mut pixel_rates, mut beacon_rates) = (Vec::new(), Vec::new());
    let (mut pixel_cpu, mut beacon_cpu) = (Vec::new(), Vec::new());
    for round in 1..=rounds {
        let mut order = ["pixel", "beacon"];
        if round % 2 == 0 {
            order.reverse();
        }
        for variant in order {
            let before = cpu_seconds(pid);
            let (url, script, env) = if variant == "pixel" {
                let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/pixels.lua");
                (
                    format!("{}/i", server.base),
                    script,
                    ("BENCH_PIXELS", pixels_path.as_str()),
                )
            } else {
                let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/track.lua");
                (
                    format!("{}/track", server.base),
                    script,
                    ("BENCH_SITE", SITE),
                )
            };
            let result = wrk(&url, Some(script), seconds, connections, &[env]).await;
            let (rate, errors) = (result.per_second, result.errors);
            let used = cpu_seconds(pid) - before;
            let micros = used * 1e6 / (rate * seconds as f64).max(1.0);
            println!(
                "round {round}: {variant}: {rate:.0} requests/s, {micros:.1} µs of server CPU each{}",
                if errors.is_empty() {
                    String::new()
                } else {
                    format!(" (errors: {errors})")
                }
            );
            if variant == "pixel" {
                pixel_rates.push(rate);
                pixel_cpu.push(micros);
            } else {
                beacon_rates.push(rate);
                beacon_cpu.push(micros);
            }
        }
    }
    // How many pixels the server counted (a repeated URL counts each time it is stored anew
    // in the metric, once in the summary).
    let metrics = client
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .expect("metrics answered")
        .text()
        .await
        .expect("metrics text");
    let counted = metrics
        .lines()
        .find(|line| line.starts_with("adevents_tags_total") && line.contains("\"counted\""))
        .and_then(|line| line.rsplit(' ').next())
        .unwrap_or("0")
        .to_owned();
    server.stop();
    let (pixels, beacons) = (support::median(pixel_rates), support::median(beacon_rates));
    let (pixel_cpu, beacon_cpu) = (support::median(pixel_cpu), support::median(beacon_cpu));
    println!("\n| request | requests/s (median of {rounds}) | server CPU µs each (median) |");
    println!("|---|---|---|");
    println!("| `POST /track` beacon, 4 features | {beacons:.0} | {beacon_cpu:.1} |");
    println!("| `GET /i` signed pixel | {pixels:.0} | {pixel_cpu:.1} |");
    println!(
        "\nA pixel costs **{:.2}×** a beacon in server CPU and the server serves **{:.2}×** as many (pixels counted: {}).",
        pixel_cpu / beacon_cpu,
        pixels / beacons,
        counted
    );
}
