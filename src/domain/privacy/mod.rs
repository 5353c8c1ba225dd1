//! Personal data (docs/DESIGN.md, "Personal data"): whose data an erasure or a subject access
//! names, the directory that finds a user's events without scanning, and erasure records.

pub mod erasure;
pub mod subject_hash;

pub use erasure::{ErasedCounts, ErasedSubject, ErasureId, ErasureRecord, ErasureStatus};
pub use subject_hash::{PrivacyKey, SubjectHash};

use crate::domain::conversion::index::Week;
use crate::domain::ids::{AdvertiserId, UserId};

/// A person whose data is asked for or erased.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Subject {
    /// The ad servers' `user_id`: impressions, their clicks and view reports.
    User(UserId),
}

/// One line of the subject directory: `user` has indexed events of `advertiser` in `week`.
/// The directory is what makes an erasure of every advertiser a read of one partition, then
/// of the index partitions it names, never a scan of advertisers, campaigns or days.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubjectWeek {
    pub user_id: UserId,
    pub advertiser_id: AdvertiserId,
    pub week: Week,
}
