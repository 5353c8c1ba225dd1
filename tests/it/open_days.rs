//! Days not yet sealed, answered from their closed 15-minute slices: every summary equals the
//! whole-day raw read field for field, before the slices are aggregated, after, under late
//! events, earlier clicks, billable windows across a slice's end, retries, a second server
//! taking half the events, and fresh server instances at once, and under an id stored again
//! with another timestamp (at once on the embedded store, once the aggregator has found it on
//! Cassandra, and across a bucket-count change made that day); and a background aggregator
//! makes a marked slice answer from its aggregate again within seconds; and a summary that
//! reads the open stretch again (keeping what it read, by piece) counts what another server
//! wrote since, whatever its time, as the raw read does; and a valid click now makes
//! the invalid first click of a closed slice count as valid at once.

use crate::common::events::{Campaign, configure_buckets, get, post_all, summary};
use crate::common::{Backend, TestServer, eventually, test_options};
use adevents::app::{App, Options};
use adevents::domain::time::Day;
use chrono::{DateTime, Duration, DurationRound, Utc};
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration as StdDuration;
use uuid::Uuid;

conformance!(
    an_open_day_from_its_slices_equals_the_raw_read_under_late_events_and_duplicates,
    a_marked_slice_answers_from_its_aggregate_again_within_the_interval,
    a_duplicate_across_a_bucket_change_made_that_day_is_found,
    the_open_stretch_read_again_counts_what_was_written_since,
    a_valid_click_now_makes_the_invalid_first_click_of_a_closed_slice_count,
);

/// Options whose slices are aggregated only when the test says so (or never, for the raw
/// reference).
fn options(slices: bool) -> Options {
    let mut options = test_options();
    options.service.slice_interval = slices.then_some(StdDuration::from_secs(3600));
    options
}

fn impression(campaign: &Campaign, id: Uuid, ad: Uuid, user: Uuid, at: DateTime<Utc>) -> Value {
    let mut event = campaign.impression(id, ad, at);
    event["user_id"] = Value::String(user.to_string());
    event
}

/// `count` impressions of `ad`, each of a new user, `every` apart from `first`.
fn spread(
    campaign: &Campaign,
    ad: Uuid,
    count: i32,
    first: DateTime<Utc>,
    every: Duration,
) -> Vec<Value> {
    (0..count)
        .map(|i| {
            impression(
                campaign,
                Uuid::new_v4(),
                ad,
                Uuid::new_v4(),
                first + every * i,
            )
        })
        .collect()
}

/// The queries a dashboard makes of the days from `first` to today.
fn queries(first: DateTime<Utc>) -> Vec<String> {
    let (from, to) = (first.date_naive(), Utc::now().date_naive());
    ["hour", "day", "ad", "none"]
        .iter()
        .map(|group| format!("from={from}&to={to}&group_by={group}"))
        .chain([format!("from={from}&to={to}&group_by=hour&tz=Asia/Kolkata")])
        .collect()
}

/// Asserts every query answers the same from each server as from the raw reference, but for
/// which slices were aggregated; returns how many slices the first server's hourly answer
/// took from aggregates.
async fn assert_same_as_raw(
    servers: &[&TestServer],
    raw: &TestServer,
    campaign: &Campaign,
    first: DateTime<Utc>,
    when: &str,
) -> u64 {
    let mut aggregated = 0;
    for query in queries(first) {
        let mut expected = summary(raw, campaign, &query).await;
        assert_eq!(expected["aggregated_slices"], 0, "{when}: {query}");
        expected["aggregated_slices"] = Value::Null;
        for (index, server) in servers.iter().enumerate() {
            let mut answer = summary(server, campaign, &query).await;
            if index == 0 && query.ends_with("group_by=hour") {
                aggregated = answer["aggregated_slices"].as_u64().expect("a count");
            }
            answer["aggregated_slices"] = Value::Null;
            assert_eq!(answer, expected, "{when}: server {index}, {query}");
        }
    }
    // Reports by ad are the summary's ad rows, from the same aggregates.
    let (from, to) = (first.date_naive(), Utc::now().date_naive());
    let path = format!("{}/report", campaign.path());
    let query = format!("from={from}&to={to}&dimension=ad_id");
    let (_, expected) = get(raw, &path, &query).await;
    for (index, server) in servers.iter().enumerate() {
        let (status, report) = get(server, &path, &query).await;
        assert_eq!(status, StatusCode::OK, "{report}");
        assert_eq!(report, expected, "{when}: server {index}, report by ad");
    }
    aggregated
}

