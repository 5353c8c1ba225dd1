//! What the handlers share: the services they call (ingestion, beacons, queries, settings,
//! delivery, readiness, freshness) and the HTTP edge's options. The composition root
//! (`crate::app`) builds the services; the store itself never reaches this layer: a handler
//! asks a service.

use crate::access::Access;
use crate::beacons::BeaconIngestor;
use crate::conversions::intake::ConversionIntake;
use crate::delivery::DeliveryService;
use crate::domain::address::StoreIp;
use crate::domain::beacon::BeaconRules;
use crate::domain::retention::Retention;
use crate::freshness::Freshness;
use crate::http::edge::body::BodyLimits;
use crate::http::edge::limits::{
    ConnectionLimits, ConnectionSlots, InFlight, Limiters, RateLimits,
};
use crate::ingest::Ingestor;
use crate::ivt::Classifier;
use crate::privacy::access::SubjectAccess;
use crate::privacy::erasure::Erasures;
use crate::query::Queries;
use crate::readiness::Readiness;
use crate::settings::Settings;
use crate::views::ViewReports;
use axum::http::HeaderValue;
use ipnet::IpNet;
use std::sync::Arc;
use std::time::Duration;

/// Tunables of the HTTP edge, with the defaults docs/API.md documents: what a request may
/// hold, how long it may take, who may send it, how many at once.
#[derive(Debug, Clone)]
pub struct EdgeOptions {
    pub body_limits: BodyLimits,
    /// Proxies whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<IpNet>,
    /// What of a client's address events, answers and log lines keep (`--store-ip`).
    pub store_ip: StoreIp,
    /// Browser origins (dashboards) allowed to call the query endpoints; none by default.
    pub cors_origins: Vec<HeaderValue>,
    /// What a `/track` beacon may carry.
    pub(crate) beacon_rules: BeaconRules,
    /// Whether `/metrics` answers without a key.
    pub metrics_public: bool,
    /// Connections, and the time a request's head may take.
    pub connections: ConnectionLimits,
    /// How long a request's body may take to arrive.
    pub body_timeout: Duration,
    /// Events per ingest key, beacon requests per client address.
    pub rate_limits: RateLimits,
    /// Writes and queries at once.
    pub in_flight: InFlight,
    /// How long after its `t` an impression pixel still counts.
    pub tag_ttl: Duration,
    /// How long after the impression's `t` a click redirect still counts.
    pub(crate) click_ttl: Duration,
    /// How long after an impression (or its pixel) its view reports count.
    pub(crate) view_window: Duration,
    /// The (impression, client) pairs of view reports remembered in memory.
    pub(crate) view_memory_entries: usize,
    /// Events of a UTC day that began longer ago than this are refused (`--retain-raw`; the
    /// composition root sets it from the service's retention).
    pub(crate) retain_raw: Retention,
}

impl Default for EdgeOptions {
    fn default() -> Self {
        Self {
            body_limits: BodyLimits {
                max_bytes: 5 * 1024 * 1024,
                max_events: 10_000,
            },
            trusted_proxies: Vec::new(),
            store_ip: StoreIp::default(),
            cors_origins: Vec::new(),
            beacon_rules: BeaconRules::default(),
            metrics_public: false,
            connections: ConnectionLimits::default(),
            body_timeout: Duration::from_secs(30),
            rate_limits: RateLimits::default(),
            in_flight: InFlight::default(),
            tag_ttl: Duration::from_secs(3600),
            click_ttl: Duration::from_secs(30 * 24 * 3600),
            view_window: Duration::from_secs(600),
            view_memory_entries: 500_000,
            retain_raw: Retention::Forever,
        }
    }
}

/// The services the handlers call, as the composition root built them.
pub(crate) struct Handlers {
    pub(crate) ingestor: Arc<Ingestor>,
    pub(crate) conversions: Arc<ConversionIntake>,
    pub(crate) views: Arc<ViewReports>,
    pub(crate) beacons: Arc<BeaconIngestor>,
    pub(crate) queries: Arc<Queries>,
    pub(crate) delivery: Arc<DeliveryService>,
    pub(crate) settings: Arc<Settings>,
    pub(crate) access: Arc<Access>,
    /// Tells general invalid traffic at write time.
    pub(crate) classifier: Arc<Classifier>,
    pub(crate) readiness: Arc<Readiness>,
    pub(crate) freshness: Arc<Freshness>,
    /// Erasures and subject access.
    pub(crate) erasures: Arc<Erasures>,
    pub(crate) subject_access: Arc<SubjectAccess>,
}

/// What every handler may use. Cloned for every request (and by each layer that takes state),
/// so it is one shared pointer: cloning the services one `Arc` at a time cost about 6 % of a
/// `/track` beacon's CPU (perf, docs/BENCHMARKS.md).
#[derive(Clone)]
pub(crate) struct AppState(Arc<Services>);

impl std::ops::Deref for AppState {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.0
    }
}

/// The services behind [`AppState`], and the edge's own limiters; a handler reaches the
/// services through it as if they were its fields (`state.ingestor`).
pub(crate) struct Services {
    handlers: Handlers,
    pub(crate) limiters: Arc<Limiters>,
    /// The connections the server holds (`/readyz` says when they are all taken).
    pub(crate) connections: Arc<ConnectionSlots>,
    pub(crate) options: Arc<EdgeOptions>,
}

impl std::ops::Deref for Services {
    type Target = Handlers;

    fn deref(&self) -> &Handlers {
        &self.handlers
    }
}

impl AppState {
    pub(crate) fn new(handlers: Handlers, options: EdgeOptions) -> Self {
        let limiters = Arc::new(Limiters::new(
            options.rate_limits,
            options.in_flight,
            options.body_limits.max_events,
        ));
        Self(Arc::new(Services {
            handlers,
            limiters,
            connections: Arc::new(ConnectionSlots::new(options.connections.max_connections)),
            options: Arc::new(options),
        }))
    }
}
