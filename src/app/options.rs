//! The service's options and the HTTP edge's, with the defaults docs/API.md documents.

use crate::access::AccessOptions;
use crate::domain::slices::SliceRule;
use crate::http::EdgeOptions;
use crate::query::QueryOptions;
use crate::retention::RetentionOptions;
use crate::sealer::SealerOptions;
use ipnet::IpNet;
use std::time::Duration;

/// Everything a server is built with.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub service: ServiceOptions,
    pub edge: EdgeOptions,
}

/// Tunables of the services behind the HTTP edge.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// Partitions written at once for one ingestion request.
    pub(crate) write_concurrency: usize,
    /// How long campaign and site settings are cached in the process.
    pub settings_lifetime: Duration,
    /// How often live unique-visitor sketches are stored.
    pub sketch_flush_interval: Duration,
    /// How often live delivery counts are stored: well under a second, so `delivery` on any
    /// process includes every impression acknowledged a second earlier.
    pub(crate) delivery_flush_interval: Duration,
    /// Fan-out, billable window and look-backs of the read side.
    pub queries: QueryOptions,
    /// When closed days are sealed into rollups (the grace for late events, ...).
    pub(crate) sealer: SealerOptions,
    /// When a 15-minute slice of a day not yet sealed closes for late events.
    pub slices: SliceRule,
    /// How often closed slices are aggregated; `None`: never (every open day is read raw).
    pub slice_interval: Option<Duration>,
    /// Keys on or off, and the operator's environment admin key.
    pub access: AccessOptions,
    /// Bytes of live unique-visitor sketches held in memory; past it the least recently used
    /// are stored and dropped.
    pub(crate) sketch_memory: u64,
    /// Bytes one pass of a site-day's seal or sketch repair may hold for its feature
    /// combinations (estimated); past it the day is added up in parts.
    pub seal_memory: usize,
    /// Client addresses whose events are invalid traffic (data-centre ranges, say).
    pub ivt_deny_cidrs: Vec<IpNet>,
    /// How long after a conversion arrives its attribution is decided: a click still on its
    /// way meanwhile counts.
    pub attribution_delay: Duration,
    /// What is kept how long (`--retain-raw`, `--retain-aggregates`): ingestion refuses events
    /// of expired days, the sealer leaves them alone, the sweep deletes their raw rows.
    pub retention: RetentionOptions,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        Self {
            write_concurrency: 32,
            settings_lifetime: Duration::from_secs(10),
            sketch_flush_interval: Duration::from_secs(1),
            delivery_flush_interval: crate::delivery::live::FLUSH_INTERVAL,
            queries: QueryOptions::default(),
            sealer: SealerOptions::default(),
            slices: SliceRule::default(),
            slice_interval: Some(Duration::from_secs(15)),
            access: AccessOptions::default(),
            sketch_memory: 256 * 1024 * 1024,
            seal_memory: crate::query::site_day::SITE_DAY_BYTES,
            ivt_deny_cidrs: Vec::new(),
            attribution_delay: Duration::from_secs(60),
            retention: RetentionOptions::default(),
        }
    }
}
