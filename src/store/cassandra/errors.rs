//! Sorting driver failures into [`StoreError`]s, keeping the driver's error as the source:
//! which ones a client should retry (the node is down, overloaded or slow), which mean the
//! schema is missing, and which are bugs (a statement the node refuses) that no retry mends.

use crate::store::StoreError;
use scylla::errors::{
    DbError, ExecutionError, NextPageError, PagerExecutionError, RequestAttemptError, RequestError,
};

/// What a failure means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Unavailable,
    Schema,
    Internal,
}

impl Kind {
    fn error(
        self,
        context: &str,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> StoreError {
        match self {
            Self::Unavailable => StoreError::unavailable(context, source),
            Self::Schema => StoreError::schema(context, source),
            Self::Internal => StoreError::internal(context, source),
        }
    }
}

/// Whether a node's "invalid request" message says the schema is older than this build: a
/// table, keyspace or column that migrations create is missing.
pub(crate) fn names_missing_schema(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("unconfigured table")
        || message.contains("does not exist")
        || message.contains("doesn't exist")
        || message.contains("undefined column name")
}

fn db_kind(error: &DbError, message: &str) -> Kind {
    match error {
        DbError::Invalid if names_missing_schema(message) => Kind::Schema,
        DbError::Unavailable { .. }
        | DbError::Overloaded
        | DbError::IsBootstrapping
        | DbError::ReadTimeout { .. }
        | DbError::WriteTimeout { .. }
        | DbError::ReadFailure { .. }
        | DbError::WriteFailure { .. }
        | DbError::TruncateError
        | DbError::RateLimitReached { .. } => Kind::Unavailable,
        // Invalid or malformed statements, refused authorisation, server bugs: a retry sends
        // the same thing again.
        _ => Kind::Internal,
    }
}

fn attempt_kind(error: &RequestAttemptError) -> Kind {
    match error {
        RequestAttemptError::DbError(db_error, message) => db_kind(db_error, message),
        RequestAttemptError::SerializationError(_)
        | RequestAttemptError::CqlRequestSerialization(_) => Kind::Internal,
        // Broken connections, stream ids, unexpected frames: the connection, not the request.
        _ => Kind::Unavailable,
    }
}

fn request_kind(error: &RequestError) -> Kind {
    match error {
        RequestError::LastAttemptError(attempt) => attempt_kind(attempt),
        _ => Kind::Unavailable,
    }
}

/// Classifies a failed request; `context` says what was being done.
pub(crate) fn execution_error(context: &str, error: ExecutionError) -> StoreError {
    let kind = match &error {
        ExecutionError::LastAttemptError(attempt) => attempt_kind(attempt),
        ExecutionError::BadQuery(_) | ExecutionError::PrepareError(_) => Kind::Internal,
        // Timeouts, empty pools, failed schema agreement: all transient.
        _ => Kind::Unavailable,
    };
    kind.error(context, error)
}

/// Classifies a failed paged read: request failures as above (a node that went away or timed
/// out mid-partition may be retried; a refused statement may not).
pub(crate) fn pager_error(context: &str, error: PagerExecutionError) -> StoreError {
    let kind = match &error {
        PagerExecutionError::NextPageError(NextPageError::RequestFailure(request)) => {
            request_kind(request)
        }
        PagerExecutionError::NextPageError(_)
        | PagerExecutionError::PrepareError(_)
        | PagerExecutionError::SerializationError(_) => Kind::Internal,
        _ => Kind::Unavailable,
    };
    kind.error(context, error)
}

/// A page that failed while being streamed: the connection or the node, retryable.
pub(crate) fn stream_error(
    context: &str,
    error: impl std::error::Error + Send + Sync + 'static,
) -> StoreError {
    StoreError::unavailable(context, error)
}

/// A row the driver could not decode into the expected types: the schema and the build
/// disagree, which a retry will not mend.
pub(crate) fn decode_error(
    context: &str,
    error: impl std::error::Error + Send + Sync + 'static,
) -> StoreError {
    StoreError::internal(context, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tables_keyspaces_and_columns_mean_migrations_are_pending() {
        assert!(names_missing_schema("unconfigured table impression"));
        assert!(names_missing_schema("Keyspace adevents_x does not exist"));
        assert!(names_missing_schema("Undefined column name user_agent"));
        assert!(!names_missing_schema("line 1:7 no viable alternative"));
    }

    #[test]
    fn a_refused_statement_is_a_bug_and_an_overloaded_node_is_retried() {
        assert_eq!(
            db_kind(&DbError::Invalid, "line 1:7 mismatched input"),
            Kind::Internal
        );
        assert_eq!(db_kind(&DbError::SyntaxError, "bad"), Kind::Internal);
        assert_eq!(
            db_kind(&DbError::Invalid, "unconfigured table visit"),
            Kind::Schema
        );
        assert_eq!(db_kind(&DbError::Overloaded, ""), Kind::Unavailable);
    }
}
