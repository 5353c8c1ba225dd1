//! The background tasks of a serving process, stopped together when it stops.

use tokio::task::JoinHandle;

/// Tasks started by [`super::App::serve`]; each is stopped when this is stopped or dropped
/// (also when its owner is aborted).
pub(crate) struct Running {
    tasks: Vec<AbortOnDrop>,
}

impl Running {
    pub(crate) fn new(tasks: impl IntoIterator<Item = Option<JoinHandle<()>>>) -> Self {
        Self {
            tasks: tasks.into_iter().flatten().map(AbortOnDrop).collect(),
        }
    }

    /// Stops every task and waits until each is gone, so nothing it was doing overlaps what
    /// comes next (the last flush).
    pub(crate) async fn stop(self) {
        for task in self.tasks {
            task.stop().await;
        }
    }
}

/// Stops a background task when its owner goes.
struct AbortOnDrop(JoinHandle<()>);

impl AbortOnDrop {
    async fn stop(mut self) {
        let handle = std::mem::replace(&mut self.0, tokio::spawn(async {}));
        handle.abort();
        let _ = handle.await;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
