//! Conversions' due lists on Cassandra (`migrations/0024_conversion_due_by_advertiser.cql`): a
//! partition per (UTC day, advertiser) in `conversion_due_by_advertiser`, the day's directory
//! of those lists with where each was last taken from in `conversion_due_advertiser`, and the
//! shared list of the day that releases before 0024 wrote (`conversion_due`), read until it
//! is empty.

use super::CassandraStore;
use super::config::KeyspaceName;
use super::errors::decode_error;
use super::statements::{execute, execute_each, prepare_all, read_all, write_partition};
use crate::domain::conversion::ConversionId;
use crate::domain::ids::AdvertiserId;
use crate::domain::time::Day;
use crate::store::error::Message;
use crate::store::{DueConversion, DueLane, DueLaneState, StoreError};
use chrono::{DateTime, NaiveDate, Utc};
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::{DeserializeRow, SerializeRow};
use std::collections::BTreeMap;
use uuid::Uuid;

/// Rows deleted at once by one call.
const ROWS_IN_FLIGHT: usize = 64;

pub(crate) struct DueStatements {
    insert_entry: PreparedStatement,
    list_lane: PreparedStatement,
    select_lanes: PreparedStatement,
    select_entries: PreparedStatement,
    select_entries_after: PreparedStatement,
    delete_entry: PreparedStatement,
    record_decided_through: PreparedStatement,
    select_shared: PreparedStatement,
    select_shared_after: PreparedStatement,
    delete_shared: PreparedStatement,
}

impl DueStatements {
    pub(crate) async fn prepare(
        session: &Session,
        keyspace: &KeyspaceName,
    ) -> Result<Self, StoreError> {
        let [
            insert_entry,
            list_lane,
            select_lanes,
            select_entries,
            select_entries_after,
            delete_entry,
            record_decided_through,
            select_shared,
            select_shared_after,
            delete_shared,
        ] = prepare_all(
            session,
            [
                format!(
                    "INSERT INTO {keyspace}.conversion_due_by_advertiser \
                     (day, advertiser_id, due, conversion_id) VALUES (?, ?, ?, ?)"
                ),
                format!(
                    "UPDATE {keyspace}.conversion_due_advertiser USING TIMESTAMP ? \
                     SET listed_through = ? WHERE day = ? AND advertiser_id = ?"
                ),
                format!(
                    "SELECT advertiser_id, listed_through, decided_through_due, \
                     decided_through_id FROM {keyspace}.conversion_due_advertiser WHERE day = ?"
                ),
                format!(
                    "SELECT due, conversion_id FROM {keyspace}.conversion_due_by_advertiser \
                     WHERE day = ? AND advertiser_id = ? AND due <= ? LIMIT ?"
                ),
                // Cassandra refuses a single-column relation beside a multi-column one on the
                // same clustering columns: the upper bound is written as a one-column tuple.
                format!(
                    "SELECT due, conversion_id FROM {keyspace}.conversion_due_by_advertiser \
                     WHERE day = ? AND advertiser_id = ? AND (due, conversion_id) > (?, ?) \
                     AND (due) <= (?) LIMIT ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.conversion_due_by_advertiser \
                     WHERE day = ? AND advertiser_id = ? AND due = ? AND conversion_id = ?"
                ),
                format!(
                    "UPDATE {keyspace}.conversion_due_advertiser \
                     SET decided_through_due = ?, decided_through_id = ? \
                     WHERE day = ? AND advertiser_id = ?"
                ),
                format!(
                    "SELECT due, advertiser_id, conversion_id FROM {keyspace}.conversion_due \
                     WHERE day = ? AND due <= ? LIMIT ?"
                ),
                format!(
                    "SELECT due, advertiser_id, conversion_id FROM {keyspace}.conversion_due \
                     WHERE day = ? AND (due, advertiser_id, conversion_id) > (?, ?, ?) \
                     AND (due) <= (?) LIMIT ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.conversion_due \
                     WHERE day = ? AND due = ? AND advertiser_id = ? AND conversion_id = ?"
                ),
            ],
        )
        .await?;
        Ok(Self {
            insert_entry,
            list_lane,
            select_lanes,
            select_entries,
            select_entries_after,
            delete_entry,
            record_decided_through,
            select_shared,
            select_shared_after,
            delete_shared,
        })
    }
}

