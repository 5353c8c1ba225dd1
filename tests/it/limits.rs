//! Limits and overload (docs/API.md, "Limits and overload"): one test per bound, each showing
//! that the bound holds, that the answer is the contract's, and that nothing refused is stored.
//! The bounds that only a whole process shows (memory, a crash, a full disk, the background
//! sealer) are in `limits_process.rs`.

use crate::common::beacons::{fresh_site, register_site, uniques};
use crate::common::events::{Campaign, export_records, get, post, summary};
use crate::common::{Backend, TestServer, create_key, http, test_options};
use adevents::http::{ConnectionLimits, InFlight, RateLimits};
use chrono::{Duration, NaiveDate, Utc};
use futures::{StreamExt, stream};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use uuid::Uuid;

conformance!(
    an_address_past_its_beacon_rate_gets_429_and_nothing_of_it_is_stored,
    an_ingest_key_past_its_rate_gets_429_and_nothing_of_it_is_stored,
    past_the_in_flight_cap_writes_are_shed_with_503_and_nothing_acknowledged_is_lost,
    a_range_too_wide_for_the_partition_budget_is_a_400_naming_from_and_to,
    a_report_past_its_limit_sums_the_rest_into_one_row,
    an_export_counts_a_click_only_within_the_look_back_after_its_impression,
    settings_history_is_bounded,
);

/// The answer's status, error code and `Retry-After` header.
async fn refusal(response: reqwest::Response) -> (StatusCode, String, Option<u64>) {
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok());
    let body: Value = response.json().await.unwrap_or_default();
    let code = body["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (status, code, retry_after)
}

async fn an_address_past_its_beacon_rate_gets_429_and_nothing_of_it_is_stored(backend: Backend) {
    let mut options = test_options();
    options.edge.rate_limits = RateLimits {
        beacons_per_second: NonZeroU32::new(1),
        beacon_burst: NonZeroU32::new(3).expect("nonzero"),
        ..RateLimits::default()
    };
    let server = backend.server_with(options).await;
    let site = fresh_site();
    register_site(&server.url(""), &site).await;
    let now = Utc::now().timestamp();
    let (mut accepted, mut limited) = (0u64, 0u64);
    for n in 0..10 {
        let response = http()
            .get(server.url(&format!(
                "/track?site={site}&guid=visitor-{n}&timestamp={now}&page=/{n}"
            )))
            .send()
            .await
            .expect("answered");
        match response.status() {
            StatusCode::OK => accepted += 1,
            _ => {
                let (status, code, retry_after) = refusal(response).await;
                assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
                assert_eq!(code, "rate_limited");
                assert!(retry_after.is_some_and(|seconds| seconds >= 1));
                limited += 1;
            }
        }
    }
    assert!(
        (3..=4).contains(&accepted),
        "a burst of 3 at 1/s: {accepted}"
    );
    assert_eq!(accepted + limited, 10);
    // The beacons' day, whenever the check runs.
    let day = chrono::DateTime::from_timestamp(now, 0)
        .expect("a time")
        .date_naive();
    let query = [("from", day), ("to", day)].map(|(name, day)| (name.to_owned(), day.to_string()));
    let stored = uniques(&server.url(""), &site, &query).await;
    assert_eq!(stored["total"]["visits"], accepted, "{stored}");
}

async fn create_ingest_key(server: &TestServer, campaign: &Campaign) -> String {
    let body = json!({"scope": "ingest", "advertiser_id": campaign.advertiser_id});
    create_key(server, body).await.0
}

