//! Integration tests: the service driven like its clients drive it (HTTP over real sockets,
//! the real binary for signals and flags), on the real Cassandra node.

mod api_docs;
mod campaigns;
mod common;
mod health;
mod ingest;
mod migrations;
mod process;
mod readiness;
mod summary;
