//! Running the HTTP server until told to stop, and the signals that tell it. Connections are
//! accepted by our own loop rather than `axum::serve`, because a server on the open internet
//! must bound what a client can hold: at most `max_connections` at once (a connection past it
//! is answered 503 and closed, unless it is one of a few liveness or readiness probes, which
//! still get their one answer), a request's head within its timeout and size ([`guarded`]),
//! a keep-alive connection closed once idle, a body within its timeout (a layer of the router).

mod framing;
pub(crate) mod guarded;

use crate::domain::address::StoreIp;
use crate::http::{App, AppState, ConnectionLimits, router};
use axum::extract::ConnectInfo;
use guarded::{Guarded, HeadLimits};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;
use tower::ServiceExt;

/// The answer to a connection past the cap, written before it is closed.
fn too_many_connections() -> &'static [u8] {
    static ANSWER: std::sync::OnceLock<&'static [u8]> = std::sync::OnceLock::new();
    ANSWER.get_or_init(|| {
        guarded::raw_answer(
            "503 Service Unavailable",
            "overloaded",
            "the server holds as many connections as it may; retry later",
            "retry-after: 1\r\n",
        )
    })
}

/// Serves the API on `listener` until `shutdown` completes, then stops accepting connections
/// and returns once every in-flight request has been answered. The work beside the requests
/// (flushers, reports) is the composition root's (`crate::app::App::serve`).
pub(crate) async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = state.options.connections;
    let store_ip = state.options.store_ip;
    let slots = Arc::clone(&state.connections);
    let app = router(state);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, or a connection reset before it was accepted:
                    // wait a moment rather than spin.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            app: app.clone(),
            peer,
            store_ip,
            limits,
            watcher: graceful.watcher(),
        };
        if let Some(slot) = slots.try_regular() {
            tokio::spawn(connection.serve(stream, slot, true));
        } else if let Some(slot) = slots.try_probe() {
            // At the cap, a liveness or readiness probe still gets its answer: a busy server
            // is not a dead one.
            tokio::spawn(async move {
                if is_health_probe(&stream).await {
                    connection.serve(stream, slot, false).await;
                } else {
                    refuse_connection(stream).await;
                }
            });
        } else {
            tokio::spawn(refuse_connection(stream));
        }
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// One accepted connection and what serving it needs.
struct Connection {
    app: App,
    peer: SocketAddr,
    /// What a log line may show of the peer's address.
    store_ip: StoreIp,
    limits: ConnectionLimits,
    watcher: Watcher,
}

impl Connection {
    /// Serves the connection's requests until it closes, holding `slot` meanwhile; a probe's
    /// connection (`keep_alive` false) serves one request.
    async fn serve(self, stream: TcpStream, slot: OwnedSemaphorePermit, keep_alive: bool) {
        let Self {
            app,
            peer,
            store_ip,
            limits,
            watcher,
        } = self;
        let app = app.map_request(move |mut request: hyper::Request<hyper::body::Incoming>| {
            // The peer address: the default `user_ip`, and the rate limits' key.
            request.extensions_mut().insert(ConnectInfo(peer));
            request.map(axum::body::Body::new)
        });
        let head = HeadLimits {
            timeout: limits.header_timeout,
            max_bytes: limits.max_header_bytes,
        };
        let io = TokioIo::new(Guarded::new(stream, head));
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .keep_alive(keep_alive)
            // Runs while the connection waits for a request's head, idle or not: the idle
            // timeout. The guard gives the head itself its shorter bound.
            .header_read_timeout(limits.idle_timeout)
            // A backstop above the guard's own limit.
            .max_buf_size((limits.max_header_bytes * 2).max(8192))
            .serve_connection(io, TowerToHyperService::new(app));
        if let Err(error) = watcher.watch(connection).await {
            // A log line keeps of the address what a stored event would (`--store-ip`).
            let peer = store_ip.stored(Some(peer.ip()));
            tracing::debug!(
                peer = peer.map(tracing::field::display),
                %error,
                "connection ended with an error"
            );
        }
        drop(slot);
    }
}

