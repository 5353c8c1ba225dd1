//! What reads return: the few fields queries need, as domain values.

use crate::domain::beacon::{Features, Guid, SiteId};
use crate::domain::conversion::counts::ConversionCounts;
use crate::domain::conversion::money::ValueSums;
use crate::domain::delivery::DaySlices;
use crate::domain::ids::{AdId, CampaignKey, ImpressionId, UserId};
use crate::domain::process::ProcessId;
use crate::domain::time::{Day, EventTime};
use crate::domain::traffic::{InvalidReason, UserAgent};
use crate::domain::view::{Client, ViewCounts};
use chrono::{DateTime, Utc};
use uuid::Uuid;

/// The thin copy of an impression that counting reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImpressionSummaryRow {
    pub(crate) impression_id: ImpressionId,
    pub(crate) ad_id: AdId,
    pub(crate) user_id: UserId,
    pub(crate) timestamp: EventTime,
    /// `None`: this copy is valid (rows written before invalid traffic was classified too).
    pub(crate) invalid: Option<InvalidReason>,
    /// The client the copy was rendered for (none in rows written before viewability).
    pub(crate) client: Client,
    /// When this copy's pixel arrived; `None` for a POSTed copy.
    pub(crate) pixel_arrival: Option<DateTime<Utc>>,
}

/// One stored click.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClickRow {
    pub(crate) impression_id: ImpressionId,
    pub(crate) ad_id: AdId,
    pub(crate) timestamp: EventTime,
    pub(crate) invalid: Option<InvalidReason>,
}

/// One stored beacon, without its partition's site and day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VisitRow {
    pub(crate) timestamp: EventTime,
    pub(crate) guid: Guid,
    pub(crate) features: Features,
    pub(crate) invalid: Option<InvalidReason>,
    /// As stored, by [`read_visits_with_agents`](crate::store::VisitStore::read_visits_with_agents)
    /// only (for a subject access); `None` from the counting reads.
    pub(crate) user_agent: Option<UserAgent>,
}

/// Where the hourly sketches of one site, UTC day and feature combination are kept.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SketchPartition {
    pub(crate) site: SiteId,
    pub(crate) day: Day,
    /// [`Features::combination_key`] of the combination.
    pub(crate) combination: String,
}

/// Sketch rows of one partition, written together with others'.
pub(crate) type SketchBatch = (SketchPartition, Vec<SketchRow>);

/// One writer's absolute state of one hour's sketch: rewriting it is harmless, and writers
/// never overwrite each other (each has its own `writer` id); readers merge them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SketchRow {
    /// The start of the UTC hour.
    pub(crate) hour: DateTime<Utc>,
    pub(crate) writer: Uuid,
    /// [`crate::domain::sketch::UniqueSketch::to_bytes`].
    pub(crate) sketch: Vec<u8>,
    /// When this state was captured (microseconds since the epoch, increasing per writer): of
    /// two writes of one writer's row, the later capture wins, whatever order they land in
    /// (a retried or delayed write never rolls a sketch back).
    pub(crate) captured_at: i64,
}

/// One 15-minute slice of a sealed campaign-day, for one ad.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RollupSlice {
    /// 15-minute slices since the epoch.
    pub(crate) slice: i64,
    pub(crate) ad_id: AdId,
    pub(crate) impressions: u64,
    pub(crate) clicks: u64,
    pub(crate) billable_impressions: u64,
    pub(crate) invalid_impressions: u64,
    pub(crate) invalid_clicks: u64,
    /// The view measures (0 in rows sealed before viewability).
    pub(crate) views: ViewCounts,
    /// The conversions credited (none in rows sealed before conversions).
    pub(crate) conversions: ConversionCounts,
}

