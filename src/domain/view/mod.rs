//! Viewability and engagement (docs/API.md, "Viewability"): what a browser's report says
//! ([`report`]), which client sent it ([`client`]), how an impression's stored reports join
//! into its measures ([`join`]) and how those measures add up ([`counts`]). The join is a pure
//! function of stored rows, so it answers the same in any arrival order, on any process, in a
//! seal, a slice aggregate or a raw read.

mod client;
mod counts;
mod join;
mod report;

pub use client::{AgentTag, Client, Network, ReportId};
pub use counts::ViewCounts;
pub use join::{ImpressionViews, ServedTo, ViewWindow};
pub(crate) use join::{PLACES_PER_CLIENT, join};
pub use report::{ViewKind, ViewKinds, ViewReport, ViewReportError};

use super::ids::{CampaignKey, ImpressionId};
use super::time::EventTime;
use super::traffic::InvalidReason;
use chrono::{DateTime, Utc};

/// A report as the browser sent it, signed with its impression's pixel query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewReportEvent {
    pub(crate) campaign: CampaignKey,
    pub(crate) impression_id: ImpressionId,
    /// The impression's `t`: the report is stored in the impression's partition.
    pub(crate) impression_time: EventTime,
    pub(crate) received: DateTime<Utc>,
    pub(crate) client: Client,
    pub(crate) report: ViewReport,
    pub(crate) invalid: Option<InvalidReason>,
}

impl ViewReportEvent {
    pub(crate) fn id(&self) -> ReportId {
        ReportId::of(&self.client, &self.report)
    }
}

/// One stored copy of a report: a report received twice (a retry on another process) is two
/// rows of one id, and counts at its first arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredReport {
    pub(crate) impression_id: ImpressionId,
    pub(crate) impression_time: EventTime,
    pub(crate) id: ReportId,
    pub(crate) received: DateTime<Utc>,
    pub(crate) client: Client,
    pub(crate) report: ViewReport,
    pub(crate) invalid: Option<InvalidReason>,
}
