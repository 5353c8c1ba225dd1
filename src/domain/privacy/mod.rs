//! Personal data (docs/DESIGN.md, "Personal data"): whose data an erasure or a subject access
//! names, the directory that finds a user's events without scanning, and erasure records.

pub mod erasure;
pub mod subject_hash;

pub use erasure::{ErasedCounts, ErasedSubject, ErasureId, ErasureRecord, ErasureStatus};
pub use subject_hash::{PrivacyKey, SubjectHash};

use crate::domain::beacon::{Guid, SiteId};
use crate::domain::conversion::index::Week;
use crate::domain::conversion::{Conversion, ConversionId};
use crate::domain::ids::{AdvertiserId, UserId};
use crate::domain::time::Day;

/// A person whose data is asked for or erased.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Subject {
    /// The ad servers' `user_id`: impressions, their clicks and view reports, and the
    /// conversions carrying it.
    User(UserId),
    /// A site's visitor, as its page script names it: that visitor's beacons on that site.
    Visitor { site: SiteId, guid: Guid },
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

/// A conversion carrying `user_id`, in the subject index: found through the directory line
/// (user, advertiser, week of the conversion's time) that is written with it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubjectConversion {
    pub advertiser_id: AdvertiserId,
    pub week: Week,
    pub user_id: UserId,
    pub conversion_id: ConversionId,
}

impl SubjectConversion {
    /// The entry of a conversion that carries a user; `None` for one that does not.
    pub fn of(conversion: &Conversion) -> Option<Self> {
        Some(Self {
            advertiser_id: conversion.advertiser_id,
            week: Week::of(conversion.timestamp.instant()),
            user_id: conversion.user_id?,
            conversion_id: conversion.conversion_id.clone(),
        })
    }

    /// The directory line that leads to this entry.
    pub fn line(&self) -> SubjectWeek {
        SubjectWeek {
            user_id: self.user_id,
            advertiser_id: self.advertiser_id,
            week: self.week,
        }
    }
}

/// One entry of the visitor index: `guid` sent beacons to `site` on UTC `day`. A visitor's
/// entries are one partition (site, guid), so finding a visitor is one read, then one visit
/// partition per day (the bucket its guid hashes to), never a scan of the site's days.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VisitorDay {
    pub site: SiteId,
    pub guid: Guid,
    pub day: Day,
}
