//! The composition root: builds the store's services once, starts and stops the work that runs
//! beside the requests (the sketch and delivery flushers, the billable-window reconciler, this
//! process's reports, the key refresh, the sealer, the slice aggregator, the retention sweep,
//! the repair of gone processes), and owns
//! readiness. `serve`, the commands, the tests and the benches build through it; the HTTP layer
//! gets only what its handlers need ([`AppState`]).

mod options;
mod repair;
mod running;

pub use options::{Options, ServiceOptions};

use crate::access::{Access, AccessOptions};
use crate::beacons::BeaconIngestor;
use crate::beacons::gpc::DayKeys;
use crate::beacons::live::{LiveSketches, spawn_flusher};
use crate::conversions::decider::Decider;
use crate::conversions::intake::ConversionIntake;
use crate::delivery::DeliveryService;
use crate::delivery::live::{LiveDelivery, spawn_flusher as spawn_delivery_flusher};
use crate::delivery::rebuild::DayRepair;
use crate::domain::owner::OwnerKind;
use crate::domain::retention::Retention;
use crate::domain::view::ViewWindow;
use crate::erased::ErasedSubjects;
use crate::event_index::EventIndexer;
use crate::freshness::Freshness;
use crate::http::{AppState, Handlers};
use crate::ingest::Ingestor;
use crate::ivt::Classifier;
use crate::privacy::access::SubjectAccess;
use crate::privacy::erasure::Erasures;
use crate::privacy::finder::SubjectFinder;
use crate::processes::ProcessRegistry;
use crate::query::Queries;
use crate::readiness::Readiness;
use crate::retention::Sweeper;
use crate::sealer::{Sealer, SharedProgress};
use crate::settings::{Settings, SettingsCache};
use crate::slicer::{SliceAggregator, SlicerOptions};
use crate::store::instrumented::Instrumented;
use crate::store::{AccessStore, Store, StoreError};
use crate::views::ViewReports;
use running::Running;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

/// The service, wired over one store.
#[derive(Clone)]
pub struct App {
    store: Arc<dyn Store>,
    settings_cache: Arc<SettingsCache>,
    live_sketches: Arc<LiveSketches>,
    live_delivery: Arc<LiveDelivery>,
    registry: Arc<ProcessRegistry>,
    seal_progress: SharedProgress,
    readiness: Arc<Readiness>,
    access: Arc<Access>,
    indexer: Arc<EventIndexer>,
    decider: Arc<Decider>,
    erasures: Arc<Erasures>,
    /// What every erasure keeps, which ingestion drops re-sent events by.
    erased: Arc<ErasedSubjects>,
    /// The keys of the hashes of Global Privacy Control beacons, one a day.
    day_keys: Arc<DayKeys>,
    options: Arc<ServiceOptions>,
    state: AppState,
}