/// The UTC day a due instant is listed under.
fn due_day(due: DateTime<Utc>) -> Day {
    Day::new(due.date_naive())
}

/// The key of a `conversion_due_by_advertiser` row, in the order of its insert and delete.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct EntryValues<'a> {
    day: NaiveDate,
    advertiser_id: Uuid,
    due: DateTime<Utc>,
    conversion_id: &'a str,
}

impl<'a> EntryValues<'a> {
    fn new(due: &'a DueConversion) -> Self {
        Self {
            day: due_day(due.due).date(),
            advertiser_id: due.advertiser_id.as_uuid(),
            due: due.due,
            conversion_id: due.conversion_id.as_str(),
        }
    }
}

/// The key of a `conversion_due` row (the shared list), in the order of its delete.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct SharedValues<'a> {
    day: NaiveDate,
    due: DateTime<Utc>,
    advertiser_id: Uuid,
    conversion_id: &'a str,
}

impl<'a> SharedValues<'a> {
    fn new(due: &'a DueConversion) -> Self {
        Self {
            day: due_day(due.due).date(),
            due: due.due,
            advertiser_id: due.advertiser_id.as_uuid(),
            conversion_id: due.conversion_id.as_str(),
        }
    }
}

/// A row of `conversion_due_advertiser`.
#[derive(DeserializeRow)]
struct StoredLane {
    advertiser_id: Uuid,
    listed_through: Option<DateTime<Utc>>,
    decided_through_due: Option<DateTime<Utc>>,
    decided_through_id: Option<String>,
}

/// A row of an advertiser's list.
#[derive(DeserializeRow)]
struct StoredEntry {
    due: DateTime<Utc>,
    conversion_id: String,
}

/// A row of the shared list.
#[derive(DeserializeRow)]
struct StoredShared {
    due: DateTime<Utc>,
    advertiser_id: Uuid,
    conversion_id: String,
}

fn entry(
    due: DateTime<Utc>,
    advertiser: Uuid,
    id: &str,
    context: &'static str,
) -> Result<DueConversion, StoreError> {
    let conversion_id = ConversionId::new(id).map_err(|why| {
        decode_error(
            context,
            Message(format!("a due conversion: conversion id {why}")),
        )
    })?;
    Ok(DueConversion {
        due,
        advertiser_id: AdvertiserId::new(advertiser),
        conversion_id,
    })
}

impl CassandraStore {
    async fn due_statements(&self) -> Result<&DueStatements, StoreError> {
        Ok(&self.prepared().await?.due_lists)
    }

    /// Lists `due` in its advertisers' lists, a batch per (day, advertiser), each list in the
    /// day's directory first with its latest due time (`USING TIMESTAMP` of it, so the latest
    /// listed wins): a list is never out of the decider's sight.
    pub(super) async fn list_due(&self, due: &[DueConversion]) -> Result<(), StoreError> {
        const CONTEXT: &str = "listing conversions due";
        let statements = self.due_statements().await?;
        let mut lists: BTreeMap<(Day, AdvertiserId), Vec<EntryValues<'_>>> = BTreeMap::new();
        for entry in due {
            lists
                .entry((due_day(entry.due), entry.advertiser_id))
                .or_default()
                .push(EntryValues::new(entry));
        }
        let lanes: Vec<(i64, DateTime<Utc>, NaiveDate, Uuid)> = lists
            .iter()
            .filter_map(|((day, advertiser), rows)| {
                let latest = rows.iter().map(|row| row.due).max()?;
                let micros = latest.timestamp_micros();
                Some((micros, latest, day.date(), advertiser.as_uuid()))
            })
            .collect();
        execute_each(
            &self.session,
            &statements.list_lane,
            &lanes,
            ROWS_IN_FLIGHT,
            |lane| *lane,
            CONTEXT,
        )
        .await?;
        futures::future::try_join_all(
            lists.into_values().map(|rows| {
                write_partition(&self.session, &statements.insert_entry, rows, CONTEXT)
            }),
        )
        .await?;
        Ok(())
    }

