//! Erasure records: a durable job per request, holding its subject in the clear only until it
//! is done, then only as a keyed hash.

use super::{Subject, SubjectHash};
use crate::domain::ids::AdvertiserId;
use chrono::{DateTime, Utc};
use std::fmt;
use uuid::Uuid;

/// An erasure's id, chosen by the server at the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ErasureId(Uuid);

impl ErasureId {
    pub const fn new(id: Uuid) -> Self {
        Self(id)
    }

    pub fn generate() -> Self {
        Self(Uuid::new_v4())
    }

    pub const fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl fmt::Display for ErasureId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErasureStatus {
    Pending,
    Done,
}

impl ErasureStatus {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Done => "done",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "pending" => Some(Self::Pending),
            "done" => Some(Self::Done),
            _ => None,
        }
    }
}

/// Events an erasure removed, each identity once: an impression stored twice is one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ErasedCounts {
    pub impressions: u64,
    pub clicks: u64,
    pub view_reports: u64,
    pub conversions: u64,
    pub visits: u64,
}

/// One erasure request and how far it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErasureRecord {
    pub id: ErasureId,
    /// The subject in the clear while the job runs; `None` once it is done.
    pub subject: Option<Subject>,
    pub subject_hash: SubjectHash,
    /// The one advertiser whose data is erased, or every advertiser's.
    pub scope: Option<AdvertiserId>,
    pub requested_at: DateTime<Utc>,
    pub status: ErasureStatus,
    pub completed_at: Option<DateTime<Utc>>,
    /// What the job found to erase, settled once (the first count stored wins) before it
    /// deletes anything, so a resumed or repeated job reports the same numbers.
    pub erased: Option<ErasedCounts>,
}

impl ErasureRecord {
    /// A new request, recorded before it is answered.
    pub fn requested(
        subject: Subject,
        subject_hash: SubjectHash,
        scope: Option<AdvertiserId>,
        at: DateTime<Utc>,
    ) -> Self {
        Self {
            id: ErasureId::generate(),
            subject: Some(subject),
            subject_hash,
            scope,
            requested_at: to_millis(at),
            status: ErasureStatus::Pending,
            completed_at: None,
            erased: None,
        }
    }

    /// The record once the job is done: counts kept, the subject only as its hash.
    pub fn done(&self, counts: ErasedCounts, at: DateTime<Utc>) -> Self {
        Self {
            subject: None,
            status: ErasureStatus::Done,
            completed_at: Some(to_millis(at)),
            erased: Some(counts),
            ..self.clone()
        }
    }

    pub fn erased_subject(&self) -> ErasedSubject {
        ErasedSubject {
            id: self.id,
            subject_hash: self.subject_hash,
            scope: self.scope,
            requested_at: self.requested_at,
        }
    }
}

/// Times as both stores keep them (Cassandra's `timestamp` holds milliseconds), so a record
/// reads back as it was made and the re-sent events it drops are the same on every store.
fn to_millis(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(at.timestamp_millis()).unwrap_or(at)
}

/// What ingestion keeps of every erasure to drop a re-sent old event of its subject: an event
/// of the hashed subject (of the scoped advertiser, if any) timed before the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErasedSubject {
    /// The erasure's id: the impressions it found are recorded under it.
    pub id: ErasureId,
    pub subject_hash: SubjectHash,
    pub scope: Option<AdvertiserId>,
    pub requested_at: DateTime<Utc>,
}

impl ErasedSubject {
    /// Whether an event of this subject, of `advertiser`, timed `at`, was erased.
    pub fn covers(&self, advertiser: AdvertiserId, at: DateTime<Utc>) -> bool {
        self.scope.is_none_or(|scope| scope == advertiser) && at < self.requested_at
    }

    /// Whether a beacon of this subject (a visitor: no advertiser, no scope) timed `at` was
    /// erased.
    pub fn covers_beacon(&self, at: DateTime<Utc>) -> bool {
        at < self.requested_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_erased_subject_covers_older_events_of_its_scope_only() {
        let at = |text: &str| text.parse::<DateTime<Utc>>().expect("time");
        let advertiser = |n: u128| AdvertiserId::new(Uuid::from_u128(n));
        let erased = ErasedSubject {
            id: ErasureId::new(Uuid::from_u128(9)),
            subject_hash: SubjectHash::new([0; 32]),
            scope: Some(advertiser(1)),
            requested_at: at("2026-11-28T12:00:00Z"),
        };
        assert!(erased.covers(advertiser(1), at("2026-11-28T11:59:59.999Z")));
        assert!(!erased.covers(advertiser(1), at("2026-11-28T12:00:00Z")));
        assert!(!erased.covers(advertiser(2), at("2026-11-28T11:00:00Z")));
        let everywhere = ErasedSubject {
            scope: None,
            ..erased
        };
        assert!(everywhere.covers(advertiser(2), at("2026-11-28T11:00:00Z")));
    }
}
