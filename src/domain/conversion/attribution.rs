//! The attribution rules of the contract, as a pure function of the conversion, the index
//! entries its rule read, the moment past which stored events no longer count, and each
//! campaign's look-backs. Pure, so every process that decides from the same entries decides
//! the same (docs/DESIGN.md, "Conversions").

use super::Conversion;
use super::index::{IndexEntry, IndexKey, IndexedKind};
use super::look_back::LookBack;
use crate::domain::ids::{AdId, CampaignId, ImpressionId};
use chrono::{DateTime, Utc};

/// How a conversion was attributed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AttributionKind {
    PostClick,
    PostView,
}

impl AttributionKind {
    pub fn code(&self) -> i8 {
        match self {
            Self::PostClick => 1,
            Self::PostView => 2,
        }
    }

    pub fn from_code(code: i8) -> Option<Self> {
        match code {
            1 => Some(Self::PostClick),
            2 => Some(Self::PostView),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::PostClick => "post_click",
            Self::PostView => "post_view",
        }
    }
}

/// The click or impression a conversion is credited to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attribution {
    pub kind: AttributionKind,
    pub campaign_id: CampaignId,
    pub ad_id: AdId,
    pub impression_id: ImpressionId,
    /// When the credited click or impression happened.
    pub event_time: DateTime<Utc>,
}

/// A campaign's look-backs, as in force at the conversion's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LookBacks {
    pub click: LookBack,
    pub view: LookBack,
}

impl LookBacks {
    /// The contract's defaults: 30 days after a click, one day after a view.
    pub const DEFAULT: Self = Self {
        click: LookBack::CLICK_DEFAULT,
        view: LookBack::VIEW_DEFAULT,
    };
}

