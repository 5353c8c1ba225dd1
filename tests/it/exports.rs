//! The bulk export (every impression of a range, each id once, with `clicked`, as NDJSON or
//! CSV read back with standard parsers) and the newest impressions across buckets and
//! midnight.

use crate::common::events::{Campaign, at, configure_buckets, get, post_all};
use crate::common::process::{ServerProcess, embedded_server};
use crate::common::{Backend, TestServer, eventually, http};
use chrono::{DateTime, Duration, DurationRound, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::HashMap;
use uuid::Uuid;

conformance!(
    an_export_of_60_000_impressions_over_many_pages_has_each_once_with_clicked_in_both_formats,
    recent_returns_exactly_the_newest_across_buckets_and_midnight,
    recent_reads_at_most_eight_rows_of_a_bucket_per_id_asked_for,
    export_and_recent_refuse_bad_parameters_by_name,
);

/// What the test sent for one impression: its earliest time, ad, user_data, and whether it
/// was clicked.
struct Sent {
    timestamp: DateTime<Utc>,
    ad_id: Uuid,
    user_data: Value,
    clicked: bool,
}

async fn export(server: &TestServer, campaign: &Campaign, query: &str) -> (String, String) {
    let response = http()
        .get(server.url(&format!("{}/impressions?{query}", campaign.path())))
        // 60,000 records on a shared 2-core machine: a bound against a hang, not a speed test.
        .timeout(std::time::Duration::from_secs(180))
        .send()
        .await
        .expect("export answered");
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (content_type, response.text().await.expect("whole export"))
}

fn check_record(sent: &HashMap<Uuid, Sent>, record: &Value, seen: &mut HashMap<Uuid, u32>) {
    let id: Uuid = record["impression_id"]
        .as_str()
        .and_then(|id| id.parse().ok())
        .expect("impression_id");
    *seen.entry(id).or_default() += 1;
    let expected = sent
        .get(&id)
        .unwrap_or_else(|| panic!("{id} was not sent: {record}"));
    let millis = expected
        .timestamp
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    assert_eq!(record["timestamp"], millis, "{record}");
    assert_eq!(record["ad_id"], expected.ad_id.to_string(), "{record}");
    assert_eq!(record["user_data"], expected.user_data, "{record}");
    assert_eq!(record["clicked"], expected.clicked, "{record}");
    // Posted without a user agent: valid, with an empty (CSV) or null (NDJSON) user agent.
    assert!(
        record["user_agent"].is_null() || record["user_agent"] == "",
        "{record}"
    );
    assert!(
        record["invalid"].is_null() || record["invalid"] == "",
        "{record}"
    );
    // No view report was sent: not measured.
    assert!(
        record["measurable"] == false || record["measurable"] == "false",
        "{record}"
    );
    assert!(
        record["user_id"]
            .as_str()
            .is_some_and(|user| user.parse::<Uuid>().is_ok())
    );
}

async fn an_export_of_60_000_impressions_over_many_pages_has_each_once_with_clicked_in_both_formats(
    backend: Backend,
) {
    const IMPRESSIONS: i64 = 60_000;
    // Over the first 5 days of the range, in 4 buckets: about 3,000 rows in each of 20
    // partitions, so every partition is read in more than one page of 2,000.
    const DAYS: i64 = 5;
    let campaign = Campaign::fresh();
    configure_buckets(backend, &campaign, 4, "always").await;
    let server = backend.server().await;
    let ads: Vec<Uuid> = (0..5).map(|_| Uuid::new_v4()).collect();
    let start = at("2026-09-01T00:00:00Z");
    let step_millis = DAYS * 86_400_000 / IMPRESSIONS;
    let mut sent: HashMap<Uuid, Sent> = HashMap::new();
    let (mut impressions, mut clicks, mut resent) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..IMPRESSIONS {
        let id = Uuid::new_v4();
        let ad_id = ads[(i % 5) as usize];
        let timestamp = start + Duration::milliseconds(i * step_millis);
        let user_data = match i % 1000 {
            // What CSV must quote: commas and quotes (a line break is a control character, which
            // user_data refuses).
            7 => json!({"segment": "sports, \"outdoor\" and more", "country": "DE"}),
            8 => json!({}),
            _ => {
                let country = ["DE", "FR", "US"][(i % 3) as usize];
                json!({"country": country, "age": (i % 60).to_string()})
            }
        };
        let mut event = campaign.impression(id, ad_id, timestamp);
        event["user_data"] = user_data.clone();
        if i % 3 == 0 {
            event["user_ip"] = json!("203.0.113.7");
        }
        // Every 50th clicked: some within the range, some in the weeks after, within the
        // 30-day click look-back (still clicked). Others clicked 35 days after their UTC day,
        // past the look-back: not clicked.
        let clicked = i % 50 == 0;
        if clicked {
            let after = if i % 100 == 0 {
                Duration::minutes(1)
            } else {
                Duration::days(25)
            };
            clicks.push(campaign.click(id, ad_id, timestamp + after));
        } else if i % 50 == 25 {
            clicks.push(campaign.click(id, ad_id, timestamp + Duration::days(35)));
        }
        // Every 10,000th re-sent later the same day: exported once, at its first time.
        if i % 10_000 == 5 {
            let mut again = campaign.impression(id, ad_id, timestamp + Duration::seconds(30));
            again["user_data"] = user_data.clone();
            resent.push(again);
        }
        impressions.push(event);
        sent.insert(
            id,
            Sent {
                timestamp,
                ad_id,
                user_data,
                clicked,
            },
        );
    }
    // Outside the range: not exported.
    impressions.push(campaign.impression(Uuid::new_v4(), ads[0], at("2026-10-01T00:00:00Z")));
    post_all(&server, "/v1/impressions", &impressions, 5_000).await;
    post_all(&server, "/v1/impressions", &resent, 5_000).await;
    post_all(&server, "/v1/clicks", &clicks, 5_000).await;
    let range = "from=2026-09-01&to=2026-09-30";

    let (content_type, ndjson) = export(&server, &campaign, range).await;
    assert_eq!(content_type, "application/x-ndjson");
    let mut seen = HashMap::new();
    for line in ndjson.lines() {
        let record: Value = serde_json::from_str(line).expect("each line is a JSON object");
        check_record(&sent, &record, &mut seen);
        assert_eq!(record["campaign_id"], campaign.campaign_id.to_string());
    }
    assert_eq!(seen.len(), sent.len());
    assert!(
        seen.values().all(|times| *times == 1),
        "an id exported twice"
    );

    let (content_type, csv_text) = export(&server, &campaign, &format!("{range}&format=csv")).await;
    assert!(content_type.starts_with("text/csv"), "{content_type}");
    let mut reader = csv::Reader::from_reader(csv_text.as_bytes());
    let header: Vec<String> = reader
        .headers()
        .expect("a header row")
        .iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        header,
        [
            "impression_id",
            "advertiser_id",
            "campaign_id",
            "ad_id",
            "user_id",
            "timestamp",
            "user_ip",
            "user_data",
            "clicked",
            "user_agent",
            "invalid",
            "measurable",
            "viewable",
            "in_view_ms",
            "engagements"
        ]
    );
    let mut seen = HashMap::new();
    let mut with_ip = 0;
    for row in reader.records() {
        let row = row.expect("an RFC 4180 record");
        let record: Value = header
            .iter()
            .zip(row.iter())
            .map(|(column, value)| {
                let value = match column.as_str() {
                    "user_data" => serde_json::from_str(value).expect("user_data is JSON"),
                    "clicked" => json!(value == "true"),
                    _ => json!(value),
                };
                (column.clone(), value)
            })
            .collect::<serde_json::Map<_, _>>()
            .into();
        check_record(&sent, &record, &mut seen);
        // Stored and exported as its /24 (`--store-ip truncated`, the default).
        with_ip += usize::from(record["user_ip"] == "203.0.113.0");
    }
    assert_eq!(seen.len(), sent.len());
    assert!(
        seen.values().all(|times| *times == 1),
        "an id exported twice"
    );
    assert_eq!(with_ip, sent.len().div_ceil(3));
}

