//! A 31-day summary of a 4-bucket campaign holding BENCH_IMPRESSIONS (default 1,000,000)
//! impressions, 1 % of them clicked (and every clicked impression clicked twice): the
//! service's concurrent per-partition fan-out, against a sequential loop over
//! the same partitions (the same code with one read in flight) and against one `IN` query over
//! all partition keys, measured side by side in interleaved rounds.
//!
//! `scripts/bench summary`. The data is loaded once per keyspace and campaign (the campaign
//! ids are fixed), so a second run measures at once.

mod support;

use adevents::domain::bucket::BucketCount;
use adevents::domain::campaign::CampaignSettings;
use adevents::domain::event::{Click, Impression};
use adevents::domain::ids::{AdId, AdvertiserId, CampaignId, CampaignKey, ImpressionId, UserId};
use adevents::domain::owner::Owner;
use adevents::domain::time::EventTime;
use adevents::domain::user_data::UserData;
use adevents::ingest::Ingestor;
use adevents::query::range::QueryRange;
use adevents::query::summary::Grouping;
use adevents::query::{FanOut, Queries, QueryOptions};
use adevents::sealer::SealerOptions;
use adevents::settings::SettingsCache;
use adevents::store::Store;
use adevents::store::cassandra::CassandraStore;
use adevents::store::cassandra::config::WriteMode;
use adevents::store::embedded::Fsync;
use chrono::{DateTime, Duration, NaiveDate, Utc};
use futures::TryStreamExt;
use std::collections::HashMap;
use std::sync::Arc;
use uuid::Uuid;

const DAYS: i64 = 31;
const BUCKETS: u16 = 4;

fn campaign(impressions: usize) -> CampaignKey {
    // Fixed per size, so the data is loaded once and reused by later runs.
    let name = format!("adevents-bench-summary-v2-{impressions}");
    CampaignKey {
        advertiser_id: AdvertiserId::new(Uuid::new_v5(&Uuid::NAMESPACE_OID, b"adevents-bench")),
        campaign_id: CampaignId::new(Uuid::new_v5(&Uuid::NAMESPACE_OID, name.as_bytes())),
    }
}

fn first_day() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 9, 1).expect("valid")
}

async fn load(store: Arc<dyn Store>, campaign: CampaignKey, impressions: usize) {
    let settings = CampaignSettings {
        buckets: BucketCount::new(BUCKETS).expect("valid"),
        effective_from: EventTime::earliest(),
        daily_cap: None,
        total_cap: None,
        tz: chrono_tz::Tz::UTC,
        look_backs: adevents::domain::conversion::attribution::LookBacks::DEFAULT,
    };
    store
        .put_settings(&Owner::Campaign(campaign), &settings)
        .await
        .expect("settings");
    let (already, _) = fan_out(&store, campaign, 64).await;
    if already as usize >= impressions {
        println!("{already} impressions already loaded");
        return;
    }
    let dyn_store: Arc<dyn Store> = store.clone();
    let cache = Arc::new(SettingsCache::new(
        dyn_store.clone(),
        std::time::Duration::from_secs(60),
    ));
    let ingestor = Ingestor::standalone(dyn_store, cache, 64, SealerOptions::default().rule);
    let start: DateTime<Utc> = first_day().and_hms_opt(0, 0, 0).expect("valid").and_utc();
    let step = Duration::milliseconds(DAYS * 86_400_000 / impressions as i64);
    let ads: Vec<AdId> = (0..50).map(|_| AdId::new(Uuid::new_v4())).collect();
    let (_, elapsed) = support::timed(async {
        let mut batch = Vec::with_capacity(5000);
        let (mut clicks, mut reclicks) = (Vec::new(), Vec::new());
        for i in 0..impressions {
            let impression = Impression {
                impression_id: ImpressionId::new(Uuid::new_v4()),
                campaign,
                ad_id: ads[i % ads.len()],
                user_id: UserId::new(Uuid::new_v4()),
                timestamp: EventTime::from_stored(start + step * i as i32),
                user_ip: None,
                user_data: UserData::default(),
                user_agent: None,
                invalid: None,
                pixel_arrival: None,
                ip_is_viewers: true,
            };
            if i % 100 == 0 {
                let click = |after: i64| Click {
                    impression_id: impression.impression_id,
                    campaign,
                    ad_id: impression.ad_id,
                    timestamp: EventTime::from_stored(
                        impression.timestamp.instant() + Duration::seconds(after),
                    ),
                    user_agent: None,
                    invalid: None,
                };
                clicks.push(click(30));
                reclicks.push(click(600));
            }
            batch.push(impression);
            if batch.len() == 5000 || i + 1 == impressions {
                ingestor
                    .impressions(std::mem::take(&mut batch))
                    .await
                    .expect("loaded");
                ingestor
                    .clicks(std::mem::take(&mut clicks))
                    .await
                    .expect("loaded");
                ingestor
                    .clicks(std::mem::take(&mut reclicks))
                    .await
                    .expect("loaded");
            }
        }
    })
    .await;
    println!(
        "loaded {impressions} impressions in {:.1}s",
        elapsed.as_secs_f64()
    );
}

