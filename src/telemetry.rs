//! Structured logging: text for people, JSON (one object per line) for log shippers.

use crate::cli::{LogArgs, LogFormat};
use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Where log lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogTo {
    Stdout,
    /// For commands whose standard output is their answer (`keys create-admin` prints a key
    /// that scripts capture).
    Stderr,
}

/// Installs the global subscriber. An invalid `--log-level` falls back to `info` with a
/// warning instead of silencing the process.
pub fn init(args: &LogArgs, to: LogTo) {
    // The embedded engine logs every recovery step at info; keep it to warnings unless asked.
    let directives = if args.log_level.contains("fjall") || args.log_level.contains("lsm_tree") {
        args.log_level.clone()
    } else {
        format!("{},fjall=warn,lsm_tree=warn", args.log_level)
    };
    let (filter, invalid) = match EnvFilter::try_new(&directives) {
        Ok(filter) => (filter, None),
        Err(error) => (EnvFilter::new("info"), Some(error)),
    };
    let writer =
        tracing_subscriber::fmt::writer::BoxMakeWriter::new(move || -> Box<dyn std::io::Write> {
            match to {
                LogTo::Stdout => Box::new(std::io::stdout()),
                LogTo::Stderr => Box::new(std::io::stderr()),
            }
        });
    // Colours only for a person at a terminal: a file or a pipe gets plain text.
    let colours = match to {
        LogTo::Stdout => std::io::stdout().is_terminal(),
        LogTo::Stderr => std::io::stderr().is_terminal(),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours)
        .with_writer(writer);
    match args.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init(),
    }
    if let Some(error) = invalid {
        tracing::warn!(log_level = %args.log_level, %error, "invalid log level; logging at info");
    }
}