async fn aggregated_slices(server: &TestServer, campaign: &Campaign, query: &str) -> u64 {
    let answer = summary(server, campaign, query).await;
    answer["aggregated_slices"].as_u64().expect("a count")
}

/// How many times an id stored at `a` and at `b` counts: once per UTC day (docs/API.md), so
/// twice when a run near midnight puts its copies on either side.
fn copies_counted(a: DateTime<Utc>, b: DateTime<Utc>) -> i64 {
    if a.date_naive() == b.date_naive() {
        1
    } else {
        2
    }
}

/// How many slices of the days from `first`'s to `last`'s (the days holding events: a day
/// without any has nothing to aggregate) are past their grace and margin at `now`.
fn closed_slices(first: DateTime<Utc>, last: DateTime<Utc>, now: DateTime<Utc>) -> u64 {
    let day_start = first.duration_trunc(Duration::days(1)).expect("a day");
    let days_end = last.duration_trunc(Duration::days(1)).expect("a day") + Duration::days(1);
    let due = (now - Duration::minutes(2) - Duration::seconds(5)).min(days_end);
    ((due - day_start).num_seconds() / 900) as u64
}

/// How many slices of the days from `first`'s to today are past their grace and margin now.
fn due_now(first: DateTime<Utc>) -> u64 {
    let now = Utc::now();
    closed_slices(first, now, now)
}

/// Aggregates the due slices of `campaign`'s days from `first` to today as a server's
/// background aggregator does; returns how many it aggregated.
async fn aggregate(app: &App, campaign: &Campaign, first: DateTime<Utc>) -> usize {
    let slicer = app.slicer().expect("slices are aggregated");
    let mut aggregated = 0;
    for day in Day::new(first.date_naive()).through(Day::new(Utc::now().date_naive())) {
        aggregated += slicer
            .aggregate_campaign_day(campaign.key(), day, Utc::now())
            .await
            .expect("aggregated");
    }
    aggregated
}

