//! Retention (`--retain-raw`): events of a UTC day that began longer ago are refused whole,
//! naming their `timestamp`; the sweep deletes the raw events of such days on both stores and
//! keeps their rollups, so summaries and uniques of sealed days still answer; on Cassandra
//! every row is written with a TTL counted from its own day.

use crate::common::beacons::{fresh_site, register_site, uniques};
use crate::common::events::{Campaign, export_records, get, post, post_all, summary};
use crate::common::{Backend, PrivateStore, TestServer, eventually, http, test_options};
use adevents::app::{App, Options};
use adevents::domain::beacon::SiteId;
use adevents::domain::conversion::ConversionId;
use adevents::domain::ids::AdvertiserId;
use adevents::domain::owner::Owner;
use adevents::domain::retention::Retention;
use adevents::domain::time::Day;
use adevents::sealer::{Sealer, SealerOptions};
use adevents::settings::SettingsCache;
use adevents::store::Store;
use chrono::{DateTime, Duration, DurationRound, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

conformance!(
    events_of_days_past_retention_are_refused_naming_timestamp_and_nothing_is_stored,
    the_sweep_deletes_expired_raw_days_and_sealed_days_still_answer,
    the_sweep_deletes_expired_conversions_with_their_copies_and_decisions,
    rollups_past_retain_aggregates_go_and_lifetime_delivery_stays,
);

mod cassandra_only {
    #[tokio::test]
    async fn rows_expire_with_their_day_not_with_their_write() {
        super::rows_expire_with_their_day_not_with_their_write().await
    }
}

fn options_keeping(retention: &str) -> Options {
    let mut options = test_options();
    options.service.retention.raw = Retention::parse(retention).expect("a retention");
    options
}

/// Midnight UTC `days` days before today's.
fn days_ago(days: i64) -> DateTime<Utc> {
    Utc::now().duration_trunc(Duration::days(1)).expect("a day") - Duration::days(days)
}

fn day_of(at: DateTime<Utc>) -> Day {
    Day::new(at.date_naive())
}

/// The field errors of a 400, as (index, field).
fn named(body: &Value) -> Vec<(Option<u64>, String)> {
    body["error"]["errors"]
        .as_array()
        .map(|errors| {
            errors
                .iter()
                .map(|error| {
                    (
                        error["index"].as_u64(),
                        error["field"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn events_of_days_past_retention_are_refused_naming_timestamp_and_nothing_is_stored(
    backend: Backend,
) {
    let server = backend.server_with(options_keeping("30days")).await;
    let campaign = Campaign::fresh();
    let ad = Uuid::new_v4();
    // 31 days and one hour ago: its day began more than 30 days ago, whatever the hour now.
    let expired = Utc::now() - Duration::days(31) - Duration::hours(1);
    let recent = Utc::now() - Duration::minutes(1);
    let (expired_id, recent_id) = (Uuid::new_v4(), Uuid::new_v4());
    let (status, body) = post(
        &server,
        "/v1/impressions",
        &json!([
            campaign.impression(recent_id, ad, recent),
            campaign.impression(expired_id, ad, expired),
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(named(&body), [(Some(1), "timestamp".to_owned())], "{body}");
    assert!(
        body["error"]["errors"][0]["message"]
            .as_str()
            .is_some_and(|message| message.contains("--retain-raw")),
        "{body}"
    );
    // Refused whole: not even the recent impression was stored.
    let today = recent.date_naive();
    let records = export_records(
        &server,
        &campaign,
        &format!("from={}&to={today}", today - chrono::Days::new(1)),
    )
    .await;
    assert!(records.is_empty(), "{records:?}");

    let (status, body) = post(
        &server,
        "/v1/clicks",
        &json!([campaign.click(expired_id, ad, expired)]),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(named(&body), [(Some(0), "timestamp".to_owned())], "{body}");

    let (status, body) = post(
        &server,
        "/v1/conversions",
        &json!({
            "conversion_id": Uuid::new_v4().to_string(),
            "advertiser_id": campaign.advertiser_id,
            "action": "purchase",
            "timestamp": expired.to_rfc3339(),
            "user_id": Uuid::new_v4(),
        }),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        named(&body)
            .into_iter()
            .map(|(_, field)| field)
            .collect::<Vec<_>>(),
        ["timestamp"],
        "{body}"
    );

    let base = server.url("");
    let site = fresh_site();
    register_site(&base, &site).await;
    let response = track(&server, &site, "a-visitor", expired).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(
        named(&body)
            .into_iter()
            .map(|(_, field)| field)
            .collect::<Vec<_>>(),
        ["timestamp"],
        "{body}"
    );
    let day = expired.date_naive();
    let answer = uniques(
        &base,
        &site,
        &[
            ("from".to_owned(), day.to_string()),
            ("to".to_owned(), day.to_string()),
        ],
    )
    .await;
    assert_eq!(answer["total"]["visits"], 0, "{answer}");
}

fn sealer(store: &Arc<dyn Store>) -> Sealer {
    let settings = SettingsCache::new(store.clone(), std::time::Duration::from_secs(10));
    Sealer::new(
        store.clone(),
        Arc::new(settings),
        SealerOptions::default(),
        Default::default(),
    )
}

/// Seals `campaign_days` of the campaign and `site_day` of the site once the marks their events
/// just left on these closed days are past: a seal counts as current once its read started
/// past the latest mark and the clock margin.
async fn seal_past_marks(
    store: &Arc<dyn Store>,
    campaign: &Campaign,
    campaign_days: &[Day],
    site: &SiteId,
    site_day: Day,
) {
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let sealer = sealer(store);
    for day in campaign_days {
        sealer
            .seal_campaign_day(campaign.key(), *day)
            .await
            .expect("sealed");
    }
    sealer.seal_site_day(site, site_day).await.expect("sealed");
}

async fn the_sweep_deletes_expired_raw_days_and_sealed_days_still_answer(backend: Backend) {
    let store = backend.store().await;
    // Stored while everything is kept (before the operator set a retention).
    let server = TestServer::start(Arc::clone(&store)).await;
    let campaign = Campaign::fresh();
    let ad = Uuid::new_v4();
    let (old, kept) = (days_ago(10), days_ago(2));
    let mut impressions = Vec::new();
    let mut clicks = Vec::new();
    for i in 0..20 {
        let id = Uuid::new_v4();
        let when = old + Duration::hours(9) + Duration::minutes(i * 7);
        impressions.push(campaign.impression(id, ad, when));
        if i % 5 == 0 {
            clicks.push(campaign.click(id, ad, when + Duration::minutes(1)));
        }
    }
    let kept_id = Uuid::new_v4();
    impressions.push(campaign.impression(kept_id, ad, kept + Duration::hours(3)));
    post_all(&server, "/v1/impressions", &impressions, 100).await;
    post_all(&server, "/v1/clicks", &clicks, 100).await;
    let site = fresh_site();
    let base = server.url("");
    register_site(&base, &site).await;
    let visits: Vec<DateTime<Utc>> = (0..5)
        .map(|n| old + Duration::hours(10) + Duration::minutes(n))
        .collect();
    beacons(&server, &site, &visits).await;
    let old_day = old.date_naive();
    let day_query = format!("from={old_day}&to={old_day}");
    let raw = summary(&server, &campaign, &day_query).await;
    assert_eq!(raw["totals"]["impressions"], 20, "{raw}");
    let site_id = SiteId::parse(&site).expect("a site");
    seal_past_marks(&store, &campaign, &[day_of(old)], &site_id, day_of(old)).await;
    let uniques_query = [
        ("from".to_owned(), old_day.to_string()),
        ("to".to_owned(), old_day.to_string()),
    ];
    let sealed_uniques = uniques(&base, &site, &uniques_query).await;
    assert_eq!(sealed_uniques["total"]["visits"], 5, "{sealed_uniques}");

    let before = export_records(&server, &campaign, &day_query).await;
    assert_eq!(
        before.len(),
        20,
        "the raw events are there before the sweep"
    );
    // The operator now keeps raw events 5 days: the old day is past it, the other is not.
    let app = App::new(Arc::clone(&store), options_keeping("5days"));
    let now = Utc::now();
    let swept = app
        .sweeper()
        .sweep_owner(&Owner::Campaign(campaign.key()), day_of(old), now)
        .await
        .expect("swept");
    assert!(swept.ranges > 0, "{swept:?}");
    app.sweeper()
        .sweep_owner(&Owner::Site(site_id), day_of(old), now)
        .await
        .expect("swept");

    let old_records = export_records(&server, &campaign, &day_query).await;
    assert!(old_records.is_empty(), "raw events left: {old_records:?}");
    let kept_day = kept.date_naive();
    let kept_records = export_records(
        &server,
        &campaign,
        &format!("from={kept_day}&to={kept_day}"),
    )
    .await;
    assert_eq!(kept_records.len(), 1, "{kept_records:?}");
    assert!(kept_records.contains_key(&kept_id.to_string()));
    let sealed = summary(&server, &campaign, &day_query).await;
    assert_eq!(sealed["sealed_days"], 1, "{sealed}");
    assert_eq!(sealed["totals"], raw["totals"], "the rollup still answers");
    let after = uniques(&base, &site, &uniques_query).await;
    assert_eq!(after["total"], sealed_uniques["total"], "{after}");
}

/// A beacon of `guid` at `at` to `site`, as its page's script sends it.
async fn track(
    server: &TestServer,
    site: &str,
    guid: &str,
    at: DateTime<Utc>,
) -> reqwest::Response {
    http()
        .post(server.url("/track"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "site={site}&guid={guid}&referrer=r.example&timestamp={}",
            at.timestamp()
        ))
        .send()
        .await
        .expect("answered")
}

/// Posts one beacon of a fresh visitor per instant to `site`.
async fn beacons(server: &TestServer, site: &str, at: &[DateTime<Utc>]) {
    for (n, when) in at.iter().enumerate() {
        let response = track(server, site, &format!("visitor-{n}"), *when).await;
        assert_eq!(response.status(), StatusCode::NO_CONTENT);
    }
}

async fn delivery(server: &TestServer, campaign: &Campaign) -> Value {
    let (status, body) = get(server, &format!("{}/delivery", campaign.path()), "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn rollups_past_retain_aggregates_go_and_lifetime_delivery_stays(backend: Backend) {
    let (old, kept) = (days_ago(10), days_ago(2));
    // Raw events and rollups kept until 40 s from now for the old day: long enough to store
    // and seal it, then it expires (on Cassandra by the rollups' TTL, on the embedded store by
    // the sweep). The day 2 days ago is kept.
    let (private, store) = PrivateStore::open(backend, "rollups", Retention::Forever).await;
    // Counted from here, past the keyspace's creation, which takes a while under load.
    let expires = Utc::now() + Duration::seconds(40);
    let retention = Retention::For(expires - old);
    let store = private.keeping(store, retention, retention).await;
    let mut options = test_options();
    options.service.retention.raw = retention;
    options.service.retention.aggregates = retention;
    let server = TestServer::with_options(Arc::clone(&store), options.clone()).await;
    let campaign = Campaign::fresh();
    let ad = Uuid::new_v4();
    let impressions: Vec<Value> = (0..10)
        .map(|n| old + Duration::hours(9) + Duration::minutes(n * 5))
        .chain((0..3).map(|n| kept + Duration::hours(4) + Duration::minutes(n)))
        .map(|at| campaign.impression(Uuid::new_v4(), ad, at))
        .collect();
    post_all(&server, "/v1/impressions", &impressions, 100).await;
    let site = fresh_site();
    let base = server.url("");
    register_site(&base, &site).await;
    beacons(
        &server,
        &site,
        &[old + Duration::hours(10), old + Duration::hours(11)],
    )
    .await;
    let site_id = SiteId::parse(&site).expect("a site");
    let days = [day_of(old), day_of(kept)];
    seal_past_marks(&store, &campaign, &days, &site_id, day_of(old)).await;
    let (old_day, kept_day) = (old.date_naive(), kept.date_naive());
    let old_query = format!("from={old_day}&to={old_day}");
    let kept_query = format!("from={kept_day}&to={kept_day}");
    let uniques_query = [
        ("from".to_owned(), old_day.to_string()),
        ("to".to_owned(), old_day.to_string()),
    ];
    let sealed_old = summary(&server, &campaign, &old_query).await;
    assert_eq!(sealed_old["totals"]["impressions"], 10, "{sealed_old}");
    let sealed_kept = summary(&server, &campaign, &kept_query).await;
    assert_eq!(sealed_kept["totals"]["impressions"], 3, "{sealed_kept}");
    assert_eq!(sealed_kept["sealed_days"], 1, "{sealed_kept}");
    let sealed_uniques = uniques(&base, &site, &uniques_query).await;
    assert_eq!(sealed_uniques["total"]["visits"], 2, "{sealed_uniques}");
    let features_path = format!("/v1/sites/{site}/features");
    let (_, features) = get(&server, &features_path, &old_query).await;
    assert_eq!(
        features["features"]["referrer"],
        json!([{"value": "r.example", "visits": 2}]),
        "{features}"
    );
    let lifetime = delivery(&server, &campaign).await["lifetime"].clone();
    assert_eq!(lifetime["billable_impressions"], 13, "{lifetime}");

    let wait = (expires - Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(wait + std::time::Duration::from_secs(1)).await;
    // As the periodic sweep does: raw days first (their TTL has already expired them on
    // Cassandra), then rollups.
    let sweeper = App::new(Arc::clone(&store), options.clone()).sweeper();
    let now = Utc::now();
    sweeper.sweep_once(now).await.expect("swept");
    let swept = sweeper.sweep_rollups(now).await.expect("swept");
    match backend {
        // A campaign's slices and reach, a site's visits, reach and feature values: a range
        // each.
        Backend::Embedded => assert_eq!(swept.ranges, 5, "{swept:?}"),
        // The rows expired by their TTL.
        Backend::Cassandra => assert_eq!(swept, Default::default()),
    }

    let expired = summary(&server, &campaign, &old_query).await;
    assert_eq!(expired["totals"]["impressions"], 0, "{expired}");
    assert_eq!(expired["totals"]["unique_users"], 0, "{expired}");
    let expired_uniques = uniques(&base, &site, &uniques_query).await;
    assert_eq!(expired_uniques["total"]["visits"], 0, "{expired_uniques}");
    let (status, features) = get(&server, &features_path, &old_query).await;
    assert_eq!(status, StatusCode::OK, "{features}");
    assert_eq!(
        features,
        json!({"features": {}}),
        "the day's feature values go too"
    );
    let still = summary(&server, &campaign, &kept_query).await;
    assert_eq!(still["sealed_days"], 1, "from its rollup: {still}");
    assert_eq!(
        still["totals"], sealed_kept["totals"],
        "a kept day answers as before"
    );
    // A server started now has no sealed totals in memory: it reads them from the store.
    drop(server);
    let restarted = TestServer::with_options(Arc::clone(&store), options).await;
    let after = delivery(&restarted, &campaign).await["lifetime"].clone();
    assert_eq!(after, lifetime, "lifetime caps never start again");
    drop(restarted);
}

/// What the store keeps of a conversion: its copies as received, and whether it is decided.
async fn kept_of(store: &Arc<dyn Store>, advertiser: Uuid, id: &str) -> (usize, bool) {
    let id = ConversionId::new(id).expect("a conversion id");
    let record = store
        .conversion_record(AdvertiserId::new(advertiser), &id)
        .await
        .expect("read");
    (record.copies().len(), record.decision().is_some())
}

async fn the_sweep_deletes_expired_conversions_with_their_copies_and_decisions(backend: Backend) {
    let store = backend.store().await;
    let mut options = test_options();
    options.service.attribution_delay = std::time::Duration::from_secs(1);
    let server = TestServer::with_options(Arc::clone(&store), options).await;
    let campaign = Campaign::fresh();
    let (old, kept) = (days_ago(10), days_ago(2));
    let (user, impression) = (Uuid::new_v4(), Uuid::new_v4());
    let mut seen = campaign.impression(impression, Uuid::new_v4(), old + Duration::hours(9));
    seen["user_id"] = json!(user);
    let (status, body) = post(&server, "/v1/impressions", &seen).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let advertiser = campaign.advertiser_id;
    let conversion = |id: &str, at: DateTime<Utc>| {
        json!({
            "conversion_id": id,
            "advertiser_id": advertiser,
            "action": "purchase",
            "timestamp": at.to_rfc3339(),
            "user_id": user,
            "value": "12.50",
            "currency": "EUR",
        })
    };
    // The old one twice (an ad server's retry), the kept one once; another advertiser's
    // conversion of the old day, under the same id.
    let other = Campaign::fresh();
    let mut others = conversion("expired-order", old + Duration::hours(11));
    others["advertiser_id"] = json!(other.advertiser_id);
    for body in [
        others,
        conversion("expired-order", old + Duration::hours(11)),
        conversion("expired-order", old + Duration::hours(11)),
        conversion("kept-order", kept + Duration::hours(11)),
    ] {
        let (status, answer) = post(&server, "/v1/conversions", &body).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
    }
    let decided = eventually(std::time::Duration::from_secs(60), || async {
        kept_of(&store, advertiser, "expired-order").await.1
            && kept_of(&store, advertiser, "kept-order").await.1
            && kept_of(&store, other.advertiser_id, "expired-order")
                .await
                .1
    })
    .await;
    assert!(decided, "every conversion decided");
    let (copies, decided) = kept_of(&store, advertiser, "expired-order").await;
    assert!(
        copies >= 1 && decided,
        "{copies} copies stored, decided: {decided}"
    );

    let app = App::new(Arc::clone(&store), options_keeping("5days"));
    app.sweeper()
        .sweep_owner(&Owner::Campaign(campaign.key()), day_of(old), Utc::now())
        .await
        .expect("swept");
    assert_eq!(
        kept_of(&store, advertiser, "expired-order").await,
        (0, false),
        "the expired conversion's copies and decision are gone"
    );
    assert_eq!(kept_of(&store, advertiser, "kept-order").await, (1, true));
    // Another advertiser's conversion of the same expired day is its own sweep's business.
    assert_eq!(
        kept_of(&store, other.advertiser_id, "expired-order").await,
        (1, true)
    );
    let old_day = old.date_naive();
    let (status, listed) = get(
        &server,
        &format!("/v1/advertisers/{advertiser}/conversions"),
        &format!("from={old_day}&to={old_day}&group_by=none"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed["totals"]["conversions"], 0, "{listed}");
}

async fn rows_expire_with_their_day_not_with_their_write() {
    let mut config = crate::common::config(crate::common::shared_keyspace());
    config.retain_raw = Retention::parse("30days").expect("a retention");
    let store: Arc<dyn Store> = Arc::new(crate::common::store_for(config.clone(), true).await);
    let server = TestServer::with_options(store, options_keeping("30days")).await;
    let campaign = Campaign::fresh();
    let (ad, id) = (Uuid::new_v4(), Uuid::new_v4());
    let day = days_ago(10);
    post_all(
        &server,
        "/v1/impressions",
        &[campaign.impression(id, ad, day + Duration::hours(12))],
        1,
    )
    .await;
    post_all(
        &server,
        "/v1/clicks",
        &[campaign.click(id, ad, day + Duration::hours(13))],
        1,
    )
    .await;
    let session = crate::common::raw_session().await;
    // The day expires 30 days after it began, so 20 days from its start plus what is left
    // of today: never the full 30 days a TTL from the write would give.
    let expected = (day + Duration::days(30) - Utc::now()).num_seconds();
    for table in ["impression", "impression_summary", "click"] {
        let rows = session
            .query_unpaged(
                format!(
                    "SELECT TTL(ad_id) FROM {}.{table} WHERE advertiser_id = ? AND campaign_id = ? \
                     AND day = ? AND bucket_id = 0",
                    config.keyspace
                ),
                (
                    campaign.advertiser_id,
                    campaign.campaign_id,
                    day.date_naive(),
                ),
            )
            .await
            .expect("read")
            .into_rows_result()
            .expect("rows");
        let (ttl,): (Option<i32>,) = rows.first_row().expect("one row");
        let ttl = i64::from(ttl.expect("a TTL"));
        assert!(
            (expected - 120..=expected).contains(&ttl),
            "{table}: TTL {ttl} s, expected about {expected} s"
        );
    }
}
