//! Reports by one dimension ("what kind of users clicked on what kind of ad"): impressions,
//! clicks and CTR per value of `ad_id` or of one `user_data` key.
//!
//! By `ad_id` a report is the summary's ad rows ([`ad_report`]), answered like a summary from
//! sealed rollups and the closed slices of open days, so its cost does not grow with the
//! range's events. By a `user_data` key, which no aggregate keeps, the range's clicks are read
//! into memory by fan-out, then its impressions are streamed partition by partition and each
//! is counted under its value; memory holds the clicked ids and one counter per value.

use super::Reader;
use super::aggregate::BillableWindow;
use super::budget::{PartitionBudget, QueryError};
use super::clicks::first_clicked_between;
use super::impressions::ImpressionScan;
use super::plan::campaign_partitions;
use super::range::QueryRange;
use super::summary::{Grouping, campaign_summary};
use crate::domain::conversion::counts::ConversionCounts;
use crate::domain::echo::echo;
use crate::domain::event::Impression;
use crate::domain::ids::CampaignKey;
use crate::domain::owner::Owner;
use crate::domain::user_data;
use crate::domain::view::ViewCounts;
use std::collections::HashMap;
use std::sync::Arc;

/// What a report groups impressions by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Dimension {
    AdId,
    /// One key of the impressions' `user_data`.
    UserData(String),
}

impl std::str::FromStr for Dimension {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text == "ad_id" {
            return Ok(Self::AdId);
        }
        match text.strip_prefix("user_data.") {
            Some(key) => user_data::check_key(key)
                .map(|()| Self::UserData(key.to_owned()))
                .map_err(|message| format!("the user_data {message}")),
            None => Err(format!("{} is not ad_id or user_data.<key>", echo(text))),
        }
    }
}

impl std::fmt::Display for Dimension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::AdId => f.write_str("ad_id"),
            Self::UserData(key) => write!(f, "user_data.{key}"),
        }
    }
}

impl Dimension {
    fn value_of(&self, impression: &Impression) -> Option<String> {
        match self {
            Self::AdId => Some(impression.ad_id.to_string()),
            Self::UserData(key) => impression.user_data.entries().get(key).cloned(),
        }
    }
}

/// Rows a report lists by default, and at most.
pub(crate) const DEFAULT_LIMIT: usize = 1_000;
pub(crate) const MAX_LIMIT: usize = 10_000;

/// One value's counts; `value` is `None` for impressions without the key, and for the row
/// that sums every value past the limit (`other`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReportRow {
    pub(crate) value: Option<String>,
    pub(crate) impressions: u64,
    pub(crate) clicks: u64,
    /// The view measures, by `ad_id` only (a report by a `user_data` key reads raw pages and
    /// does not join reports).
    pub(crate) views: Option<ViewCounts>,
    /// The conversions credited, by `ad_id` only.
    pub(crate) conversions: Option<ConversionCounts>,
    /// This row sums the values past the report's limit.
    pub(crate) other: bool,
}

/// A report's rows: at most its limit of values, then, if more values had impressions, one
/// row summing the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Report {
    pub(crate) rows: Vec<ReportRow>,
    /// How many distinct values the range had in all.
    pub(crate) values: usize,
}

impl ReportRow {
    /// Clicks per impression; 0 when there are none.
    pub(crate) fn ctr(&self) -> f64 {
        if self.impressions == 0 {
            0.0
        } else {
            self.clicks as f64 / self.impressions as f64
        }
    }
}

/// The report by `ad_id`: the summary's ad rows, most impressions first, then by ad, at most
/// `limit` of them and a row summing the rest. Impressions and clicks count exactly as in the
/// summary (a click at its impression's first click, when that lies in the range).
pub(crate) async fn ad_report(
    reader: &Reader,
    campaign: CampaignKey,
    range: &QueryRange,
    window: BillableWindow,
    limit: usize,
) -> Result<Report, QueryError> {
    let summary = campaign_summary(reader, campaign, range, Grouping::Ad, window).await?;
    let rows = summary
        .by_ad
        .into_iter()
        // An ad with invalid traffic only has no valid count to report.
        .filter(|(_, counts)| {
            counts.impressions > 0 || counts.clicks > 0 || counts.conversions.conversions > 0
        })
        .map(|(ad, counts)| ReportRow {
            value: Some(ad.to_string()),
            impressions: counts.impressions,
            clicks: counts.clicks,
            views: Some(counts.views),
            conversions: Some(counts.conversions),
            other: false,
        })
        .collect();
    Ok(limited(sorted(rows), limit))
}

