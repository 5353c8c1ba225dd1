//! The edge under real HTTP/1.1 clients, spoken byte for byte over a socket as they speak it:
//! `Expect: 100-continue` uploads, pipelined requests, what an error may echo, saying
//! `Connection: close` before closing, and health probes while the connection cap is full.
//! (docs/API.md, "Limits and overload".)

use crate::common::beacons::{fresh_site, register_site};
use crate::common::events::{Campaign, summary};
use crate::common::{Backend, TestServer, create_key, test_options};
use adevents::http::{ConnectionLimits, RateLimits};
use chrono::Utc;
use serde_json::{Value, json};
use std::num::NonZeroU32;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use uuid::Uuid;

/// A server on the embedded store with short head and idle timeouts and 4 connections.
async fn edge_server() -> TestServer {
    let mut options = test_options();
    options.edge.connections = ConnectionLimits {
        max_connections: 4,
        header_timeout: Duration::from_secs(1),
        max_header_bytes: 16 * 1024,
        idle_timeout: Duration::from_secs(20),
    };
    options.edge.body_timeout = Duration::from_secs(10);
    Backend::Embedded.server_with(options).await
}

/// One answer read off a raw connection: its status, headers (lower-case names) and body.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

/// Reads answers off a connection the way a client does: a head, then `Content-Length`
/// bytes of body (every answer these tests provoke has one, or none).
struct Reader {
    stream: TcpStream,
    buffered: Vec<u8>,
}

impl Reader {
    fn new(stream: TcpStream) -> Self {
        Self {
            stream,
            buffered: Vec::new(),
        }
    }

    async fn write(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("written");
    }

    /// More bytes, or false once the server has closed (or `limit` passed).
    async fn fill(&mut self, limit: Duration) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        match tokio::time::timeout(limit, self.stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => false,
            Ok(Ok(read)) => {
                self.buffered.extend_from_slice(&chunk[..read]);
                true
            }
        }
    }

    /// The next answer, within `limit`; `None` when none came.
    async fn answer(&mut self, limit: Duration) -> Option<Answer> {
        let started = Instant::now();
        let head_end = loop {
            if let Some(end) = self
                .buffered
                .windows(4)
                .position(|window| window == b"\r\n\r\n")
            {
                break end + 4;
            }
            if !self.fill(limit.saturating_sub(started.elapsed())).await {
                return None;
            }
        };
        let head = String::from_utf8_lossy(&self.buffered[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|line| line.split(' ').nth(1))
            .and_then(|code| code.parse().ok())
            .expect("a status line");
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
            .collect();
        let length: usize = headers
            .iter()
            .find(|(name, _)| name == "content-length")
            .and_then(|(_, value)| value.parse().ok())
            .unwrap_or(0);
        while self.buffered.len() < head_end + length {
            if !self.fill(limit.saturating_sub(started.elapsed())).await {
                return None;
            }
        }
        let body =
            String::from_utf8_lossy(&self.buffered[head_end..head_end + length]).into_owned();
        self.buffered.drain(..head_end + length);
        Some(Answer {
            status,
            headers,
            body,
        })
    }

    /// The next answer, which must come within 5 s; `what` says which one, if none does.
    async fn next(&mut self, what: &str) -> Answer {
        self.answer(Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("no answer within 5 s: {what}"))
    }

    /// Whether the server closes the connection within `limit` (nothing more arrives).
    async fn closed_within(&mut self, limit: Duration) -> bool {
        let mut chunk = [0u8; 1024];
        matches!(
            tokio::time::timeout(limit, self.stream.read(&mut chunk)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }
}

async fn connect(server: &TestServer) -> Reader {
    Reader::new(TcpStream::connect(server.address).await.expect("connected"))
}

fn impressions_ndjson(campaign: &Campaign, count: usize) -> Vec<u8> {
    // A second back: never ahead of the server's clock.
    let now = Utc::now() - chrono::Duration::seconds(1);
    let ad = Uuid::new_v4();
    let mut body = Vec::new();
    for _ in 0..count {
        let mut impression = campaign.impression(Uuid::new_v4(), ad, now);
        impression["user_data"] = json!({"placement": "x".repeat(100)});
        body.extend_from_slice(impression.to_string().as_bytes());
        body.push(b'\n');
    }
    body
}

#[tokio::test]
async fn a_2_mb_batch_sent_after_100_continue_is_accepted_even_when_its_body_trickles() {
    let server = edge_server().await;
    let campaign = Campaign::fresh();
    let body = impressions_ndjson(&campaign, 7_000);
    assert!(body.len() > 2_000_000, "{}", body.len());
    let mut client = connect(&server).await;
    let head = format!(
        "POST /v1/impressions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/x-ndjson\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        crate::common::ADMIN_KEY,
        body.len()
    );
    client.write(head.as_bytes()).await;
    let interim = client.next("an interim answer").await;
    assert_eq!(interim.status, 100);
    // Half now, the rest after more than the 1 s head timeout: the body has its own time.
    let (first, rest) = body.split_at(body.len() / 2);
    client.write(first).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    client.write(rest).await;
    let answer = client
        .answer(Duration::from_secs(30))
        .await
        .expect("a final answer");
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["accepted"], 7_000);
    // From yesterday: a body stamped just before midnight holds yesterday's impressions.
    let today = Utc::now().date_naive();
    let yesterday = today - chrono::Days::new(1);
    let counted = summary(&server, &campaign, &format!("from={yesterday}&to={today}")).await;
    assert_eq!(counted["totals"]["impressions"], 7_000, "{counted}");
}

#[tokio::test]
async fn a_pipelined_half_sent_request_gets_its_408_after_the_first_answer() {
    let server = edge_server().await;
    let mut client = connect(&server).await;
    let started = Instant::now();
    client
        .write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await;
    let first = client.next("the first answer").await;
    assert_eq!(first.status, 200);
    let refusal = client
        .next("a refusal within the head timeout, not the idle one")
        .await;
    assert_eq!(refusal.status, 408, "{refusal:?}");
    assert_eq!(refusal.json()["error"]["code"], "request_timeout");
    assert_eq!(refusal.header("connection"), Some("close"));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(client.closed_within(Duration::from_secs(2)).await);
}

#[tokio::test]
async fn a_pipelined_oversized_head_gets_its_431_after_the_first_answer() {
    let server = edge_server().await;
    let mut client = connect(&server).await;
    let requests = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: {}\r\n\r\n",
        "a".repeat(24 * 1024)
    );
    client.write(requests.as_bytes()).await;
    let first = client.next("the first answer").await;
    assert_eq!(first.status, 200);
    let refusal = client.next("a refusal").await;
    assert_eq!(refusal.status, 431, "{refusal:?}");
    assert_eq!(refusal.json()["error"]["code"], "headers_too_large");
    assert!(client.closed_within(Duration::from_secs(2)).await);
}

