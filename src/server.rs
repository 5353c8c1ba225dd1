//! Running the HTTP server until told to stop, and the signals that tell it.

use crate::http::{AppState, router};
use std::future::Future;
use tokio::net::TcpListener;

/// Serves the API on `listener` until `shutdown` completes, then stops accepting connections
/// and returns once every in-flight request has been answered.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let flusher = AbortOnDrop(state.spawn_sketch_flusher());
    // Keys and sites read now (a process that cannot is not ready until it can), then again
    // every settings cache lifetime.
    if let Err(error) = state.access.refresh().await {
        tracing::warn!(error = %error.chain(), "cannot read keys and sites yet; retrying");
    }
    let _access_refresh = AbortOnDrop(std::sync::Arc::clone(&state.access).spawn_refresh());
    let last_flush = state.clone();
    // Connect info gives handlers the peer address (the default `user_ip`).
    let app = router(state).into_make_service_with_connect_info::<std::net::SocketAddr>();
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    flusher.stop().await;
    flush_before_exit(&last_flush).await;
    served
}

/// Stores every answered beacon's sketches before the process goes.
pub async fn flush_before_exit(state: &AppState) {
    if let Err(error) = state.flush_sketches().await {
        tracing::warn!(error = %error.chain(), "could not store the last unique-visitor sketches; the next start rebuilds the open days from the stored beacons");
    }
}

/// Stops a background task when its owner goes, including when the owner is aborted.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl AbortOnDrop {
    /// Stops the task and waits until it is gone, so nothing it was doing overlaps what comes
    /// next.
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

/// Completes on Ctrl-C (SIGINT) or SIGTERM, the signal process supervisors send.
pub async fn shutdown_signal() {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => tracing::info!("received Ctrl-C"),
        () = terminate => tracing::info!("received SIGTERM"),
    }
}
