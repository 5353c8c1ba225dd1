//! What the handlers share: the services they call (ingestion, beacons, queries, settings) and
//! the service's tunables. The store itself stays private to this module: a handler asks a
//! service, never the store.

use super::body::BodyLimits;
use super::limits::{ConnectionLimits, ConnectionSlots, InFlight, Limiters, RateLimits};
use crate::access::{Access, AccessOptions};
use crate::beacons::BeaconIngestor;
use crate::beacons::live::{Flushed, LiveSketches, spawn_flusher};
use crate::beacons::rebuild::rebuild_days;
use crate::delivery::DeliveryService;
use crate::delivery::live::{
    LiveDelivery, spawn_flusher as spawn_delivery_flusher,
    spawn_reconciler as spawn_window_reconciler,
};
use crate::delivery::rebuild::DayRepair;
use crate::domain::beacon::BeaconRules;
use crate::domain::owner::OwnerKind;
use crate::domain::process::ProcessReport;
use crate::domain::time::Day;
use crate::ingest::Ingestor;
use crate::ivt::Classifier;
use crate::processes::ProcessRegistry;
use crate::processes::repair::{Repaired, repair_gone_processes};
use crate::query::{Queries, QueryOptions};
use crate::sealer::{SealProgress, Sealer, SealerOptions, SharedProgress};
use crate::settings::{Settings, SettingsCache};
use crate::store::instrumented::Instrumented;
use crate::store::{Store, StoreError};
use axum::http::HeaderValue;
use ipnet::IpNet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Tunables of the HTTP service, with the defaults docs/API.md documents.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    pub body_limits: BodyLimits,
    /// Proxies whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<IpNet>,
    /// Partitions written at once for one ingestion request.
    pub write_concurrency: usize,
    /// How long campaign and site settings are cached in the process.
    pub settings_lifetime: Duration,
    /// Browser origins (dashboards) allowed to call the query endpoints; none by default.
    pub cors_origins: Vec<HeaderValue>,
    /// What a `/track` beacon may carry.
    pub beacon_rules: BeaconRules,
    /// How often live unique-visitor sketches are stored.
    pub sketch_flush_interval: Duration,
    /// How often live delivery counts are stored: well under a second, so `delivery` on any
    /// process includes every impression acknowledged a second earlier.
    pub delivery_flush_interval: Duration,
    /// Fan-out, billable window and look-backs of the read side.
    pub queries: QueryOptions,
    /// When closed days are sealed into rollups (the grace for late events, ...).
    pub sealer: SealerOptions,
    /// Keys on or off, and the operator's environment admin key.
    pub access: AccessOptions,
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
    /// Bytes of live unique-visitor sketches held in memory; past it the least recently used
    /// are stored and dropped.
    pub sketch_memory: u64,
    /// Client addresses whose events are invalid traffic (data-centre ranges, say).
    pub ivt_deny_cidrs: Vec<IpNet>,
    /// How long after its `t` an impression pixel still counts.
    pub tag_ttl: Duration,
    /// How long after the impression's `t` a click redirect still counts.
    pub click_ttl: Duration,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        Self {
            body_limits: BodyLimits {
                max_bytes: 5 * 1024 * 1024,
                max_events: 10_000,
            },
            trusted_proxies: Vec::new(),
            write_concurrency: 32,
            settings_lifetime: Duration::from_secs(10),
            cors_origins: Vec::new(),
            beacon_rules: BeaconRules::default(),
            sketch_flush_interval: Duration::from_secs(1),
            delivery_flush_interval: crate::delivery::live::FLUSH_INTERVAL,
            queries: QueryOptions::default(),
            sealer: SealerOptions::default(),
            access: AccessOptions::default(),
            metrics_public: false,
            connections: ConnectionLimits::default(),
            body_timeout: Duration::from_secs(30),
            rate_limits: RateLimits::default(),
            in_flight: InFlight::default(),
            sketch_memory: 256 * 1024 * 1024,
            ivt_deny_cidrs: Vec::new(),
            tag_ttl: Duration::from_secs(3600),
            click_ttl: Duration::from_secs(30 * 24 * 3600),
        }
    }
}

/// What every handler may use. Cloned for every request (and by each layer that takes state),
/// so it is one shared pointer: cloning the services one `Arc` at a time cost about 6 % of a
/// `/track` beacon's CPU (perf, docs/BENCHMARKS.md).
#[derive(Clone)]
pub struct AppState(Arc<Services>);

impl std::ops::Deref for AppState {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.0
    }
}

