//! View reports on Cassandra (`migrations/0014_viewability.cql`): written in their impression's
//! partition with plain inserts (a report sent twice is two rows of one id, told apart by its
//! arrival), read a partition or a span of it at a time beside its impressions.

use super::CassandraStore;
use super::config::KeyspaceName;
use super::event_reads::{client_of, validity};
use super::event_writes::{ClientCells, Validity, set_or_unset};
use super::statements::{
    EVENT_PARTITION, PartitionValues, execute_each, partition_values, prepare_all, read_all,
};
use crate::domain::ids::ImpressionId;
use crate::domain::partition::EventPartition;
use crate::domain::slices::Span;
use crate::domain::time::EventTime;
use crate::domain::view::{ReportId, StoredReport, ViewKinds, ViewReport, ViewReportEvent};
use crate::store::{StoreError, ViewStore};
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::MaybeUnset;
use scylla::{DeserializeRow, SerializeRow};
use uuid::Uuid;

/// Report rows written at once.
const ROWS_IN_FLIGHT: usize = 64;

const COLUMNS: &str = "timestamp, impression_id, report_id, received, client_net, client_agent, \
     kinds, in_view_ms, max_visible, valid, invalid";

pub(crate) struct ViewStatements {
    insert: PreparedStatement,
    select: PreparedStatement,
    select_between: PreparedStatement,
}

impl ViewStatements {
    pub(crate) async fn prepare(
        session: &Session,
        keyspace: &KeyspaceName,
    ) -> Result<Self, StoreError> {
        let [insert, select, select_between] = prepare_all(
            session,
            [
                format!(
                    "INSERT INTO {keyspace}.view_report (advertiser_id, campaign_id, day, bucket_id, {COLUMNS}) \
                     VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ?"
                ),
                format!("SELECT {COLUMNS} FROM {keyspace}.view_report WHERE {EVENT_PARTITION}"),
                format!(
                    "SELECT {COLUMNS} FROM {keyspace}.view_report WHERE {EVENT_PARTITION} \
                     AND timestamp >= ? AND timestamp < ?"
                ),
            ],
        )
        .await?;
        Ok(Self {
            insert,
            select,
            select_between,
        })
    }
}

/// The bound values of a report insert, in the statement's order.
#[derive(SerializeRow)]
#[scylla(flavor = "enforce_order", skip_name_checks)]
struct ReportValues {
    advertiser_id: Uuid,
    campaign_id: Uuid,
    day: NaiveDate,
    bucket_id: i16,
    timestamp: DateTime<Utc>,
    impression_id: Uuid,
    report_id: Uuid,
    received: DateTime<Utc>,
    #[scylla(flatten)]
    client: ClientCells,
    kinds: i8,
    in_view_ms: MaybeUnset<i32>,
    max_visible: MaybeUnset<i8>,
    #[scylla(flatten)]
    validity: Validity,
    ttl: i32,
}

impl ReportValues {
    fn new(key: PartitionValues, report: &ViewReportEvent, ttl: i32) -> Self {
        let (advertiser_id, campaign_id, day, bucket_id) = key;
        let body = &report.report;
        Self {
            advertiser_id,
            campaign_id,
            day,
            bucket_id,
            timestamp: report.impression_time.instant(),
            impression_id: report.impression_id.as_uuid(),
            report_id: report.id().as_uuid(),
            received: report.received,
            client: ClientCells::of(report.client),
            // The bits and the bounded numbers fit their columns: at most 600,000 and 100.
            kinds: body.kinds.bits() as i8,
            in_view_ms: set_or_unset(body.in_view_ms.map(|ms| ms as i32)),
            max_visible: set_or_unset(body.max_visible.map(|percent| percent as i8)),
            validity: Validity::of(report.invalid),
            ttl,
        }
    }
}

/// A row of `view_report`.
#[derive(DeserializeRow)]
struct ReportRow {
    timestamp: DateTime<Utc>,
    impression_id: Uuid,
    report_id: Uuid,
    received: DateTime<Utc>,
    client_net: Option<Vec<u8>>,
    client_agent: Option<i64>,
    kinds: Option<i8>,
    in_view_ms: Option<i32>,
    max_visible: Option<i8>,
    valid: Option<bool>,
    invalid: Option<String>,
}

impl ReportRow {
    fn into_report(self) -> StoredReport {
        StoredReport {
            impression_id: ImpressionId::new(self.impression_id),
            impression_time: EventTime::from_stored(self.timestamp),
            id: ReportId::from_stored(self.report_id),
            received: self.received,
            client: client_of(self.client_net.as_deref(), self.client_agent),
            report: ViewReport {
                kinds: ViewKinds::from_bits(self.kinds.unwrap_or_default() as u8),
                in_view_ms: self.in_view_ms.and_then(|ms| u32::try_from(ms).ok()),
                max_visible: self
                    .max_visible
                    .and_then(|percent| u8::try_from(percent).ok()),
            },
            invalid: validity(self.valid, self.invalid.as_deref()),
        }
    }
}

impl CassandraStore {
    async fn view_statements(&self) -> Result<&ViewStatements, StoreError> {
        Ok(&self.prepared().await?.views)
    }
}

#[async_trait]
impl ViewStore for CassandraStore {
    async fn write_view_reports(
        &self,
        partition: &EventPartition,
        reports: &[ViewReportEvent],
    ) -> Result<(), StoreError> {
        let statement = &self.view_statements().await?.insert;
        let key = partition_values(partition);
        // Reports expire with their impression's day, as the impression itself does.
        let ttl = self.raw_ttl(partition.day);
        execute_each(
            &self.session,
            statement,
            reports,
            ROWS_IN_FLIGHT,
            |report| ReportValues::new(key, report, ttl),
            "writing view reports",
        )
        .await
    }

    async fn read_view_reports(
        &self,
        partition: &EventPartition,
        span: Option<Span>,
    ) -> Result<Vec<StoredReport>, StoreError> {
        const CONTEXT: &str = "reading view reports";
        let statements = self.view_statements().await?;
        let (a, c, d, b) = partition_values(partition);
        let rows: Vec<ReportRow> = match span {
            None => read_all(&self.session, &statements.select, (a, c, d, b), CONTEXT).await?,
            Some(span) => {
                read_all(
                    &self.session,
                    &statements.select_between,
                    (a, c, d, b, span.from, span.to),
                    CONTEXT,
                )
                .await?
            }
        };
        Ok(rows.into_iter().map(ReportRow::into_report).collect())
    }
}