/// Decides `conversion` from `entries` (those of the key its rule reads: the named impression,
/// else the user). Counts only valid events of its advertiser stored by `stored_by`, and never
/// events later than the conversion; `look_backs` answers each campaign's windows.
pub fn attribute(
    conversion: &Conversion,
    entries: &[IndexEntry],
    stored_by: DateTime<Utc>,
    look_backs: impl Fn(CampaignId) -> LookBacks,
) -> Option<Attribution> {
    let at = conversion.timestamp.instant();
    let key = match conversion.named_impression() {
        Some(impression) => IndexKey::Impression(impression),
        None => IndexKey::User(conversion.user_id?),
    };
    let usable = |entry: &&IndexEntry| {
        entry.key == key
            && entry.advertiser_id == conversion.advertiser_id
            && entry.valid
            && entry.received <= stored_by
            && entry.timestamp.instant() <= at
    };
    let latest_covered = |kind: IndexedKind| {
        entries
            .iter()
            .filter(usable)
            .filter(|entry| entry.kind == kind)
            .filter(|entry| {
                let windows = look_backs(entry.campaign_id);
                let window = match kind {
                    IndexedKind::Click => windows.click,
                    IndexedKind::Impression => windows.view,
                };
                window.covers(entry.timestamp.instant(), at)
            })
            .max_by_key(|entry| {
                (
                    entry.timestamp,
                    entry.impression_id,
                    entry.campaign_id,
                    entry.ad_id,
                )
            })
    };
    let credit = |kind, entry: &IndexEntry| Attribution {
        kind,
        campaign_id: entry.campaign_id,
        ad_id: entry.ad_id,
        impression_id: entry.impression_id,
        event_time: entry.timestamp.instant(),
    };
    latest_covered(IndexedKind::Click)
        .map(|click| credit(AttributionKind::PostClick, click))
        .or_else(|| {
            latest_covered(IndexedKind::Impression)
                .map(|impression| credit(AttributionKind::PostView, impression))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::conversion::{Action, ConversionId};
    use crate::domain::ids::{AdvertiserId, UserId};
    use crate::domain::time::EventTime;
    use uuid::Uuid;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().expect("time")
    }

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    const ADVERTISER: u128 = 1;
    const USER: u128 = 2;

    fn conversion(time: &str, impression: Option<u128>, user: Option<u128>) -> Conversion {
        Conversion {
            advertiser_id: AdvertiserId::new(id(ADVERTISER)),
            conversion_id: ConversionId::new("order-1").expect("valid"),
            action: Action::new("purchase").expect("valid"),
            timestamp: EventTime::from_stored(at(time)),
            click_id: impression.map(|n| ImpressionId::new(id(n))),
            impression_id: None,
            user_id: user.map(|n| UserId::new(id(n))),
            value: None,
        }
    }

    fn entry(
        key: IndexKey,
        kind: IndexedKind,
        impression: u128,
        campaign: u128,
        time: &str,
    ) -> IndexEntry {
        IndexEntry {
            advertiser_id: AdvertiserId::new(id(ADVERTISER)),
            key,
            timestamp: EventTime::from_stored(at(time)),
            kind,
            impression_id: ImpressionId::new(id(impression)),
            campaign_id: CampaignId::new(id(campaign)),
            ad_id: AdId::new(id(campaign + 1000)),
            user_id: None,
            received: at(time),
            valid: true,
        }
    }

    fn user_entry(kind: IndexedKind, impression: u128, campaign: u128, time: &str) -> IndexEntry {
        entry(
            IndexKey::User(UserId::new(id(USER))),
            kind,
            impression,
            campaign,
            time,
        )
    }

    fn windows(click: &str, view: &str) -> impl Fn(CampaignId) -> LookBacks {
        let click = LookBack::parse(click, LookBack::CLICK_MAX).expect("valid");
        let view = LookBack::parse(view, LookBack::VIEW_MAX).expect("valid");
        move |_| LookBacks { click, view }
    }

    const LATE: &str = "2030-01-01T00:00:00Z";

    #[test]
    fn the_latest_click_in_its_window_wins_over_any_impression() {
        let entries = [
            user_entry(IndexedKind::Impression, 10, 100, "2026-11-28T11:00:00Z"),
            user_entry(IndexedKind::Click, 11, 200, "2026-11-20T10:00:00Z"),
            user_entry(IndexedKind::Click, 12, 300, "2026-11-25T10:00:00Z"),
        ];
        let decided = attribute(
            &conversion("2026-11-28T12:00:00Z", None, Some(USER)),
            &entries,
            at(LATE),
            windows("30d", "1d"),
        )
        .expect("attributed");
        assert_eq!(decided.kind, AttributionKind::PostClick);
        assert_eq!(decided.campaign_id, CampaignId::new(id(300)));
    }

    #[test]
    fn each_campaign_keeps_its_own_window() {
        let entries = [
            user_entry(IndexedKind::Click, 11, 200, "2026-11-20T12:00:00Z"),
            user_entry(IndexedKind::Click, 12, 300, "2026-11-27T12:00:00Z"),
        ];
        let short_for_300 = |campaign: CampaignId| LookBacks {
            click: if campaign == CampaignId::new(id(300)) {
                LookBack::from_seconds(3600)
            } else {
                LookBack::CLICK_DEFAULT
            },
            view: LookBack::VIEW_DEFAULT,
        };
        let decided = attribute(
            &conversion("2026-11-28T12:00:00Z", None, Some(USER)),
            &entries,
            at(LATE),
            short_for_300,
        )
        .expect("attributed");
        assert_eq!(decided.campaign_id, CampaignId::new(id(200)));
    }

    #[test]
    fn events_after_the_conversion_stored_late_or_invalid_never_count() {
        let mut invalid = user_entry(IndexedKind::Click, 13, 400, "2026-11-28T11:00:00Z");
        invalid.valid = false;
        let mut stored_late = user_entry(IndexedKind::Click, 14, 500, "2026-11-28T11:30:00Z");
        stored_late.received = at("2026-11-28T12:02:00Z");
        let mut other_advertiser = user_entry(IndexedKind::Click, 15, 600, "2026-11-28T11:40:00Z");
        other_advertiser.advertiser_id = AdvertiserId::new(id(99));
        let entries = [
            user_entry(IndexedKind::Click, 12, 300, "2026-11-28T12:00:00.001Z"),
            invalid,
            stored_late,
            other_advertiser,
        ];
        let decided = attribute(
            &conversion("2026-11-28T12:00:00Z", None, Some(USER)),
            &entries,
            at("2026-11-28T12:01:00Z"),
            windows("30d", "1d"),
        );
        assert_eq!(decided, None);
    }

    #[test]
    fn a_named_impression_is_post_click_post_view_or_nothing_and_the_user_is_not_tried() {
        let by_id = |kind, time| {
            entry(
                IndexKey::Impression(ImpressionId::new(id(10))),
                kind,
                10,
                100,
                time,
            )
        };
        let clicked = [
            by_id(IndexedKind::Impression, "2026-11-01T12:00:00Z"),
            by_id(IndexedKind::Click, "2026-11-01T12:00:05Z"),
        ];
        let conv = conversion("2026-11-28T12:00:00Z", Some(10), Some(USER));
        let decided = attribute(&conv, &clicked, at(LATE), windows("30d", "1d"));
        assert_eq!(decided.map(|a| a.kind), Some(AttributionKind::PostClick));
        // The click is 27 days old: past a 7-day click window, and the impression past the
        // view window; the user's own click is not looked at.
        let mut with_user_click = clicked.to_vec();
        with_user_click.push(user_entry(
            IndexedKind::Click,
            12,
            300,
            "2026-11-28T11:00:00Z",
        ));
        assert_eq!(
            attribute(&conv, &with_user_click, at(LATE), windows("7d", "1d")),
            None
        );
        // Served within the view window, never clicked: post-view.
        let viewed = [by_id(IndexedKind::Impression, "2026-11-28T00:00:00Z")];
        let decided = attribute(&conv, &viewed, at(LATE), windows("7d", "1d"));
        assert_eq!(decided.map(|a| a.kind), Some(AttributionKind::PostView));
        assert_eq!(
            attribute(&conv, &viewed, at(LATE), windows("7d", "0s")),
            None
        );
    }

    #[test]
    fn click_window_edges_are_inclusive_to_the_millisecond() {
        let entries = [user_entry(
            IndexedKind::Click,
            12,
            300,
            "2026-11-27T12:00:00Z",
        )];
        let decide = |time| {
            attribute(
                &conversion(time, None, Some(USER)),
                &entries,
                at(LATE),
                windows("1d", "0s"),
            )
            .map(|a| a.kind)
        };
        assert_eq!(
            decide("2026-11-28T12:00:00Z"),
            Some(AttributionKind::PostClick)
        );
        assert_eq!(decide("2026-11-28T12:00:00.001Z"), None);
    }
}