async fn an_ingest_key_past_its_rate_gets_429_and_nothing_of_it_is_stored(backend: Backend) {
    let mut options = test_options();
    // A bucket of 10 events (the largest request), refilled at 10 a second.
    options.edge.body_limits.max_events = 10;
    options.edge.rate_limits.ingest_events_per_second = NonZeroU32::new(10);
    let server = backend.server_with(options).await;
    let campaign = Campaign::fresh();
    let key = create_ingest_key(&server, &campaign).await;
    let noon = (Utc::now() - Duration::days(1))
        .date_naive()
        .and_hms_opt(12, 0, 0)
        .expect("valid")
        .and_utc();
    let client = reqwest::Client::new();
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let batch: Vec<Value> = (0..5)
            .map(|_| campaign.impression(Uuid::new_v4(), Uuid::new_v4(), noon))
            .collect();
        let response = client
            .post(server.url("/v1/impressions"))
            .bearer_auth(&key)
            .json(&batch)
            .send()
            .await
            .expect("answered");
        let (status, code, retry_after) = refusal(response).await;
        if status != StatusCode::OK {
            assert_eq!(
                (status, code.as_str()),
                (StatusCode::TOO_MANY_REQUESTS, "rate_limited")
            );
            assert!(retry_after.is_some());
        }
        statuses.push(status);
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    let day = noon.date_naive();
    let answer = summary(&server, &campaign, &format!("from={day}&to={day}")).await;
    assert_eq!(answer["totals"]["impressions"], 10, "{answer}");
}

async fn past_the_in_flight_cap_writes_are_shed_with_503_and_nothing_acknowledged_is_lost(
    backend: Backend,
) {
    let mut options = test_options();
    options.edge.in_flight = InFlight {
        writes: 2,
        queries: 64,
    };
    let server = backend.server_with(options).await;
    let campaign = Campaign::fresh();
    let day = (Utc::now() - Duration::days(1)).date_naive();
    let noon = day.and_hms_opt(12, 0, 0).expect("valid").and_utc();
    let batches: Vec<Vec<Value>> = (0..40)
        .map(|_| {
            (0..500)
                .map(|_| campaign.impression(Uuid::new_v4(), Uuid::new_v4(), noon))
                .collect()
        })
        .collect();
    let url = server.url("/v1/impressions");
    let outcomes: Vec<(StatusCode, String, Option<u64>, usize)> = stream::iter(&batches)
        .map(|batch| {
            let request = http().post(&url).json(batch);
            async move {
                let (status, code, retry_after) =
                    refusal(request.send().await.expect("answered")).await;
                (status, code, retry_after, batch.len())
            }
        })
        .buffer_unordered(40)
        .collect()
        .await;
    let mut acknowledged = 0;
    let mut shed = 0;
    for (status, code, retry_after, events) in outcomes {
        match status {
            StatusCode::OK => acknowledged += events,
            StatusCode::SERVICE_UNAVAILABLE => {
                assert_eq!(code, "overloaded");
                assert!(retry_after.is_some(), "a 503 says when to retry");
                shed += 1;
            }
            other => panic!("unexpected {other}"),
        }
    }
    assert!(shed > 0, "40 writes at once past a cap of 2: some are shed");
    assert!(acknowledged > 0);
    let answer = summary(&server, &campaign, &format!("from={day}&to={day}")).await;
    assert_eq!(
        answer["totals"]["impressions"], acknowledged,
        "every acknowledged event, and none of the shed ones: {answer}"
    );
}

async fn a_range_too_wide_for_the_partition_budget_is_a_400_naming_from_and_to(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let site = fresh_site();
    register_site(&server.url(""), &site).await;
    for path in [campaign.path(), format!("/v1/sites/{site}")] {
        let response = http()
            .put(server.url(&path))
            .json(&json!({"buckets": 256}))
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), StatusCode::OK);
    }
    // A year ahead: 366 unsealed days of 256 buckets, judged as asked (nothing is stored
    // there yet), far past the default budget of 20,000 partitions.
    let today = Utc::now().date_naive();
    let year = format!("from={today}&to={}", today + Duration::days(365));
    let week = format!("from={today}&to={}", today + Duration::days(6));
    let campaign_paths = [
        (format!("{}/summary", campaign.path()), ""),
        (format!("{}/report", campaign.path()), "&dimension=ad_id"),
        (format!("{}/impressions", campaign.path()), ""),
        (format!("/v1/sites/{site}/uniques"), ""),
    ];
    for (path, extra) in &campaign_paths {
        let (status, body) = get(&server, path, &format!("{year}{extra}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        let fields: Vec<&str> = body["error"]["errors"]
            .as_array()
            .expect("errors")
            .iter()
            .filter_map(|error| error["field"].as_str())
            .collect();
        assert_eq!(fields, ["from", "to"], "{path}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|message| message.contains("20000")),
            "{body}"
        );
        let response = http()
            .get(server.url(&format!("{path}?{week}{extra}")))
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), StatusCode::OK, "a week fits: {path}");
    }
}

