//! adevents: an ad-event ingestion HTTP server.
//!
//! Layers, each depending only on the ones below it (docs/DESIGN.md, "Layers"):
//! - [`app`]: the composition root above them all: builds the services over a store, starts
//!   and stops the work beside the requests, owns readiness;
//! - [`http`]: routing, extraction into domain values, typed answers, the error mapping and
//!   the OpenAPI document (never the store, never CQL); `server` runs it (the accept loop and
//!   the connection guard);
//! - the services: [`ingest`] (impressions and clicks), `event_index` (every stored event
//!   by impression and by user, written off the request path), `conversions` (conversions and
//!   their attribution), [`beacons`] (beacons and their live sketches), `delivery` (live
//!   billable counts against caps), `ivt` (telling invalid traffic), [`access`] (who may
//!   call), [`settings`] (the cache and the rules of a change), [`sealer`] (sealing closed days), `processes` (this process among those sharing the store),
//!   `readiness` (what `/readyz` answers), `freshness` (what `/v1/freshness` answers) and
//!   [`query`] (planning, fan-out, aggregation);
//! - [`store`]: the partition-level storage contract, split by subsystem, and its Cassandra
//!   and embedded implementations;
//! - [`domain`]: ids, times, events, beacons, buckets, partitions, sketches and the sealing
//!   rule, valid by construction; it imports nothing of the crate.
//!
//! [`cli`], [`commands`] and [`telemetry`] wire them into the `adevents` binary;
//! [`migrations`] holds the schema files this build carries; [`simulate`] is a client of the
//! HTTP API; `periodic`, `allocator`, `random_id` and `remembered` are small utilities any
//! layer may use.
//!
//! # The surface
//!
//! Everything is `pub(crate)` unless the binary (`src/main.rs`), the integration tests
//! (`tests/`) or the benches (`benches/`) use it; what is `pub` is used
//! there. The public modules and what those users take from them:
//! - the binary: [`cli`] (the flags), [`commands`] (one function per subcommand) and
//!   [`telemetry`] (logging);
//! - the tests and the benches, to run a server in-process: [`app`] (`App`, `Options`),
//!   [`http`] (the edge's limits), [`access`] (`AccessOptions`, `OperatorKey`) and
//!   [`settings`] (`SettingsCache`);
//! - to fill and read a store directly: [`store`] (the traits, both stores and their
//!   configuration), [`domain`] (the values they hold), [`ingest`] (`Ingestor`), [`beacons`]
//!   (`LiveSketches`, `rebuild_site_day`), [`query`] (`Queries`, `FanOut`), [`sealer`]
//!   (`Sealer`), [`migrations`] (the embedded schema files);
//! - [`simulate`]: the mock traffic some tests send to a server.
//!
//! The other modules are private.

pub mod access;
mod allocator;
pub mod app;
pub mod beacons;
pub mod cli;
pub mod commands;
pub(crate) mod conversions;
mod delivery;
pub mod domain;
mod erased;
mod event_index;
mod freshness;
pub mod http;
pub mod ingest;
mod ivt;
pub mod migrations;
mod periodic;
mod privacy;
mod processes;
pub mod query;
mod random_id;
mod readiness;
mod remembered;
pub mod retention;
pub mod sealer;
mod server;
pub mod settings;
pub mod simulate;
pub mod slicer;
pub mod store;
pub mod telemetry;
pub(crate) mod views;
