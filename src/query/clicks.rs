//! Which impressions of a campaign were clicked, read into memory by fan-out over click
//! partitions (clicks are well under 1 % of impressions), for joining to impressions that
//! are streamed.

use crate::domain::ids::{CampaignKey, ImpressionId};
use crate::domain::partition::EventPartition;
use crate::domain::time::Day;
use crate::query::FanOut;
use crate::store::{ClickRow, EventStore, StoreError};
use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use std::collections::{HashMap, HashSet};

/// Impressions with at least one click stored in `partitions`, each with the UTC day of its
/// earliest click there.
pub(crate) async fn first_click_days_in(
    store: &dyn EventStore,
    partitions: Vec<EventPartition>,
    fan_out: FanOut,
) -> Result<HashMap<ImpressionId, Day>, StoreError> {
    let mut reads = stream::iter(partitions)
        .map(|partition| async move { store.read_clicks(&partition).await })
        .buffer_unordered(fan_out.concurrency.max(1));
    let mut clicked: HashMap<ImpressionId, Day> = HashMap::new();
    while let Some(rows) = reads.next().await {
        for row in rows? {
            let day = Day::new(row.timestamp.instant().date_naive());
            clicked
                .entry(row.impression_id)
                .and_modify(|first| *first = (*first).min(day))
                .or_insert(day);
        }
    }
    Ok(clicked)
}

/// The first click ever of each impression clicked in `partitions` (among the clicks there
/// that `candidate` keeps): a stored click may be a repeat, and the impression's first click
/// may lie in another day. One lookup per candidate impression, `concurrency` at a time.
pub(crate) async fn first_clicks(
    store: &dyn EventStore,
    campaign: CampaignKey,
    partitions: Vec<EventPartition>,
    concurrency: usize,
    candidate: impl Fn(&ClickRow) -> bool,
) -> Result<Vec<ClickRow>, StoreError> {
    let concurrency = concurrency.max(1);
    let mut reads = stream::iter(partitions)
        .map(|partition| async move { store.read_clicks(&partition).await })
        .buffer_unordered(concurrency);
    let mut clicked = HashSet::new();
    while let Some(rows) = reads.next().await {
        clicked.extend(
            rows?
                .into_iter()
                .filter(|row| candidate(row))
                .map(|row| row.impression_id),
        );
    }
    stream::iter(clicked)
        .map(|impression_id| store.first_click(campaign, impression_id))
        .buffer_unordered(concurrency)
        .try_filter_map(|first| async move { Ok(first) })
        .try_collect()
        .await
}

/// Valid impressions' clicks whose first click ever falls in `[start, end)` and is valid (any
/// copy), as the summary counts clicks:
/// the clicks stored in `partitions` (the range's days) narrow it down, and each candidate's
/// first click is looked up, since an earlier click may lie before the range.
pub(crate) async fn first_clicked_between(
    store: &dyn EventStore,
    campaign: CampaignKey,
    partitions: Vec<EventPartition>,
    (start, end): (DateTime<Utc>, DateTime<Utc>),
    fan_out: FanOut,
) -> Result<HashSet<ImpressionId>, StoreError> {
    let in_range = |row: &ClickRow| (start..end).contains(&row.timestamp.instant());
    Ok(
        first_clicks(store, campaign, partitions, fan_out.concurrency, in_range)
            .await?
            .into_iter()
            .filter(|click| in_range(click) && click.invalid.is_none())
            .map(|click| click.impression_id)
            .collect(),
    )
}