/// Rows of `cql` (bound with `values`), all pages.
async fn all_rows<R>(
    store: &CassandraStore,
    cql: String,
    values: impl scylla::serialize::row::SerializeRow,
) -> Vec<R>
where
    R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm> + Send + 'static,
{
    let statement = store.session().prepare(cql).await.expect("prepare");
    store
        .session()
        .execute_iter(statement, values)
        .await
        .expect("query")
        .rows_stream::<R>()
        .expect("typed")
        .try_collect()
        .await
        .expect("rows")
}

/// The same summary with `IN` instead of fan-out: one `SELECT … WHERE day IN (…) AND
/// bucket_id IN (…)` for impressions and one for clicks, then one `IN` over the clicked
/// impressions' index partitions, with the service's counting rules applied to the rows.
/// Returns (impression rows read, impressions counted, clicks counted).
async fn in_query(store: &CassandraStore, campaign: CampaignKey) -> (usize, u64, u64) {
    let days: Vec<NaiveDate> = (0..DAYS).map(|d| first_day() + Duration::days(d)).collect();
    let buckets: Vec<i16> = (0..BUCKETS as i16).collect();
    let (advertiser, campaign_id) = (
        campaign.advertiser_id.as_uuid(),
        campaign.campaign_id.as_uuid(),
    );
    let keyspace = store.keyspace();
    let rows: Vec<(Uuid, Uuid, DateTime<Utc>)> = all_rows(
        store,
        format!(
            "SELECT impression_id, ad_id, timestamp FROM {keyspace}.impression_summary \
             WHERE advertiser_id = ? AND campaign_id = ? AND day IN ? AND bucket_id IN ?"
        ),
        (advertiser, campaign_id, &days, &buckets),
    )
    .await;
    let range_start = first_day().and_hms_opt(0, 0, 0).expect("valid").and_utc();
    let range_end = range_start + Duration::days(DAYS);
    let clicked: Vec<(Uuid, DateTime<Utc>)> = all_rows(
        store,
        format!(
            "SELECT impression_id, timestamp FROM {keyspace}.click \
             WHERE advertiser_id = ? AND campaign_id = ? AND day IN ? AND bucket_id IN ?"
        ),
        (advertiser, campaign_id, &days, &buckets),
    )
    .await;
    let mut ids: Vec<Uuid> = clicked
        .iter()
        .filter(|(_, at)| range_start <= *at && *at < range_end)
        .map(|(id, _)| *id)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let index: Vec<(Uuid, DateTime<Utc>)> = all_rows(
        store,
        format!(
            "SELECT impression_id, timestamp FROM {keyspace}.click_by_impression \
             WHERE advertiser_id = ? AND campaign_id = ? AND impression_id IN ?"
        ),
        (advertiser, campaign_id, &ids),
    )
    .await;
    let mut first: HashMap<Uuid, DateTime<Utc>> = HashMap::new();
    for (id, at) in index {
        let entry = first.entry(id).or_insert(at);
        *entry = (*entry).min(at);
    }
    let clicks = first
        .values()
        .filter(|at| range_start <= **at && **at < range_end)
        .count() as u64;
    let mut per_day: HashMap<NaiveDate, HashMap<Uuid, DateTime<Utc>>> = HashMap::new();
    for (id, _ad, timestamp) in &rows {
        let earliest = per_day.entry(timestamp.date_naive()).or_default();
        let entry = earliest.entry(*id).or_insert(*timestamp);
        *entry = (*entry).min(*timestamp);
    }
    let counted = per_day.values().map(|ids| ids.len() as u64).sum();
    (rows.len(), counted, clicks)
}

