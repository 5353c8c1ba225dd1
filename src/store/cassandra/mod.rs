//! The production store: Apache Cassandra 5.0 (and, untested here, 4.1 or ScyllaDB) through
//! the `scylla` driver.
//!
//! Every table name is qualified with the configured keyspace, so statements never depend on
//! a session-wide `USE`, and the store can start before its keyspace exists (and report
//! "not ready" until migrations create it). One file per subsystem of the contract
//! ([`events`], [`visits`], [`settings`], [`seals`], [`rollups`], [`access`], [`processes`],
//! [`delivery`], [`listings`], [`conversions`], [`due_lists`], [`event_index`], [`subjects`],
//! [`addresses`], [`retention`]),
//! each with its prepared statements.

mod access;
mod addresses;
mod backfill;
pub mod config;
mod conversions;
mod delivery;
mod due_lists;
mod erasures;
mod errors;
mod event_index;
mod event_reads;
mod event_statements;
mod event_writes;
mod events;
mod listings;
pub mod migrator;
mod processes;
mod replica_batches;
mod retention;
mod rollups;
mod seals;
mod session;
mod settings;
mod slices;
mod statements;
mod subject_lines;
mod subject_statements;
mod subjects;
mod views;
mod visit_batches;
mod visits;

use crate::domain::retention::Retention;
use crate::domain::time::Day;
use crate::migrations::Migration;
use crate::store::{Store, StoreError};
use access::AccessStatements;
use async_trait::async_trait;
use config::{CassandraConfig, KeyspaceName};
use conversions::ConversionStatements;
use delivery::DeliveryStatements;
use due_lists::DueStatements;
use event_index::EventIndexStatements;
use event_statements::EventStatements;
use event_writes::EventWriter;
use listings::ListingStatements;
use migrator::{MigrateError, MigrationReport};
use processes::ProcessStatements;
use rollups::RollupStatements;
use scylla::client::session::Session;
use scylla::statement::unprepared::Statement;
use seals::SealStatements;
use settings::SettingsStatements;
use slices::SliceStatements;
use std::sync::Arc;
use std::time::Duration;
use subject_statements::SubjectStatements;
use tokio::sync::OnceCell;
use views::ViewStatements;
use visits::VisitStatements;

/// A readiness probe answers quickly or not at all: a load balancer asks again soon.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Every prepared statement, by subsystem.
struct Prepared {
    events: EventStatements,
    visits: VisitStatements,
    settings: SettingsStatements,
    seals: SealStatements,
    rollups: RollupStatements,
    access: AccessStatements,
    processes: ProcessStatements,
    delivery: DeliveryStatements,
    listings: ListingStatements,
    slices: SliceStatements,
    views: ViewStatements,
    conversions: ConversionStatements,
    due_lists: DueStatements,
    event_index: EventIndexStatements,
    subjects: SubjectStatements,
}

/// The store on a Cassandra or ScyllaDB cluster.
pub struct CassandraStore {
    session: Arc<Session>,
    config: CassandraConfig,
    /// The newest migration this build expects, which readiness checks for.
    latest_migration: Option<Migration>,
    /// Prepared once, at start-up after migrations ([`prepare`](Self::prepare)), or by the
    /// first request if the schema was not there yet.
    prepared: OnceCell<Prepared>,
    /// How long raw rows live after their UTC day began (`USING TTL`, from the row's own day).
    retain_raw: Retention,
    /// Single beacons grouped by partition while a write of the partition is in flight.
    visit_batches: Arc<visit_batches::VisitBatches>,
    /// The sweep's deletions, prepared by its first pass (they are not on any request path).
    retention: OnceCell<retention::RetentionStatements>,
    /// The subject directory's weeks this process has listed.
    listed_weeks: subject_lines::ListedWeeks,
}