    pub(super) async fn due_lanes_of(&self, day: Day) -> Result<Vec<DueLaneState>, StoreError> {
        const CONTEXT: &str = "reading the due lists";
        let statements = self.due_statements().await?;
        let rows: Vec<StoredLane> = read_all(
            &self.session,
            &statements.select_lanes,
            (day.date(),),
            CONTEXT,
        )
        .await?;
        rows.into_iter()
            .map(|row| {
                let decided_through = match (row.decided_through_due, row.decided_through_id) {
                    (Some(due), Some(id)) => Some(entry(due, row.advertiser_id, &id, CONTEXT)?),
                    _ => None,
                };
                Ok(DueLaneState {
                    advertiser_id: AdvertiserId::new(row.advertiser_id),
                    listed_through: row.listed_through,
                    decided_through,
                })
            })
            .collect()
    }

    pub(super) async fn due_entries(
        &self,
        day: Day,
        lane: DueLane,
        after: Option<&DueConversion>,
        until: DateTime<Utc>,
        limit: usize,
    ) -> Result<Vec<DueConversion>, StoreError> {
        const CONTEXT: &str = "reading conversions due";
        if limit == 0 {
            // Cassandra refuses `LIMIT 0`.
            return Ok(Vec::new());
        }
        let statements = self.due_statements().await?;
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        let session = &self.session;
        let date = day.date();
        match lane {
            DueLane::Advertiser(advertiser) => {
                let id = advertiser.as_uuid();
                let rows: Vec<StoredEntry> = match after {
                    None => {
                        let values = (date, id, until, limit);
                        read_all(session, &statements.select_entries, values, CONTEXT).await?
                    }
                    Some(after) => {
                        let cursor = (after.due, after.conversion_id.as_str());
                        let values = (date, id, cursor.0, cursor.1, until, limit);
                        read_all(session, &statements.select_entries_after, values, CONTEXT).await?
                    }
                };
                rows.into_iter()
                    .map(|row| entry(row.due, id, &row.conversion_id, CONTEXT))
                    .collect()
            }
            DueLane::Shared => {
                let rows: Vec<StoredShared> = match after {
                    None => {
                        let values = (date, until, limit);
                        read_all(session, &statements.select_shared, values, CONTEXT).await?
                    }
                    Some(after) => {
                        let values = (
                            date,
                            after.due,
                            after.advertiser_id.as_uuid(),
                            after.conversion_id.as_str(),
                            until,
                            limit,
                        );
                        read_all(session, &statements.select_shared_after, values, CONTEXT).await?
                    }
                };
                rows.into_iter()
                    .map(|row| entry(row.due, row.advertiser_id, &row.conversion_id, CONTEXT))
                    .collect()
            }
        }
    }

    /// Deletes the entries, then records the last as where the list was taken through.
    pub(super) async fn unlist_due(
        &self,
        lane: DueLane,
        taken: &[DueConversion],
    ) -> Result<(), StoreError> {
        const CONTEXT: &str = "removing conversions due";
        let statements = self.due_statements().await?;
        let Some(last) = taken.last() else {
            return Ok(());
        };
        match lane {
            DueLane::Shared => {
                execute_each(
                    &self.session,
                    &statements.delete_shared,
                    taken,
                    ROWS_IN_FLIGHT,
                    SharedValues::new,
                    CONTEXT,
                )
                .await
            }
            DueLane::Advertiser(_) => {
                execute_each(
                    &self.session,
                    &statements.delete_entry,
                    taken,
                    ROWS_IN_FLIGHT,
                    EntryValues::new,
                    CONTEXT,
                )
                .await?;
                let values = (
                    last.due,
                    last.conversion_id.as_str(),
                    due_day(last.due).date(),
                    last.advertiser_id.as_uuid(),
                );
                execute(
                    &self.session,
                    &statements.record_decided_through,
                    values,
                    CONTEXT,
                )
                .await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_due_entry_is_listed_under_its_own_utc_day() {
        let due = DueConversion {
            due: "2026-11-28T23:59:59.999Z".parse().expect("an instant"),
            advertiser_id: AdvertiserId::new(Uuid::from_u128(1)),
            conversion_id: ConversionId::new("order-17").expect("valid"),
        };
        assert_eq!(EntryValues::new(&due).day.to_string(), "2026-11-28");
        assert_eq!(SharedValues::new(&due).day.to_string(), "2026-11-28");
    }
}
