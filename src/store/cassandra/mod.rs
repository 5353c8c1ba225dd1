//! The production store: Apache Cassandra 4.1+/5.0 or ScyllaDB through the `scylla` driver.
//!
//! Every table name is qualified with the configured keyspace, so statements never depend on
//! a session-wide `USE`, and the store can start before its keyspace exists (and report
//! "not ready" until migrations create it).

pub mod config;
mod errors;
pub mod migrator;
mod session;

use crate::migrations::Migration;
use crate::store::{Store, StoreError};
use async_trait::async_trait;
use config::{CassandraConfig, KeyspaceName};
use migrator::{MigrateError, MigrationReport};
use scylla::client::session::Session;
use scylla::statement::unprepared::Statement;
use std::sync::Arc;
use std::time::Duration;

/// A readiness probe answers quickly or not at all: a load balancer asks again soon.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// The store on a Cassandra or ScyllaDB cluster.
pub struct CassandraStore {
    session: Arc<Session>,
    config: CassandraConfig,
    /// The newest migration this build expects, which readiness checks for.
    latest_migration: Option<Migration>,
}

impl CassandraStore {
    /// Connects to the cluster; `migrations` is the schema this build expects.
    pub async fn connect(
        config: CassandraConfig,
        migrations: &[Migration],
    ) -> Result<Self, StoreError> {
        let session = session::connect(&config).await?;
        Ok(Self {
            session: Arc::new(session),
            config,
            latest_migration: migrations.last().cloned(),
        })
    }

    pub fn keyspace(&self) -> &KeyspaceName {
        &self.config.keyspace
    }

    /// Creates the keyspace if needed and applies the pending `migrations`.
    pub async fn migrate(&self, migrations: &[Migration]) -> Result<MigrationReport, MigrateError> {
        migrator::migrate(
            &self.session,
            &self.config.keyspace,
            &self.config.replication,
            migrations,
        )
        .await
    }
}

#[async_trait]
impl Store for CassandraStore {
    async fn check_ready(&self) -> Result<(), StoreError> {
        let Some(latest) = &self.latest_migration else {
            return Ok(());
        };
        // Migrations apply in order, so the newest one recorded with its checksum vouches for
        // all before it. One single-partition read.
        let mut statement = Statement::new(format!(
            "SELECT checksum FROM {}.schema_migrations WHERE version = {}",
            self.config.keyspace,
            latest.version()
        ));
        statement.set_request_timeout(Some(READY_TIMEOUT));
        let result = self
            .session
            .query_unpaged(statement, ())
            .await
            .map_err(|error| errors::execution_error("checking the schema version", error))?;
        let recorded = result
            .into_rows_result()
            .map_err(|error| StoreError::Internal(format!("checking the schema version: {error}")))?
            .maybe_first_row::<(String,)>()
            .map_err(|error| {
                StoreError::Internal(format!("checking the schema version: {error}"))
            })?;
        match recorded {
            Some((checksum,)) if checksum == latest.checksum() => Ok(()),
            Some(_) => Err(StoreError::SchemaNotCurrent(format!(
                "migration {} was applied from a different file",
                latest.file_name()
            ))),
            None => Err(StoreError::SchemaNotCurrent(format!(
                "migration {} is not applied",
                latest.file_name()
            ))),
        }
    }
}
