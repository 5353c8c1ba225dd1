//! Subject access (docs/API.md, "Privacy"): every stored record of one user or visitor, found
//! through the index ([`SubjectFinder`]) and read by its keys, an impression (a visit
//! partition) at a time, so the answer streams and its cost follows the subject's events.

use super::finder::{FoundImpression, SubjectFinder};
use crate::domain::beacon::{SiteId, VisitPartition};
use crate::domain::conversion::{Attribution, ReceivedConversion};
use crate::domain::event::Impression;
use crate::domain::ids::{AdvertiserId, CampaignKey};
use crate::domain::privacy::Subject;
use crate::domain::traffic::UserAgent;
use crate::domain::view::StoredReport;
use crate::event_index::EventIndexer;
use crate::store::{ClickRow, ConversionRecord, Store, StoreError, VisitRow};
use chrono::Utc;
use futures::{StreamExt, TryStreamExt, stream};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// Clicks of one impression whose user agents are read at once.
const CLICKS_IN_FLIGHT: usize = 16;

/// One stored record of the subject.
#[derive(Debug, Clone)]
pub(crate) enum SubjectRecord {
    Impression(Impression),
    Click {
        campaign: CampaignKey,
        click: ClickRow,
        /// The user agent stored with the click.
        user_agent: Option<UserAgent>,
    },
    ViewReport {
        campaign: CampaignKey,
        report: StoredReport,
    },
    /// A conversion carrying the user: its first copy (the conversion), and how it was
    /// attributed once decided.
    Conversion {
        conversion: ReceivedConversion,
        decided: bool,
        attribution: Option<Attribution>,
    },
    /// A visitor's beacon.
    Visit {
        site: SiteId,
        visit: VisitRow,
    },
}

/// How long an access waits for this process's index to take in what it stored before the
/// request (a flush, 200 ms, when all is well); past it, the request is a 503 to retry.
const INDEX_PATIENCE: Duration = Duration::from_secs(5);

pub(crate) struct SubjectAccess {
    store: Arc<dyn Store>,
    finder: SubjectFinder,
    indexer: Arc<EventIndexer>,
}

impl SubjectAccess {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        finder: SubjectFinder,
        indexer: Arc<EventIndexer>,
    ) -> Self {
        Self {
            store,
            finder,
            indexer,
        }
    }

    /// The subject's records (a user's of one advertiser, or of all; a visitor's), to be read
    /// a page at a time. The index is read before this returns, so a store outage is an
    /// error, not a cut answer.
    pub(crate) async fn records(
        &self,
        subject: &Subject,
        scope: Option<AdvertiserId>,
    ) -> Result<SubjectRecords, StoreError> {
        let (left, conversions, visits): (VecDeque<FoundImpression>, _, VisitPages) = match subject
        {
            Subject::User(user) => {
                // A user's events are found through the index, written beside ingestion: an
                // event acknowledged just before the request must be in it first.
                let asked_at = Utc::now();
                if !self
                    .indexer
                    .wait_indexed_through(asked_at, INDEX_PATIENCE)
                    .await
                {
                    return Err(StoreError::unavailable_message(
                        "the index of users' events is behind what this process stored",
                    ));
                }
                let mut found = self.finder.find(*user, scope, None).await?;
                // A copy re-sent with another user is that user's, not this one's.
                for record in &mut found.conversions {
                    record
                        .copies
                        .retain(|copy| copy.conversion.user_id == Some(*user));
                }
                (found.impressions.into(), found.conversions, VecDeque::new())
            }
            // A visitor's beacons are few and read with the index: a partition's at a time.
            Subject::Visitor { site, guid } => {
                let found = self.finder.find_visitor(site, guid).await?;
                (VecDeque::new(), Vec::new(), found.visits.into())
            }
        };
        Ok(SubjectRecords {
            store: Arc::clone(&self.store),
            finder: self.finder.clone(),
            left,
            conversions,
            visits,
        })
    }
}

/// The records of a subject access not yet read.
pub(crate) struct SubjectRecords {
    store: Arc<dyn Store>,
    finder: SubjectFinder,
    left: VecDeque<FoundImpression>,
    /// Read with the index (a user's conversions are few), answered after the impressions.
    conversions: Vec<ConversionRecord>,
    visits: VisitPages,
}

/// A visitor's stored beacons, a partition at a time.
type VisitPages = VecDeque<(VisitPartition, Vec<VisitRow>)>;

impl SubjectRecords {
    /// The records of the next impression (its stored copies, clicks and view reports), or
    /// `None` at the end.
    pub(crate) async fn next_page(&mut self) -> Result<Option<Vec<SubjectRecord>>, StoreError> {
        let Some(impression) = self.left.pop_front() else {
            if !self.conversions.is_empty() {
                let page = std::mem::take(&mut self.conversions)
                    .into_iter()
                    .filter_map(conversion_record)
                    .collect();
                return Ok(Some(page));
            }
            return Ok(self.visits.pop_front().map(|(partition, rows)| {
                rows.into_iter()
                    .map(|visit| SubjectRecord::Visit {
                        site: partition.site.clone(),
                        visit,
                    })
                    .collect()
            }));
        };
        let campaign = impression.campaign;
        let mut page = Vec::new();
        for copy in &impression.copies {
            if let Some(stored) = self.store.read_impression_at(copy).await? {
                page.push(SubjectRecord::Impression(stored));
            }
            page.extend(
                self.finder
                    .reports_of(copy)
                    .await?
                    .into_iter()
                    .map(|report| SubjectRecord::ViewReport { campaign, report }),
            );
        }
        let store = &self.store;
        let clicks: Vec<SubjectRecord> = stream::iter(impression.clicks)
            .map(|(at, click)| async move {
                let user_agent = store.read_click_agent(&at).await?;
                Ok::<_, StoreError>(SubjectRecord::Click {
                    campaign,
                    click,
                    user_agent,
                })
            })
            .buffered(CLICKS_IN_FLIGHT)
            .try_collect()
            .await?;
        page.extend(clicks);
        Ok(Some(page))
    }
}

/// A conversion as its first copy says (the copy that is the conversion), with its decision.
fn conversion_record(record: ConversionRecord) -> Option<SubjectRecord> {
    let first = record
        .copies
        .into_iter()
        .min_by_key(ReceivedConversion::order_key)?;
    Some(SubjectRecord::Conversion {
        conversion: first,
        decided: record.decision.is_some(),
        attribution: record.decision.and_then(|decided| decided.attribution),
    })
}