async fn a_report_past_its_limit_sums_the_rest_into_one_row(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let day = NaiveDate::from_ymd_opt(2026, 3, 10).expect("valid");
    let noon = day.and_hms_opt(12, 0, 0).expect("valid").and_utc();
    // Value v0 has 10 impressions, v1 9, ... v9 1; every v's first impression is clicked.
    let mut impressions = Vec::new();
    let mut clicks = Vec::new();
    for value in 0..10 {
        for n in 0..(10 - value) {
            let id = Uuid::new_v4();
            let mut impression = campaign.impression(id, Uuid::new_v4(), noon);
            impression["user_data"] = json!({"k": format!("v{value}")});
            impressions.push(impression);
            if n == 0 {
                clicks.push(campaign.click(id, Uuid::new_v4(), noon + Duration::minutes(1)));
            }
        }
    }
    let (status, _) = post(&server, "/v1/impressions", &Value::Array(impressions)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = post(&server, "/v1/clicks", &Value::Array(clicks)).await;
    assert_eq!(status, StatusCode::OK);
    let path = format!("{}/report", campaign.path());
    let query = format!("from={day}&to={day}&dimension=user_data.k&limit=3");
    let (status, report) = get(&server, &path, &query).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    let rows = report["rows"].as_array().expect("rows");
    let listed: Vec<(Value, Value, Value)> = rows
        .iter()
        .map(|row| {
            (
                row["value"].clone(),
                row["impressions"].clone(),
                row["clicks"].clone(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            (json!("v0"), json!(10), json!(1)),
            (json!("v1"), json!(9), json!(1)),
            (json!("v2"), json!(8), json!(1)),
            (Value::Null, json!(28), json!(7)),
        ]
    );
    assert_eq!(rows[3]["other"], true, "{report}");
    assert!(rows[..3].iter().all(|row| row.get("other").is_none()));
    assert_eq!(report["values"], 10);
    for limit in ["0", "10001", "many"] {
        let query = format!("from={day}&to={day}&dimension=user_data.k&limit={limit}");
        let (status, body) = get(&server, &path, &query).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{limit}");
        assert_eq!(body["error"]["errors"][0]["field"], "limit");
    }
}

async fn an_export_counts_a_click_only_within_the_look_back_after_its_impression(backend: Backend) {
    let mut options = test_options();
    options.service.queries.click_lookback_days = 2;
    let server = backend.server_with(options).await;
    let campaign = Campaign::fresh();
    let day = NaiveDate::from_ymd_opt(2026, 2, 10).expect("valid");
    let noon = day.and_hms_opt(12, 0, 0).expect("valid").and_utc();
    let (soon, late, never) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let impressions: Vec<Value> = [soon, late, never]
        .iter()
        .map(|id| campaign.impression(*id, Uuid::new_v4(), noon))
        .collect();
    let clicks = vec![
        campaign.click(soon, Uuid::new_v4(), noon + Duration::days(2)),
        campaign.click(late, Uuid::new_v4(), noon + Duration::days(4)),
    ];
    let (status, _) = post(&server, "/v1/impressions", &Value::Array(impressions)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = post(&server, "/v1/clicks", &Value::Array(clicks)).await;
    assert_eq!(status, StatusCode::OK);
    let records = export_records(&server, &campaign, &format!("from={day}&to={day}")).await;
    let clicked: std::collections::HashMap<String, bool> = records
        .iter()
        .map(|(id, record)| (id.clone(), record["clicked"].as_bool().expect("clicked")))
        .collect();
    assert_eq!(clicked.len(), 3, "{records:?}");
    assert!(clicked[&soon.to_string()], "clicked two days after: within");
    assert!(
        !clicked[&late.to_string()],
        "clicked four days after: past the look-back"
    );
    assert!(!clicked[&never.to_string()]);
}

async fn settings_history_is_bounded(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let put = |body: Value| {
        let url = server.url(&campaign.path());
        async move {
            let response = http().put(url).json(&body).send().await.expect("answered");
            let status = response.status();
            let body: Value = response.json().await.expect("JSON");
            (status, body)
        }
    };
    let too_far = (Utc::now() + Duration::days(367)).to_rfc3339();
    let (status, body) = put(json!({"buckets": 2, "effective_from": too_far})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["errors"][0]["field"], "effective_from");
    // 100 changes waiting to take effect, alternating counts; the 101st is refused.
    let first = Utc::now() + Duration::days(1);
    for n in 0..100 {
        let at = (first + Duration::minutes(n)).to_rfc3339();
        let buckets = if n % 2 == 0 { 2 } else { 3 };
        let (status, body) = put(json!({"buckets": buckets, "effective_from": at})).await;
        assert_eq!(status, StatusCode::OK, "change {n}: {body}");
    }
    let at = (first + Duration::hours(5)).to_rfc3339();
    let (status, body) = put(json!({"buckets": 7, "effective_from": at})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["errors"][0]["field"], "effective_from");
    // A cap alone schedules nothing: still allowed.
    let (status, body) = put(json!({"daily_cap": 1000})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A server on the embedded store whose connections are bounded tightly, for the tests of
/// slow and many clients (no storage involved).
async fn tight_server() -> TestServer {
    let mut options = test_options();
    options.edge.connections = ConnectionLimits {
        max_connections: 4,
        header_timeout: std::time::Duration::from_secs(1),
        max_header_bytes: 4096,
        idle_timeout: std::time::Duration::from_secs(2),
    };
    options.edge.body_timeout = std::time::Duration::from_secs(1);
    Backend::Embedded.server_with(options).await
}

/// Everything the server sends on `stream` until it closes it (or 10 s pass).
async fn read_until_closed(stream: &mut TcpStream) -> (String, std::time::Duration) {
    let started = Instant::now();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_end(&mut answer),
    )
    .await;
    assert!(read.is_ok(), "the server kept the connection open");
    (
        String::from_utf8_lossy(&answer).into_owned(),
        started.elapsed(),
    )
}

#[tokio::test]
async fn a_half_sent_head_or_body_is_answered_408_and_closed_within_its_timeout() {
    let server = tight_server().await;
    let mut head = TcpStream::connect(server.address).await.expect("connected");
    head.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .expect("written");
    let (answer, took) = read_until_closed(&mut head).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"request_timeout\""), "{answer}");
    assert!(took < std::time::Duration::from_secs(4), "{took:?}");

    let mut body = TcpStream::connect(server.address).await.expect("connected");
    body.write_all(
        b"POST /v1/impressions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer adevents-test-admin-key-0123456789abcdef\r\n\
          Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n[{\"impr",
    )
    .await
    .expect("written");
    let (answer, took) = read_until_closed(&mut body).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"request_timeout\""), "{answer}");
    assert!(took < std::time::Duration::from_secs(4), "{took:?}");

    // An idle keep-alive connection is closed after its idle timeout.
    let mut idle = TcpStream::connect(server.address).await.expect("connected");
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("written");
    let (answer, took) = read_until_closed(&mut idle).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
}

#[tokio::test]
async fn a_head_past_its_size_is_a_431_in_the_error_shape() {
    let server = tight_server().await;
    let mut stream = TcpStream::connect(server.address).await.expect("connected");
    let request = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: {}\r\n\r\n",
        "a".repeat(8192)
    );
    stream.write_all(request.as_bytes()).await.expect("written");
    let (answer, _) = read_until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    assert!(answer.contains("\"headers_too_large\""), "{answer}");
}

