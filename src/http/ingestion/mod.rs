//! Ingestion from ad servers and advertisers: `POST /v1/impressions`, `/v1/clicks` and
//! `/v1/conversions`, their wire formats and their conversion into domain values.

pub(super) mod conversion_wire;
pub(super) mod events;
pub(super) mod wire;
