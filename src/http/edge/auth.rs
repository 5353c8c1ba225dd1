//! Who may call what, decided from the request's head before its body is read: the route's
//! need (one table, [`need`]), the bearer key (looked up in this process's memory, no store
//! read), and the path's advertiser or site against the key's owner. An ingestion batch's
//! events are checked against the key's advertiser after parsing, by the handler.

use crate::access::{AuthMode, Caller};
use crate::domain::access::Grant;
use crate::domain::beacon::SiteId;
use crate::domain::echo::echo;
use crate::domain::ids::AdvertiserId;
use crate::http::AppState;
use crate::http::edge::error::ApiError;
use axum::extract::{MatchedPath, RawPathParams, Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// What a route asks of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// Anyone: beacons, health, readiness, this document, CORS preflights.
    Public,
    /// Any valid key (`GET /v1/keys/self`, `GET /v1/freshness`).
    AnyKey,
    Admin,
    /// An `ingest` key (its advertiser's events only, checked per event) or admin.
    Ingest,
    /// A `read` key of the path's advertiser, or admin.
    CampaignRead,
    /// A `read` or `ingest` key of the path's advertiser (ad servers poll delivery), or admin.
    CampaignDelivery,
    /// A `read` key of the path's site, or admin.
    SiteRead,
    /// A `metrics` or admin key, unless `--metrics-public`.
    Metrics,
}

const CAMPAIGN: &str = "/v1/advertisers/{advertiser_id}/campaigns/{campaign_id}";
const SITE: &str = "/v1/sites/{site}";

/// The need of every route, by method and route template. A route not listed needs admin:
/// an endpoint added later is closed until it is given its scope here.
pub(crate) fn need(method: &Method, route: &str) -> Need {
    if method == Method::OPTIONS {
        return Need::Public;
    }
    // A HEAD is a GET without its body: it needs what the GET needs.
    let method = if method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    match (method, route) {
        // The ad tags are signed instead, and ignore any key.
        (_, "/healthz" | "/readyz" | "/openapi.json" | "/track" | "/i" | "/c" | "/v") => {
            Need::Public
        }
        // The browser's assets: the dashboard asks for a key itself, per request it makes.
        ("GET", "/t.js" | "/v.js" | "/dashboard" | "/dashboard/app.js" | "/dashboard/app.css") => {
            Need::Public
        }
        (_, "/metrics") => Need::Metrics,
        ("POST", "/v1/impressions" | "/v1/clicks" | "/v1/conversions") => Need::Ingest,
        ("GET", "/v1/keys/self" | "/v1/freshness") => Need::AnyKey,
        ("GET", route) if route == format!("{CAMPAIGN}/delivery") => Need::CampaignDelivery,
        (
            "GET",
            "/v1/advertisers/{advertiser_id}/campaigns"
            | "/v1/advertisers/{advertiser_id}/conversions",
        ) => Need::CampaignRead,
        ("GET", route) if route.starts_with(CAMPAIGN) => Need::CampaignRead,
        ("GET", route) if route.starts_with(SITE) => Need::SiteRead,
        _ => Need::Admin,
    }
}