#[tokio::test]
async fn past_the_connection_cap_a_new_connection_is_answered_503_and_closed() {
    let server = tight_server().await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(server.address).await.expect("connected");
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("written");
        let mut first = [0u8; 12];
        stream.read_exact(&mut first).await.expect("an answer");
        assert_eq!(&first, b"HTTP/1.1 200");
        held.push(stream);
    }
    let mut extra = TcpStream::connect(server.address).await.expect("connected");
    let (answer, _) = read_until_closed(&mut extra).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );
    assert!(answer.contains("\"overloaded\""), "{answer}");
    drop(held);
    // The slots are back once the held connections close.
    let opened = crate::common::eventually(std::time::Duration::from_secs(5), || async {
        reqwest::get(server.url("/healthz"))
            .await
            .is_ok_and(|response| response.status() == StatusCode::OK)
    })
    .await;
    assert!(opened);
}

#[tokio::test]
async fn unknown_methods_do_not_grow_the_metrics() {
    let server = Backend::Embedded.server().await;
    let metrics = || crate::common::metrics_text(&server);
    let client = reqwest::Client::new();
    // Warm up every series the requests below may touch: an unknown method on an unknown
    // path, and `/metrics` itself.
    let warm_up = reqwest::Method::from_bytes(b"BREW").expect("token");
    let _ = client.request(warm_up, server.url("/nowhere")).send().await;
    let _ = metrics().await;
    let before = metrics().await;
    for n in 0..300 {
        let method = reqwest::Method::from_bytes(format!("BREW{n}").as_bytes()).expect("token");
        let response = client
            .request(method, server.url(&format!("/made-up-{n}")))
            .send()
            .await
            .expect("answered");
        assert!(response.status().is_client_error());
    }
    let after = metrics().await;
    assert!(!after.contains("BREW"), "a method became a label");
    assert!(!after.contains("made-up"), "a path became a label");
    // The series of unknown methods only: other tests' servers in this process add series of
    // their own (routes, store calls, the slice aggregator) whenever they first do something.
    let series = |text: &str| {
        text.lines()
            .filter(|line| line.contains("method=\"other\""))
            .count()
    };
    assert_eq!(series(&after), series(&before), "no new series");
    assert!(after.contains("method=\"other\""), "{after}");
}

