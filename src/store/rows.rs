//! What reads return: the few fields queries need, as domain values.

use crate::domain::beacon::{Features, Guid, SiteId};
use crate::domain::ids::{AdId, ImpressionId, UserId};
use crate::domain::time::{Day, EventTime};
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// The thin copy of an impression that counting reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImpressionSummaryRow {
    pub impression_id: ImpressionId,
    pub ad_id: AdId,
    pub user_id: UserId,
    pub timestamp: EventTime,
}

/// One stored click.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClickRow {
    pub impression_id: ImpressionId,
    pub ad_id: AdId,
    pub timestamp: EventTime,
}

/// One stored beacon, without its partition's site and day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VisitRow {
    pub timestamp: EventTime,
    pub guid: Guid,
    pub features: Features,
}

/// Where the hourly sketches of one site, UTC day and feature combination are kept.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SketchPartition {
    pub site: SiteId,
    pub day: Day,
    /// [`Features::combination_key`] of the combination.
    pub combination: String,
}

/// One writer's absolute state of one hour's sketch: rewriting it is harmless, and writers
/// never overwrite each other (each has its own `writer` id); readers merge them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SketchRow {
    /// The start of the UTC hour.
    pub hour: DateTime<Utc>,
    pub writer: Uuid,
    /// [`crate::domain::sketch::UniqueSketch::to_bytes`].
    pub sketch: Vec<u8>,
    /// When this state was captured (microseconds since the epoch, increasing per writer): of
    /// two writes of one writer's row, the later capture wins, whatever order they land in
    /// (a retried or delayed write never rolls a sketch back).
    pub captured_at: i64,
}
