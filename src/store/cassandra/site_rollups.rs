//! Rollups of sealed site-days on Cassandra: per feature combination, visits per 15-minute
//! slice and a merged sketch per hour, and the seal state. Written `USING TIMESTAMP` of the
//! seal's read start, like campaign rollups.

use super::config::KeyspaceName;
use super::statements::{execute_each, failed, prepare_all, read_all};
use crate::domain::beacon::SiteId;
use crate::domain::time::Day;
use crate::store::{SealState, SiteRollup, SketchPartition, StoreError};
use chrono::{DateTime, Utc};
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;

const ROWS_IN_FLIGHT: usize = 64;

pub struct SiteRollupStatements {
    update_late: PreparedStatement,
    update_sealed: PreparedStatement,
    select_seal: PreparedStatement,
    insert_visits: PreparedStatement,
    insert_reach: PreparedStatement,
    select_visits: PreparedStatement,
    select_reach: PreparedStatement,
}

impl SiteRollupStatements {
    pub async fn prepare(session: &Session, keyspace: &KeyspaceName) -> Result<Self, StoreError> {
        let [
            update_late,
            update_sealed,
            select_seal,
            insert_visits,
            insert_reach,
            select_visits,
            select_reach,
        ] = prepare_all(
            session,
            [
                format!("UPDATE {keyspace}.site_seal SET late_at = ? WHERE site = ? AND day = ?"),
                format!(
                    "UPDATE {keyspace}.site_seal USING TIMESTAMP ? SET sealed_from = ? WHERE site = ? AND day = ?"
                ),
                format!(
                    "SELECT sealed_from, late_at FROM {keyspace}.site_seal WHERE site = ? AND day = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.site_visits (site, day, combination, slice, visits) \
                     VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.site_reach (site, day, combination, hour, sketch) \
                     VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?"
                ),
                format!(
                    "SELECT slice, visits FROM {keyspace}.site_visits \
                     WHERE site = ? AND day = ? AND combination = ?"
                ),
                format!(
                    "SELECT hour, sketch FROM {keyspace}.site_reach \
                     WHERE site = ? AND day = ? AND combination = ?"
                ),
            ],
        )
        .await?;
        Ok(Self {
            update_late,
            update_sealed,
            select_seal,
            insert_visits,
            insert_reach,
            select_visits,
            select_reach,
        })
    }
}

pub async fn mark_site_late(
    session: &Session,
    statements: &SiteRollupStatements,
    site: &SiteId,
    day: Day,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    session
        .execute_unpaged(&statements.update_late, (at, site.as_str(), day.date()))
        .await
        .map_err(failed("marking a late beacon"))?;
    Ok(())
}

pub async fn site_seal_state(
    session: &Session,
    statements: &SiteRollupStatements,
    site: &SiteId,
    day: Day,
) -> Result<SealState, StoreError> {
    type SealRow = (Option<DateTime<Utc>>, Option<DateTime<Utc>>);
    let rows: Vec<SealRow> = read_all(
        session,
        &statements.select_seal,
        (site.as_str(), day.date()),
        "reading a site seal",
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

pub async fn write_site_rollup(
    session: &Session,
    statements: &SiteRollupStatements,
    site: &SiteId,
    day: Day,
    combinations: &[(String, SiteRollup)],
    read_started: DateTime<Utc>,
) -> Result<(), StoreError> {
    let timestamp = read_started.timestamp_micros();
    let (slice_base, hour_base) = (day.first_slice(), day.first_hour());
    let date = day.date();
    let visits: Vec<(&str, i64, u64)> = combinations
        .iter()
        .flat_map(|(combination, rollup)| {
            rollup
                .visits
                .iter()
                .map(move |(slice, visits)| (combination.as_str(), *slice, *visits))
        })
        .collect();
    execute_each(
        session,
        &statements.insert_visits,
        &visits,
        ROWS_IN_FLIGHT,
        |(combination, slice, visits)| {
            (
                site.as_str(),
                date,
                *combination,
                // Within 0..96 for a slice of this day.
                (slice - slice_base) as i32,
                i64::try_from(*visits).unwrap_or(i64::MAX),
                timestamp,
            )
        },
        "writing a site rollup",
    )
    .await?;
    let reach: Vec<(&str, i64, &[u8])> = combinations
        .iter()
        .flat_map(|(combination, rollup)| {
            rollup
                .reach
                .iter()
                .map(move |(hour, sketch)| (combination.as_str(), *hour, sketch.as_slice()))
        })
        .collect();
    execute_each(
        session,
        &statements.insert_reach,
        &reach,
        ROWS_IN_FLIGHT,
        |(combination, hour, sketch)| {
            (
                site.as_str(),
                date,
                *combination,
                (hour - hour_base) as i32,
                *sketch,
                timestamp,
            )
        },
        "writing a site rollup",
    )
    .await?;
    session
        .execute_unpaged(
            &statements.update_sealed,
            (timestamp, read_started, site.as_str(), date),
        )
        .await
        .map_err(failed("sealing a site day"))?;
    Ok(())
}

pub async fn read_site_rollup(
    session: &Session,
    statements: &SiteRollupStatements,
    partition: &SketchPartition,
) -> Result<SiteRollup, StoreError> {
    const CONTEXT: &str = "reading a site rollup";
    let key = (
        partition.site.as_str(),
        partition.day.date(),
        partition.combination.as_str(),
    );
    let (visits, reach) = futures::try_join!(
        read_all::<(i32, i64)>(session, &statements.select_visits, key, CONTEXT),
        read_all::<(i32, Vec<u8>)>(session, &statements.select_reach, key, CONTEXT),
    )?;
    let (slice_base, hour_base) = (partition.day.first_slice(), partition.day.first_hour());
    Ok(SiteRollup {
        visits: visits
            .into_iter()
            .map(|(slice, visits)| {
                (
                    slice_base + i64::from(slice),
                    u64::try_from(visits).unwrap_or_default(),
                )
            })
            .collect(),
        reach: reach
            .into_iter()
            .map(|(hour, sketch)| (hour_base + i64::from(hour), sketch))
            .collect(),
    })
}
