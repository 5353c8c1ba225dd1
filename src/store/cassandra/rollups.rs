//! Sealed days on Cassandra: a campaign-day's counts per 15-minute slice and ad and its users
//! by level (`campaign_rollup`, `campaign_reach_level`); a site-day's visits per slice and
//! visitors per hour of each feature combination (`site_visits`, `site_reach`).
//!
//! Every row is written `USING TIMESTAMP` of the seal's read start and the day is marked
//! sealed last ([`super::seals::mark_sealed`]), so of two seals of one day the one that read
//! later wins, whatever order their writes land in.

use super::CassandraStore;
use super::config::KeyspaceName;
use super::seals::mark_sealed;
use super::statements::{execute, execute_each, prepare_all, read_all};
use crate::domain::beacon::SiteId;
use crate::domain::conversion::counts::ConversionCounts;
use crate::domain::conversion::money::{Currency, ValueSums};
use crate::domain::ids::{AdId, CampaignKey};
use crate::domain::owner::Owner;
use crate::domain::time::Day;
use crate::domain::view::ViewCounts;
use crate::store::{
    FeatureVisits, ReachLevel, Rollup, RollupPart, RollupReach, RollupSlice, RollupStore,
    SiteRollup, SketchPartition, SliceVisits, StoreError,
};
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use futures::future::try_join_all;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::CqlVarint;
use scylla::{DeserializeRow, SerializeRow};
use std::collections::HashMap;
use uuid::Uuid;

const SLICES_PER_DAY: i64 = 96;
const HOURS_PER_DAY: i64 = 24;
/// Rollup rows written at once.
const ROWS_IN_FLIGHT: usize = 64;

const CAMPAIGN_DAY: &str = "advertiser_id = ? AND campaign_id = ? AND day = ?";
const SITE_COMBINATION: &str = "site = ? AND day = ? AND combination = ?";

pub(crate) struct RollupStatements {
    insert_slice: PreparedStatement,
    insert_reach: PreparedStatement,
    select_slices: PreparedStatement,
    select_reach: PreparedStatement,
    delete_slices: PreparedStatement,
    delete_reach: PreparedStatement,
    insert_site_visits: PreparedStatement,
    insert_site_reach: PreparedStatement,
    select_site_visits: PreparedStatement,
    select_site_reach: PreparedStatement,
}

impl RollupStatements {
    pub(crate) async fn prepare(
        session: &Session,
        keyspace: &KeyspaceName,
    ) -> Result<Self, StoreError> {
        let [
            insert_slice,
            insert_reach,
            select_slices,
            select_reach,
            delete_slices,
            delete_reach,
            insert_site_visits,
            insert_site_reach,
            select_site_visits,
            select_site_reach,
        ] = prepare_all(
            session,
            [
                format!(
                    "INSERT INTO {keyspace}.campaign_rollup (advertiser_id, campaign_id, day, slice, ad_id, \
                     impressions, clicks, billable_impressions, invalid_impressions, invalid_clicks, {VIEW_COLUMNS}, \
                     {CONVERSION_COLUMNS}) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ? AND TTL ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.campaign_reach_level (advertiser_id, campaign_id, day, level, hour, \
                     ad_id, sketch) VALUES (?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ? AND TTL ?"
                ),
                format!(
                    "SELECT slice, ad_id, impressions, clicks, billable_impressions, invalid_impressions, \
                     invalid_clicks, {VIEW_COLUMNS}, {CONVERSION_COLUMNS} FROM {keyspace}.campaign_rollup \
                     WHERE {CAMPAIGN_DAY}"
                ),
                format!(
                    "SELECT hour, ad_id, sketch FROM {keyspace}.campaign_reach_level WHERE {CAMPAIGN_DAY} AND level = ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.campaign_rollup USING TIMESTAMP ? WHERE {CAMPAIGN_DAY}"
                ),
                format!(
                    "DELETE FROM {keyspace}.campaign_reach_level USING TIMESTAMP ? WHERE {CAMPAIGN_DAY}"
                ),
                format!(
                    "INSERT INTO {keyspace}.site_visits (site, day, combination, slice, visits, invalid_visits) \
                     VALUES (?, ?, ?, ?, ?, ?) USING TIMESTAMP ? AND TTL ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.site_reach (site, day, combination, hour, sketch) \
                     VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ? AND TTL ?"
                ),
                format!(
                    "SELECT slice, visits, invalid_visits FROM {keyspace}.site_visits WHERE {SITE_COMBINATION}"
                ),
                format!("SELECT hour, sketch FROM {keyspace}.site_reach WHERE {SITE_COMBINATION}"),
            ],
        )
        .await?;
        Ok(Self {
            insert_slice,
            insert_reach,
            select_slices,
            select_reach,
            delete_slices,
            delete_reach,
            insert_site_visits,
            insert_site_reach,
            select_site_visits,
            select_site_reach,
        })
    }
}

