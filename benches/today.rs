//! Today at the speed of a sealed day: the summary of a campaign's open day (group_by hour, day
//! and ad) after growing phases of impressions (1 % clicked, 1 % converting) spread over today's
//! closed slices of the last 12 hours, each phase's closed slices aggregated, with a realistic open stretch (the last
//! 2 to 17 minutes at the phase's daily rate, and a trickle at that rate while timing), split
//! by the open-day read's own metrics into the part from slice aggregates and the part read
//! raw; and
//! HTTP ingestion with the slice aggregator working through a backfill, against without it,
//! in interleaved rounds of one run; and
//! the aggregator's pass over many quiet campaigns (nothing due), their states read one at a
//! time against `fan_out.concurrency` (64) at once, in interleaved rounds.
//!
//! `scripts/bench today` (starts the Cassandra node if needed). Knobs: BENCH_STORES (default
//! "embedded,cassandra"), BENCH_EMBEDDED_PHASES (default "1000000,3000000,10000000"),
//! BENCH_CASSANDRA_PHASES (default "200000,1000000,3000000"), BENCH_ROUNDS (default 5),
//! BENCH_INGEST_ROUNDS (default 6, 0 skips the ingest comparison), BENCH_OPEN_BACKLOG (default
//! 1; 0 leaves out the open stretch's events before timing, so it holds only the trickle's),
//! BENCH_QUIET_CAMPAIGNS (default 2000, 0 skips the pass over quiet campaigns),
//! BENCH_COMPARE_RAW (default 1; 0 times the kept summaries alone, as for a profile of them:
//! "timing phase N" is printed as their rounds begin).
//! Each run uses fresh campaigns: the day moves on.

mod support;

use adevents::app::{App, Options};
use adevents::domain::bucket::BucketCount;
use adevents::domain::campaign::CampaignSettings;
use adevents::domain::conversion::attribution::{Attribution, AttributionKind};
use adevents::domain::conversion::money::{Currency, Money};
use adevents::domain::conversion::{Action, Conversion, ConversionId, DecidedConversion};
use adevents::domain::event::{Click, Impression};
use adevents::domain::ids::{AdId, AdvertiserId, CampaignId, CampaignKey, ImpressionId, UserId};
use adevents::domain::owner::Owner;
use adevents::domain::time::{Day, EventTime};
use adevents::domain::user_data::UserData;
use adevents::ingest::Ingestor;
use adevents::query::range::QueryRange;
use adevents::query::summary::Grouping;
use adevents::query::{Queries, QueryOptions};
use adevents::sealer::SealerOptions;
use adevents::settings::SettingsCache;
use adevents::store::Store;
use adevents::store::cassandra::config::WriteMode;
use adevents::store::embedded::Fsync;
use chrono::{DateTime, Duration, DurationRound, Utc};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;
use uuid::Uuid;

/// Buckets in force: about 300,000 thin rows per partition at 10 million impressions a day.
const BUCKETS: u16 = 32;
const ADS: usize = 10;
/// Slice grace (the default) and the stretch before it that is still open.
const GRACE_MINUTES: i64 = 2;

fn knob_list(name: &str, default: &str) -> Vec<usize> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .filter_map(|size| size.trim().parse().ok())
        .collect()
}

/// Today's closed slices of the last 12 hours: from the later of 12 hours ago and midnight
/// UTC to the end of the newest closed slice.
fn closed_stretch(now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
    let open_from = (now - Duration::minutes(GRACE_MINUTES))
        .duration_trunc(Duration::minutes(15))
        .expect("truncated");
    let midnight = now.duration_trunc(Duration::days(1)).expect("truncated");
    ((now - Duration::hours(12)).max(midnight), open_from)
}

/// A valid impression of `campaign` by `user_id` at `at`.
fn impression(
    campaign: CampaignKey,
    ad_id: AdId,
    user_id: UserId,
    at: DateTime<Utc>,
    id: ImpressionId,
) -> Impression {
    Impression {
        impression_id: id,
        campaign,
        ad_id,
        user_id,
        timestamp: EventTime::from_stored(at),
        user_ip: None,
        user_data: UserData::default(),
        user_agent: None,
        invalid: None,
        pixel_arrival: None,
        ip_is_viewers: true,
    }
}

