//! Ingestion from ad servers: `POST /v1/impressions` and `POST /v1/clicks`, their wire format
//! and its conversion into domain events.

pub(super) mod events;
pub(super) mod wire;