/// A campaign-day's partition key.
pub(crate) fn campaign_day(campaign: CampaignKey, day: Day) -> (Uuid, Uuid, NaiveDate) {
    (
        campaign.advertiser_id.as_uuid(),
        campaign.campaign_id.as_uuid(),
        day.date(),
    )
}

/// A count as stored (bigint).
pub(crate) fn stored_count(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

pub(crate) fn read_count(count: i64) -> u64 {
    u64::try_from(count).unwrap_or_default()
}

/// The view-measure columns of `campaign_rollup` and `slice_aggregate`, in statement order.
pub(crate) const VIEW_COLUMNS: &str =
    "measurable, viewable, engaged, in_view_ms_total, in_view_measured";

/// The conversion columns of `campaign_rollup` and `slice_aggregate`, in statement order.
pub(crate) const CONVERSION_COLUMNS: &str =
    "conversions, post_click_conversions, post_view_conversions, conversion_value";

/// A conversion value sum as a `varint`: minimal two's complement, big-endian.
fn varint_of(minor: i128) -> CqlVarint {
    let bytes = minor.to_be_bytes();
    let redundant = bytes
        .windows(2)
        .take_while(|pair| {
            (pair[0] == 0x00 && pair[1] & 0x80 == 0) || (pair[0] == 0xff && pair[1] & 0x80 != 0)
        })
        .count();
    CqlVarint::from_signed_bytes_be_slice(&bytes[redundant..])
}

/// A `varint` back as a 128-bit sum; `None` past 128 bits.
fn minor_of(varint: &CqlVarint) -> Option<i128> {
    let bytes = varint.as_signed_bytes_be_slice();
    if bytes.len() > 16 {
        return None;
    }
    let fill = if bytes.first().is_some_and(|byte| byte & 0x80 != 0) {
        0xff
    } else {
        0x00
    };
    let mut full = [fill; 16];
    full[16 - bytes.len()..].copy_from_slice(bytes);
    Some(i128::from_be_bytes(full))
}

/// The cells of a row's conversions.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
pub(crate) struct ConversionCells {
    conversions: i64,
    post_click_conversions: i64,
    post_view_conversions: i64,
    conversion_value: HashMap<&'static str, CqlVarint>,
}

impl ConversionCells {
    pub(crate) fn of(counts: &ConversionCounts) -> Self {
        Self {
            conversions: stored_count(counts.conversions),
            post_click_conversions: stored_count(counts.post_click),
            post_view_conversions: stored_count(counts.post_view),
            conversion_value: counts
                .value
                .entries()
                .map(|(currency, minor)| (currency.code(), varint_of(minor)))
                .collect(),
        }
    }
}

/// The conversions back from their cells (none where a row predates them); `None` when a
/// stored currency or sum is not one this build reads.
pub(crate) fn read_conversions(
    counts: [Option<i64>; 3],
    value: Option<HashMap<String, CqlVarint>>,
) -> Option<ConversionCounts> {
    let [conversions, post_click, post_view] =
        counts.map(|cell| read_count(cell.unwrap_or_default()));
    let entries = value
        .unwrap_or_default()
        .iter()
        .map(|(code, sum)| Some((Currency::from_code(code).ok()?, minor_of(sum)?)))
        .collect::<Option<Vec<_>>>()?;
    Some(ConversionCounts {
        conversions,
        post_click,
        post_view,
        value: ValueSums::from_entries(entries),
    })
}

/// A stored conversion value that does not read back: a currency or a sum this build does not
/// know, never worth a retry.
pub(crate) fn unreadable_value(context: &str) -> StoreError {
    StoreError::internal_message(format!(
        "{context}: a stored conversion value does not read back"
    ))
}

/// The view measures back from their cells (0 where a row predates them).
pub(crate) fn read_views(cells: [Option<i64>; 5]) -> ViewCounts {
    ViewCounts::from_array(cells.map(|cell| read_count(cell.unwrap_or_default())))
}

/// The bound values of a `campaign_rollup` insert.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct SliceValues {
    advertiser_id: Uuid,
    campaign_id: Uuid,
    day: NaiveDate,
    /// Within 0..96 for a slice of this day.
    slice: i32,
    ad_id: Uuid,
    impressions: i64,
    clicks: i64,
    billable_impressions: i64,
    invalid_impressions: i64,
    invalid_clicks: i64,
    measurable: i64,
    viewable: i64,
    engaged: i64,
    in_view_ms_total: i64,
    in_view_measured: i64,
    #[scylla(flatten)]
    conversions: ConversionCells,
    written_at: i64,
    /// `--retain-aggregates`, from the day's start (0: never expire).
    ttl: i32,
}

