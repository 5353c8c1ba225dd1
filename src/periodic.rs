//! Background work repeated on a timer (flushes, comparisons, refreshes): its ticks, and one
//! warning per outage rather than one per retry, since a store down for an hour would
//! otherwise log a line a second from every such task.

use crate::store::StoreError;
use std::time::Duration;

/// Ticks every `period`, the first at once; a tick missed while the work ran late is not made
/// up in a burst.
pub(crate) fn ticks(period: Duration) -> tokio::time::Interval {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks
}

/// Whether a periodic task's last attempt failed, and what to log when that changes.
pub(crate) struct OutageLog {
    /// Logged with the error at the first failure after a success.
    failed: &'static str,
    /// Logged at the first success after a failure (none: recovery says nothing).
    recovered: Option<&'static str>,
    failing: bool,
}

impl OutageLog {
    pub(crate) const fn new(failed: &'static str, recovered: Option<&'static str>) -> Self {
        Self {
            failed,
            recovered,
            failing: false,
        }
    }

    /// Records an attempt's outcome, logging only where the task starts or stops failing.
    pub(crate) fn record<T>(&mut self, outcome: &Result<T, StoreError>) {
        match outcome {
            Ok(_) => {
                if std::mem::take(&mut self.failing)
                    && let Some(recovered) = self.recovered
                {
                    tracing::info!("{recovered}");
                }
            }
            Err(error) => {
                if !self.failing {
                    self.failing = true;
                    tracing::warn!(error = %error.chain(), "{}", self.failed);
                }
            }
        }
    }

    /// Whether the last attempt failed.
    #[cfg(test)]
    pub(crate) fn is_failing(&self) -> bool {
        self.failing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_failing_from_its_first_error_until_the_next_success() {
        let mut log = OutageLog::new("cannot do it; retrying", Some("doing it again"));
        assert!(!log.is_failing());
        let failed: Result<(), StoreError> = Err(StoreError::internal_message("down".to_owned()));
        log.record(&failed);
        log.record(&failed);
        assert!(log.is_failing());
        log.record(&Ok::<(), StoreError>(()));
        assert!(!log.is_failing());
    }
}
