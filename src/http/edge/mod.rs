//! The edge every endpoint shares: who may call (keys), how much (rates, requests in flight,
//! connections), reading bodies and query strings strictly, the client's address and what its
//! request says about the viewer, the one error shape, request ids, metrics, health, and the
//! OpenAPI document.

pub(super) mod auth;
pub(super) mod body;
pub(super) mod client_ip;
pub(super) mod cors;
pub(super) mod error;
pub(super) mod health;
pub(super) mod json_errors;
pub(super) mod limits;
pub(crate) mod metrics;
pub(super) mod openapi;
pub(super) mod params;
pub(super) mod request_id;
mod schema_mend;
pub(super) mod unread_body;
pub(super) mod viewer;
