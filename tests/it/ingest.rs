//! Ingestion of impressions and clicks through HTTP: body forms, limits, validation,
//! idempotence, bucketing and the 503 of a store outage.

use crate::common::events::{Campaign, at, get, post, post_all, summary};
use crate::common::{
    Backend, TestServer, config, first_node_address, http, migrated_store, proxy::TcpProxy,
    shared_keyspace, store_for,
};
use adevents::domain::bucket::BucketCount;
use adevents::domain::campaign::CampaignSettings;
use adevents::domain::partition::EventPartition;
use adevents::domain::time::EventTime;
use adevents::http::BodyLimits;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::io::Write;
use std::sync::Arc;
use uuid::Uuid;

async fn resending_a_batch_changes_no_count(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let ad = Uuid::new_v4();
    let batch: Vec<Value> = (0..50)
        .map(|i| {
            campaign.impression(
                Uuid::new_v4(),
                ad,
                at("2026-10-05T10:00:00Z") + chrono::Duration::minutes(i),
            )
        })
        .collect();

    post_all(&server, "/v1/impressions", &batch, 50).await;
    post_all(&server, "/v1/impressions", &batch, 50).await;
    // A retry of half the batch inside a new batch, and the whole batch as NDJSON.
    post_all(&server, "/v1/impressions", &batch[..25], 25).await;

    let body = summary(&server, &campaign, "from=2026-10-05&to=2026-10-05").await;
    assert_eq!(body["totals"]["impressions"], 50, "{body}");
}

