//! Structured logging: text for people, JSON (one object per line) for log shippers.

use crate::cli::{LogArgs, LogFormat};
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. An invalid `--log-level` falls back to `info` with a
/// warning instead of silencing the process.
pub fn init(args: &LogArgs) {
    let (filter, invalid) = match EnvFilter::try_new(&args.log_level) {
        Ok(filter) => (filter, None),
        Err(error) => (EnvFilter::new("info"), Some(error)),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stdout);
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
