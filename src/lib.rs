//! adevents: an ad-event ingestion HTTP server.
//!
//! Layers, each depending only on the ones below it:
//! - [`http`]: routing, extraction, error mapping (never CQL);
//! - [`domain`]: events, ids, times, buckets and partitions, valid by construction;
//! - [`ingest`] and [`query`]: the write path and the read side (planning, fan-out,
//!   aggregation), with [`settings`] caching campaign configuration for both;
//! - [`store`]: the partition-level storage contract and its Cassandra implementation;
//! - [`migrations`]: the schema files this build carries.
//!
//! [`cli`] and [`commands`] wire them into the `adevents` binary; [`server`] runs the router.

pub mod beacons;
pub mod cli;
pub mod commands;
pub mod domain;
pub mod http;
pub mod ingest;
pub mod migrations;
pub mod query;
pub mod remembered;
pub mod rollup;
pub mod server;
pub mod settings;
pub mod simulate;
pub mod store;
pub mod telemetry;
