//! View reports in the embedded store: each under its impression's event key, then its id and
//! arrival, so a partition's reports are one key range read beside its impressions, and a
//! report sent twice is two rows the join reads as one at its first arrival.

use super::engine::{Table, corrupt};
use super::{EmbeddedStore, keys, rows};
use crate::domain::partition::EventPartition;
use crate::domain::slices::Span;
use crate::domain::time::EventTime;
use crate::domain::traffic::InvalidReason;
use crate::domain::view::{ReportId, StoredReport, ViewKinds, ViewReport, ViewReportEvent};
use crate::store::{StoreError, ViewStore};
use async_trait::async_trait;
use chrono::DateTime;
use uuid::Uuid;

/// A report's key: its impression's event key, its id (16 bytes), its arrival (8).
fn report_key(partition: &EventPartition, report: &ViewReportEvent) -> Vec<u8> {
    let mut key = keys::event_key(
        partition,
        report.impression_time.instant(),
        report.impression_id,
    );
    key.extend_from_slice(report.id().as_uuid().as_bytes());
    key.extend_from_slice(&keys::ordered_i64(report.received.timestamp_millis()));
    key
}

/// Absent numbers are stored as the values no report can carry.
const NO_IN_VIEW: u32 = u32::MAX;
const NO_VISIBLE: u8 = u8::MAX;

/// A report's value: kinds (1), in-view ms (4), visible percent (1), reason code (1), then its
/// client as a thin row keeps one ([`rows::client_part`], no pixel).
fn report_value(report: &ViewReportEvent) -> Vec<u8> {
    let body = &report.report;
    let mut value = Vec::with_capacity(24);
    value.push(body.kinds.bits());
    value.extend(body.in_view_ms.unwrap_or(NO_IN_VIEW).to_be_bytes());
    value.push(body.max_visible.unwrap_or(NO_VISIBLE));
    value.push(report.invalid.map_or(0, InvalidReason::code));
    value.extend(rows::client_part(&report.client, None));
    value
}

fn decode_report(key: &[u8], value: &[u8]) -> Option<StoredReport> {
    let (at, impression_id) = keys::decode_event_key(key)?;
    let id = Uuid::from_slice(key.get(keys::EVENT_KEY_LEN..keys::EVENT_KEY_LEN + 16)?).ok()?;
    let received = keys::decode_ordered_i64(key.get(keys::EVENT_KEY_LEN + 16..)?)?;
    let in_view = u32::from_be_bytes(value.get(1..5)?.try_into().ok()?);
    let visible = *value.get(5)?;
    let invalid = InvalidReason::from_code(*value.get(6)?).ok()?;
    let (client, _) = rows::decode_client_part(value.get(7..)?)?;
    Some(StoredReport {
        impression_id,
        impression_time: EventTime::from_stored(at),
        id: ReportId::from_stored(id),
        received: DateTime::from_timestamp_millis(received)?,
        client,
        report: ViewReport {
            kinds: ViewKinds::from_bits(*value.first()?),
            in_view_ms: (in_view != NO_IN_VIEW).then_some(in_view),
            max_visible: (visible != NO_VISIBLE).then_some(visible),
        },
        invalid,
    })
}

#[async_trait]
impl ViewStore for EmbeddedStore {
    async fn write_view_reports(
        &self,
        partition: &EventPartition,
        reports: &[ViewReportEvent],
    ) -> Result<(), StoreError> {
        let rows = reports
            .iter()
            .map(|report| {
                (
                    Table::ViewReport,
                    report_key(partition, report),
                    report_value(report),
                )
            })
            .collect();
        self.committer.commit("writing view reports", rows).await?;
        self.changed(
            reports
                .iter()
                .map(|report| (partition.campaign, report.impression_time.instant())),
        );
        Ok(())
    }

    async fn read_view_reports(
        &self,
        partition: &EventPartition,
        span: Option<Span>,
    ) -> Result<Vec<StoredReport>, StoreError> {
        const CONTEXT: &str = "reading view reports";
        let rows = match span {
            None => {
                self.scan(
                    Table::ViewReport,
                    keys::partition_prefix(partition),
                    None,
                    CONTEXT,
                )
                .await?
            }
            Some(span) => {
                self.scan_span(Table::ViewReport, partition, span, CONTEXT)
                    .await?
            }
        };
        rows.iter()
            .map(|(key, value)| decode_report(key, value).ok_or_else(|| corrupt(CONTEXT)))
            .collect()
    }
}
