//! What reads return: the few fields queries need, as domain values.

use crate::domain::ids::{AdId, ImpressionId, UserId};
use crate::domain::time::EventTime;

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