/// The services behind [`AppState`].
pub struct Services {
    store: Arc<dyn Store>,
    settings_cache: Arc<SettingsCache>,
    live_sketches: Arc<LiveSketches>,
    live_delivery: Arc<LiveDelivery>,
    registry: Arc<ProcessRegistry>,
    /// What the sealer found sealed at its latest pass.
    seal_progress: SharedProgress,
    /// Set while a start-up repair runs: `/readyz` answers 503 until it is done.
    repairing: Arc<AtomicBool>,
    pub ingestor: Arc<Ingestor>,
    pub beacons: Arc<BeaconIngestor>,
    pub queries: Arc<Queries>,
    pub delivery: Arc<DeliveryService>,
    pub settings: Arc<Settings>,
    pub access: Arc<Access>,
    pub limiters: Arc<Limiters>,
    /// The connections the server holds (`/readyz` says when they are all taken).
    pub connections: Arc<ConnectionSlots>,
    /// Tells general invalid traffic at write time.
    pub classifier: Arc<Classifier>,
    pub options: Arc<ServiceOptions>,
}

impl AppState {
    /// Wires the services over `store`, timing every store call for `/metrics`.
    pub fn new(store: Arc<dyn Store>, options: ServiceOptions) -> Self {
        let store: Arc<dyn Store> = Arc::new(Instrumented::new(store));
        let settings_cache = Arc::new(SettingsCache::new(
            Arc::clone(&store) as Arc<dyn crate::store::SettingsStore>,
            options.settings_lifetime,
        ));
        let rule = options.sealer.rule;
        let live_sketches = Arc::new(LiveSketches::with_budget(options.sketch_memory));
        let registry = Arc::new(ProcessRegistry::new(
            Arc::clone(&store) as Arc<dyn crate::store::ProcessStore>
        ));
        let live_delivery = Arc::new(
            LiveDelivery::new(registry.id(), options.queries.billable_window, rule)
                .publishing_windows(store.is_shared()),
        );
        let ingestor = Arc::new(Ingestor::new(
            Arc::clone(&store),
            Arc::clone(&settings_cache),
            options.write_concurrency,
            rule,
            Arc::clone(&live_delivery),
            Arc::clone(&registry),
        ));
        let delivery = Arc::new(DeliveryService::new(
            Arc::clone(&store),
            Arc::clone(&settings_cache),
            Arc::clone(&live_delivery),
        ));
        let beacons = Arc::new(BeaconIngestor::new(
            Arc::clone(&store),
            Arc::clone(&settings_cache),
            Arc::clone(&live_sketches),
            Arc::clone(&registry),
            rule,
        ));
        let queries = Arc::new(Queries::new(
            Arc::clone(&store),
            Arc::clone(&settings_cache),
            options.queries,
        ));
        let settings = Arc::new(Settings::new(
            Arc::clone(&store) as Arc<dyn crate::store::SettingsStore>,
            Arc::clone(&settings_cache),
        ));
        let access_options = AccessOptions {
            refresh: options.settings_lifetime,
            ..options.access.clone()
        };
        let access = Arc::new(Access::new(
            Arc::clone(&store) as Arc<dyn crate::store::AccessStore>,
            access_options,
        ));
        let limiters = Arc::new(Limiters::new(
            options.rate_limits,
            options.in_flight,
            options.body_limits.max_events,
        ));
        Self(Arc::new(Services {
            store,
            settings_cache,
            live_sketches,
            live_delivery,
            registry,
            seal_progress: SharedProgress::default(),
            repairing: Arc::new(AtomicBool::new(false)),
            ingestor,
            beacons,
            queries,
            delivery,
            settings,
            access,
            limiters,
            connections: Arc::new(ConnectionSlots::new(options.connections.max_connections)),
            classifier: Arc::new(Classifier::new(options.ivt_deny_cidrs.clone())),
            options: Arc::new(options),
        }))
    }

    /// The store as the access subsystem sees it (bootstrap of the first admin key).
    pub fn access_store(&self) -> Arc<dyn crate::store::AccessStore> {
        Arc::clone(&self.store) as Arc<dyn crate::store::AccessStore>
    }

    /// Whether a start-up repair of a gone process's counts is running: the process is not
    /// ready, and nothing is wrong.
    pub fn is_repairing(&self) -> bool {
        self.repairing.load(Ordering::Acquire)
    }

    /// Whether the store answers, its schema is current and the keys are loaded (`/readyz`).
    pub async fn check_ready(&self) -> Result<(), StoreError> {
        if self.is_repairing() {
            return Err(StoreError::unavailable_message(
                "repairing the unique-visitor counts of a server process that stopped without saving them",
            ));
        }
        self.store.check_ready().await?;
        if !self.access.is_ready() {
            // The first read may have met a store that was not ready yet: try it now.
            self.access.refresh().await?;
        }
        Ok(())
    }

