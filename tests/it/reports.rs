//! Reports by one dimension: impressions, clicks and CTR per value of `ad_id` or of a
//! `user_data` key, checked against counts computed here over a generated month.

use crate::common::Backend;
use crate::common::events::{Campaign, at, configure_buckets, get, post_all, summary};
use chrono::{DateTime, Duration, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use uuid::Uuid;

conformance!(
    a_report_by_country_and_by_ad_matches_counts_computed_from_the_events,
    a_report_without_a_valid_dimension_is_a_400_naming_it,
);

const COUNTRIES: [&str; 4] = ["DE", "FR", "IN", "US"];
const MONTH: &str = "from=2026-10-01&to=2026-10-31";

/// (value, impressions, clicks), most impressions first, then by value, `null` last.
fn expected_rows(counts: BTreeMap<Option<String>, (u64, u64)>) -> Vec<(Value, u64, u64)> {
    let mut rows: Vec<(Option<String>, u64, u64)> = counts
        .into_iter()
        .map(|(value, (impressions, clicks))| (value, impressions, clicks))
        .collect();
    rows.sort_by_key(|(value, impressions, _)| {
        (
            std::cmp::Reverse(*impressions),
            value.is_none(),
            value.clone(),
        )
    });
    rows.into_iter()
        .map(|(value, impressions, clicks)| (json!(value), impressions, clicks))
        .collect()
}

fn served_rows(report: &Value) -> Vec<(Value, u64, u64)> {
    report["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| {
            let impressions = row["impressions"].as_u64().expect("impressions");
            let clicks = row["clicks"].as_u64().expect("clicks");
            let ctr = row["ctr"].as_f64().expect("ctr");
            assert!(
                (ctr - clicks as f64 / impressions as f64).abs() < 1e-12,
                "{row}"
            );
            (row["value"].clone(), impressions, clicks)
        })
        .collect()
}

