//! Walking every impression of a range, page by page, for reports and exports: partitions in
//! day order, each read oldest first, so the first row of an id within its partition is the
//! one the counting rules keep (an impression counts once per UTC day, at its earliest
//! timestamp; its id always hashes to the same bucket). Only the current page and the ids
//! of the current partition are held, whatever the length of the range.

use crate::domain::event::Impression;
use crate::domain::ids::ImpressionId;
use crate::domain::partition::EventPartition;
use crate::query::range::QueryRange;
use crate::store::{PageCursor, Store, StoreError};
use chrono::{DateTime, Utc};
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

/// The impressions of a range, a page at a time.
pub struct ImpressionScan {
    store: Arc<dyn Store>,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    pending: VecDeque<EventPartition>,
    current: Option<PartitionScan>,
}

struct PartitionScan {
    partition: EventPartition,
    cursor: Option<PageCursor>,
    seen: HashSet<ImpressionId>,
}

impl ImpressionScan {
    /// `partitions`: every partition of every UTC day the range touches.
    pub fn new(
        store: Arc<dyn Store>,
        range: &QueryRange,
        partitions: impl IntoIterator<Item = EventPartition>,
    ) -> Self {
        Self {
            store,
            start: range.start(),
            end: range.end(),
            pending: partitions.into_iter().collect(),
            current: None,
        }
    }

    /// The next page's impressions inside the range, each id once per UTC day; `None` once
    /// every partition is read. A page may be empty.
    pub async fn next_page(&mut self) -> Result<Option<Vec<Impression>>, StoreError> {
        let mut scan = match self.current.take() {
            Some(scan) => scan,
            None => match self.pending.pop_front() {
                Some(partition) => PartitionScan {
                    partition,
                    cursor: None,
                    seen: HashSet::new(),
                },
                None => return Ok(None),
            },
        };
        let page = self
            .store
            .read_impression_page(scan.partition, scan.cursor.take())
            .await?;
        let impressions = page
            .impressions
            .into_iter()
            // Out-of-range rows still claim their id: a later copy is not the earliest.
            .filter(|impression| scan.seen.insert(impression.impression_id))
            .filter(|impression| {
                let at = impression.timestamp.instant();
                at >= self.start && at < self.end
            })
            .collect();
        if page.next.is_some() {
            scan.cursor = page.next;
            self.current = Some(scan);
        }
        Ok(Some(impressions))
    }
}
