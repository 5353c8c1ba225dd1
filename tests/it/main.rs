//! Integration tests: the service driven like its clients drive it (HTTP over real sockets,
//! the real binary for signals and flags), on the real Cassandra node.

#[macro_use]
mod common;

mod ad_tags;
mod addresses;
mod api_docs;
mod beacons;
mod browser;
mod campaigns;
mod conversions;
mod delivery;
mod delivery_process;
mod edge;
mod embedded_process;
mod exports;
mod health;
mod ingest;
mod invalid_traffic;
mod keys;
mod keys_process;
mod limits;
mod limits_process;
mod listings;
mod migrations;
mod open_days;
mod privacy;
mod process;
mod reach;
mod readiness;
mod reports;
mod retention;
mod sealing;
mod summary;
mod uniques;
mod viewability;
mod viewability_browser;
mod visitors;
