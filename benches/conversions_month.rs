//! A month's summary of sealed days with conversions against the same month without them: two
//! campaigns of BENCH_IMPRESSIONS (default 300,000) impressions over 30 days
//! ([`support::load_month`]), one of which also has BENCH_CONVERSION_PERCENT (default 2) % as
//! many conversions credited to its ads, post-click and post-view, with values in EUR and JPY
//! (written as the decider writes them). Both months are sealed; then `summary` by day and by
//! ad is timed on each, alternating, over BENCH_ROUNDS (default 9) rounds, on the embedded
//! store and on Cassandra.
//!
//! `cargo bench --bench conversions_month` with the repository's node running
//! (`scripts/cassandra start`).

mod support;

use adevents::domain::conversion::money::{Currency, Money};
use adevents::domain::conversion::{
    Action, Attribution, AttributionKind, Conversion, ConversionId, DecidedConversion,
};
use adevents::domain::ids::{AdId, CampaignKey, ImpressionId, UserId};
use adevents::domain::time::{Day, EventTime};
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
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Instant;
use uuid::Uuid;

const DAYS: i64 = 30;

fn first_day() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 8, 1).expect("valid")
}

/// The ads [`support::load_month`] draws first from its generator seeded by `size`.
fn ads_of(size: usize) -> Vec<AdId> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(size as u64);
    (0..20)
        .map(|_| AdId::new(Uuid::from_u128(rng.random())))
        .collect()
}

/// Conversions spread over the month, credited to the campaign's ads as the decider would.
fn conversions(campaign: CampaignKey, size: usize, count: usize) -> Vec<DecidedConversion> {
    let ads = ads_of(size);
    let eur = Currency::from_code("EUR").expect("EUR");
    let jpy = Currency::from_code("JPY").expect("JPY");
    let start = first_day().and_hms_opt(0, 0, 0).expect("valid").and_utc();
    let step = DAYS * 86_400_000 / count.max(1) as i64;
    (0..count)
        .map(|i| {
            let at = start + Duration::milliseconds(step * i as i64 + 1);
            let value = match i % 3 {
                0 => Some(Money::parse(&format!("{}.{:02}", i % 500, i % 100), eur)),
                1 => Some(Money::parse(&format!("{}", i % 9000), jpy)),
                _ => None,
            }
            .map(|money| money.expect("a valid value"));
            DecidedConversion {
                conversion: Conversion {
                    advertiser_id: campaign.advertiser_id,
                    conversion_id: ConversionId::new(&format!("order-{i}")).expect("valid"),
                    action: Action::new("purchase").expect("valid"),
                    timestamp: EventTime::from_stored(at),
                    click_id: None,
                    impression_id: None,
                    user_id: Some(UserId::new(Uuid::from_u128(i as u128 + 7))),
                    value,
                },
                received: at,
                attribution: Some(Attribution {
                    kind: if i % 4 == 0 {
                        AttributionKind::PostView
                    } else {
                        AttributionKind::PostClick
                    },
                    campaign_id: campaign.campaign_id,
                    ad_id: ads[i % ads.len()],
                    impression_id: ImpressionId::new(Uuid::from_u128(i as u128 + 1)),
                    event_time: at - Duration::minutes(30),
                }),
            }
        })
        .collect()
}

