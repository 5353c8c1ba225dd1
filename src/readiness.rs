//! Whether this process can serve (`/readyz`): its store answers with a current schema, the
//! keys and the erasures are loaded, and no start-up repair of a gone process's counts is
//! running.

use crate::access::Access;
use crate::erased::ErasedSubjects;
use crate::store::{Store, StoreError};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Why this process is not ready.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NotReady {
    /// A start-up repair runs: expected, and nothing is wrong.
    #[error("repairing the counts of a server process that stopped without saving them")]
    Repairing,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Readiness, owned by the composition root and read by `/readyz`.
pub(crate) struct Readiness {
    store: Arc<dyn Store>,
    access: Arc<Access>,
    /// Until erasures are read, a re-sent old event of an erased subject would be stored.
    erased: Arc<ErasedSubjects>,
    /// Set while a start-up repair runs.
    repairing: AtomicBool,
}

impl Readiness {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        access: Arc<Access>,
        erased: Arc<ErasedSubjects>,
    ) -> Self {
        Self {
            store,
            access,
            erased,
            repairing: AtomicBool::new(false),
        }
    }

    /// Whether a start-up repair of a gone process's counts is running: the process is not
    /// ready, and nothing is wrong.
    pub(crate) fn is_repairing(&self) -> bool {
        self.repairing.load(Ordering::Acquire)
    }

    /// Holds readiness back while a repair runs (`false` lets it go again).
    pub(crate) fn set_repairing(&self, repairing: bool) {
        self.repairing.store(repairing, Ordering::Release);
    }

    /// Returns once [`Self::check`] passes, asking again every quarter of a second.
    pub(crate) async fn until_ready(&self) {
        while self.check().await.is_err() {
            tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        }
    }

    /// Whether no repair runs, the store answers, its schema is current and the keys and
    /// erasures are loaded.
    pub(crate) async fn check(&self) -> Result<(), NotReady> {
        if self.is_repairing() {
            return Err(NotReady::Repairing);
        }
        self.store.check_ready().await?;
        if !self.access.is_ready() {
            // The first read may have met a store that was not ready yet: try it now.
            self.access.refresh().await?;
        }
        if !self.erased.is_loaded() {
            self.erased.refresh().await?;
        }
        Ok(())
    }
}
