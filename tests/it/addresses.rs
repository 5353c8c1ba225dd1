//! Addresses (docs/API.md, "Privacy"): client addresses are stored, answered and exported with
//! their last bits zeroed (IPv4 to its /24, IPv6 to its /48) unless `--store-ip` says `full`
//! or `none`; invalid-traffic checks still judge the full address; and `adevents privacy
//! truncate-addresses` brings rows stored whole under the policy, on either store.

use crate::common::events::Campaign;
use crate::common::process::{ServerProcess, adevents, embedded_server, run_to_end};
use crate::common::tags::{create_secret, fire_pixel, pixel_query, signed};
use crate::common::{Backend, PrivateStore, TestServer, http, raw_session, test_options};
use adevents::app::Options;
use adevents::domain::address::StoreIp;
use adevents::store::Store;
use chrono::{DateTime, Duration, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use uuid::Uuid;

conformance!(
    addresses_are_stored_answered_and_exported_as_their_24_or_48_by_default,
    store_ip_full_keeps_addresses_whole,
    store_ip_none_keeps_no_address,
    invalid_traffic_checks_judge_the_full_address,
    the_view_join_compares_networks_by_default_and_only_user_agents_with_none,
    the_rewrite_brings_addresses_stored_whole_under_the_policy,
);

/// What the client sends as its own address (through a trusted proxy) when an impression
/// names none, and a pixel's browser address.
const CLIENT: &str = "203.0.113.9";
const BROWSER: &str = "192.0.2.55";

/// The impressions every answer test sends: (label, explicit `user_ip`), each with an id.
const POSTED: [(&str, Option<&str>); 4] = [
    ("v4", Some("198.51.100.77")),
    ("v6", Some("2001:db8:1:2:3:4:5:6")),
    ("mapped", Some("::ffff:198.51.100.77")),
    ("client", None),
];

/// The options of every server here: the loopback client is a trusted proxy, so a test picks
/// the client address with `X-Forwarded-For`.
fn options(store_ip: StoreIp) -> Options {
    let mut options = test_options();
    options.edge.store_ip = store_ip;
    options.edge.trusted_proxies = vec!["127.0.0.1/32".parse().expect("a CIDR")];
    options
}

fn served() -> DateTime<Utc> {
    Utc::now() - Duration::minutes(1)
}

/// POSTs impressions as the ad server at `client` sends them.
async fn post_from(server: &TestServer, client: &str, body: &Value) {
    let response = http()
        .post(server.url("/v1/impressions"))
        .header("x-forwarded-for", client)
        .json(body)
        .send()
        .await
        .expect("answered");
    let status = response.status();
    let answer: Value = response.json().await.expect("JSON");
    assert_eq!(status, StatusCode::OK, "{answer}");
}

/// Sends the [`POSTED`] impressions and one pixel from [`BROWSER`]; their ids by label.
async fn send_everything(server: &TestServer, campaign: &Campaign) -> HashMap<&'static str, Uuid> {
    let at = served();
    let mut ids = HashMap::new();
    let mut events = Vec::new();
    for (label, user_ip) in POSTED {
        let id = Uuid::new_v4();
        let mut event = campaign.impression(id, Uuid::new_v4(), at);
        if let Some(user_ip) = user_ip {
            event["user_ip"] = json!(user_ip);
        }
        events.push(event);
        ids.insert(label, id);
    }
    post_from(server, CLIENT, &Value::Array(events)).await;
    let secret = create_secret(server, campaign.advertiser_id).await;
    let pixel = Uuid::new_v4();
    let query = pixel_query(
        campaign,
        pixel,
        Uuid::new_v4(),
        at.timestamp_millis(),
        &secret,
    );
    fire_pixel(
        server,
        &signed(&secret, &query),
        &[("x-forwarded-for", BROWSER)],
    )
    .await;
    ids.insert("pixel", pixel);
    ids
}

/// Yesterday to today: what was served a minute back a while ago may be yesterday's.
fn range() -> String {
    let today = Utc::now().date_naive();
    format!("from={}&to={today}", today - chrono::Days::new(1))
}

