//! Subject access (docs/API.md, "Privacy"): every stored record of one user, found through the
//! index ([`SubjectFinder`]) and read by its keys, an impression at a time, so the answer
//! streams and its cost follows the subject's events.

use super::finder::{FoundImpression, SubjectFinder};
use crate::domain::event::Impression;
use crate::domain::ids::{AdvertiserId, CampaignKey, UserId};
use crate::domain::view::StoredReport;
use crate::store::{ClickRow, Store, StoreError};
use std::collections::VecDeque;
use std::sync::Arc;

/// One stored record of the subject.
#[derive(Debug, Clone)]
pub(crate) enum SubjectRecord {
    Impression(Impression),
    Click {
        campaign: CampaignKey,
        click: ClickRow,
    },
    ViewReport {
        campaign: CampaignKey,
        report: StoredReport,
    },
}

pub(crate) struct SubjectAccess {
    store: Arc<dyn Store>,
    finder: SubjectFinder,
}

impl SubjectAccess {
    pub(crate) fn new(store: Arc<dyn Store>, finder: SubjectFinder) -> Self {
        Self { store, finder }
    }

    /// The user's records (of one advertiser, or of all), to be read a page at a time. The
    /// index is read before this returns, so a store outage is an error, not a cut answer.
    pub(crate) async fn records(
        &self,
        user: UserId,
        scope: Option<AdvertiserId>,
    ) -> Result<SubjectRecords, StoreError> {
        let found = self.finder.find(user, scope, None).await?;
        Ok(SubjectRecords {
            store: Arc::clone(&self.store),
            finder: self.finder.clone(),
            left: found.impressions.into(),
        })
    }
}

/// The records of a subject access not yet read.
pub(crate) struct SubjectRecords {
    store: Arc<dyn Store>,
    finder: SubjectFinder,
    left: VecDeque<FoundImpression>,
}

impl SubjectRecords {
    /// The records of the next impression (its stored copies, clicks and view reports), or
    /// `None` at the end.
    pub(crate) async fn next_page(&mut self) -> Result<Option<Vec<SubjectRecord>>, StoreError> {
        let Some(impression) = self.left.pop_front() else {
            return Ok(None);
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
        page.extend(
            impression
                .clicks
                .into_iter()
                .map(|(_, click)| SubjectRecord::Click { campaign, click }),
        );
        Ok(Some(page))
    }
}