async fn an_open_day_from_its_slices_equals_the_raw_read_under_late_events_and_duplicates(
    backend: Backend,
) {
    let campaign = Campaign::fresh();
    configure_buckets(backend, &campaign, 4, "always").await;
    // Two servers taking events, each with its own store connection (two processes' worth on
    // Cassandra), and one that reads every open day raw and whole: the reference.
    let first_server = backend.server_with(options(true)).await;
    let second_server = backend.server_with(options(true)).await;
    let raw = backend.server_with(options(false)).await;
    let aggregator = App::new(backend.store().await, options(true));
    let other_aggregator = App::new(backend.store().await, options(true));

    // Four closed slices, the first starting 80 to 95 minutes ago; every event at least 20
    // minutes old, so every slice is past its grace.
    let start = (Utc::now() - Duration::minutes(80))
        .duration_trunc(Duration::minutes(15))
        .expect("truncated");
    let slice = |n: i64| start + Duration::minutes(15 * n);
    // A slice whose start lies inside a 40-second billable window (windows cross the start of
    // every other slice, 15 minutes being 22.5 windows).
    let crossing = (1..=2)
        .map(slice)
        .find(|boundary| boundary.timestamp() % 40 != 0)
        .expect("one of two neighbouring slice starts is crossed");
    let ads: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
    let users: Vec<Uuid> = (0..40).map(|_| Uuid::new_v4()).collect();

    let mut impressions = Vec::new();
    let mut clicks = Vec::new();
    for i in 0..240i64 {
        let at = start + Duration::seconds(i * 13 + 1);
        let id = Uuid::new_v4();
        let ad = ads[(i % 3) as usize];
        impressions.push(impression(&campaign, id, ad, users[(i % 40) as usize], at));
        if i % 7 == 0 {
            clicks.push(campaign.click(id, ad, at + Duration::seconds(30)));
        }
    }
    // One user on each side of the crossed slice start: one billable window, counted before.
    let crosser = Uuid::new_v4();
    impressions.push(impression(
        &campaign,
        Uuid::new_v4(),
        ads[0],
        crosser,
        crossing - Duration::seconds(8),
    ));
    impressions.push(impression(
        &campaign,
        Uuid::new_v4(),
        ads[1],
        crosser,
        crossing + Duration::seconds(4),
    ));
    // An impression stored later with an earlier timestamp in an earlier slice.
    let duplicated = Uuid::new_v4();
    impressions.push(impression(
        &campaign,
        duplicated,
        ads[2],
        users[0],
        slice(2) + Duration::minutes(3),
    ));
    // An impression whose earlier click arrives late.
    let reclicked = Uuid::new_v4();
    impressions.push(impression(
        &campaign,
        reclicked,
        ads[1],
        users[1],
        slice(0) + Duration::minutes(1),
    ));
    clicks.push(campaign.click(reclicked, ads[1], slice(2) + Duration::minutes(5)));
    // A user whose later impression comes first and whose earlier one, opening the window
    // that crosses the slice start, arrives late.
    let late_crosser = Uuid::new_v4();
    impressions.push(impression(
        &campaign,
        Uuid::new_v4(),
        ads[2],
        late_crosser,
        crossing + Duration::seconds(5),
    ));

    let (half, rest) = impressions.split_at(impressions.len() / 2);
    post_all(&first_server, "/v1/impressions", half, 100).await;
    post_all(&second_server, "/v1/impressions", rest, 100).await;
    post_all(&first_server, "/v1/clicks", &clicks, 100).await;
    // An ad server's retry of a whole batch changes nothing.
    post_all(&second_server, "/v1/impressions", half, 100).await;
    let posted_at = std::time::Instant::now();
    let servers = [&first_server, &second_server];
    assert_same_as_raw(&servers, &raw, &campaign, start, "before aggregation").await;
    // Every event was late, so its slice is marked: an aggregation whose read starts within
    // the seals' 5-second margin of a mark is not taken as current (the margin covers the
    // clocks of several servers).
    tokio::time::sleep(StdDuration::from_secs(6).saturating_sub(posted_at.elapsed())).await;

    // Both processes aggregate at once (other tests' servers may join in: it is all one
    // store, and any number of aggregators agree).
    tokio::join!(
        aggregate(&aggregator, &campaign, start),
        aggregate(&other_aggregator, &campaign, start)
    );
    let aggregated = assert_same_as_raw(&servers, &raw, &campaign, start, "aggregated").await;
    assert!(
        aggregated >= 4,
        "closed slices answer from their aggregates: {aggregated}"
    );

    // An id stored twice, late, in aggregated slices apart, one copy through each server: the
    // two stretches read raw are read together, so it counts once, at its earlier copy.
    let twice = Uuid::new_v4();
    let copy = |ad: Uuid, at: DateTime<Utc>| vec![impression(&campaign, twice, ad, users[2], at)];
    let (later_at, earlier_at) = (
        slice(3) + Duration::minutes(4),
        slice(0) + Duration::minutes(7),
    );
    let later_copy = copy(ads[0], later_at);
    let earlier_copy = copy(ads[1], earlier_at);
    post_all(&first_server, "/v1/impressions", &later_copy, 100).await;
    post_all(&second_server, "/v1/impressions", &earlier_copy, 100).await;
    let apart = assert_same_as_raw(&servers, &raw, &campaign, start, "stored twice").await;
    assert!(
        apart + 2 <= due_now(start),
        "the two marked slices are read raw: {apart} answered from aggregates"
    );

    // Late events for aggregated slices: a new impression, the earlier click, the window's
    // earlier impression. Exact at once: their slices are marked and read raw.
    let late = vec![
        impression(
            &campaign,
            Uuid::new_v4(),
            ads[0],
            Uuid::new_v4(),
            slice(1) + Duration::minutes(2),
        ),
        impression(
            &campaign,
            Uuid::new_v4(),
            ads[0],
            late_crosser,
            crossing - Duration::seconds(3),
        ),
    ];
    post_all(&second_server, "/v1/impressions", &late, 100).await;
    let earlier_click = vec![campaign.click(reclicked, ads[1], slice(0) + Duration::minutes(2))];
    post_all(&first_server, "/v1/clicks", &earlier_click, 100).await;
    let marked = assert_same_as_raw(&servers, &raw, &campaign, start, "late events").await;
    assert!(
        marked < due_now(start),
        "marked slices are read raw: {marked} answered from aggregates"
    );

    // Once the marks settle, the late slices are aggregated again.
    tokio::time::sleep(StdDuration::from_secs(6)).await;
    aggregate(&aggregator, &campaign, start).await;

    // The duplicate's earlier copy, in another aggregated slice. The embedded store learns of
    // the other copy as it writes this one, so both slices are marked and it counts once at
    // once; on Cassandra docs/API.md allows it to count twice until the aggregator has looked
    // the id up (the next pass once its slice's marks settle). From then on it counts once,
    // at that copy, on both.
    let earlier_copy = vec![impression(
        &campaign,
        duplicated,
        ads[2],
        users[0],
        slice(0) + Duration::minutes(9),
    )];
    post_all(&second_server, "/v1/impressions", &earlier_copy, 100).await;
    let marked_at = std::time::Instant::now();
    if backend == Backend::Embedded {
        assert_same_as_raw(&servers, &raw, &campaign, start, "duplicate written").await;
    }
    tokio::time::sleep(StdDuration::from_secs(6).saturating_sub(marked_at.elapsed())).await;
    aggregate(&aggregator, &campaign, start).await;
    let found_at = std::time::Instant::now();
    assert_same_as_raw(&servers, &raw, &campaign, start, "duplicate found").await;

    // The slice the duplicate's later copy was counted in is marked by the finding (before
    // `found_at`); once its mark settles it is aggregated again, and every slice answers from
    // its aggregate. Slices keep closing while the test runs (one every 15 minutes): a second
    // aggregator finds nothing to do but those.
    tokio::time::sleep(StdDuration::from_secs(6).saturating_sub(found_at.elapsed())).await;
    let due_before = due_now(start);
    aggregate(&aggregator, &campaign, start).await;
    let left = aggregate(&other_aggregator, &campaign, start).await as u64;
    let due_after = due_now(start);
    assert!(
        left <= due_after - due_before,
        "every slice is current: {left} aggregated again, {due_before} to {due_after} due"
    );
    let again = assert_same_as_raw(&servers, &raw, &campaign, start, "re-aggregated").await;
    let due_after = due_now(start);
    assert!(
        (due_before..=due_after).contains(&again) && again >= aggregated,
        "every closed slice answers from its aggregate: {again}, {due_before} to {due_after} due"
    );

    // Fresh server instances know nothing but what the store holds.
    let restarted = backend.server_with(options(true)).await;
    assert_same_as_raw(&[&restarted], &raw, &campaign, start, "restarted").await;

    // The counts themselves: each id once, at its earliest copy.
    let totals = summary(&raw, &campaign, &queries(start)[3]).await;
    let twice_counts = copies_counted(later_at, earlier_at);
    let duplicated_counts = copies_counted(
        slice(2) + Duration::minutes(3),
        slice(0) + Duration::minutes(9),
    );
    assert_eq!(
        totals["totals"]["impressions"],
        240 + 2 + duplicated_counts + 1 + 1 + twice_counts + 2
    );
}

