//! Server processes in the embedded store: a report per process (started, last reported, as
//! epoch milliseconds) and each process's unflushed owner-days under its id. The folder belongs
//! to one process at a time, so any other process found here has stopped.

use super::EmbeddedStore;
use super::committer::Removals;
use super::engine::{Table, corrupt};
use super::keys::{day_bytes, decode_day};
use crate::domain::owner::Owner;
use crate::domain::process::{ProcessId, ProcessReport, UnflushedDay};
use crate::store::{ProcessStore, StoreError};
use async_trait::async_trait;
use chrono::DateTime;
use uuid::Uuid;

fn report_value(report: &ProcessReport) -> Vec<u8> {
    let mut value = Vec::with_capacity(16);
    value.extend_from_slice(&report.started_at.timestamp_millis().to_be_bytes());
    value.extend_from_slice(&report.last_report_at.timestamp_millis().to_be_bytes());
    value
}

fn decode_report(key: &[u8], value: &[u8]) -> Option<ProcessReport> {
    let millis = |range: std::ops::Range<usize>| {
        DateTime::from_timestamp_millis(i64::from_be_bytes(value.get(range)?.try_into().ok()?))
    };
    Some(ProcessReport {
        id: ProcessId::new(Uuid::from_slice(key).ok()?),
        started_at: millis(0..8)?,
        last_report_at: millis(8..16)?,
        // One process per folder: no other's index to wait for.
        indexed_through: None,
    })
}

/// A mark's key: the process, then the owner's text key, then the day (in key order).
fn mark_key(process: ProcessId, day: &UnflushedDay) -> Vec<u8> {
    let owner = day.owner.to_key();
    let mut key = Vec::with_capacity(16 + owner.len() + 4);
    key.extend_from_slice(process.as_uuid().as_bytes());
    key.extend_from_slice(owner.as_bytes());
    key.extend_from_slice(&day_bytes(day.day));
    key
}

fn decode_mark(key: &[u8]) -> Option<UnflushedDay> {
    let owner = key.get(16..key.len().checked_sub(4)?)?;
    Some(UnflushedDay {
        owner: Owner::from_key(std::str::from_utf8(owner).ok()?)?,
        day: decode_day(key.get(key.len() - 4..)?)?,
    })
}

#[async_trait]
impl ProcessStore for EmbeddedStore {
    async fn report_process(&self, report: &ProcessReport) -> Result<(), StoreError> {
        let row = (
            Table::Process,
            report.id.as_uuid().as_bytes().to_vec(),
            report_value(report),
        );
        self.write("reporting this process", vec![row]).await
    }

    async fn processes(&self) -> Result<Vec<ProcessReport>, StoreError> {
        const CONTEXT: &str = "reading the processes";
        let rows = self.scan(Table::Process, Vec::new(), None, CONTEXT).await?;
        rows.iter()
            .map(|(key, value)| decode_report(key, value).ok_or_else(|| corrupt(CONTEXT)))
            .collect()
    }

    async fn mark_unflushed(
        &self,
        process: ProcessId,
        day: &UnflushedDay,
    ) -> Result<(), StoreError> {
        let row = (Table::ProcessMark, mark_key(process, day), Vec::new());
        self.write("marking an unsaved day", vec![row]).await
    }

    async fn clear_unflushed(
        &self,
        process: ProcessId,
        day: &UnflushedDay,
    ) -> Result<(), StoreError> {
        let removal = (Table::ProcessMark, mark_key(process, day));
        self.committer
            .commit_replacing("clearing an unsaved day", vec![removal], Vec::new())
            .await
    }

    async fn unflushed(&self, process: ProcessId) -> Result<Vec<UnflushedDay>, StoreError> {
        const CONTEXT: &str = "reading a process's unsaved days";
        let prefix = process.as_uuid().as_bytes().to_vec();
        let rows = self.scan(Table::ProcessMark, prefix, None, CONTEXT).await?;
        rows.iter()
            .map(|(key, _)| decode_mark(key).ok_or_else(|| corrupt(CONTEXT)))
            .collect()
    }

    async fn remove_process(&self, process: ProcessId) -> Result<(), StoreError> {
        const CONTEXT: &str = "removing a process";
        let id = process.as_uuid().as_bytes().to_vec();
        let marks = self
            .scan(Table::ProcessMark, id.clone(), None, CONTEXT)
            .await?;
        let mut removals: Removals = marks
            .iter()
            .map(|(key, _)| (Table::ProcessMark, key.to_vec()))
            .collect();
        removals.push((Table::Process, id));
        self.committer
            .commit_replacing(CONTEXT, removals, Vec::new())
            .await
    }

    fn is_shared(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::beacon::SiteId;
    use crate::domain::time::Day;

    #[test]
    fn marks_and_reports_decode_to_what_was_written() {
        let process = ProcessId::random();
        let day = UnflushedDay {
            owner: Owner::Site(SiteId::parse("shop.example").expect("valid")),
            day: Day::new("2025-11-16".parse().expect("date")),
        };
        assert_eq!(decode_mark(&mark_key(process, &day)), Some(day));
        let now = chrono::Utc::now();
        let report = ProcessReport {
            id: process,
            started_at: DateTime::from_timestamp_millis(now.timestamp_millis() - 5000)
                .expect("time"),
            last_report_at: DateTime::from_timestamp_millis(now.timestamp_millis()).expect("time"),
            indexed_through: None,
        };
        let key = process.as_uuid().as_bytes().to_vec();
        assert_eq!(decode_report(&key, &report_value(&report)), Some(report));
    }
}
