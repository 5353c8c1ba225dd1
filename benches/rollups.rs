//! Summaries of sealed days: the 31-day summary latency of a campaign with 1 million and with
//! 10 million impressions, every day sealed into rollups, measured side by side in
//! interleaved rounds on each store. The cost of a sealed day must not grow with its events.
//!
//! `scripts/bench rollups` (starts the Cassandra node if needed). Knobs: BENCH_SIZES
//! (default "1000000,10000000"), BENCH_ROUNDS (default 7). Loaded campaigns are kept in
//! `target/bench-data/rollups` and the `adevents_bench` keyspace and reused.

mod support;

use adevents::domain::ids::CampaignKey;
use adevents::domain::time::Day;
use adevents::ingest::Ingestor;
use adevents::query::range::QueryRange;
use adevents::query::summary::Grouping;
use adevents::query::{Queries, QueryOptions};
use adevents::sealer::{Sealer, SealerOptions};
use adevents::settings::SettingsCache;
use adevents::store::Store;
use adevents::store::cassandra::config::WriteMode;
use adevents::store::embedded::Fsync;
use chrono::{Duration, NaiveDate};
use std::sync::Arc;
use std::time::Instant;

const DAYS: i64 = 31;

fn first_day() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 8, 1).expect("valid")
}

fn campaign_of(size: usize) -> CampaignKey {
    support::bench_campaign("rollups", size)
}

/// The month asked two ways: by UTC day (each row one whole UTC day: one users sketch per
/// day) and by Kolkata day (rows cut UTC days: 24 hourly sketches per day).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Query {
    UtcDays,
    KolkataDays,
}

impl Query {
    const ALL: [Query; 2] = [Query::UtcDays, Query::KolkataDays];

    fn label(self) -> &'static str {
        match self {
            Query::UtcDays => "group_by=day, UTC",
            Query::KolkataDays => "group_by=day, Asia/Kolkata",
        }
    }

    fn range(self) -> QueryRange {
        let tz = match self {
            Query::UtcDays => chrono_tz::Tz::UTC,
            Query::KolkataDays => chrono_tz::Asia::Kolkata,
        };
        QueryRange::new(first_day(), first_day() + Duration::days(DAYS - 1), tz).expect("range")
    }
}

/// (impressions in the answer, sealed UTC days read, seconds).
async fn summary(queries: &Queries, campaign: CampaignKey, query: Query) -> (u64, usize, f64) {
    let started = Instant::now();
    let summary = queries
        .summary(campaign, &query.range(), Grouping::Day)
        .await
        .expect("summary");
    (
        summary.totals.impressions,
        summary.sealed_days,
        started.elapsed().as_secs_f64(),
    )
}

/// `size` impressions over the 31 days ([`support::load_month`]); then every day sealed.
async fn load(
    store: Arc<dyn Store>,
    settings: Arc<SettingsCache>,
    campaign: CampaignKey,
    size: usize,
) {
    let ingestor = Ingestor::standalone(
        Arc::clone(&store),
        Arc::clone(&settings),
        64,
        SealerOptions::default().rule,
    );
    support::load_month(&ingestor, campaign, size, first_day(), DAYS, false).await;
    // Past the clock margin after the late marks this historical load wrote.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    seal(
        &Sealer::new(
            store,
            settings,
            SealerOptions::default(),
            Default::default(),
        ),
        campaign,
    )
    .await;
}

/// Seals the 31 days.
async fn seal(sealer: &Sealer, campaign: CampaignKey) {
    let started = Instant::now();
    let first = Day::new(first_day());
    for day in first.through(Day::new(first_day() + Duration::days(DAYS - 1))) {
        sealer
            .seal_campaign_day(campaign, day)
            .await
            .expect("sealed");
    }
    println!(
        "  sealed 31 days in {:.0} s",
        started.elapsed().as_secs_f64()
    );
}

#[tokio::main]
async fn main() {
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES")
        .unwrap_or_else(|_| "1000000,10000000".to_owned())
        .split(',')
        .filter_map(|size| size.trim().parse().ok())
        .collect();
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let stores: Vec<(&str, Arc<dyn Store>)> = vec![
        (
            "embedded",
            Arc::new(support::embedded_store("rollups", Fsync::Never)),
        ),
        (
            "cassandra",
            Arc::new(support::store(WriteMode::Batch).await),
        ),
    ];
    for (name, store) in stores {
        let settings = Arc::new(SettingsCache::new(
            store.clone(),
            std::time::Duration::from_secs(600),
        ));
        let queries = Queries::new(
            Arc::clone(&store),
            Arc::clone(&settings),
            QueryOptions::default(),
        );
        println!("## {name}");
        for size in &sizes {
            let campaign = campaign_of(*size);
            let (impressions, sealed, _) = summary(&queries, campaign, Query::UtcDays).await;
            if impressions != *size as u64 {
                load(Arc::clone(&store), Arc::clone(&settings), campaign, *size).await;
            } else if sealed != DAYS as usize {
                // Loaded by an earlier run, sealed by an older rollup layout.
                let options = SealerOptions::default();
                let sealer = Sealer::new(
                    Arc::clone(&store),
                    Arc::clone(&settings),
                    options,
                    Default::default(),
                );
                seal(&sealer, campaign).await;
            }
        }
        // (query, size) → seconds per round, rounds interleaved across both.
        let mut latencies: Vec<Vec<f64>> = vec![Vec::new(); Query::ALL.len() * sizes.len()];
        for _ in 0..rounds {
            for (q, query) in Query::ALL.into_iter().enumerate() {
                for (index, size) in sizes.iter().enumerate() {
                    let (impressions, sealed, seconds) =
                        summary(&queries, campaign_of(*size), query).await;
                    // The Kolkata month ends 5 h 30 before the UTC one (and starts as early
                    // on the empty UTC day before it).
                    match query {
                        Query::UtcDays => assert_eq!(impressions, *size as u64),
                        Query::KolkataDays => assert!(impressions > *size as u64 * 95 / 100),
                    }
                    assert!(sealed >= DAYS as usize, "{sealed} sealed days");
                    latencies[q * sizes.len() + index].push(seconds);
                }
            }
        }
        println!(
            "\n| {name}: 31 sealed days | impressions | median | rounds (ms) | × smallest |\n|---|---|---|---|---|"
        );
        for (q, query) in Query::ALL.into_iter().enumerate() {
            let base = support::median(latencies[q * sizes.len()].clone());
            for (index, size) in sizes.iter().enumerate() {
                let values = &latencies[q * sizes.len() + index];
                let median = support::median(values.clone());
                let all: Vec<String> = values
                    .iter()
                    .map(|v| format!("{:.0}", v * 1000.0))
                    .collect();
                println!(
                    "| {} | {size} | {:.1} ms | {} | {:.2} |",
                    query.label(),
                    median * 1000.0,
                    all.join(" / "),
                    median / base
                );
            }
        }
        println!();
    }
}
