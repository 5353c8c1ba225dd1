//! `adevents serve`: open the store, migrate unless told not to, serve until a signal, then
//! let in-flight requests finish within the shutdown timeout.

use super::{CommandError, OpenedStore, embedded_migrations};
use crate::access::AuthMode;
use crate::access::bootstrap::ensure_folder_admin;
use crate::app::App;
use crate::cli::{ServeArgs, StoreKind, operator_key};
use crate::server;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub async fn serve(args: ServeArgs) -> Result<(), CommandError> {
    server::survive_file_size_limit();
    args.store
        .retain_aggregates()
        .map_err(CommandError::Options)?;
    if args.store.retention.is_some() {
        tracing::warn!(
            "--retention (ADEVENTS_RETENTION) is the old name of --retain-raw (ADEVENTS_RETAIN_RAW), \
             which now holds on both stores and counts from each event's UTC day; the old name \
             goes in the next release"
        );
    }
    let migrations = embedded_migrations()?;
    let store = OpenedStore::open(&args.store, &migrations).await?;
    if args.no_migrate {
        tracing::info!("not applying migrations (--no-migrate)");
    } else {
        store.migrate(&migrations).await?;
    }
    store.prepare().await;
    let operator_key = operator_key().map_err(CommandError::Access)?;
    let has_operator_key = operator_key.is_some();
    let mut options = args.options(operator_key);
    options.edge.connections.max_connections =
        server::fit_open_files(options.edge.connections.max_connections);
    let app = App::new(store.into_store(), options);
    if args.auth == AuthMode::Off {
        tracing::warn!(
            "--auth off: every request is let through and beacons count for any site; use it only on a private network"
        );
    } else {
        first_admin_key(&app, &args, has_operator_key).await?;
    }
    // Listened for before the address is announced: a stop right after it is a clean stop.
    let shutdown = server::shutdown_signal();
    app.spawn_repair();
    let _sealer = app.sealer().spawn();
    let last_flush = app.clone();
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|source| CommandError::Listen {
            address: args.listen,
            source,
        })?;
    let address = listener
        .local_addr()
        .map_err(|source| CommandError::Listen {
            address: args.listen,
            source,
        })?;

    let announcing = app.clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let mut server = tokio::spawn(async move {
        app.serve(listener, async move {
            // A dropped sender also means stop.
            let _ = stopped.await;
        })
        .await
    });
    tracing::info!(%address, "listening");
    // Listening comes first, so that `/readyz` can say why it is not ready yet (a repair of a
    // process that went away, a store that does not answer); this line says when it is.
    tokio::spawn(async move {
        announcing.until_ready().await;
        tracing::info!(%address, "ready");
    });

    tokio::select! {
        joined = &mut server => return server_outcome(joined),
        () = shutdown => {}
    }
    tracing::info!(timeout = ?args.shutdown_timeout, "shutting down: finishing in-flight requests");
    let _ = stop.send(());
    match tokio::time::timeout(args.shutdown_timeout, &mut server).await {
        Ok(joined) => {
            server_outcome(joined)?;
            tracing::info!("stopped");
        }
        Err(_) => {
            server.abort();
            tracing::warn!("requests still in flight after the shutdown timeout; stopping anyway");
            last_flush.flush_before_exit().await;
        }
    }
    Ok(())
}

/// Makes sure someone can administer this deployment. The embedded store makes its folder's
/// admin key at the first start (once per folder, written to `<data-dir>/admin.key`) unless
/// the operator gives `ADEVENTS_ADMIN_KEY`; on Cassandra an admin key must exist already
/// (`adevents keys create-admin`), or the environment must give one.
async fn first_admin_key(
    app: &App,
    args: &ServeArgs,
    has_operator_key: bool,
) -> Result<(), CommandError> {
    if has_operator_key {
        return Ok(());
    }
    match args.store.kind {
        StoreKind::Embedded => {
            let store = app.access_store();
            let made = ensure_folder_admin(app.access(), store.as_ref(), &args.store.data_dir)
                .await
                .map_err(|error| CommandError::Access(error.to_string()))?;
            if let Some(path) = made {
                tracing::info!(file = %path.display(), "made this data folder's admin key; read it from the file");
            }
            Ok(())
        }
        StoreKind::Cassandra => {
            if app.access().has_admin().await? {
                Ok(())
            } else {
                Err(CommandError::Access(
                    "--auth keys needs an admin key: set ADEVENTS_ADMIN_KEY (at least 32 \
                     characters), or create one with `adevents keys create-admin` (same store \
                     flags); --auth off serves without keys"
                        .into(),
                ))
            }
        }
    }
}

fn server_outcome(
    joined: Result<std::io::Result<()>, tokio::task::JoinError>,
) -> Result<(), CommandError> {
    match joined {
        Ok(result) => result.map_err(CommandError::Server),
        Err(error) => Err(CommandError::Server(std::io::Error::other(error))),
    }
}
