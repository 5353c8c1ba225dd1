//! Billable impressions for delivery on Cassandra: `delivery_live` (a partition per campaign,
//! a row per day and writer) and `delivery_sealed` (a partition per campaign, a row per month,
//! a map entry per sealed day) and `delivery_windows` (a partition per campaign window, a row
//! per publication). See `migrations/0009_delivery.cql` and `0012_delivery_windows.cql`.

use super::CassandraStore;
use super::config::KeyspaceName;
use super::errors::decode_error;
use super::statements::{execute, execute_each, prepare_all, read_all};
use crate::domain::delivery::DaySlices;
use crate::domain::ids::CampaignKey;
use crate::domain::ids::UserId;
use crate::domain::process::ProcessId;
use crate::domain::time::Day;
use crate::store::error::Message;
use crate::store::{DeliveryStore, LiveCountRow, SealedCounts, StoreError, WindowPublication};
use async_trait::async_trait;
use chrono::{DateTime, Datelike, NaiveDate, Utc};
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::{DeserializeRow, SerializeRow};
use std::collections::HashMap;
use uuid::Uuid;

/// Live rows written at once: a flush carries one row per campaign-day that changed.
const LIVE_ROWS_IN_FLIGHT: usize = 64;

pub(crate) struct DeliveryStatements {
    insert_live: PreparedStatement,
    select_live: PreparedStatement,
    delete_live_day: PreparedStatement,
    update_sealed: PreparedStatement,
    select_sealed: PreparedStatement,
    select_version: PreparedStatement,
    insert_window: PreparedStatement,
    select_window: PreparedStatement,
}

impl DeliveryStatements {
    pub(crate) async fn prepare(
        session: &Session,
        keyspace: &KeyspaceName,
    ) -> Result<Self, StoreError> {
        let [
            insert_live,
            select_live,
            delete_live_day,
            update_sealed,
            select_sealed,
            select_version,
            insert_window,
            select_window,
        ] = prepare_all(
            session,
            [
                // The capture time orders a writer's rows: a delayed retry of an older state
                // never overwrites a newer one.
                format!(
                    "INSERT INTO {keyspace}.delivery_live (advertiser_id, campaign_id, day, writer, \
                     slices) VALUES (?, ?, ?, ?, ?) USING TIMESTAMP ?"
                ),
                format!(
                    "SELECT day, writer, slices FROM {keyspace}.delivery_live \
                     WHERE advertiser_id = ? AND campaign_id = ?"
                ),
                format!(
                    "DELETE FROM {keyspace}.delivery_live \
                     WHERE advertiser_id = ? AND campaign_id = ? AND day = ?"
                ),
                // The day and the partition's version in one statement: they change together.
                format!(
                    "UPDATE {keyspace}.delivery_sealed SET days[?] = ?, sealed_version = ? \
                     WHERE advertiser_id = ? AND campaign_id = ? AND month = ?"
                ),
                format!(
                    "SELECT days, sealed_version FROM {keyspace}.delivery_sealed \
                     WHERE advertiser_id = ? AND campaign_id = ?"
                ),
                format!(
                    "SELECT sealed_version FROM {keyspace}.delivery_sealed \
                     WHERE advertiser_id = ? AND campaign_id = ? LIMIT 1"
                ),
                format!(
                    "INSERT INTO {keyspace}.delivery_windows (advertiser_id, campaign_id, \
                     window_start, published_at, writer, users) VALUES (?, ?, ?, ?, ?, ?)"
                ),
                format!(
                    "SELECT published_at, writer, users FROM {keyspace}.delivery_windows \
                     WHERE advertiser_id = ? AND campaign_id = ? AND window_start = ?"
                ),
            ],
        )
        .await?;
        Ok(Self {
            insert_live,
            select_live,
            delete_live_day,
            update_sealed,
            select_sealed,
            select_version,
            insert_window,
            select_window,
        })
    }
}

/// The bound values of a `delivery_live` insert.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct LiveValues {
    advertiser_id: Uuid,
    campaign_id: Uuid,
    day: NaiveDate,
    writer: Uuid,
    slices: Vec<u8>,
    /// Microseconds: of two writes of one writer's row, the later capture wins.
    captured_at: i64,
}

#[derive(DeserializeRow)]
struct StoredLive {
    day: NaiveDate,
    writer: Uuid,
    slices: Vec<u8>,
}

#[derive(DeserializeRow)]
struct StoredMonth {
    days: Option<HashMap<NaiveDate, Vec<u8>>>,
    sealed_version: Option<Uuid>,
}

/// The bound values of a `delivery_windows` insert.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct WindowValues {
    advertiser_id: Uuid,
    campaign_id: Uuid,
    window_start: DateTime<Utc>,
    published_at: DateTime<Utc>,
    writer: Uuid,
    users: Vec<u8>,
}

#[derive(DeserializeRow)]
struct StoredPublication {
    published_at: DateTime<Utc>,
    writer: Uuid,
    users: Vec<u8>,
}

#[derive(DeserializeRow)]
struct StoredVersion {
    sealed_version: Option<Uuid>,
}

fn campaign_values(campaign: CampaignKey) -> (Uuid, Uuid) {
    (
        campaign.advertiser_id.as_uuid(),
        campaign.campaign_id.as_uuid(),
    )
}

/// The month a day is kept under: yyyymm.
fn month_of(day: Day) -> i32 {
    day.date().year() * 100 + day.date().month() as i32
}

