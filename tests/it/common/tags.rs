//! Ad tags as an ad server writes them: a tag secret from the API, pixel and click URLs signed
//! with it (HMAC-SHA256 over the query bytes before `&s=`), fired like a browser fires them.

use super::events::Campaign;
use super::{TestServer, http};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use reqwest::StatusCode;
use serde_json::Value;
use sha2::Sha256;
use uuid::Uuid;

/// A tag secret as `POST …/tag-secrets` hands it out.
#[derive(Debug, Clone)]
pub struct Secret {
    pub id: String,
    pub bytes: Vec<u8>,
}

/// Creates a tag secret for `advertiser` with the admin key.
pub async fn create_secret(server: &TestServer, advertiser: Uuid) -> Secret {
    let response = http()
        .post(server.url(&format!("/v1/advertisers/{advertiser}/tag-secrets")))
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::CREATED);
    let body: Value = response.json().await.expect("JSON");
    Secret {
        id: body["id"].as_str().expect("id").to_owned(),
        bytes: URL_SAFE_NO_PAD
            .decode(body["secret"].as_str().expect("secret"))
            .expect("base64url"),
    }
}

/// `query&s=<signature of query>`.
pub fn signed(secret: &Secret, query: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(&secret.bytes).expect("any key length");
    mac.update(query.as_bytes());
    let signature = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    format!("{query}&s={signature}")
}

/// The unsigned query of a pixel for `impression` of `campaign` at `t` (epoch ms).
pub fn pixel_query(
    campaign: &Campaign,
    impression: Uuid,
    ad: Uuid,
    t: i64,
    secret: &Secret,
) -> String {
    format!(
        "a={}&c={}&ad={ad}&imp={impression}&u={}&t={t}&k={}",
        campaign.advertiser_id,
        campaign.campaign_id,
        Uuid::new_v4(),
        secret.id
    )
}

/// The unsigned query of a click redirect to `url` (percent-encoded here).
pub fn click_query(
    campaign: &Campaign,
    impression: Uuid,
    ad: Uuid,
    t: i64,
    url: &str,
    secret: &Secret,
) -> String {
    let url: String = url::form_urlencoded::byte_serialize(url.as_bytes()).collect();
    format!(
        "a={}&c={}&ad={ad}&imp={impression}&t={t}&url={url}&k={}",
        campaign.advertiser_id, campaign.campaign_id, secret.id
    )
}

/// A browser: no key, no redirects followed.
pub fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .expect("HTTP client")
}

/// Fires `/i?query`, asserting the answer is the GIF whatever the outcome.
pub async fn fire_pixel(server: &TestServer, query: &str, headers: &[(&str, &str)]) {
    let mut request = browser().get(server.url(&format!("/i?{query}")));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("pixel answered");
    assert_eq!(response.status(), StatusCode::OK, "/i?{query}");
    let head = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(head("content-type").as_deref(), Some("image/gif"));
    assert_eq!(head("cache-control").as_deref(), Some("no-store"));
    let body = response.bytes().await.expect("GIF");
    assert!(body.starts_with(b"GIF89a"), "a GIF");
}

/// Follows `/c?query` once: the status and the `Location`, if any.
pub async fn follow_click(
    server: &TestServer,
    query: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, Option<String>, String) {
    let mut request = browser().get(server.url(&format!("/c?{query}")));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("click answered");
    let status = response.status();
    let location = response
        .headers()
        .get("location")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    (status, location, response.text().await.unwrap_or_default())
}
