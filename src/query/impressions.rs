//! Walking every impression of a range, page by page, for reports and exports: a few
//! partitions at a time, each read oldest first, so the first row of an id within its partition is the
//! one the counting rules keep (an impression counts once per UTC day, at its earliest
//! timestamp; its id always hashes to the same bucket). Only a few pages and the ids of the
//! partitions being read are held, whatever the length of the range. An impression is valid
//! if any copy is: an invalid first copy is held back until its partition is read through (a
//! later valid copy makes it valid), which costs memory only for invalid traffic.

use crate::domain::event::Impression;
use crate::domain::ids::ImpressionId;
use crate::domain::partition::EventPartition;
use crate::domain::view::{ImpressionViews, ViewWindow};
use crate::query::range::QueryRange;
use crate::query::views::ViewJoin;
use crate::store::{ImpressionPage, PageCursor, Store, StoreError};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

/// Partitions read at once. Each holds at most one page in flight, so memory stays a few
/// pages and a few partitions' ids, while round trips overlap.
const PARTITIONS_IN_FLIGHT: usize = 4;

type PageRead = BoxFuture<'static, (PartitionScan, Result<ImpressionPage, StoreError>)>;

/// The impressions of a range, a page at a time, in no particular order.
pub(crate) struct ImpressionScan {
    store: Arc<dyn Store>,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    pending: VecDeque<EventPartition>,
    reads: FuturesUnordered<PageRead>,
    /// Whether each partition's view reports are joined to its impressions, with this window.
    views: Option<ViewWindow>,
}

struct PartitionScan {
    partition: EventPartition,
    cursor: Option<PageCursor>,
    seen: HashSet<ImpressionId>,
    /// First copies that are invalid traffic, until the partition is read through.
    held: HashMap<ImpressionId, Impression>,
    /// The partition's view reports and their impressions' clients, read with its first page.
    views: Option<Arc<ViewJoin>>,
}

impl ImpressionScan {
    /// `partitions`: every partition of every UTC day the range touches.
    pub(crate) fn new(
        store: Arc<dyn Store>,
        range: &QueryRange,
        partitions: impl IntoIterator<Item = EventPartition>,
    ) -> Self {
        Self {
            store,
            start: range.start(),
            end: range.end(),
            pending: partitions.into_iter().collect(),
            reads: FuturesUnordered::new(),
            views: None,
        }
    }

    /// Joins each impression to its view reports (exports): a partition's reports are read
    /// with its first page, and, when there are any, its thin rows for the clients they
    /// are checked against.
    pub(crate) fn with_views(mut self, window: ViewWindow) -> Self {
        self.views = Some(window);
        self
    }

    fn read(&self, mut scan: PartitionScan) -> PageRead {
        let store = Arc::clone(&self.store);
        let views = self.views;
        Box::pin(async move {
            if let Some(window) = views.filter(|_| scan.views.is_none()) {
                match partition_views(store.as_ref(), &scan.partition, window).await {
                    Ok(join) => scan.views = Some(Arc::new(join)),
                    Err(error) => return (scan, Err(error)),
                }
            }
            let cursor = scan.cursor.take();
            let page = store.read_impression_page(&scan.partition, cursor).await;
            (scan, page)
        })
    }

    /// The next page's impressions inside the range, each id once per UTC day; `None` once
    /// every partition is read. A page may be empty.
    pub(crate) async fn next_page(&mut self) -> Result<Option<Vec<Impression>>, StoreError> {
        Ok(self
            .next_page_with_views()
            .await?
            .map(|page| page.into_iter().map(|(impression, _)| impression).collect()))
    }

    /// [`next_page`](Self::next_page) with each impression's view measures (none unless the
    /// scan was made [`with_views`](Self::with_views)).
    pub(crate) async fn next_page_with_views(
        &mut self,
    ) -> Result<Option<Vec<(Impression, ImpressionViews)>>, StoreError> {
        while self.reads.len() < PARTITIONS_IN_FLIGHT
            && let Some(partition) = self.pending.pop_front()
        {
            let read = self.read(PartitionScan {
                partition,
                cursor: None,
                seen: HashSet::new(),
                held: HashMap::new(),
                views: None,
            });
            self.reads.push(read);
        }
        let Some((mut scan, page)) = self.reads.next().await else {
            return Ok(None);
        };
        let page = page?;
        let mut impressions = Vec::with_capacity(page.impressions.len());
        for impression in page.impressions {
            let id = impression.impression_id;
            // Out-of-range rows still claim their id: a later copy is not the earliest.
            if !scan.seen.insert(id) {
                if impression.invalid.is_none()
                    && let Some(held) = scan.held.get_mut(&id)
                {
                    held.invalid = None;
                }
                continue;
            }
            let at = impression.timestamp.instant();
            if at < self.start || at >= self.end {
                continue;
            }
            if impression.invalid.is_some() {
                scan.held.insert(id, impression);
            } else {
                impressions.push(impression);
            }
        }
        let views = scan.views.clone();
        // The partition's next page is read while the caller handles this one.
        if page.next.is_some() {
            scan.cursor = page.next;
            let read = self.read(scan);
            self.reads.push(read);
        } else {
            impressions.extend(scan.held.into_values());
        }
        Ok(Some(
            impressions
                .into_iter()
                .map(|impression| {
                    let measures = views
                        .as_ref()
                        .map(|join| join.views_of(impression.impression_id))
                        .unwrap_or_default();
                    (impression, measures)
                })
                .collect(),
        ))
    }
}

/// One partition's view reports, and the clients of its impressions they name.
async fn partition_views(
    store: &dyn Store,
    partition: &EventPartition,
    window: ViewWindow,
) -> Result<ViewJoin, StoreError> {
    let mut join = ViewJoin::read(store, std::slice::from_ref(partition), None, window, 1).await?;
    if !join.is_empty() {
        for row in store.read_impression_summaries(partition).await? {
            join.see(&row);
        }
    }
    Ok(join)
}