#[derive(DeserializeRow)]
struct StoredSlice {
    slice: i32,
    ad_id: Uuid,
    impressions: i64,
    clicks: i64,
    billable_impressions: i64,
    // Absent in a rollup sealed before invalid traffic was counted.
    invalid_impressions: Option<i64>,
    invalid_clicks: Option<i64>,
    // Absent in a row written before viewability.
    measurable: Option<i64>,
    viewable: Option<i64>,
    engaged: Option<i64>,
    in_view_ms_total: Option<i64>,
    in_view_measured: Option<i64>,
    // Absent in a row written before conversions.
    conversions: Option<i64>,
    post_click_conversions: Option<i64>,
    post_view_conversions: Option<i64>,
    conversion_value: Option<HashMap<String, CqlVarint>>,
}

/// The bound values of a `site_visits` insert.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct SiteVisitValues<'a> {
    site: &'a str,
    day: NaiveDate,
    combination: &'a str,
    slice: i32,
    visits: i64,
    invalid_visits: i64,
    written_at: i64,
    /// `--retain-aggregates`, from the day's start (0: never expire).
    ttl: i32,
}

/// The bound values of a `campaign_reach_level` insert.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct ReachValues<'a> {
    advertiser_id: Uuid,
    campaign_id: Uuid,
    day: NaiveDate,
    level: i32,
    /// Within 0..24 for an hour of this day.
    hour: i32,
    /// Nil for the campaign-wide levels.
    ad_id: Uuid,
    sketch: &'a [u8],
    written_at: i64,
    /// `--retain-aggregates`, from the day's start (0: never expire).
    ttl: i32,
}

#[derive(DeserializeRow)]
struct StoredReach {
    hour: i32,
    ad_id: Uuid,
    sketch: Vec<u8>,
}

/// The bound values of a `site_visits` or `site_reach` insert: the combination's row of one
/// slice or hour.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct SiteUnitValues<'a, V: scylla::serialize::value::SerializeValue> {
    site: &'a str,
    day: NaiveDate,
    combination: &'a str,
    unit: i32,
    value: V,
    written_at: i64,
    /// `--retain-aggregates`, from the day's start (0: never expire).
    ttl: i32,
}

#[async_trait]
impl RollupStore for CassandraStore {
    async fn write_site_features(
        &self,
        site: &SiteId,
        day: Day,
        values: &[FeatureVisits],
    ) -> Result<(), StoreError> {
        self.write_features(site, day, values).await
    }

    async fn read_site_features(
        &self,
        site: &SiteId,
        day: Day,
    ) -> Result<Vec<FeatureVisits>, StoreError> {
        self.read_features(site, day).await
    }