/// Authenticates and authorises every routed request; runs after routing (it needs the route
/// template) and before any handler reads the body.
pub(crate) async fn authorize(
    State(state): State<AppState>,
    path_params: RawPathParams,
    mut request: Request,
    next: Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_default();
    let need = need(request.method(), &route);
    if need == Need::Public
        || (need == Need::Metrics && state.options.metrics_public)
        || state.access.mode() == AuthMode::Off
    {
        request.extensions_mut().insert(Caller {
            key: None,
            grant: Grant::Admin,
        });
        return next.run(request).await;
    }
    if !state.access.is_ready() {
        return ApiError::AccessNotLoaded.into_response();
    }
    let caller = match bearer(&request).and_then(|token| state.access.authenticate(token)) {
        Some(caller) => caller,
        None => return ApiError::Unauthorized.into_response(),
    };
    let param = |name: &str| {
        path_params
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value)
    };
    let path_advertiser = param("advertiser_id").and_then(|id| id.parse::<AdvertiserId>().ok());
    let path_site = param("site").and_then(|site| SiteId::parse(site).ok());
    let allowed = match (&caller.grant, need) {
        (Grant::Admin, _) => true,
        (_, Need::Public | Need::AnyKey) => true,
        (Grant::Ingest(_), Need::Ingest) => true,
        (Grant::ReadAdvertiser(owner), Need::CampaignRead | Need::CampaignDelivery)
        | (Grant::Ingest(owner), Need::CampaignDelivery) => path_advertiser == Some(*owner),
        (Grant::ReadSite(owner), Need::SiteRead) => path_site.as_ref() == Some(owner),
        (Grant::Metrics, Need::Metrics) => true,
        _ => false,
    };
    if !allowed {
        let scope = caller.grant.scope();
        let message = match (&caller.grant, path_advertiser, &path_site) {
            (Grant::ReadAdvertiser(owner) | Grant::Ingest(owner), Some(asked), _)
                if asked != *owner =>
            {
                format!("this {scope} key belongs to another advertiser than {asked}")
            }
            (Grant::ReadSite(owner), _, Some(asked)) if asked != owner => format!(
                "this {scope} key belongs to another site than {}",
                echo(asked.as_str())
            ),
            _ => format!(
                "this {scope} key may not {} {}",
                request.method(),
                echo(request.uri().path())
            ),
        };
        return ApiError::Forbidden(message).into_response();
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// The token of an `Authorization: Bearer <token>` header; any other scheme, an empty or a
/// malformed header is no token.
fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && !token.contains(' '))
        .then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_has_the_need_the_contract_gives_it() {
        let campaign = format!("{CAMPAIGN}/summary");
        assert_eq!(need(&Method::POST, "/track"), Need::Public);
        assert_eq!(need(&Method::OPTIONS, "/v1/impressions"), Need::Public);
        assert_eq!(need(&Method::POST, "/v1/impressions"), Need::Ingest);
        assert_eq!(need(&Method::GET, &campaign), Need::CampaignRead);
        assert_eq!(need(&Method::GET, CAMPAIGN), Need::CampaignRead);
        assert_eq!(need(&Method::PUT, CAMPAIGN), Need::Admin);
        assert_eq!(need(&Method::GET, SITE), Need::SiteRead);
        assert_eq!(need(&Method::PUT, SITE), Need::Admin);
        assert_eq!(need(&Method::GET, "/v1/keys"), Need::Admin);
        assert_eq!(need(&Method::GET, "/v1/keys/self"), Need::AnyKey);
        assert_eq!(need(&Method::GET, "/v1/freshness"), Need::AnyKey);
        let campaigns = "/v1/advertisers/{advertiser_id}/campaigns";
        assert_eq!(need(&Method::GET, campaigns), Need::CampaignRead);
        assert_eq!(need(&Method::GET, "/v1/sites"), Need::Admin);
        assert_eq!(
            need(&Method::GET, "/v1/sites/{site}/features"),
            Need::SiteRead
        );
        let delivery = format!("{CAMPAIGN}/delivery");
        assert_eq!(need(&Method::GET, &delivery), Need::CampaignDelivery);
        assert_eq!(need(&Method::GET, "/i"), Need::Public);
        assert_eq!(need(&Method::GET, "/t.js"), Need::Public);
        assert_eq!(need(&Method::GET, "/dashboard"), Need::Public);
        assert_eq!(need(&Method::POST, "/dashboard"), Need::Admin);
        assert_eq!(need(&Method::HEAD, "/t.js"), Need::Public);
        assert_eq!(need(&Method::HEAD, "/dashboard"), Need::Public);
        assert_eq!(need(&Method::HEAD, &campaign), Need::CampaignRead);
        assert_eq!(need(&Method::GET, "/c"), Need::Public);
        assert_eq!(need(&Method::POST, "/v"), Need::Public);
        assert_eq!(need(&Method::GET, "/v.js"), Need::Public);
        let secrets = "/v1/advertisers/{advertiser_id}/tag-secrets";
        assert_eq!(need(&Method::GET, secrets), Need::Admin);
        assert_eq!(need(&Method::POST, secrets), Need::Admin);
        assert_eq!(need(&Method::GET, "/metrics"), Need::Metrics);
        assert_eq!(need(&Method::GET, "/v1/something-new"), Need::Admin);
    }
}
