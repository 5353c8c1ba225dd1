//! The HTTP layer: routing, extraction and error mapping. Handlers parse what a client sent
//! into domain values, ask a service (ingestion, beacons, queries, settings) and turn the
//! answer into a typed, documented response; they never reach the store.

mod auth;
mod beacon_params;
mod body;
mod browser;
mod campaigns;
mod client_ip;
mod delivery;
mod error;
mod events;
mod export;
mod health;
mod json_errors;
mod keys;
mod limits;
mod listings;
pub mod metrics;
mod openapi;
mod params;
mod report;
mod request_id;
mod settings_wire;
mod sites;
mod state;
mod summary;
mod tag_query;
mod tag_secrets;
mod tags;
mod track;
mod unread_body;
mod viewer;
mod wire;

pub use body::BodyLimits;
pub use error::{ApiError, FieldError};
pub use limits::{ConnectionLimits, ConnectionSlots, InFlight, RateLimits};
pub use state::{AppState, EdgeOptions, Handlers};

use crate::random_id::MakeRandomRequestId;
use axum::http::{HeaderName, Method, Request, header};
use axum::response::IntoResponse;
use axum::routing::head;
use std::convert::Infallible;
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
        .routes(routes!(campaigns::get_settings, campaigns::put_settings))
        .routes(routes!(summary::get_summary))
        .routes(routes!(delivery::get_delivery))
        .routes(routes!(delivery::get_freshness))
        .routes(routes!(report::get_report))
        .routes(routes!(export::get_impressions))
        .routes(routes!(export::get_recent_impressions))
        .routes(routes!(sites::get_settings, sites::put_settings))
        .routes(routes!(sites::get_uniques))
        .routes(routes!(listings::list_campaigns))
        .routes(routes!(listings::list_sites))
        .routes(routes!(listings::get_features));
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
            track::get_track,
            track::post_track,
            track::options_track
        ))
        // Link checkers and prefetchers: answered, not recorded, not worth documenting.
        .route("/track", head(track::head_track))
        .layer(
            CorsLayer::new()
                .allow_origin(tower_http::cors::Any)
                .allow_methods([Method::GET, Method::POST])
                .allow_headers([header::CONTENT_TYPE])
                .max_age(Duration::from_secs(86_400)),
        )
}

/// Ad tags are requested by viewers' browsers, from any page; they answer no CORS (an image and
/// a navigation need none).
fn ad_tags() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(tags::get_pixel))
        .routes(routes!(tags::get_click))
        .route("/i", head(tags::head_pixel))
        .route("/c", head(tags::head_click))
}

/// The whole API as one service, for the server's connections.
pub type App = BoxCloneSyncService<axum::extract::Request, axum::response::Response, Infallible>;

/// The whole API: routes, their middleware and the framework's own answers in JSON.
pub fn router(state: AppState) -> App {
    metrics::prometheus();
    let (routes, document) = OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(metrics::get_metrics))
        .routes(routes!(openapi::get_openapi))
        .routes(routes!(events::post_impressions))
        .routes(routes!(events::post_clicks))
        .routes(routes!(keys::create_key, keys::list_keys))
        .routes(routes!(keys::delete_key))
        .routes(routes!(keys::key_self))
        .routes(routes!(
            tag_secrets::create_tag_secret,
            tag_secrets::list_tag_secrets
        ))
        .routes(routes!(tag_secrets::delete_tag_secret))
        .routes(routes!(browser::tracker))
        .routes(routes!(browser::dashboard))
        .route(
            "/dashboard/app.js",
            axum::routing::get(browser::dashboard_script),
        )
        .route(
            "/dashboard/app.css",
            axum::routing::get(browser::dashboard_style),
        )
        .merge(ad_tags())
        .merge(queries(&state))
        .merge(beacons())
        .split_for_parts();
    openapi::publish(document);
    let body_timeout = state.options.body_timeout;
    let routed = routes
        // After routing (they need the route template), before any handler reads a body: the
        // key first (a refused caller spends no slot), then the caps on work in flight.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            limits::shed,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authorize,
        ))
        .fallback(error::not_found)
        // Labelled with the route template, which only routing finds.
        .layer(axum::middleware::from_fn(metrics::track_requests))
        .with_state(state);
    // The rest wraps the router from outside: a layer added to the router itself wraps every
    // route in one more boxed service, and axum clones a route's whole stack for each request.
    let app = ServiceBuilder::new()
        // Outermost: a caller's X-Request-Id is kept (if it is short and printable),
        // otherwise one is made, and it is echoed back so a client can quote it when
        // reporting a problem.
        .map_request(|request| request_id::drop_unquotable_request_id(request, &REQUEST_ID))
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
            unread_body::close_after_unread_body,
        ))
        .layer(axum::middleware::from_fn(json_errors::json_errors))
        .layer(axum::middleware::from_fn(error::log_server_errors))
        // A body that does not arrive in time ends its request with a 408.
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            body_timeout,
        ))
        .service(routed);
    App::new(app)
}
