//! The view join of a read (docs/DESIGN.md, "Viewability"): the reports stored in the
//! partitions a read covers, the clients the impressions read there were rendered for, and
//! each impression's measures from the two. Every aggregation of impressions (a seal, a slice
//! aggregate, a raw read) joins the same way, so all answer alike.

use crate::domain::ids::ImpressionId;
use crate::domain::partition::EventPartition;
use crate::domain::slices::Span;
use crate::domain::view::{ImpressionViews, ServedTo, StoredReport, ViewWindow, join};
use crate::store::{ImpressionSummaryRow, StoreError, ViewStore};
use futures::{StreamExt, stream};
use std::collections::HashMap;

/// The reports of a read and the copies of the impressions they report on.
#[derive(Debug, Default)]
pub(crate) struct ViewJoin {
    reports: HashMap<ImpressionId, Vec<StoredReport>>,
    served: HashMap<ImpressionId, ServedTo>,
    window: ViewWindow,
}

impl ViewJoin {
    /// Reads the reports of `partitions` (of the impressions in `spans`, or all of them).
    pub(crate) async fn read(
        store: &dyn ViewStore,
        partitions: &[EventPartition],
        spans: Option<&[Span]>,
        window: ViewWindow,
        concurrency: usize,
    ) -> Result<Self, StoreError> {
        let reads: Vec<(EventPartition, Option<Span>)> = match spans {
            None => partitions
                .iter()
                .map(|partition| (*partition, None))
                .collect(),
            Some(spans) => spans
                .iter()
                .flat_map(|span| partitions.iter().map(|partition| (*partition, Some(*span))))
                .collect(),
        };
        let mut join = Self {
            window,
            ..Self::default()
        };
        let mut reads = stream::iter(reads)
            .map(|(partition, span)| async move { store.read_view_reports(&partition, span).await })
            .buffer_unordered(concurrency.max(1));
        while let Some(rows) = reads.next().await {
            for report in rows? {
                join.reports
                    .entry(report.impression_id)
                    .or_default()
                    .push(report);
            }
        }
        Ok(join)
    }

    /// Whether no report was read.
    pub(crate) fn is_empty(&self) -> bool {
        self.reports.is_empty()
    }

    /// Notes one stored copy of an impression (any copy: each may carry its client).
    pub(crate) fn see(&mut self, row: &ImpressionSummaryRow) {
        if self.reports.contains_key(&row.impression_id) {
            self.served.entry(row.impression_id).or_default().add_copy(
                row.timestamp.instant(),
                row.client,
                row.pixel_arrival,
            );
        }
    }

    /// The measures of impression `id`: nothing when no report names it.
    pub(crate) fn views_of(&self, id: ImpressionId) -> ImpressionViews {
        match (self.reports.get(&id), self.served.get(&id)) {
            (Some(reports), Some(served)) => join(served, reports, self.window),
            // A report whose impression was not read counts nowhere.
            _ => ImpressionViews::default(),
        }
    }
}
