//! The `adevents` binary: parse flags, set up logging, run the chosen command.

use adevents::cli::{Cli, Command};
use adevents::commands;
use adevents::telemetry::{self, LogTo};
use clap::Parser;
use std::process::ExitCode;

/// Blocking threads the runtime may start. Only the embedded store uses them, at most 8 calls
/// at once; without a cap, bursts of short calls leave dozens of idle threads behind, each
/// holding allocator pages.
const MAX_BLOCKING_THREADS: usize = 16;

fn main() -> ExitCode {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(MAX_BLOCKING_THREADS)
        .build()
    {
        Ok(runtime) => runtime.block_on(run()),
        Err(error) => {
            eprintln!("adevents: cannot start the async runtime: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> ExitCode {
    let command = Cli::parse().into_command();
    // A command whose output is its answer logs to standard error.
    let log_to = match command {
        Command::Keys(_) | Command::Privacy(_) => LogTo::Stderr,
        _ => LogTo::Stdout,
    };
    telemetry::init(command.log(), log_to);
    let outcome = match command {
        Command::Serve(args) => commands::serve(*args).await,
        Command::Migrate(args) => commands::migrate(args).await,
        Command::Simulate(args) => commands::simulate(args).await,
        Command::Rollup(args) => commands::rollup(args).await,
        Command::Keys(args) => commands::keys(args).await,
        Command::Privacy(args) => commands::privacy(args).await,
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "adevents failed");
            ExitCode::FAILURE
        }
    }
}