/// `user_ip` of every impression in every answer that carries one (the NDJSON and CSV
/// exports and the recent list), by impression id, checking the answers agree.
async fn answered_addresses(server: &TestServer, campaign: &Campaign) -> HashMap<Uuid, Value> {
    let get = |path: String| async move {
        let response = http()
            .get(server.url(&path))
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        response.text().await.expect("a body")
    };
    let id_of = |record: &Value| -> Uuid {
        record["impression_id"]
            .as_str()
            .and_then(|id| id.parse().ok())
            .expect("an impression id")
    };
    let path = format!("{}/impressions?{}", campaign.path(), range());
    let ndjson: HashMap<Uuid, Value> = get(path.clone())
        .await
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("a record"))
        .map(|record| (id_of(&record), record["user_ip"].clone()))
        .collect();

    let csv_text = get(format!("{path}&format=csv")).await;
    let mut reader = csv::Reader::from_reader(csv_text.as_bytes());
    let headers = reader.headers().expect("a header").clone();
    let column = |name: &str| {
        headers
            .iter()
            .position(|header| header == name)
            .expect("a column")
    };
    let (id_at, ip_at) = (column("impression_id"), column("user_ip"));
    for row in reader.records() {
        let row = row.expect("a CSV record");
        let id: Uuid = row[id_at].parse().expect("an id");
        // CSV has no null: an empty cell.
        let expected = ndjson[&id].as_str().unwrap_or_default();
        assert_eq!(&row[ip_at], expected, "CSV and NDJSON differ for {id}");
    }

    let recent: Value = serde_json::from_str(
        &get(format!("{}/impressions/recent?limit=100", campaign.path())).await,
    )
    .expect("JSON");
    let recent = recent["impressions"].as_array().expect("impressions");
    assert_eq!(recent.len(), ndjson.len(), "{recent:?}");
    for record in recent {
        assert_eq!(
            record["user_ip"],
            ndjson[&id_of(record)],
            "recent and export differ"
        );
    }
    ndjson
}

/// Sends everything to a server with `store_ip` and checks what every answer shows, by label.
async fn answers_under(backend: Backend, store_ip: StoreIp, expected: [(&str, Value); 5]) {
    let server = backend.server_with(options(store_ip)).await;
    let campaign = Campaign::fresh();
    let ids = send_everything(&server, &campaign).await;
    let answered = answered_addresses(&server, &campaign).await;
    assert_eq!(answered.len(), ids.len(), "{answered:?}");
    for (label, address) in expected {
        assert_eq!(answered[&ids[label]], address, "{label} under {store_ip}");
    }
}

async fn addresses_are_stored_answered_and_exported_as_their_24_or_48_by_default(backend: Backend) {
    assert_eq!(Options::default().edge.store_ip, StoreIp::Truncated);
    answers_under(
        backend,
        StoreIp::default(),
        [
            ("v4", json!("198.51.100.0")),
            ("v6", json!("2001:db8:1::")),
            ("mapped", json!("::ffff:198.51.100.0")),
            ("client", json!("203.0.113.0")),
            ("pixel", json!("192.0.2.0")),
        ],
    )
    .await;
}

async fn store_ip_full_keeps_addresses_whole(backend: Backend) {
    answers_under(
        backend,
        StoreIp::Full,
        [
            ("v4", json!("198.51.100.77")),
            ("v6", json!("2001:db8:1:2:3:4:5:6")),
            ("mapped", json!("::ffff:198.51.100.77")),
            ("client", json!(CLIENT)),
            ("pixel", json!(BROWSER)),
        ],
    )
    .await;
}

async fn store_ip_none_keeps_no_address(backend: Backend) {
    answers_under(
        backend,
        StoreIp::None,
        [
            ("v4", Value::Null),
            ("v6", Value::Null),
            ("mapped", Value::Null),
            ("client", Value::Null),
            ("pixel", Value::Null),
        ],
    )
    .await;
}

