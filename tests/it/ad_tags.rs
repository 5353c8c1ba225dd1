//! Signed ad tags: the impression pixel counts a signed impression once however often it
//! fires and answers its GIF whatever happens; the click redirect sends the viewer only where
//! the advertiser signed, and never becomes an open redirect (CVE-2021-22873).

use crate::common::events::{Campaign, summary};
use crate::common::tags::{
    Secret, browser, click_query, create_secret, fire_pixel, follow_click, pixel_query, signed,
};
use crate::common::{Backend, TestServer, http};
use chrono::{Duration, Utc};
use reqwest::StatusCode;
use serde_json::Value;
use uuid::Uuid;

conformance!(
    a_signed_pixel_counts_once_and_a_forged_one_counts_nothing,
    a_signed_click_redirects_and_counts_by_the_first_click_rule,
    a_click_link_refused_answers_403_without_location,
    a_deleted_secret_stops_counting_and_secrets_are_listed_without_themselves,
);

/// Today and yesterday, so a test that straddles midnight still sees its events.
fn recent() -> String {
    let today = Utc::now().date_naive();
    format!(
        "from={}&to={today}&group_by=none",
        today - Duration::days(1)
    )
}

fn now_millis() -> i64 {
    Utc::now().timestamp_millis()
}

async fn totals(server: &TestServer, campaign: &Campaign) -> Value {
    summary(server, campaign, &recent()).await["totals"].clone()
}

async fn a_signed_pixel_counts_once_and_a_forged_one_counts_nothing(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let secret = create_secret(&server, campaign.advertiser_id).await;
    let ad = Uuid::new_v4();
    let good = signed(
        &secret,
        &pixel_query(&campaign, Uuid::new_v4(), ad, now_millis(), &secret),
    );
    // Fired again and again (a reload, a retry), once with a key that must be ignored.
    for _ in 0..3 {
        fire_pixel(&server, &good, &[]).await;
    }
    fire_pixel(&server, &good, &[("authorization", "Bearer not-a-key")]).await;

    let other_advertiser = create_secret(&server, Uuid::new_v4()).await;
    let stranger = Secret {
        id: secret.id.clone(),
        bytes: vec![9; 32],
    };
    let fresh = |t: i64, key: &Secret| pixel_query(&campaign, Uuid::new_v4(), ad, t, key);
    let edited = {
        // A signed URL whose user id is changed afterwards.
        let url = signed(&secret, &fresh(now_millis(), &secret));
        let user = url
            .split('&')
            .find(|pair| pair.starts_with("u="))
            .expect("a u")
            .to_owned();
        url.replace(&format!("&{user}&"), &format!("&u={}&", Uuid::new_v4()))
    };
    let forged = [
        // A wrong signature.
        signed(&stranger, &fresh(now_millis(), &secret)),
        // Another advertiser's secret, named and used for this advertiser's URL.
        signed(&other_advertiser, &fresh(now_millis(), &other_advertiser)),
        // A parameter edited after signing.
        edited,
        // Past the TTL (1 h).
        signed(
            &secret,
            &fresh(
                (Utc::now() - Duration::minutes(61)).timestamp_millis(),
                &secret,
            ),
        ),
        // Too far ahead of the server's clock.
        signed(
            &secret,
            &fresh(
                (Utc::now() + Duration::minutes(11)).timestamp_millis(),
                &secret,
            ),
        ),
        // Something after the signature.
        format!(
            "{}&d=%7B%7D",
            signed(&secret, &fresh(now_millis(), &secret))
        ),
        // No signature at all.
        fresh(now_millis(), &secret),
    ];
    for query in &forged {
        fire_pixel(&server, query, &[]).await;
    }

    let totals = totals(&server, &campaign).await;
    assert_eq!(totals["impressions"], 1, "{totals}");
    assert_eq!(totals["invalid_impressions"], 0, "{totals}");
}

async fn a_signed_click_redirects_and_counts_by_the_first_click_rule(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let secret = create_secret(&server, campaign.advertiser_id).await;
    let (impression, ad) = (Uuid::new_v4(), Uuid::new_v4());
    let served = now_millis();
    fire_pixel(
        &server,
        &signed(
            &secret,
            &pixel_query(&campaign, impression, ad, served, &secret),
        ),
        &[],
    )
    .await;
    let landing = "https://shop.example/landing?utm_source=adevents&x=1#top";
    let link = signed(
        &secret,
        &click_query(&campaign, impression, ad, served, landing, &secret),
    );
    for _ in 0..2 {
        let (status, location, body) = follow_click(&server, &link, &[]).await;
        assert_eq!(status, StatusCode::FOUND, "{body}");
        assert_eq!(location.as_deref(), Some(landing));
    }
    // A link checker's HEAD is answered the same way and counts nothing.
    let head = browser()
        .head(server.url(&format!("/c?{link}")))
        .send()
        .await
        .expect("answered");
    assert_eq!(head.status(), StatusCode::FOUND);

    let totals = totals(&server, &campaign).await;
    assert_eq!(totals["impressions"], 1, "{totals}");
    assert_eq!(totals["clicks"], 1, "{totals}");
    assert_eq!(totals["invalid_clicks"], 0, "{totals}");
}