impl App {
    /// Wires the services over `store`, timing every store call for `/metrics`.
    pub fn new(store: Arc<dyn Store>, options: Options) -> Self {
        let Options {
            mut service,
            mut edge,
        } = options;
        // One retention for every part: the edge refuses what the sealer and sweep leave.
        edge.retain_raw = service.retention.raw;
        service.sealer.retain_raw = service.retention.raw;
        service.sealer.site_day_bytes = service.seal_memory;
        // Days not yet sealed are answered from their slices only while slices are aggregated.
        let open_days = service.slice_interval.map(|_| service.slices);
        service.queries.open_days = open_days;
        service.sealer.open_days = open_days;
        // The view window is an edge option (`/v` checks it first); every count joins by it,
        // and a day waits for its last impression's reports before it is sealed.
        let view_window = ViewWindow::new(edge.view_window);
        service.queries.view_window = view_window;
        service.sealer.view_window = view_window;
        service.sealer.rule = service
            .sealer
            .rule
            .with_joins_open_for(edge.tag_ttl.saturating_add(edge.view_window));
        let store: Arc<dyn Store> = Arc::new(Instrumented::new(store));
        let settings_cache = Arc::new(SettingsCache::new(
            Arc::clone(&store) as Arc<dyn crate::store::SettingsStore>,
            service.settings_lifetime,
        ));
        let rule = service.sealer.rule;
        let live_sketches = Arc::new(LiveSketches::with_budget(service.sketch_memory));
        let registry = Arc::new(ProcessRegistry::new(
            Arc::clone(&store) as Arc<dyn crate::store::ProcessStore>
        ));
        let live_delivery = Arc::new(
            LiveDelivery::new(registry.id(), service.queries.billable_window, rule)
                .publishing_windows(store.is_shared()),
        );
        let access = Arc::new(Access::new(
            Arc::clone(&store) as Arc<dyn AccessStore>,
            AccessOptions {
                refresh: service.settings_lifetime,
                ..service.access.clone()
            },
        ));
        let erased = Arc::new(ErasedSubjects::new(
            Arc::clone(&store) as Arc<dyn crate::store::SubjectStore>
        ));
        let readiness = Arc::new(Readiness::new(
            Arc::clone(&store),
            Arc::clone(&access),
            Arc::clone(&erased),
        ));
        let seal_progress = SharedProgress::default();
        let sealer = Sealer::new(
            Arc::clone(&store),
            Arc::clone(&settings_cache),
            service.sealer,
            Arc::clone(&seal_progress),
        );
        let indexer = Arc::new(EventIndexer::new(
            Arc::clone(&store) as Arc<dyn crate::store::EventIndexStore>,
            Arc::clone(&store) as Arc<dyn crate::store::SubjectStore>,
            Arc::clone(&registry),
        ));
        let ingestor = Arc::new(
            Ingestor::new(
                Arc::clone(&store),
                Arc::clone(&settings_cache),
                service.write_concurrency,
                rule,
                Arc::clone(&live_delivery),
                Arc::clone(&registry),
                (service.slices, service.queries.billable_window),
            )
            .with_indexer(Arc::clone(&indexer))
            .with_erased(Arc::clone(&erased)),
        );
        let decider = Arc::new(Decider::new(
            Arc::clone(&store),
            Arc::clone(&settings_cache),
            Arc::clone(&indexer),
            Arc::clone(&ingestor),
        ));
        let day_keys = Arc::new(DayKeys::new(
            Arc::clone(&store) as Arc<dyn crate::store::SubjectStore>
        ));
        let beacons = Arc::new(
            BeaconIngestor::new(
                Arc::clone(&store),
                Arc::clone(&settings_cache),
                Arc::clone(&live_sketches),
                Arc::clone(&registry),
                rule,
            )
            .with_erased(Arc::clone(&erased))
            .with_day_keys(Arc::clone(&day_keys)),
        );
        let finder = SubjectFinder::new(Arc::clone(&store), Arc::clone(&settings_cache));
        let erasures = Arc::new(
            Erasures::new(
                Arc::clone(&store),
                finder.clone(),
                Arc::clone(&indexer),
                Arc::clone(&ingestor),
                Arc::clone(&erased),
                Arc::clone(&readiness),
            )
            .with_beacons(Arc::clone(&beacons)),
        );
        let attribution_delay = chrono::TimeDelta::from_std(service.attribution_delay)
            .unwrap_or(chrono::TimeDelta::MAX);
        let handlers = Handlers {
            views: Arc::new(ViewReports::new(
                Arc::clone(&ingestor),
                edge.view_memory_entries,
                edge.tag_ttl.saturating_add(edge.view_window),
            )),
            ingestor,
            conversions: Arc::new(
                ConversionIntake::new(
                    Arc::clone(&store) as Arc<dyn crate::store::ConversionStore>,
                    attribution_delay,
                )
                .with_erased(Arc::clone(&erased)),
            ),
            beacons,
            queries: Arc::new(Queries::new(
                Arc::clone(&store),
                Arc::clone(&settings_cache),
                service.queries,
            )),
            delivery: Arc::new(DeliveryService::new(
                Arc::clone(&store),
                Arc::clone(&settings_cache),
                Arc::clone(&live_delivery),
            )),
            settings: Arc::new(Settings::new(
                Arc::clone(&store) as Arc<dyn crate::store::SettingsStore>,
                Arc::clone(&settings_cache),
            )),
            access: Arc::clone(&access),
            classifier: Arc::new(Classifier::new(service.ivt_deny_cidrs.clone())),
            readiness: Arc::clone(&readiness),
            freshness: Arc::new(Freshness::new(
                Arc::clone(&store) as Arc<dyn crate::store::ProcessStore>,
                sealer,
                Arc::clone(&seal_progress),
            )),
            erasures: Arc::clone(&erasures),
            subject_access: Arc::new(SubjectAccess::new(
                Arc::clone(&store),
                finder,
                Arc::clone(&indexer),
            )),
        };
        Self {
            state: AppState::new(handlers, edge),
            store,
            settings_cache,
            live_sketches,
            live_delivery,
            registry,
            seal_progress,
            readiness,
            access,
            indexer,
            decider,
            erasures,
            erased,
            day_keys,
            options: Arc::new(service),
        }
    }

