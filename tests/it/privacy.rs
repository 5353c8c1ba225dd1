//! Personal data as an operator serves a data-protection request: a user's events found
//! through the index (never a scan), listed by subject access, erased by a durable job that
//! leaves everyone else's events alone, and the user's re-sent old events dropped after.

use crate::common::beacons::registered_site;
use crate::common::events::{Campaign, export_records, get, post, post_all, summary};
use crate::common::process::{ServerProcess, embedded_server};
use crate::common::tags::{create_secret, fire_pixel, pixel_query, signed};
use crate::common::{
    Backend, PrivateStore, TestServer, eventually, http, metrics_text, raw_session, shared_keyspace,
};
use adevents::domain::beacon::{Beacon, Features, Guid, SiteId};
use adevents::domain::bucket::BucketCount;
use adevents::domain::event::{Click, Impression};
use adevents::domain::ids::{AdId, AdvertiserId, CampaignId, CampaignKey, ImpressionId, UserId};
use adevents::domain::owner::Owner;
use adevents::domain::partition::EventPartition;
use adevents::domain::retention::Retention;
use adevents::domain::time::{Day, EventTime};
use adevents::domain::user_data::UserData;
use adevents::store::Store;
use chrono::{DateTime, Duration, DurationRound, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

conformance!(
    an_erasure_removes_the_users_events_and_leaves_other_users_intact,
    subject_access_lists_every_record_of_the_user_and_only_the_named_advertisers,
    subject_access_right_after_the_acknowledgement_lists_the_event,
    a_scoped_erasure_leaves_the_users_other_advertisers_alone,
    a_resent_old_event_of_an_erased_user_is_dropped_and_a_new_one_is_kept,
    a_click_of_an_erased_impression_is_dropped_whenever_it_comes,
    a_pixel_fired_again_after_the_erasure_is_dropped,
    bad_requests_are_refused_naming_the_field,
    events_stored_before_the_index_are_found_once_indexed,
    a_users_conversions_are_listed_and_erased_with_the_user,
);

mod cassandra_only {
    #[tokio::test]
    async fn two_processes_run_one_erasure_to_the_same_end() {
        super::two_processes_run_one_erasure_to_the_same_end().await
    }

    #[tokio::test]
    async fn lines_kept_where_migration_0018_put_them_still_lead_to_the_user() {
        super::lines_kept_where_migration_0018_put_them_still_lead_to_the_user().await
    }
}

fn impression(campaign: &Campaign, id: Uuid, user: Uuid, t: DateTime<Utc>) -> Value {
    json!({
        "impression_id": id,
        "advertiser_id": campaign.advertiser_id,
        "campaign_id": campaign.campaign_id,
        "ad_id": Uuid::new_v4(),
        "user_id": user,
        "timestamp": t.timestamp_millis(),
    })
}

/// A browser's user agent, which a stored record keeps and subject access gives back.
const BROWSER: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36";

fn click(campaign: &Campaign, impression: &Value, t: DateTime<Utc>) -> Value {
    json!({
        "impression_id": impression["impression_id"],
        "advertiser_id": campaign.advertiser_id,
        "campaign_id": campaign.campaign_id,
        "ad_id": impression["ad_id"],
        "timestamp": t.timestamp_millis(),
    })
}

/// Some minutes ago, to the millisecond: today's events (a few minutes after midnight UTC,
/// yesterday's, which no seal has closed either).
fn minutes_ago(minutes: i64) -> DateTime<Utc> {
    (Utc::now() - Duration::minutes(minutes))
        .duration_trunc(Duration::milliseconds(1))
        .expect("truncates")
}

fn day_range() -> String {
    let today = Utc::now().date_naive();
    format!("from={}&to={}", today - Duration::days(1), today)
}

/// The subject access's NDJSON lines.
pub(crate) async fn access(server: &TestServer, query: &str) -> Vec<Value> {
    let response = http()
        .get(server.url(&format!("/v1/privacy/subjects?{query}")))
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["content-type"],
        "application/x-ndjson",
        "NDJSON"
    );
    let body = response.text().await.expect("a body");
    body.lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

/// The access's lines once `count` are listed (the index is written off the request path).
pub(crate) async fn access_listing(server: &TestServer, query: &str, count: usize) -> Vec<Value> {
    let last = std::sync::Mutex::new(Vec::new());
    let listed = eventually(std::time::Duration::from_secs(30), || async {
        let lines = access(server, query).await;
        let done = lines.len() == count;
        *last.lock().expect("not poisoned") = lines;
        done
    })
    .await;
    let lines = last.into_inner().expect("not poisoned");
    assert!(listed, "{query}: expected {count} records, got {lines:#?}");
    lines
}

/// Requests an erasure and waits for it to be done; returns the done record.
pub(crate) async fn erase(server: &TestServer, body: Value) -> Value {
    let (status, requested) = post(server, "/v1/privacy/erasures", &body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{requested}");
    assert_eq!(requested["status"], "pending", "{requested}");
    let id = requested["id"].as_str().expect("an id").to_owned();
    let last = std::sync::Mutex::new(Value::Null);
    let done = eventually(std::time::Duration::from_secs(90), || async {
        let (status, record) = get(server, &format!("/v1/privacy/erasures/{id}"), "").await;
        assert_eq!(status, StatusCode::OK, "{record}");
        let done = record["status"] == "done";
        *last.lock().expect("not poisoned") = record;
        done
    })
    .await;
    let record = last.into_inner().expect("not poisoned");
    assert!(done, "not done: {record}");
    assert_eq!(record["requested_at"], requested["requested_at"]);
    record
}

pub(crate) fn kinds(lines: &[Value]) -> Vec<String> {
    let mut kinds: Vec<String> = lines
        .iter()
        .map(|line| line["kind"].as_str().unwrap_or_default().to_owned())
        .collect();
    kinds.sort();
    kinds
}

async fn an_erasure_removes_the_users_events_and_leaves_other_users_intact(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let (erased, kept) = (Uuid::new_v4(), Uuid::new_v4());
    let first = impression(&campaign, Uuid::new_v4(), erased, minutes_ago(10));
    let second = impression(&campaign, Uuid::new_v4(), erased, minutes_ago(5));
    let other = impression(&campaign, Uuid::new_v4(), kept, minutes_ago(7));
    let events = [first.clone(), second.clone(), other.clone()];
    post_all(&server, "/v1/impressions", &events, 3).await;
    let clicks = [
        click(&campaign, &first, minutes_ago(9)),
        click(&campaign, &other, minutes_ago(6)),
    ];
    post_all(&server, "/v1/clicks", &clicks, 2).await;
    access_listing(&server, &format!("user_id={erased}"), 3).await;

    let record = erase(&server, json!({"user_id": erased})).await;

    assert_eq!(
        record["erased"],
        json!({"impressions": 2, "clicks": 1, "view_reports": 0, "conversions": 0, "visits": 0}),
        "{record}"
    );
    assert!(record["completed_at"].is_string(), "{record}");
    assert!(
        access(&server, &format!("user_id={erased}"))
            .await
            .is_empty()
    );
    let exported = export_records(&server, &campaign, &day_range()).await;
    let exported: Vec<&String> = exported.keys().collect();
    assert_eq!(
        exported,
        [other["impression_id"].as_str().expect("id")],
        "only the other user's impression is left"
    );
    let totals = &summary(&server, &campaign, &day_range()).await["totals"];
    assert_eq!(totals["impressions"], 1, "{totals}");
    assert_eq!(totals["clicks"], 1, "{totals}");
    assert_eq!(totals["unique_users"], 1, "{totals}");
    let left = access(&server, &format!("user_id={kept}")).await;
    assert_eq!(kinds(&left), ["click", "impression"], "{left:#?}");
    // Run again, the erasure finds nothing more and says so.
    let again = erase(&server, json!({"user_id": erased})).await;
    assert_eq!(again["erased"]["impressions"], 0, "{again}");
}

async fn subject_access_lists_every_record_of_the_user_and_only_the_named_advertisers(
    backend: Backend,
) {
    let server = backend.server().await;
    let (one, two) = (Campaign::fresh(), Campaign::fresh());
    let user = Uuid::new_v4();
    let mut shown = impression(&one, Uuid::new_v4(), user, minutes_ago(8));
    shown["user_ip"] = json!("203.0.113.9");
    shown["user_data"] = json!({"segment": "runners"});
    post_all(&server, "/v1/impressions", std::slice::from_ref(&shown), 1).await;
    let mut clicked = click(&one, &shown, minutes_ago(7));
    clicked["user_agent"] = json!(BROWSER);
    post_all(&server, "/v1/clicks", &[clicked], 1).await;
    let elsewhere = impression(&two, Uuid::new_v4(), user, minutes_ago(6));
    post_all(&server, "/v1/impressions", &[elsewhere], 1).await;
    // Someone else's events never appear.
    let stranger = impression(&one, Uuid::new_v4(), Uuid::new_v4(), minutes_ago(6));
    post_all(&server, "/v1/impressions", &[stranger], 1).await;

    let every = access_listing(&server, &format!("user_id={user}"), 3).await;
    let scoped = access(
        &server,
        &format!("user_id={user}&advertiser_id={}", one.advertiser_id),
    )
    .await;

    assert_eq!(kinds(&every), ["click", "impression", "impression"]);
    assert_eq!(kinds(&scoped), ["click", "impression"], "{scoped:#?}");
    let record = scoped
        .iter()
        .find(|line| line["kind"] == "impression")
        .expect("the impression");
    assert_eq!(record["impression_id"], shown["impression_id"]);
    assert_eq!(record["user_id"], json!(user.to_string()));
    assert_eq!(record["user_data"], json!({"segment": "runners"}));
    let click_line = scoped
        .iter()
        .find(|line| line["kind"] == "click")
        .expect("the click");
    assert_eq!(click_line["user_agent"], json!(BROWSER), "{click_line}");
    assert_eq!(
        record["advertiser_id"],
        json!(one.advertiser_id.to_string())
    );
    assert!(
        scoped
            .iter()
            .all(|line| line["advertiser_id"] == json!(one.advertiser_id.to_string())),
        "{scoped:#?}"
    );
}

async fn subject_access_right_after_the_acknowledgement_lists_the_event(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let user = Uuid::new_v4();
    let shown = impression(&campaign, Uuid::new_v4(), user, minutes_ago(3));
    post_all(&server, "/v1/impressions", std::slice::from_ref(&shown), 1).await;

    // No waiting on the client's side: the index is written beside ingestion, and the
    // access waits for it to hold what was acknowledged before.
    let lines = access(&server, &format!("user_id={user}")).await;

    assert_eq!(kinds(&lines), ["impression"], "{lines:#?}");
    assert_eq!(lines[0]["impression_id"], shown["impression_id"]);
}

async fn a_scoped_erasure_leaves_the_users_other_advertisers_alone(backend: Backend) {
    let server = backend.server().await;
    let (one, two) = (Campaign::fresh(), Campaign::fresh());
    let user = Uuid::new_v4();
    post_all(
        &server,
        "/v1/impressions",
        &[
            impression(&one, Uuid::new_v4(), user, minutes_ago(4)),
            impression(&two, Uuid::new_v4(), user, minutes_ago(3)),
        ],
        2,
    )
    .await;
    access_listing(&server, &format!("user_id={user}"), 2).await;

    let record = erase(
        &server,
        json!({"user_id": user, "advertiser_id": one.advertiser_id}),
    )
    .await;

    assert_eq!(record["erased"]["impressions"], 1, "{record}");
    assert_eq!(
        record["advertiser_id"],
        json!(one.advertiser_id.to_string())
    );
    let left = access(&server, &format!("user_id={user}")).await;
    assert_eq!(left.len(), 1, "{left:#?}");
    assert_eq!(
        left[0]["advertiser_id"],
        json!(two.advertiser_id.to_string())
    );
    assert_eq!(
        summary(&server, &two, &day_range()).await["totals"]["impressions"],
        1
    );
    assert_eq!(
        summary(&server, &one, &day_range()).await["totals"]["impressions"],
        0
    );
}

async fn a_resent_old_event_of_an_erased_user_is_dropped_and_a_new_one_is_kept(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let user = Uuid::new_v4();
    let old = impression(&campaign, Uuid::new_v4(), user, minutes_ago(6));
    post_all(&server, "/v1/impressions", std::slice::from_ref(&old), 1).await;
    access_listing(&server, &format!("user_id={user}"), 1).await;
    erase(&server, json!({"user_id": user})).await;

    // The ad server re-sends its old batch; then the user is served again.
    post_all(&server, "/v1/impressions", std::slice::from_ref(&old), 1).await;
    let new = impression(&campaign, Uuid::new_v4(), user, Utc::now());
    post_all(&server, "/v1/impressions", std::slice::from_ref(&new), 1).await;

    let left = access_listing(&server, &format!("user_id={user}"), 1).await;
    assert_eq!(left[0]["impression_id"], new["impression_id"], "{left:#?}");
    let exported = export_records(&server, &campaign, &day_range()).await;
    assert_eq!(exported.len(), 1);
    assert!(exported.contains_key(new["impression_id"].as_str().expect("id")));
}

/// A signed pixel fired again after its user's erasure (a cached page reloaded, a URL
/// replayed) brings nothing back: ingestion drops it, as it drops a re-sent batch, and counts
/// it with the other dropped events.
async fn a_pixel_fired_again_after_the_erasure_is_dropped(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let secret = create_secret(&server, campaign.advertiser_id).await;
    let unsigned = pixel_query(
        &campaign,
        Uuid::new_v4(),
        Uuid::new_v4(),
        minutes_ago(2).timestamp_millis(),
        &secret,
    );
    let user = unsigned
        .split('&')
        .find_map(|pair| pair.strip_prefix("u="))
        .expect("the pixel names its user")
        .to_owned();
    let pixel = signed(&secret, &unsigned);
    fire_pixel(&server, &pixel, &[]).await;
    access_listing(&server, &format!("user_id={user}"), 1).await;
    erase(&server, json!({"user_id": user})).await;
    let dropped_before = dropped_as_erased(&server).await;

    fire_pixel(&server, &pixel, &[]).await;

    assert!(access(&server, &format!("user_id={user}")).await.is_empty());
    let totals = summary(&server, &campaign, &day_range()).await["totals"].clone();
    assert_eq!(totals["impressions"], 0, "{totals}");
    assert!(dropped_as_erased(&server).await > dropped_before);
}

/// `adevents_erased_events_dropped_total` of every kind together.
async fn dropped_as_erased(server: &TestServer) -> f64 {
    metrics_text(server)
        .await
        .lines()
        .filter(|line| line.starts_with("adevents_erased_events_dropped_total"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A click names only its impression, not the user: once the user's impression is erased, its
/// click re-sent by the ad server, or posted anew, is dropped; so the day's clicks stay as the
/// erasure left them, and no row of it is left that nothing could find.
async fn a_click_of_an_erased_impression_is_dropped_whenever_it_comes(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let (user, other) = (Uuid::new_v4(), Uuid::new_v4());
    let theirs = impression(&campaign, Uuid::new_v4(), user, minutes_ago(6));
    let others = impression(&campaign, Uuid::new_v4(), other, minutes_ago(6));
    let impressions = [theirs.clone(), others.clone()];
    let clicks = [
        click(&campaign, &theirs, minutes_ago(5)),
        click(&campaign, &others, minutes_ago(5)),
    ];
    post_all(&server, "/v1/impressions", &impressions, 2).await;
    post_all(&server, "/v1/clicks", &clicks, 2).await;
    // Clicked again: still one click, the impression's.
    post_all(
        &server,
        "/v1/clicks",
        &[click(&campaign, &theirs, minutes_ago(4))],
        1,
    )
    .await;
    // Found through the index, written off the request path: the impression and both clicks.
    access_listing(&server, &format!("user_id={user}"), 3).await;
    let before = summary(&server, &campaign, &day_range()).await;
    assert_eq!(before["totals"]["clicks"], 2, "{before}");

    let record = erase(&server, json!({"user_id": user})).await;
    // Each identity once: the impression clicked twice erases one click.
    assert_eq!(record["erased"]["clicks"], 1, "{record}");

    // The ad server re-sends both batches; then the erased impression is clicked again.
    post_all(&server, "/v1/impressions", &impressions, 2).await;
    post_all(&server, "/v1/clicks", &clicks, 2).await;
    post_all(
        &server,
        "/v1/clicks",
        &[click(&campaign, &theirs, Utc::now())],
        1,
    )
    .await;
    let after = summary(&server, &campaign, &day_range()).await;
    assert_eq!(after["totals"]["impressions"], 1, "{after}");
    assert_eq!(after["totals"]["clicks"], 1, "{after}");
    assert!(access(&server, &format!("user_id={user}")).await.is_empty());
    let exported = export_records(&server, &campaign, &day_range()).await;
    assert_eq!(exported.len(), 1, "{exported:?}");
    assert_eq!(
        exported[others["impression_id"].as_str().expect("id")]["clicked"],
        true
    );
}

async fn bad_requests_are_refused_naming_the_field(backend: Backend) {
    let server = backend.server().await;
    let refusals = [
        (json!({}), "user_id"),
        (json!({"user_id": "not-a-uuid"}), "user_id"),
        (
            json!({"user_id": Uuid::new_v4(), "advertiser_id": "x"}),
            "advertiser_id",
        ),
        (json!({"user_id": Uuid::new_v4(), "name": "x"}), "name"),
        // Left out means every advertiser; a null is not taken for that.
        (
            json!({"user_id": Uuid::new_v4(), "advertiser_id": null}),
            "advertiser_id",
        ),
        (json!({"user_id": 7}), "user_id"),
        (json!([Uuid::new_v4(), null, null, null]), "body"),
        (json!({"site": "example.com"}), "guid"),
        (json!({"guid": "g"}), "guid"),
    ];
    for (body, field) in refusals {
        let (status, answer) = post(&server, "/v1/privacy/erasures", &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(
            answer["error"]["errors"][0]["field"], field,
            "{body}: {answer}"
        );
    }
    // A repeated field is refused, not read as its last copy.
    let response = http()
        .post(server.url("/v1/privacy/erasures"))
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"user_id": "{}", "advertiser_id": "{}", "advertiser_id": "{}"}}"#,
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4()
        ))
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let (status, answer) = get(&server, "/v1/privacy/subjects", "advertiser_id=x").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let (status, answer) = get(&server, "/v1/privacy/erasures/not-a-uuid", "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let (status, _) = get(
        &server,
        &format!("/v1/privacy/erasures/{}", Uuid::new_v4()),
        "",
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Only administrators: an ingest key of the advertiser may not erase its users.
    let response = crate::common::anonymous_http()
        .post(server.url("/v1/privacy/erasures"))
        .json(&json!({"user_id": Uuid::new_v4()}))
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
}

/// Two server processes on one keyspace both run the pending job (each lists it): the counts
/// are settled once, the rows are gone for both, and each drops the user's re-sent events.
async fn two_processes_run_one_erasure_to_the_same_end() {
    let store = Backend::Cassandra.store().await;
    let one = TestServer::start(std::sync::Arc::clone(&store)).await;
    let two = TestServer::start(store).await;
    let campaign = Campaign::fresh();
    let user = Uuid::new_v4();
    let on_one: Vec<Value> = (0..20)
        .map(|i| {
            impression(
                &campaign,
                Uuid::new_v4(),
                user,
                minutes_ago(20) + Duration::seconds(i),
            )
        })
        .collect();
    let on_two: Vec<Value> = (0..10)
        .map(|i| {
            impression(
                &campaign,
                Uuid::new_v4(),
                user,
                minutes_ago(10) + Duration::seconds(i),
            )
        })
        .collect();
    post_all(&one, "/v1/impressions", &on_one, 20).await;
    post_all(&two, "/v1/impressions", &on_two, 10).await;
    let clicked = [click(&campaign, &on_one[0], minutes_ago(5))];
    post_all(&one, "/v1/clicks", &clicked, 1).await;

    let record = erase(&two, json!({"user_id": user})).await;

    assert_eq!(record["erased"]["impressions"], 30, "{record}");
    let (_, seen_by_one) = get(
        &one,
        &format!(
            "/v1/privacy/erasures/{}",
            record["id"].as_str().expect("id")
        ),
        "",
    )
    .await;
    // Both may have finished the job; `completed_at` is whichever finish was stored last.
    for field in ["id", "status", "requested_at", "erased", "advertiser_id"] {
        assert_eq!(
            seen_by_one[field], record[field],
            "{field}: {seen_by_one} {record}"
        );
    }
    for server in [&one, &two] {
        assert!(access(server, &format!("user_id={user}")).await.is_empty());
        post_all(server, "/v1/impressions", &on_one[..1], 1).await;
        post_all(server, "/v1/clicks", &clicked, 1).await;
        let day = summary(server, &campaign, &day_range()).await;
        assert_eq!(day["totals"]["clicks"], 0, "{day}");
    }
    assert!(
        export_records(&one, &campaign, &day_range())
            .await
            .is_empty()
    );
}

/// The user's subject-directory lines, as (week, bucket, advertiser), from `table`: a scan,
/// which only a test of a small keyspace may afford.
async fn directory_lines(table: &str, user: Uuid) -> Vec<(i32, i16, Uuid)> {
    let query = format!(
        "SELECT week, bucket, advertiser_id FROM {}.{table} WHERE user_id = ? ALLOW FILTERING",
        shared_keyspace()
    );
    raw_session()
        .await
        .query_unpaged(query, (user,))
        .await
        .expect("read the directory")
        .into_rows_result()
        .expect("rows")
        .rows::<(i32, i16, Uuid)>()
        .expect("typed rows")
        .map(|row| row.expect("row"))
        .collect()
}

/// A keyspace migrated before 0022 holds its directory lines in `subject_week`, partitioned
/// by a bucket of the user only. Those lines still lead to the user's events, and an erasure
/// deletes them there.
async fn lines_kept_where_migration_0018_put_them_still_lead_to_the_user() {
    let server = Backend::Cassandra.server().await;
    let campaign = Campaign::fresh();
    let user = Uuid::new_v4();
    // Eight days ago: a week before the request's, whose lines an erasure deletes.
    let old = impression(&campaign, Uuid::new_v4(), user, minutes_ago(8 * 24 * 60));
    post_all(&server, "/v1/impressions", &[old], 1).await;
    access_listing(&server, &format!("user_id={user}"), 1).await;
    let lines = directory_lines("subject_line", user).await;
    assert_eq!(lines.len(), 1, "one line per (advertiser, week): {lines:?}");
    let (week, bucket, advertiser) = lines[0];
    assert_eq!(advertiser, campaign.advertiser_id);
    let session = raw_session().await;
    let keyspace = shared_keyspace();
    session
        .query_unpaged(
            format!(
                "DELETE FROM {keyspace}.subject_line WHERE week = ? AND bucket = ? \
                 AND user_id = ? AND advertiser_id = ?"
            ),
            (week, bucket, user, advertiser),
        )
        .await
        .expect("take the line out");
    session
        .query_unpaged(
            format!(
                "INSERT INTO {keyspace}.subject_week (bucket, user_id, advertiser_id, week) \
                 VALUES (?, ?, ?, ?)"
            ),
            (bucket, user, advertiser, week),
        )
        .await
        .expect("put it where 0018 kept it");

    let listed = access(&server, &format!("user_id={user}")).await;
    assert_eq!(kinds(&listed), ["impression"], "{listed:#?}");
    let record = erase(&server, json!({"user_id": user})).await;

    assert_eq!(record["erased"]["impressions"], 1, "{record}");
    assert!(directory_lines("subject_week", user).await.is_empty());
    assert!(access(&server, &format!("user_id={user}")).await.is_empty());
}

/// Posts JSON to a server process, which must answer `expected`.
async fn post_to(server: &ServerProcess, path: &str, body: &Value, expected: StatusCode) -> Value {
    let response = http()
        .post(server.url(path))
        .json(body)
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), expected, "{path}");
    response.json().await.expect("JSON")
}

#[tokio::test]
async fn an_erasure_cut_off_by_kill_9_is_done_after_a_restart() {
    let folder = tempfile::tempdir().expect("temp dir");
    let data_dir = folder.path().to_str().expect("UTF-8 path");
    let campaign = Campaign::fresh();
    let user = Uuid::new_v4();
    let events: Vec<Value> = (0..200)
        .map(|i| {
            impression(
                &campaign,
                Uuid::new_v4(),
                user,
                minutes_ago(30) + Duration::seconds(i),
            )
        })
        .collect();
    let first = ServerProcess::start(embedded_server(data_dir, &[], &[])).await;
    post_to(&first, "/v1/impressions", &json!(events), StatusCode::OK).await;
    let requested = post_to(
        &first,
        "/v1/privacy/erasures",
        &json!({"user_id": user}),
        StatusCode::ACCEPTED,
    )
    .await;
    first.send_signal("KILL");
    drop(first);

    let second = ServerProcess::start(embedded_server(data_dir, &[], &[])).await;
    let id = requested["id"].as_str().expect("an id");
    let last = std::sync::Mutex::new(Value::Null);
    let done = eventually(std::time::Duration::from_secs(60), || async {
        let response = http()
            .get(second.url(&format!("/v1/privacy/erasures/{id}")))
            .send()
            .await
            .expect("answered");
        let record: Value = response.json().await.expect("JSON");
        let done = record["status"] == "done";
        *last.lock().expect("not poisoned") = record;
        done
    })
    .await;
    let record = last.into_inner().expect("not poisoned");
    assert!(done, "{record}");
    assert_eq!(record["erased"]["impressions"], 200, "{record}");
    let response = http()
        .get(second.url(&format!("/v1/privacy/subjects?user_id={user}")))
        .send()
        .await
        .expect("answered");
    assert_eq!(response.text().await.expect("body"), "");
}

/// What a release before the subject index stored: an impression and its click of `user`,
/// and a beacon of `guid`, written straight into the store with no index entry of any kind.
async fn store_unindexed(
    store: &dyn Store,
    campaign: &Campaign,
    user: Uuid,
    (site, guid): (&str, &str),
    at: DateTime<Utc>,
) {
    let key = CampaignKey {
        advertiser_id: AdvertiserId::new(campaign.advertiser_id),
        campaign_id: CampaignId::new(campaign.campaign_id),
    };
    let day = Day::new(at.date_naive());
    let partition = EventPartition {
        campaign: key,
        day,
        bucket: BucketCount::ONE.ids().next().expect("one bucket"),
    };
    let impression = Impression {
        impression_id: ImpressionId::new(Uuid::new_v4()),
        campaign: key,
        ad_id: AdId::new(Uuid::new_v4()),
        user_id: UserId::new(user),
        timestamp: EventTime::from_stored(at),
        user_ip: None,
        user_data: UserData::default(),
        user_agent: None,
        invalid: None,
        pixel_arrival: None,
        ip_is_viewers: true,
    };
    let click = Click {
        impression_id: impression.impression_id,
        campaign: key,
        ad_id: impression.ad_id,
        timestamp: EventTime::from_stored(at + Duration::seconds(20)),
        user_agent: None,
        invalid: None,
    };
    store
        .write_impressions(&partition, &[impression])
        .await
        .expect("stored");
    store
        .write_clicks(&partition, &[click])
        .await
        .expect("stored");
    store
        .mark_day(&Owner::Campaign(key), day)
        .await
        .expect("day marked");
    let beacon = Beacon {
        site: SiteId::parse(site).expect("a site"),
        guid: Guid::parse(guid).expect("a guid"),
        timestamp: EventTime::from_stored(at),
        features: Features::new([("page".to_owned(), "/a".to_owned())].into()).expect("features"),
        user_agent: None,
        invalid: None,
    };
    store
        .write_visits(
            &beacon.partition(BucketCount::ONE),
            std::slice::from_ref(&beacon),
            &[],
        )
        .await
        .expect("stored");
    store
        .mark_day(&Owner::Site(beacon.site), day)
        .await
        .expect("day marked");
}

async fn events_stored_before_the_index_are_found_once_indexed(backend: Backend) {
    // The command reads every campaign and site of each day: a store of this test's own.
    let (_private, store) = PrivateStore::open(backend, "backfill", Retention::Forever).await;
    let server = TestServer::start(Arc::clone(&store)).await;
    let campaign = Campaign::fresh();
    let site = registered_site(&server.url("")).await;
    let (user, guid) = (Uuid::new_v4(), Uuid::new_v4().to_string());
    let at = minutes_ago(10);
    store_unindexed(store.as_ref(), &campaign, user, (&site, &guid), at).await;
    let visitor =
        serde_urlencoded::to_string([("site", site.as_str()), ("guid", &guid)]).expect("encodes");
    assert!(access(&server, &format!("user_id={user}")).await.is_empty());
    assert!(access(&server, &visitor).await.is_empty());

    let day = Day::new(at.date_naive());
    let mut lines = Vec::new();
    let mut say = |line: &str| lines.push(line.to_owned());
    adevents::commands::index_stored_events(Arc::clone(&store), day, day, &mut say)
        .await
        .expect("indexed");

    assert_eq!(
        lines,
        [
            format!(
                "{day}: 2 events of 1 campaigns, 1 visitors of 1 sites indexed (to resume, --from {day})"
            ),
            format!("done: every event stored from {day} to {day} is indexed"),
        ]
    );
    let listed = access_listing(&server, &format!("user_id={user}"), 2).await;
    assert_eq!(kinds(&listed), ["click", "impression"], "{listed:#?}");
    let visits = access_listing(&server, &visitor, 1).await;
    assert_eq!(kinds(&visits), ["visit"], "{visits:#?}");
    let record = erase(&server, json!({"user_id": user})).await;
    assert_eq!(record["erased"]["impressions"], 1, "{record}");
    assert_eq!(record["erased"]["clicks"], 1, "{record}");
    // Run again, the command finds the same events and writes the same entries.
    let mut again = Vec::new();
    let mut say = |line: &str| again.push(line.to_owned());
    adevents::commands::index_stored_events(Arc::clone(&store), day, day, &mut say)
        .await
        .expect("indexed again");
    assert!(access(&server, &format!("user_id={user}")).await.is_empty());
    drop(server);
}

async fn a_users_conversions_are_listed_and_erased_with_the_user(backend: Backend) {
    let mut options = crate::common::test_options();
    options.service.attribution_delay = std::time::Duration::from_secs(1);
    let server = backend.server_with(options).await;
    let campaign = Campaign::fresh();
    let (erased, kept) = (Uuid::new_v4(), Uuid::new_v4());
    let shown = impression(&campaign, Uuid::new_v4(), erased, minutes_ago(20));
    let other = impression(&campaign, Uuid::new_v4(), kept, minutes_ago(20));
    post_all(
        &server,
        "/v1/impressions",
        &[shown.clone(), other.clone()],
        2,
    )
    .await;
    post_all(
        &server,
        "/v1/clicks",
        &[click(&campaign, &shown, minutes_ago(19))],
        1,
    )
    .await;
    let conversion = |id: &str, user: Uuid, value: &str| {
        json!({
            "conversion_id": id,
            "advertiser_id": campaign.advertiser_id,
            "action": "purchase",
            "timestamp": minutes_ago(10).to_rfc3339(),
            "user_id": user,
            "value": value,
            "currency": "EUR",
        })
    };
    let (order, other_order) = (
        format!("o-{}", Uuid::new_v4()),
        format!("o-{}", Uuid::new_v4()),
    );
    post_all(
        &server,
        "/v1/conversions",
        &[
            conversion(&order, erased, "10.50"),
            conversion(&other_order, kept, "7.00"),
        ],
        2,
    )
    .await;
    let query = format!("user_id={erased}");
    let decided = eventually(std::time::Duration::from_secs(60), || async {
        access(&server, &query)
            .await
            .iter()
            .any(|line| line["kind"] == "conversion" && line["attribution"] == "post_click")
    })
    .await;
    assert!(decided, "{:#?}", access(&server, &query).await);
    let lines = access(&server, &query).await;
    assert_eq!(
        kinds(&lines),
        ["click", "conversion", "impression"],
        "{lines:#?}"
    );
    let listed = lines
        .iter()
        .find(|line| line["kind"] == "conversion")
        .expect("the conversion");
    assert_eq!(listed["conversion_id"], order.as_str(), "{listed}");
    assert_eq!(listed["advertiser_id"], campaign.advertiser_id.to_string());
    assert_eq!(listed["value"], "10.50", "{listed}");
    assert_eq!(listed["currency"], "EUR", "{listed}");
    assert_eq!(listed["campaign_id"], campaign.campaign_id.to_string());
    assert_eq!(listed["credited_impression_id"], shown["impression_id"]);
    let counted = eventually(std::time::Duration::from_secs(60), || async {
        summary(&server, &campaign, &day_range()).await["totals"]["conversions"] == 2
    })
    .await;
    assert!(counted, "both conversions decided and counted");

    let record = erase(&server, json!({"user_id": erased})).await;

    assert_eq!(record["erased"]["conversions"], 1, "{record}");
    assert_eq!(record["erased"]["impressions"], 1, "{record}");
    assert!(access(&server, &query).await.is_empty());
    let totals = &summary(&server, &campaign, &day_range()).await["totals"];
    assert_eq!(totals["conversions"], 1, "the other user's stays: {totals}");
    assert_eq!(
        totals["conversion_value"],
        json!({"EUR": "7.00"}),
        "{totals}"
    );
    // The same order re-sent by the advertiser's back end: an old event of an erased user.
    let (status, _) = post(
        &server,
        "/v1/conversions",
        &conversion(&order, erased, "10.50"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert!(
        access(&server, &query).await.is_empty(),
        "dropped, not stored"
    );
    let left = access(&server, &format!("user_id={kept}")).await;
    assert_eq!(kinds(&left), ["conversion", "impression"], "{left:#?}");
}
