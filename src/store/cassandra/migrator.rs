//! Applies schema migrations to a Cassandra keyspace, safely with several servers starting at
//! once: the keyspace is created from configuration, pending files run in version order under
//! a lock row, the cluster agrees on the schema after every statement, and each applied file
//! is recorded with its checksum so an edited one is caught instead of silently ignored.

use super::config::{KeyspaceName, Replication};
use super::errors::execution_error;
use crate::migrations::Migration;
use crate::store::StoreError;
use chrono::Utc;
use scylla::client::session::Session;
use scylla::errors::{DbError, ExecutionError, RequestAttemptError};
use scylla::value::Row;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tracing::{info, warn};
use uuid::Uuid;

/// How long the lock row lives if its holder dies: long enough for a large migration on a
/// multi-datacenter cluster, short enough that a crashed migrator does not block deploys long.
const LOCK_TTL: Duration = Duration::from_secs(300);
/// A waiting migrator gives up after this; past the TTL a dead holder's lock has expired.
const LOCK_WAIT: Duration = Duration::from_secs(330);
const LOCK_POLL: Duration = Duration::from_secs(1);
/// Attempts at one migration statement that times out or finds the cluster unavailable.
const STATEMENT_ATTEMPTS: u32 = 5;
/// The pause before a retry, times the attempts made: 2 s, 4 s, 6 s, 8 s.
const STATEMENT_RETRY_PAUSE: Duration = Duration::from_secs(2);
/// How long a table just created elsewhere may take to answer queries here.
const TABLE_LIVE_WAIT: Duration = Duration::from_secs(30);

/// Why migrating failed.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error(
        "migration {file} was changed after it was applied (recorded checksum {recorded}, file now {current}); \
         restore the file as it was and put the change in a new migration"
    )]
    Changed {
        file: String,
        recorded: String,
        current: String,
    },
    #[error("migration {file}, statement {number}, failed: {source}")]
    Statement {
        file: String,
        number: usize,
        source: StoreError,
    },
    #[error(
        "another migrator (owner {holder}) held the migration lock for over {}s; \
         if it died, its lock expires by itself within {}s",
        LOCK_WAIT.as_secs(), LOCK_TTL.as_secs()
    )]
    LockTimeout { holder: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a migration run did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct MigrationReport {
    /// File names applied by this run, in order.
    pub applied: Vec<String>,
    /// How many files had been applied before.
    pub already_applied: usize,
}

/// A migration as recorded in `schema_migrations`.
#[derive(Debug, Clone)]
pub struct AppliedMigration {
    pub(crate) file_name: String,
    pub checksum: String,
}

/// Creates the keyspace if needed and applies every pending migration in order.
///
/// A no-op that writes nothing when everything is applied already.
pub(crate) async fn migrate(
    session: &Session,
    keyspace: &KeyspaceName,
    replication: &Replication,
    migrations: &[Migration],
) -> Result<MigrationReport, MigrateError> {
    ensure_keyspace(session, keyspace, replication).await?;
    ensure_bookkeeping_tables(session, keyspace).await?;
    let applied = applied_migrations(session, keyspace).await?;
    if pending(migrations, &applied)?.is_empty() {
        return Ok(MigrationReport {
            applied: Vec::new(),
            already_applied: applied.len(),
        });
    }
    let lock = MigrationLock::acquire(session, keyspace).await?;
    let result = apply_pending(session, keyspace, migrations).await;
    lock.release(session, keyspace).await;
    result
}

/// The migrations recorded as applied, by version.
pub async fn applied_migrations(
    session: &Session,
    keyspace: &KeyspaceName,
) -> Result<BTreeMap<u32, AppliedMigration>, StoreError> {
    // The table holds one small row per migration file: reading it whole is cheap.
    let cql = format!("SELECT version, file_name, checksum FROM {keyspace}.schema_migrations");
    let result = session
        .query_unpaged(cql, ())
        .await
        .map_err(|error| execution_error("reading schema_migrations", error))?;
    let rows = result
        .into_rows_result()
        .map_err(|error| StoreError::internal("reading schema_migrations", error))?;
    let mut applied = BTreeMap::new();
    for row in rows
        .rows::<(i32, String, String)>()
        .map_err(|error| StoreError::internal("reading schema_migrations", error))?
    {
        let (version, file_name, checksum) =
            row.map_err(|error| StoreError::internal("reading schema_migrations", error))?;
        let version = u32::try_from(version).map_err(|_| {
            StoreError::internal_message(format!("negative migration version {version}"))
        })?;
        applied.insert(
            version,
            AppliedMigration {
                file_name,
                checksum,
            },
        );
    }
    Ok(applied)
}

/// The migrations not applied yet, in order; an applied one whose file changed is an error.
fn pending<'a>(
    migrations: &'a [Migration],
    applied: &BTreeMap<u32, AppliedMigration>,
) -> Result<Vec<&'a Migration>, MigrateError> {
    let known = migrations.iter().map(Migration::version).max().unwrap_or(0);
    for (version, record) in applied.range(known + 1..) {
        // An older binary during a rolling upgrade: the schema only grew, so it can still run.
        warn!(version, file = %record.file_name, "the schema has a migration this build does not know");
    }
    let mut pending = Vec::new();
    for migration in migrations {
        match applied.get(&migration.version()) {
            Some(record) if record.checksum != migration.checksum() => {
                return Err(MigrateError::Changed {
                    file: migration.file_name().to_owned(),
                    recorded: record.checksum.clone(),
                    current: migration.checksum(),
                });
            }
            Some(_) => {}
            None => pending.push(migration),
        }
    }
    Ok(pending)
}