    async fn write_campaign_rollup(
        &self,
        campaign: CampaignKey,
        day: Day,
        rollup: &Rollup,
        read_started: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        const CONTEXT: &str = "writing a rollup";
        let statements = &self.prepared().await?.rollups;
        let (advertiser_id, campaign_id, date) = campaign_day(campaign, day);
        let written_at = read_started.timestamp_micros();
        let ttl = self.aggregate_ttl(day);
        let (slice_base, hour_base) = (day.first_slice(), day.first_hour());
        // Rows of an earlier seal that this one has no more (a click that moved to another
        // day as a late, earlier first click arrived) must not linger: a partition deletion
        // just before this seal's timestamp removes every older row and none of this seal's.
        for delete in [&statements.delete_slices, &statements.delete_reach] {
            let values = (written_at - 1, advertiser_id, campaign_id, date);
            execute(&self.session, delete, values, "replacing a rollup").await?;
        }
        execute_each(
            &self.session,
            &statements.insert_slice,
            &rollup.slices,
            ROWS_IN_FLIGHT,
            |row| SliceValues {
                advertiser_id,
                campaign_id,
                day: date,
                slice: (row.slice - slice_base) as i32,
                ad_id: row.ad_id.as_uuid(),
                impressions: stored_count(row.impressions),
                clicks: stored_count(row.clicks),
                billable_impressions: stored_count(row.billable_impressions),
                invalid_impressions: stored_count(row.invalid_impressions),
                invalid_clicks: stored_count(row.invalid_clicks),
                measurable: stored_count(row.views.measurable),
                viewable: stored_count(row.views.viewable),
                engaged: stored_count(row.views.engaged),
                in_view_ms_total: stored_count(row.views.in_view_ms_total),
                in_view_measured: stored_count(row.views.in_view_measured),
                conversions: ConversionCells::of(&row.conversions),
                written_at,
                ttl,
            },
            CONTEXT,
        )
        .await?;
        execute_each(
            &self.session,
            &statements.insert_reach,
            &rollup.reach,
            ROWS_IN_FLIGHT,
            |row| ReachValues {
                advertiser_id,
                campaign_id,
                day: date,
                level: i32::from(row.level.code()),
                hour: (row.hour - hour_base) as i32,
                ad_id: row.ad_id.map(|ad| ad.as_uuid()).unwrap_or_default(),
                sketch: row.sketch.as_slice(),
                written_at,
                ttl,
            },
            CONTEXT,
        )
        .await?;
        mark_sealed(self, &Owner::Campaign(campaign), day, read_started).await
    }

    async fn read_campaign_rollup(
        &self,
        campaign: CampaignKey,
        day: Day,
        levels: &[ReachLevel],
    ) -> Result<Rollup, StoreError> {
        const CONTEXT: &str = "reading a rollup";
        let statements = &self.prepared().await?.rollups;
        let key = campaign_day(campaign, day);
        let (advertiser_id, campaign_id, date) = key;
        let (slices, reach) = futures::try_join!(
            read_all::<StoredSlice>(&self.session, &statements.select_slices, key, CONTEXT),
            try_join_all(levels.iter().map(|level| async move {
                let rows = read_all::<StoredReach>(
                    &self.session,
                    &statements.select_reach,
                    (advertiser_id, campaign_id, date, i32::from(level.code())),
                    CONTEXT,
                )
                .await?;
                Ok::<_, StoreError>((*level, rows))
            })),
        )?;
        let (slice_base, hour_base) = (day.first_slice(), day.first_hour());
        Ok(Rollup {
            slices: slices
                .into_iter()
                .filter(|row| (0..SLICES_PER_DAY).contains(&i64::from(row.slice)))
                .map(|row| {
                    let conversions = read_conversions(
                        [
                            row.conversions,
                            row.post_click_conversions,
                            row.post_view_conversions,
                        ],
                        row.conversion_value,
                    )
                    .ok_or_else(|| unreadable_value(CONTEXT))?;
                    Ok(RollupSlice {
                        slice: slice_base + i64::from(row.slice),
                        ad_id: AdId::new(row.ad_id),
                        impressions: read_count(row.impressions),
                        clicks: read_count(row.clicks),
                        billable_impressions: read_count(row.billable_impressions),
                        invalid_impressions: read_count(
                            row.invalid_impressions.unwrap_or_default(),
                        ),
                        invalid_clicks: read_count(row.invalid_clicks.unwrap_or_default()),
                        views: read_views([
                            row.measurable,
                            row.viewable,
                            row.engaged,
                            row.in_view_ms_total,
                            row.in_view_measured,
                        ]),
                        conversions,
                    })
                })
                .collect::<Result<_, StoreError>>()?,
            reach: reach
                .into_iter()
                .flat_map(|(level, rows)| {
                    rows.into_iter()
                        .filter(|row| (0..HOURS_PER_DAY).contains(&i64::from(row.hour)))
                        .map(move |row| RollupReach {
                            level,
                            hour: hour_base + i64::from(row.hour),
                            ad_id: level.per_ad().then_some(AdId::new(row.ad_id)),
                            sketch: row.sketch,
                        })
                })
                .collect(),
        })
    }