async fn a_marked_slice_answers_from_its_aggregate_again_within_the_interval(backend: Backend) {
    let campaign = Campaign::fresh();
    let mut background = test_options();
    background.service.slice_interval = Some(StdDuration::from_secs(1));
    let server = backend.server_with(background).await;
    let raw = backend.server_with(options(false)).await;
    let start = (Utc::now() - Duration::minutes(40))
        .duration_trunc(Duration::minutes(15))
        .expect("truncated");
    let ad = Uuid::new_v4();
    let events = spread(&campaign, ad, 30, start, Duration::seconds(20));
    let last = start + Duration::seconds(20 * 29);
    post_all(&server, "/v1/impressions", &events, 100).await;
    let query = queries(start).remove(0);
    // docs/API.md: a slice answers from its aggregate within the interval (1 s here), the
    // 5-second margin and the aggregation's own time after it closes or is marked (the
    // aggregator here works through every test's campaigns in the shared store).
    let every_closed_slice = || async {
        let closed = closed_slices(start, last, Utc::now());
        aggregated_slices(&server, &campaign, &query).await >= closed
    };
    assert!(
        eventually(StdDuration::from_secs(30), every_closed_slice).await,
        "the background aggregator aggregated every closed slice"
    );
    let late = vec![impression(
        &campaign,
        Uuid::new_v4(),
        ad,
        Uuid::new_v4(),
        start + Duration::seconds(7),
    )];
    post_all(&server, "/v1/impressions", &late, 100).await;
    assert!(
        eventually(StdDuration::from_secs(30), every_closed_slice).await,
        "and the marked slice answers from its new aggregate within seconds"
    );
    let expected = summary(&raw, &campaign, &query).await;
    let answer = summary(&server, &campaign, &query).await;
    assert_eq!(answer["totals"], expected["totals"]);
    assert_eq!(answer["rows"], expected["rows"]);
    assert_eq!(answer["totals"]["impressions"], 31);
}

