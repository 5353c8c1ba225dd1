//! An advertiser's conversions over a range, attributed or not (`GET
//! /v1/advertisers/{a}/conversions`): every bucket of every UTC day the range touches is read
//! whole (conversions are few beside impressions), and each conversion counts at its own time
//! in the range's zone.

use super::Reader;
use super::budget::{PartitionBudget, QueryError};
use super::range::QueryRange;
use crate::domain::conversion::counts::ConversionCounts;
use crate::domain::conversion::{CONVERSION_BUCKETS, DecidedConversion};
use crate::domain::ids::{AdvertiserId, CampaignId};
use chrono::NaiveDate;
use futures::{StreamExt, TryStreamExt, stream};
use std::collections::{BTreeMap, HashMap};

/// How the rows are grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConversionGrouping {
    Day,
    Action,
    Campaign,
    None,
}

/// What a row is for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum RowKey {
    Day(NaiveDate),
    Action(String),
    /// `None`: the unattributed conversions.
    Campaign(Option<CampaignId>),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AdvertiserConversions {
    /// Every conversion in the range; `post_click + post_view` of them are attributed.
    pub(crate) totals: ConversionCounts,
    pub(crate) rows: Vec<(RowKey, ConversionCounts)>,
}

pub(crate) async fn advertiser_conversions(
    reader: &Reader,
    advertiser: AdvertiserId,
    range: &QueryRange,
    grouping: ConversionGrouping,
) -> Result<AdvertiserConversions, QueryError> {
    let partitions: Vec<_> = range
        .utc_days()
        .flat_map(|day| (0..CONVERSION_BUCKETS).map(move |bucket| (day, bucket)))
        .collect();
    reader.budget.check(PartitionBudget::cost(std::iter::once((
        false,
        partitions.len(),
    ))))?;
    let store = reader.store.as_ref();
    let tally = Tally {
        totals: ConversionCounts::default(),
        days: range
            .local_days()
            .map(|day| (day, ConversionCounts::default()))
            .collect(),
        keyed: HashMap::new(),
    };
    // Each partition is counted as it arrives and let go: a month of a busy advertiser holds
    // the partitions in flight, not the month's conversions.
    let tally = stream::iter(partitions)
        .map(|(day, bucket)| async move {
            store
                .read_advertiser_conversions(advertiser, day, bucket)
                .await
        })
        .buffer_unordered(reader.fan_out.concurrency.max(1))
        .try_fold(tally, |mut tally, read| {
            for decided in &read {
                tally.count(decided, range, grouping);
            }
            futures::future::ready(Ok(tally))
        })
        .await?;
    let rows = match grouping {
        ConversionGrouping::Day => tally
            .days
            .into_iter()
            .map(|(day, counts)| (RowKey::Day(day), counts))
            .collect(),
        ConversionGrouping::None => Vec::new(),
        ConversionGrouping::Action | ConversionGrouping::Campaign => ranked(tally.keyed),
    };
    Ok(AdvertiserConversions {
        totals: tally.totals,
        rows,
    })
}

/// The counts so far: of the range, of each local day, of each action or campaign.
struct Tally {
    totals: ConversionCounts,
    days: BTreeMap<NaiveDate, ConversionCounts>,
    keyed: HashMap<RowKey, ConversionCounts>,
}

impl Tally {
    fn count(
        &mut self,
        decided: &DecidedConversion,
        range: &QueryRange,
        grouping: ConversionGrouping,
    ) {
        let at = decided.conversion.timestamp.instant();
        if !range.contains(at) {
            return;
        }
        self.totals.count(decided);
        let key = match grouping {
            ConversionGrouping::Day => {
                self.days
                    .entry(range.local_day(at))
                    .or_default()
                    .count(decided);
                return;
            }
            ConversionGrouping::None => return,
            ConversionGrouping::Action => {
                RowKey::Action(decided.conversion.action.as_str().to_owned())
            }
            ConversionGrouping::Campaign => RowKey::Campaign(decided.campaign_id()),
        };
        self.keyed.entry(key).or_default().count(decided);
    }
}

/// Most conversions first, then the largest values, then by key; the unattributed row last.
fn ranked(rows: HashMap<RowKey, ConversionCounts>) -> Vec<(RowKey, ConversionCounts)> {
    let mut rows: Vec<_> = rows.into_iter().collect();
    rows.sort_by(|(a_key, a), (b_key, b)| {
        let unattributed = |key: &RowKey| matches!(key, RowKey::Campaign(None));
        unattributed(a_key)
            .cmp(&unattributed(b_key))
            .then(b.conversions.cmp(&a.conversions))
            .then_with(|| b.value.ordering_key().cmp(&a.value.ordering_key()))
            .then_with(|| key_text(a_key).cmp(&key_text(b_key)))
    });
    rows
}

fn key_text(key: &RowKey) -> String {
    match key {
        RowKey::Day(day) => day.to_string(),
        RowKey::Action(action) => action.clone(),
        RowKey::Campaign(campaign) => campaign.map(|id| id.to_string()).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::conversion::money::{Currency, Money};
    use uuid::Uuid;

    fn counts(conversions: u64, euros: &str) -> ConversionCounts {
        let mut counts = ConversionCounts {
            conversions,
            ..ConversionCounts::default()
        };
        let eur = Currency::from_code("EUR").expect("EUR");
        counts
            .value
            .add_money(Money::parse(euros, eur).expect("valid"));
        counts
    }

    #[test]
    fn rows_rank_by_conversions_then_value_and_the_unattributed_come_last() {
        let campaign = |n| RowKey::Campaign(Some(CampaignId::new(Uuid::from_u128(n))));
        let rows = HashMap::from([
            (RowKey::Campaign(None), counts(50, "1")),
            (campaign(1), counts(3, "10.00")),
            (campaign(2), counts(3, "20.00")),
            (campaign(3), counts(7, "1.00")),
        ]);
        let order: Vec<RowKey> = ranked(rows).into_iter().map(|(key, _)| key).collect();
        assert_eq!(
            order,
            vec![
                campaign(3),
                campaign(2),
                campaign(1),
                RowKey::Campaign(None)
            ]
        );
    }
}