/// Loads and seals both months (once per store: the campaign ids are fixed).
async fn load(store: Arc<dyn Store>, settings: Arc<SettingsCache>, size: usize, share: usize) {
    let ingestor = Ingestor::standalone(
        Arc::clone(&store),
        Arc::clone(&settings),
        64,
        SealerOptions::default().rule,
    );
    let without = support::bench_campaign("conversions-without", size);
    let with = support::bench_campaign(&format!("conversions-with-{share}"), size);
    let started = Instant::now();
    for campaign in [without, with] {
        support::load_month(&ingestor, campaign, size, first_day(), DAYS, false).await;
    }
    let decided = conversions(with, size, size * share / 100);
    for chunk in decided.chunks(1000) {
        store
            .write_decided(chunk)
            .await
            .expect("conversions written");
    }
    // Past the clock margin after the late marks this historical load wrote.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let sealer = Sealer::new(
        store,
        settings,
        SealerOptions::default(),
        Default::default(),
    );
    let first = Day::new(first_day());
    for campaign in [without, with] {
        for day in first.through(Day::new(first_day() + Duration::days(DAYS - 1))) {
            sealer
                .seal_campaign_day(campaign, day)
                .await
                .expect("sealed");
        }
    }
    println!(
        "  loaded and sealed 2 x {size} impressions and {} conversions in {:.0} s",
        decided.len(),
        started.elapsed().as_secs_f64()
    );
}

/// (conversions in the answer, sealed days, milliseconds).
async fn timed_summary(
    queries: &Queries,
    campaign: CampaignKey,
    grouping: Grouping,
) -> (u64, usize, f64) {
    let range = QueryRange::new(
        first_day(),
        first_day() + Duration::days(DAYS - 1),
        chrono_tz::Tz::UTC,
    )
    .expect("a range");
    let started = Instant::now();
    let summary = queries
        .summary(campaign, &range, grouping)
        .await
        .expect("summary");
    let elapsed = started.elapsed().as_secs_f64() * 1e3;
    (
        summary.totals.credited_conversions(),
        summary.sealed_days,
        elapsed,
    )
}

async fn measure(name: &str, store: Arc<dyn Store>, size: usize, share: usize, rounds: usize) {
    println!("{name}:");
    let settings = Arc::new(SettingsCache::new(
        store.clone(),
        std::time::Duration::from_secs(600),
    ));
    let without = support::bench_campaign("conversions-without", size);
    let with = support::bench_campaign(&format!("conversions-with-{share}"), size);
    let queries = Queries::new(
        Arc::clone(&store),
        Arc::clone(&settings),
        QueryOptions::default(),
    );
    let (_, sealed, _) = timed_summary(&queries, with, Grouping::None).await;
    if sealed < DAYS as usize {
        load(Arc::clone(&store), Arc::clone(&settings), size, share).await;
    }
    for (label, grouping) in [("day", Grouping::Day), ("ad", Grouping::Ad)] {
        let (mut plain, mut converted) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            // Alternating which goes first, so neither always finds the caches warmer.
            let order = if round % 2 == 0 {
                [(without, false), (with, true)]
            } else {
                [(with, true), (without, false)]
            };
            for (campaign, has) in order {
                let (count, sealed, ms) = timed_summary(&queries, campaign, grouping).await;
                assert_eq!(sealed, DAYS as usize, "every day sealed");
                assert_eq!(count > 0, has, "conversions only where written");
                if has {
                    converted.push(ms);
                } else {
                    plain.push(ms);
                }
            }
        }
        let (plain, converted) = (support::median(plain), support::median(converted));
        println!(
            "| {name} | group_by={label} | {plain:.1} | {converted:.1} | {:.2} |",
            converted / plain
        );
    }
}

#[tokio::main]
async fn main() {
    let size = support::env_knob("BENCH_IMPRESSIONS", 300_000);
    let share = support::env_knob("BENCH_CONVERSION_PERCENT", 2);
    let rounds = support::env_knob("BENCH_ROUNDS", 9);
    println!(
        "A sealed month ({DAYS} days, {size} impressions, {}% as many conversions): summary ms, median of {rounds}",
        share
    );
    println!("| store | rows | without conversions | with conversions | ratio |");
    println!("|---|---|---|---|---|");
    let embedded: Arc<dyn Store> =
        Arc::new(support::embedded_store("conversions-month", Fsync::Never));
    measure("embedded", embedded, size, share, rounds).await;
    let cassandra: Arc<dyn Store> = Arc::new(support::store(WriteMode::Batch).await);
    measure("Cassandra", cassandra, size, share, rounds).await;
}
