//! The errors a store reports, in terms the layers above can act on.

/// Why a store call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached or did not answer in time; the same call may succeed
    /// later.
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
    /// The store answers, but its schema is not the one this build expects (migrations not
    /// applied yet, or a keyspace missing).
    #[error("the store's schema is not current: {0}")]
    SchemaNotCurrent(String),
    /// Anything else: a bug or a misconfiguration that a retry will not mend.
    #[error("store error: {0}")]
    Internal(String),
}

impl StoreError {
    /// Whether a client should retry the request that met this error.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::SchemaNotCurrent(_))
    }
}