/// The settings cache and ingestor the bench's writes go through, on `store`.
fn ingestor_for(store: &Arc<dyn Store>) -> (Arc<SettingsCache>, Ingestor) {
    let settings = Arc::new(SettingsCache::new(
        store.clone(),
        std::time::Duration::from_secs(600),
    ));
    let ingestor = Ingestor::standalone(
        Arc::clone(store),
        Arc::clone(&settings),
        64,
        SealerOptions::default().rule,
    );
    (settings, ingestor)
}

/// A conversion of `campaign` credited after a view to `shown` at `at`, worth 12.34 EUR.
fn conversion(
    campaign: CampaignKey,
    shown: &Impression,
    at: DateTime<Utc>,
    id: ConversionId,
) -> DecidedConversion {
    let currency = Currency::from_code("EUR").expect("a currency");
    DecidedConversion {
        conversion: Conversion {
            advertiser_id: campaign.advertiser_id,
            conversion_id: id,
            action: Action::new("purchase").expect("an action"),
            timestamp: EventTime::from_stored(at),
            click_id: None,
            impression_id: Some(shown.impression_id),
            user_id: Some(shown.user_id),
            value: Some(Money::parse("12.34", currency).expect("a value")),
        },
        received: at,
        attribution: Some(Attribution {
            kind: AttributionKind::PostView,
            campaign_id: campaign.campaign_id,
            ad_id: shown.ad_id,
            impression_id: shown.impression_id,
            event_time: shown.timestamp.instant(),
        }),
    }
}

/// Writes `count` impressions of `campaign` spread evenly over `[from, to)` through the
/// service's own write path (1 % of them clicked 20 s later, another 1 % converting a minute
/// later, written where decided conversions are counted), 4 batches of 5,000 at a time.
async fn load(
    (store, ingestor): (&dyn Store, &Ingestor),
    campaign: CampaignKey,
    count: usize,
    (from, to): (DateTime<Utc>, DateTime<Utc>),
    seed: u64,
) {
    if count == 0 {
        return;
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let ads: Vec<AdId> = (0..ADS)
        .map(|n| AdId::new(Uuid::from_u128(n as u128 + 1)))
        .collect();
    let users = (count / 3).max(1) as u128;
    let step = (to - from).num_microseconds().unwrap_or(1) / count as i64;
    let mut batches = Vec::new();
    let (mut batch, mut clicks, mut conversions) =
        (Vec::with_capacity(5000), Vec::new(), Vec::new());
    for i in 0..count {
        let at = from + Duration::microseconds(step * i as i64);
        let impression = impression(
            campaign,
            ads[rng.random_range(0..ads.len())],
            UserId::new(Uuid::from_u128(rng.random_range(0..users))),
            at,
            ImpressionId::new(Uuid::from_u128(rng.random())),
        );
        let click_at = at + Duration::seconds(20);
        if i % 100 == 0 && click_at < to {
            clicks.push(Click {
                impression_id: impression.impression_id,
                campaign,
                ad_id: impression.ad_id,
                timestamp: EventTime::from_stored(click_at),
                user_agent: None,
                invalid: None,
            });
        }
        let converted_at = at + Duration::seconds(60);
        if i % 100 == 50 && converted_at < to {
            let id = ConversionId::new(&format!("bench-{seed}-{i}")).expect("an id");
            conversions.push(conversion(campaign, &impression, converted_at, id));
        }
        batch.push(impression);
        if batch.len() == 5000 {
            batches.push((
                std::mem::take(&mut batch),
                std::mem::take(&mut clicks),
                std::mem::take(&mut conversions),
            ));
        }
    }
    batches.push((batch, clicks, conversions));
    use futures::StreamExt;
    futures::stream::iter(batches)
        .for_each_concurrent(4, |(impressions, clicks, conversions)| async move {
            ingestor.impressions(impressions).await.expect("stored");
            if !clicks.is_empty() {
                ingestor.clicks(clicks).await.expect("stored");
            }
            if !conversions.is_empty() {
                store.write_decided(&conversions).await.expect("stored");
            }
        })
        .await;
}

/// Aggregates every due slice of today, as the background aggregator does; returns how many.
async fn catch_up(app: &App, campaign: CampaignKey) -> usize {
    let slicer = app.slicer().expect("slices are aggregated");
    let mut total = 0;
    loop {
        let today = Day::new(Utc::now().date_naive());
        let aggregated = slicer
            .aggregate_campaign_day(campaign, today, Utc::now())
            .await
            .expect("aggregated");
        total += aggregated;
        if aggregated == 0 {
            return total;
        }
        // Past the margin after the marks of the aggregation's own read.
        tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    }
}

/// (seconds, impressions, slices from aggregates) of today's summary grouped by `grouping`.
async fn summary(
    queries: &Queries,
    campaign: CampaignKey,
    grouping: Grouping,
) -> (f64, u64, usize) {
    let today = Utc::now().date_naive();
    let range = QueryRange::new(today, today, chrono_tz::Tz::UTC).expect("range");
    let started = Instant::now();
    let summary = queries
        .summary(campaign, &range, grouping)
        .await
        .expect("summary");
    (
        started.elapsed().as_secs_f64(),
        summary.totals.impressions,
        summary.aggregated_slices,
    )
}

/// Writes impressions stamped "now" at `per_second` until `stop` is set; counts them.
fn trickle(
    ingestor: Arc<Ingestor>,
    campaign: CampaignKey,
    per_second: f64,
    stop: Arc<AtomicBool>,
    written: Arc<AtomicUsize>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        // Ten writes a second, each of a tenth of the rate.
        let mut ticks = tokio::time::interval(std::time::Duration::from_millis(100));
        let mut owed = 0.0;
        while !stop.load(Ordering::Relaxed) {
            ticks.tick().await;
            owed += per_second / 10.0;
            let count = owed as usize;
            owed -= count as f64;
            let now = Utc::now();
            let events: Vec<Impression> = (0..count)
                .map(|_| {
                    impression(
                        campaign,
                        AdId::new(Uuid::from_u128(rng.random_range(1..=ADS as u128))),
                        UserId::new(Uuid::from_u128(rng.random())),
                        now,
                        ImpressionId::new(Uuid::from_u128(rng.random())),
                    )
                })
                .collect();
            if !events.is_empty() {
                ingestor.impressions(events).await.expect("stored");
                written.fetch_add(count, Ordering::Relaxed);
            }
        }
    })
}

