//! Server processes sharing a store, as the others see them: each reports itself every second
//! and records which owner-days it holds live state for that is not stored yet, so that when
//! one goes silent (a crash) another repairs those days from the raw events.

use super::owner::Owner;
use super::time::Day;
use chrono::{DateTime, TimeDelta, Utc};
use std::fmt;
use uuid::Uuid;

/// One run of a server process (a restart is a new one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessId(Uuid);

impl ProcessId {
    /// A fresh id for the process starting now.
    pub(crate) fn random() -> Self {
        Self(Uuid::new_v4())
    }

    pub(crate) const fn new(id: Uuid) -> Self {
        Self(id)
    }

    pub(crate) const fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl fmt::Display for ProcessId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// A process's latest report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessReport {
    pub id: ProcessId,
    pub(crate) started_at: DateTime<Utc>,
    pub(crate) last_report_at: DateTime<Utc>,
    /// Every event the process stored before this instant is in the event index (`None`: it
    /// keeps no index, or has not written one yet).
    pub(crate) indexed_through: Option<DateTime<Utc>>,
}

impl ProcessReport {
    /// How often a running process reports.
    pub(crate) const PERIOD: TimeDelta = TimeDelta::seconds(1);
    /// A process that has not reported for this long is taken for gone: its unsaved state may
    /// be missing until it is repaired.
    pub(crate) const SILENCE: TimeDelta = TimeDelta::seconds(10);

    /// Whether the process has been silent for [`Self::SILENCE`] at `now`.
    pub(crate) fn is_silent(&self, now: DateTime<Utc>) -> bool {
        now - self.last_report_at >= Self::SILENCE
    }
}

/// An owner-day a process holds live state for that may not be stored yet.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UnflushedDay {
    pub(crate) owner: Owner,
    pub(crate) day: Day,
}
