//! Rollups of sealed campaign-days on Cassandra: the day index, the seal state, and the
//! slice and reach rows. Rollup rows and `sealed_from` are written `USING TIMESTAMP` of the
//! seal's read start, so of two seals of one day the one that read later wins, whatever order
//! their writes land in.

use super::config::KeyspaceName;
use super::statements::{execute_each, failed, prepare_all, read_all};
use crate::domain::ids::{AdId, AdvertiserId, CampaignId, CampaignKey};
use crate::domain::time::Day;
use crate::store::{ReachLevel, Rollup, RollupReach, RollupSlice, SealState, StoreError};
use chrono::{DateTime, NaiveDate, Utc};
use futures::future::try_join_all;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use uuid::Uuid;

const SLICES_PER_DAY: i64 = 96;
const HOURS_PER_DAY: i64 = 24;
/// Rollup rows written at once.
const ROWS_IN_FLIGHT: usize = 64;

pub struct RollupStatements {
    insert_campaign_day: PreparedStatement,
    select_campaign_days: PreparedStatement,
    update_late: PreparedStatement,
    update_sealed: PreparedStatement,
    select_seal: PreparedStatement,
    insert_slice: PreparedStatement,
    insert_reach: PreparedStatement,
    select_slices: PreparedStatement,
    select_reach: PreparedStatement,
    delete_slices: PreparedStatement,
    delete_reach: PreparedStatement,
}

const DAY_KEY: &str = "advertiser_id = ? AND campaign_id = ? AND day = ?";

impl RollupStatements {
    pub async fn prepare(session: &Session, keyspace: &KeyspaceName) -> Result<Self, StoreError> {
        let [
            insert_campaign_day,
            select_campaign_days,
            update_late,
            update_sealed,
            select_seal,
            insert_slice,
            insert_reach,
            select_slices,
            select_reach,
            delete_slices,
            delete_reach,
        ] = prepare_all(
            session,
            [
                format!(
                    "INSERT INTO {keyspace}.campaign_day (day, advertiser_id, campaign_id) VALUES (?, ?, ?)"
                ),
                format!(
                    "SELECT advertiser_id, campaign_id FROM {keyspace}.campaign_day WHERE day = ?"
                ),
                format!("UPDATE {keyspace}.campaign_seal SET late_at = ? WHERE {DAY_KEY}"),
                format!(
                    "UPDATE {keyspace}.campaign_seal USING TIMESTAMP ? SET sealed_from = ? WHERE {DAY_KEY}"
                ),
                format!(
                    "SELECT sealed_from, late_at FROM {keyspace}.campaign_seal WHERE {DAY_KEY}"
                ),
                format!(
                    "INSERT INTO {keyspace}.campaign_rollup (advertiser_id, campaign_id, day, slice, ad_id, \
                     impressions, clicks, billable_impressions) VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.campaign_reach_level (advertiser_id, campaign_id, day, level, hour, \
                     ad_id, sketch) VALUES (?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
                ),
                format!(
                    "SELECT slice, ad_id, impressions, clicks, billable_impressions FROM {keyspace}.campaign_rollup \
                     WHERE {DAY_KEY}"
                ),
                format!(
                    "SELECT hour, ad_id, sketch FROM {keyspace}.campaign_reach_level WHERE {DAY_KEY} AND level = ?"
                ),
                format!("DELETE FROM {keyspace}.campaign_rollup USING TIMESTAMP ? WHERE {DAY_KEY}"),
                format!(
                    "DELETE FROM {keyspace}.campaign_reach_level USING TIMESTAMP ? WHERE {DAY_KEY}"
                ),
            ],
        )
        .await?;
        Ok(Self {
            insert_campaign_day,
            select_campaign_days,
            update_late,
            update_sealed,
            select_seal,
            insert_slice,
            insert_reach,
            select_slices,
            select_reach,
            delete_slices,
            delete_reach,
        })
    }
}

fn day_key(campaign: CampaignKey, day: Day) -> (Uuid, Uuid, NaiveDate) {
    (
        campaign.advertiser_id.as_uuid(),
        campaign.campaign_id.as_uuid(),
        day.date(),
    )
}

pub async fn mark_campaign_day(
    session: &Session,
    statements: &RollupStatements,
    day: Day,
    campaign: CampaignKey,
) -> Result<(), StoreError> {
    let values = (
        day.date(),
        campaign.advertiser_id.as_uuid(),
        campaign.campaign_id.as_uuid(),
    );
    session
        .execute_unpaged(&statements.insert_campaign_day, values)
        .await
        .map_err(failed("writing the day index"))?;
    Ok(())
}

pub async fn campaigns_of_day(
    session: &Session,
    statements: &RollupStatements,
    day: Day,
) -> Result<Vec<CampaignKey>, StoreError> {
    let rows: Vec<(Uuid, Uuid)> = read_all(
        session,
        &statements.select_campaign_days,
        (day.date(),),
        "reading the day index",
    )
    .await?;
    Ok(rows
        .into_iter()
        .map(|(advertiser, campaign)| CampaignKey {
            advertiser_id: AdvertiserId::new(advertiser),
            campaign_id: CampaignId::new(campaign),
        })
        .collect())
}