#[tokio::test]
async fn the_address_table_is_bounded_and_an_ipv6_subscriber_is_keyed_by_its_64() {
    // The per-address table is bounded: many addresses cannot grow it past its size. Driven
    // through X-Forwarded-For from a trusted proxy, as behind a load balancer.
    let mut options = test_options();
    options.edge.trusted_proxies = vec!["127.0.0.1/32".parse().expect("net")];
    options.edge.rate_limits = RateLimits {
        beacons_per_second: NonZeroU32::new(1),
        beacon_burst: NonZeroU32::new(1).expect("nonzero"),
        addresses: NonZeroUsize::new(16).expect("nonzero"),
        ..RateLimits::default()
    };
    let server = Backend::Embedded.server_with(options).await;
    let site = fresh_site();
    register_site(&server.url(""), &site).await;
    let now = Utc::now().timestamp();
    let beacon = |address: String, n: u32| {
        let url = server.url(&format!("/track?site={site}&guid=g{n}&timestamp={now}"));
        async move {
            http()
                .get(url)
                .header("x-forwarded-for", address)
                .send()
                .await
                .expect("answered")
                .status()
        }
    };
    // Each of 200 addresses gets its first beacon through: forgetting an address is safe.
    for n in 0..200u32 {
        let address = format!("198.51.{}.{}", n / 200, n % 200 + 1);
        assert_eq!(beacon(address, n).await, StatusCode::OK);
    }
    // An IPv6 subscriber rotating within its /64 shares one bucket.
    assert_eq!(beacon("2001:db8:5:6::1".into(), 1000).await, StatusCode::OK);
    assert_eq!(
        beacon("2001:db8:5:6::2".into(), 1001).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(beacon("2001:db8:5:7::1".into(), 1002).await, StatusCode::OK);
}