    async fn write_site_rollup(
        &self,
        site: &SiteId,
        day: Day,
        combinations: &[(String, SiteRollup)],
        read_started: DateTime<Utc>,
        part: RollupPart,
    ) -> Result<(), StoreError> {
        const CONTEXT: &str = "writing a site rollup";
        let statements = &self.prepared().await?.rollups;
        let written_at = read_started.timestamp_micros();
        let ttl = self.aggregate_ttl(day);
        let (slice_base, hour_base) = (day.first_slice(), day.first_hour());
        let date = day.date();
        // (combination, slice within the day, visits) of every row.
        let visits: Vec<(&str, i32, SliceVisits)> = combinations
            .iter()
            .flat_map(|(combination, rollup)| {
                rollup.visits.iter().map(move |(slice, visits)| {
                    (combination.as_str(), (slice - slice_base) as i32, *visits)
                })
            })
            .collect();
        execute_each(
            &self.session,
            &statements.insert_site_visits,
            &visits,
            ROWS_IN_FLIGHT,
            |(combination, slice, visits)| SiteVisitValues {
                site: site.as_str(),
                day: date,
                combination,
                slice: *slice,
                visits: stored_count(visits.valid),
                invalid_visits: stored_count(visits.invalid),
                written_at,
                ttl,
            },
            CONTEXT,
        )
        .await?;
        let reach: Vec<(&str, i32, &[u8])> = combinations
            .iter()
            .flat_map(|(combination, rollup)| {
                rollup.reach.iter().map(move |(hour, sketch)| {
                    (
                        combination.as_str(),
                        (hour - hour_base) as i32,
                        sketch.as_slice(),
                    )
                })
            })
            .collect();
        execute_each(
            &self.session,
            &statements.insert_site_reach,
            &reach,
            ROWS_IN_FLIGHT,
            |(combination, hour, sketch)| SiteUnitValues {
                site: site.as_str(),
                day: date,
                combination,
                unit: *hour,
                value: *sketch,
                written_at,
                ttl,
            },
            CONTEXT,
        )
        .await?;
        match part {
            RollupPart::More => Ok(()),
            RollupPart::Last => {
                mark_sealed(self, &Owner::Site(site.clone()), day, read_started).await
            }
        }
    }

    async fn read_site_rollup(
        &self,
        partition: &SketchPartition,
    ) -> Result<SiteRollup, StoreError> {
        const CONTEXT: &str = "reading a site rollup";
        let statements = &self.prepared().await?.rollups;
        let key = (
            partition.site.as_str(),
            partition.day.date(),
            partition.combination.as_str(),
        );
        let (visits, reach) = futures::try_join!(
            read_all::<(i32, i64, Option<i64>)>(
                &self.session,
                &statements.select_site_visits,
                key,
                CONTEXT
            ),
            read_all::<(i32, Vec<u8>)>(&self.session, &statements.select_site_reach, key, CONTEXT),
        )?;
        let (slice_base, hour_base) = (partition.day.first_slice(), partition.day.first_hour());
        Ok(SiteRollup {
            visits: visits
                .into_iter()
                .map(|(slice, visits, invalid)| {
                    let visits = SliceVisits {
                        valid: read_count(visits),
                        invalid: read_count(invalid.unwrap_or_default()),
                    };
                    (slice_base + i64::from(slice), visits)
                })
                .collect(),
            reach: reach
                .into_iter()
                .map(|(hour, sketch)| (hour_base + i64::from(hour), sketch))
                .collect(),
        })
    }
}
