//! Sorting driver failures into [`StoreError`]s: which ones a client should retry (the node
//! is down, overloaded or slow) and which mean the schema is missing.

use crate::store::StoreError;
use scylla::errors::{DbError, ExecutionError, RequestAttemptError};

/// Classifies a failed request; `context` says what was being done, for the message.
pub fn execution_error(context: &str, error: ExecutionError) -> StoreError {
    let message = format!("{context}: {error}");
    match &error {
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(db_error, _)) => {
            match db_error {
                // "unconfigured table" / "keyspace does not exist": migrations have not run.
                DbError::Invalid => StoreError::SchemaNotCurrent(message),
                DbError::Unavailable { .. }
                | DbError::Overloaded
                | DbError::IsBootstrapping
                | DbError::ReadTimeout { .. }
                | DbError::WriteTimeout { .. }
                | DbError::ReadFailure { .. }
                | DbError::WriteFailure { .. }
                | DbError::TruncateError
                | DbError::RateLimitReached { .. } => StoreError::Unavailable(message),
                _ => StoreError::Internal(message),
            }
        }
        ExecutionError::BadQuery(_) | ExecutionError::PrepareError(_) => {
            StoreError::Internal(message)
        }
        // Timeouts, empty pools, broken connections, failed schema agreement: all transient.
        _ => StoreError::Unavailable(message),
    }
}

/// Classifies a failed paged read. Paging failures are request failures underneath: the node
/// went away or timed out mid-partition, so the read as a whole may be retried.
pub fn pager_error(context: &str, error: scylla::errors::PagerExecutionError) -> StoreError {
    let message = format!("{context}: {error}");
    if message.contains("unconfigured table") {
        StoreError::SchemaNotCurrent(message)
    } else {
        StoreError::Unavailable(message)
    }
}