async fn apply_pending(
    session: &Session,
    keyspace: &KeyspaceName,
    migrations: &[Migration],
) -> Result<MigrationReport, MigrateError> {
    // Another migrator may have finished while this one waited for the lock.
    let applied = applied_migrations(session, keyspace).await?;
    let pending = pending(migrations, &applied)?;
    // Migration files are keyspace-relative.
    session
        .use_keyspace(keyspace.as_str(), false)
        .await
        .map_err(|error| StoreError::unavailable(format!("USE {keyspace}"), error))?;
    let mut report = MigrationReport {
        applied: Vec::new(),
        already_applied: applied.len(),
    };
    for migration in pending {
        let statements = migration.statements();
        for (index, statement) in statements.iter().enumerate() {
            let failed = |source| MigrateError::Statement {
                file: migration.file_name().to_owned(),
                number: index + 1,
                source,
            };
            apply_statement(session, statement).await.map_err(failed)?;
        }
        super::backfill::after_migration(session, keyspace, migration.version()).await?;
        record_applied(session, keyspace, migration).await?;
        info!(
            file = migration.file_name(),
            statements = statements.len(),
            "applied migration"
        );
        report.applied.push(migration.file_name().to_owned());
    }
    Ok(report)
}

/// Runs one statement of a migration file until the cluster has agreed on its change.
///
/// Every statement in a file may be run again (`IF NOT EXISTS`, options, and `ADD` whose
/// column a first run left behind), so a timeout — which says nothing of whether the change
/// was made — is retried rather than failing a deploy on a busy node.
async fn apply_statement(session: &Session, statement: &str) -> Result<(), StoreError> {
    retrying("a migration statement", || async {
        match session.query_unpaged(statement, ()).await {
            Ok(_) => {}
            // A migration cut short (a lost node, a killed process) is run again whole:
            // a column its first run added is there already, which is what it wanted.
            Err(error)
                if is_alter_add(statement)
                    && error
                        .to_string()
                        .to_ascii_lowercase()
                        .contains("already exist") => {}
            Err(error) => return Err(execution_error("executing", error)),
        }
        // The next statement may go to another node; it must already know this change.
        await_schema_agreement(session).await
    })
    .await
}

/// Runs `attempt` (a schema change and the wait for the cluster to agree on it) again while it
/// times out or finds the cluster unavailable, up to [`STATEMENT_ATTEMPTS`] times: a timeout
/// says nothing of whether the change was made, and every schema change here may run again.
async fn retrying<F, Fut>(what: &str, mut attempt: F) -> Result<(), StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), StoreError>>,
{
    let mut made = 1;
    loop {
        match attempt().await {
            Err(error) if error.is_retryable() && made < STATEMENT_ATTEMPTS => {
                warn!(attempt = made, error = %error.chain(), "{what} will be retried");
                tokio::time::sleep(STATEMENT_RETRY_PAUSE * made).await;
                made += 1;
            }
            outcome => return outcome,
        }
    }
}

/// Whether `statement` adds columns to a table (Cassandra 4.1 has no `ADD IF NOT EXISTS`).
fn is_alter_add(statement: &str) -> bool {
    let words: Vec<String> = statement
        .split_whitespace()
        .take(5)
        .map(str::to_ascii_uppercase)
        .collect();
    words.first().is_some_and(|word| word == "ALTER")
        && words.get(1).is_some_and(|word| word == "TABLE")
        && words.iter().skip(3).any(|word| word == "ADD")
}

