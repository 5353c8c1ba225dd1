//! Keys and tenants: every endpoint against every kind of caller, key management, registered
//! sites, and that nothing a refused request carried is stored.

use crate::common::beacons::{fresh_site, register_site};
use crate::common::events::{Campaign, at};
use crate::common::{ADMIN_KEY, Backend, TestServer, anonymous_http, create_key, eventually, http};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::time::Duration;
use uuid::Uuid;

/// Who may call an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Allowed {
    Public,
    AnyKey,
    Admin,
    /// Ingest keys of the campaign's advertiser (a batch of another's events is refused).
    IngestOwner,
    /// Read keys of the campaign's advertiser.
    CampaignReader,
    /// Read or ingest keys of the campaign's advertiser (ad servers poll delivery).
    CampaignDelivery,
    /// Read keys of the site.
    SiteReader,
    /// Metrics keys.
    Metrics,
}

/// One kind of caller of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Nobody,
    BasicScheme,
    EmptyBearer,
    UnknownKey,
    RevokedKey,
    Admin,
    IngestOwner,
    IngestOther,
    ReadOwner,
    ReadOther,
    ReadSite,
    ReadOtherSite,
    Metrics,
}

const EVERYONE: [Who; 13] = [
    Who::Nobody,
    Who::BasicScheme,
    Who::EmptyBearer,
    Who::UnknownKey,
    Who::RevokedKey,
    Who::Admin,
    Who::IngestOwner,
    Who::IngestOther,
    Who::ReadOwner,
    Who::ReadOther,
    Who::ReadSite,
    Who::ReadOtherSite,
    Who::Metrics,
];

/// The status the contract gives `who` on an endpoint that `allowed`, when the right caller
/// gets `ok`.
fn expected(who: Who, allowed: Allowed, ok: StatusCode) -> StatusCode {
    let valid = !matches!(
        who,
        Who::Nobody | Who::BasicScheme | Who::EmptyBearer | Who::UnknownKey | Who::RevokedKey
    );
    let right = match allowed {
        Allowed::Public => true,
        Allowed::AnyKey => valid,
        Allowed::Admin => who == Who::Admin,
        Allowed::IngestOwner => matches!(who, Who::Admin | Who::IngestOwner),
        Allowed::CampaignReader => matches!(who, Who::Admin | Who::ReadOwner),
        Allowed::CampaignDelivery => {
            matches!(who, Who::Admin | Who::ReadOwner | Who::IngestOwner)
        }
        Allowed::SiteReader => matches!(who, Who::Admin | Who::ReadSite),
        Allowed::Metrics => matches!(who, Who::Admin | Who::Metrics),
    };
    if right {
        ok
    } else if valid {
        StatusCode::FORBIDDEN
    } else {
        StatusCode::UNAUTHORIZED
    }
}

struct Callers {
    keys: Vec<(Who, Option<String>)>,
}