#[tokio::test]
async fn pipelined_requests_are_all_answered_in_order() {
    let server = edge_server().await;
    let site = fresh_site();
    register_site(&server.url(""), &site).await;
    let mut client = connect(&server).await;
    let now = Utc::now().timestamp();
    let mut requests = String::new();
    for n in 0..5 {
        let body = format!("site={site}&guid=g{n}&timestamp={now}&page=%2F{n}");
        requests.push_str(&format!(
            "POST /track HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        ));
        requests.push_str("GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n");
    }
    client.write(requests.as_bytes()).await;
    for n in 0..5 {
        let beacon = client.next("the beacon's answer").await;
        assert_eq!(beacon.status, 204, "beacon {n}: {beacon:?}");
        let missing = client.next("the 404").await;
        assert_eq!(missing.status, 404, "after beacon {n}: {missing:?}");
    }
}

#[tokio::test]
async fn errors_echo_at_most_64_characters_of_a_path() {
    let server = edge_server().await;
    let long = "x".repeat(1_000);
    let mut client = connect(&server).await;
    client
        .write(format!("GET /{long} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await;
    let missing = client.next("an answer").await;
    assert_eq!(missing.status, 404);
    assert!(missing.body.contains(&"x".repeat(60)), "{}", missing.body);
    assert!(!missing.body.contains(&"x".repeat(65)), "{}", missing.body);

    let campaign = Campaign::fresh();
    let (key, _) = create_key(
        &server,
        json!({"scope": "ingest", "advertiser_id": campaign.advertiser_id}),
    )
    .await;
    let path = format!(
        "/v1/advertisers/{}/campaigns/{long}/summary",
        campaign.advertiser_id
    );
    client
        .write(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n")
                .as_bytes(),
        )
        .await;
    let forbidden = client.next("an answer").await;
    assert_eq!(forbidden.status, 403, "{forbidden:?}");
    assert!(
        !forbidden.body.contains(&"x".repeat(65)),
        "{}",
        forbidden.body
    );
}

/// Values and names a client chose, quoted by any check (the server's own, or the JSON
/// parser's): at most 64 characters of each come back.
#[tokio::test]
async fn errors_echo_at_most_64_characters_of_a_value_or_a_name() {
    let server = Backend::Embedded.server().await;
    let client = crate::common::http();
    let long = "q".repeat(300);
    let campaign = Campaign::fresh();
    let campaign_path = format!(
        "/v1/advertisers/{}/campaigns/{}",
        campaign.advertiser_id, campaign.campaign_id
    );
    let requests = [
        client
            .post(server.url("/v1/impressions"))
            .json(&json!({"user_data": long})),
        client.get(server.url(&format!(
            "{campaign_path}/summary?from=2026-11-01&to=2026-11-02&{long}=1"
        ))),
        client
            .put(server.url(&campaign_path))
            .json(&json!({ long.clone(): 1 })),
        client.get(server.url(&format!(
            "/v1/sites/example.com/uniques?from=2026-11-01&to=2026-11-02&feature.{long}=1"
        ))),
        client.get(server.url(&format!("/track?site=example.com&guid=g&f{long}=1"))),
    ];
    for request in requests {
        let answer = request.send().await.expect("answered");
        let status = answer.status();
        let body = answer.text().await.expect("a body");
        assert_eq!(status, 400, "{body}");
        assert!(body.contains(&"q".repeat(60)), "{body}");
        assert!(!body.contains(&"q".repeat(65)), "{body}");
    }
}

#[tokio::test]
async fn a_request_id_is_echoed_only_when_short_and_printable() {
    let server = edge_server().await;
    let mut client = connect(&server).await;
    let mut ask = async |id: &str| {
        client
            .write(
                format!("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: {id}\r\n\r\n")
                    .as_bytes(),
            )
            .await;
        let answer = client.next("an answer").await;
        assert_eq!(answer.status, 200);
        answer
            .header("x-request-id")
            .expect("a request id")
            .to_owned()
    };
    assert_eq!(ask("trace-42").await, "trace-42");
    let longest = "r".repeat(128);
    assert_eq!(ask(&longest).await, longest);
    for refused in ["r".repeat(129), "r".repeat(10_000), "caf\u{e9}".to_owned()] {
        let echoed = ask(&refused).await;
        assert_ne!(echoed, refused);
        assert!(Uuid::parse_str(&echoed).is_ok(), "{echoed}");
    }
}

#[tokio::test]
async fn an_answer_before_the_body_is_read_says_connection_close_and_the_server_closes() {
    let mut options = test_options();
    options.edge.rate_limits = RateLimits {
        beacons_per_second: NonZeroU32::new(1),
        beacon_burst: NonZeroU32::new(1).expect("nonzero"),
        ..RateLimits::default()
    };
    let server = Backend::Embedded.server_with(options).await;
    let site = fresh_site();
    register_site(&server.url(""), &site).await;

    // No key, the body still on its way: 401, said to close, closed.
    let mut client = connect(&server).await;
    client
        .write(
            b"POST /v1/impressions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
              Content-Length: 1000\r\n\r\n[{\"impr",
        )
        .await;
    let unauthorized = client.next("an answer").await;
    assert_eq!(unauthorized.status, 401);
    assert_eq!(unauthorized.header("connection"), Some("close"));
    assert!(client.closed_within(Duration::from_secs(5)).await);

    // Beacons on one keep-alive connection past the address's rate: every answer after which
    // the server closes says so first.
    let mut client = connect(&server).await;
    let now = Utc::now().timestamp();
    let (mut limited, mut reopened) = (0, 0);
    for n in 0..20 {
        let body = format!("site={site}&guid=g{n}&timestamp={now}");
        // The body follows its head a moment later, as it does over a real network.
        client
            .write(
                format!(
                    "POST /track HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n\
                     Content-Length: {}\r\n\r\n",
                    body.len()
                )
                .as_bytes(),
            )
            .await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        client.write(body.as_bytes()).await;
        let answer = client
            .answer(Duration::from_secs(5))
            .await
            .unwrap_or_else(|| panic!("beacon {n}: the connection closed without an answer"));
        if answer.status == 429 {
            limited += 1;
        } else {
            assert_eq!(answer.status, 204, "{answer:?}");
        }
        if answer.header("connection") == Some("close") {
            assert!(client.closed_within(Duration::from_secs(5)).await);
            client = connect(&server).await;
            reopened += 1;
        }
    }
    assert!(limited > 10, "{limited}");
    assert!(
        reopened <= limited,
        "{reopened} closes for {limited} refusals"
    );
}

#[tokio::test]
async fn health_probes_are_answered_while_the_connection_cap_is_full() {
    let server = edge_server().await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut client = connect(&server).await;
        client
            .write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await;
        let answer = client.next("an answer").await;
        assert_eq!(answer.status, 200);
        held.push(client);
    }
    let mut liveness = connect(&server).await;
    liveness
        .write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let alive = liveness.next("an answer").await;
    assert_eq!(alive.status, 200, "{alive:?}");
    assert_eq!(alive.header("connection"), Some("close"));

    let mut readiness = connect(&server).await;
    readiness
        .write(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let ready = readiness.next("an answer").await;
    assert_eq!(ready.status, 200, "{ready:?}");
    assert_eq!(ready.json()["connections"], "full", "{}", ready.body);

    let mut other = connect(&server).await;
    other
        .write(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let refused = other.next("an answer").await;
    assert_eq!(refused.status, 503);
    assert_eq!(refused.json()["error"]["code"], "overloaded");

    drop(held);
    let freed = crate::common::eventually(Duration::from_secs(5), || async {
        let Ok(response) = reqwest::get(server.url("/readyz")).await else {
            return false;
        };
        let body: Value = response.json().await.unwrap_or_default();
        body["connections"] == "available"
    })
    .await;
    assert!(freed);
}
