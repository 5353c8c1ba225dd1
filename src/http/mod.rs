//! The HTTP layer: routing, extraction and error mapping. Handlers parse what a client sent
//! into domain values, ask a service and turn the answer into a typed, documented response;
//! they never reach the store. One folder per endpoint family:
//! - [`ingestion`]: impressions and clicks from ad servers;
//! - [`beacons`]: `/track` from customers' pages;
//! - [`tags`]: the signed ad tags viewers' browsers request (`/i`, `/c`);
//! - [`browser`]: files served to browsers (the tracker script, the dashboard);
//! - [`queries`]: summaries, reports, exports, uniques, listings, delivery, freshness;
//! - [`admin`]: settings, keys, tag secrets;
//! - [`edge`]: what every endpoint shares (keys, limits, bodies, parameters, client address,
//!   errors, request ids, metrics, health, the OpenAPI document).
//!
//! [`state`] is what the handlers share; this file assembles the router and its layers.

mod admin;
mod beacons;
mod browser;
mod edge;
mod ingestion;
mod privacy;
mod queries;
mod state;
mod tags;

pub use edge::body::BodyLimits;
pub use edge::limits::{ConnectionLimits, InFlight, RateLimits};
pub(crate) use state::{AppState, EdgeOptions, Handlers};

use crate::random_id::MakeRandomRequestId;
use axum::http::{HeaderName, HeaderValue, Method, Request, header};
use axum::response::IntoResponse;
use axum::routing::head;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceBuilder;
use tower::util::BoxCloneSyncService;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::{DefaultOnFailure, TraceLayer};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The dashboards' endpoints, with CORS for the origins an operator lists.
fn queries(state: &AppState) -> OpenApiRouter<AppState> {
    let queries = OpenApiRouter::new()
        .routes(routes!(
            admin::campaigns::get_settings,
            admin::campaigns::put_settings
        ))
        .routes(routes!(queries::summary::get_summary))
        .routes(routes!(queries::delivery::get_delivery))
        .routes(routes!(queries::delivery::get_freshness))
        .routes(routes!(queries::report::get_report))
        .routes(routes!(queries::export::get_impressions))
        .routes(routes!(queries::export::get_recent_impressions))
        .routes(routes!(
            admin::sites::get_settings,
            admin::sites::put_settings
        ))
        .routes(routes!(queries::uniques::get_uniques))
        .routes(routes!(queries::conversions::get_conversions))
        .routes(routes!(queries::listings::list_campaigns))
        .routes(routes!(queries::listings::list_sites))
        .routes(routes!(queries::listings::get_features));
    if state.options.cors_origins.is_empty() {
        return queries;
    }
    queries.layer(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(state.options.cors_origins.clone()))
            .allow_methods([Method::GET])
            .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION])
            .max_age(Duration::from_secs(3600)),
    )
}

/// Beacons come from every customer's pages: any origin may send them.
fn beacons() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(
            beacons::track::get_track,
            beacons::track::post_track,
            beacons::track::options_track
        ))
        // Link checkers and prefetchers: answered, not recorded, not worth documenting.
        .route("/track", head(beacons::track::head_track))
        .layer(
            CorsLayer::new()
                .allow_origin(tower_http::cors::Any)
                .allow_methods([Method::GET, Method::POST])
                .allow_headers([header::CONTENT_TYPE])
                .max_age(Duration::from_secs(86_400)),
        )
}

/// Ad tags are requested by viewers' browsers, from any page; they answer no CORS (an image and
/// a navigation need none), but view reports are posted by a script on any page, as beacons.
fn ad_tags() -> OpenApiRouter<AppState> {
    let view_reports = OpenApiRouter::new()
        .routes(routes!(tags::view_report::post_view_report))
        .route(
            "/v",
            axum::routing::options(tags::view_report::options_view_report),
        )
        .layer(
            CorsLayer::new()
                .allow_origin(tower_http::cors::Any)
                .allow_methods([Method::POST])
                .allow_headers([header::CONTENT_TYPE])
                .max_age(Duration::from_secs(86_400)),
        );
    OpenApiRouter::new()
        .routes(routes!(tags::pixel_click::get_pixel))
        .routes(routes!(tags::pixel_click::get_click))
        .route("/i", head(tags::pixel_click::head_pixel))
        .route("/c", head(tags::pixel_click::head_click))
        .merge(view_reports)
}

