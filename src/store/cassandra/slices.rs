//! The slices of unsealed campaign-days on Cassandra (`migrations/0013_open_days.cql`):
//! time-bounded reads of the raw tables, the copies index, slice states, duplicates,
//! aggregates by ad and every ad's users together. Aggregates are written `USING TIMESTAMP` of their read's start and the state
//! last, so of two aggregations of one slice the one that read later wins, as with rollups.

use super::CassandraStore;
use super::config::KeyspaceName;
use super::event_reads::{self, validity};
use super::event_statements::SUMMARY_COLUMNS;
use super::event_writes::Validity;
use super::rollups::{
    self, CONVERSION_COLUMNS, ConversionCells, VIEW_COLUMNS, campaign_day, read_conversions,
    read_views, stored_count, unreadable_value,
};
use super::statements::{
    EVENT_PARTITION, execute, execute_each, partition_values, prepare_all, read_all,
};
use crate::domain::ids::{AdId, CampaignKey, ImpressionId};
use crate::domain::partition::EventPartition;
use crate::domain::sealing::SealState;
use crate::domain::slices::{Slice, Span};
use crate::domain::time::{Day, EventTime};
use crate::store::{
    ClickRow, CopyRow, ImpressionSummaryRow, OpenDayParts, OpenDayRows, RollupSlice,
    SliceAggregate, SliceAggregateRow, SliceStore, StoreError,
};
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::CqlVarint;
use scylla::{DeserializeRow, SerializeRow};
use std::collections::HashMap;
use uuid::Uuid;

const CAMPAIGN_DAY: &str = "advertiser_id = ? AND campaign_id = ? AND day = ?";
/// Copies-index reads in flight for one call.
const READS_IN_FLIGHT: usize = 16;
/// Rows written at once.
const ROWS_IN_FLIGHT: usize = 64;

pub(crate) struct SliceStatements {
    select_summaries_between: PreparedStatement,
    select_clicks_between: PreparedStatement,
    select_copies: PreparedStatement,
    mark_slice: PreparedStatement,
    set_aggregated_from: PreparedStatement,
    insert_duplicate: PreparedStatement,
    delete_aggregate: PreparedStatement,
    insert_aggregate: PreparedStatement,
    select_states: PreparedStatement,
    select_duplicates: PreparedStatement,
    select_aggregates: PreparedStatement,
    select_aggregates_with_users: PreparedStatement,
    insert_users: PreparedStatement,
    select_users: PreparedStatement,
}