impl Callers {
    async fn make(server: &TestServer, campaign: &Campaign, site: &str) -> Self {
        let other = Uuid::new_v4().to_string();
        let owner = campaign.advertiser_id.to_string();
        let key = |body: Value| create_key(server, body);
        let (ingest_owner, _) = key(json!({"scope": "ingest", "advertiser_id": owner})).await;
        let (ingest_other, _) = key(json!({"scope": "ingest", "advertiser_id": other})).await;
        let (read_owner, _) = key(json!({"scope": "read", "advertiser_id": owner})).await;
        let (read_other, _) = key(json!({"scope": "read", "advertiser_id": other})).await;
        let (read_site, _) = key(json!({"scope": "read", "site": site})).await;
        let (read_other_site, _) = key(json!({"scope": "read", "site": fresh_site()})).await;
        let (metrics, _) = key(json!({"scope": "metrics", "name": "scraper"})).await;
        let (revoked, revoked_id) = key(json!({"scope": "admin"})).await;
        let revocation = http()
            .delete(server.url(&format!("/v1/keys/{revoked_id}")))
            .send()
            .await
            .expect("answered");
        assert_eq!(revocation.status(), StatusCode::NO_CONTENT);
        let unknown = format!("adk_{}_{}", Uuid::new_v4().simple(), "A".repeat(43));
        Self {
            keys: vec![
                (Who::Nobody, None),
                (Who::BasicScheme, Some("Basic YWRtaW46YWRtaW4=".into())),
                (Who::EmptyBearer, Some("Bearer ".into())),
                (Who::UnknownKey, Some(format!("Bearer {unknown}"))),
                (Who::RevokedKey, Some(format!("Bearer {revoked}"))),
                (Who::Admin, Some(format!("Bearer {ADMIN_KEY}"))),
                (Who::IngestOwner, Some(format!("Bearer {ingest_owner}"))),
                (Who::IngestOther, Some(format!("Bearer {ingest_other}"))),
                (Who::ReadOwner, Some(format!("Bearer {read_owner}"))),
                (Who::ReadOther, Some(format!("Bearer {read_other}"))),
                (Who::ReadSite, Some(format!("Bearer {read_site}"))),
                (
                    Who::ReadOtherSite,
                    Some(format!("Bearer {read_other_site}")),
                ),
                (Who::Metrics, Some(format!("Bearer {metrics}"))),
            ],
        }
    }

    fn header(&self, who: Who) -> Option<&str> {
        self.keys
            .iter()
            .find(|(kind, _)| *kind == who)
            .and_then(|(_, header)| header.as_deref())
    }
}

