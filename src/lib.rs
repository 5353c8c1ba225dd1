//! adevents: an ad-event ingestion HTTP server.
//!
//! Layers, each depending only on the ones below it:
//! - [`http`]: routing, extraction, error mapping (never CQL);
//! - [`store`]: the storage contract and its Cassandra implementation;
//! - [`migrations`]: the schema files this build carries.
//!
//! [`cli`] and [`commands`] wire them into the `adevents` binary; [`server`] runs the router.

pub mod cli;
pub mod commands;
pub mod http;
pub mod migrations;
pub mod server;
pub mod store;
pub mod telemetry;
