//! The partition an event is stored in: campaign, UTC day and bucket.

use super::bucket::BucketId;
use super::ids::CampaignKey;
use super::time::Day;

/// One partition of a raw event table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventPartition {
    pub campaign: CampaignKey,
    pub day: Day,
    pub bucket: BucketId,
}