async fn a_click_link_refused_answers_403_without_location(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let secret = create_secret(&server, campaign.advertiser_id).await;
    let stranger = Secret {
        id: secret.id.clone(),
        bytes: vec![3; 32],
    };
    let (ad, served) = (Uuid::new_v4(), now_millis());
    let link = |url: &str, t: i64, key: &Secret| {
        signed(
            key,
            &click_query(&campaign, Uuid::new_v4(), ad, t, url, &secret),
        )
    };
    let landing = "https://shop.example/";
    let month_ago = (Utc::now() - Duration::days(31)).timestamp_millis();
    let refused = [
        ("a bad signature", link(landing, served, &stranger)),
        (
            "a javascript: URL",
            link("javascript:alert(document.cookie)", served, &secret),
        ),
        (
            "a data: URL",
            link("data:text/html,<script>alert(1)</script>", served, &secret),
        ),
        ("a relative URL", link("//evil.example/", served, &secret)),
        ("an expired link", link(landing, month_ago, &secret)),
        (
            "a url appended after s",
            format!(
                "{}&url=https%3A%2F%2Fevil.example%2F",
                link(landing, served, &secret)
            ),
        ),
        ("a repeated url, signed", {
            let query = click_query(&campaign, Uuid::new_v4(), ad, served, landing, &secret);
            signed(
                &secret,
                &format!("{query}&url=https%3A%2F%2Fevil.example%2F"),
            )
        }),
        ("an unlisted parameter, signed", {
            let query = click_query(&campaign, Uuid::new_v4(), ad, served, landing, &secret);
            signed(
                &secret,
                &format!("{query}&next=https%3A%2F%2Fevil.example%2F"),
            )
        }),
        ("a missing parameter", {
            let query = format!(
                "a={}&c={}&ad={ad}&t={served}&url=https%3A%2F%2Fshop.example%2F&k={}",
                campaign.advertiser_id, campaign.campaign_id, secret.id
            );
            signed(&secret, &query)
        }),
        (
            "no signature",
            click_query(&campaign, Uuid::new_v4(), ad, served, landing, &secret),
        ),
    ];
    for (case, query) in &refused {
        let (status, location, body) = follow_click(&server, query, &[]).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{case}: {body}");
        assert_eq!(location, None, "{case}");
        let answer: Value = serde_json::from_str(&body).expect("a JSON error");
        assert_eq!(answer["error"]["code"], "forbidden", "{case}: {answer}");
    }
    let totals = totals(&server, &campaign).await;
    assert_eq!(totals["clicks"], 0, "{totals}");
    assert_eq!(totals["invalid_clicks"], 0, "{totals}");
}

async fn a_deleted_secret_stops_counting_and_secrets_are_listed_without_themselves(
    backend: Backend,
) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let old = create_secret(&server, campaign.advertiser_id).await;
    let new = create_secret(&server, campaign.advertiser_id).await;
    let path = format!("/v1/advertisers/{}/tag-secrets", campaign.advertiser_id);
    let listed: Value = http()
        .get(server.url(&path))
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON");
    let ids: Vec<&str> = listed["tag_secrets"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|secret| secret["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, [old.id.as_str(), new.id.as_str()], "{listed}");
    assert!(
        !listed.to_string().contains("secret\":\""),
        "no secret is ever listed: {listed}"
    );

    let ad = Uuid::new_v4();
    let pixel = |key: &Secret| {
        signed(
            key,
            &pixel_query(&campaign, Uuid::new_v4(), ad, now_millis(), key),
        )
    };
    fire_pixel(&server, &pixel(&old), &[]).await;
    let deleted = http()
        .delete(server.url(&format!("{path}/{}", old.id)))
        .send()
        .await
        .expect("answered");
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let again = http()
        .delete(server.url(&format!("{path}/{}", old.id)))
        .send()
        .await
        .expect("answered");
    assert_eq!(again.status(), StatusCode::NOT_FOUND);
    // Signed with the deleted secret after its deletion: not counted. The new one counts.
    fire_pixel(&server, &pixel(&old), &[]).await;
    fire_pixel(&server, &pixel(&new), &[]).await;

    let totals = totals(&server, &campaign).await;
    assert_eq!(totals["impressions"], 2, "{totals}");
}
