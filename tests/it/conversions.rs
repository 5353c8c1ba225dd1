//! Conversions (`POST /v1/conversions`) as an advertiser's back end posts them: stored whole or
//! not at all, one per (advertiser, conversion_id), attributed once after
//! `--attribution-delay` by the contract's order (the named click or impression, else the
//! user's latest click, else latest impression, within each campaign's look-backs), and
//! counted with exact money in summaries, reports by ad and the advertiser's endpoint.

use crate::common::events::{Campaign, get, post, summary};
use crate::common::{Backend, TestServer, eventually, http, test_options};
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
    each_rule_credits_the_click_or_impression_the_contract_names,
    a_click_window_holds_at_its_edge_and_not_a_millisecond_past,
    the_latest_click_wins_across_an_advertisers_campaigns_and_no_other_advertiser_counts,
    a_click_that_arrives_after_its_conversion_within_the_delay_counts,
    a_conversion_sent_again_counts_once_as_first_stored,
    values_keep_each_currencys_minor_unit_and_sum_exactly,
    a_bad_conversion_is_refused_naming_its_field_and_nothing_is_stored,
    look_backs_are_campaign_settings,
    a_conversion_waiting_for_its_decision_survives_a_restart,
    a_sealed_day_keeps_its_conversions_and_a_late_decision_reseals_it,
    closed_slices_count_conversions_as_the_raw_read_does,
    a_decision_reads_a_users_newest_entries_before_the_conversion_and_no_more,
    one_advertisers_flood_of_conversions_does_not_hold_back_anothers,
    due_lists_are_kept_per_advertiser_and_read_from_where_they_were_taken,
    conversions_posted_at_once_with_no_delay_are_each_decided,
);

mod cassandra_only {
    #[tokio::test]
    async fn two_processes_decide_each_conversion_once() {
        super::two_processes_decide_each_conversion_once().await
    }

    #[tokio::test]
    async fn a_conversion_listed_by_an_earlier_release_is_still_decided() {
        super::a_conversion_listed_by_an_earlier_release_is_still_decided().await
    }
}

/// A server that decides conversions `delay` after they arrive.
async fn server(backend: Backend, delay: std::time::Duration) -> (Arc<dyn Store>, TestServer) {
    let store = backend.store().await;
    (Arc::clone(&store), server_on(store, delay).await)
}

async fn server_on(store: Arc<dyn Store>, delay: std::time::Duration) -> TestServer {
    let mut options = test_options();
    options.service.attribution_delay = delay;
    TestServer::with_options(store, options).await
}

const SHORT: std::time::Duration = std::time::Duration::from_secs(1);

fn impression(campaign: &Campaign, id: Uuid, ad: Uuid, user: Uuid, t: DateTime<Utc>) -> Value {
    json!({
        "impression_id": id,
        "advertiser_id": campaign.advertiser_id,
        "campaign_id": campaign.campaign_id,
        "ad_id": ad,
        "user_id": user,
        "timestamp": t.timestamp_millis(),
    })
}

fn click(campaign: &Campaign, id: Uuid, ad: Uuid, t: DateTime<Utc>) -> Value {
    json!({
        "impression_id": id,
        "advertiser_id": campaign.advertiser_id,
        "campaign_id": campaign.campaign_id,
        "ad_id": ad,
        "timestamp": t.timestamp_millis(),
    })
}

fn conversion(advertiser: Uuid, id: &str, t: DateTime<Utc>, names: Value) -> Value {
    let mut body = json!({
        "conversion_id": id,
        "advertiser_id": advertiser,
        "action": "purchase",
        "timestamp": t.to_rfc3339(),
    });
    for (key, value) in names.as_object().expect("an object") {
        body[key] = value.clone();
    }
    body
}

async fn accepted(server: &TestServer, path: &str, body: Value) {
    let (status, answer) = post(server, path, &body).await;
    assert_eq!(status, StatusCode::OK, "{path}: {answer}");
}

