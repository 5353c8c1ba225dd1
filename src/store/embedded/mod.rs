//! The zero-setup store: an embedded LSM engine (`fjall`) in a local data folder.
//!
//! Each table of the Cassandra schema is one fjall keyspace, and each row's key starts with its
//! partition key ([`keys`]), so a partition is one contiguous, clustering-ordered key range and
//! the planner above reads it exactly as it reads a Cassandra partition. A write call is one
//! atomic write batch, in the journal before the call returns: with `--fsync always` (the
//! default) fdatasync'ed, so it survives power loss; with `--fsync never`, handed to the OS,
//! so it survives a crash of the process (kill -9) but not of the machine. The folder is locked:
//! a second process on it is refused.
//!
//! Laid out like the Cassandra store: opening ([`open`]), the engine and its committer
//! ([`engine`], [`committer`]), key and value encodings, and one file per subsystem of the
//! contract ([`events`], [`visits`], [`settings`], [`seals`], [`rollups`], [`access`],
//! [`processes`], [`delivery`], [`listings`], [`addresses`]).

mod access;
mod addresses;
mod committer;
mod conversions;
mod delivery;
mod engine;
mod event_index;
mod events;
mod keys;
mod listings;
mod open;
mod processes;
mod recent;
mod retention;
mod rollup_keys;
mod rollup_retention;
mod rollups;
mod rows;
mod seals;
mod settings;
mod site_keys;
mod slices;
mod subject_keys;
mod subjects;
mod views;
mod visits;

use crate::store::{Store, StoreError};
use async_trait::async_trait;
use committer::Committer;
use engine::{ENGINE_CALLS_IN_FLIGHT, Table, Tables};
use std::path::PathBuf;
use std::sync::Arc;

/// When the journal is synced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fsync {
    /// fdatasync before every answer: acknowledged events survive power loss.
    Always,
    /// Hand the journal to the OS before every answer: acknowledged events survive a crash of
    /// the process, not of the machine.
    Never,
}

#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    pub data_dir: PathBuf,
    pub fsync: Fsync,
    pub memory: EngineMemory,
}

/// How much memory the storage engine may hold besides what the service itself keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineMemory {
    /// The most one table keeps in memory before it writes a segment to disk.
    pub(crate) memtable_bytes: u64,
    /// Decoded blocks of segments kept for reads.
    pub(crate) cache_bytes: u64,
    /// The journals' total size on disk; past it the engine writes the oldest memtables out,
    /// so it also bounds how much unwritten data all the tables hold in memory together.
    pub(crate) journal_bytes: u64,
}

impl EngineMemory {
    /// The smallest journal the engine accepts.
    pub(crate) const MIN_JOURNAL_BYTES: u64 = 64 * 1024 * 1024;
}

impl Default for EngineMemory {
    /// Sized for a small machine: see docs/BENCHMARKS.md, "Engine memory".
    fn default() -> Self {
        Self {
            memtable_bytes: 8 * 1024 * 1024,
            cache_bytes: 16 * 1024 * 1024,
            journal_bytes: Self::MIN_JOURNAL_BYTES,
        }
    }
}

/// The embedded store; cheap to clone, one per data folder and process.
#[derive(Clone)]
pub struct EmbeddedStore {
    tables: Arc<Tables>,
    committer: Arc<Committer>,
    engine_slots: Arc<tokio::sync::Semaphore>,
    /// Held while an owner's listed days are read and widened.
    listing_writes: Arc<tokio::sync::Mutex<()>>,
    /// What this process wrote to counted rows, by campaign and event time: it is the only
    /// writer, so a summary may keep what it read raw (`SliceStore::changes`).
    changes: Arc<crate::store::ChangeLog>,
    /// The newest seconds of the tables a raw read of an open stretch reads, as committed.
    recent: Arc<recent::RecentRows>,
}

#[cfg(test)]
impl EmbeddedStore {
    /// A store in `folder` for unit tests, with the default engine memory.
    pub(crate) fn open_for_test(folder: &std::path::Path, fsync: Fsync) -> Self {
        Self::open(&EmbeddedConfig {
            data_dir: folder.to_owned(),
            fsync,
            memory: EngineMemory::default(),
        })
        .expect("a store in a temporary folder")
    }
}

impl EmbeddedStore {
    /// Records that a write, now visible, changed each campaign's counted rows from the paired
    /// time on.
    fn changed(
        &self,
        changes: impl IntoIterator<
            Item = (
                crate::domain::ids::CampaignKey,
                chrono::DateTime<chrono::Utc>,
            ),
        >,
    ) {
        self.changes.record(changes);
    }

    /// Opens (or creates) the store in `config.data_dir`, refusing a folder another process holds.
    pub fn open(config: &EmbeddedConfig) -> Result<Self, StoreError> {
        let tables = Arc::new(open::open_tables(config)?);
        let recent = Arc::new(recent::RecentRows::new(
            chrono::Utc::now().timestamp_millis(),
            tables.created,
        ));
        let committer = Arc::new(Committer::start(Arc::clone(&tables), Arc::clone(&recent))?);
        Ok(Self {
            tables,
            committer,
            engine_slots: Arc::new(tokio::sync::Semaphore::new(ENGINE_CALLS_IN_FLIGHT)),
            listing_writes: Arc::new(tokio::sync::Mutex::new(())),
            changes: Arc::new(crate::store::ChangeLog::new()),
            recent,
        })
    }
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn check_ready(&self) -> Result<(), StoreError> {
        if !self.committer.is_running() {
            return Err(StoreError::internal_message(
                "the embedded store's commit thread stopped; restart the server",
            ));
        }
        if let Some(failure) = self.committer.failure() {
            return Err(StoreError::unavailable_message(format!(
                "the last write to the data folder failed ({failure}); check its disk"
            )));
        }
        // A local folder answers whenever the process runs.
        self.scan(
            Table::CampaignConfig,
            Vec::new(),
            Some(1),
            "checking readiness",
        )
        .await
        .map(|_| ())
    }
}