async fn recent_returns_exactly_the_newest_across_buckets_and_midnight(backend: Backend) {
    let campaign = Campaign::fresh();
    configure_buckets(backend, &campaign, 4, "always").await;
    let server = backend.server().await;
    let ad = Uuid::new_v4();
    let now = Utc::now();
    let midnight = now.duration_trunc(Duration::days(1)).expect("a UTC day");
    let mut times: Vec<DateTime<Utc>> = Vec::new();
    // Up to 40 since midnight (fewer just after it), 40 in yesterday's last minutes, 20 three
    // days ago, and 5 beyond the 7-day look-back.
    times.extend(
        (0..40)
            .map(|k| midnight + Duration::seconds(k * 7))
            .filter(|at| *at < now),
    );
    let today = times.len();
    times.extend((1..=40).map(|k| midnight - Duration::seconds(k * 11)));
    times.extend((1..=20).map(|k| midnight - Duration::days(3) + Duration::minutes(k)));
    let too_old: Vec<DateTime<Utc>> = (1..=5)
        .map(|k| midnight - Duration::days(9) + Duration::minutes(k))
        .collect();
    let mut events = Vec::new();
    let mut expected: Vec<(DateTime<Utc>, Uuid)> = Vec::new();
    for at in times.iter().chain(&too_old) {
        let id = Uuid::new_v4();
        events.push(campaign.impression(id, ad, *at));
        if !too_old.contains(at) {
            expected.push((*at, id));
        }
    }
    post_all(&server, "/v1/impressions", &events, 500).await;
    // Ten of yesterday's impressions sent again 3 s later: each is listed once, at its newest
    // row, and the copies must not push other impressions out of a partition's LIMIT.
    let mut resent = Vec::new();
    for (at, id) in expected.iter_mut().skip(today).take(10) {
        *at += Duration::seconds(3);
        resent.push(campaign.impression(*id, ad, *at));
    }
    post_all(&server, "/v1/impressions", &resent, 500).await;
    expected.sort_by_key(|(at, _)| std::cmp::Reverse(*at));

    let path = format!("{}/impressions/recent", campaign.path());
    for limit in [1, 10, today + 15, 95, 1000] {
        let (status, body) = get(&server, &path, &format!("limit={limit}")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let served: Vec<(DateTime<Utc>, Uuid)> = body["impressions"]
            .as_array()
            .expect("impressions")
            .iter()
            .map(|record| {
                (
                    record["timestamp"]
                        .as_str()
                        .and_then(|at| at.parse().ok())
                        .expect("timestamp"),
                    record["impression_id"]
                        .as_str()
                        .and_then(|id| id.parse().ok())
                        .expect("id"),
                )
            })
            .collect();
        let wanted: Vec<(DateTime<Utc>, Uuid)> = expected.iter().take(limit).copied().collect();
        assert_eq!(served, wanted, "limit={limit}");
    }
    let (_, body) = get(&server, &path, "").await;
    assert_eq!(body["impressions"].as_array().map(Vec::len), Some(10));
}

/// The ids listed, newest first.
fn listed(body: &Value) -> Vec<Uuid> {
    body["impressions"]
        .as_array()
        .expect("impressions")
        .iter()
        .map(|record| {
            record["impression_id"]
                .as_str()
                .and_then(|id| id.parse().ok())
                .expect("an id")
        })
        .collect()
}

/// An id re-sent with many timestamps is a row each: the list reads a bucket's newest
/// 8 × `limit` rows at most (docs/API.md), so a flood of copies cannot make it read a whole
/// day; within that many rows it is exact.
async fn recent_reads_at_most_eight_rows_of_a_bucket_per_id_asked_for(backend: Backend) {
    let campaign = Campaign::fresh();
    configure_buckets(backend, &campaign, 1, "always").await;
    let server = backend.server().await;
    let ad = Uuid::new_v4();
    let (older, copied) = (Uuid::new_v4(), Uuid::new_v4());
    let start = Utc::now() - Duration::minutes(40);
    let mut events = vec![campaign.impression(older, ad, start)];
    events.extend((1..=30).map(|k| campaign.impression(copied, ad, start + Duration::seconds(k))));
    // One request each: one id twice in a request with other fields is refused.
    post_all(&server, "/v1/impressions", &events, 1).await;
    let path = format!("{}/impressions/recent", campaign.path());
    // 31 rows: read whole for 10 ids (80 rows), and both are listed.
    let (status, body) = get(&server, &path, "limit=10").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(listed(&body), [copied, older]);
    // For 2 ids, the newest 16 rows: all copies of one id.
    let (status, body) = get(&server, &path, "limit=2").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(listed(&body), [copied]);
}

async fn export_and_recent_refuse_bad_parameters_by_name(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let export = format!("{}/impressions", campaign.path());
    let recent = format!("{export}/recent");
    for (path, query, field) in [
        (
            &export,
            "from=2026-09-01&to=2026-09-30&format=xml",
            "format",
        ),
        (&export, "to=2026-09-30", "from"),
        (&export, "from=2026-09-01&to=2026-09-30&limit=5", "limit"),
        (&recent, "limit=0", "limit"),
        (&recent, "limit=1001", "limit"),
        (&recent, "limit=ten", "limit"),
        (&recent, "from=2026-09-01", "from"),
    ] {
        let (status, body) = get(&server, path, query).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(
            body["error"]["errors"][0]["field"], field,
            "{query}: {body}"
        );
    }
}

/// The export's reads stop once its client goes away: the server logs how far it got, which
/// must be well short of the whole range (the socket buffers hold only a few MB of it).
#[tokio::test]
async fn a_client_that_goes_away_stops_the_export_reads() {
    const IMPRESSIONS: usize = 40_000;
    let folder = tempfile::tempdir().expect("a temporary folder");
    let data_dir = folder.path().display().to_string();
    let server = ServerProcess::start(embedded_server(&data_dir, &["--fsync", "never"], &[])).await;
    let campaign = Campaign::fresh();
    let padding = "x".repeat(500);
    let start = at("2026-09-01T00:00:00Z");
    let events: Vec<Value> = (0..IMPRESSIONS as i64)
        .map(|i| {
            let at = start + Duration::seconds(i * 20);
            let mut event = campaign.impression(Uuid::new_v4(), Uuid::new_v4(), at);
            // ~1.2 KB per exported line: ~48 MB in all.
            event["user_data"] = json!({"a": padding, "b": padding});
            event
        })
        .collect();
    for chunk in events.chunks(1_000) {
        let response = http()
            .post(server.url("/v1/impressions"))
            .json(&Value::Array(chunk.to_vec()))
            .send()
            .await
            .expect("ingest answered");
        assert_eq!(response.status(), StatusCode::OK);
    }

    let mut response = http()
        .get(server.url(&format!(
            "{}/impressions?from=2026-09-01&to=2026-09-30",
            campaign.path()
        )))
        .send()
        .await
        .expect("export answered");
    assert_eq!(response.status(), StatusCode::OK);
    let first = response
        .chunk()
        .await
        .expect("first bytes")
        .expect("a chunk");
    assert!(!first.is_empty());
    drop(response);

    let stopped_at = || {
        server.output().lines().find_map(|line| {
            let entry: Value = serde_json::from_str(line).ok()?;
            (entry["message"] == "export stopped: the client went away")
                .then(|| entry["rows"].as_u64())
                .flatten()
        })
    };
    let stopped = eventually(
        Duration::seconds(20).to_std().expect("positive"),
        || async { stopped_at().is_some() },
    )
    .await;
    assert!(stopped, "no stop logged; output:\n{}", server.output());
    let rows = stopped_at().unwrap_or_default() as usize;
    assert!(
        rows < IMPRESSIONS / 2,
        "read {rows} of {IMPRESSIONS} rows for a client that left"
    );
}
