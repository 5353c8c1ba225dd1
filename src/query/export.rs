//! Bulk export: every impression of a range, each id once per UTC day, with whether it was
//! clicked within the click look-back after its UTC day (`--click-lookback`). The clicked ids
//! (clicks are well under 1 % of impressions) are read first, by fan-out over the click
//! partitions from the range's first day to its last plus the look-back (never past
//! tomorrow), each with the UTC day of its earliest click there; the impressions then come a
//! page at a time, for the caller to stream.

use super::Reader;
use super::budget::{PartitionBudget, QueryError};
use super::clicks::first_click_days_in;
use super::impressions::ImpressionScan;
use super::plan::campaign_partitions;
use super::range::QueryRange;
use crate::domain::event::Impression;
use crate::domain::ids::{CampaignKey, ImpressionId};
use crate::domain::owner::Owner;
use crate::domain::time::Day;
use crate::domain::view::ImpressionViews;
use crate::store::StoreError;
use chrono::TimeDelta;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::Arc;

/// An export in progress.
pub(crate) struct Export {
    scan: ImpressionScan,
    /// The UTC day of each impression's earliest click in the days read.
    clicked: HashMap<ImpressionId, Day>,
    lookback: TimeDelta,
}

impl Export {
    /// Reads the clicked ids (errors here come before any byte of the answer).
    pub(crate) async fn open(
        reader: &Reader,
        campaign: CampaignKey,
        range: &QueryRange,
        now: DateTime<Utc>,
        lookback_days: u32,
    ) -> Result<Self, QueryError> {
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
        // Clicks of the range's days and of the look-back after its last (a click can come
        // days after its impression), judged as asked; tomorrow's at most, for clocks a little
        // ahead.
        let lookback = TimeDelta::days(i64::from(lookback_days));
        let days: Vec<Day> = range.utc_days().collect();
        // A range has at least one day; today stands in for none.
        let today = Day::new(now.date_naive());
        let first = days.first().copied().unwrap_or(today);
        let last = days.last().copied().unwrap_or(today);
        let lookback_end = Day::new(last.date() + lookback);
        let click_days: Vec<Day> = first.through(lookback_end).collect();
        let click_partitions = plan(click_days.clone());
        reader.budget.check(
            PartitionBudget::cost(std::iter::once((false, impressions.len())))
                + PartitionBudget::cost(std::iter::once((false, click_partitions.len()))),
        )?;
        let tomorrow = today.next();
        let readable: Vec<Day> = click_days
            .into_iter()
            .filter(|day| *day <= tomorrow)
            .collect();
        let clicked =
            first_click_days_in(reader.store.as_ref(), plan(readable), reader.fan_out).await?;
        Ok(Self {
            scan: ImpressionScan::new(Arc::clone(&reader.store), range, impressions)
                .with_views(reader.view_window),
            clicked,
            lookback,
        })
    }

    /// The next page; `None` at the end. A page may be empty.
    pub(crate) async fn next_page(&mut self) -> Result<Option<Vec<Exported>>, StoreError> {
        Ok(self.scan.next_page_with_views().await?.map(|page| {
            page.into_iter()
                .map(|(impression, views)| {
                    let day = impression.timestamp.instant().date_naive();
                    let clicked = self
                        .clicked
                        .get(&impression.impression_id)
                        .is_some_and(|first| first.date() <= day + self.lookback);
                    Exported {
                        impression,
                        clicked,
                        views,
                    }
                })
                .collect()
        }))
    }
}

/// One exported impression: what is stored of it, whether it was clicked, what its view
/// reports say.
pub(crate) struct Exported {
    pub(crate) impression: Impression,
    pub(crate) clicked: bool,
    pub(crate) views: ImpressionViews,
}