impl RollupSlice {
    /// Its counts in their stored order: the five counts, the view measures, then the three
    /// conversion counts (the values are stored beside them, per currency).
    pub(crate) fn counts(&self) -> [u64; 13] {
        let [
            measurable,
            viewable,
            engaged,
            in_view_total,
            in_view_measured,
        ] = self.views.to_array();
        [
            self.impressions,
            self.clicks,
            self.billable_impressions,
            self.invalid_impressions,
            self.invalid_clicks,
            measurable,
            viewable,
            engaged,
            in_view_total,
            in_view_measured,
            self.conversions.conversions,
            self.conversions.post_click,
            self.conversions.post_view,
        ]
    }

    /// A row back from [`counts`](Self::counts) (zeros where an older row stops) and its
    /// conversions' values.
    pub(crate) fn from_counts(
        slice: i64,
        ad_id: AdId,
        counts: [u64; 13],
        value: ValueSums,
    ) -> Self {
        let [
            impressions,
            clicks,
            billable_impressions,
            invalid_impressions,
            invalid_clicks,
            measurable,
            viewable,
            engaged,
            in_view_total,
            in_view_measured,
            conversions,
            post_click,
            post_view,
        ] = counts;
        Self {
            slice,
            ad_id,
            impressions,
            clicks,
            billable_impressions,
            invalid_impressions,
            invalid_clicks,
            views: ViewCounts::from_array([
                measurable,
                viewable,
                engaged,
                in_view_total,
                in_view_measured,
            ]),
            conversions: ConversionCounts {
                conversions,
                post_click,
                post_view,
                value,
            },
        }
    }
}

/// How much of a sealed campaign-day one users sketch covers. A summary reads only the
/// coarsest levels that answer it: the day's union for rows that hold whole UTC days, hours
/// only where a row boundary cuts a day, and per-ad sketches only for `group_by=ad`. A month's
/// summary then unions 31 to 744 sketches instead of one per ad and hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReachLevel {
    /// Every user of the campaign that UTC day.
    CampaignDay = 0,
    /// Every user of one ad that UTC day.
    AdDay = 1,
    /// Every user of the campaign in one UTC hour.
    CampaignHour = 2,
    /// Every user of one ad in one UTC hour.
    AdHour = 3,
}

impl ReachLevel {
    pub(crate) const ALL: [ReachLevel; 4] = [
        ReachLevel::CampaignDay,
        ReachLevel::AdDay,
        ReachLevel::CampaignHour,
        ReachLevel::AdHour,
    ];

    pub(crate) fn code(self) -> u8 {
        self as u8
    }

    pub(crate) fn from_code(code: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|level| level.code() == code)
    }

    pub(crate) fn per_ad(self) -> bool {
        matches!(self, ReachLevel::AdDay | ReachLevel::AdHour)
    }
}

/// The users reached in one part of a sealed campaign-day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RollupReach {
    pub(crate) level: ReachLevel,
    /// Hours since the epoch: the hour for hourly levels, the day's first hour otherwise.
    pub(crate) hour: i64,
    /// The ad, for per-ad levels.
    pub(crate) ad_id: Option<AdId>,
    /// [`crate::domain::sketch::UniqueSketch::to_bytes`].
    pub(crate) sketch: Vec<u8>,
}

/// A sealed campaign-day's rows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rollup {
    pub(crate) slices: Vec<RollupSlice>,
    /// Only the levels asked for, when read.
    pub(crate) reach: Vec<RollupReach>,
}

/// Whether a write of a site-day's rollup is its last part: a day whose combinations do not
/// fit one pass's memory is written in several (`query::site_day`), and sealed by the last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollupPart {
    More,
    Last,
}

/// One feature combination's part of a sealed site-day.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SiteRollup {
    /// (15-minute slice since the epoch, exact valid visits, exact invalid visits).
    pub(crate) visits: Vec<(i64, SliceVisits)>,
    /// (hour since the epoch, [`crate::domain::sketch::UniqueSketch::to_bytes`]).
    pub(crate) reach: Vec<(i64, Vec<u8>)>,
}

/// A slice's visits: valid ones (the visits counted) and invalid traffic beside them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SliceVisits {
    pub(crate) valid: u64,
    pub(crate) invalid: u64,
}