async fn a_duplicate_across_a_bucket_change_made_that_day_is_found(backend: Backend) {
    let campaign = Campaign::fresh();
    let start = (Utc::now() - Duration::minutes(80))
        .duration_trunc(Duration::minutes(15))
        .expect("truncated");
    let slice = |n: i64| start + Duration::minutes(15 * n);
    // One bucket until 20 minutes into the first slice, eight from then on: a copy is written
    // under the count in force at its own time, so the id's two copies lie in two partitions.
    let change = start + Duration::minutes(20);
    configure_buckets(backend, &campaign, 8, &change.to_rfc3339()).await;
    let server = backend.server_with(options(true)).await;
    let raw = backend.server_with(options(false)).await;
    let aggregator = App::new(backend.store().await, options(true));
    // An id whose bucket under eight is not its bucket under one (bucket 0).
    let twice = std::iter::repeat_with(Uuid::new_v4)
        .find(|id| !xxhash_rust::xxh3::xxh3_64(id.as_bytes()).is_multiple_of(8))
        .expect("an id");
    let ad = Uuid::new_v4();
    let mut impressions = spread(
        &campaign,
        ad,
        40,
        start + Duration::seconds(7),
        Duration::seconds(90),
    );
    impressions.push(impression(
        &campaign,
        twice,
        ad,
        Uuid::new_v4(),
        slice(0) + Duration::minutes(5),
    ));
    post_all(&server, "/v1/impressions", &impressions, 100).await;
    tokio::time::sleep(StdDuration::from_secs(6)).await;
    aggregate(&aggregator, &campaign, start).await;

    // The later copy, late, in another slice and under the other count: the aggregator looks
    // its id up under both counts, finds the earlier copy and records the duplicate.
    let later_copy = impression(
        &campaign,
        twice,
        ad,
        Uuid::new_v4(),
        slice(3) + Duration::minutes(5),
    );
    post_all(&server, "/v1/impressions", &[later_copy], 100).await;
    tokio::time::sleep(StdDuration::from_secs(6)).await;
    aggregate(&aggregator, &campaign, start).await;
    assert_same_as_raw(&[&server], &raw, &campaign, start, "across the change").await;
    let totals = summary(&server, &campaign, &queries(start)[3]).await;
    let twice_counts = copies_counted(
        slice(0) + Duration::minutes(5),
        slice(3) + Duration::minutes(5),
    );
    assert_eq!(totals["totals"]["impressions"], 40 + twice_counts);
}

