//! `GET /i` (the impression pixel) and `GET /c` (the click redirect): URLs an ad server signs
//! with its advertiser's tag secret and writes into the ad, requested by the viewer's browser.
//! A tag counts through the same ingestion path as a POSTed event. The pixel always answers its
//! GIF (a browser does nothing with an error); the redirect answers 302 only for a valid,
//! unexpired signature and an http(s) URL, and otherwise a 403 with no `Location`, so it can
//! never send a viewer where its advertiser did not sign.

use crate::domain::event::{Click, Impression};
use crate::domain::ids::{
    AdId, AdvertiserId, CampaignId, CampaignKey, ImpressionId, UserId, parse_uuid,
};
use crate::domain::tag::{TagSecretId, TagTimeRefusal, admits_at};
use crate::domain::time::EventTime;
use crate::domain::user_data::UserData;
use crate::http::AppState;
use crate::http::beacons::track::pixel_response;
use crate::http::edge::client_ip::client_ip;
use crate::http::edge::error::{ApiError, ErrorAnswer};
use crate::http::edge::openapi::texts::Id;
use crate::http::edge::viewer::Viewer;
use crate::http::tags::tag_query::{self, QueryRefusal, SignedQuery, TagShape};
use axum::extract::State;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// Why a tag is not counted (and a click link not followed). Messages name the problem,
/// never echo a value or say which secret exists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum TagRefusal {
    #[error("{0}")]
    Query(#[from] QueryRefusal),
    #[error("the parameter {0} is not valid")]
    Value(&'static str),
    #[error("the signature does not verify")]
    Signature,
    #[error("{0}")]
    Time(#[from] TagTimeRefusal),
    #[error("the parameter url is not an http or https URL")]
    NotWebUrl,
}

impl TagRefusal {
    /// The metric label: a fixed set.
    pub(super) fn label(&self) -> &'static str {
        match self {
            Self::Query(_) => "malformed",
            Self::Value(_) => "invalid_value",
            Self::Signature => "bad_signature",
            Self::Time(TagTimeRefusal::Expired) => "expired",
            Self::Time(TagTimeRefusal::Early) => "early",
            Self::NotWebUrl => "not_web_url",
        }
    }
}

/// What became of one tag request, for `adevents_tags_total`.
pub(super) fn count(tag: &'static str, outcome: &'static str) {
    metrics::counter!("adevents_tags_total", "tag" => tag, "outcome" => outcome).increment(1);
}

#[utoipa::path(
    get,
    path = "/i",
    tag = "ad tags",
    summary = "The impression pixel: counts a signed impression, always answers a 1×1 GIF.",
    description = "`a`, `c`, `ad`, `imp`, `u` (UUIDs), `t` (epoch ms), optional `d` (a \
        percent-encoded JSON object: the user_data), `k` (tag secret id), then `s`: \
        base64url_nopad(HMAC-SHA256(secret, the query bytes before `&s=`)). Counted when the \
        signature verifies with a secret of advertiser `a` and the request arrives within \
        `--tag-ttl` after `t` (or up to 10 minutes before it). `Authorization` is ignored.",
    responses((status = 200, description = "A 1×1 transparent GIF, `Cache-Control: no-store`, whatever the outcome", content_type = "image/gif"))
)]
pub(crate) async fn get_pixel(State(state): State<AppState>, parts: Parts) -> Response {
    count("pixel", pixel(&state, &parts).await);
    pixel_response()
}

/// `HEAD /i`: the GIF's head, counting nothing (link checkers, prefetchers).
pub(crate) async fn head_pixel() -> Response {
    pixel_response()
}

async fn pixel(state: &AppState, parts: &Parts) -> &'static str {
    let address = client_ip(parts, &state.options.trusted_proxies);
    // Before the signature: past its rate, an address costs no HMAC and no store read.
    if state.limiters.admit_beacon(address).is_err() {
        return "rate_limited";
    }
    let now = Utc::now();
    let query = parts.uri.query().unwrap_or_default();
    let impression = match signed_impression(state, query, now, state.options.tag_ttl).await {
        Ok(impression) => impression,
        Err(refusal) => return refusal.label(),
    };
    // Its `t` names a UTC day past --retain-raw (a long --tag-ttl): the viewer still gets the
    // image, and nothing of that day is stored any more. A click (`/c`) is at the time it
    // arrives, whose day is always kept.
    if state
        .options
        .retain_raw
        .expired(impression.timestamp.utc_day(), now)
    {
        return "past_retention";
    }
    let viewer = Viewer::of(&parts.headers, address);
    let impression = Impression {
        // The classifier below still judges the full address, from `viewer`.
        user_ip: state.options.store_ip.stored(address),
        invalid: state.classifier.classify(viewer.signals()),
        user_agent: viewer.user_agent,
        pixel_arrival: Some(now),
        ..impression
    };
    // Ingestion drops it: a re-sent pixel of an erased subject.
    if state.ingestor.is_erased(
        impression.user_id,
        impression.campaign.advertiser_id,
        impression.timestamp.instant(),
    ) {
        return dropped_as_erased();
    }
    let Some(_slot) = state.limiters.try_write_slot() else {
        return "overloaded";
    };
    match state.ingestor.impressions(vec![impression]).await {
        Ok(()) => "counted",
        Err(error) => {
            tracing::warn!(error = %error.chain(), "a pixel's impression was not stored");
            "store_error"
        }
    }
}

