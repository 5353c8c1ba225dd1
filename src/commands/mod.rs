//! What each subcommand does, given its parsed arguments. `main` only picks one.

mod keys;
mod migrate;
mod privacy;
mod rollup;
mod serve;
mod simulate;

pub use keys::keys;
pub use migrate::migrate;
pub use privacy::{index_stored_events, privacy, rewrite_addresses};
pub use rollup::rollup;
pub use serve::serve;
pub use simulate::simulate;

use crate::cli::{StoreArgs, StoreKind};
use crate::migrations::{self, Migration, MigrationFileError};
use crate::store::StoreError;
use crate::store::cassandra::CassandraStore;
use crate::store::cassandra::migrator::{MigrateError, MigrationReport};
use crate::store::embedded::EmbeddedStore;
use std::sync::Arc;

/// Why a command failed; `main` prints it and exits non-zero.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("invalid migration files in this build: {0}")]
    MigrationFiles(#[from] MigrationFileError),
    #[error("migration failed: {0}")]
    Migrate(#[from] MigrateError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("the HTTP server failed: {0}")]
    Server(std::io::Error),
    #[error("simulation failed: {0}")]
    Simulate(String),
    #[error("rollup failed: {0}")]
    Rollup(String),
    #[error("{0}")]
    Access(String),
    #[error("{0}")]
    Options(String),
}

/// A store opened for a command, with the concrete type kept for store-specific work.
enum OpenedStore {
    Embedded(Arc<EmbeddedStore>),
    Cassandra(Arc<CassandraStore>),
}

impl OpenedStore {
    /// The backend is chosen here, and only here.
    async fn open(args: &StoreArgs, migrations: &[Migration]) -> Result<Self, CommandError> {
        match args.kind {
            StoreKind::Embedded => {
                let config = args.embedded_config();
                tracing::info!(data_dir = %config.data_dir.display(), fsync = ?config.fsync, "opening the embedded store");
                Ok(Self::Embedded(Arc::new(EmbeddedStore::open(&config)?)))
            }
            StoreKind::Cassandra => {
                let config = args.cassandra_config().map_err(CommandError::Options)?;
                tracing::info!(nodes = %config.nodes.join(","), keyspace = %config.keyspace, "connecting to Cassandra");
                let store = CassandraStore::connect(config, migrations).await?;
                Ok(Self::Cassandra(Arc::new(store)))
            }
        }
    }

    async fn migrate(&self, migrations: &[Migration]) -> Result<(), CommandError> {
        match self {
            // Its layout is versioned when it opens; there is nothing to apply.
            Self::Embedded(_) => tracing::info!("the embedded store's format is current"),
            Self::Cassandra(store) => log_report(&store.migrate(migrations).await?),
        }
        Ok(())
    }

    /// Prepares hot-path statements now rather than on the first request. With the schema
    /// missing (`--no-migrate` before `adevents migrate`), the first request retries it.
    async fn prepare(&self) {
        let result = match self {
            Self::Embedded(_) => Ok(()),
            Self::Cassandra(store) => store.prepare().await,
        };
        if let Err(error) = result {
            tracing::warn!(%error, "statements not prepared yet; requests will retry");
        }
    }

    fn into_store(self) -> Arc<dyn crate::store::Store> {
        match self {
            Self::Embedded(store) => store,
            Self::Cassandra(store) => store,
        }
    }
}

fn log_report(report: &MigrationReport) {
    if report.applied.is_empty() {
        tracing::info!(
            already_applied = report.already_applied,
            "schema is current; no migration to apply"
        );
    } else {
        tracing::info!(
            applied = %report.applied.join(","),
            already_applied = report.already_applied,
            "migrations applied"
        );
    }
}

fn embedded_migrations() -> Result<Vec<Migration>, CommandError> {
    Ok(migrations::embedded()?)
}