async fn invalid_traffic_checks_judge_the_full_address(backend: Backend) {
    // Ranges narrower than the /24 that is kept: only the full address falls inside them.
    let mut options = options(StoreIp::Truncated);
    options.service.ivt_deny_cidrs = vec![
        "198.51.100.77/32".parse().expect("a CIDR"),
        format!("{BROWSER}/32").parse().expect("a CIDR"),
    ];
    let server = backend.server_with(options).await;
    let campaign = Campaign::fresh();
    let ids = send_everything(&server, &campaign).await;
    let neighbour = Uuid::new_v4();
    let mut event = campaign.impression(neighbour, Uuid::new_v4(), served());
    event["user_ip"] = json!("198.51.100.78");
    post_from(&server, CLIENT, &event).await;

    let path = format!("{}/impressions?{}", campaign.path(), range());
    let body = http()
        .get(server.url(&path))
        .send()
        .await
        .expect("answered")
        .text()
        .await
        .expect("NDJSON");
    let records: HashMap<Uuid, Value> = body
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("a record"))
        .map(|record| {
            let id = record["impression_id"]
                .as_str()
                .and_then(|id| id.parse().ok())
                .expect("an id");
            (id, record)
        })
        .collect();
    for (id, invalid, address) in [
        (ids["v4"], json!("denied_address"), "198.51.100.0"),
        (
            ids["mapped"],
            json!("denied_address"),
            "::ffff:198.51.100.0",
        ),
        (ids["pixel"], json!("denied_address"), "192.0.2.0"),
        (neighbour, Value::Null, "198.51.100.0"),
        (ids["client"], Value::Null, "203.0.113.0"),
    ] {
        let record = &records[&id];
        assert_eq!(record["invalid"], invalid, "{record}");
        assert_eq!(record["user_ip"], address, "{record}");
    }
}

/// A viewable report for the pixel `query` from `address`, as `/v.js` sends it.
async fn report_viewable(server: &TestServer, query: &str, address: &str, agent: &str) {
    let response = crate::common::tags::browser()
        .post(server.url(&format!("/v?{query}")))
        .header("x-forwarded-for", address)
        .header("user-agent", agent)
        .header("content-type", "text/plain;charset=UTF-8")
        .body("e=viewable&in_view_ms=1200")
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
}

/// Which of two pixels' impressions export as viewable when each gets a report from the
/// same browser: one from the rendering address's /24, one from another network.
async fn viewable_under(backend: Backend, store_ip: StoreIp) -> (Value, Value) {
    const AGENT: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0";
    let server = backend.server_with(options(store_ip)).await;
    let campaign = Campaign::fresh();
    let secret = create_secret(&server, campaign.advertiser_id).await;
    let mut queries = Vec::new();
    for _ in 0..2 {
        let id = Uuid::new_v4();
        let query = signed(
            &secret,
            &pixel_query(
                &campaign,
                id,
                Uuid::new_v4(),
                served().timestamp_millis(),
                &secret,
            ),
        );
        fire_pixel(
            &server,
            &query,
            &[("x-forwarded-for", BROWSER), ("user-agent", AGENT)],
        )
        .await;
        queries.push((id, query));
    }
    report_viewable(&server, &queries[0].1, "192.0.2.200", AGENT).await;
    report_viewable(&server, &queries[1].1, "198.51.100.1", AGENT).await;
    let body = http()
        .get(server.url(&format!("{}/impressions?{}", campaign.path(), range())))
        .send()
        .await
        .expect("answered")
        .text()
        .await
        .expect("NDJSON");
    let viewable: HashMap<String, Value> = body
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("a record"))
        .map(|record| {
            let id = record["impression_id"].as_str().expect("an id").to_owned();
            (id, record["viewable"].clone())
        })
        .collect();
    (
        viewable[&queries[0].0.to_string()].clone(),
        viewable[&queries[1].0.to_string()].clone(),
    )
}

async fn the_view_join_compares_networks_by_default_and_only_user_agents_with_none(
    backend: Backend,
) {
    // The truncated address is the same /24 the join compared before: the same network counts,
    // another does not.
    assert_eq!(
        viewable_under(backend, StoreIp::Truncated).await,
        (json!(true), json!(false))
    );
    // No address kept, and no network either: the user agent alone tells the client.
    assert_eq!(
        viewable_under(backend, StoreIp::None).await,
        (json!(true), json!(true))
    );
}

/// Runs the command's code path on `store`; its report and the lines it printed.
async fn rewrite(
    store: &Arc<dyn Store>,
    policy: StoreIp,
) -> (adevents::store::RewriteReport, Vec<String>) {
    let mut lines = Vec::new();
    let mut say = |line: &str| lines.push(line.to_owned());
    let report = adevents::commands::rewrite_addresses(store.as_ref(), policy, &mut say)
        .await
        .expect("the rewrite runs");
    (report, lines)
}