async fn a_batch_with_one_bad_item_stores_none_of_its_items_and_names_the_problem(
    backend: Backend,
) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let ad = Uuid::new_v4();
    let mut batch: Vec<Value> = (0..10)
        .map(|_| campaign.impression(Uuid::new_v4(), ad, at("2026-10-06T10:00:00Z")))
        .collect();
    batch[7]["campaign_id"] = json!("not-a-uuid");
    batch[3]["timestamp"] = json!("2099-01-01T00:00:00Z");

    let (status, body) = post(&server, "/v1/impressions", &Value::Array(batch)).await;

    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "invalid_request");
    let errors = body["error"]["errors"].as_array().expect("errors listed");
    let listed: Vec<(u64, &str)> = errors
        .iter()
        .map(|e| {
            (
                e["index"].as_u64().unwrap_or(99),
                e["field"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(listed, [(3, "timestamp"), (7, "campaign_id")]);
    assert!(
        errors[0]["message"]
            .as_str()
            .unwrap_or("")
            .contains("future"),
        "{body}"
    );
    let body = summary(&server, &campaign, "from=2026-10-06&to=2026-10-06").await;
    assert_eq!(body["totals"]["impressions"], 0, "nothing stored: {body}");
}

async fn missing_fields_unknown_fields_and_duplicate_ids_are_judged_per_item(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let id = Uuid::new_v4();
    let mut valid = campaign.impression(id, Uuid::new_v4(), at("2026-10-06T10:00:00Z"));
    valid["some_future_field"] = json!({"ignored": true});
    let mut missing =
        campaign.impression(Uuid::new_v4(), Uuid::new_v4(), at("2026-10-06T10:00:00Z"));
    missing.as_object_mut().expect("object").remove("user_id");
    let mut conflicting = valid.clone();
    conflicting["timestamp"] = json!("2026-10-06T11:00:00Z");

    let (status, body) = post(
        &server,
        "/v1/impressions",
        &json!([valid, missing, conflicting]),
    )
    .await;

    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let errors = &body["error"]["errors"];
    assert_eq!(errors[0]["index"], 1);
    assert_eq!(errors[0]["field"], "user_id");
    assert_eq!(errors[0]["message"], "is required");
    assert_eq!(errors[1]["index"], 2);
    assert_eq!(errors[1]["field"], "impression_id");
}

async fn control_characters_in_user_data_are_refused_naming_the_field(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let with_data = |user_data: Value| {
        let mut impression =
            campaign.impression(Uuid::new_v4(), Uuid::new_v4(), at("2026-10-06T10:00:00Z"));
        impression["user_data"] = user_data;
        impression
    };
    let batch = [
        with_data(json!({"country": "FR\u{0}"})),
        with_data(json!({"coun\u{0}try": "FR"})),
        with_data(json!({"country": "\u{1b}[31mFR"})),
        with_data(json!({"country": "Côte d’Ivoire"})),
    ];

    let (status, body) = post(&server, "/v1/impressions", &json!(batch)).await;

    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let errors = body["error"]["errors"].as_array().expect("errors");
    let named: Vec<(u64, &str)> = errors
        .iter()
        .map(|error| {
            (
                error["index"].as_u64().unwrap_or(99),
                error["field"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        named,
        [(0, "user_data"), (1, "user_data"), (2, "user_data")],
        "{body}"
    );
    assert_eq!(
        summary(&server, &campaign, "from=2026-10-06&to=2026-10-06").await["totals"]["impressions"],
        0
    );
}

async fn ids_are_taken_hyphenated_or_as_32_hex_digits_and_never_nil(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let impression = |id: &str| {
        let mut impression = campaign.impression(
            Uuid::new_v4(),
            Uuid::new_v4(),
            chrono::Utc::now() - chrono::Duration::minutes(1),
        );
        impression["impression_id"] = json!(id);
        impression
    };
    let id = Uuid::new_v4();
    let refused = [
        format!("urn:uuid:{id}"),
        format!("{{{id}}}"),
        Uuid::nil().to_string(),
        Uuid::nil().simple().to_string(),
    ];

    let (status, body) = post(
        &server,
        "/v1/impressions",
        &json!(refused.iter().map(|id| impression(id)).collect::<Vec<_>>()),
    )
    .await;
    let (plain_status, plain_body) = post(
        &server,
        "/v1/impressions",
        &impression(&id.simple().to_string().to_uppercase()),
    )
    .await;

    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let errors = body["error"]["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), refused.len(), "{body}");
    for (index, error) in errors.iter().enumerate() {
        assert_eq!(error["index"], index, "{body}");
        assert_eq!(error["field"], "impression_id", "{body}");
    }
    assert!(
        errors[2]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("nil"),
        "{body}"
    );
    assert_eq!(plain_status, StatusCode::OK, "{plain_body}");
    let (_, recent) = get(
        &server,
        &format!("{}/impressions/recent", campaign.path()),
        "",
    )
    .await;
    assert_eq!(recent["impressions"][0]["impression_id"], id.to_string());

    for (path, field) in [
        (
            format!("/v1/advertisers/urn:uuid:{}/campaigns/{}/summary", id, id),
            "advertiser_id",
        ),
        (
            format!("/v1/advertisers/{id}/campaigns/{}/summary", Uuid::nil()),
            "campaign_id",
        ),
        (
            format!("/v1/advertisers/{{{id}}}/campaigns"),
            "advertiser_id",
        ),
    ] {
        let (status, body) = get(&server, &path, "from=2026-10-06&to=2026-10-06").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert_eq!(body["error"]["errors"][0]["field"], field, "{path}: {body}");
    }
}

async fn gzip_and_ndjson_bodies_are_accepted(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let ad = Uuid::new_v4();
    let events: Vec<Value> = (0..30)
        .map(|_| campaign.impression(Uuid::new_v4(), ad, at("2026-10-07T08:00:00Z")))
        .collect();
    let ndjson: String = events[..10]
        .iter()
        .map(|event| format!("{event}\n"))
        .collect();
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder
        .write_all(Value::Array(events[10..20].to_vec()).to_string().as_bytes())
        .expect("gzip");
    let gzipped_json = encoder.finish().expect("gzip");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let ndjson_tail: String = events[20..]
        .iter()
        .map(|event| format!("{event}\n"))
        .collect();
    encoder.write_all(ndjson_tail.as_bytes()).expect("gzip");
    let gzipped_ndjson = encoder.finish().expect("gzip");
    let client = http();
    let url = server.url("/v1/impressions");

    let plain_ndjson = client
        .post(&url)
        .header("content-type", "application/x-ndjson")
        .body(ndjson)
        .send()
        .await
        .expect("answered");
    let gzip_json = client
        .post(&url)
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(gzipped_json)
        .send()
        .await
        .expect("answered");
    let gzip_ndjson = client
        .post(&url)
        .header("content-type", "application/x-ndjson")
        .header("content-encoding", "gzip")
        .body(gzipped_ndjson)
        .send()
        .await
        .expect("answered");
    let untyped = client
        .post(&url)
        .body(events[0].to_string())
        .send()
        .await
        .expect("answered");

    for response in [plain_ndjson, gzip_json, gzip_ndjson, untyped] {
        assert_eq!(response.status(), StatusCode::OK);
        let accepted = response.json::<Value>().await.expect("JSON")["accepted"].clone();
        assert!(accepted == 10 || accepted == 1, "{accepted}");
    }
    let body = summary(&server, &campaign, "from=2026-10-07&to=2026-10-07").await;
    assert_eq!(body["totals"]["impressions"], 30, "{body}");
}

async fn bodies_over_the_limits_are_413_and_other_media_types_415(backend: Backend) {
    let mut options = crate::common::test_options();
    options.edge.body_limits = BodyLimits {
        max_bytes: 64 * 1024,
        max_events: 20,
    };
    let server = backend.server_with(options).await;
    let campaign = Campaign::fresh();
    let events = |n: usize| {
        Value::Array(
            (0..n)
                .map(|_| {
                    campaign.impression(Uuid::new_v4(), Uuid::new_v4(), at("2026-10-08T08:00:00Z"))
                })
                .collect(),
        )
    };
    let client = http();
    let url = server.url("/v1/impressions");

    let (too_many, too_many_body) = post(&server, "/v1/impressions", &events(21)).await;
    let mut padded = events(1);
    padded[0]["padding"] = json!("x".repeat(70 * 1024));
    let (too_big, _) = post(&server, "/v1/impressions", &padded).await;
    // A small gzip body that inflates past the limit is judged by its decoded size.
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder
        .write_all(padded.to_string().as_bytes())
        .expect("gzip");
    let bomb = client
        .post(&url)
        .header("content-encoding", "gzip")
        .body(encoder.finish().expect("gzip"))
        .send()
        .await
        .expect("answered");
    let csv = client
        .post(&url)
        .header("content-type", "text/csv")
        .body("a,b\n")
        .send()
        .await
        .expect("answered");
    let brotli = client
        .post(&url)
        .header("content-encoding", "br")
        .body("x")
        .send()
        .await
        .expect("answered");

    assert_eq!(too_many, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(too_many_body["error"]["code"], "payload_too_large");
    assert_eq!(too_big, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(bomb.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(csv.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(
        csv.json::<Value>().await.expect("JSON")["error"]["code"],
        "unsupported_media_type"
    );
    assert_eq!(brotli.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let body = summary(&server, &campaign, "from=2026-10-08&to=2026-10-08").await;
    assert_eq!(body["totals"]["impressions"], 0, "{body}");
}

async fn malformed_json_is_a_400_in_the_error_shape(backend: Backend) {
    let server = backend.server().await;

    let response = http()
        .post(server.url("/v1/clicks"))
        .header("content-type", "application/json")
        .body("[{\"impression_id\": ")
        .send()
        .await
        .expect("answered");

    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(body["error"]["code"], "invalid_request");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("JSON"),
        "{body}"
    );
}

async fn a_four_bucket_campaign_spreads_each_day_over_four_partitions(backend: Backend) {
    let store = backend.store().await;
    let campaign = Campaign::fresh();
    let four = CampaignSettings {
        buckets: BucketCount::new(4).expect("valid"),
        effective_from: EventTime::earliest(),
        daily_cap: None,
        total_cap: None,
        tz: chrono_tz::Tz::UTC,
        look_backs: adevents::domain::conversion::attribution::LookBacks::DEFAULT,
    };
    store
        .put_settings(
            &adevents::domain::owner::Owner::Campaign(campaign.key()),
            &four,
        )
        .await
        .expect("arranged");
    let server = backend.server().await;
    let ad = Uuid::new_v4();
    let events: Vec<Value> = (0..200)
        .map(|i| {
            campaign.impression(
                Uuid::new_v4(),
                ad,
                at("2026-10-09T00:00:00Z") + chrono::Duration::minutes(i),
            )
        })
        .collect();

    post_all(&server, "/v1/impressions", &events, 100).await;

    let day = EventTime::from_stored(at("2026-10-09T00:00:00Z")).utc_day();
    let mut per_bucket = Vec::new();
    for bucket in four.buckets.ids() {
        let partition = EventPartition {
            campaign: campaign.key(),
            day,
            bucket,
        };
        per_bucket.push(
            store
                .read_impression_summaries(&partition)
                .await
                .expect("read")
                .len(),
        );
    }
    assert_eq!(per_bucket.iter().sum::<usize>(), 200);
    assert!(per_bucket.iter().all(|&n| n > 20), "{per_bucket:?}");
}

#[tokio::test]
async fn a_store_outage_answers_503_with_retry_after() {
    migrated_store().await;
    let proxy = TcpProxy::start(first_node_address()).await;
    let mut through_proxy = config(shared_keyspace());
    through_proxy.nodes = vec![proxy.address.to_string()];
    through_proxy.request_timeout = std::time::Duration::from_secs(2);
    let store = store_for(through_proxy, false).await;
    store
        .prepare()
        .await
        .expect("prepared while the node is reachable");
    let server = TestServer::start(Arc::new(store)).await;
    let campaign = Campaign::fresh();
    let event = campaign.impression(Uuid::new_v4(), Uuid::new_v4(), at("2026-10-10T08:00:00Z"));

    proxy.cut();
    let (status, body) = post(&server, "/v1/impressions", &event).await;
    let (query_status, _) = get(
        &server,
        &format!("{}/summary", campaign.path()),
        "from=2026-10-10&to=2026-10-10",
    )
    .await;

    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "storage_unavailable");
    assert_eq!(query_status, StatusCode::SERVICE_UNAVAILABLE);
    let response = http()
        .post(server.url("/v1/impressions"))
        .json(&event)
        .send()
        .await
        .expect("answered");
    assert!(response.headers().contains_key("retry-after"));
}

conformance!(
    resending_a_batch_changes_no_count,
    a_batch_with_one_bad_item_stores_none_of_its_items_and_names_the_problem,
    missing_fields_unknown_fields_and_duplicate_ids_are_judged_per_item,
    control_characters_in_user_data_are_refused_naming_the_field,
    ids_are_taken_hyphenated_or_as_32_hex_digits_and_never_nil,
    gzip_and_ndjson_bodies_are_accepted,
    bodies_over_the_limits_are_413_and_other_media_types_415,
    malformed_json_is_a_400_in_the_error_shape,
    a_four_bucket_campaign_spreads_each_day_over_four_partitions,
);
