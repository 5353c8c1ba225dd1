//! Server processes on Cassandra: `server_process` (one small partition, every process's
//! report) and `process_mark` (a partition per process: its unflushed owner-days). See
//! `migrations/0007_processes.cql`.

use super::CassandraStore;
use super::config::KeyspaceName;
use super::errors::decode_error;
use super::statements::{execute, prepare_all, read_all};
use crate::domain::owner::Owner;
use crate::domain::process::{ProcessId, ProcessReport, UnflushedDay};
use crate::domain::time::Day;
use crate::store::error::Message;
use crate::store::{ProcessStore, StoreError};
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use scylla::DeserializeRow;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use uuid::Uuid;

/// Every process's report lives in this partition.
const SHARD: i32 = 0;

pub(crate) struct ProcessStatements {
    insert_report: PreparedStatement,
    select_reports: PreparedStatement,
    delete_report: PreparedStatement,
    insert_mark: PreparedStatement,
    select_marks: PreparedStatement,
    delete_mark: PreparedStatement,
    delete_marks: PreparedStatement,
}

impl ProcessStatements {
    pub(crate) async fn prepare(
        session: &Session,
        keyspace: &KeyspaceName,
    ) -> Result<Self, StoreError> {
        let [
            insert_report,
            select_reports,
            delete_report,
            insert_mark,
            select_marks,
            delete_mark,
            delete_marks,
        ] = prepare_all(
            session,
            [
                format!(
                    "INSERT INTO {keyspace}.server_process (shard, process_id, started_at, \
                     last_report_at, indexed_through) VALUES (?, ?, ?, ?, ?)"
                ),
                format!(
                    "SELECT process_id, started_at, last_report_at, indexed_through \
                     FROM {keyspace}.server_process \
                     WHERE shard = ?"
                ),
                format!("DELETE FROM {keyspace}.server_process WHERE shard = ? AND process_id = ?"),
                format!(
                    "INSERT INTO {keyspace}.process_mark (process_id, owner, day) VALUES (?, ?, ?)"
                ),
                format!("SELECT owner, day FROM {keyspace}.process_mark WHERE process_id = ?"),
                format!(
                    "DELETE FROM {keyspace}.process_mark WHERE process_id = ? AND owner = ? AND day = ?"
                ),
                format!("DELETE FROM {keyspace}.process_mark WHERE process_id = ?"),
            ],
        )
        .await?;
        Ok(Self {
            insert_report,
            select_reports,
            delete_report,
            insert_mark,
            select_marks,
            delete_mark,
            delete_marks,
        })
    }
}

/// A mark's key columns, as the mark statements bind them.
fn mark_values(process: ProcessId, day: &UnflushedDay) -> (Uuid, String, NaiveDate) {
    (process.as_uuid(), day.owner.to_key(), day.day.date())
}

#[derive(DeserializeRow)]
struct StoredReport {
    process_id: Uuid,
    started_at: DateTime<Utc>,
    last_report_at: DateTime<Utc>,
    indexed_through: Option<DateTime<Utc>>,
}

#[derive(DeserializeRow)]
struct StoredMark {
    owner: String,
    day: NaiveDate,
}

#[async_trait]
impl ProcessStore for CassandraStore {
    async fn report_process(&self, report: &ProcessReport) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.processes;
        let values = (
            SHARD,
            report.id.as_uuid(),
            report.started_at,
            report.last_report_at,
            report.indexed_through,
        );
        execute(
            &self.session,
            &statements.insert_report,
            values,
            "reporting this process",
        )
        .await
    }

    async fn processes(&self) -> Result<Vec<ProcessReport>, StoreError> {
        let statements = &self.prepared().await?.processes;
        let rows: Vec<StoredReport> = read_all(
            &self.session,
            &statements.select_reports,
            (SHARD,),
            "reading the processes",
        )
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| ProcessReport {
                id: ProcessId::new(row.process_id),
                started_at: row.started_at,
                last_report_at: row.last_report_at,
                indexed_through: row.indexed_through,
            })
            .collect())
    }

    async fn mark_unflushed(
        &self,
        process: ProcessId,
        day: &UnflushedDay,
    ) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.processes;
        let values = mark_values(process, day);
        execute(
            &self.session,
            &statements.insert_mark,
            values,
            "marking an unsaved day",
        )
        .await
    }

    async fn clear_unflushed(
        &self,
        process: ProcessId,
        day: &UnflushedDay,
    ) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.processes;
        let values = mark_values(process, day);
        execute(
            &self.session,
            &statements.delete_mark,
            values,
            "clearing an unsaved day",
        )
        .await
    }

    async fn unflushed(&self, process: ProcessId) -> Result<Vec<UnflushedDay>, StoreError> {
        const CONTEXT: &str = "reading a process's unsaved days";
        let statements = &self.prepared().await?.processes;
        let rows: Vec<StoredMark> = read_all(
            &self.session,
            &statements.select_marks,
            (process.as_uuid(),),
            CONTEXT,
        )
        .await?;
        rows.into_iter()
            .map(|row| {
                let owner = Owner::from_key(&row.owner)
                    .ok_or_else(|| decode_error(CONTEXT, Message(row.owner.clone())))?;
                Ok(UnflushedDay {
                    owner,
                    day: Day::new(row.day),
                })
            })
            .collect()
    }

    async fn remove_process(&self, process: ProcessId) -> Result<(), StoreError> {
        const CONTEXT: &str = "removing a process";
        let statements = &self.prepared().await?.processes;
        // Marks first: a report without marks is harmless, marks without a report would
        // never be repaired.
        execute(
            &self.session,
            &statements.delete_marks,
            (process.as_uuid(),),
            CONTEXT,
        )
        .await?;
        execute(
            &self.session,
            &statements.delete_report,
            (SHARD, process.as_uuid()),
            CONTEXT,
        )
        .await
    }

    fn is_shared(&self) -> bool {
        true
    }
}
