//! The errors a store reports, in terms the layers above can act on, each with the driver's or
//! the engine's own error kept as its source (for the log; clients only see the kind).

use std::error::Error;
use std::sync::Arc;

/// The underlying failure, shared so a [`StoreError`] stays cheap to clone.
pub(crate) type Cause = Arc<dyn Error + Send + Sync>;

/// Why a store call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached or did not answer in time; the same call may succeed
    /// later.
    #[error("the store is unavailable: {context}")]
    Unavailable {
        context: String,
        #[source]
        source: Option<Cause>,
    },
    /// The store answers, but its schema is not the one this build expects (migrations not
    /// applied yet, or a keyspace missing).
    #[error("the store's schema is not current: {context}")]
    SchemaNotCurrent {
        context: String,
        #[source]
        source: Option<Cause>,
    },
    /// Anything else: a bug (a statement the store rejects, a row that does not decode) or a
    /// misconfiguration that a retry will not mend.
    #[error("store error: {context}")]
    Internal {
        context: String,
        #[source]
        source: Option<Cause>,
    },
}

impl StoreError {
    /// The store did not answer: `context` says what was being done.
    pub(crate) fn unavailable(
        context: impl Into<String>,
        source: impl Error + Send + Sync + 'static,
    ) -> Self {
        Self::Unavailable {
            context: context.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// The schema is missing or older than this build.
    pub(crate) fn schema(
        context: impl Into<String>,
        source: impl Error + Send + Sync + 'static,
    ) -> Self {
        Self::SchemaNotCurrent {
            context: context.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// A failure a retry will not mend.
    pub(crate) fn internal(
        context: impl Into<String>,
        source: impl Error + Send + Sync + 'static,
    ) -> Self {
        Self::Internal {
            context: context.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// A failure found by the store itself, with no underlying error to keep.
    pub(crate) fn internal_message(context: impl Into<String>) -> Self {
        Self::Internal {
            context: context.into(),
            source: None,
        }
    }

    /// As [`internal_message`](Self::internal_message), for the schema.
    pub(crate) fn schema_message(context: impl Into<String>) -> Self {
        Self::SchemaNotCurrent {
            context: context.into(),
            source: None,
        }
    }

    /// As [`internal_message`](Self::internal_message), for an unavailable store.
    pub(crate) fn unavailable_message(context: impl Into<String>) -> Self {
        Self::Unavailable {
            context: context.into(),
            source: None,
        }
    }

    /// Whether a client should retry the request that met this error.
    pub(crate) fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Unavailable { .. } | Self::SchemaNotCurrent { .. }
        )
    }

    /// The error and every cause under it, `: `-separated, for the log.
    pub(crate) fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut cause = self.source();
        while let Some(error) = cause {
            text.push_str(": ");
            text.push_str(&error.to_string());
            cause = error.source();
        }
        text
    }
}

/// A message as a cause, for failures found while decoding (no error value to keep).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Message(pub(crate) String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_names_every_cause_and_only_unavailable_or_schema_errors_are_retried() {
        let error = StoreError::unavailable("writing impressions", Message("timed out".into()));
        assert_eq!(
            error.chain(),
            "the store is unavailable: writing impressions: timed out"
        );
        assert!(error.is_retryable());
        assert!(StoreError::schema_message("table missing").is_retryable());
        assert!(!StoreError::internal_message("bad row").is_retryable());
    }
}
