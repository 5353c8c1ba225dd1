//! The storage contract the service is written against, and its implementations.
//!
//! Everything above this module (HTTP, planning, aggregation) holds an `Arc<dyn Store>` and
//! speaks in domain terms; no driver type crosses this boundary. The store decides which of
//! its failures are worth a retry ([`StoreError::is_retryable`]), so the HTTP layer can answer
//! 503 with `Retry-After` for those and 500 for the rest.

pub mod cassandra;
mod error;

pub use error::StoreError;

use async_trait::async_trait;

/// A place events are kept. Methods arrive with the features that need them.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Succeeds when the store answers requests and its schema is the one this build expects:
    /// what `/readyz` reports to a load balancer.
    async fn check_ready(&self) -> Result<(), StoreError>;
}