async fn fan_out(store: &Arc<dyn Store>, campaign: CampaignKey, concurrency: usize) -> (u64, u64) {
    let dyn_store: Arc<dyn Store> = store.clone();
    let cache = Arc::new(SettingsCache::new(
        dyn_store.clone(),
        std::time::Duration::from_secs(10),
    ));
    let range = QueryRange::new(
        first_day(),
        first_day() + Duration::days(DAYS - 1),
        chrono_tz::Tz::UTC,
    )
    .expect("valid range");
    let options = QueryOptions {
        fan_out: FanOut { concurrency },
        ..QueryOptions::default()
    };
    let summary = Queries::new(dyn_store, cache, options)
        .summary(campaign, &range, Grouping::Day)
        .await
        .expect("summary");
    (summary.totals.impressions, summary.totals.clicks)
}

#[tokio::main]
async fn main() {
    let impressions: usize = std::env::var("BENCH_IMPRESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let store = Arc::new(support::store(WriteMode::Batch).await);
    let cassandra: Arc<dyn Store> = store.clone();
    let embedded: Arc<dyn Store> = Arc::new(support::embedded_store("summary", Fsync::Never));
    let campaign = campaign(impressions);
    print!("Cassandra: ");
    load(cassandra.clone(), campaign, impressions).await;
    print!("embedded: ");
    load(embedded.clone(), campaign, impressions).await;

    let (mut parallel, mut sequential, mut in_clause, mut local) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 1..=rounds {
        let (a, t_parallel) = support::timed(fan_out(&cassandra, campaign, 64)).await;
        let (b, t_sequential) = support::timed(fan_out(&cassandra, campaign, 1)).await;
        let (d, t_local) = support::timed(fan_out(&embedded, campaign, 64)).await;
        assert_eq!(a, d, "both stores agree");
        let ((_, c_impressions, c_clicks), t_in) = support::timed(in_query(&store, campaign)).await;
        assert_eq!(a, b, "fan-out and sequential agree");
        assert_eq!(a, (c_impressions, c_clicks), "fan-out and IN agree");
        println!(
            "round {round}: {} impressions, {} clicks; fan-out {:.0} ms, sequential {:.0} ms, IN {:.0} ms, embedded fan-out {:.0} ms",
            a.0,
            a.1,
            t_parallel.as_secs_f64() * 1e3,
            t_sequential.as_secs_f64() * 1e3,
            t_in.as_secs_f64() * 1e3,
            t_local.as_secs_f64() * 1e3
        );
        local.push(t_local.as_secs_f64() * 1e3);
        parallel.push(t_parallel.as_secs_f64() * 1e3);
        sequential.push(t_sequential.as_secs_f64() * 1e3);
        in_clause.push(t_in.as_secs_f64() * 1e3);
    }
    let (p, s, i) = (
        support::median(parallel),
        support::median(sequential),
        support::median(in_clause),
    );
    println!(
        "\n| variant ({DAYS} days x {BUCKETS} buckets = {} partitions, {impressions} impressions) | ms (median of {rounds}) | ratio to fan-out |",
        DAYS * BUCKETS as i64
    );
    println!("|---|---|---|");
    println!(
        "| fan-out, 64 reads in flight (partitions, then first-click lookups) | {p:.0} | 1.00 |"
    );
    println!(
        "| sequential loop over the same partitions | {s:.0} | {:.2} |",
        s / p
    );
    println!(
        "| one IN query over all partition keys | {i:.0} | {:.2} |",
        i / p
    );
    let l = support::median(local);
    println!(
        "| embedded store (fsync never for the load), the same fan-out | {l:.0} | {:.2} |",
        l / p
    );
}