/// The report's rows by a `user_data` key, most impressions first, then by value (`null`
/// last), at most `limit` of them and a row summing the rest. Impressions count as in the
/// summary (once per UTC day, at the earliest time); a row's clicks are those of its
/// impressions whose first click falls in the range, each once. These reports read raw
/// partitions, every day costing its bucket count.
pub(crate) async fn campaign_report(
    reader: &Reader,
    campaign: CampaignKey,
    range: &QueryRange,
    dimension: &Dimension,
    limit: usize,
) -> Result<Report, QueryError> {
    let settings = &reader.settings;
    let history = settings.history(&Owner::Campaign(campaign)).await?;
    let plan = campaign_partitions(
        campaign,
        range.utc_days(),
        &history,
        settings.read_staleness(),
    );
    reader.budget.check(PartitionBudget::cost(
        plan.iter().map(|(_, partitions)| (false, partitions.len())),
    ))?;
    let partitions: Vec<_> = plan
        .into_iter()
        .flat_map(|(_, partitions)| partitions)
        .collect();
    let mut clicked = first_clicked_between(
        reader.store.as_ref(),
        campaign,
        partitions.clone(),
        (range.start(), range.end()),
        reader.fan_out,
    )
    .await?;
    let mut counts: HashMap<Option<String>, (u64, u64)> = HashMap::new();
    let mut scan = ImpressionScan::new(Arc::clone(&reader.store), range, partitions);
    while let Some(page) = scan.next_page().await? {
        // Valid traffic only, as summaries count.
        for impression in page
            .into_iter()
            .filter(|impression| impression.invalid.is_none())
        {
            let (impressions, clicks) = counts.entry(dimension.value_of(&impression)).or_default();
            *impressions += 1;
            // An impression shown on two UTC days counts twice, its click once.
            if clicked.remove(&impression.impression_id) {
                *clicks += 1;
            }
        }
    }
    let rows: Vec<ReportRow> = counts
        .into_iter()
        .map(|(value, (impressions, clicks))| ReportRow {
            value,
            impressions,
            clicks,
            views: None,
            conversions: None,
            other: false,
        })
        .collect();
    Ok(limited(sorted(rows), limit))
}

/// Most impressions first, then by value, `null` last.
fn sorted(mut rows: Vec<ReportRow>) -> Vec<ReportRow> {
    rows.sort_by(|a, b| {
        b.impressions
            .cmp(&a.impressions)
            .then_with(|| match (&a.value, &b.value) {
                (Some(a), Some(b)) => a.cmp(b),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            })
    });
    rows
}

/// The first `limit` rows, and one summing the rest when there is a rest.
fn limited(mut rows: Vec<ReportRow>, limit: usize) -> Report {
    let values = rows.len();
    if rows.len() > limit {
        let rest = rows.split_off(limit);
        rows.push(ReportRow {
            value: None,
            impressions: rest.iter().map(|row| row.impressions).sum(),
            clicks: rest.iter().map(|row| row.clicks).sum(),
            views: rest.iter().try_fold(ViewCounts::default(), |mut sum, row| {
                sum.add(row.views.as_ref()?);
                Some(sum)
            }),
            conversions: rest
                .iter()
                .try_fold(ConversionCounts::default(), |mut sum, row| {
                    sum.add(row.conversions.as_ref()?);
                    Some(sum)
                }),
            other: true,
        });
    }
    Report { rows, values }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(value: &str, impressions: u64, clicks: u64) -> ReportRow {
        ReportRow {
            value: Some(value.to_owned()),
            impressions,
            clicks,
            views: None,
            conversions: None,
            other: false,
        }
    }

    #[test]
    fn past_its_limit_a_report_sums_the_rest_into_one_row() {
        let rows = vec![
            row("a", 5, 1),
            row("b", 4, 0),
            row("c", 3, 2),
            row("d", 1, 1),
        ];
        let report = limited(rows.clone(), 2);
        assert_eq!(report.values, 4);
        assert_eq!(report.rows.len(), 3);
        assert_eq!(report.rows[..2], rows[..2]);
        let other = &report.rows[2];
        assert!(other.other && other.value.is_none());
        assert_eq!((other.impressions, other.clicks), (4, 3));
        let whole = limited(rows.clone(), 4);
        assert_eq!(
            whole.rows, rows,
            "no other row when nothing is past the limit"
        );
    }

    #[test]
    fn dimensions_parse_and_name_themselves() {
        assert_eq!("ad_id".parse(), Ok(Dimension::AdId));
        assert_eq!(
            "user_data.country".parse(),
            Ok(Dimension::UserData("country".into()))
        );
        assert_eq!(
            Dimension::UserData("country".into()).to_string(),
            "user_data.country"
        );
        assert!("user_data.".parse::<Dimension>().is_err());
        assert!("country".parse::<Dimension>().is_err());
        assert!(
            format!("user_data.{}", "k".repeat(65))
                .parse::<Dimension>()
                .is_err()
        );
    }
}