/// Whether a connection past the cap opens with a `GET` or `HEAD` of `/healthz` or
/// `/readyz`, judged from its first bytes (peeked, so the request is still there to serve)
/// within a second.
async fn is_health_probe(stream: &TcpStream) -> bool {
    const PROBES: [&[u8]; 4] = [
        b"GET /healthz",
        b"GET /readyz",
        b"HEAD /healthz",
        b"HEAD /readyz",
    ];
    // The longest request line prefix judged, with the byte after the path.
    let mut first = [0u8; 14];
    let judged = tokio::time::timeout(Duration::from_secs(1), async {
        loop {
            let Ok(peeked) = stream.peek(&mut first).await else {
                return false;
            };
            let seen = &first[..peeked];
            if peeked == 0 {
                return false;
            }
            let mut undecided = false;
            for probe in PROBES {
                if seen.len() > probe.len() {
                    if seen.starts_with(probe) && matches!(seen[probe.len()], b' ' | b'?') {
                        return true;
                    }
                } else if probe.starts_with(seen) {
                    undecided = true;
                }
            }
            if !undecided {
                return false;
            }
            // Part of a probe's request line: the rest is on its way.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    judged.unwrap_or(false)
}

/// Answers a connection past the cap and closes it, without waiting long for a slow client.
async fn refuse_connection(mut stream: TcpStream) {
    metrics::counter!("adevents_connections_refused_total").increment(1);
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(too_many_connections()).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

/// Raises this process's open-files limit so `wanted` connections fit (plus the store's files
/// and sockets); returns how many connections the limit it got allows.
pub(crate) fn fit_open_files(wanted: usize) -> usize {
    /// Files the process needs besides client connections: the store's files, its sockets.
    const RESERVED: u64 = 1024;
    let target = wanted as u64 + RESERVED;
    match rlimit::increase_nofile_limit(target) {
        Ok(limit) if limit >= target => wanted,
        Ok(limit) => {
            let fits = limit.saturating_sub(RESERVED).max(64) as usize;
            tracing::warn!(
                wanted,
                open_files_limit = limit,
                max_connections = fits,
                "the open-files limit is too low for --max-connections; serving fewer connections"
            );
            fits
        }
        Err(error) => {
            tracing::warn!(%error, "cannot read or raise the open-files limit; keeping --max-connections");
            wanted
        }
    }
}

/// Turns a write past the process's file-size limit (`ulimit -f`) from a crash into a failed
/// write: by default SIGXFSZ kills the process; with a handler the write returns an error
/// instead, the store answers 503 and `/readyz` turns 503, and what was acknowledged stays.
pub(crate) fn survive_file_size_limit() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        /// SIGXFSZ on Linux and the BSDs.
        const SIGXFSZ: i32 = 25;
        match signal(SignalKind::from_raw(SIGXFSZ)) {
            Ok(mut stream) => {
                tokio::spawn(async move {
                    while stream.recv().await.is_some() {
                        tracing::error!(
                            "a write passed the file-size limit (ulimit -f); the store refuses writes until there is room"
                        );
                    }
                });
            }
            Err(error) => tracing::warn!(%error, "cannot handle SIGXFSZ"),
        }
    }
}

/// Listens for Ctrl-C (SIGINT) and SIGTERM, the signal process supervisors send, from the
/// moment it is called: a signal that arrives before the returned future is first polled (a
/// supervisor stopping a process that has only just said it listens) still stops it cleanly.
/// The future completes on the first of them.
pub(crate) fn shutdown_signal() -> impl Future<Output = ()> + Send {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let interrupt = signal(SignalKind::interrupt());
        let terminate = signal(SignalKind::terminate());
        async move {
            tokio::select! {
                () = until_received(interrupt, "Ctrl-C") => {}
                () = until_received(terminate, "SIGTERM") => {}
            }
        }
    }
    #[cfg(not(unix))]
    async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
        tracing::info!("received Ctrl-C");
    }
}

#[cfg(unix)]
async fn until_received(listener: std::io::Result<tokio::signal::unix::Signal>, name: &str) {
    match listener {
        Ok(mut signal) => {
            signal.recv().await;
            tracing::info!("received {name}");
        }
        Err(error) => {
            tracing::error!(%error, "cannot listen for {name}");
            std::future::pending::<()>().await;
        }
    }
}