async fn the_rewrite_brings_addresses_stored_whole_under_the_policy(backend: Backend) {
    // Rows that expire on Cassandra: a rewritten address must expire with its row.
    let retain = adevents::domain::retention::Retention::parse("400days").expect("a retention");
    let (private, store) = PrivateStore::open(backend, "ip", retain).await;
    // Stored whole, as a release before --store-ip did.
    let server = TestServer::with_options(Arc::clone(&store), options(StoreIp::Full)).await;
    let campaign = Campaign::fresh();
    let ids = send_everything(&server, &campaign).await;
    assert_eq!(
        answered_addresses(&server, &campaign).await[&ids["v4"]],
        "198.51.100.77"
    );

    let (report, lines) = rewrite(&store, StoreIp::Truncated).await;

    // Five impressions, each with an address none of which is a /24 or /48 already.
    assert_eq!(
        (report.rows_seen, report.rows_rewritten),
        (5, 5),
        "{lines:?}"
    );
    assert_eq!(
        lines.last().map(String::as_str),
        Some("done: 5 impressions read, 5 addresses rewritten (--store-ip truncated)"),
        "{lines:?}"
    );
    // Read back through a server that shows what is stored as it is.
    let answered = answered_addresses(&server, &campaign).await;
    for (label, address) in [
        ("v4", "198.51.100.0"),
        ("v6", "2001:db8:1::"),
        ("mapped", "::ffff:198.51.100.0"),
        ("client", "203.0.113.0"),
        ("pixel", "192.0.2.0"),
    ] {
        assert_eq!(answered[&ids[label]], address, "{label}");
    }
    if let PrivateStore::Cassandra(keyspace) = &private {
        let session = raw_session().await;
        let ttls: Vec<(Option<i32>,)> = session
            .query_unpaged(
                format!("SELECT TTL(user_ip) FROM {keyspace}.impression"),
                (),
            )
            .await
            .expect("read")
            .into_rows_result()
            .expect("rows")
            .rows::<(Option<i32>,)>()
            .expect("typed")
            .collect::<Result<_, _>>()
            .expect("decoded");
        assert_eq!(ttls.len(), 5);
        assert!(
            ttls.iter().all(|(ttl,)| ttl.is_some_and(|ttl| ttl > 0)),
            "a rewritten address must expire with its row: {ttls:?}"
        );
    }

    // Again: nothing left to change, which is what makes a rerun the resume.
    let (again, _) = rewrite(&store, StoreIp::Truncated).await;
    assert_eq!((again.rows_seen, again.rows_rewritten), (5, 0));
    // A stricter policy later: no address left at all.
    let (none, _) = rewrite(&store, StoreIp::None).await;
    assert_eq!((none.rows_seen, none.rows_rewritten), (5, 5));
    let answered = answered_addresses(&server, &campaign).await;
    assert!(answered.values().all(Value::is_null), "{answered:?}");
    drop((server, store));
}

/// The command as an operator runs it on an embedded folder a server wrote, stopped.
#[tokio::test]
async fn the_command_rewrites_an_embedded_folder_and_prints_its_progress() {
    let folder = tempfile::tempdir().expect("a temporary folder");
    let data_dir = folder.path().to_str().expect("UTF-8 path");
    let campaign = Campaign::fresh();
    let start = |store_ip: &'static str| async move {
        let server = ServerProcess::start(embedded_server(
            data_dir,
            &[],
            &[("ADEVENTS_STORE_IP", store_ip)],
        ))
        .await;
        assert!(server.wait_ready().await, "{}", server.output());
        server
    };
    let mut server = start("full").await;
    let id = Uuid::new_v4();
    let mut event = campaign.impression(id, Uuid::new_v4(), served());
    event["user_ip"] = json!("198.51.100.77");
    let response = http()
        .post(server.url("/v1/impressions"))
        .json(&event)
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::OK);
    server.send_signal("TERM");
    assert!(
        server
            .wait(std::time::Duration::from_secs(30))
            .await
            .success()
    );

    let (status, output) = run_to_end(adevents(
        &[
            "privacy",
            "truncate-addresses",
            "--store",
            "embedded",
            "--data-dir",
            data_dir,
        ],
        &[],
    ))
    .await;

    assert!(status.success(), "{output}");
    assert!(
        output.contains("done: 1 impressions read, 1 addresses rewritten (--store-ip truncated)"),
        "{output}"
    );
    let server = start("full").await;
    let response = http()
        .get(server.url(&format!("{}/impressions?{}", campaign.path(), range())))
        .send()
        .await
        .expect("answered");
    let body = response.text().await.expect("NDJSON");
    let record: Value = serde_json::from_str(body.trim()).expect("one record");
    assert_eq!(record["user_ip"], "198.51.100.0", "{record}");
}
