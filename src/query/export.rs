//! Bulk export: every impression of a range, each id once per UTC day, with whether it was
//! clicked at any time up to the export. The clicked ids (clicks are well under 1 % of
//! impressions) are read first, by fan-out over the click partitions from the range's first
//! day to today; the impressions then come a page at a time, for the caller to stream.

use super::Reader;
use super::clicks::clicked_in;
use super::impressions::ImpressionScan;
use super::plan::campaign_partitions;
use super::range::QueryRange;
use crate::domain::event::Impression;
use crate::domain::ids::{CampaignKey, ImpressionId};
use crate::domain::owner::Owner;
use crate::domain::time::Day;
use crate::store::StoreError;
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use std::sync::Arc;

/// An export in progress.
pub struct Export {
    scan: ImpressionScan,
    clicked: HashSet<ImpressionId>,
}

impl Export {
    /// Reads the clicked ids (errors here come before any byte of the answer).
    pub async fn open(
        reader: &Reader,
        campaign: CampaignKey,
        range: &QueryRange,
        now: DateTime<Utc>,
    ) -> Result<Self, StoreError> {
        let settings = &reader.settings;
        let history = settings.history(&Owner::Campaign(campaign)).await?;
        let plan = |days: Vec<Day>| {
            campaign_partitions(
                campaign,
                days.into_iter(),
                &history,
                settings.read_staleness(),
            )
            .into_iter()
            .flat_map(|(_, partitions)| partitions)
            .collect::<Vec<_>>()
        };
        let impressions = plan(range.utc_days().collect());
        // Clicks up to now, whenever the range ends (a click can come days after its
        // impression), and tomorrow's for clocks a little ahead.
        let first = range
            .utc_days()
            .next()
            .unwrap_or_else(|| Day::new(now.date_naive()));
        let last = Day::new(now.date_naive()).next();
        let click_days: Vec<Day> = first.through(last).collect();
        let clicked = clicked_in(reader.store.as_ref(), plan(click_days), reader.fan_out).await?;
        Ok(Self {
            scan: ImpressionScan::new(Arc::clone(&reader.store), range, impressions),
            clicked,
        })
    }

    /// The next page of (impression, clicked); `None` at the end. A page may be empty.
    pub async fn next_page(&mut self) -> Result<Option<Vec<(Impression, bool)>>, StoreError> {
        Ok(self.scan.next_page().await?.map(|page| {
            page.into_iter()
                .map(|impression| {
                    let clicked = self.clicked.contains(&impression.impression_id);
                    (impression, clicked)
                })
                .collect()
        }))
    }
}