impl SliceStatements {
    pub(crate) async fn prepare(
        session: &Session,
        keyspace: &KeyspaceName,
    ) -> Result<Self, StoreError> {
        let [
            select_summaries_between,
            select_clicks_between,
            select_copies,
            mark_slice,
            set_aggregated_from,
            insert_duplicate,
            delete_aggregate,
            insert_aggregate,
            select_states,
            select_duplicates,
            select_aggregates,
            select_aggregates_with_users,
            insert_users,
            select_users,
        ] = prepare_all(
            session,
            [
                format!(
                    "SELECT {SUMMARY_COLUMNS} FROM {keyspace}.impression_summary \
                     WHERE {EVENT_PARTITION} AND timestamp >= ? AND timestamp < ?"
                ),
                format!(
                    "SELECT impression_id, ad_id, timestamp, valid, invalid FROM {keyspace}.click \
                     WHERE {EVENT_PARTITION} AND timestamp >= ? AND timestamp < ?"
                ),
                format!(
                    "SELECT impression_id, timestamp, valid, invalid FROM {keyspace}.impression_copy \
                     WHERE {EVENT_PARTITION} AND impression_id = ?"
                ),
                // Written at the mark's own time: of two marks landing out of order, the later
                // one stays, and summaries that kept pieces of the slice see it.
                format!(
                    "UPDATE {keyspace}.slice_state USING TIMESTAMP ? SET marked_at = ? \
                     WHERE {CAMPAIGN_DAY} AND slice = ?"
                ),
                format!(
                    "UPDATE {keyspace}.slice_state SET aggregated_from = ? WHERE {CAMPAIGN_DAY} AND slice = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.slice_duplicate (advertiser_id, campaign_id, day, impression_id, \
                     timestamp, valid, invalid) VALUES (?, ?, ?, ?, ?, ?, ?)"
                ),
                format!(
                    "DELETE FROM {keyspace}.slice_aggregate USING TIMESTAMP ? WHERE {CAMPAIGN_DAY} AND slice = ?"
                ),
                format!(
                    "INSERT INTO {keyspace}.slice_aggregate (advertiser_id, campaign_id, day, slice, ad_id, \
                     impressions, clicks, billable_impressions, invalid_impressions, invalid_clicks, users, \
                     {VIEW_COLUMNS}, {CONVERSION_COLUMNS}) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?"
                ),
                format!(
                    "SELECT slice, marked_at, aggregated_from FROM {keyspace}.slice_state WHERE {CAMPAIGN_DAY}"
                ),
                format!(
                    "SELECT impression_id, timestamp, valid, invalid FROM {keyspace}.slice_duplicate \
                     WHERE {CAMPAIGN_DAY}"
                ),
                format!(
                    "SELECT slice, ad_id, impressions, clicks, billable_impressions, invalid_impressions, \
                     invalid_clicks, {VIEW_COLUMNS}, {CONVERSION_COLUMNS} FROM {keyspace}.slice_aggregate \
                     WHERE {CAMPAIGN_DAY}"
                ),
                format!(
                    "SELECT slice, ad_id, impressions, clicks, billable_impressions, invalid_impressions, \
                     invalid_clicks, {VIEW_COLUMNS}, {CONVERSION_COLUMNS}, users FROM {keyspace}.slice_aggregate \
                     WHERE {CAMPAIGN_DAY}"
                ),
                format!(
                    "INSERT INTO {keyspace}.slice_users (advertiser_id, campaign_id, day, slice, users) \
                     VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?"
                ),
                format!("SELECT slice, users FROM {keyspace}.slice_users WHERE {CAMPAIGN_DAY}"),
            ],
        )
        .await?;
        Ok(Self {
            select_summaries_between,
            select_clicks_between,
            select_copies,
            mark_slice,
            set_aggregated_from,
            insert_duplicate,
            delete_aggregate,
            insert_aggregate,
            select_states,
            select_duplicates,
            select_aggregates,
            select_aggregates_with_users,
            insert_users,
            select_users,
        })
    }
}

/// A slice as stored: its number within the day (the day's last slice's next is 96).
fn day_slice(day: Day, slice: Slice) -> i32 {
    i32::try_from(slice - day.first_slice()).unwrap_or(i32::MAX)
}

fn read_count(count: Option<i64>) -> u64 {
    rollups::read_count(count.unwrap_or_default())
}

#[derive(DeserializeRow)]
struct StoredCopy {
    impression_id: Uuid,
    timestamp: DateTime<Utc>,
    valid: Option<bool>,
    invalid: Option<String>,
}

impl From<StoredCopy> for CopyRow {
    fn from(row: StoredCopy) -> Self {
        CopyRow {
            impression_id: ImpressionId::new(row.impression_id),
            timestamp: EventTime::from_stored(row.timestamp),
            invalid: validity(row.valid, row.invalid.as_deref()),
        }
    }
}

#[derive(DeserializeRow)]
struct StoredState {
    slice: i32,
    marked_at: Option<DateTime<Utc>>,
    aggregated_from: Option<DateTime<Utc>>,
}

