//! Whether the numbers are final (`/v1/freshness`): the server processes sharing the store
//! with their last reports, and how far the closed days are sealed.

use crate::domain::process::ProcessReport;
use crate::domain::time::Day;
use crate::sealer::{SealProgress, Sealer, SharedProgress};
use crate::store::{ProcessStore, StoreError};
use std::sync::Arc;

/// What `/v1/freshness` answers.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    /// Every server process sharing the store, as last reported, oldest first.
    pub(crate) processes: Vec<ProcessReport>,
    /// The newest day such that every closed day up to it is sealed.
    pub(crate) sealed_through: Option<Day>,
    /// Owner-days whose late events wait for their next seal.
    pub(crate) late_days: usize,
    /// How long after its end a UTC day is sealed: past its grace (the longer of the
    /// rollup grace and the time its last impression's view reports may take), plus the margin.
    pub(crate) seal_delay: chrono::TimeDelta,
}

pub(crate) struct Freshness {
    processes: Arc<dyn ProcessStore>,
    /// A sealer of this process's store, for a survey before the background one has made a
    /// pass.
    sealer: Sealer,
    progress: SharedProgress,
}

impl Freshness {
    pub(crate) fn new(
        processes: Arc<dyn ProcessStore>,
        sealer: Sealer,
        progress: SharedProgress,
    ) -> Self {
        Self {
            processes,
            sealer,
            progress,
        }
    }

    /// The processes, oldest first, and what is sealed.
    pub(crate) async fn report(&self) -> Result<Report, StoreError> {
        let (mut processes, progress) =
            futures::try_join!(self.processes.processes(), self.seal_progress())?;
        processes.sort_by_key(|report| report.started_at);
        Ok(Report {
            processes,
            sealed_through: progress.sealed_through,
            late_days: progress.late_days,
            seal_delay: self.sealer.rule().seal_delay() + crate::domain::sealing::SealState::MARGIN,
        })
    }

    /// What is sealed, as this process's sealer last found it (surveyed now if it has not
    /// made a pass yet).
    async fn seal_progress(&self) -> Result<SealProgress, StoreError> {
        let published = self
            .progress
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        match published {
            Some(progress) => Ok(progress),
            None => self.sealer.survey(chrono::Utc::now()).await,
        }
    }
}