    /// What the HTTP handlers share.
    pub(crate) fn state(&self) -> AppState {
        self.state.clone()
    }

    /// Keys, sites and their cache.
    pub fn access(&self) -> &Arc<Access> {
        &self.access
    }

    /// The store as the access subsystem sees it (bootstrap of the first admin key).
    pub(crate) fn access_store(&self) -> Arc<dyn AccessStore> {
        Arc::clone(&self.store) as Arc<dyn AccessStore>
    }

    /// The sealer of closed days, over this app's store and settings.
    pub(crate) fn sealer(&self) -> Sealer {
        Sealer::new(
            Arc::clone(&self.store),
            Arc::clone(&self.settings_cache),
            self.options.sealer,
            Arc::clone(&self.seal_progress),
        )
    }

    /// The sweep of raw events past `--retain-raw`, over this app's store and settings.
    pub fn sweeper(&self) -> Sweeper {
        Sweeper::new(
            Arc::clone(&self.store),
            Arc::clone(&self.settings_cache),
            self.options.retention,
        )
    }

    /// The aggregator of closed slices, over this app's store and settings; `None` when
    /// slices are not aggregated.
    pub fn slicer(&self) -> Option<SliceAggregator> {
        let interval = self.options.slice_interval?;
        Some(SliceAggregator::new(
            Arc::clone(&self.store),
            Arc::clone(&self.settings_cache),
            SlicerOptions {
                rule: self.options.slices,
                window: self.options.queries.billable_window,
                view_window: self.options.queries.view_window,
                fan_out: self.options.queries.fan_out,
                interval,
            },
        ))
    }