#[derive(DeserializeRow)]
struct StoredAggregate {
    slice: i32,
    ad_id: Uuid,
    impressions: Option<i64>,
    clicks: Option<i64>,
    billable_impressions: Option<i64>,
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

#[derive(DeserializeRow)]
struct StoredAggregateWithUsers {
    slice: i32,
    ad_id: Uuid,
    impressions: Option<i64>,
    clicks: Option<i64>,
    billable_impressions: Option<i64>,
    invalid_impressions: Option<i64>,
    invalid_clicks: Option<i64>,
    // Absent in a row written before viewability.
    measurable: Option<i64>,
    viewable: Option<i64>,
    engaged: Option<i64>,
    in_view_ms_total: Option<i64>,
    in_view_measured: Option<i64>,
    conversions: Option<i64>,
    post_click_conversions: Option<i64>,
    post_view_conversions: Option<i64>,
    conversion_value: Option<HashMap<String, CqlVarint>>,
    users: Option<Vec<u8>>,
}

impl StoredAggregateWithUsers {
    fn split(self) -> (StoredAggregate, Vec<u8>) {
        let counts = StoredAggregate {
            slice: self.slice,
            ad_id: self.ad_id,
            impressions: self.impressions,
            clicks: self.clicks,
            billable_impressions: self.billable_impressions,
            invalid_impressions: self.invalid_impressions,
            invalid_clicks: self.invalid_clicks,
            measurable: self.measurable,
            viewable: self.viewable,
            engaged: self.engaged,
            in_view_ms_total: self.in_view_ms_total,
            in_view_measured: self.in_view_measured,
            conversions: self.conversions,
            post_click_conversions: self.post_click_conversions,
            post_view_conversions: self.post_view_conversions,
            conversion_value: self.conversion_value,
        };
        (counts, self.users.unwrap_or_default())
    }
}

#[derive(DeserializeRow)]
struct StoredUsers {
    slice: i32,
    users: Option<Vec<u8>>,
}

#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct DuplicateValues {
    advertiser_id: Uuid,
    campaign_id: Uuid,
    day: NaiveDate,
    impression_id: Uuid,
    timestamp: DateTime<Utc>,
    #[scylla(flatten)]
    validity: Validity,
}

#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct AggregateValues<'a> {
    advertiser_id: Uuid,
    campaign_id: Uuid,
    day: NaiveDate,
    slice: i32,
    ad_id: Uuid,
    impressions: i64,
    clicks: i64,
    billable_impressions: i64,
    invalid_impressions: i64,
    invalid_clicks: i64,
    users: &'a [u8],
    measurable: i64,
    viewable: i64,
    engaged: i64,
    in_view_ms_total: i64,
    in_view_measured: i64,
    #[scylla(flatten)]
    conversions: ConversionCells,
    written_at: i64,
}

impl CassandraStore {
    async fn slice_statements(&self) -> Result<&SliceStatements, StoreError> {
        Ok(&self.prepared().await?.slices)
    }
}

#[async_trait]
impl SliceStore for CassandraStore {
    async fn read_impression_summaries_between(
        &self,
        partition: &EventPartition,
        span: Span,
    ) -> Result<Vec<ImpressionSummaryRow>, StoreError> {
        let statement = &self.slice_statements().await?.select_summaries_between;
        event_reads::impression_summaries_between(&self.session, statement, partition, span).await
    }

    async fn read_clicks_between(
        &self,
        partition: &EventPartition,
        span: Span,
    ) -> Result<Vec<ClickRow>, StoreError> {
        let statement = &self.slice_statements().await?.select_clicks_between;
        event_reads::clicks_between(&self.session, statement, partition, span).await
    }

    async fn impression_copies(
        &self,
        partition: &EventPartition,
        ids: &[ImpressionId],
    ) -> Result<Vec<CopyRow>, StoreError> {
        let statement = &self.slice_statements().await?.select_copies;
        let (advertiser_id, campaign_id, day, bucket) = partition_values(partition);
        let session = &self.session;
        // One read per id, a bounded number at once: principle 4 (fan out, never IN).
        let ids: Vec<Uuid> = ids.iter().map(|id| id.as_uuid()).collect();
        let copies: Vec<Vec<StoredCopy>> = stream::iter(ids)
            .map(|id| async move {
                read_all(
                    session,
                    statement,
                    (advertiser_id, campaign_id, day, bucket, id),
                    "reading the copies index",
                )
                .await
            })
            .buffer_unordered(READS_IN_FLIGHT)
            .try_collect()
            .await?;
        Ok(copies.into_iter().flatten().map(CopyRow::from).collect())
    }