async fn a_report_by_country_and_by_ad_matches_counts_computed_from_the_events(backend: Backend) {
    let campaign = Campaign::fresh();
    configure_buckets(backend, &campaign, 4, "always").await;
    let server = backend.server().await;
    let ads: Vec<Uuid> = (0..4).map(|_| Uuid::new_v4()).collect();
    let mut by_country: BTreeMap<Option<String>, (u64, u64)> = BTreeMap::new();
    let mut by_ad: BTreeMap<Option<String>, (u64, u64)> = BTreeMap::new();
    // Re-sent impressions and second clicks go in requests of their own: one request may
    // not carry two versions of an event.
    let (mut impressions, mut clicks) = (Vec::new(), Vec::new());
    let (mut resent, mut reclicks) = (Vec::new(), Vec::new());
    let mut count = |country: Option<String>, ad: Uuid, clicked: bool| {
        for (map, value) in [
            (&mut by_country, country),
            (&mut by_ad, Some(ad.to_string())),
        ] {
            let entry = map.entry(value).or_default();
            entry.0 += 1;
            entry.1 += u64::from(clicked);
        }
    };
    let start = at("2026-10-01T00:00:00Z");
    for i in 0..2_400i64 {
        let id = Uuid::new_v4();
        let ad = ads[(i * 7 % 4) as usize];
        let when: DateTime<Utc> = start + Duration::minutes(i * 18) + Duration::seconds(i % 11);
        let country = (i % 7 != 0).then(|| COUNTRIES[(i * i % 4) as usize].to_owned());
        let mut event = campaign.impression(id, ad, when);
        if let Some(country) = &country {
            event["user_data"] = json!({"country": country, "device": "mobile"});
        } else {
            event["user_data"] = json!({"device": "desktop"});
        }
        // Every 6th impression is clicked, every 12th twice: it counts once.
        let clicked = i % 6 == 0;
        if clicked {
            clicks.push(campaign.click(id, ad, when + Duration::minutes(2)));
            if i % 12 == 0 {
                reclicks.push(campaign.click(id, ad, when + Duration::minutes(9)));
            }
        }
        // Every 100th is sent again later the same day: it counts once, at its first time.
        if i % 100 == 50 {
            let mut again = campaign.impression(id, ad, when + Duration::minutes(5));
            again["user_data"] = event["user_data"].clone();
            resent.push(again);
        }
        impressions.push(event);
        count(country, ad, clicked);
    }
    // Shown in the range, first clicked after it: an impression without a click here.
    let late_id = Uuid::new_v4();
    let late = campaign.impression(late_id, ads[0], at("2026-10-31T23:59:00Z"));
    impressions.push(late);
    clicks.push(campaign.click(late_id, ads[0], at("2026-11-01T00:01:00Z")));
    count(None, ads[0], false);
    // Outside the range altogether.
    impressions.push(campaign.impression(Uuid::new_v4(), ads[1], at("2026-09-30T23:59:59Z")));
    // Shown before the range, first clicked in it: by ad, a click as in the summary; by a
    // user_data key (the impression's own value), nothing.
    let early_id = Uuid::new_v4();
    impressions.push(campaign.impression(early_id, ads[2], at("2026-09-30T23:58:00Z")));
    clicks.push(campaign.click(early_id, ads[2], at("2026-10-01T00:01:00Z")));
    by_ad.entry(Some(ads[2].to_string())).or_default().1 += 1;
    post_all(&server, "/v1/impressions", &impressions, 500).await;
    post_all(&server, "/v1/impressions", &resent, 500).await;
    post_all(&server, "/v1/clicks", &clicks, 500).await;
    post_all(&server, "/v1/clicks", &reclicks, 500).await;

    let path = format!("{}/report", campaign.path());
    let (status, report) = get(
        &server,
        &path,
        &format!("{MONTH}&dimension=user_data.country"),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["dimension"], "user_data.country");
    assert_eq!(served_rows(&report), expected_rows(by_country));
    let (status, report) = get(&server, &path, &format!("{MONTH}&dimension=ad_id")).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    let by_ad_rows = served_rows(&report);
    assert_eq!(by_ad_rows, expected_rows(by_ad));

    // The rows add up to the summary's totals.
    let totals =
        summary(&server, &campaign, &format!("{MONTH}&group_by=none")).await["totals"].clone();
    let sum = |index: fn(&(Value, u64, u64)) -> u64| by_ad_rows.iter().map(index).sum::<u64>();
    assert_eq!(totals["impressions"].as_u64(), Some(sum(|row| row.1)));
    assert_eq!(totals["clicks"].as_u64(), Some(sum(|row| row.2)));
    // A key no impression has: every impression under null.
    let (_, report) = get(
        &server,
        &path,
        &format!("{MONTH}&dimension=user_data.absent"),
    )
    .await;
    let rows = served_rows(&report);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].0, Value::Null);
    assert_eq!(Some(rows[0].1), totals["impressions"].as_u64());
    let values: HashSet<String> = served_rows(
        &get(
            &server,
            &path,
            &format!("{MONTH}&dimension=user_data.device"),
        )
        .await
        .1,
    )
    .into_iter()
    .filter_map(|(value, ..)| value.as_str().map(str::to_owned))
    .collect();
    assert_eq!(
        values,
        HashSet::from(["mobile".to_owned(), "desktop".to_owned()])
    );
}

async fn a_report_without_a_valid_dimension_is_a_400_naming_it(backend: Backend) {
    let server = backend.server().await;
    let path = format!("{}/report", Campaign::fresh().path());
    for query in [
        MONTH.to_owned(),
        format!("{MONTH}&dimension=country"),
        format!("{MONTH}&dimension=user_data."),
        format!("{MONTH}&dimension=user_data.%00"),
        format!("{MONTH}&dimension=user_data.a%1Bb"),
        format!("{MONTH}&dimension=ad_id&group_by=day"),
    ] {
        let (status, body) = get(&server, &path, &query).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        let field = body["error"]["errors"][0]["field"]
            .as_str()
            .unwrap_or_default();
        assert!(
            ["dimension", "group_by"].contains(&field),
            "{query}: {body}"
        );
    }
}
