//! `adevents simulate`: generate a site's traffic, write it as CSV, send it to a running
//! server, then print the server's unique-visitor table beside the exact counts.

use super::CommandError;
use crate::cli::SimulateArgs;
use crate::query::range::MAX_DAYS;
use crate::simulate::report::{compare, table};
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
    write_csv(&args.csv, &visits)?;
    println!(
        "generated {} visits by {} guids from {} to {} (exclusive); written to {}",
        visits.len(),
        args.guids,
        args.from,
        args.to,
        args.csv.display()
    );
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|error| CommandError::Simulate(error.to_string()))?;
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
    let last_day = args.to.pred_opt().unwrap_or(args.to);
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