async fn record_applied(
    session: &Session,
    keyspace: &KeyspaceName,
    migration: &Migration,
) -> Result<(), StoreError> {
    let cql = format!(
        "INSERT INTO {keyspace}.schema_migrations (version, file_name, checksum, applied_at) VALUES (?, ?, ?, ?)"
    );
    let version = i32::try_from(migration.version()).map_err(|_| {
        StoreError::internal_message(format!(
            "migration version {} too large",
            migration.version()
        ))
    })?;
    session
        .query_unpaged(
            cql,
            (
                version,
                migration.file_name(),
                migration.checksum(),
                Utc::now(),
            ),
        )
        .await
        .map_err(|error| execution_error("recording an applied migration", error))?;
    Ok(())
}

async fn await_schema_agreement(session: &Session) -> Result<(), StoreError> {
    session
        .await_schema_agreement()
        .await
        .map(|_| ())
        .map_err(|error| StoreError::unavailable("schema agreement", error))
}

async fn ensure_keyspace(
    session: &Session,
    keyspace: &KeyspaceName,
    replication: &Replication,
) -> Result<(), StoreError> {
    let exists = session
        .query_unpaged(
            "SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?",
            (keyspace.as_str(),),
        )
        .await
        .map_err(|error| execution_error("looking up the keyspace", error))?
        .into_rows_result()
        .map_err(|error| StoreError::internal("looking up the keyspace", error))?
        .rows_num()
        > 0;
    if exists {
        // Listed is not always usable yet when another server has just created it.
        return await_keyspace_live(session, keyspace).await;
    }
    let cql = format!(
        "CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = {}",
        replication.to_cql()
    );
    retrying("creating the keyspace", || async {
        session
            .query_unpaged(cql.as_str(), ())
            .await
            .map_err(|error| execution_error("creating the keyspace", error))?;
        await_schema_agreement(session).await
    })
    .await?;
    info!(%keyspace, %replication, "created keyspace");
    Ok(())
}

/// The tables the migrator itself needs, created before any migration file can run.
async fn ensure_bookkeeping_tables(
    session: &Session,
    keyspace: &KeyspaceName,
) -> Result<(), StoreError> {
    let tables = [
        (
            "schema_migrations",
            "version int PRIMARY KEY, file_name text, checksum text, applied_at timestamp",
        ),
        (
            "schema_migration_lock",
            "name text PRIMARY KEY, owner uuid, acquired_at timestamp",
        ),
    ];
    for (table, columns) in tables {
        // Look first: concurrent CREATE TABLE IF NOT EXISTS from several nodes can race before
        // Cassandra 5.1, so only the very first start of a keyspace issues it.
        let exists = session
            .query_unpaged(
                "SELECT table_name FROM system_schema.tables WHERE keyspace_name = ? AND table_name = ?",
                (keyspace.as_str(), table),
            )
            .await
            .map_err(|error| execution_error("looking up bookkeeping tables", error))?
            .into_rows_result()
            .map_err(|error| StoreError::internal("looking up bookkeeping tables", error))?
            .rows_num()
            > 0;
        if !exists {
            create_bookkeeping_table(session, keyspace, table, columns).await?;
        }
        await_table_live(session, keyspace, table).await?;
    }
    Ok(())
}

