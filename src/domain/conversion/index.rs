//! The event index attribution reads (and subject access will): each impression and click of
//! an advertiser, found by the impression's id (rule 1, and a click's user) and by the user
//! (rule 2), without scanning campaigns or days. Entries live in partitions of (advertiser,
//! week, bucket of the key), so one write of a batch of events is a few dozen mutations and a
//! user with millions of events fills a week's partition, never one without end.

use crate::domain::event::{Click, Impression};
use crate::domain::ids::{AdId, AdvertiserId, CampaignId, ImpressionId, UserId};
use crate::domain::time::EventTime;
use chrono::{DateTime, Utc};

/// Buckets of an advertiser-week, by a hash of the key.
pub const INDEX_BUCKETS: u16 = 64;

/// What an entry is found by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IndexKey {
    /// Events of one impression: its copies and its clicks.
    Impression(ImpressionId),
    /// A user's impressions, and clicks on them.
    User(UserId),
}

impl IndexKey {
    pub fn code(&self) -> i8 {
        match self {
            Self::Impression(_) => 0,
            Self::User(_) => 1,
        }
    }

    pub fn id(&self) -> uuid::Uuid {
        match self {
            Self::Impression(id) => id.as_uuid(),
            Self::User(id) => id.as_uuid(),
        }
    }

    pub fn from_parts(code: i8, id: uuid::Uuid) -> Option<Self> {
        match code {
            0 => Some(Self::Impression(ImpressionId::new(id))),
            1 => Some(Self::User(UserId::new(id))),
            _ => None,
        }
    }

    /// Its bucket among [`INDEX_BUCKETS`].
    pub fn bucket(&self) -> u16 {
        let id = self.id();
        (xxhash_rust::xxh3::xxh3_64(id.as_bytes()) % u64::from(INDEX_BUCKETS)) as u16
    }
}

/// An index entry's event kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IndexedKind {
    Impression,
    Click,
}

impl IndexedKind {
    pub fn code(&self) -> i8 {
        match self {
            Self::Impression => 0,
            Self::Click => 1,
        }
    }

    pub fn from_code(code: i8) -> Option<Self> {
        match code {
            0 => Some(Self::Impression),
            1 => Some(Self::Click),
            _ => None,
        }
    }
}

/// Weeks since the Unix epoch (which began on a Thursday): the time part of an index
/// partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Week(i32);

impl Week {
    pub fn of(at: DateTime<Utc>) -> Self {
        Self(at.timestamp().div_euclid(7 * 86_400) as i32)
    }

    pub const fn new(week: i32) -> Self {
        Self(week)
    }

    pub fn get(&self) -> i32 {
        self.0
    }

    /// The last UTC day this week holds part of: what outlives every event of the week expires
    /// with that day.
    pub fn last_day(&self) -> crate::domain::time::Day {
        let end = (i64::from(self.0) + 1) * 7 * 86_400 - 1;
        let at = DateTime::from_timestamp(end, 0).unwrap_or(DateTime::<Utc>::MAX_UTC);
        crate::domain::time::Day::new(at.date_naive())
    }

    /// Every week from the one holding `from` through the one holding `to`, newest first.
    pub fn newest_first(from: DateTime<Utc>, to: DateTime<Utc>) -> impl Iterator<Item = Week> {
        let (first, last) = (Self::of(from).0, Self::of(to).0);
        (first..=last).rev().map(Week)
    }
}

/// One event in the index, under one of its keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub advertiser_id: AdvertiserId,
    pub key: IndexKey,
    pub timestamp: EventTime,
    pub kind: IndexedKind,
    /// The impression (of a click, the impression clicked).
    pub impression_id: ImpressionId,
    pub campaign_id: CampaignId,
    pub ad_id: AdId,
    /// The impression's user; on an impression-key entry of a click, unknown (`None`).
    pub user_id: Option<UserId>,
    /// When this server stored the event.
    pub received: DateTime<Utc>,
    pub valid: bool,
}

impl IndexEntry {
    pub fn week(&self) -> Week {
        Week::of(self.timestamp.instant())
    }

    /// An impression's two entries: by its id and by its user (their arrival is set when
    /// they are queued).
    pub fn of_impression(impression: &Impression) -> [Self; 2] {
        let entry = |key| Self {
            advertiser_id: impression.campaign.advertiser_id,
            key,
            timestamp: impression.timestamp,
            kind: IndexedKind::Impression,
            impression_id: impression.impression_id,
            campaign_id: impression.campaign.campaign_id,
            ad_id: impression.ad_id,
            user_id: Some(impression.user_id),
            received: DateTime::UNIX_EPOCH,
            valid: impression.invalid.is_none(),
        };
        [
            entry(IndexKey::Impression(impression.impression_id)),
            entry(IndexKey::User(impression.user_id)),
        ]
    }

    /// A click's entry by its impression's id; its user's entry needs the impression's user
    /// ([`Self::for_user`]). Its arrival is set when it is queued.
    pub fn of_click(click: &Click) -> Self {
        Self {
            advertiser_id: click.campaign.advertiser_id,
            key: IndexKey::Impression(click.impression_id),
            timestamp: click.timestamp,
            kind: IndexedKind::Click,
            impression_id: click.impression_id,
            campaign_id: click.campaign.campaign_id,
            ad_id: click.ad_id,
            user_id: None,
            received: DateTime::UNIX_EPOCH,
            valid: click.invalid.is_none(),
        }
    }

    /// This entry under its user's key, once the user is known.
    pub fn for_user(&self, user: UserId) -> Self {
        Self {
            key: IndexKey::User(user),
            user_id: Some(user),
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weeks_cover_a_look_back_newest_first() {
        let at = |text: &str| text.parse::<DateTime<Utc>>().expect("time");
        assert_eq!(Week::of(at("1970-01-01T00:00:00Z")).get(), 0);
        assert_eq!(Week::of(at("1970-01-07T23:59:59Z")).get(), 0);
        assert_eq!(Week::of(at("1970-01-08T00:00:00Z")).get(), 1);
        let weeks: Vec<_> =
            Week::newest_first(at("2026-08-30T00:00:00Z"), at("2026-11-28T00:00:00Z")).collect();
        assert_eq!(weeks.len(), 14);
        assert!(
            weeks
                .windows(2)
                .all(|pair| pair[0].get() == pair[1].get() + 1)
        );
    }
}