impl CassandraStore {
    /// Connects to the cluster; `migrations` is the schema this build expects.
    pub async fn connect(
        config: CassandraConfig,
        migrations: &[Migration],
    ) -> Result<Self, StoreError> {
        let session = session::connect(&config).await?;
        let retain_raw = config.retain_raw;
        Ok(Self {
            session: Arc::new(session),
            config,
            latest_migration: migrations.last().cloned(),
            prepared: OnceCell::new(),
            retain_raw,
            visit_batches: Arc::default(),
            retention: OnceCell::new(),
            listed_weeks: subject_lines::ListedWeeks::default(),
        })
    }

    /// Prepares every statement; fails while the schema is missing.
    pub async fn prepare(&self) -> Result<(), StoreError> {
        self.prepared().await.map(|_| ())
    }

    async fn prepared(&self) -> Result<&Prepared, StoreError> {
        self.prepared
            .get_or_try_init(|| async {
                let (session, keyspace) = (&self.session, &self.config.keyspace);
                let (
                    events,
                    visits,
                    settings,
                    seals,
                    rollups,
                    access,
                    processes,
                    delivery,
                    listings,
                    slices,
                    views,
                    conversions,
                    due_lists,
                    event_index,
                    subjects,
                ) = futures::try_join!(
                    EventStatements::prepare(session, keyspace),
                    VisitStatements::prepare(session, keyspace),
                    SettingsStatements::prepare(session, keyspace),
                    SealStatements::prepare(session, keyspace),
                    RollupStatements::prepare(session, keyspace),
                    AccessStatements::prepare(session, keyspace),
                    ProcessStatements::prepare(session, keyspace),
                    DeliveryStatements::prepare(session, keyspace),
                    ListingStatements::prepare(session, keyspace),
                    SliceStatements::prepare(session, keyspace),
                    ViewStatements::prepare(session, keyspace),
                    ConversionStatements::prepare(session, keyspace),
                    DueStatements::prepare(session, keyspace),
                    EventIndexStatements::prepare(session, keyspace),
                    SubjectStatements::prepare(session, keyspace),
                )?;
                Ok(Prepared {
                    events,
                    visits,
                    settings,
                    seals,
                    rollups,
                    access,
                    processes,
                    delivery,
                    listings,
                    slices,
                    views,
                    conversions,
                    due_lists,
                    event_index,
                    subjects,
                })
            })
            .await
    }

    fn writer<'a>(&'a self, statements: &'a EventStatements, day: Day) -> EventWriter<'a> {
        EventWriter {
            session: &self.session,
            statements,
            mode: self.config.write_mode,
            ttl: self.raw_ttl(day),
        }
    }

    /// Seconds for `USING TTL` of a raw row of `day` written now: so the row expires
    /// `--retain-raw` after its day began, not after it was written, and every row of a day
    /// at once (0: never expire).
    fn raw_ttl(&self, day: Day) -> i32 {
        self.retain_raw
            .ttl_seconds(day, chrono::Utc::now())
            .unwrap_or(0)
    }

    /// Seconds for `USING TTL` of a rollup row of `day` (`--retain-aggregates`; 0: never).
    fn aggregate_ttl(&self, day: Day) -> i32 {
        self.config
            .retain_aggregates
            .ttl_seconds(day, chrono::Utc::now())
            .unwrap_or(0)
    }

    /// The driver session, for benchmarks that compare the service with raw driver calls.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
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
        const CONTEXT: &str = "checking the schema version";
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
            .map_err(|error| errors::execution_error(CONTEXT, error))?;
        let recorded = result
            .into_rows_result()
            .map_err(|error| errors::decode_error(CONTEXT, error))?
            .maybe_first_row::<(String,)>()
            .map_err(|error| errors::decode_error(CONTEXT, error))?;
        match recorded {
            Some((checksum,)) if checksum == latest.checksum() => Ok(()),
            Some(_) => Err(StoreError::schema_message(format!(
                "migration {} was applied from a different file",
                latest.file_name()
            ))),
            None => Err(StoreError::schema_message(format!(
                "migration {} is not applied",
                latest.file_name()
            ))),
        }
    }
}