fn fresh_campaign() -> CampaignKey {
    CampaignKey {
        advertiser_id: AdvertiserId::new(Uuid::new_v4()),
        campaign_id: CampaignId::new(Uuid::new_v4()),
    }
}

async fn configure(store: &Arc<dyn Store>, campaign: CampaignKey) {
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
        .expect("configured");
}

/// The open-day read's own account of a summary (`adevents_open_day_*` metrics): seconds spent
/// on the slices' aggregates and on the stretches read raw, and raw rows read.
#[derive(Debug, Clone, Copy, Default)]
struct OpenDayMetrics {
    aggregates: f64,
    raw: f64,
    rows: f64,
    /// The embedded store's range reads of events by time answered from the newest seconds
    /// it holds in memory, and from its engine.
    from_memory: f64,
    from_engine: f64,
}

impl OpenDayMetrics {
    fn now(handle: &PrometheusHandle) -> Self {
        let text = handle.render();
        let value = |prefix: &str| -> f64 {
            text.lines()
                .filter(|line| line.starts_with(prefix))
                .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        Self {
            aggregates: value("adevents_open_day_read_seconds_sum{part=\"aggregates\"}"),
            raw: value("adevents_open_day_read_seconds_sum{part=\"raw\"}"),
            rows: value("adevents_open_day_rows_read_total"),
            from_memory: value("adevents_embedded_span_reads_total{from=\"memory\"}"),
            from_engine: value("adevents_embedded_span_reads_total{from=\"engine\"}"),
        }
    }

    fn since(&self, before: &Self) -> Self {
        Self {
            aggregates: self.aggregates - before.aggregates,
            raw: self.raw - before.raw,
            rows: self.rows - before.rows,
            from_memory: self.from_memory - before.from_memory,
            from_engine: self.from_engine - before.from_engine,
        }
    }
}

/// One grouping's rounds: whole summaries' seconds and their open-day parts.
#[derive(Debug, Clone, Default)]
struct Timing {
    totals: Vec<f64>,
    parts: Vec<OpenDayMetrics>,
}

impl Timing {
    fn add(&mut self, seconds: f64, parts: OpenDayMetrics) {
        self.totals.push(seconds);
        self.parts.push(parts);
    }

