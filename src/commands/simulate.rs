//! `adevents simulate`: generate a site's traffic (written as CSV when asked), send it to a
//! running server, then print the server's unique-visitor table beside the exact counts.

use super::CommandError;
use crate::cli::SimulateArgs;
use crate::query::range::MAX_DAYS;
use crate::simulate::report::{compare, existing_visits, table};
use crate::simulate::send::send_all;
use crate::simulate::traffic::{
    PAGE_FEATURE, REFERER_FEATURE, SimulatedVisit, TrafficSpec, exact_counts, generate,
};
use std::path::Path;
use std::time::Duration;

pub async fn simulate(args: SimulateArgs) -> Result<(), CommandError> {
    let spec = TrafficSpec {
        guids: args.guids,
        visits: args.visits,
        referers: args.referers.clone(),
        pages: args.pages.clone(),
        from: args.from,
        to: args.to,
        seed: args.seed,
    };
    // The table is one uniques query over the whole range: refuse what it could not answer
    // before sending anything.
    let days = (args.to - args.from).num_days();
    if days > MAX_DAYS {
        return Err(CommandError::Simulate(format!(
            "--from to --to covers {days} days; a uniques query answers at most {MAX_DAYS}"
        )));
    }
    let visits = generate(&spec).map_err(|error| CommandError::Simulate(error.to_string()))?;
    println!(
        "generated {} visits by {} guids from {} to {} (exclusive)",
        visits.len(),
        args.guids,
        args.from,
        args.to,
    );
    if let Some(path) = &args.csv {
        write_csv(path, &visits)?;
        println!("written to {}", path.display());
    }
    let client = client(args.key.as_deref())?;
    if args.key.is_some() {
        register_site(&client, &args.server, &args.site).await?;
    }
    let last_day = args.to.pred_opt().unwrap_or(args.to);
    let earlier = existing_visits(&client, &args.server, &args.site, args.from, last_day)
        .await
        .map_err(|error| CommandError::Simulate(error.to_string()))?;
    if earlier > 0 {
        eprintln!(
            "warning: {} already has {earlier} visits from {} to {last_day}: the server's counts \
             below include them and may not match this run's exact counts (the same --seed \
             sends the same beacons, which count once); use a new --site for a clean comparison",
            args.site, args.from
        );
    }
    let started = std::time::Instant::now();
    send_all(
        &client,
        &args.server,
        &args.site,
        &visits,
        usize::from(args.concurrency),
        !args.quiet,
    )
    .await
    .map_err(|error| CommandError::Simulate(error.to_string()))?;
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "sent {} beacons in {elapsed:.1} s ({:.0}/s)",
        visits.len(),
        visits.len() as f64 / elapsed.max(f64::EPSILON)
    );
    tokio::time::sleep(args.settle).await;
    let rows = compare(
        &client,
        &args.server,
        &args.site,
        args.from,
        last_day,
        &exact_counts(&visits),
    )
    .await
    .map_err(|error| CommandError::Simulate(error.to_string()))?;
    println!(
        "\nunique visitors of {} from {} to {last_day} (UTC):\n",
        args.site, args.from
    );
    print!("{}", table(&rows, &[REFERER_FEATURE, PAGE_FEATURE]));
    if earlier > 0 {
        println!(
            "\n(the server's counts include {earlier} visits that were there before this run)"
        );
    }
    Ok(())
}

/// The HTTP client of the simulation: every request carries `key` (beacons ignore it).
fn client(key: Option<&str>) -> Result<reqwest::Client, CommandError> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(key) = key {
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {key}"))
            .map_err(|_| CommandError::Simulate("--key is not a valid header value".into()))?;
        value.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .default_headers(headers)
        .build()
        .map_err(|error| CommandError::Simulate(error.to_string()))
}

/// Registers the site for beacons (`PUT /v1/sites/{site}` with an empty body changes nothing
/// else): a server with keys on refuses beacons for unregistered sites.
async fn register_site(
    client: &reqwest::Client,
    server: &str,
    site: &str,
) -> Result<(), CommandError> {
    let url = format!("{}/v1/sites/{site}", server.trim_end_matches('/'));
    let response = client
        .put(&url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body("{}")
        .send()
        .await
        .map_err(|error| CommandError::Simulate(format!("registering {site}: {error}")))?;
    if !response.status().is_success() {
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        return Err(CommandError::Simulate(format!(
            "registering {site} answered {status}: {body} (registering needs an admin key)"
        )));
    }
    Ok(())
}

fn write_csv(path: &Path, visits: &[SimulatedVisit]) -> Result<(), CommandError> {
    let failed =
        |error: csv::Error| CommandError::Simulate(format!("writing {}: {error}", path.display()));
    let mut writer = csv::Writer::from_path(path).map_err(failed)?;
    writer
        .write_record(["guid", "timestamp", REFERER_FEATURE, PAGE_FEATURE])
        .map_err(failed)?;
    for visit in visits {
        writer
            .write_record([
                visit.guid.as_str(),
                &visit.timestamp.to_string(),
                &visit.referer,
                &visit.page,
            ])
            .map_err(failed)?;
    }
    writer
        .flush()
        .map_err(|error| failed(csv::Error::from(error)))
}
