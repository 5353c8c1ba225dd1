//! adevents: an ad-event ingestion HTTP server.
//!
//! Layers, each depending only on the ones below it (docs/DESIGN.md, "Layers"):
//! - [`http`]: routing, extraction into domain values, typed answers, the error mapping and
//!   the OpenAPI document (never the store, never CQL);
//! - the services: [`ingest`] (impressions and clicks), [`ivt`] (telling invalid traffic),
//!   [`beacons`] (beacons and their live sketches), [`query`] (planning, fan-out, aggregation), [`settings`] (the cache and the
//!   rules of a change), [`sealer`] (sealing closed days) and [`processes`] (this process
//!   among those sharing the store, and the repair of one that went away);
//! - [`store`]: the partition-level storage contract, split by subsystem, and its Cassandra
//!   and embedded implementations;
//! - [`domain`]: ids, times, events, beacons, buckets, partitions, sketches and the sealing
//!   rule, valid by construction; it imports nothing of the crate.
//!
//! [`cli`], [`commands`] and [`server`] wire them into the `adevents` binary; [`migrations`]
//! holds the schema files this build carries; [`simulate`] is a client of the HTTP API.

pub mod access;
pub mod allocator;
pub mod app;
pub mod beacons;
pub mod cli;
pub mod commands;
pub mod delivery;
pub mod domain;
pub mod freshness;
pub mod http;
pub mod ingest;
pub mod ivt;
pub mod migrations;
pub mod periodic;
pub mod processes;
pub mod query;
pub mod random_id;
pub mod readiness;
pub mod remembered;
pub mod sealer;
pub mod server;
pub mod settings;
pub mod simulate;
pub mod store;
pub mod telemetry;