async fn await_keyspace_live(session: &Session, keyspace: &KeyspaceName) -> Result<(), StoreError> {
    let started = Instant::now();
    loop {
        match session.use_keyspace(keyspace.as_str(), false).await {
            Ok(()) => return Ok(()),
            Err(error) if started.elapsed() >= TABLE_LIVE_WAIT => {
                return Err(StoreError::schema_message(format!(
                    "USE {keyspace}: {error}"
                )));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Waits until `table` answers queries. A table another server is creating right now can be
/// listed in `system_schema` while the node still answers "does not exist" or fails with
/// "Unknown CF" for a moment, so any error is retried within the bound.
async fn await_table_live(
    session: &Session,
    keyspace: &KeyspaceName,
    table: &str,
) -> Result<(), StoreError> {
    let cql = format!("SELECT * FROM {keyspace}.{table} LIMIT 1");
    let started = Instant::now();
    loop {
        match session.query_unpaged(cql.as_str(), ()).await {
            Ok(_) => return Ok(()),
            Err(error) if started.elapsed() >= TABLE_LIVE_WAIT => {
                return Err(execution_error("reading bookkeeping tables", error));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Creates one bookkeeping table with an id derived from its name.
///
/// Before Cassandra 5.1 schema changes are not serialised, even on one node: two servers
/// creating the same table at once each mint a table id, and requests prepared against the
/// losing id fail ("Unknown CF"). There is no lock yet to prevent that (this table is the
/// lock), so both creators use the same id instead, which makes concurrent creation
/// idempotent. A server that rejects the `id` option (ScyllaDB, whose schema changes are
/// serialised through Raft) gets the plain statement.
async fn create_bookkeeping_table(
    session: &Session,
    keyspace: &KeyspaceName,
    table: &str,
    columns: &str,
) -> Result<(), StoreError> {
    let id = Uuid::new_v5(
        &Uuid::NAMESPACE_OID,
        format!("adevents/{keyspace}/{table}").as_bytes(),
    );
    let plain = format!("CREATE TABLE IF NOT EXISTS {keyspace}.{table} ({columns})");
    let with_id = format!("{plain} WITH id = {id}");
    retrying("creating a bookkeeping table", || async {
        if let Err(error) = session.query_unpaged(with_id.as_str(), ()).await {
            let rejected_option = matches!(
                &error,
                ExecutionError::LastAttemptError(RequestAttemptError::DbError(
                    DbError::SyntaxError | DbError::Invalid | DbError::ConfigError,
                    _
                ))
            );
            if !rejected_option {
                return Err(execution_error("creating bookkeeping tables", error));
            }
            info!(%table, %error, "the server refused a table id; creating the table without one");
            session
                .query_unpaged(plain.as_str(), ())
                .await
                .map_err(|error| execution_error("creating bookkeeping tables", error))?;
        }
        await_schema_agreement(session).await
    })
    .await
}

/// The right to apply migrations, held as a lightweight-transaction row with a TTL so that a
/// crashed holder cannot block every later start.
struct MigrationLock {
    owner: Uuid,
}

impl MigrationLock {
    async fn acquire(session: &Session, keyspace: &KeyspaceName) -> Result<Self, MigrateError> {
        let owner = Uuid::new_v4();
        let cql = format!(
            "INSERT INTO {keyspace}.schema_migration_lock (name, owner, acquired_at) VALUES ('migrate', ?, ?) \
             IF NOT EXISTS USING TTL {}",
            LOCK_TTL.as_secs()
        );
        let started = Instant::now();
        loop {
            let result = match session
                .query_unpaged(cql.as_str(), (owner, Utc::now()))
                .await
                .map_err(|error| execution_error("taking the migration lock", error))
            {
                Ok(result) => result,
                // A timed-out attempt may still have taken the lock: the next one tells.
                Err(error) if error.is_retryable() && started.elapsed() < LOCK_WAIT => {
                    warn!(error = %error.chain(), "taking the migration lock will be retried");
                    tokio::time::sleep(LOCK_POLL).await;
                    continue;
                }
                Err(error) => return Err(error.into()),
            };
            let row: Row = result
                .into_rows_result()
                .map_err(|error| StoreError::internal("taking the migration lock", error))?
                .first_row::<Row>()
                .map_err(|error| StoreError::internal("taking the migration lock", error))?;
            let applied = row
                .columns
                .first()
                .and_then(|value| value.as_ref()?.as_boolean());
            if applied == Some(true) {
                return Ok(Self { owner });
            }
            // Not applied: the row holds [applied], name, acquired_at, owner (columns sorted).
            let holder = row
                .columns
                .iter()
                .skip(1)
                .find_map(|value| value.as_ref()?.as_uuid());
            if holder == Some(owner) {
                return Ok(Self { owner });
            }
            let holder = holder.map_or_else(|| "unknown".to_owned(), |holder| holder.to_string());
            if started.elapsed() >= LOCK_WAIT {
                return Err(MigrateError::LockTimeout { holder });
            }
            info!(%holder, "waiting for another migrator to finish");
            tokio::time::sleep(LOCK_POLL).await;
        }
    }

    /// Best effort: if the release fails, the TTL frees the lock later.
    async fn release(self, session: &Session, keyspace: &KeyspaceName) {
        let cql = format!(
            "DELETE FROM {keyspace}.schema_migration_lock WHERE name = 'migrate' IF owner = ?"
        );
        if let Err(error) = session.query_unpaged(cql, (self.owner,)).await {
            warn!(%error, "could not release the migration lock; it expires by itself");
        }
    }
}