async fn every_endpoint_answers_each_caller_as_the_contract_says(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let site = fresh_site();
    register_site(&server.url(""), &site).await;
    let callers = Callers::make(&server, &campaign, &site).await;
    let impression =
        campaign.impression(Uuid::new_v4(), Uuid::new_v4(), at("2026-10-20T10:00:00Z"));
    let click = campaign.click(Uuid::new_v4(), Uuid::new_v4(), at("2026-10-20T10:00:05Z"));
    let range = "from=2026-10-20&to=2026-10-20";
    let cases: Vec<(Method, String, Option<Value>, Allowed, StatusCode)> = vec![
        (
            Method::GET,
            "/healthz".into(),
            None,
            Allowed::Public,
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/readyz".into(),
            None,
            Allowed::Public,
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/openapi.json".into(),
            None,
            Allowed::Public,
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/metrics".into(),
            None,
            Allowed::Metrics,
            StatusCode::OK,
        ),
        (
            Method::POST,
            "/v1/impressions".into(),
            Some(impression.clone()),
            Allowed::IngestOwner,
            StatusCode::OK,
        ),
        (
            Method::POST,
            "/v1/clicks".into(),
            Some(click),
            Allowed::IngestOwner,
            StatusCode::OK,
        ),
        (
            Method::POST,
            "/v1/conversions".into(),
            Some(json!({
                "conversion_id": "order-1",
                "advertiser_id": campaign.advertiser_id,
                "action": "purchase",
                "timestamp": "2026-10-20T10:01:00Z",
                "user_id": Uuid::new_v4(),
            })),
            Allowed::IngestOwner,
            StatusCode::OK,
        ),
        (
            Method::GET,
            format!(
                "/v1/advertisers/{}/conversions?{range}",
                campaign.advertiser_id
            ),
            None,
            Allowed::CampaignReader,
            StatusCode::OK,
        ),
        (
            Method::GET,
            campaign.path(),
            None,
            Allowed::CampaignReader,
            StatusCode::OK,
        ),
        (
            Method::PUT,
            campaign.path(),
            Some(json!({"daily_cap": 77})),
            Allowed::Admin,
            StatusCode::OK,
        ),
        (
            Method::GET,
            format!("{}/summary?{range}", campaign.path()),
            None,
            Allowed::CampaignReader,
            StatusCode::OK,
        ),
        (
            Method::GET,
            format!("{}/report?{range}&dimension=ad_id", campaign.path()),
            None,
            Allowed::CampaignReader,
            StatusCode::OK,
        ),
        (
            Method::GET,
            format!("{}/impressions?{range}", campaign.path()),
            None,
            Allowed::CampaignReader,
            StatusCode::OK,
        ),
        (
            Method::GET,
            format!("{}/impressions/recent", campaign.path()),
            None,
            Allowed::CampaignReader,
            StatusCode::OK,
        ),
        (
            Method::GET,
            format!("{}/delivery", campaign.path()),
            None,
            Allowed::CampaignDelivery,
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/v1/freshness".to_owned(),
            None,
            Allowed::AnyKey,
            StatusCode::OK,
        ),
        (
            Method::GET,
            format!("/v1/sites/{site}"),
            None,
            Allowed::SiteReader,
            StatusCode::OK,
        ),
        (
            Method::PUT,
            format!("/v1/sites/{site}"),
            Some(json!({})),
            Allowed::Admin,
            StatusCode::OK,
        ),
        (
            Method::GET,
            format!("/v1/sites/{site}/uniques?{range}"),
            None,
            Allowed::SiteReader,
            StatusCode::OK,
        ),
        (
            Method::GET,
            format!("/v1/sites/{site}/features?{range}"),
            None,
            Allowed::SiteReader,
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/v1/sites".into(),
            None,
            Allowed::Admin,
            StatusCode::OK,
        ),
        (
            Method::GET,
            format!("/v1/advertisers/{}/campaigns", campaign.advertiser_id),
            None,
            Allowed::CampaignReader,
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/t.js".into(),
            None,
            Allowed::Public,
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/dashboard".into(),
            None,
            Allowed::Public,
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/v1/keys".into(),
            None,
            Allowed::Admin,
            StatusCode::OK,
        ),
        (
            Method::POST,
            "/v1/keys".into(),
            Some(json!({"scope": "metrics"})),
            Allowed::Admin,
            StatusCode::CREATED,
        ),
        (
            Method::DELETE,
            format!("/v1/keys/{}", Uuid::new_v4()),
            None,
            Allowed::Admin,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::GET,
            "/v1/keys/self".into(),
            None,
            Allowed::AnyKey,
            StatusCode::OK,
        ),
        (
            Method::GET,
            format!("/track?site={site}&guid=g&timestamp=1792490400"),
            None,
            Allowed::Public,
            StatusCode::OK,
        ),
        (
            Method::GET,
            format!("/v1/advertisers/{}/tag-secrets", campaign.advertiser_id),
            None,
            Allowed::Admin,
            StatusCode::OK,
        ),
        (
            Method::POST,
            format!("/v1/advertisers/{}/tag-secrets", campaign.advertiser_id),
            None,
            Allowed::Admin,
            StatusCode::CREATED,
        ),
        (
            Method::DELETE,
            format!(
                "/v1/advertisers/{}/tag-secrets/{}",
                campaign.advertiser_id,
                Uuid::new_v4()
            ),
            None,
            Allowed::Admin,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::GET,
            format!("/v1/privacy/subjects?user_id={}", Uuid::new_v4()),
            None,
            Allowed::Admin,
            StatusCode::OK,
        ),
        (
            Method::GET,
            format!("/v1/privacy/erasures/{}", Uuid::new_v4()),
            None,
            Allowed::Admin,
            StatusCode::NOT_FOUND,
        ),
        (
            Method::POST,
            "/v1/privacy/erasures".into(),
            Some(json!({"user_id": Uuid::new_v4().to_string()})),
            Allowed::Admin,
            StatusCode::ACCEPTED,
        ),
        // The ad tags are signed, not keyed: any Authorization is ignored, so every caller
        // gets the same answer (the pixel's GIF; the unsigned redirect's 403).
        (
            Method::GET,
            format!("/i?a={}", campaign.advertiser_id),
            None,
            Allowed::Public,
            StatusCode::OK,
        ),
        (
            Method::GET,
            format!(
                "/c?a={}&url=https%3A%2F%2Fexample.com%2F",
                campaign.advertiser_id
            ),
            None,
            Allowed::Public,
            StatusCode::FORBIDDEN,
        ),
    ];
    let client = anonymous_http();
    let mut mismatches = Vec::new();
    for (method, path, body, allowed, ok) in &cases {
        for who in EVERYONE {
            let mut request = client.request(method.clone(), server.url(path));
            if let Some(header) = callers.header(who) {
                request = request.header("authorization", header);
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = request.send().await.expect("answered");
            let status = response.status();
            let want = expected(who, *allowed, *ok);
            if status != want {
                mismatches.push(format!(
                    "{method} {path} as {who:?}: {status}, expected {want}"
                ));
                continue;
            }
            let challenge = response.headers().get("www-authenticate").cloned();
            if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
                let answer: Value = response.json().await.expect("JSON error");
                let code = if status == StatusCode::UNAUTHORIZED {
                    "unauthorized"
                } else {
                    "forbidden"
                };
                assert_eq!(answer["error"]["code"], code, "{method} {path} as {who:?}");
            }
            if status == StatusCode::UNAUTHORIZED {
                assert_eq!(
                    challenge.as_ref().and_then(|v| v.to_str().ok()),
                    Some("Bearer"),
                    "{method} {path} as {who:?}"
                );
            }
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));

    // Only the right callers' writes were stored: one impression, one click, the cap of 77.
    let summary: Value = http()
        .get(server.url(&format!(
            "{}/summary?{range}&group_by=none",
            campaign.path()
        )))
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON");
    assert_eq!(summary["totals"]["impressions"], 1, "{summary}");
    let settings: Value = http()
        .get(server.url(&campaign.path()))
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON");
    assert_eq!(settings["daily_cap"], 77, "{settings}");
}