/// The advertiser's conversions of the last few days, by `group_by`.
async fn advertiser_conversions(server: &TestServer, advertiser: Uuid, group_by: &str) -> Value {
    let today = Utc::now().date_naive();
    let (status, body) = get(
        server,
        &format!("/v1/advertisers/{advertiser}/conversions"),
        &format!(
            "from={}&to={}&group_by={group_by}",
            today - Duration::days(7),
            today + Duration::days(1)
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

/// Waits until the advertiser's endpoint lists `count` decided conversions.
async fn decided(server: &TestServer, advertiser: Uuid, count: u64) -> Value {
    let last = std::sync::Mutex::new(Value::Null);
    let found = eventually(std::time::Duration::from_secs(60), || async {
        let answer = advertiser_conversions(server, advertiser, "campaign").await;
        let done = answer["totals"]["conversions"] == json!(count);
        *last.lock().expect("not poisoned") = answer;
        done
    })
    .await;
    let last = last.into_inner().expect("not poisoned");
    assert!(found, "{count} conversions decided, found {last}");
    last
}

fn week_summary_query() -> String {
    let today = Utc::now().date_naive();
    format!(
        "from={}&to={}&group_by=ad",
        today - Duration::days(7),
        today + Duration::days(1)
    )
}

async fn each_rule_credits_the_click_or_impression_the_contract_names(backend: Backend) {
    let (_, server) = server(backend, SHORT).await;
    let campaign = Campaign::fresh();
    let now = Utc::now();
    let (ad_clicked, ad_viewed) = (Uuid::new_v4(), Uuid::new_v4());
    let (clicked, viewed, old) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let (clicker, viewer, forgotten) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    accepted(
        &server,
        "/v1/impressions",
        json!([
            impression(
                &campaign,
                clicked,
                ad_clicked,
                clicker,
                now - Duration::hours(2)
            ),
            impression(
                &campaign,
                viewed,
                ad_viewed,
                viewer,
                now - Duration::hours(3)
            ),
            // Past the default one-day view window.
            impression(
                &campaign,
                old,
                ad_viewed,
                forgotten,
                now - Duration::days(3)
            ),
        ]),
    )
    .await;
    accepted(
        &server,
        "/v1/clicks",
        click(&campaign, clicked, ad_clicked, now - Duration::hours(1)),
    )
    .await;
    let a = campaign.advertiser_id;
    let t = now - Duration::minutes(5);
    accepted(
        &server,
        "/v1/conversions",
        json!([
            conversion(a, "by-click-id", t, json!({"click_id": clicked})),
            conversion(a, "by-impression-id", t, json!({"impression_id": viewed})),
            conversion(a, "by-user-click", t, json!({"user_id": clicker})),
            conversion(a, "by-user-view", t, json!({"user_id": viewer})),
            conversion(a, "user-too-long-ago", t, json!({"user_id": forgotten})),
            // An id no impression has: unattributed, and the user is not tried.
            conversion(
                a,
                "unknown-id",
                t,
                json!({"click_id": Uuid::new_v4(), "user_id": clicker})
            ),
        ]),
    )
    .await;
    let by_campaign = decided(&server, a, 6).await;
    assert_eq!(by_campaign["totals"]["attributed"], 4, "{by_campaign}");
    assert_eq!(by_campaign["totals"]["unattributed"], 2);
    let rows = by_campaign["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{by_campaign}");
    assert_eq!(rows[0]["campaign_id"], json!(campaign.campaign_id));
    assert_eq!(
        (
            rows[0]["post_click_conversions"].clone(),
            rows[0]["post_view_conversions"].clone()
        ),
        (json!(2), json!(2))
    );
    assert_eq!(
        rows[1]["campaign_id"],
        Value::Null,
        "the unattributed row comes last"
    );
    assert_eq!(rows[1]["conversions"], 2);

    let summary = summary(&server, &campaign, &week_summary_query()).await;
    let totals = &summary["totals"];
    assert_eq!(totals["conversions"], 4, "{summary}");
    assert_eq!(totals["post_click_conversions"], 2);
    assert_eq!(totals["post_view_conversions"], 2);
    assert_eq!(
        totals["conversion_rate"], 2.0,
        "post-click conversions per click"
    );
    let ad_row = |ad: Uuid| {
        summary["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .find(|row| row["ad_id"] == json!(ad))
            .cloned()
            .expect("the ad's row")
    };
    assert_eq!(ad_row(ad_clicked)["post_click_conversions"], 2);
    assert_eq!(ad_row(ad_viewed)["post_view_conversions"], 2);
    let (status, report) = get(
        &server,
        &format!("{}/report", campaign.path()),
        &format!(
            "{}&dimension=ad_id",
            week_summary_query().replace("&group_by=ad", "")
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    let report_row = report["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|row| row["value"] == json!(ad_viewed.to_string()))
        .cloned()
        .expect("the viewed ad's row");
    assert_eq!(report_row["post_view_conversions"], 2, "{report}");
}

async fn a_click_window_holds_at_its_edge_and_not_a_millisecond_past(backend: Backend) {
    let (_, server) = server(backend, SHORT).await;
    let campaign = Campaign::fresh();
    let (status, body) = http()
        .put(server.url(&campaign.path()))
        .json(&json!({"click_window": "1h", "view_window": "0s"}))
        .send()
        .await
        .map(|response| response.status())
        .map(|status| (status, ()))
        .expect("PUT answered");
    assert_eq!(status, StatusCode::OK, "{body:?}");
    let clicked_at: DateTime<Utc> =
        DateTime::from_timestamp_millis((Utc::now() - Duration::hours(2)).timestamp_millis())
            .expect("a time");
    let (ad, user) = (Uuid::new_v4(), Uuid::new_v4());
    let shown = Uuid::new_v4();
    accepted(
        &server,
        "/v1/impressions",
        impression(
            &campaign,
            shown,
            ad,
            user,
            clicked_at - Duration::seconds(1),
        ),
    )
    .await;
    accepted(
        &server,
        "/v1/clicks",
        click(&campaign, shown, ad, clicked_at),
    )
    .await;
    let a = campaign.advertiser_id;
    let edge = clicked_at + Duration::hours(1);
    let past = edge + Duration::milliseconds(1);
    accepted(
        &server,
        "/v1/conversions",
        json!([
            conversion(a, "at-the-edge", edge, json!({"click_id": shown})),
            conversion(a, "a-millisecond-past", past, json!({"click_id": shown})),
            conversion(a, "user-at-the-edge", edge, json!({"user_id": user})),
            conversion(a, "user-past", past, json!({"user_id": user})),
        ]),
    )
    .await;
    let answer = decided(&server, a, 4).await;
    assert_eq!(answer["totals"]["attributed"], 2, "{answer}");
    let summary = summary(&server, &campaign, &week_summary_query()).await;
    assert_eq!(summary["totals"]["post_click_conversions"], 2, "{summary}");
    assert_eq!(
        summary["totals"]["post_view_conversions"], 0,
        "view_window 0s turns post-view off"
    );
}

async fn the_latest_click_wins_across_an_advertisers_campaigns_and_no_other_advertiser_counts(
    backend: Backend,
) {
    let (_, server) = server(backend, SHORT).await;
    let first = Campaign::fresh();
    let second = Campaign {
        advertiser_id: first.advertiser_id,
        campaign_id: Uuid::new_v4(),
    };
    let stranger = Campaign::fresh();
    let now = Utc::now();
    let user = Uuid::new_v4();
    let (ad, ad2, ad3) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let (on_first, on_second, on_stranger) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let (later, after) = (Uuid::new_v4(), Uuid::new_v4());
    accepted(
        &server,
        "/v1/impressions",
        json!([
            impression(&first, on_first, ad, user, now - Duration::hours(3)),
            impression(&second, on_second, ad2, user, now - Duration::hours(3)),
            impression(
                &stranger,
                on_stranger,
                ad3,
                user,
                now - Duration::minutes(40)
            ),
            // Clicked after the conversion: never counts.
            impression(&first, after, ad, user, now - Duration::minutes(20)),
            // A later impression of the first campaign, never clicked: a click still wins.
            impression(&first, later, ad, user, now - Duration::minutes(30)),
        ]),
    )
    .await;
    accepted(
        &server,
        "/v1/clicks",
        json!([
            click(&first, on_first, ad, now - Duration::hours(2)),
            click(&second, on_second, ad2, now - Duration::hours(1)),
            click(&stranger, on_stranger, ad3, now - Duration::minutes(35)),
            click(&first, after, ad, now - Duration::minutes(5)),
        ]),
    )
    .await;
    let t = now - Duration::minutes(10);
    let a = first.advertiser_id;
    accepted(
        &server,
        "/v1/conversions",
        json!([
            conversion(a, "user-order", t, json!({"user_id": user})),
            // Another advertiser's impression id credits nothing.
            conversion(a, "foreign-click", t, json!({"click_id": on_stranger})),
        ]),
    )
    .await;
    let answer = decided(&server, a, 2).await;
    let rows = answer["rows"].as_array().expect("rows");
    assert_eq!(
        rows[0]["campaign_id"],
        json!(second.campaign_id),
        "{answer}"
    );
    assert_eq!(rows[0]["post_click_conversions"], 1);
    assert_eq!(rows[1]["campaign_id"], Value::Null);
    let first_summary = summary(&server, &first, &week_summary_query()).await;
    assert_eq!(first_summary["totals"]["conversions"], 0, "{first_summary}");
    let stranger_summary = summary(&server, &stranger, &week_summary_query()).await;
    assert_eq!(stranger_summary["totals"]["conversions"], 0);
}

async fn a_click_that_arrives_after_its_conversion_within_the_delay_counts(backend: Backend) {
    // Ten seconds between the click and the delay's end: room for a loaded machine.
    let (_, server) = server(backend, std::time::Duration::from_secs(30)).await;
    let campaign = Campaign::fresh();
    let now = Utc::now();
    let (shown, ad, user) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    accepted(
        &server,
        "/v1/impressions",
        impression(&campaign, shown, ad, user, now - Duration::seconds(30)),
    )
    .await;
    let a = campaign.advertiser_id;
    accepted(
        &server,
        "/v1/conversions",
        json!([
            conversion(a, "landing-first", now, json!({"click_id": shown})),
            conversion(a, "by-user", now, json!({"user_id": user})),
        ]),
    )
    .await;
    // The landing page's postback beat the click redirect's record by 20 seconds.
    tokio::time::sleep(std::time::Duration::from_secs(20)).await;
    accepted(
        &server,
        "/v1/clicks",
        click(&campaign, shown, ad, now - Duration::seconds(2)),
    )
    .await;
    let early = advertiser_conversions(&server, a, "none").await;
    assert_eq!(
        early["totals"]["conversions"], 0,
        "not decided within the delay: {early}"
    );
    let answer = decided(&server, a, 2).await;
    assert_eq!(answer["totals"]["attributed"], 2, "{answer}");
    let summary = summary(&server, &campaign, &week_summary_query()).await;
    assert_eq!(summary["totals"]["post_click_conversions"], 2, "{summary}");
}

async fn a_conversion_sent_again_counts_once_as_first_stored(backend: Backend) {
    let (_, server) = server(backend, SHORT).await;
    let campaign = Campaign::fresh();
    let now = Utc::now();
    let (shown, ad, user) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    accepted(
        &server,
        "/v1/impressions",
        impression(&campaign, shown, ad, user, now - Duration::minutes(30)),
    )
    .await;
    let a = campaign.advertiser_id;
    let first = json!({"impression_id": shown, "value": "10.00", "currency": "EUR"});
    let body = conversion(a, "order-1", now - Duration::minutes(1), first);
    accepted(
        &server,
        "/v1/conversions",
        json!([body.clone(), body.clone()]),
    )
    .await;
    // Sent again with other fields: the first stored stays the conversion.
    let other = json!({"user_id": Uuid::new_v4(), "value": "99.00", "currency": "EUR"});
    accepted(
        &server,
        "/v1/conversions",
        conversion(a, "order-1", now - Duration::minutes(2), other.clone()),
    )
    .await;
    let (status, refused) = post(
        &server,
        "/v1/conversions",
        &json!([body, conversion(a, "order-1", now, other)]),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(
        refused["error"]["errors"][0]["field"], "conversion_id",
        "{refused}"
    );
    let answer = decided(&server, a, 1).await;
    assert_eq!(
        answer["totals"]["conversion_value"],
        json!({"EUR": "10.00"}),
        "{answer}"
    );
    // Decided long since, it stays one conversion whatever is sent again.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let again = advertiser_conversions(&server, a, "none").await;
    assert_eq!(again["totals"]["conversions"], 1, "{again}");
    let summary = summary(&server, &campaign, &week_summary_query()).await;
    assert_eq!(summary["totals"]["post_view_conversions"], 1, "{summary}");
}

async fn values_keep_each_currencys_minor_unit_and_sum_exactly(backend: Backend) {
    let (_, server) = server(backend, SHORT).await;
    let campaign = Campaign::fresh();
    let now = Utc::now();
    let (shown, ad, user) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    accepted(
        &server,
        "/v1/impressions",
        impression(&campaign, shown, ad, user, now - Duration::minutes(30)),
    )
    .await;
    let a = campaign.advertiser_id;
    let t = now - Duration::minutes(1);
    let valued = |id: &str, value: &str, currency: &str| {
        conversion(
            a,
            id,
            t,
            json!({"user_id": user, "value": value, "currency": currency}),
        )
    };
    accepted(
        &server,
        "/v1/conversions",
        json!([
            valued("eur-1", "0.10", "EUR"),
            valued("eur-2", "0.20", "EUR"),
            valued("jpy-1", "300", "JPY"),
            valued("kwd-1", "1.125", "KWD"),
            valued("kwd-2", "0.005", "KWD"),
        ]),
    )
    .await;
    let answer = decided(&server, a, 5).await;
    assert_eq!(
        answer["totals"]["conversion_value"],
        json!({"EUR": "0.30", "JPY": "300", "KWD": "1.130"}),
        "{answer}"
    );
    let summary = summary(&server, &campaign, &week_summary_query()).await;
    assert_eq!(
        summary["totals"]["conversion_value"],
        json!({"EUR": "0.30", "JPY": "300", "KWD": "1.130"}),
        "{summary}"
    );
    let by_action = advertiser_conversions(&server, a, "action").await;
    assert_eq!(by_action["rows"][0]["action"], "purchase", "{by_action}");
    assert_eq!(by_action["rows"][0]["conversions"], 5);
}

async fn a_bad_conversion_is_refused_naming_its_field_and_nothing_is_stored(backend: Backend) {
    let (_, server) = server(backend, SHORT).await;
    let a = Uuid::new_v4();
    let t = Utc::now();
    let user = json!({"user_id": Uuid::new_v4()});
    let with = |extra: Value| {
        let mut body = conversion(a, "order-x", t, user.clone());
        for (key, value) in extra.as_object().expect("an object") {
            if value.is_null() {
                body.as_object_mut().expect("an object").remove(key);
            } else {
                body[key] = value.clone();
            }
        }
        body
    };
    let cases = [
        (with(json!({"value": "1.5", "currency": "JPY"})), "value"),
        (with(json!({"value": "1.001", "currency": "EUR"})), "value"),
        (with(json!({"value": "-1", "currency": "EUR"})), "value"),
        (with(json!({"value": "1e3", "currency": "EUR"})), "value"),
        (
            with(json!({"value": "1000000000000.01", "currency": "EUR"})),
            "value",
        ),
        (with(json!({"value": 12.5, "currency": "EUR"})), "value"),
        (with(json!({"value": "1", "currency": "XAU"})), "currency"),
        (with(json!({"value": "1"})), "currency"),
        (with(json!({"currency": "EUR"})), "currency"),
        (with(json!({"conversion_id": "an order"})), "conversion_id"),
        (
            with(json!({"conversion_id": "x".repeat(65)})),
            "conversion_id",
        ),
        (with(json!({"conversion_id": null})), "conversion_id"),
        (with(json!({"action": "Purchase"})), "action"),
        (with(json!({"timestamp": null})), "timestamp"),
        (with(json!({"user_id": "not-a-uuid"})), "user_id"),
        (with(json!({"user_id": null})), "click_id"),
        (with(json!({"advertiser_id": "42"})), "advertiser_id"),
    ];
    for (body, field) in cases {
        // Each refused in a batch with a valid conversion: nothing of the batch is stored.
        let good = conversion(a, "good-one", t, user.clone());
        let (status, answer) = post(&server, "/v1/conversions", &json!([good, body])).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}: {answer}");
        assert_eq!(answer["error"]["errors"][0]["field"], field, "{answer}");
        assert_eq!(answer["error"]["errors"][0]["index"], 1, "{answer}");
    }
    // Decided conversions would show by now.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let answer = advertiser_conversions(&server, a, "none").await;
    assert_eq!(answer["totals"]["conversions"], 0, "{answer}");
}

async fn look_backs_are_campaign_settings(backend: Backend) {
    let (_, server) = server(backend, SHORT).await;
    let campaign = Campaign::fresh();
    let settings = |body: Value| {
        let url = server.url(&campaign.path());
        async move {
            let response = http().put(url).json(&body).send().await.expect("answered");
            let status = response.status();
            (status, response.json::<Value>().await.expect("JSON"))
        }
    };
    let (status, answer) = settings(json!({"daily_cap": 5})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        (
            answer["click_window"].clone(),
            answer["view_window"].clone()
        ),
        (json!("30d"), json!("1d")),
        "the defaults"
    );
    let (status, answer) = settings(json!({"click_window": "48h", "view_window": "90m"})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["click_window"], "2d", "the largest whole unit");
    assert_eq!(answer["view_window"], "90m");
    assert_eq!(answer["daily_cap"], 5, "other settings stay");
    for (body, field) in [
        (json!({"click_window": "91d"}), "click_window"),
        (json!({"view_window": "31d"}), "view_window"),
        (json!({"click_window": "30"}), "click_window"),
        (json!({"view_window": "1w"}), "view_window"),
    ] {
        let (status, answer) = settings(body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert_eq!(answer["error"]["errors"][0]["field"], field, "{answer}");
    }
    let (status, answer) = get(&server, &campaign.path(), "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["click_window"], "2d", "{answer}");
}

async fn a_conversion_waiting_for_its_decision_survives_a_restart(backend: Backend) {
    let store = backend.store().await;
    let campaign = Campaign::fresh();
    let now = Utc::now();
    let (shown, ad, user) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    {
        let first = server_on(Arc::clone(&store), std::time::Duration::from_secs(4)).await;
        accepted(
            &first,
            "/v1/impressions",
            impression(&campaign, shown, ad, user, now - Duration::minutes(3)),
        )
        .await;
        accepted(
            &first,
            "/v1/clicks",
            click(&campaign, shown, ad, now - Duration::minutes(2)),
        )
        .await;
        let body = conversion(
            campaign.advertiser_id,
            "before-restart",
            now - Duration::minutes(1),
            json!({"user_id": user}),
        );
        accepted(&first, "/v1/conversions", body).await;
        // Gone before the delay has passed, once the events are indexed (a process killed
        // before that leaves them to the start-up repair, tests/it/process.rs).
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    let second = server_on(store, std::time::Duration::from_secs(4)).await;
    let answer = decided(&second, campaign.advertiser_id, 1).await;
    assert_eq!(answer["totals"]["attributed"], 1, "{answer}");
    let summary = summary(&second, &campaign, &week_summary_query()).await;
    assert_eq!(summary["totals"]["post_click_conversions"], 1, "{summary}");
}

async fn two_processes_decide_each_conversion_once() {
    let store = Backend::Cassandra.store().await;
    let first = server_on(Arc::clone(&store), SHORT).await;
    let second = server_on(Arc::clone(&store), SHORT).await;
    let campaign = Campaign::fresh();
    let now = Utc::now();
    let ad = Uuid::new_v4();
    let a = campaign.advertiser_id;
    let mut conversions = Vec::new();
    for n in 0..20 {
        let (shown, user) = (Uuid::new_v4(), Uuid::new_v4());
        // Impressions through one process, clicks through the other.
        accepted(
            &first,
            "/v1/impressions",
            impression(&campaign, shown, ad, user, now - Duration::minutes(10)),
        )
        .await;
        if n % 2 == 0 {
            accepted(
                &second,
                "/v1/clicks",
                click(&campaign, shown, ad, now - Duration::minutes(5)),
            )
            .await;
        }
        conversions.push(conversion(
            a,
            &format!("order-{n}"),
            now - Duration::minutes(1),
            json!({"user_id": user}),
        ));
    }
    // Every conversion sent to both processes at once.
    let body = json!(conversions);
    let (one, two) = tokio::join!(
        post(&first, "/v1/conversions", &body),
        post(&second, "/v1/conversions", &body)
    );
    assert_eq!((one.0, two.0), (StatusCode::OK, StatusCode::OK));
    let answer = decided(&first, a, 20).await;
    assert_eq!(answer["rows"][0]["post_click_conversions"], 10, "{answer}");
    assert_eq!(answer["rows"][0]["post_view_conversions"], 10, "{answer}");
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    for server in [&first, &second] {
        let answer = advertiser_conversions(server, a, "campaign").await;
        assert_eq!(answer["totals"]["conversions"], 20, "{answer}");
        let summary = summary(server, &campaign, &week_summary_query()).await;
        assert_eq!(summary["totals"]["conversions"], 20, "{summary}");
    }
}

/// The conversion measures of a summary row or totals.
fn measures(counts: &Value) -> Value {
    json!([
        counts["conversions"],
        counts["post_click_conversions"],
        counts["post_view_conversions"],
        counts["conversion_rate"],
        counts["conversion_value"],
    ])
}

async fn a_sealed_day_keeps_its_conversions_and_a_late_decision_reseals_it(backend: Backend) {
    let (store, server) = server(backend, SHORT).await;
    let campaign = Campaign::fresh();
    let day_start =
        Utc::now().duration_trunc(Duration::days(1)).expect("a day") - Duration::days(3);
    let day = day_start.date_naive();
    let (shown, ad, user) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    accepted(
        &server,
        "/v1/impressions",
        impression(&campaign, shown, ad, user, day_start + Duration::hours(10)),
    )
    .await;
    accepted(
        &server,
        "/v1/clicks",
        click(&campaign, shown, ad, day_start + Duration::hours(11)),
    )
    .await;
    let a = campaign.advertiser_id;
    let order = |id: &str, hour: i64, value: &str| {
        conversion(
            a,
            id,
            day_start + Duration::hours(hour),
            json!({"user_id": user, "value": value, "currency": "EUR"}),
        )
    };
    accepted(&server, "/v1/conversions", order("first", 12, "10.10")).await;
    decided(&server, a, 1).await;
    let range = format!("from={day}&to={day}");
    let raw = summary(&server, &campaign, &range).await;
    assert_eq!(raw["sealed_days"], 0);
    assert_eq!(
        measures(&raw["totals"]),
        json!([1, 1, 0, 1.0, {"EUR": "10.10"}]),
        "{raw}"
    );
    let settings = Arc::new(SettingsCache::new(
        store.clone(),
        std::time::Duration::from_secs(10),
    ));
    // A conversion whose listing ended late (a slow store) is listed again, and deciding that
    // copy marks the day once more (it repairs a process that died between its decision and
    // its mark), so a seal may have to run again after it, as the sealer does each round.
    let seal = || async {
        eventually(std::time::Duration::from_secs(40), || async {
            // A seal is current once its read started past the latest late mark and the margin.
            tokio::time::sleep(std::time::Duration::from_secs(6)).await;
            Sealer::new(
                store.clone(),
                Arc::clone(&settings),
                SealerOptions::default(),
                Default::default(),
            )
            .seal_campaign_day(campaign.key(), Day::new(day))
            .await
            .expect("sealed");
            summary(&server, &campaign, &range).await["sealed_days"] == 1
        })
        .await;
        summary(&server, &campaign, &range).await
    };
    let sealed = seal().await;
    assert_eq!(sealed["sealed_days"], 1, "{sealed}");
    assert_eq!(measures(&sealed["totals"]), measures(&raw["totals"]));
    // A conversion of that day decided after its seal marks it: read raw, then sealed with it.
    accepted(&server, "/v1/conversions", order("second", 13, "0.20")).await;
    decided(&server, a, 2).await;
    // The decider marks the day just after it writes the decision the endpoint shows.
    let mut marked = summary(&server, &campaign, &range).await;
    for _ in 0..50 {
        if marked["sealed_days"] == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        marked = summary(&server, &campaign, &range).await;
    }
    assert_eq!(marked["sealed_days"], 0, "{marked}");
    assert_eq!(
        measures(&marked["totals"]),
        json!([2, 2, 0, 2.0, {"EUR": "10.30"}]),
        "{marked}"
    );
    let resealed = seal().await;
    assert_eq!(resealed["sealed_days"], 1, "{resealed}");
    assert_eq!(measures(&resealed["totals"]), measures(&marked["totals"]));
}

async fn closed_slices_count_conversions_as_the_raw_read_does(backend: Backend) {
    let store = backend.store().await;
    let mut aggregating_options = test_options();
    aggregating_options.service.attribution_delay = SHORT;
    aggregating_options.service.slice_interval = Some(std::time::Duration::from_secs(1));
    let aggregating = TestServer::with_options(Arc::clone(&store), aggregating_options).await;
    let mut raw_options = test_options();
    raw_options.service.attribution_delay = SHORT;
    raw_options.service.slice_interval = None;
    let raw = TestServer::with_options(Arc::clone(&store), raw_options).await;
    let campaign = Campaign::fresh();
    let now = Utc::now();
    let a = campaign.advertiser_id;
    let mut conversions = Vec::new();
    for i in 0..6 {
        let (shown, ad, user) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let served = now - Duration::minutes(50 - 5 * i);
        accepted(
            &aggregating,
            "/v1/impressions",
            impression(&campaign, shown, ad, user, served),
        )
        .await;
        if i % 2 == 0 {
            accepted(
                &aggregating,
                "/v1/clicks",
                click(&campaign, shown, ad, served + Duration::seconds(30)),
            )
            .await;
        }
        // In slices closed by now: each decision marks its slice.
        conversions.push(conversion(
            a,
            &format!("order-{i}"),
            served + Duration::minutes(2),
            json!({"user_id": user, "value": format!("{i}.05"), "currency": "EUR"}),
        ));
    }
    accepted(&aggregating, "/v1/conversions", json!(conversions)).await;
    decided(&aggregating, a, 6).await;
    let today = now.date_naive();
    let query = format!(
        "from={}&to={today}&group_by=hour",
        today - Duration::days(1)
    );
    let reference = summary(&raw, &campaign, &query).await;
    assert_eq!(
        measures(&reference["totals"]),
        json!([6, 3, 3, 1.0, {"EUR": "15.30"}]),
        "{reference}"
    );
    let from_slices = || async {
        let answer = summary(&aggregating, &campaign, &query).await;
        answer["aggregated_slices"].as_u64().unwrap_or(0) > 0
            && answer["totals"] == reference["totals"]
            && answer["rows"] == reference["rows"]
    };
    assert!(
        eventually(std::time::Duration::from_secs(40), from_slices).await,
        "the slices' aggregates answer as the raw read: {reference}"
    );
}

/// What a decision reads of a user's index: the newest entries timed at or before the
/// conversion, newest first, as many as asked, so a user with millions of events costs a
/// bounded read (docs/API.md, "Limits and overload").
async fn a_decision_reads_a_users_newest_entries_before_the_conversion_and_no_more(
    backend: Backend,
) {
    use adevents::domain::conversion::index::{IndexEntry, IndexKey, IndexedKind, Week};
    use adevents::domain::ids::{AdId, AdvertiserId, CampaignId, ImpressionId, UserId};
    use adevents::domain::time::EventTime;
    let store = backend.store().await;
    let (advertiser, user) = (
        AdvertiserId::new(Uuid::new_v4()),
        UserId::new(Uuid::new_v4()),
    );
    // Within last week: from its start, one entry a minute.
    let week = Week::of(Utc::now() - Duration::days(7));
    let week_start = DateTime::from_timestamp(i64::from(week.get()) * 7 * 86_400, 0).expect("time");
    let entry = |minute: i64| IndexEntry {
        advertiser_id: advertiser,
        key: IndexKey::User(user),
        timestamp: EventTime::from_stored(week_start + Duration::minutes(minute)),
        kind: IndexedKind::Impression,
        impression_id: ImpressionId::new(Uuid::new_v4()),
        campaign_id: CampaignId::new(Uuid::new_v4()),
        ad_id: AdId::new(Uuid::new_v4()),
        user_id: Some(user),
        received: week_start + Duration::minutes(minute),
        valid: true,
    };
    let entries: Vec<IndexEntry> = (0..50).map(entry).collect();
    store.write_index(&entries).await.expect("written");

    let newest = |advertiser, at, limit| {
        let store = Arc::clone(&store);
        async move {
            store
                .read_index_newest(advertiser, week, IndexKey::User(user), at, limit)
                .await
                .expect("read")
        }
    };

    let read = newest(advertiser, week_start + Duration::minutes(30), 5).await;

    let minutes: Vec<i64> = read
        .iter()
        .map(|entry| (entry.timestamp.instant() - week_start).num_minutes())
        .collect();
    assert_eq!(
        minutes,
        [30, 29, 28, 27, 26],
        "at or before the time, newest first"
    );
    let all = newest(advertiser, week_start + Duration::days(7), 1_000).await;
    assert_eq!(all.len(), 50);
    let other = AdvertiserId::new(Uuid::new_v4());
    let none = newest(other, week_start + Duration::days(7), 1_000).await;
    assert!(
        none.is_empty(),
        "another advertiser's entries are never read"
    );
}

async fn one_advertisers_flood_of_conversions_does_not_hold_back_anothers(backend: Backend) {
    const FLOOD: u64 = 3_000;
    let (_, server) = server(backend, SHORT).await;
    let (flooding, other) = (Uuid::new_v4(), Uuid::new_v4());
    let now = Utc::now();
    for batch in 0..FLOOD / 1_000 {
        let body: Vec<Value> = (0..1_000)
            .map(|n| {
                let id = format!("flood-{}", batch * 1_000 + n);
                conversion(flooding, &id, now, json!({"user_id": Uuid::new_v4()}))
            })
            .collect();
        accepted(&server, "/v1/conversions", json!(body)).await;
    }
    let late = conversion(
        other,
        "after-the-flood",
        now,
        json!({"user_id": Uuid::new_v4()}),
    );
    accepted(&server, "/v1/conversions", late).await;

    decided(&server, other, 1).await;
    let flood = advertiser_conversions(&server, flooding, "campaign").await;
    let flood_decided = flood["totals"]["conversions"].as_u64().unwrap_or(0);
    assert!(
        flood_decided < FLOOD / 2,
        "the other advertiser's conversion waited for {flood_decided} of the flood's {FLOOD}"
    );
    decided(&server, flooding, FLOOD).await;
}

async fn due_lists_are_kept_per_advertiser_and_read_from_where_they_were_taken(backend: Backend) {
    use adevents::domain::conversion::ConversionId;
    use adevents::domain::ids::AdvertiserId;
    use adevents::store::{DueConversion, DueLane};
    let store = backend.store().await;
    // A day of its own in 2001, so no other test's lists share it.
    let offset = i64::from(Uuid::new_v4().as_u128() as u16 % 365);
    let start = DateTime::parse_from_rfc3339("2001-01-01T00:00:00Z")
        .expect("an instant")
        .with_timezone(&Utc)
        + Duration::days(offset);
    let day = Day::new(start.date_naive());
    let (a, b) = (
        AdvertiserId::new(Uuid::new_v4()),
        AdvertiserId::new(Uuid::new_v4()),
    );
    let entry = |advertiser, second, id: &str| DueConversion {
        due: start + Duration::seconds(second),
        advertiser_id: advertiser,
        conversion_id: ConversionId::new(id).expect("an id"),
    };
    let (a1, a2, a3, b1) = (
        entry(a, 1, "a-1"),
        entry(a, 2, "a-2"),
        entry(a, 3, "a-3"),
        entry(b, 1, "b-1"),
    );
    let all = [a3.clone(), a1.clone(), b1.clone(), a2.clone()];
    store
        .write_conversion_copies(&[], &all)
        .await
        .expect("listed");
    let end = start + Duration::days(1) - Duration::milliseconds(1);
    let read = |lane, after: Option<DueConversion>, until, limit| {
        let store = Arc::clone(&store);
        async move {
            store
                .due_conversions(day, lane, after.as_ref(), until, limit)
                .await
                .expect("read")
        }
    };

    let mut lanes = store.due_lanes(day).await.expect("lanes");
    lanes.sort_by_key(|lane| lane.advertiser_id);
    let mut expected = vec![a, b];
    expected.sort();
    let listed: Vec<AdvertiserId> = lanes.iter().map(|lane| lane.advertiser_id).collect();
    assert_eq!(
        listed, expected,
        "a list per advertiser with conversions due that day"
    );
    assert!(lanes.iter().all(|lane| lane.decided_through.is_none()));
    // Where the store keeps the latest due time listed, it is the latest of each list's.
    assert!(
        lanes[0].listed_through.is_none_or(|listed| {
            let latest = if lanes[0].advertiser_id == a {
                a3.due
            } else {
                b1.due
            };
            listed == latest
        }),
        "{lanes:?}"
    );
    assert!(lanes[1].listed_through.is_none_or(|listed| {
        let latest = if lanes[1].advertiser_id == a {
            a3.due
        } else {
            b1.due
        };
        listed == latest
    }));
    assert_eq!(
        read(DueLane::Advertiser(a), None, end, 2).await,
        [a1.clone(), a2.clone()],
        "oldest first, at most the limit"
    );
    assert_eq!(
        read(DueLane::Advertiser(a), None, a1.due, 10).await,
        std::slice::from_ref(&a1)
    );
    assert_eq!(
        read(DueLane::Advertiser(b), None, end, 10).await,
        std::slice::from_ref(&b1)
    );
    assert!(read(DueLane::Shared, None, end, 10).await.is_empty());

    store
        .remove_due(DueLane::Advertiser(a), &[a1.clone(), a2.clone()])
        .await
        .expect("removed");
    assert_eq!(
        read(DueLane::Advertiser(a), None, end, 10).await,
        std::slice::from_ref(&a3)
    );
    assert_eq!(
        read(DueLane::Advertiser(a), Some(a2.clone()), end, 10).await,
        std::slice::from_ref(&a3)
    );
    let lanes = store.due_lanes(day).await.expect("lanes");
    let through = |advertiser| {
        lanes
            .iter()
            .find(|lane| lane.advertiser_id == advertiser)
            .and_then(|lane| lane.decided_through.clone())
    };
    assert_eq!(
        through(a),
        Some(a2),
        "where a decider that starts reads from"
    );
    assert_eq!(through(b), None);
}

async fn a_conversion_listed_by_an_earlier_release_is_still_decided() {
    let store = Backend::Cassandra.store().await;
    // Its own list would make it due in an hour: only the shared list decides it now.
    let server = server_on(store, std::time::Duration::from_secs(3600)).await;
    let advertiser = Uuid::new_v4();
    let now = Utc::now();
    let user = json!({"user_id": Uuid::new_v4()});
    let body = conversion(advertiser, "listed-before-0024", now, user);
    accepted(&server, "/v1/conversions", body).await;
    let session = crate::common::raw_session().await;
    let keyspace = crate::common::shared_keyspace();
    session
        .query_unpaged(
            format!(
                "INSERT INTO {keyspace}.conversion_due (day, due, advertiser_id, conversion_id) \
                 VALUES (?, ?, ?, ?)"
            ),
            (now.date_naive(), now, advertiser, "listed-before-0024"),
        )
        .await
        .expect("listed as an earlier release lists");
    let answer = decided(&server, advertiser, 1).await;
    assert_eq!(answer["totals"]["attributed"], 0, "{answer}");
}

async fn conversions_posted_at_once_with_no_delay_are_each_decided(backend: Backend) {
    let (_, server) = server(backend, std::time::Duration::ZERO).await;
    let advertiser = Uuid::new_v4();
    let now = Utc::now();
    // Ten requests at once: the decider reads the list while some are still being written.
    let posts = (0..10).map(|request| {
        let body: Vec<Value> = (0..50)
            .map(|n| {
                let id = format!("at-once-{request}-{n}");
                conversion(advertiser, &id, now, json!({"user_id": Uuid::new_v4()}))
            })
            .collect();
        let server = &server;
        async move { post(server, "/v1/conversions", &json!(body)).await }
    });
    for (status, answer) in futures::future::join_all(posts).await {
        assert_eq!(status, StatusCode::OK, "{answer}");
    }
    let answer = decided(&server, advertiser, 500).await;
    assert_eq!(answer["totals"]["attributed"], 0, "{answer}");
}