async fn the_open_stretch_read_again_counts_what_was_written_since(backend: Backend) {
    let campaign = Campaign::fresh();
    configure_buckets(backend, &campaign, 4, "always").await;
    let server = backend.server_with(options(true)).await;
    let raw = backend.server_with(options(false)).await;
    // The last 12 minutes, never aggregated here: the open stretch, read raw.
    let start = Utc::now() - Duration::minutes(12);
    let ads: Vec<Uuid> = (0..2).map(|_| Uuid::new_v4()).collect();
    let users: Vec<Uuid> = (0..6).map(|_| Uuid::new_v4()).collect();
    let at = |i: i64| start + Duration::seconds(i * 10 + 1);
    let ids: Vec<Uuid> = (0..66).map(|_| Uuid::new_v4()).collect();
    let impressions: Vec<Value> = (0..66)
        .map(|i| {
            let index = i as usize;
            impression(
                &campaign,
                ids[index],
                ads[index % 2],
                users[index % 6],
                at(i),
            )
        })
        .collect();
    let clicks: Vec<Value> = (0..66)
        .step_by(5)
        .map(|i| {
            campaign.click(
                ids[i as usize],
                ads[i as usize % 2],
                at(i) + Duration::seconds(15),
            )
        })
        .collect();
    post_all(&server, "/v1/impressions", &impressions, 100).await;
    post_all(&server, "/v1/clicks", &clicks, 100).await;
    assert_same_as_raw(&[&server], &raw, &campaign, start, "first read").await;
    assert_same_as_raw(&[&server], &raw, &campaign, start, "read again").await;

    let since = vec![
        // A later copy of an id read before, and an earlier copy of another: each counts once,
        // at its earliest.
        impression(
            &campaign,
            ids[10],
            ads[0],
            users[4],
            at(10) + Duration::minutes(3),
        ),
        impression(
            &campaign,
            ids[40],
            ads[0],
            users[4],
            at(40) - Duration::minutes(4),
        ),
        // A new user's impression in the middle of what was read.
        impression(
            &campaign,
            Uuid::new_v4(),
            ads[1],
            Uuid::new_v4(),
            at(20) + Duration::seconds(2),
        ),
        // User 0's impression opening the window of a later one read before (at(30), user 0).
        impression(
            &campaign,
            Uuid::new_v4(),
            ads[1],
            users[0],
            at(30) - Duration::seconds(1),
        ),
    ];
    // An earlier click of a clicked impression (its first click moves back), and a first click
    // of one read before unclicked, both at times read before.
    let clicks_since = vec![
        campaign.click(ids[5], ads[1], at(5) + Duration::seconds(5)),
        campaign.click(ids[1], ads[1], at(1) + Duration::seconds(5)),
    ];
    // Through the other server: on Cassandra another process, whose writes the first learns
    // of from the store alone.
    post_all(&raw, "/v1/impressions", &since, 100).await;
    post_all(&raw, "/v1/clicks", &clicks_since, 100).await;
    assert_same_as_raw(&[&server], &raw, &campaign, start, "written since").await;
    assert_same_as_raw(&[&server], &raw, &campaign, start, "read again since").await;

    // What only a kept piece could miss. Read first once the marks of the writes above are
    // older than the margin for servers' clocks, so that what it reads is kept and answers
    // the next read. A copy of an id read before, a second ago: in the seconds read raw
    // every time, and it marks nothing.
    tokio::time::sleep(StdDuration::from_secs(7)).await;
    assert_same_as_raw(&[&server], &raw, &campaign, start, "kept again").await;
    let fresh_copy_at = Utc::now() - Duration::seconds(1);
    let fresh_copy = [impression(
        &campaign,
        ids[50],
        ads[0],
        users[2],
        fresh_copy_at,
    )];
    post_all(&raw, "/v1/impressions", &fresh_copy, 100).await;
    // And a first click in those seconds (on the embedded store, read from the rows it holds
    // in memory, as the fresh copy is).
    let fresh_click = [campaign.click(ids[52], ads[0], fresh_copy_at)];
    post_all(&raw, "/v1/clicks", &fresh_click, 100).await;
    assert_same_as_raw(&[&server], &raw, &campaign, start, "a copy a second ago").await;
    // A new user's impression 40 seconds ago and a later copy of an id read before, 30
    // seconds ago: in time read before (as nothing) and in a slice still open, where no late
    // event marks anything.
    let now = Utc::now();
    let (new_at, copy_at) = (now - Duration::seconds(40), now - Duration::seconds(30));
    let recent = vec![
        impression(&campaign, Uuid::new_v4(), ads[1], users[2], new_at),
        impression(&campaign, ids[60], ads[0], users[0], copy_at),
    ];
    post_all(&raw, "/v1/impressions", &recent, 100).await;
    assert_same_as_raw(
        &[&server],
        &raw,
        &campaign,
        start,
        "written in the open slice",
    )
    .await;

    let totals = summary(&server, &campaign, &queries(start)[3]).await;
    let copies = copies_counted(at(10), at(10) + Duration::minutes(3))
        + copies_counted(at(40) - Duration::minutes(4), at(40))
        + copies_counted(at(60), copy_at)
        + copies_counted(at(50), fresh_copy_at);
    assert_eq!(totals["totals"]["impressions"], 66 - 4 + copies + 3);
    assert_eq!(totals["totals"]["clicks"], 16);
}