/// An ingest key's batch holding any event of another advertiser is refused whole.
async fn an_ingest_batch_with_another_advertisers_event_stores_nothing(backend: Backend) {
    let server = backend.server().await;
    let campaign = Campaign::fresh();
    let (ingest, _) = create_key(
        &server,
        json!({"scope": "ingest", "advertiser_id": campaign.advertiser_id}),
    )
    .await;
    let others = Campaign::fresh();
    let batch = json!([
        campaign.impression(Uuid::new_v4(), Uuid::new_v4(), at("2026-10-21T10:00:00Z")),
        others.impression(Uuid::new_v4(), Uuid::new_v4(), at("2026-10-21T10:00:00Z")),
        campaign.impression(Uuid::new_v4(), Uuid::new_v4(), at("2026-10-21T10:00:00Z")),
        others.impression(Uuid::new_v4(), Uuid::new_v4(), at("2026-10-21T10:00:00Z")),
    ]);

    let response = anonymous_http()
        .post(server.url("/v1/impressions"))
        .bearer_auth(&ingest)
        .json(&batch)
        .send()
        .await
        .expect("answered");

    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    let answer: Value = response.json().await.expect("JSON");
    let indexes: Vec<u64> = answer["error"]["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|error| error["index"].as_u64())
        .collect();
    assert_eq!(indexes, [1, 3], "{answer}");
    for owner in [&campaign, &others] {
        let summary: Value = http()
            .get(server.url(&format!(
                "{}/summary?from=2026-10-21&to=2026-10-21&group_by=none",
                owner.path()
            )))
            .send()
            .await
            .expect("answered")
            .json()
            .await
            .expect("JSON");
        assert_eq!(summary["totals"]["impressions"], 0, "{summary}");
    }
}

/// Beacons only for registered sites, only from their allowed origins; `/track` pays no
/// attention to an `Authorization` header.
async fn beacons_count_only_for_registered_sites_from_allowed_origins(backend: Backend) {
    let server = backend.server().await;
    let base = server.url("");
    let (unregistered, strict) = (fresh_site(), fresh_site());
    let put = http()
        .put(server.url(&format!("/v1/sites/{strict}")))
        .json(&json!({"allowed_origins": ["https://shop.example", "https://*.shop.example"]}))
        .send()
        .await
        .expect("answered");
    assert_eq!(put.status(), StatusCode::OK);
    let registered: Value = put.json().await.expect("JSON");
    assert_eq!(registered["registered"], true, "{registered}");
    let client = anonymous_http();
    let send = |site: String, origin: Option<&'static str>, guid: &'static str| {
        let mut request = client
            .post(format!("{base}/track"))
            .header("authorization", "Bearer not-a-key")
            .form(&[
                ("site", site.as_str()),
                ("guid", guid),
                ("timestamp", "1792490400"),
            ]);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };

    let unknown_site = send(unregistered.clone(), None, "a")
        .await
        .expect("answered");
    let wrong_origin = send(strict.clone(), Some("https://evil.example"), "b")
        .await
        .expect("answered");
    let own_origin = send(strict.clone(), Some("https://shop.example"), "c")
        .await
        .expect("answered");
    let sub_origin = send(strict.clone(), Some("https://www.shop.example"), "d")
        .await
        .expect("answered");
    let server_side = send(strict.clone(), None, "e").await.expect("answered");

    assert_eq!(unknown_site.status(), StatusCode::FORBIDDEN);
    assert_eq!(wrong_origin.status(), StatusCode::FORBIDDEN);
    assert_eq!(own_origin.status(), StatusCode::NO_CONTENT);
    assert_eq!(sub_origin.status(), StatusCode::NO_CONTENT);
    assert_eq!(server_side.status(), StatusCode::NO_CONTENT);
    let query = "from=2026-10-20&to=2026-10-20";
    let visits = |site: String| {
        let url = server.url(&format!("/v1/sites/{site}/uniques?{query}"));
        async move {
            let answer: Value = http()
                .get(url)
                .send()
                .await
                .expect("answered")
                .json()
                .await
                .expect("JSON");
            answer["total"]["visits"].clone()
        }
    };
    assert_eq!(visits(unregistered).await, 0);
    assert_eq!(visits(strict.clone()).await, 3);

    // The origin rule tightened: a beacon with no page is refused too.
    let tightened = http()
        .put(server.url(&format!("/v1/sites/{strict}")))
        .json(&json!({"require_origin": true}))
        .send()
        .await
        .expect("answered");
    let answer: Value = tightened.json().await.expect("JSON");
    assert_eq!(
        answer["allowed_origins"].as_array().map(Vec::len),
        Some(2),
        "kept: {answer}"
    );
    let no_page = send(strict.clone(), None, "f").await.expect("answered");
    assert_eq!(no_page.status(), StatusCode::FORBIDDEN);
    assert_eq!(visits(strict).await, 3);
    let metrics = crate::common::metrics_text(&server).await;
    for reason in ["unregistered_site", "origin_not_allowed", "origin_required"] {
        assert!(
            metrics.contains(&format!(
                "adevents_beacons_refused_total{{reason=\"{reason}\"}}"
            )),
            "{reason}"
        );
    }
}

/// Keys are listed without secrets; a key's own fields are what a dashboard learns.
async fn keys_are_listed_without_secrets_and_know_themselves(backend: Backend) {
    let server = backend.server().await;
    let advertiser = Uuid::new_v4().to_string();
    let (secret, id) = create_key(
        &server,
        json!({"scope": "read", "advertiser_id": advertiser, "name": "dashboard"}),
    )
    .await;
    assert!(secret.starts_with("adk_") && secret.len() >= 60, "{secret}");

    let listed: Value = http()
        .get(server.url("/v1/keys"))
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON");
    let mine = listed["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .find(|key| key["id"] == id.as_str())
        .expect("the new key is listed")
        .clone();
    assert_eq!(mine["scope"], "read");
    assert_eq!(mine["advertiser_id"], advertiser.as_str());
    assert_eq!(mine["name"], "dashboard");
    assert!(
        !listed.to_string().contains(&secret),
        "no secret in a listing"
    );
    let own: Value = anonymous_http()
        .get(server.url("/v1/keys/self"))
        .bearer_auth(&secret)
        .send()
        .await
        .expect("answered")
        .json()
        .await
        .expect("JSON");
    assert_eq!(own, mine);

    for (body, field) in [
        (json!({"scope": "read"}), "advertiser_id"),
        (
            json!({"scope": "ingest", "site": "x.example"}),
            "advertiser_id",
        ),
        (
            json!({"scope": "admin", "advertiser_id": advertiser}),
            "scope",
        ),
        (json!({"scope": "owner"}), "scope"),
        (
            json!({"scope": "read", "advertiser_id": "nope"}),
            "advertiser_id",
        ),
        (json!({"scope": "metrics", "name": "n".repeat(129)}), "name"),
    ] {
        let response = http()
            .post(server.url("/v1/keys"))
            .json(&body)
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body}");
        let answer: Value = response.json().await.expect("JSON");
        assert_eq!(
            answer["error"]["errors"][0]["field"], field,
            "{body}: {answer}"
        );
    }
}

conformance!(
    every_endpoint_answers_each_caller_as_the_contract_says,
    an_ingest_batch_with_another_advertisers_event_stores_nothing,
    beacons_count_only_for_registered_sites_from_allowed_origins,
    keys_are_listed_without_secrets_and_know_themselves,
);

/// Two server processes on one keyspace: a key revoked through one stops working on the other
/// within the cache lifetime.
#[tokio::test]
async fn a_key_revoked_on_one_server_is_refused_by_another_within_the_cache_lifetime() {
    let options = || {
        let mut options = crate::common::test_options();
        options.service.settings_lifetime = Duration::from_secs(2);
        options
    };
    let first = Backend::Cassandra.server_with(options()).await;
    let second = Backend::Cassandra.server_with(options()).await;
    let (key, id) = create_key(&first, json!({"scope": "admin"})).await;
    let works_on = |server: &TestServer| {
        let request = anonymous_http()
            .get(server.url("/v1/keys/self"))
            .bearer_auth(&key);
        async move { request.send().await.expect("answered").status() == StatusCode::OK }
    };
    assert!(works_on(&first).await, "at once where it was made");
    assert!(
        eventually(Duration::from_secs(5), || works_on(&second)).await,
        "on the other process within the lifetime"
    );

    let revoked = http()
        .delete(first.url(&format!("/v1/keys/{id}")))
        .send()
        .await
        .expect("answered");
    assert_eq!(revoked.status(), StatusCode::NO_CONTENT);
    assert!(!works_on(&first).await, "at once where it was revoked");
    assert!(
        eventually(Duration::from_secs(5), || async {
            !works_on(&second).await
        })
        .await,
        "refused by the other process within the lifetime"
    );
}

/// `--metrics-public` opens `/metrics` to scrapers without a key, and only `/metrics`.
#[tokio::test]
async fn metrics_public_opens_the_metrics_only() {
    let mut options = crate::common::test_options();
    options.edge.metrics_public = true;
    let server = Backend::Embedded.server_with(options).await;
    let client = anonymous_http();

    let metrics = client
        .get(server.url("/metrics"))
        .send()
        .await
        .expect("answered");
    let keys = client
        .get(server.url("/v1/keys"))
        .send()
        .await
        .expect("answered");

    assert_eq!(metrics.status(), StatusCode::OK);
    assert_eq!(keys.status(), StatusCode::UNAUTHORIZED);
}