    fn total(&self) -> f64 {
        support::median(self.totals.clone())
    }

    /// The first call after the phase's load: nothing of the open stretch kept yet.
    fn first(&self) -> f64 {
        self.totals.first().copied().unwrap_or_default()
    }

    fn part(&self, of: impl Fn(&OpenDayMetrics) -> f64) -> f64 {
        support::median(self.parts.iter().map(of).collect())
    }

    fn aggregates(&self) -> f64 {
        self.part(|parts| parts.aggregates)
    }

    fn raw(&self) -> f64 {
        self.part(|parts| parts.raw)
    }

    fn raw_rows(&self) -> f64 {
        self.part(|parts| parts.rows)
    }
}

const GROUPINGS: [(Grouping, &str); 3] = [
    (Grouping::Hour, "hour"),
    (Grouping::Day, "day"),
    (Grouping::Ad, "ad"),
];

/// The phases on one store: loads, aggregates and times; prints the table.
async fn phases(
    name: &str,
    store: Arc<dyn Store>,
    sizes: &[usize],
    rounds: usize,
    metrics: &PrometheusHandle,
) {
    let compare_raw = support::env_knob("BENCH_COMPARE_RAW", 1) != 0;
    let (settings, ingestor) = ingestor_for(&store);
    let ingestor = Arc::new(ingestor);
    let queries = Queries::new(
        Arc::clone(&store),
        Arc::clone(&settings),
        QueryOptions::default(),
    );
    // The same summaries with nothing of the open stretch kept: read raw every time.
    let unkept = Queries::new(
        Arc::clone(&store),
        Arc::clone(&settings),
        QueryOptions {
            keep_open_stretches: false,
            ..QueryOptions::default()
        },
    );
    let app = App::new(Arc::clone(&store), Options::default());
    let campaign = fresh_campaign();
    configure(&store, campaign).await;
    println!("## {name}\n");
    let mut rows = Vec::new();
    let mut loaded = 0;
    for (phase, size) in sizes.iter().enumerate() {
        let now = Utc::now();
        let closed = closed_stretch(now);
        let started = Instant::now();
        load(
            (store.as_ref(), &ingestor),
            campaign,
            size - loaded,
            closed,
            phase as u64,
        )
        .await;
        let load_seconds = started.elapsed().as_secs_f64();
        loaded = *size;
        tokio::time::sleep(std::time::Duration::from_secs(6)).await;
        let started = Instant::now();
        let slices = catch_up(&app, campaign).await;
        let aggregate_seconds = started.elapsed().as_secs_f64();
        // A realistic open stretch: its events so far at the daily rate, then a trickle
        // (with BENCH_OPEN_BACKLOG=0, the trickle alone: the stretch holds only what it wrote
        // while timing).
        let per_second = *size as f64 / 86_400.0;
        let now = Utc::now();
        let open_from = closed_stretch(now).1;
        let backlog = if support::env_knob("BENCH_OPEN_BACKLOG", 1) == 0 {
            0
        } else {
            (per_second * (now - open_from).num_seconds() as f64) as usize
        };
        load(
            (store.as_ref(), &ingestor),
            campaign,
            backlog,
            (open_from, now),
            100 + phase as u64,
        )
        .await;
        let stop = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicUsize::new(0));
        let trickling = trickle(
            Arc::clone(&ingestor),
            campaign,
            per_second,
            Arc::clone(&stop),
            Arc::clone(&written),
        );
        // Loaded at once, the backlog's events are late by up to minutes, and on Cassandra
        // they mark their slices, as events arriving as they happen would not: what a summary
        // keeps there answers only once the marks are older than their margin (6 s).
        tokio::time::sleep(std::time::Duration::from_secs(7)).await;
        let mut timings: Vec<Timing> = vec![Timing::default(); GROUPINGS.len()];
        let mut unkept_timings: Vec<Timing> = vec![Timing::default(); GROUPINGS.len()];
        let mut answered = (0, 0);
        let timed_from = OpenDayMetrics::now(metrics);
        println!("  timing phase {}", phase + 1);
        for round in 0..rounds {
            for (index, (grouping, _)) in GROUPINGS.iter().enumerate() {
                // Side by side, the order alternating; the kept one first in the first round.
                for kept in [round % 2 == 0, round % 2 == 1] {
                    if !kept && !compare_raw {
                        continue;
                    }
                    let before = OpenDayMetrics::now(metrics);
                    let (seconds, impressions, aggregated) = if kept {
                        summary(&queries, campaign, *grouping).await
                    } else {
                        summary(&unkept, campaign, *grouping).await
                    };
                    let parts = OpenDayMetrics::now(metrics).since(&before);
                    if kept {
                        timings[index].add(seconds, parts);
                        answered = (impressions, aggregated);
                    } else {
                        unkept_timings[index].add(seconds, parts);
                    }
                }
            }
        }
        let span_reads = OpenDayMetrics::now(metrics).since(&timed_from);
        stop.store(true, Ordering::Relaxed);
        trickling.await.expect("trickle");
        let open_events = backlog + written.load(Ordering::Relaxed);
        rows.push((
            *size,
            load_seconds,
            slices,
            aggregate_seconds,
            timings,
            open_events,
            unkept_timings,
        ));
        println!(
            "  phase {}: {size} impressions loaded in {load_seconds:.0} s, {slices} slices aggregated in {aggregate_seconds:.1} s, open stretch {open_events} events, answer {} impressions from {} aggregated slices; range reads by time while timing (embedded): {:.0} from memory, {:.0} from the engine",
            phase + 1,
            answered.0,
            answered.1,
            span_reads.from_memory,
            span_reads.from_engine
        );
    }
    println!(
        "\n| {name}: today | group_by | summary (ms) | × smallest | first call (ms) | from slice aggregates (ms) | × smallest | read raw: events | ms | µs per event |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for (index, (_, label)) in GROUPINGS.iter().enumerate() {
        let first = &rows[0].4[index];
        let (base_total, base_aggregates) = (first.total(), first.aggregates());
        for (size, _, _, _, timings, _, _) in &rows {
            let timing = &timings[index];
            let (total, aggregates, raw, events) = (
                timing.total(),
                timing.aggregates(),
                timing.raw(),
                timing.raw_rows(),
            );
            println!(
                "| {size} | {label} | {:.1} | {:.2} | {:.1} | {:.1} | {:.2} | {events:.0} | {:.1} | {:.2} |",
                total * 1000.0,
                total / base_total,
                timing.first() * 1000.0,
                aggregates * 1000.0,
                aggregates / base_aggregates,
                raw * 1000.0,
                raw * 1e6 / events.max(1.0),
            );
        }
    }
    println!(
        "\n| {name}: today | group_by | read raw every time (ms) | × smallest | kept ÷ read raw every time |\n|---|---|---|---|---|"
    );
    for (index, (_, label)) in GROUPINGS.iter().enumerate() {
        let base = rows[0].6[index].total();
        for (size, _, _, _, timings, _, unkept) in &rows {
            let total = unkept[index].total();
            println!(
                "| {size} | {label} | {:.1} | {:.2} | {:.2} |",
                total * 1000.0,
                total / base,
                timings[index].total() / total,
            );
        }
    }
    println!(
        "\n| {name}: phase | loaded (s) | slices aggregated | catch-up (s) | open stretch events |\n|---|---|---|---|---|"
    );
    for (size, load_seconds, slices, aggregate_seconds, _, open_events, _) in &rows {
        println!(
            "| {size} | {load_seconds:.0} | {slices} | {aggregate_seconds:.1} | {open_events} |"
        );
    }
}