/// A click counts once, at its impression's first click, and as valid if any of its clicks
/// is: a valid click in the open stretch changes the count of the closed slice that holds the
/// invalid first click, which is read raw again until it is aggregated again.
async fn a_valid_click_now_makes_the_invalid_first_click_of_a_closed_slice_count(backend: Backend) {
    let campaign = Campaign::fresh();
    let server = backend.server_with(options(true)).await;
    let raw = backend.server_with(options(false)).await;
    let aggregator = App::new(backend.store().await, options(true));
    let start = (Utc::now() - Duration::minutes(40))
        .duration_trunc(Duration::minutes(15))
        .expect("truncated");
    let (id, ad) = (Uuid::new_v4(), Uuid::new_v4());
    let mut events = spread(&campaign, ad, 5, start, Duration::minutes(2));
    events.push(impression(
        &campaign,
        id,
        ad,
        Uuid::new_v4(),
        start + Duration::minutes(1),
    ));
    post_all(&server, "/v1/impressions", &events, 100).await;
    let mut crawler_click = campaign.click(id, ad, start + Duration::minutes(2));
    crawler_click["user_agent"] =
        Value::from("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)");
    post_all(&server, "/v1/clicks", &[crawler_click], 1).await;
    tokio::time::sleep(StdDuration::from_secs(6)).await;
    aggregate(&aggregator, &campaign, start).await;
    let aggregated = assert_same_as_raw(&[&server], &raw, &campaign, start, "aggregated").await;
    assert!(aggregated >= 1, "the first click's slice is aggregated");

    let person_click = campaign.click(id, ad, Utc::now() - Duration::seconds(10));
    post_all(&server, "/v1/clicks", &[person_click], 1).await;
    assert_same_as_raw(&[&server], &raw, &campaign, start, "a valid click now").await;
    let totals = summary(&server, &campaign, &queries(start)[3]).await;
    assert_eq!(totals["totals"]["clicks"], 1, "{totals}");
    assert_eq!(totals["totals"]["invalid_clicks"], 0, "{totals}");
}