/// The impression a signed pixel URL describes, without its viewer, when it arrives within
/// `ttl` after its `t` (the pixel's own, or that and the view window for a view report).
pub(super) async fn signed_impression(
    state: &AppState,
    query: &str,
    now: DateTime<Utc>,
    ttl: std::time::Duration,
) -> Result<Impression, TagRefusal> {
    let (signed, campaign) = verified(state, query, &tag_query::PIXEL).await?;
    let issued = issued_at(&signed, now)?;
    admits_at(issued.instant(), now, ttl)?;
    let user_data = match signed.get("d") {
        None => UserData::default(),
        Some(text) => serde_json::from_str::<BTreeMap<String, String>>(text)
            .ok()
            .and_then(|entries| UserData::new(entries).ok())
            .ok_or(TagRefusal::Value("d"))?,
    };
    Ok(Impression {
        impression_id: ImpressionId::new(uuid(&signed, "imp")?),
        campaign,
        ad_id: AdId::new(uuid(&signed, "ad")?),
        user_id: UserId::new(uuid(&signed, "u")?),
        timestamp: issued,
        user_ip: None,
        user_data,
        user_agent: None,
        invalid: None,
        pixel_arrival: None,
        ip_is_viewers: true,
    })
}

/// The parameters of a signed click link, in the order they are signed (`s` last), for the
/// document.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct ClickLink {
    /// The advertiser.
    #[param(value_type = Id, inline)]
    a: String,
    /// The campaign.
    #[param(value_type = Id, inline)]
    c: String,
    /// The ad.
    #[param(value_type = Id, inline)]
    ad: String,
    /// The impression clicked.
    #[param(value_type = Id, inline)]
    imp: String,
    /// The impression's time, epoch milliseconds.
    t: i64,
    /// Where the viewer goes: an http or https URL.
    url: String,
    /// The tag secret's id.
    #[param(value_type = Id, inline)]
    k: String,
    /// base64url_nopad(HMAC-SHA256(secret, the query bytes before `&s=`)).
    #[param(pattern = "^[A-Za-z0-9_-]+$")]
    s: String,
}

#[utoipa::path(
    get,
    path = "/c",
    tag = "ad tags",
    summary = "The click redirect: 302 to a signed http(s) URL, counting a click of the impression.",
    description = "`a`, `c`, `ad`, `imp` (UUIDs), `t` (the impression's epoch ms), `url` (a \
        percent-encoded http or https URL), `k`, then `s`, signed like the pixel. Counted as a \
        click of `imp` at the receive time when it arrives within `--click-ttl` after `t`. \
        Nothing may follow `s`; no parameter may repeat. `Authorization` is ignored.",
    params(ClickLink),
    responses(
        (status = 302, description = "To `url`; the click is counted (past the address's rate or the in-flight cap: redirected, uncounted)"),
        (status = 403, description = "A missing or bad signature, an expired link, a malformed query or a URL that is not http(s): no `Location`", body = ErrorAnswer),
    )
)]
pub(crate) async fn get_click(State(state): State<AppState>, parts: Parts) -> Response {
    click(&state, &parts, true).await
}

/// `HEAD /c`: the same answer as `GET`, counting nothing (link checkers, unfurlers).
pub(crate) async fn head_click(State(state): State<AppState>, parts: Parts) -> Response {
    click(&state, &parts, false).await
}

async fn click(state: &AppState, parts: &Parts, record: bool) -> Response {
    let now = Utc::now();
    let query = parts.uri.query().unwrap_or_default();
    let (click, location) = match signed_click(state, query, now).await {
        Ok(verified) => verified,
        Err(refusal) => {
            count("click", refusal.label());
            return ApiError::Forbidden(format!("the click link is refused: {refusal}"))
                .into_response();
        }
    };
    if record {
        count("click", record_click(state, parts, click).await);
    }
    (
        StatusCode::FOUND,
        [
            (header::LOCATION, location),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
    )
        .into_response()
}

/// Stores the click unless the address is past its rate or the server past its cap.
async fn record_click(state: &AppState, parts: &Parts, click: Click) -> &'static str {
    let address = client_ip(parts, &state.options.trusted_proxies);
    if state.limiters.admit_beacon(address).is_err() {
        return "rate_limited";
    }
    let viewer = Viewer::of(&parts.headers, address);
    let click = Click {
        invalid: state.classifier.classify(viewer.signals()),
        user_agent: viewer.user_agent,
        ..click
    };
    // Ingestion drops it: a click of an impression an erasure removed.
    if state
        .ingestor
        .is_of_erased_impression(click.campaign.advertiser_id, click.impression_id)
    {
        return dropped_as_erased();
    }
    let Some(_slot) = state.limiters.try_write_slot() else {
        return "overloaded";
    };
    match state.ingestor.clicks(vec![click]).await {
        Ok(()) => "counted",
        Err(error) => {
            // The viewer still reaches the advertiser's page: losing the redirect would lose
            // more than the count.
            tracing::warn!(error = %error.chain(), "a redirect's click was not stored");
            "store_error"
        }
    }
}