/// The whole API as one service, for the server's connections.
pub(crate) type App =
    BoxCloneSyncService<axum::extract::Request, axum::response::Response, Infallible>;

/// The whole API: routes, their middleware and the framework's own answers in JSON.
pub(crate) fn router(state: AppState) -> App {
    edge::metrics::prometheus();
    let (routes, document) = OpenApiRouter::with_openapi(edge::openapi::ApiDoc::openapi())
        .routes(routes!(edge::health::healthz))
        .routes(routes!(edge::health::readyz))
        .routes(routes!(edge::metrics::get_metrics))
        .routes(routes!(edge::openapi::get_openapi))
        .routes(routes!(ingestion::events::post_impressions))
        .routes(routes!(ingestion::events::post_clicks))
        .routes(routes!(ingestion::events::post_conversions))
        .routes(routes!(admin::keys::create_key, admin::keys::list_keys))
        .routes(routes!(admin::keys::delete_key))
        .routes(routes!(admin::keys::key_self))
        .routes(routes!(
            admin::tag_secrets::create_tag_secret,
            admin::tag_secrets::list_tag_secrets
        ))
        .routes(routes!(admin::tag_secrets::delete_tag_secret))
        .routes(routes!(privacy::erasures::post_erasure))
        .routes(routes!(privacy::erasures::get_erasure))
        .routes(routes!(privacy::subjects::get_subject))
        .routes(routes!(browser::assets::tracker))
        .routes(routes!(browser::assets::measurement_script))
        .routes(routes!(browser::assets::dashboard))
        .route(
            "/dashboard/app.js",
            axum::routing::get(browser::assets::dashboard_script),
        )
        .route(
            "/dashboard/app.css",
            axum::routing::get(browser::assets::dashboard_style),
        )
        .merge(ad_tags())
        .merge(queries(&state))
        .merge(beacons())
        .split_for_parts();
    edge::openapi::publish(document);
    let body_timeout = state.options.body_timeout;
    let cors_origins: Arc<[HeaderValue]> = state.options.cors_origins.clone().into();
    let routed = routes
        // After routing (they need the route template), before any handler reads a body: the
        // key first (a refused caller spends no slot), then the caps on work in flight.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            edge::limits::shed,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            edge::auth::authorize,
        ))
        .fallback(edge::error::not_found)
        // Labelled with the route template, which only routing finds.
        .layer(axum::middleware::from_fn(edge::metrics::track_requests))
        .with_state(state);
    // The rest wraps the router from outside: a layer added to the router itself wraps every
    // route in one more boxed service, and axum clones a route's whole stack for each request.
    let app = ServiceBuilder::new()
        // Outermost: a caller's X-Request-Id is kept (if it is short and printable),
        // otherwise one is made, and it is echoed back so a client can quote it when
        // reporting a problem.
        .map_request(|request| edge::request_id::drop_unquotable_request_id(request, &REQUEST_ID))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRandomRequestId))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .map_response(IntoResponse::into_response)
        .layer(
            TraceLayer::new_for_http()
                // A 5xx is logged once, with its cause, by `log_server_errors`.
                .on_failure(DefaultOnFailure::new().level(tracing::Level::DEBUG))
                .make_span_with(|request: &Request<_>| {
                    let request_id = request
                        .headers()
                        .get(&REQUEST_ID)
                        .and_then(|value| value.to_str().ok())
                        .unwrap_or_default();
                    tracing::info_span!(
                        "request",
                        method = %request.method(),
                        path = %request.uri().path(),
                        request_id,
                    )
                }),
        )
        .layer(axum::middleware::from_fn(
            edge::unread_body::close_after_unread_body,
        ))
        .layer(axum::middleware::from_fn(edge::json_errors::json_errors))
        .option_layer((!cors_origins.is_empty()).then(|| {
            axum::middleware::from_fn_with_state(cors_origins, edge::cors::refusals_readable)
        }))
        .layer(axum::middleware::from_fn(edge::error::log_server_errors))
        // A body that does not arrive in time ends its request with a 408.
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            body_timeout,
        ))
        .service(routed);
    App::new(app)
}