    /// Serves the API on `listener` with the background work running, until `shutdown`
    /// completes and every in-flight request is answered; then stores what is live and leaves
    /// the list of processes.
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let running = self.start().await;
        let served = crate::server::serve(listener, self.state(), shutdown).await;
        running.stop().await;
        self.flush_before_exit().await;
        served
    }

    /// Starts the work that runs beside the requests: the flushers, the reconciler, this
    /// process's reports and the refresh of keys and sites.
    async fn start(&self) -> Running {
        let sketches = spawn_flusher(
            Arc::clone(&self.live_sketches),
            Arc::clone(&self.store) as Arc<dyn crate::store::VisitStore>,
            Arc::clone(&self.registry),
            self.options.sketch_flush_interval,
        );
        let registry = Arc::clone(&self.registry);
        let delivery = spawn_delivery_flusher(
            Arc::clone(&self.live_delivery),
            Arc::clone(&self.store) as Arc<dyn crate::store::DeliveryStore>,
            self.options.delivery_flush_interval,
            move |started| registry.saved_through(OwnerKind::Campaign, started),
        );
        // Billable windows counted here are compared with other processes' every second, on a
        // store several processes share.
        let reconciler = self.store.is_shared().then(|| {
            crate::delivery::live::spawn_reconciler(
                Arc::clone(&self.live_delivery),
                Arc::clone(&self.store),
            )
        });
        let reports = self.registry.start_reporting().await;
        // Keys and sites read now (a process that cannot is not ready until it can), then
        // again every settings cache lifetime.
        if let Err(error) = self.access.refresh().await {
            tracing::warn!(error = %error.chain(), "cannot read keys and sites yet; retrying");
        }
        let access_refresh = Arc::clone(&self.access).spawn_refresh();
        let slicer = self.slicer().map(SliceAggregator::spawn);
        let indexer = self.indexer.start();
        let decider = self.decider.start();
        let erasures = self.erasures.start();
        // Erasures read now (a process that cannot is not ready until it can), then on their
        // own timer.
        if let Err(error) = self.erased.refresh().await {
            tracing::warn!(error = %error.chain(), "cannot read the erased subjects yet; retrying");
        }
        let erased_refresh = Arc::clone(&self.erased).spawn_refresh();
        // Nothing to sweep while everything is kept.
        let retention = self.options.retention;
        let sweeper = (retention.raw != Retention::Forever
            || retention.aggregates != Retention::Forever)
            .then(|| self.sweeper().spawn());
        let day_keys = self.day_keys.start();
        Running::new([
            Some(sketches),
            Some(delivery),
            reconciler,
            Some(reports),
            Some(access_refresh),
            slicer,
            Some(indexer),
            Some(decider),
            Some(erasures),
            Some(erased_refresh),
            sweeper,
            Some(day_keys),
        ])
    }

    /// Stores every answered beacon's sketches and every acknowledged impression's delivery
    /// count before the process goes, then leaves the list of processes; if they cannot be
    /// stored, the process stays listed and the next one to start rebuilds its days from the
    /// stored events.
    pub(crate) async fn flush_before_exit(&self) {
        if let Err(error) = self.live_sketches.flush(self.store.as_ref()).await {
            tracing::warn!(error = %error.chain(), "could not store the last unique-visitor sketches; the next process to start rebuilds them from the stored beacons");
            return;
        }
        if let Err(error) = self.flush_delivery().await {
            tracing::warn!(error = %error.chain(), "could not store the last delivery counts; the next process to start rebuilds them from the stored impressions");
            return;
        }
        if let Err(error) = self.indexer.flush().await {
            tracing::warn!(error = %error.chain(), "could not write the last event index entries; the next process to start indexes those days again");
            return;
        }
        if let Err(error) = self.registry.leave().await {
            tracing::warn!(error = %error.chain(), "could not leave the list of processes; the next process to start will repair this one's days needlessly");
        }
    }

    /// Stores every acknowledged impression's live delivery count. On a shared store it
    /// first compares every window it published, closed or not, so that what another process
    /// ranks first in is not kept in the saved row as well.
    async fn flush_delivery(&self) -> Result<usize, StoreError> {
        let store = self.store.as_ref();
        if store.is_shared() {
            self.live_delivery.flush(store, chrono::Utc::now()).await?;
            self.live_delivery.compare_every_window(store).await?;
        }
        self.live_delivery.flush(store, chrono::Utc::now()).await
    }

    /// Returns once `/readyz` would answer 200.
    pub(crate) async fn until_ready(&self) {
        self.readiness.until_ready().await;
    }

    /// Rebuilds, in the background, what server processes that went away without saving their
    /// live state left (docs/DESIGN.md, "Processes sharing a store"); `/readyz` answers 503
    /// until it is done, so a load balancer sends no traffic to a process whose counts are not
    /// right yet.
    pub(crate) fn spawn_repair(&self) -> tokio::task::JoinHandle<()> {
        /// Between attempts while the store cannot be read.
        const RETRY: std::time::Duration = std::time::Duration::from_secs(5);
        self.readiness.set_repairing(true);
        let app = self.clone();
        tokio::spawn(async move {
            loop {
                let repair = DayRepair {
                    store: app.store.as_ref(),
                    settings: &app.settings_cache,
                    window: app.options.queries.billable_window,
                    rule: app.options.sealer.rule,
                    fan_out: app.options.queries.fan_out,
                    site_day_bytes: app.options.seal_memory,
                };
                match repair::repair_gone_processes(repair, &app.indexer, app.registry.id()).await {
                    Ok(repaired) => {
                        if repaired.processes > 0 {
                            tracing::info!(
                                processes = repaired.processes,
                                days = repaired.days,
                                beacons = repaired.beacons,
                                "repaired the live state of server processes that went away"
                            );
                        }
                        app.readiness.set_repairing(false);
                        return;
                    }
                    Err(error) => {
                        tracing::warn!(error = %error.chain(), "cannot repair the processes that went away yet; retrying");
                        tokio::time::sleep(RETRY).await;
                    }
                }
            }
        })
    }
}