/// The click a signed redirect URL describes (at `now`), and where it leads.
async fn signed_click(
    state: &AppState,
    query: &str,
    now: DateTime<Utc>,
) -> Result<(Click, HeaderValue), TagRefusal> {
    let (signed, campaign) = verified(state, query, &tag_query::CLICK).await?;
    let location = web_location(signed.get("url").unwrap_or_default())?;
    let issued = issued_at(&signed, now)?;
    admits_at(issued.instant(), now, state.options.click_ttl)?;
    let click = Click {
        impression_id: ImpressionId::new(uuid(&signed, "imp")?),
        campaign,
        ad_id: AdId::new(uuid(&signed, "ad")?),
        timestamp: EventTime::new(now, now).map_err(|_| TagRefusal::Value("t"))?,
        user_agent: None,
        invalid: None,
    };
    Ok((click, location))
}

/// The query read in `shape`, its signature verified with the secret `k` of advertiser `a`.
async fn verified<'q>(
    state: &AppState,
    query: &'q str,
    shape: &TagShape,
) -> Result<(SignedQuery<'q>, CampaignKey), TagRefusal> {
    let signed = tag_query::parse(query, shape)?;
    let advertiser = AdvertiserId::new(uuid(&signed, "a")?);
    let secret_id = signed
        .get("k")
        .and_then(TagSecretId::parse)
        .ok_or(TagRefusal::Value("k"))?;
    // An unknown secret and a wrong signature look the same from outside.
    let secret = state
        .access
        .tag_secret(advertiser, secret_id)
        .await
        .ok_or(TagRefusal::Signature)?;
    if !secret.verifies(signed.signed, signed.signature) {
        return Err(TagRefusal::Signature);
    }
    let campaign = CampaignKey {
        advertiser_id: advertiser,
        campaign_id: CampaignId::new(uuid(&signed, "c")?),
    };
    Ok((signed, campaign))
}

fn uuid(signed: &SignedQuery<'_>, name: &'static str) -> Result<uuid::Uuid, TagRefusal> {
    signed
        .get(name)
        .and_then(|text| parse_uuid(text).ok())
        .ok_or(TagRefusal::Value(name))
}

/// The tag's `t`, epoch milliseconds, as an event time.
fn issued_at(signed: &SignedQuery<'_>, now: DateTime<Utc>) -> Result<EventTime, TagRefusal> {
    let millis = signed
        .get("t")
        .and_then(|text| text.parse::<i64>().ok())
        .ok_or(TagRefusal::Value("t"))?;
    EventTime::from_epoch_millis(millis, now).map_err(|error| match error {
        crate::domain::time::EventTimeError::InTheFuture => TagRefusal::Time(TagTimeRefusal::Early),
        _ => TagRefusal::Value("t"),
    })
}

/// The `Location` of a redirect: an absolute http or https URL with a host. The signed text is
/// kept as it is when it is plain visible ASCII; otherwise its normalised form (percent-encoded
/// path, punycode host), which a browser resolves to the same place.
fn web_location(url: &str) -> Result<HeaderValue, TagRefusal> {
    let parsed = url::Url::parse(url).map_err(|_| TagRefusal::NotWebUrl)?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none_or(str::is_empty) {
        return Err(TagRefusal::NotWebUrl);
    }
    let plain = url
        .bytes()
        .all(|byte| byte.is_ascii_graphic() && byte != b'\\');
    let text = if plain { url } else { parsed.as_str() };
    HeaderValue::from_str(text).map_err(|_| TagRefusal::NotWebUrl)
}

/// A tag's event an erasure removed: counted with the dropped events of every other path.
fn dropped_as_erased() -> &'static str {
    metrics::counter!("adevents_erased_events_dropped_total").increment(1);
    "erased"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_absolute_http_and_https_urls_are_redirect_targets() {
        for url in [
            "https://example.com/landing?x=1",
            "http://example.com",
            "HTTPS://EXAMPLE.COM/a",
        ] {
            assert!(web_location(url).is_ok(), "{url}");
        }
        for url in [
            "javascript:alert(1)",
            "data:text/html,hi",
            "//evil.example/",
            "/relative",
            "ftp://example.com/",
            "https://",
            "",
        ] {
            assert_eq!(web_location(url), Err(TagRefusal::NotWebUrl), "{url:?}");
        }
        // A line break cannot split the answer's head: the URL parser drops it.
        let split = web_location("https://example.com/\r\nSet-Cookie: x=1").expect("parsed");
        assert!(
            !split
                .as_bytes()
                .iter()
                .any(|byte| *byte == b'\r' || *byte == b'\n')
        );
        let unicode = web_location("https://例え.jp/ü").expect("an IDN URL");
        assert_eq!(unicode, "https://xn--r8jz45g.jp/%C3%BC");
    }
}
