//! The server's unique-visitor counts for every feature combination of the simulated traffic,
//! beside the exact counts, as a table.

use super::traffic::Filter;
use chrono::NaiveDate;
use std::collections::BTreeMap;
use std::fmt::Write;

/// One combination: exact and served visits and unique visitors.
#[derive(Debug, Clone)]
pub(crate) struct ComparedRow {
    pub(crate) filter: Filter,
    pub(crate) exact_visits: u64,
    pub(crate) exact_uniques: u64,
    pub(crate) served_visits: u64,
    pub(crate) served_uniques: u64,
}

impl ComparedRow {
    /// Relative error of the unique count.
    pub(crate) fn error(&self) -> f64 {
        if self.exact_uniques == 0 {
            return 0.0;
        }
        (self.served_uniques as f64 - self.exact_uniques as f64) / self.exact_uniques as f64
    }
}

/// Why the server's counts could not be read.
#[derive(Debug, thiserror::Error)]
#[error("querying {url}: {reason}")]
pub(crate) struct QueryError {
    url: String,
    reason: String,
}

/// The total visits and unique visitors the server answers for `site` over the inclusive
/// local (UTC) days `from..=to`, for the beacons with every feature of `filter`.
async fn served_totals(
    client: &reqwest::Client,
    server: &str,
    site: &str,
    (from, to): (NaiveDate, NaiveDate),
    filter: &Filter,
) -> Result<(u64, u64), QueryError> {
    let mut params = vec![
        ("from".to_owned(), from.to_string()),
        ("to".to_owned(), to.to_string()),
    ];
    params.extend(
        filter
            .iter()
            .map(|(name, value)| (format!("feature.{name}"), value.clone())),
    );
    let query = serde_urlencoded::to_string(&params).unwrap_or_default();
    let url = format!(
        "{}/v1/sites/{site}/uniques?{query}",
        server.trim_end_matches('/')
    );
    let failed = |reason: String| QueryError {
        url: url.clone(),
        reason,
    };
    let response = client
        .get(&url)
        .send()
        .await
        .map_err(|error| failed(error.to_string()))?;
    if !response.status().is_success() {
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        return Err(failed(format!("status {status}: {body}")));
    }
    let answer: serde_json::Value = response
        .json()
        .await
        .map_err(|error| failed(error.to_string()))?;
    let count = |name: &str| answer["total"][name].as_u64().unwrap_or_default();
    Ok((count("visits"), count("unique_visitors")))
}

/// How many visits the server already holds for `site` over `from..=to`: traffic of an
/// earlier run that the comparison would otherwise take for this run's.
pub(crate) async fn existing_visits(
    client: &reqwest::Client,
    server: &str,
    site: &str,
    from: NaiveDate,
    to: NaiveDate,
) -> Result<u64, QueryError> {
    let (visits, _) = served_totals(client, server, site, (from, to), &Filter::new()).await?;
    Ok(visits)
}

/// Asks the server for the total visits and unique visitors of each filter over the inclusive
/// local (UTC) days `from..=to`.
pub(crate) async fn compare(
    client: &reqwest::Client,
    server: &str,
    site: &str,
    from: NaiveDate,
    to: NaiveDate,
    exact: &BTreeMap<Filter, (u64, u64)>,
) -> Result<Vec<ComparedRow>, QueryError> {
    let mut rows = Vec::with_capacity(exact.len());
    for (filter, (exact_visits, exact_uniques)) in exact {
        let (served_visits, served_uniques) =
            served_totals(client, server, site, (from, to), filter).await?;
        rows.push(ComparedRow {
            filter: filter.clone(),
            exact_visits: *exact_visits,
            exact_uniques: *exact_uniques,
            served_visits,
            served_uniques,
        });
    }
    Ok(rows)
}

/// The rows as an aligned text table, one line per combination ("*" where a feature is free).
pub(crate) fn table(rows: &[ComparedRow], feature_names: &[&str]) -> String {
    let mut header: Vec<String> = feature_names
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
    header.extend(
        [
            "visits",
            "visits (server)",
            "uniques (exact)",
            "uniques (server)",
            "error",
        ]
        .map(str::to_owned),
    );
    let mut lines = vec![header];
    for row in rows {
        let mut line: Vec<String> = feature_names
            .iter()
            .map(|name| row.filter.get(name).cloned().unwrap_or_else(|| "*".into()))
            .collect();
        line.push(row.exact_visits.to_string());
        line.push(row.served_visits.to_string());
        line.push(row.exact_uniques.to_string());
        line.push(row.served_uniques.to_string());
        line.push(format!("{:+.2}%", row.error() * 100.0));
        lines.push(line);
    }
    let widths: Vec<usize> = (0..lines[0].len())
        .map(|column| {
            lines
                .iter()
                .map(|line| line[column].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for line in &lines {
        for (column, cell) in line.iter().enumerate() {
            let _ = write!(out, "{cell:<width$}  ", width = widths[column]);
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    }
    out
}