/// Where a paged read resumes. Opaque above the store: a driver's paging state, or the last
/// key read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageCursor(Vec<u8>);

impl PageCursor {
    pub(crate) fn new(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// One page of a partition's full impressions, oldest first.
#[derive(Debug, Clone, Default)]
pub struct ImpressionPage {
    pub(crate) impressions: Vec<crate::domain::event::Impression>,
    /// Where the next page starts; `None` after the last.
    pub(crate) next: Option<PageCursor>,
}

/// One writer's absolute count of one campaign's UTC day, per 15-minute slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveCountRow {
    pub(crate) campaign: CampaignKey,
    pub(crate) day: Day,
    pub(crate) writer: ProcessId,
    pub(crate) slices: DaySlices,
}

/// The users one writer counted in one billable window of a campaign since its previous
/// publication of that window: what another writer that counted one of them too compares, to
/// count the user's window once across processes (docs/DESIGN.md, "Delivery and freshness").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowPublication {
    pub(crate) campaign: CampaignKey,
    /// The window's start (aligned on the billable window).
    pub(crate) window_start: DateTime<Utc>,
    /// When the writer published, to the millisecond: with the writer, orders publications.
    pub(crate) published_at: DateTime<Utc>,
    pub(crate) writer: ProcessId,
    pub(crate) users: Vec<UserId>,
}

impl WindowPublication {
    /// The users as stored: their 16-byte ids one after another.
    pub(crate) fn packed_users(&self) -> Vec<u8> {
        self.users
            .iter()
            .flat_map(|user| user.as_uuid().into_bytes())
            .collect()
    }

    /// Users stored by [`packed_users`](Self::packed_users); `None` when the bytes are not.
    pub(crate) fn unpack_users(bytes: &[u8]) -> Option<Vec<UserId>> {
        if !bytes.len().is_multiple_of(16) {
            return None;
        }
        bytes
            .chunks_exact(16)
            .map(|id| Uuid::from_slice(id).ok().map(UserId::new))
            .collect()
    }
}

/// Valid visits of one feature value on one site-day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureVisits {
    pub(crate) feature: String,
    pub(crate) value: String,
    pub(crate) visits: u64,
}

/// One stored copy of an impression, from the copies index: what tells whether an id was
/// stored with more than one timestamp, and where its earliest copy lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyRow {
    pub(crate) impression_id: ImpressionId,
    pub(crate) timestamp: EventTime,
    pub(crate) invalid: Option<InvalidReason>,
}

/// A closed slice's counts for one ad and the users it reached there (an encoded sketch;
/// empty when read without them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceAggregateRow {
    pub(crate) counts: RollupSlice,
    pub(crate) users: Vec<u8>,
}

/// One closed slice's aggregate: its rows by ad and the users it reached, every ad together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SliceAggregate {
    pub(crate) by_ad: Vec<SliceAggregateRow>,
    pub(crate) users: Vec<u8>,
}

/// Which rows of an unsealed campaign-day's slices a read fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenDayParts {
    /// The slices' states and the day's duplicates: what the aggregator needs to find its due
    /// slices, without the sketches it would only throw away.
    States,
    /// Also each slice's counts by ad and the users of every ad together (a summary).
    Aggregates,
    /// Also each ad's users by slice (a summary by ad, a seal).
    AggregatesWithAdUsers,
}

/// What is stored of an unsealed campaign-day's slices: each slice's marks and aggregate
/// state, the copies of ids stored with more than one timestamp, and the aggregates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenDayRows {
    /// By slice: when its aggregate's read started and its latest mark (as a seal's).
    pub(crate) states: Vec<(i64, crate::domain::sealing::SealState)>,
    pub(crate) duplicates: Vec<CopyRow>,
    /// By slice and ad, with each ad's users only when asked for.
    pub(crate) aggregates: Vec<SliceAggregateRow>,
    /// By slice: the users of every ad together.
    pub(crate) users: Vec<(i64, Vec<u8>)>,
}