    async fn clicks_of(
        &self,
        campaign: CampaignKey,
        impression_id: ImpressionId,
    ) -> Result<Vec<ClickRow>, StoreError> {
        let statements = &self.prepared().await?.events;
        event_reads::clicks_of(&self.session, statements, campaign, impression_id).await
    }

    async fn mark_slices(
        &self,
        campaign: CampaignKey,
        day: Day,
        slices: &[Slice],
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let statement = &self.slice_statements().await?.mark_slice;
        let (advertiser_id, campaign_id, date) = campaign_day(campaign, day);
        execute_each(
            &self.session,
            statement,
            slices,
            ROWS_IN_FLIGHT,
            |slice| {
                (
                    at.timestamp_micros(),
                    at,
                    advertiser_id,
                    campaign_id,
                    date,
                    day_slice(day, *slice),
                )
            },
            "marking slices",
        )
        .await
    }

    async fn write_duplicates(
        &self,
        campaign: CampaignKey,
        day: Day,
        copies: &[CopyRow],
    ) -> Result<(), StoreError> {
        let statement = &self.slice_statements().await?.insert_duplicate;
        let (advertiser_id, campaign_id, date) = campaign_day(campaign, day);
        execute_each(
            &self.session,
            statement,
            copies,
            ROWS_IN_FLIGHT,
            |copy| DuplicateValues {
                advertiser_id,
                campaign_id,
                day: date,
                impression_id: copy.impression_id.as_uuid(),
                timestamp: copy.timestamp.instant(),
                validity: Validity::of(copy.invalid),
            },
            "recording duplicate impressions",
        )
        .await
    }

    async fn read_open_day(
        &self,
        campaign: CampaignKey,
        day: Day,
        parts: OpenDayParts,
    ) -> Result<OpenDayRows, StoreError> {
        const CONTEXT: &str = "reading an open day's slices";
        let statements = self.slice_statements().await?;
        let key = campaign_day(campaign, day);
        let session = &self.session;
        let aggregates = async {
            if parts == OpenDayParts::States {
                Ok(Vec::new())
            } else if parts == OpenDayParts::AggregatesWithAdUsers {
                let rows: Vec<StoredAggregateWithUsers> = read_all(
                    session,
                    &statements.select_aggregates_with_users,
                    key,
                    CONTEXT,
                )
                .await?;
                Ok::<_, StoreError>(
                    rows.into_iter()
                        .map(StoredAggregateWithUsers::split)
                        .collect::<Vec<_>>(),
                )
            } else {
                let rows: Vec<StoredAggregate> =
                    read_all(session, &statements.select_aggregates, key, CONTEXT).await?;
                Ok(rows.into_iter().map(|row| (row, Vec::new())).collect())
            }
        };
        let users = async {
            if parts == OpenDayParts::States {
                Ok(Vec::new())
            } else {
                read_all::<StoredUsers>(session, &statements.select_users, key, CONTEXT).await
            }
        };
        let (states, duplicates, aggregates, users) = futures::try_join!(
            read_all::<StoredState>(session, &statements.select_states, key, CONTEXT),
            read_all::<StoredCopy>(session, &statements.select_duplicates, key, CONTEXT),
            aggregates,
            users,
        )?;
        let base = day.first_slice();
        Ok(OpenDayRows {
            states: states
                .into_iter()
                .map(|row| {
                    let state = SealState {
                        sealed_from: row.aggregated_from,
                        late_at: row.marked_at,
                    };
                    (base + i64::from(row.slice), state)
                })
                .collect(),
            duplicates: duplicates.into_iter().map(CopyRow::from).collect(),
            aggregates: aggregates
                .into_iter()
                .map(|(row, users)| {
                    let conversions = read_conversions(
                        [
                            row.conversions,
                            row.post_click_conversions,
                            row.post_view_conversions,
                        ],
                        row.conversion_value,
                    )
                    .ok_or_else(|| unreadable_value(CONTEXT))?;
                    Ok(SliceAggregateRow {
                        counts: RollupSlice {
                            slice: base + i64::from(row.slice),
                            ad_id: AdId::new(row.ad_id),
                            impressions: read_count(row.impressions),
                            clicks: read_count(row.clicks),
                            billable_impressions: read_count(row.billable_impressions),
                            invalid_impressions: read_count(row.invalid_impressions),
                            invalid_clicks: read_count(row.invalid_clicks),
                            views: read_views([
                                row.measurable,
                                row.viewable,
                                row.engaged,
                                row.in_view_ms_total,
                                row.in_view_measured,
                            ]),
                            conversions,
                        },
                        users,
                    })
                })
                .collect::<Result<_, StoreError>>()?,
            users: users
                .into_iter()
                .map(|row| (base + i64::from(row.slice), row.users.unwrap_or_default()))
                .collect(),
        })
    }