pub async fn mark_late(
    session: &Session,
    statements: &RollupStatements,
    campaign: CampaignKey,
    day: Day,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    let (advertiser, campaign_id, date) = day_key(campaign, day);
    session
        .execute_unpaged(&statements.update_late, (at, advertiser, campaign_id, date))
        .await
        .map_err(failed("marking a late event"))?;
    Ok(())
}

pub async fn seal_state(
    session: &Session,
    statements: &RollupStatements,
    campaign: CampaignKey,
    day: Day,
) -> Result<SealState, StoreError> {
    type SealRow = (Option<DateTime<Utc>>, Option<DateTime<Utc>>);
    let rows: Vec<SealRow> = read_all(
        session,
        &statements.select_seal,
        day_key(campaign, day),
        "reading a seal",
    )
    .await?;
    Ok(rows
        .into_iter()
        .next()
        .map(|(sealed_from, late_at)| SealState {
            sealed_from,
            late_at,
        })
        .unwrap_or_default())
}

pub async fn write_rollup(
    session: &Session,
    statements: &RollupStatements,
    campaign: CampaignKey,
    day: Day,
    rollup: &Rollup,
    read_started: DateTime<Utc>,
) -> Result<(), StoreError> {
    let (advertiser, campaign_id, date) = day_key(campaign, day);
    let timestamp = read_started.timestamp_micros();
    let (slice_base, hour_base) = (day.first_slice(), day.first_hour());
    // Rows of an earlier seal that this one has no more (a click that moved to another day as
    // a late, earlier first click arrived) must not linger: a partition deletion just before
    // this seal's timestamp removes every older row and none of this seal's.
    for delete in [&statements.delete_slices, &statements.delete_reach] {
        session
            .execute_unpaged(delete, (timestamp - 1, advertiser, campaign_id, date))
            .await
            .map_err(failed("replacing a rollup"))?;
    }
    execute_each(
        session,
        &statements.insert_slice,
        &rollup.slices,
        ROWS_IN_FLIGHT,
        |row| {
            (
                advertiser,
                campaign_id,
                date,
                // Within 0..96 for a row of this day.
                (row.slice - slice_base) as i32,
                row.ad_id.as_uuid(),
                i64::try_from(row.impressions).unwrap_or(i64::MAX),
                i64::try_from(row.clicks).unwrap_or(i64::MAX),
                i64::try_from(row.billable_impressions).unwrap_or(i64::MAX),
                timestamp,
            )
        },
        "writing a rollup",
    )
    .await?;
    execute_each(
        session,
        &statements.insert_reach,
        &rollup.reach,
        ROWS_IN_FLIGHT,
        |row| {
            (
                advertiser,
                campaign_id,
                date,
                i32::from(row.level.code()),
                // Within 0..24 for a row of this day.
                (row.hour - hour_base) as i32,
                row.ad_id.map(|ad| ad.as_uuid()).unwrap_or_default(),
                row.sketch.as_slice(),
                timestamp,
            )
        },
        "writing a rollup",
    )
    .await?;
    session
        .execute_unpaged(
            &statements.update_sealed,
            (timestamp, read_started, advertiser, campaign_id, date),
        )
        .await
        .map_err(failed("sealing a day"))?;
    Ok(())
}

pub async fn read_rollup(
    session: &Session,
    statements: &RollupStatements,
    campaign: CampaignKey,
    day: Day,
    levels: &[ReachLevel],
) -> Result<Rollup, StoreError> {
    const CONTEXT: &str = "reading a rollup";
    let key = day_key(campaign, day);
    let (advertiser, campaign_id, date) = key;
    let (slices, reach) = futures::try_join!(
        read_all::<(i32, Uuid, i64, i64, i64)>(session, &statements.select_slices, key, CONTEXT),
        try_join_all(levels.iter().map(|level| async move {
            let rows = read_all::<(i32, Uuid, Vec<u8>)>(
                session,
                &statements.select_reach,
                (advertiser, campaign_id, date, i32::from(level.code())),
                CONTEXT,
            )
            .await?;
            Ok::<_, StoreError>((*level, rows))
        })),
    )?;
    let (slice_base, hour_base) = (day.first_slice(), day.first_hour());
    let count = |value: i64| u64::try_from(value).unwrap_or_default();
    Ok(Rollup {
        slices: slices
            .into_iter()
            .filter(|(slice, ..)| (0..SLICES_PER_DAY).contains(&i64::from(*slice)))
            .map(|(slice, ad, impressions, clicks, billable)| RollupSlice {
                slice: slice_base + i64::from(slice),
                ad_id: AdId::new(ad),
                impressions: count(impressions),
                clicks: count(clicks),
                billable_impressions: count(billable),
            })
            .collect(),
        reach: reach
            .into_iter()
            .flat_map(|(level, rows)| {
                rows.into_iter()
                    .filter(|(hour, ..)| (0..HOURS_PER_DAY).contains(&i64::from(*hour)))
                    .map(move |(hour, ad, sketch)| RollupReach {
                        level,
                        hour: hour_base + i64::from(hour),
                        ad_id: level.per_ad().then_some(AdId::new(ad)),
                        sketch,
                    })
            })
            .collect(),
    })
}