/// HTTP ingestion of a backfill (batches of 1,000 impressions spread over today's closed
/// slices, every batch marking slices) on a server whose aggregator works every second,
/// against one without it, interleaved rounds of 15 s each (the order alternating).
async fn ingest_with_and_without(name: &str, store: Arc<dyn Store>, rounds: usize) {
    let mut per_second: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let campaign = fresh_campaign();
    configure(&store, campaign).await;
    for round in 0..rounds * 2 {
        // with, without; without, with; ...
        let aggregating = (round % 2 == 0) == (round / 2 % 2 == 0);
        let mut options = Options::default();
        options.service.slice_interval = aggregating.then_some(std::time::Duration::from_secs(1));
        options.service.access.mode = adevents::access::AuthMode::Off;
        options.edge.rate_limits.ingest_events_per_second = None;
        let app = App::new(Arc::clone(&store), options);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("port");
        let address = listener.local_addr().expect("address");
        let server = tokio::spawn(async move { app.serve(listener, std::future::pending()).await });
        let deadline = Instant::now() + std::time::Duration::from_secs(15);
        let sent = Arc::new(AtomicUsize::new(0));
        let client = reqwest::Client::new();
        let started = Instant::now();
        let senders: Vec<_> = (0..4)
            .map(|sender| {
                let (client, sent) = (client.clone(), Arc::clone(&sent));
                tokio::spawn(async move {
                    let mut rng =
                        rand_chacha::ChaCha8Rng::seed_from_u64(round as u64 * 10 + sender);
                    while Instant::now() < deadline {
                        let (from, to) = closed_stretch(Utc::now());
                        let span = (to - from).num_milliseconds().max(1);
                        let batch: Vec<serde_json::Value> = (0..1000)
                            .map(|_| {
                                let at = from + Duration::milliseconds(rng.random_range(0..span));
                                serde_json::json!({
                                    "impression_id": Uuid::from_u128(rng.random()),
                                    "advertiser_id": campaign.advertiser_id.as_uuid(),
                                    "campaign_id": campaign.campaign_id.as_uuid(),
                                    "ad_id": Uuid::from_u128(rng.random_range(1..=ADS as u128)),
                                    "user_id": Uuid::from_u128(rng.random_range(1..100_001u128)),
                                    "timestamp": at.to_rfc3339(),
                                })
                            })
                            .collect();
                        // As an ad server does: a 503 (the event index behind, pushing
                        // back) is sent again after its Retry-After.
                        loop {
                            let response = client
                                .post(format!("http://{address}/v1/impressions"))
                                .json(&batch)
                                .send()
                                .await
                                .expect("answered");
                            let status = response.status();
                            if status == reqwest::StatusCode::SERVICE_UNAVAILABLE {
                                let after = response
                                    .headers()
                                    .get(reqwest::header::RETRY_AFTER)
                                    .and_then(|value| value.to_str().ok()?.parse::<u64>().ok())
                                    .unwrap_or(1);
                                tokio::time::sleep(std::time::Duration::from_secs(after)).await;
                                continue;
                            }
                            let body = response.text().await.unwrap_or_default();
                            assert!(status.is_success(), "{status} {body}");
                            break;
                        }
                        sent.fetch_add(batch.len(), Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for sender in senders {
            sender.await.expect("sender");
        }
        let rate = sent.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
        per_second[usize::from(!aggregating)].push(rate);
        server.abort();
        println!(
            "  round {}: {} aggregator, {rate:.0} impressions/s",
            round / 2 + 1,
            if aggregating {
                "with the"
            } else {
                "without the"
            }
        );
    }
    let with = support::median(per_second[0].clone());
    let without = support::median(per_second[1].clone());
    println!(
        "\n| {name}: HTTP ingest of a backfill | impressions/s (median of {rounds}) |\n|---|---|\n| slice aggregator every 1 s | {with:.0} |\n| no slice aggregator | {without:.0} |\n| ratio | {:.2} |",
        with / without
    );
}

/// Passes of the slice aggregator over `count` quiet campaigns (one impression each, an hour
/// ago, every closed slice aggregated), so that a pass only finds that nothing is due: its
/// time with the states read one at a time against `fan_out.concurrency` at once.
async fn quiet_passes(name: &str, store: Arc<dyn Store>, count: usize, rounds: usize) {
    let (_, ingestor) = ingestor_for(&store);
    let at = (Utc::now() - Duration::hours(1)).max(
        Utc::now()
            .duration_trunc(Duration::days(1))
            .expect("truncated"),
    );
    let campaigns: Vec<CampaignKey> = (0..count).map(|_| fresh_campaign()).collect();
    let impressions: Vec<Impression> = campaigns
        .iter()
        .map(|campaign| {
            impression(
                *campaign,
                AdId::new(Uuid::from_u128(1)),
                UserId::new(Uuid::new_v4()),
                at,
                ImpressionId::new(Uuid::new_v4()),
            )
        })
        .collect();
    for batch in impressions.chunks(1000) {
        ingestor.impressions(batch.to_vec()).await.expect("stored");
    }
    let with_concurrency = |concurrency: usize| {
        let mut options = Options::default();
        options.service.queries.fan_out = adevents::query::FanOut { concurrency };
        App::new(Arc::clone(&store), options)
            .slicer()
            .expect("slices are aggregated")
    };
    let (one_at_a_time, at_once) = (with_concurrency(1), with_concurrency(64));
    let started = Instant::now();
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(6)).await;
        if at_once.aggregate_due(Utc::now()).await.expect("aggregated") == 0 {
            break;
        }
    }
    println!(
        "  {count} quiet campaigns: every closed slice aggregated in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let mut seconds: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds * 2 {
        let at_once_now = round % 2 == 1;
        let slicer = if at_once_now {
            &at_once
        } else {
            &one_at_a_time
        };
        let started = Instant::now();
        let aggregated = slicer.aggregate_due(Utc::now()).await.expect("aggregated");
        let elapsed = started.elapsed().as_secs_f64();
        println!(
            "  round {}: {} {elapsed:.3} s, {aggregated} slices aggregated",
            round / 2 + 1,
            if at_once_now {
                "64 at once"
            } else {
                "one at a time"
            }
        );
        seconds[usize::from(at_once_now)].push(elapsed);
    }
    let (one, many) = (
        support::median(seconds[0].clone()),
        support::median(seconds[1].clone()),
    );
    println!(
        "\n| {name}: a pass over {count} quiet campaigns | seconds (median of {rounds}) |\n|---|---|\n| states read one at a time | {one:.3} |\n| 64 at once | {many:.3} |\n| ratio | {:.2} |",
        many / one
    );
}

#[tokio::main]
async fn main() {
    let stores: Vec<String> = std::env::var("BENCH_STORES")
        .unwrap_or_else(|_| "embedded,cassandra".to_owned())
        .split(',')
        .map(str::to_owned)
        .collect();
    let rounds = support::env_knob("BENCH_ROUNDS", 5);
    let metrics = PrometheusBuilder::new()
        .install_recorder()
        .expect("the bench's metrics recorder");
    let ingest_rounds = support::env_knob("BENCH_INGEST_ROUNDS", 6);
    let quiet_campaigns = support::env_knob("BENCH_QUIET_CAMPAIGNS", 2000);
    for name in stores {
        let (store, sizes): (Arc<dyn Store>, Vec<usize>) = match name.as_str() {
            "embedded" => (
                Arc::new(support::embedded_store("today", Fsync::Never)),
                knob_list("BENCH_EMBEDDED_PHASES", "1000000,3000000,10000000"),
            ),
            "cassandra" => (
                Arc::new(support::store(WriteMode::Batch).await),
                knob_list("BENCH_CASSANDRA_PHASES", "200000,1000000,3000000"),
            ),
            other => panic!("unknown store {other}"),
        };
        // Ingestion first, on a store not yet busy compacting the phases' millions of rows.
        if ingest_rounds > 0 {
            ingest_with_and_without(&name, Arc::clone(&store), ingest_rounds).await;
        }
        if quiet_campaigns > 0 {
            quiet_passes(&name, Arc::clone(&store), quiet_campaigns, rounds).await;
        }
        if !sizes.is_empty() {
            phases(&name, store, &sizes, rounds, &metrics).await;
        }
    }
}