fn slices(bytes: &[u8], context: &str) -> Result<DaySlices, StoreError> {
    DaySlices::from_bytes(bytes)
        .ok_or_else(|| decode_error(context, Message("stored slices do not decode".into())))
}

#[async_trait]
impl DeliveryStore for CassandraStore {
    async fn write_live_counts(&self, rows: &[LiveCountRow]) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.delivery;
        let captured_at = chrono::Utc::now().timestamp_micros();
        execute_each(
            &self.session,
            &statements.insert_live,
            rows,
            LIVE_ROWS_IN_FLIGHT,
            |row| LiveValues {
                advertiser_id: row.campaign.advertiser_id.as_uuid(),
                campaign_id: row.campaign.campaign_id.as_uuid(),
                day: row.day.date(),
                writer: row.writer.as_uuid(),
                slices: row.slices.to_bytes(),
                captured_at,
            },
            "writing live delivery counts",
        )
        .await
    }

    async fn read_live_counts(
        &self,
        campaign: CampaignKey,
    ) -> Result<Vec<LiveCountRow>, StoreError> {
        const CONTEXT: &str = "reading live delivery counts";
        let statements = &self.prepared().await?.delivery;
        let rows: Vec<StoredLive> = read_all(
            &self.session,
            &statements.select_live,
            campaign_values(campaign),
            CONTEXT,
        )
        .await?;
        rows.into_iter()
            .map(|row| {
                Ok(LiveCountRow {
                    campaign,
                    day: Day::new(row.day),
                    writer: ProcessId::new(row.writer),
                    slices: slices(&row.slices, CONTEXT)?,
                })
            })
            .collect()
    }

    async fn delete_live_counts(&self, campaign: CampaignKey, day: Day) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.delivery;
        let (advertiser_id, campaign_id) = campaign_values(campaign);
        execute(
            &self.session,
            &statements.delete_live_day,
            (advertiser_id, campaign_id, day.date()),
            "deleting a sealed day's live delivery counts",
        )
        .await
    }

    async fn write_sealed_counts(
        &self,
        campaign: CampaignKey,
        day: Day,
        slices: &DaySlices,
    ) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.delivery;
        let (advertiser_id, campaign_id) = campaign_values(campaign);
        let values = (
            day.date(),
            slices.to_bytes(),
            Uuid::new_v4(),
            advertiser_id,
            campaign_id,
            month_of(day),
        );
        execute(
            &self.session,
            &statements.update_sealed,
            values,
            "writing a sealed day's delivery",
        )
        .await
    }

    async fn read_sealed_counts(&self, campaign: CampaignKey) -> Result<SealedCounts, StoreError> {
        const CONTEXT: &str = "reading sealed delivery";
        let statements = &self.prepared().await?.delivery;
        let months: Vec<StoredMonth> = read_all(
            &self.session,
            &statements.select_sealed,
            campaign_values(campaign),
            CONTEXT,
        )
        .await?;
        let mut counts = SealedCounts::default();
        for month in months {
            // Static: the same on every row of the partition.
            counts.version = counts.version.or(month.sealed_version);
            for (day, bytes) in month.days.unwrap_or_default() {
                counts.days.push((Day::new(day), slices(&bytes, CONTEXT)?));
            }
        }
        Ok(counts)
    }

    async fn sealed_version(&self, campaign: CampaignKey) -> Result<Option<Uuid>, StoreError> {
        let statements = &self.prepared().await?.delivery;
        let rows: Vec<StoredVersion> = read_all(
            &self.session,
            &statements.select_version,
            campaign_values(campaign),
            "reading the sealed delivery version",
        )
        .await?;
        Ok(rows.into_iter().find_map(|row| row.sealed_version))
    }

    async fn publish_windows(&self, publications: &[WindowPublication]) -> Result<(), StoreError> {
        let statements = &self.prepared().await?.delivery;
        execute_each(
            &self.session,
            &statements.insert_window,
            publications,
            LIVE_ROWS_IN_FLIGHT,
            |publication| WindowValues {
                advertiser_id: publication.campaign.advertiser_id.as_uuid(),
                campaign_id: publication.campaign.campaign_id.as_uuid(),
                window_start: publication.window_start,
                published_at: publication.published_at,
                writer: publication.writer.as_uuid(),
                users: publication.packed_users(),
            },
            "publishing counted billable windows",
        )
        .await
    }

    async fn window_publications(
        &self,
        campaign: CampaignKey,
        window_start: DateTime<Utc>,
    ) -> Result<Vec<WindowPublication>, StoreError> {
        const CONTEXT: &str = "reading a billable window's publications";
        let statements = &self.prepared().await?.delivery;
        let (advertiser_id, campaign_id) = campaign_values(campaign);
        let rows: Vec<StoredPublication> = read_all(
            &self.session,
            &statements.select_window,
            (advertiser_id, campaign_id, window_start),
            CONTEXT,
        )
        .await?;
        rows.into_iter()
            .map(|row| {
                let users: Vec<UserId> =
                    WindowPublication::unpack_users(&row.users).ok_or_else(|| {
                        decode_error(CONTEXT, Message("stored users do not decode".into()))
                    })?;
                Ok(WindowPublication {
                    campaign,
                    window_start,
                    published_at: row.published_at,
                    writer: ProcessId::new(row.writer),
                    users,
                })
            })
            .collect()
    }
}