    async fn write_slice_aggregate(
        &self,
        campaign: CampaignKey,
        day: Day,
        slice: Slice,
        aggregate: &SliceAggregate,
        read_started: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        const CONTEXT: &str = "writing a slice aggregate";
        let statements = self.slice_statements().await?;
        let (advertiser_id, campaign_id, date) = campaign_day(campaign, day);
        let stored_slice = day_slice(day, slice);
        let written_at = read_started.timestamp_micros();
        // Rows of an earlier aggregate that this one has no more (an ad whose only impression
        // moved to an earlier copy) must not linger: a deletion just before this write's
        // timestamp removes every older row and none of this aggregate's.
        let delete = (
            written_at - 1,
            advertiser_id,
            campaign_id,
            date,
            stored_slice,
        );
        execute(&self.session, &statements.delete_aggregate, delete, CONTEXT).await?;
        execute_each(
            &self.session,
            &statements.insert_aggregate,
            &aggregate.by_ad,
            ROWS_IN_FLIGHT,
            |row| AggregateValues {
                advertiser_id,
                campaign_id,
                day: date,
                slice: stored_slice,
                ad_id: row.counts.ad_id.as_uuid(),
                impressions: stored_count(row.counts.impressions),
                clicks: stored_count(row.counts.clicks),
                billable_impressions: stored_count(row.counts.billable_impressions),
                invalid_impressions: stored_count(row.counts.invalid_impressions),
                invalid_clicks: stored_count(row.counts.invalid_clicks),
                users: &row.users,
                measurable: stored_count(row.counts.views.measurable),
                viewable: stored_count(row.counts.views.viewable),
                engaged: stored_count(row.counts.views.engaged),
                in_view_ms_total: stored_count(row.counts.views.in_view_ms_total),
                in_view_measured: stored_count(row.counts.views.in_view_measured),
                conversions: ConversionCells::of(&row.counts.conversions),
                written_at,
            },
            CONTEXT,
        )
        .await?;
        let users = (
            advertiser_id,
            campaign_id,
            date,
            stored_slice,
            aggregate.users.as_slice(),
            written_at,
        );
        execute(&self.session, &statements.insert_users, users, CONTEXT).await?;
        let state = (read_started, advertiser_id, campaign_id, date, stored_slice);
        execute(
            &self.session,
            &statements.set_aggregated_from,
            state,
            CONTEXT,
        )
        .await
    }

    async fn delete_open_day(
        &self,
        _campaign: CampaignKey,
        _day: Day,
        _partitions: &[EventPartition],
    ) -> Result<(), StoreError> {
        // The tables' own TTL drops the rows: a deletion would only add tombstones.
        Ok(())
    }
}
