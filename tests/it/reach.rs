//! Users reached, billable impressions and hourly rows of campaign summaries: reach over a
//! range is a union, billable impressions count once per user and window wherever and
//! whenever their events arrive, and days and hours are cut exactly in every zone.

use crate::common::Backend;
use crate::common::events::{Campaign, at, post_all, summary};
use chrono::{DateTime, Duration, Utc};
use serde_json::Value;
use uuid::Uuid;

conformance!(
    reach_over_a_range_is_the_union_of_its_users_not_a_sum_of_days,
    billable_impressions_count_once_per_user_and_window_whatever_the_arrival,
    half_hour_and_45_minute_zones_cut_days_exactly,
    hourly_rows_cover_every_local_clock_hour,
);

fn impression(campaign: &Campaign, ad: Uuid, user: Uuid, when: DateTime<Utc>) -> Value {
    let mut event = campaign.impression(Uuid::new_v4(), ad, when);
    event["user_id"] = Value::String(user.to_string());
    event
}

fn column(body: &Value, name: &str) -> Vec<u64> {
    body["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| row[name].as_u64().expect("count"))
        .collect()
}

async fn reach_over_a_range_is_the_union_of_its_users_not_a_sum_of_days(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let ad = Uuid::new_v4();
    let users: Vec<Uuid> = (0..50).map(|_| Uuid::new_v4()).collect();
    let mut events = Vec::new();
    for day in 0..3 {
        for (i, user) in users.iter().enumerate() {
            let when =
                at("2026-10-01T08:00:00Z") + Duration::days(day) + Duration::minutes(i as i64 * 7);
            events.push(impression(&campaign, ad, *user, when));
        }
    }
    // Ten more users on the last day only.
    for i in 0..10 {
        events.push(impression(
            &campaign,
            ad,
            Uuid::new_v4(),
            at("2026-10-03T20:00:00Z") + Duration::seconds(i * 50),
        ));
    }
    post_all(&server, "/v1/impressions", &events, 100).await;

    let body = summary(&server, &campaign, "from=2026-10-01&to=2026-10-03").await;

    assert_eq!(column(&body, "unique_users"), [50, 50, 60], "{body}");
    assert_eq!(body["totals"]["unique_users"], 60, "{body}");
    assert_eq!(body["totals"]["impressions"], 160);
    let by_ad = summary(
        &server,
        &campaign,
        "from=2026-10-01&to=2026-10-03&group_by=ad",
    )
    .await;
    assert_eq!(by_ad["rows"][0]["unique_users"], 60, "{by_ad}");
}

async fn billable_impressions_count_once_per_user_and_window_whatever_the_arrival(
    backend: Backend,
) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let (first_ad, second_ad) = (Uuid::new_v4(), Uuid::new_v4());
    let (burst_user, late_user) = (Uuid::new_v4(), Uuid::new_v4());
    // 2026-10-01T10:00:00Z is a multiple of 40 s since the epoch: one window to 10:00:40.
    let window = at("2026-10-01T10:00:00Z");
    let burst: Vec<Value> = (0..5)
        .map(|i| {
            impression(
                &campaign,
                first_ad,
                burst_user,
                window + Duration::seconds(i * 7),
            )
        })
        .collect();
    let next_window = vec![impression(
        &campaign,
        first_ad,
        burst_user,
        window + Duration::seconds(45),
    )];
    // One window of another user, its events sent minutes apart and latest first: it counts
    // once, at its earliest impression, for that impression's ad.
    let later = vec![impression(
        &campaign,
        first_ad,
        late_user,
        window + Duration::seconds(30),
    )];
    let earlier = vec![impression(
        &campaign,
        second_ad,
        late_user,
        window + Duration::seconds(2),
    )];

    post_all(&server, "/v1/impressions", &burst, 100).await;
    post_all(&server, "/v1/impressions", &later, 100).await;
    post_all(&server, "/v1/impressions", &next_window, 100).await;
    let before = summary(
        &server,
        &campaign,
        "from=2026-10-01&to=2026-10-01&group_by=ad",
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    post_all(&server, "/v1/impressions", &earlier, 100).await;
    post_all(&server, "/v1/impressions", &later, 100).await; // and a retry of the later one
    let after = summary(
        &server,
        &campaign,
        "from=2026-10-01&to=2026-10-01&group_by=ad",
    )
    .await;

    assert_eq!(before["totals"]["billable_impressions"], 3, "{before}");
    assert_eq!(after["totals"]["impressions"], 8, "{after}");
    assert_eq!(after["totals"]["billable_impressions"], 3, "{after}");
    let billable_of = |ad: Uuid| {
        after["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .find(|row| row["ad_id"] == ad.to_string())
            .map(|row| row["billable_impressions"].as_u64().expect("count"))
    };
    assert_eq!(billable_of(first_ad), Some(2), "{after}");
    assert_eq!(billable_of(second_ad), Some(1), "{after}");
    let hours = summary(
        &server,
        &campaign,
        "from=2026-10-01&to=2026-10-01&group_by=hour",
    )
    .await;
    assert_eq!(column(&hours, "billable_impressions")[10], 3, "{hours}");
}

async fn half_hour_and_45_minute_zones_cut_days_exactly(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let ad = Uuid::new_v4();
    // Kolkata (+05:30) midnight is 18:30 UTC; Kathmandu (+05:45) midnight is 18:15 UTC.
    let events: Vec<Value> = [
        "2026-10-01T18:14:00Z",
        "2026-10-01T18:16:00Z",
        "2026-10-01T18:29:00Z",
        "2026-10-01T18:31:00Z",
    ]
    .iter()
    .map(|when| impression(&campaign, ad, Uuid::new_v4(), at(when)))
    .collect();
    post_all(&server, "/v1/impressions", &events, 100).await;

    let kolkata = summary(
        &server,
        &campaign,
        "from=2026-10-01&to=2026-10-02&tz=Asia/Kolkata",
    )
    .await;
    let kathmandu = summary(
        &server,
        &campaign,
        "from=2026-10-01&to=2026-10-02&tz=Asia/Kathmandu",
    )
    .await;
    let utc = summary(&server, &campaign, "from=2026-10-01&to=2026-10-02").await;

    assert_eq!(column(&kolkata, "impressions"), [3, 1], "{kolkata}");
    assert_eq!(column(&kathmandu, "impressions"), [1, 3], "{kathmandu}");
    assert_eq!(column(&utc, "impressions"), [4, 0], "{utc}");
    for body in [&kolkata, &kathmandu, &utc] {
        assert_eq!(body["totals"]["unique_users"], 4, "{body}");
        assert_eq!(body["totals"]["billable_impressions"], 4, "{body}");
    }
}

async fn hourly_rows_cover_every_local_clock_hour(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let ad = Uuid::new_v4();
    // Berlin leaves summer time on 2026-10-25: 02:00-03:00 happens twice.
    let events: Vec<Value> = [
        "2026-10-25T00:30:00Z",
        "2026-10-25T01:30:00Z",
        "2026-10-25T13:05:00Z",
    ]
    .iter()
    .map(|when| impression(&campaign, ad, Uuid::new_v4(), at(when)))
    .collect();
    post_all(&server, "/v1/impressions", &events, 100).await;

    let berlin = summary(
        &server,
        &campaign,
        "from=2026-10-25&to=2026-10-25&tz=Europe/Berlin&group_by=hour",
    )
    .await;

    let rows = berlin["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 25, "{berlin}");
    assert_eq!(rows[2]["hour"], "2026-10-25T02:00:00+02:00");
    assert_eq!(rows[3]["hour"], "2026-10-25T02:00:00+01:00");
    assert_eq!(rows[2]["impressions"], 1, "00:30Z is 02:30 summer time");
    assert_eq!(rows[3]["impressions"], 1, "01:30Z is 02:30 winter time");
    assert_eq!(rows[15]["hour"], "2026-10-25T14:00:00+01:00");
    assert_eq!(rows[15]["impressions"], 1);
    assert_eq!(rows[15]["unique_users"], 1);
    assert_eq!(column(&berlin, "impressions").iter().sum::<u64>(), 3);
}
