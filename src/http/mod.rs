//! The HTTP layer: routing, extraction and error mapping. It speaks to the store only through
//! the [`Store`] trait and the ingestion and query services, never in CQL.

mod body;
mod campaigns;
mod client_ip;
mod error;
mod events;
mod export;
mod health;
mod json_errors;
pub mod metrics;
mod openapi;
mod params;
mod report;
mod sites;
mod summary;
mod track;
mod wire;

pub use body::BodyLimits;
pub use error::{ApiError, FieldError};

use crate::beacons::BeaconIngestor;
use crate::beacons::live::LiveSketches;
use crate::domain::beacon::BeaconRules;
use crate::ingest::Ingestor;
use crate::query::FanOut;
use crate::query::aggregate::BillableWindow;
use crate::rollup::SealingOptions;
use crate::settings::SettingsCache;
use crate::store::Store;
use crate::store::instrumented::Instrumented;
use axum::Router;
use axum::http::{HeaderName, HeaderValue, Method, Request, header};
use axum::routing::{get, post};
use ipnet::IpNet;
use std::sync::Arc;
use std::time::Duration;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

/// Tunables of the HTTP service, with the defaults API.md documents.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    pub body_limits: BodyLimits,
    /// Proxies whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<IpNet>,
    pub fan_out: FanOut,
    /// Partitions written at once for one ingestion request.
    pub write_concurrency: usize,
    /// How long campaign settings are cached in the process.
    pub settings_lifetime: Duration,
    /// Browser origins (dashboards) allowed to call the query endpoints; none by default.
    pub cors_origins: Vec<HeaderValue>,
    /// What a `/track` beacon may carry.
    pub beacon_rules: BeaconRules,
    /// How often live unique-visitor sketches are stored.
    pub sketch_flush_interval: Duration,
    /// Billable impressions count once per user and campaign in each window this long.
    pub billable_window: BillableWindow,
    /// How many UTC days before today `impressions/recent` looks back.
    pub recent_lookback_days: u32,
    /// When closed days are sealed into rollups (the grace for late events, ...).
    pub sealing: SealingOptions,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        Self {
            body_limits: BodyLimits {
                max_bytes: 5 * 1024 * 1024,
                max_events: 10_000,
            },
            trusted_proxies: Vec::new(),
            fan_out: FanOut { concurrency: 64 },
            write_concurrency: 32,
            settings_lifetime: Duration::from_secs(10),
            cors_origins: Vec::new(),
            beacon_rules: BeaconRules::default(),
            sketch_flush_interval: Duration::from_secs(1),
            billable_window: BillableWindow::DEFAULT,
            recent_lookback_days: 7,
            sealing: SealingOptions::default(),
        }
    }
}

/// What every handler may use.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub settings: Arc<SettingsCache>,
    pub ingestor: Arc<Ingestor>,
    pub beacons: Arc<BeaconIngestor>,
    /// This process's unique-visitor sketches, flushed by [`crate::server::serve`].
    pub live_sketches: Arc<LiveSketches>,
    pub options: Arc<ServiceOptions>,
}

impl AppState {
    /// Wires the services over `store`, timing every store call for `/metrics`.
    pub fn new(store: Arc<dyn Store>, options: ServiceOptions) -> Self {
        let store: Arc<dyn Store> = Arc::new(Instrumented::new(store));
        let settings = Arc::new(SettingsCache::new(
            Arc::clone(&store),
            options.settings_lifetime,
        ));
        let ingestor = Arc::new(Ingestor::new(
            Arc::clone(&store),
            Arc::clone(&settings),
            options.write_concurrency,
            options.sealing,
        ));
        let live_sketches = Arc::new(LiveSketches::new());
        let beacons = Arc::new(BeaconIngestor::new(
            Arc::clone(&store),
            Arc::clone(&settings),
            Arc::clone(&live_sketches),
            options.sealing,
        ));
        Self {
            store,
            settings,
            ingestor,
            beacons,
            live_sketches,
            options: Arc::new(options),
        }
    }
}

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const CAMPAIGN: &str = "/v1/advertisers/{advertiser_id}/campaigns/{campaign_id}";

/// The whole API as one router, ready for `axum::serve` or for tests.
pub fn router(state: AppState) -> Router {
    metrics::prometheus();
    let mut queries = Router::new()
        .route(
            CAMPAIGN,
            get(campaigns::get_settings).put(campaigns::put_settings),
        )
        .route(&format!("{CAMPAIGN}/summary"), get(summary::get_summary))
        .route(&format!("{CAMPAIGN}/report"), get(report::get_report))
        .route(
            &format!("{CAMPAIGN}/impressions"),
            get(export::get_impressions),
        )
        .route(
            &format!("{CAMPAIGN}/impressions/recent"),
            get(export::get_recent_impressions),
        )
        .route(
            "/v1/sites/{site}",
            get(sites::get_settings).put(sites::put_settings),
        )
        .route("/v1/sites/{site}/uniques", get(sites::get_uniques));
    if !state.options.cors_origins.is_empty() {
        // Dashboards in a browser read the query endpoints from the origins an operator lists.
        queries = queries.layer(
            CorsLayer::new()
                .allow_origin(AllowOrigin::list(state.options.cors_origins.clone()))
                .allow_methods([Method::GET])
                .allow_headers([header::CONTENT_TYPE])
                .max_age(Duration::from_secs(3600)),
        );
    }
    // Beacons come from every customer's pages: any origin may send them.
    let beacons = Router::new()
        .route(
            "/track",
            get(track::get_track)
                .head(track::head_track)
                .post(track::post_track)
                .options(track::options_track),
        )
        .layer(
            CorsLayer::new()
                .allow_origin(tower_http::cors::Any)
                .allow_methods([Method::GET, Method::POST])
                .allow_headers([header::CONTENT_TYPE])
                .max_age(Duration::from_secs(86_400)),
        );
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(metrics::get_metrics))
        .route("/openapi.json", get(openapi::get_openapi))
        .route("/v1/impressions", post(events::post_impressions))
        .route("/v1/clicks", post(events::post_clicks))
        .merge(queries)
        .merge(beacons)
        .fallback(error::not_found)
        .with_state(state)
        .layer(axum::middleware::from_fn(error::log_server_errors))
        .layer(axum::middleware::from_fn(json_errors::json_errors))
        .layer(axum::middleware::from_fn(metrics::track_requests))
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &Request<_>| {
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
        // Outermost: a caller's X-Request-Id is kept, otherwise one is made, and it is echoed
        // back so a client can quote it when reporting a problem.
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
}