    /// The sealer of closed days, over this state's store and settings.
    pub fn sealer(&self) -> Sealer {
        Sealer::new(
            Arc::clone(&self.store),
            Arc::clone(&self.settings_cache),
            self.options.sealer,
            Arc::clone(&self.seal_progress),
        )
    }

    /// What is sealed, as this process's sealer last found it (surveyed now if it has not
    /// made a pass yet).
    pub async fn seal_progress(&self) -> Result<SealProgress, StoreError> {
        let published = self
            .seal_progress
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        match published {
            Some(progress) => Ok(progress),
            None => self.sealer().survey(chrono::Utc::now()).await,
        }
    }

    /// Every server process sharing the store, as last reported.
    pub async fn processes(&self) -> Result<Vec<ProcessReport>, StoreError> {
        self.store.processes().await
    }

    /// Starts storing this process's live sketches every `sketch_flush_interval`.
    pub fn spawn_sketch_flusher(&self) -> tokio::task::JoinHandle<()> {
        spawn_flusher(
            Arc::clone(&self.live_sketches),
            Arc::clone(&self.store) as Arc<dyn crate::store::VisitStore>,
            Arc::clone(&self.registry),
            self.options.sketch_flush_interval,
        )
    }

    /// Starts storing this process's live delivery counts every `delivery_flush_interval`.
    pub fn spawn_delivery_flusher(&self) -> tokio::task::JoinHandle<()> {
        let registry = Arc::clone(&self.registry);
        spawn_delivery_flusher(
            Arc::clone(&self.live_delivery),
            Arc::clone(&self.store) as Arc<dyn crate::store::DeliveryStore>,
            self.options.delivery_flush_interval,
            move |started| registry.saved_through(OwnerKind::Campaign, started),
        )
    }

    /// Starts comparing billable windows counted here with other processes' every second, on a
    /// store several processes share (none otherwise).
    pub fn spawn_window_reconciler(&self) -> Option<tokio::task::JoinHandle<()>> {
        self.store.is_shared().then(|| {
            spawn_window_reconciler(Arc::clone(&self.live_delivery), Arc::clone(&self.store))
        })
    }

    /// Stores every acknowledged impression's live delivery count (before the process goes).
    /// On a shared store it first compares every window it published, closed or not, so that
    /// what another process ranks first in is not kept in the saved row as well.
    pub async fn flush_delivery(&self) -> Result<usize, StoreError> {
        let store = self.store.as_ref();
        if store.is_shared() {
            self.live_delivery.flush(store, chrono::Utc::now()).await?;
            self.live_delivery.compare_every_window(store).await?;
        }
        self.live_delivery.flush(store, chrono::Utc::now()).await
    }

    /// Lists this process among those sharing the store, reporting every second until the
    /// returned task is aborted.
    pub async fn start_reporting(&self) -> tokio::task::JoinHandle<()> {
        self.registry.start_reporting().await
    }

    /// Removes this process from the list, with its marks: its live state is stored.
    pub async fn leave(&self) -> Result<(), StoreError> {
        self.registry.leave().await
    }

    /// Makes `/readyz` answer 503 until [`repair_gone_processes`](Self::repair_gone_processes)
    /// is done.
    pub fn hold_readiness_for_repair(&self) {
        self.repairing.store(true, Ordering::Release);
    }

    /// Rebuilds what server processes that went away without saving their live state left
    /// marked (see [`crate::processes::repair`]).
    pub async fn repair_gone_processes(&self) -> Result<Repaired, StoreError> {
        let repair = DayRepair {
            store: self.store.as_ref(),
            settings: &self.settings_cache,
            window: self.options.queries.billable_window,
            rule: self.options.sealer.rule,
            fan_out: self.options.queries.fan_out,
        };
        repair_gone_processes(repair, self.registry.id()).await
    }

    /// Lets `/readyz` answer 200 again once the start-up repair is done.
    pub fn release_readiness(&self) {
        self.repairing.store(false, Ordering::Release);
    }

    /// Stores every answered beacon's sketches (before the process goes).
    pub async fn flush_sketches(&self) -> Result<Flushed, StoreError> {
        self.live_sketches.flush(self.store.as_ref()).await
    }

    /// Rebuilds the unique-visitor sketches of every site's `days` from its stored beacons;
    /// returns how many beacons were read.
    pub async fn rebuild_sketches(&self, days: &[Day]) -> Result<usize, StoreError> {
        let fan_out = self.options.queries.fan_out;
        rebuild_days(self.store.as_ref(), &self.settings_cache, days, fan_out).await
    }
}
