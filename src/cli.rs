//! The command line. Every option is a flag with an `ADEVENTS_*` environment fallback (the flag
//! name in upper snake case) and a default shown in `--help`; with no subcommand, `serve` runs.

use crate::access::{AccessOptions, AuthMode, OperatorKey};
use crate::app::{Options, ServiceOptions};
use crate::domain::address::StoreIp;
use crate::domain::beacon::BeaconRules;
use crate::domain::retention::Retention;
use crate::domain::sealing::SealingRule;
use crate::domain::slices::SliceRule;
use crate::domain::view::ViewWindow;
use crate::http::{BodyLimits, ConnectionLimits, EdgeOptions, InFlight, RateLimits};
use crate::query::aggregate::BillableWindow;
use crate::query::{FanOut, QueryOptions};
use crate::retention::RetentionOptions;
use crate::sealer::SealerOptions;
use crate::store::cassandra::config::{
    CassandraConfig, ConsistencyLevel, Credentials, KeyspaceName, Replication, WriteMode,
};
use crate::store::embedded::{EmbeddedConfig, EngineMemory, Fsync};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "adevents",
    version,
    about = "Ad-event ingestion server: impressions, clicks and beacons in, campaign summaries out.",
    args_conflicts_with_subcommands = true,
    // serve's many options would bury the commands: they are listed by `serve --help`.
    help_template = "{about-with-newline}\n{usage-heading} {usage}\n\nCommands:\n{subcommands}\n\nOptions:\n  -h, --help     Print help\n  -V, --version  Print version{after-help}",
    after_help = SERVE_NOTE
)]
pub struct Cli {
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    /// Options of `serve`, which runs when no subcommand is given.
    #[command(flatten)]
    pub(crate) serve: ServeArgs,
}

impl Cli {
    /// The command to run: `serve` with the top-level options when none was named.
    pub fn into_command(self) -> Command {
        self.command
            .unwrap_or_else(|| Command::Serve(Box::new(self.serve)))
    }
}

/// What the top-level help and `serve --help` say about running with no command and about
/// the one setting that is never a flag.
const SERVE_NOTE: &str = "With no command, `serve` runs and takes its options at the top level \
(`adevents --store cassandra`); `adevents serve --help` lists them. It keeps the terminal until \
Ctrl-C or SIGTERM.\n\nADEVENTS_ADMIN_KEY (environment only, at least 32 characters): an admin \
key that is never stored, for operators and deploy scripts. Without it, the embedded store makes \
its folder's first admin key at the first start (<data-dir>/admin.key); on Cassandra, create one \
with `adevents keys create-admin`.";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the HTTP API (the default). Applies pending migrations first unless --no-migrate.
    #[command(after_help = SERVE_NOTE)]
    Serve(Box<ServeArgs>),
    /// Apply pending schema migrations, then exit.
    Migrate(MigrateArgs),
    /// Rebuild the rollups of closed days from the raw tables: a campaign's (--advertiser and
    /// --campaign) or a site's (--site), for the UTC days --from to --to (inclusive).
    Rollup(RollupArgs),
    /// Send realistic mock beacon traffic to a running server, then print its unique-visitor
    /// counts for every feature combination beside the exact ones.
    Simulate(SimulateArgs),
    /// Manage API keys directly in the store (`keys create-admin`: a deployment's first admin
    /// key, printed once).
    Keys(KeysArgs),
    /// Privacy chores on stored data (`privacy truncate-addresses`: addresses stored before
    /// `--store-ip`, or under a laxer setting, rewritten to what it keeps).
    Privacy(PrivacyArgs),
}

impl Command {
    pub fn log(&self) -> &LogArgs {
        match self {
            Self::Serve(args) => &args.log,
            Self::Migrate(args) => &args.log,
            Self::Simulate(args) => &args.log,
            Self::Rollup(args) => &args.log,
            Self::Keys(args) => &args.log,
            Self::Privacy(args) => match &args.command {
                PrivacyCommand::TruncateAddresses(args) => &args.log,
                PrivacyCommand::IndexEvents(args) => &args.log,
            },
        }
    }
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address and port to listen on (port 0 picks a free one).
    #[arg(long, env = "ADEVENTS_LISTEN", default_value = "127.0.0.1:8080")]
    pub(crate) listen: SocketAddr,
    /// Do not apply pending migrations at start-up (run `adevents migrate` separately).
    #[arg(long, env = "ADEVENTS_NO_MIGRATE", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::SetTrue)]
    pub(crate) no_migrate: bool,
    /// After SIGTERM or Ctrl-C, how long in-flight requests may take before the process exits.
    #[arg(long, env = "ADEVENTS_SHUTDOWN_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) shutdown_timeout: Duration,
    /// Largest ingestion body accepted, in bytes after gzip decoding (413 past it).
    #[arg(long, env = "ADEVENTS_MAX_BODY_BYTES", default_value_t = 5 * 1024 * 1024)]
    pub(crate) max_body_bytes: usize,
    /// Most events accepted in one ingestion request (413 past it).
    #[arg(long, env = "ADEVENTS_MAX_EVENTS", default_value_t = 10_000)]
    pub(crate) max_events: usize,
    /// Proxies (CIDR[,CIDR…]) whose X-Forwarded-For names the client; none by default.
    #[arg(long, env = "ADEVENTS_TRUSTED_PROXIES", value_delimiter = ',')]
    pub(crate) trusted_proxies: Vec<ipnet::IpNet>,
    /// What of a client's address impressions, answers and log lines keep: `truncated`, its
    /// last bits zeroed (IPv4 to its /24, IPv6 to its /48); `full`; or `none` (the view join
    /// then tells clients apart by user agent alone). Rate limits and invalid-traffic checks
    /// use the full address, in memory only.
    #[arg(long, env = "ADEVENTS_STORE_IP", value_enum, default_value_t = StoreIp::Truncated)]
    pub(crate) store_ip: StoreIp,
    /// Partition reads in flight at once for one query.
    #[arg(long, env = "ADEVENTS_FANOUT_CONCURRENCY", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) fanout_concurrency: u16,
    /// Partitions written at once for one ingestion request.
    #[arg(long, env = "ADEVENTS_WRITE_CONCURRENCY", default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) write_concurrency: u16,
    /// How long campaign and site settings are cached per process; a settings change takes
    /// effect at the earliest this long plus 10 minutes (how far an event may run ahead of the
    /// clock) after it is made, which is also its default effective_from.
    #[arg(long, env = "ADEVENTS_SETTINGS_CACHE_TTL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub(crate) settings_cache_ttl: Duration,
    /// Browser origins allowed to call the query endpoints (CORS), ORIGIN[,ORIGIN…], e.g.
    /// `https://dashboard.example.com`; none by default.
    #[arg(long, env = "ADEVENTS_CORS_ORIGINS", value_delimiter = ',')]
    pub(crate) cors_origins: Vec<axum::http::HeaderValue>,
    /// Most features one /track beacon may carry (each subset of them gets a unique-visitor
    /// sketch: 2^N per beacon).
    #[arg(long, env = "ADEVENTS_MAX_FEATURES", default_value_t = 4, value_parser = clap::value_parser!(u8).range(1..=8))]
    pub(crate) max_features: u8,
    /// How often each process stores its live unique-visitor sketches: a uniques answer
    /// reflects beacons acknowledged up to this long before it.
    #[arg(long, env = "ADEVENTS_SKETCH_FLUSH_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub(crate) sketch_flush_interval: Duration,
    /// Billable impressions count once per user and campaign in each window this long,
    /// aligned at multiples of it since the epoch; it must divide 24 hours.
    #[arg(long, env = "ADEVENTS_BILLABLE_WINDOW", default_value = "40s", value_parser = parse_billable_window)]
    pub(crate) billable_window: BillableWindow,
    /// How long after a UTC day ends events still arrive without marking the day for
    /// re-aggregation; after it (plus 5 s) the day is sealed into rollups.
    #[arg(long, env = "ADEVENTS_ROLLUP_GRACE", default_value = "1h", value_parser = humantime::parse_duration)]
    pub(crate) rollup_grace: Duration,
    /// How many past days the background sealer scans for days to seal; a day that receives
    /// a late event is sealed again within a few minutes whatever its age (the late index).
    #[arg(long, env = "ADEVENTS_SEAL_LOOKBACK_DAYS", default_value_t = 7, value_parser = clap::value_parser!(u32).range(1..=366))]
    pub(crate) seal_lookback_days: u32,
    /// How often the background sealer looks for days to seal.
    #[arg(long, env = "ADEVENTS_SEAL_INTERVAL", default_value = "60s", value_parser = humantime::parse_duration)]
    pub(crate) seal_interval: Duration,
    /// How long after a 15-minute slice of a day not yet sealed ends its events still arrive
    /// without marking it; after it (plus 5 s) the slice is aggregated, and summaries of the
    /// day read only the newer stretch raw.
    #[arg(long, env = "ADEVENTS_SLICE_GRACE", default_value = "2m", value_parser = humantime::parse_duration)]
    pub(crate) slice_grace: Duration,
    /// How often closed slices are looked for and aggregated; `0s` turns slice aggregation
    /// off (summaries then read every day not yet sealed raw).
    #[arg(long, env = "ADEVENTS_SLICE_INTERVAL", default_value = "15s", value_parser = humantime::parse_duration)]
    pub(crate) slice_interval: Duration,
    /// Summaries read the open stretch of days not yet sealed raw every time, instead of
    /// keeping what they read by 2-second piece. For a rolling upgrade on Cassandra from a
    /// build without this flag: such servers do not mark the open slices that kept pieces
    /// rely on, so what they write could be missed until its slice is aggregated.
    #[arg(long, env = "ADEVENTS_READ_OPEN_STRETCH_RAW", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::SetTrue)]
    pub(crate) read_open_stretch_raw: bool,
    /// How long after a conversion arrives its attribution is decided and fixed: a click or
    /// impression stored on any server within it still counts (say the click reaches the
    /// server after the advertiser's postback).
    #[arg(long, env = "ADEVENTS_ATTRIBUTION_DELAY", default_value = "1m", value_parser = humantime::parse_duration)]
    pub(crate) attribution_delay: Duration,
    /// How many UTC days before today `impressions/recent` looks back for the newest
    /// impressions.
    #[arg(long, env = "ADEVENTS_RECENT_LOOKBACK_DAYS", default_value_t = 7, value_parser = clap::value_parser!(u32).range(0..=366))]
    pub(crate) recent_lookback_days: u32,
    /// `keys`: every request needs a key (`Authorization: Bearer`), beacons need a registered
    /// site; `off`: everything is let through (a private network, a local trial).
    #[arg(long, env = "ADEVENTS_AUTH", value_enum, default_value_t = AuthMode::Keys)]
    pub(crate) auth: AuthMode,
    /// `/metrics` answers without a key (by default it needs an admin or metrics key).
    #[arg(long, env = "ADEVENTS_METRICS_PUBLIC", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::SetTrue)]
    pub(crate) metrics_public: bool,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
    /// Client addresses (CIDR[,CIDR…]) whose impressions, clicks and beacons are invalid
    /// traffic (`denied_address`): data-centre ranges, say. For a POSTed event, its `user_ip`.
    #[arg(long, env = "ADEVENTS_IVT_DENY_CIDRS", value_delimiter = ',')]
    pub(crate) ivt_deny_cidrs: Vec<ipnet::IpNet>,
    /// How long after its `t` an impression pixel (`GET /i`) counts (and up to 10 minutes
    /// before it).
    #[arg(long, env = "ADEVENTS_TAG_TTL", default_value = "1h", value_parser = humantime::parse_duration)]
    pub(crate) tag_ttl: Duration,
    /// How long after an impression's `t` (or its pixel's arrival, when later) the view
    /// reports of `/v.js` count; a day is sealed only once this and `--tag-ttl` have passed
    /// since its end.
    #[arg(long, env = "ADEVENTS_VIEW_WINDOW", default_value = "10m", value_parser = humantime::parse_duration)]
    pub(crate) view_window: Duration,
    /// The (impression, client) pairs whose view reports this process remembers, to store
    /// each report once and at most 5 per client; past it the oldest are forgotten.
    #[arg(long, env = "ADEVENTS_VIEW_MEMORY_ENTRIES", default_value_t = 500_000, value_parser = clap::value_parser!(u32).range(1000..))]
    pub(crate) view_memory_entries: u32,
    /// How long after the impression's `t` a click redirect (`GET /c`) counts.
    #[arg(long, env = "ADEVENTS_CLICK_TTL", default_value = "30days", value_parser = humantime::parse_duration)]
    pub(crate) click_ttl: Duration,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    #[command(flatten)]
    pub(crate) log: LogArgs,
}

/// The operator's admin key, `ADEVENTS_ADMIN_KEY`: read from the environment only (a flag
/// would show in the process list), at least 32 characters, never stored.
pub(crate) fn operator_key() -> Result<Option<OperatorKey>, String> {
    match std::env::var("ADEVENTS_ADMIN_KEY") {
        Ok(secret) if !secret.is_empty() => OperatorKey::new(&secret).map(Some),
        _ => Ok(None),
    }
}

fn parse_billable_window(text: &str) -> Result<BillableWindow, String> {
    let window = humantime::parse_duration(text).map_err(|error| error.to_string())?;
    BillableWindow::new(window)
}

/// What a client may make the server spend (docs/API.md, "Limits and overload").
#[derive(Debug, Args)]
pub(crate) struct LimitArgs {
    /// Connections open at once; one more is answered 503 and closed. The server raises its
    /// open-files limit to fit, or lowers this and says so.
    #[arg(long, env = "ADEVENTS_MAX_CONNECTIONS", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_connections: u32,
    /// How long a request's line and headers may take to arrive, from their first byte (408).
    #[arg(long, env = "ADEVENTS_HEADER_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub(crate) header_timeout: Duration,
    /// How long a request's body may take to arrive (408).
    #[arg(long, env = "ADEVENTS_BODY_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) body_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request before it is closed.
    #[arg(long, env = "ADEVENTS_IDLE_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub(crate) idle_timeout: Duration,
    /// Largest request line and headers together (431 past it), e.g. `16KiB`.
    #[arg(long, env = "ADEVENTS_MAX_HEADER_BYTES", default_value = "16KiB")]
    pub(crate) max_header_bytes: bytesize::ByteSize,
    /// Events per second per ingest key (token bucket; a full bucket holds one largest
    /// request), or `off`.
    #[arg(long, env = "ADEVENTS_RATE_LIMIT_INGEST", default_value = "off", value_parser = parse_rate)]
    pub(crate) rate_limit_ingest: Rate,
    /// Requests per second per client address on /track (IPv6 by /64), or `off` (a benchmark
    /// from one address).
    #[arg(long, env = "ADEVENTS_RATE_LIMIT_BEACONS", default_value = "50", value_parser = parse_rate)]
    pub(crate) rate_limit_beacons: Rate,
    /// How many beacon requests an address may send at once above its rate.
    #[arg(long, env = "ADEVENTS_RATE_LIMIT_BEACONS_BURST", default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) rate_limit_beacons_burst: u32,
    /// Client addresses (and ingest keys) whose rate is remembered at once; past it the least
    /// recently seen are forgotten.
    #[arg(long, env = "ADEVENTS_RATE_LIMIT_ADDRESSES", default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) rate_limit_addresses: u32,
    /// Writes (ingestion, beacons, settings changes) handled at once; past it 503 `overloaded`.
    #[arg(long, env = "ADEVENTS_MAX_INFLIGHT_WRITES", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_inflight_writes: u32,
    /// Queries (summaries, reports, exports, uniques) handled at once; past it 503 `overloaded`.
    #[arg(long, env = "ADEVENTS_MAX_INFLIGHT_QUERIES", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_inflight_queries: u32,
    /// The most partitions one query may read, judged on the range as asked: a sealed day
    /// counts as one, any other day as its largest bucket count (400 past it).
    #[arg(long, env = "ADEVENTS_MAX_QUERY_PARTITIONS", default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_query_partitions: u64,
    /// An export's `clicked` means clicked within this many days after the impression's UTC
    /// day (whole days, e.g. `30d`).
    #[arg(long, env = "ADEVENTS_CLICK_LOOKBACK", default_value = "30d", value_parser = parse_whole_days)]
    pub(crate) click_lookback: u32,
    /// Memory for live unique-visitor sketches, e.g. `256MiB`, a hard bound: from four fifths
    /// of it the least recently used are stored and dropped from memory (counts are
    /// unchanged); at it, beacons are refused (503) until the flusher catches up.
    #[arg(long, env = "ADEVENTS_SKETCH_MEMORY", default_value = "256MiB")]
    pub(crate) sketch_memory: bytesize::ByteSize,
    /// Memory one pass of a site-day's seal (or of the repair of its sketches) may hold for
    /// its feature combinations, estimated, e.g. `256MiB`: a day that needs more is added up in
    /// parts, a pass over its beacons each.
    #[arg(long, env = "ADEVENTS_SEAL_MEMORY", default_value = "256MiB", value_parser = parse_seal_memory)]
    pub(crate) seal_memory: usize,
}

/// Bytes, at least 1 MiB: a smaller budget only makes more passes.
fn parse_seal_memory(text: &str) -> Result<usize, String> {
    let size: bytesize::ByteSize = text.parse()?;
    if size.as_u64() < 1024 * 1024 {
        return Err("must be at least 1MiB".to_owned());
    }
    Ok(usize::try_from(size.as_u64()).unwrap_or(usize::MAX))
}

/// A rate in events or requests per second, or none (`off`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rate(pub(crate) Option<std::num::NonZeroU32>);

fn parse_rate(text: &str) -> Result<Rate, String> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(Rate(None));
    }
    text.parse::<std::num::NonZeroU32>()
        .map(|rate| Rate(Some(rate)))
        .map_err(|_| format!("{text:?} is neither a positive whole number per second nor `off`"))
}

fn parse_whole_days(text: &str) -> Result<u32, String> {
    const DAY: u64 = 24 * 3600;
    let duration = humantime::parse_duration(text).map_err(|error| error.to_string())?;
    if duration.as_secs() % DAY != 0 || duration.subsec_nanos() != 0 {
        return Err(format!("{text:?} is not a whole number of days"));
    }
    u32::try_from(duration.as_secs() / DAY)
        .ok()
        .filter(|days| (1..=3660).contains(days))
        .ok_or_else(|| format!("{text:?} is not between 1 and 3660 days"))
}

impl LimitArgs {
    fn connections(&self) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: self.max_connections as usize,
            header_timeout: self.header_timeout.max(Duration::from_millis(100)),
            max_header_bytes: usize::try_from(self.max_header_bytes.as_u64())
                .unwrap_or(usize::MAX)
                .max(1024),
            idle_timeout: self.idle_timeout.max(Duration::from_millis(100)),
        }
    }

    fn rate_limits(&self) -> RateLimits {
        RateLimits {
            ingest_events_per_second: self.rate_limit_ingest.0,
            beacons_per_second: self.rate_limit_beacons.0,
            beacon_burst: std::num::NonZeroU32::new(self.rate_limit_beacons_burst)
                .unwrap_or(std::num::NonZeroU32::MIN),
            addresses: std::num::NonZeroUsize::new(self.rate_limit_addresses as usize)
                .unwrap_or(std::num::NonZeroUsize::MIN),
        }
    }
}

impl ServeArgs {
    /// The server's options; `operator_key` is `ADEVENTS_ADMIN_KEY` ([`operator_key`]).
    pub(crate) fn options(&self, operator_key: Option<OperatorKey>) -> Options {
        let fan_out = FanOut {
            concurrency: usize::from(self.fanout_concurrency),
        };
        let service = ServiceOptions {
            write_concurrency: usize::from(self.write_concurrency),
            settings_lifetime: self.settings_cache_ttl,
            sketch_flush_interval: self.sketch_flush_interval.max(Duration::from_millis(10)),
            delivery_flush_interval: crate::delivery::live::FLUSH_INTERVAL,
            queries: QueryOptions {
                fan_out,
                billable_window: self.billable_window,
                recent_lookback_days: self.recent_lookback_days,
                max_partitions: self.limits.max_query_partitions,
                click_lookback_days: self.limits.click_lookback,
                open_days: (!self.slice_interval.is_zero())
                    .then(|| SliceRule::new(self.slice_grace)),
                view_window: ViewWindow::new(self.view_window),
                keep_open_stretches: !self.read_open_stretch_raw,
            },
            sealer: SealerOptions {
                // The composition root lengthens it by --tag-ttl and --view-window.
                rule: SealingRule::new(self.rollup_grace),
                view_window: ViewWindow::new(self.view_window),
                lookback_days: self.seal_lookback_days,
                interval: self.seal_interval.max(Duration::from_secs(1)),
                window: self.billable_window,
                fan_out,
                open_days: (!self.slice_interval.is_zero())
                    .then(|| SliceRule::new(self.slice_grace)),
                // The composition root sets it from the service's retention.
                retain_raw: Retention::Forever,
                // And this from --seal-memory.
                site_day_bytes: crate::query::site_day::SITE_DAY_BYTES,
            },
            slices: SliceRule::new(self.slice_grace),
            slice_interval: (!self.slice_interval.is_zero())
                .then(|| self.slice_interval.max(Duration::from_secs(1))),
            access: AccessOptions {
                mode: self.auth,
                operator_key,
                refresh: self.settings_cache_ttl,
            },
            sketch_memory: self.limits.sketch_memory.as_u64(),
            seal_memory: self.limits.seal_memory,
            ivt_deny_cidrs: self.ivt_deny_cidrs.clone(),
            attribution_delay: self.attribution_delay.min(Duration::from_secs(3600)),
            retention: RetentionOptions {
                raw: self.store.retain_raw(),
                // `serve` refuses a shorter one than --retain-raw before it gets here.
                aggregates: self
                    .store
                    .retain_aggregates()
                    .unwrap_or(self.store.retain_aggregates),
                ..RetentionOptions::default()
            },
        };
        let edge = EdgeOptions {
            body_limits: BodyLimits {
                max_bytes: self.max_body_bytes,
                max_events: self.max_events,
            },
            trusted_proxies: self.trusted_proxies.clone(),
            store_ip: self.store_ip,
            cors_origins: self.cors_origins.clone(),
            beacon_rules: BeaconRules {
                max_features: usize::from(self.max_features),
            },
            metrics_public: self.metrics_public,
            connections: self.limits.connections(),
            body_timeout: self.limits.body_timeout.max(Duration::from_millis(100)),
            rate_limits: self.limits.rate_limits(),
            in_flight: InFlight {
                writes: self.limits.max_inflight_writes as usize,
                queries: self.limits.max_inflight_queries as usize,
            },
            tag_ttl: self.tag_ttl,
            click_ttl: self.click_ttl,
            view_window: self.view_window,
            view_memory_entries: self.view_memory_entries as usize,
            // The composition root sets it from the service's retention.
            retain_raw: Retention::Forever,
        };
        Options { service, edge }
    }
}

#[derive(Debug, Args)]
pub struct RollupArgs {
    /// Advertiser of the campaign whose days are rebuilt.
    #[arg(
        long,
        env = "ADEVENTS_ROLLUP_ADVERTISER",
        requires = "campaign",
        conflicts_with = "site"
    )]
    pub(crate) advertiser: Option<uuid::Uuid>,
    /// Campaign whose days are rebuilt.
    #[arg(long, env = "ADEVENTS_ROLLUP_CAMPAIGN", requires = "advertiser")]
    pub(crate) campaign: Option<uuid::Uuid>,
    /// Site whose days are rebuilt.
    #[arg(
        long,
        env = "ADEVENTS_ROLLUP_SITE",
        required_unless_present = "campaign"
    )]
    pub(crate) site: Option<String>,
    /// First UTC day.
    #[arg(long, env = "ADEVENTS_ROLLUP_FROM")]
    pub(crate) from: chrono::NaiveDate,
    /// Last UTC day (inclusive).
    #[arg(long, env = "ADEVENTS_ROLLUP_TO")]
    pub(crate) to: chrono::NaiveDate,
    /// As for `serve`: billable impressions' window.
    #[arg(long, env = "ADEVENTS_BILLABLE_WINDOW", default_value = "40s", value_parser = parse_billable_window)]
    pub(crate) billable_window: BillableWindow,
    /// As for `serve`: a day is sealed only once this long (plus 5 s) past its end.
    #[arg(long, env = "ADEVENTS_ROLLUP_GRACE", default_value = "1h", value_parser = humantime::parse_duration)]
    pub(crate) rollup_grace: Duration,
    /// As for `serve`: what one pass over a site-day may hold for its feature combinations.
    #[arg(long, env = "ADEVENTS_SEAL_MEMORY", default_value = "256MiB", value_parser = parse_seal_memory)]
    pub(crate) seal_memory: usize,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    #[command(flatten)]
    pub(crate) log: LogArgs,
}

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Site id the beacons are for.
    #[arg(
        short = 's',
        long,
        env = "ADEVENTS_SIMULATE_SITE",
        default_value = "site1"
    )]
    pub(crate) site: String,
    /// Distinct visitors (guids).
    #[arg(
        short = 'g',
        long,
        env = "ADEVENTS_SIMULATE_GUIDS",
        default_value_t = 100
    )]
    pub(crate) guids: usize,
    /// Visits (beacons) to send.
    #[arg(
        short = 'n',
        long,
        env = "ADEVENTS_SIMULATE_VISITS",
        default_value_t = 500
    )]
    pub(crate) visits: usize,
    /// Referrers (feature1), most popular first.
    #[arg(short = 'r', long, env = "ADEVENTS_SIMULATE_REFERERS", value_delimiter = ',', num_args = 1.., default_values_t = ["facebook.com".to_owned(), "google.com".to_owned()])]
    pub(crate) referers: Vec<String>,
    /// Landing pages (feature2), most popular first.
    #[arg(short = 'p', long, env = "ADEVENTS_SIMULATE_PAGES", value_delimiter = ',', num_args = 1.., default_values_t = ["/index.html".to_owned(), "/index2.html".to_owned(), "/index3.html".to_owned()])]
    pub(crate) pages: Vec<String>,
    /// First day of the traffic (UTC).
    #[arg(
        short = 'f',
        long,
        env = "ADEVENTS_SIMULATE_FROM",
        default_value = "2018-10-01"
    )]
    pub(crate) from: chrono::NaiveDate,
    /// Day after the last day of the traffic (exclusive, UTC).
    #[arg(
        short = 't',
        long,
        env = "ADEVENTS_SIMULATE_TO",
        default_value = "2018-11-01"
    )]
    pub(crate) to: chrono::NaiveDate,
    /// Beacons in flight at once.
    #[arg(short = 'c', long, env = "ADEVENTS_SIMULATE_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) concurrency: u16,
    /// Seed of the generator: the same seed gives the same traffic.
    #[arg(long, env = "ADEVENTS_SIMULATE_SEED", default_value_t = 1)]
    pub(crate) seed: u64,
    /// Base URL of the running server.
    #[arg(
        long,
        env = "ADEVENTS_SIMULATE_SERVER",
        default_value = "http://127.0.0.1:8080"
    )]
    pub(crate) server: String,
    /// The key the simulation calls with: an admin key registers the site and reads its
    /// counts (a read key of the site only reads them, for a site registered already). Not
    /// needed by a server with --auth off.
    #[arg(long, env = "ADEVENTS_SIMULATE_KEY", hide_env_values = true)]
    pub(crate) key: Option<String>,
    /// Also write the generated visits as CSV to this file (none by default).
    #[arg(long, env = "ADEVENTS_SIMULATE_CSV")]
    pub(crate) csv: Option<std::path::PathBuf>,
    /// How long to wait after sending before querying: the server stores its live sketches
    /// about every second.
    #[arg(long, env = "ADEVENTS_SIMULATE_SETTLE", default_value = "2s", value_parser = humantime::parse_duration)]
    pub(crate) settle: Duration,
    /// No progress bar (for logs and scripts).
    #[arg(long, env = "ADEVENTS_SIMULATE_QUIET", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::SetTrue)]
    pub(crate) quiet: bool,
    #[command(flatten)]
    pub(crate) log: LogArgs,
}

#[derive(Debug, Args)]
pub struct KeysArgs {
    #[command(subcommand)]
    pub(crate) command: KeysCommand,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    #[command(flatten)]
    pub(crate) log: LogArgs,
}

#[derive(Debug, Subcommand)]
pub(crate) enum KeysCommand {
    /// Create an admin key and print it once on standard output (never into the logs): the
    /// first key of a Cassandra deployment, or a replacement after a rotation.
    CreateAdmin {
        /// A label for people.
        #[arg(long, env = "ADEVENTS_KEYS_NAME", default_value = "admin")]
        name: String,
    },
}

#[derive(Debug, Args)]
pub struct PrivacyArgs {
    #[command(subcommand)]
    pub(crate) command: PrivacyCommand,
}

#[derive(Debug, Subcommand)]
pub(crate) enum PrivacyCommand {
    /// Rewrite the address of every stored impression to what --store-ip keeps (by default its
    /// /24 or /48), printing a progress line per page of rows. Rows that already comply are
    /// left alone, so running it again resumes an interrupted run. Once, after upgrading to a
    /// release with --store-ip, or after choosing a stricter setting; on the embedded store,
    /// with the server stopped (it holds the folder).
    TruncateAddresses(TruncateAddressesArgs),
    /// Index the events stored before the subject index existed, so that erasure and subject
    /// access find them: every impression and click of each day from --from to --to, and the
    /// visitor of every beacon, printing a line per day. Writing an entry twice changes
    /// nothing, so an interrupted run resumes with --from set to the last day it printed. Once,
    /// after upgrading to a release with `/v1/privacy`; on the embedded store, with the server
    /// stopped (it holds the folder).
    IndexEvents(IndexEventsArgs),
}

#[derive(Debug, Args)]
pub(crate) struct IndexEventsArgs {
    /// First UTC day to index (YYYY-MM-DD): the oldest day of stored events.
    #[arg(long, env = "ADEVENTS_INDEX_EVENTS_FROM")]
    pub(crate) from: chrono::NaiveDate,
    /// Last UTC day to index (YYYY-MM-DD); today if not given.
    #[arg(long, env = "ADEVENTS_INDEX_EVENTS_TO")]
    pub(crate) to: Option<chrono::NaiveDate>,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    #[command(flatten)]
    pub(crate) log: LogArgs,
}

#[derive(Debug, Args)]
pub(crate) struct TruncateAddressesArgs {
    /// What to keep of each stored address, as for `serve` (`full` changes nothing).
    #[arg(long, env = "ADEVENTS_STORE_IP", value_enum, default_value_t = StoreIp::Truncated)]
    pub(crate) store_ip: StoreIp,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    #[command(flatten)]
    pub(crate) log: LogArgs,
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    #[command(flatten)]
    pub(crate) log: LogArgs,
}

/// Which store keeps the events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum StoreKind {
    /// An embedded engine in a local folder (--data-dir): nothing to install, one process.
    Embedded,
    /// Apache Cassandra or ScyllaDB: any number of server processes.
    Cassandra,
}

#[derive(Debug, Args)]
pub(crate) struct StoreArgs {
    /// Where events are stored.
    #[arg(long = "store", env = "ADEVENTS_STORE", value_enum, default_value_t = StoreKind::Embedded)]
    pub(crate) kind: StoreKind,
    /// Folder of the embedded store (created if missing; one process at a time).
    #[arg(long, env = "ADEVENTS_DATA_DIR", default_value = "./data")]
    pub(crate) data_dir: std::path::PathBuf,
    /// Embedded store: `always` fdatasyncs the journal before every answer (survives power
    /// loss); `never` hands it to the OS (survives a crash of the process, not of the machine).
    #[arg(long, env = "ADEVENTS_FSYNC", value_enum, default_value_t = Fsync::Always)]
    pub(crate) fsync: Fsync,
    /// Embedded store: the most one table holds in memory before writing it to disk (the
    /// event index, four times as much).
    #[arg(long, env = "ADEVENTS_EMBEDDED_MEMTABLE", default_value = "8MiB", value_parser = parse_at_least_mib)]
    pub(crate) embedded_memtable: bytesize::ByteSize,
    /// Embedded store: memory for decoded blocks of stored data, kept for reads.
    #[arg(long, env = "ADEVENTS_EMBEDDED_CACHE", default_value = "16MiB", value_parser = parse_at_least_mib)]
    pub(crate) embedded_cache: bytesize::ByteSize,
    /// Embedded store: the journals' total size on disk (at least 64MiB); past it the oldest
    /// tables in memory are written out, so it also bounds their memory together.
    #[arg(long, env = "ADEVENTS_EMBEDDED_JOURNAL", default_value = "64MiB", value_parser = parse_journal_size)]
    pub(crate) embedded_journal: bytesize::ByteSize,
    /// Raw events (impressions, clicks, view reports, beacons, conversions and their indexes)
    /// of a UTC day are deleted this long after the day began, on both stores: `forever`, or
    /// at least `2days` (`400days`, `13weeks`). An event of a day already past it is refused.
    /// `--retention` (`ADEVENTS_RETENTION`), its old name, is accepted until the next release.
    #[arg(long, env = "ADEVENTS_RETAIN_RAW", default_value = "forever", value_parser = parse_retention)]
    pub(crate) retain_raw: Retention,
    /// The old name of --retain-raw (Cassandra only, counted from the write); one of the two.
    #[arg(long, env = "ADEVENTS_RETENTION", hide = true, value_parser = parse_retention, conflicts_with = "retain_raw")]
    pub(crate) retention: Option<Retention>,
    /// Rollups (sealed days' counts and sketches) of a UTC day are deleted this long after
    /// the day began: `forever`, or at least --retain-raw. Delivery's sealed totals are
    /// always kept, or lifetime caps would start again.
    #[arg(long, env = "ADEVENTS_RETAIN_AGGREGATES", default_value = "forever", value_parser = parse_retention)]
    pub(crate) retain_aggregates: Retention,
    #[command(flatten)]
    pub(crate) cassandra: CassandraArgs,
}

/// A `forever` or a duration of at least two days.
fn parse_retention(text: &str) -> Result<Retention, String> {
    Retention::parse(text).map_err(|error| error.to_string())
}

impl StoreArgs {
    /// `--retain-raw`, or `--retention` where only the old name is given.
    pub(crate) fn retain_raw(&self) -> Retention {
        self.retention.unwrap_or(self.retain_raw)
    }

    /// `--retain-aggregates`, never shorter than `--retain-raw`: a rollup that expired before
    /// its day's raw events would leave a sealed day answering nothing while they remain.
    pub(crate) fn retain_aggregates(&self) -> Result<Retention, String> {
        let (raw, aggregates) = (self.retain_raw(), self.retain_aggregates);
        match (raw, aggregates) {
            (Retention::For(raw), Retention::For(kept)) if kept < raw => Err(format!(
                "--retain-aggregates {aggregates} is shorter than --retain-raw {}",
                Retention::For(raw)
            )),
            (Retention::Forever, Retention::For(_)) => Err(format!(
                "--retain-aggregates {aggregates} is shorter than --retain-raw forever"
            )),
            _ => Ok(aggregates),
        }
    }

    pub(crate) fn cassandra_config(&self) -> Result<CassandraConfig, String> {
        Ok(self
            .cassandra
            .to_config(self.retain_raw(), self.retain_aggregates()?))
    }

    pub(crate) fn embedded_config(&self) -> EmbeddedConfig {
        EmbeddedConfig {
            data_dir: self.data_dir.clone(),
            fsync: self.fsync,
            memory: EngineMemory {
                memtable_bytes: self.embedded_memtable.as_u64(),
                cache_bytes: self.embedded_cache.as_u64(),
                journal_bytes: self.embedded_journal.as_u64(),
            },
        }
    }
}

/// A size of at least 1 MiB (the engine's smallest table and cache).
fn parse_at_least_mib(text: &str) -> Result<bytesize::ByteSize, String> {
    let size: bytesize::ByteSize = text.parse()?;
    if size.as_u64() < 1024 * 1024 {
        return Err(format!("{size} is below the smallest accepted, 1MiB"));
    }
    Ok(size)
}

/// A journal size the engine accepts.
fn parse_journal_size(text: &str) -> Result<bytesize::ByteSize, String> {
    let size: bytesize::ByteSize = text.parse()?;
    if size.as_u64() < EngineMemory::MIN_JOURNAL_BYTES {
        return Err(format!(
            "{size} is below the smallest journal the engine accepts, 64MiB"
        ));
    }
    Ok(size)
}

#[derive(Debug, Args)]
pub(crate) struct CassandraArgs {
    /// Cassandra/ScyllaDB contact points, HOST:PORT[,HOST:PORT…].
    #[arg(
        long,
        env = "ADEVENTS_CASSANDRA_NODES",
        value_delimiter = ',',
        default_value = "127.0.0.1:9042"
    )]
    pub(crate) cassandra_nodes: Vec<String>,
    /// Keyspace holding adevents' tables; created by migrations if missing.
    #[arg(long, env = "ADEVENTS_KEYSPACE", default_value = "adevents")]
    pub(crate) keyspace: KeyspaceName,
    /// Replication of a keyspace created by migrations: `simple:N` (development) or
    /// `DC:N[,DC:N…]` (NetworkTopologyStrategy, production). An existing keyspace is never altered.
    #[arg(long, env = "ADEVENTS_REPLICATION", default_value = "simple:1")]
    pub(crate) replication: Replication,
    /// Consistency level of reads and writes.
    #[arg(long, env = "ADEVENTS_CONSISTENCY", value_enum, default_value_t = ConsistencyLevel::LocalQuorum)]
    pub(crate) consistency: ConsistencyLevel,
    /// Datacenter whose nodes coordinate requests (recommended with several datacenters).
    #[arg(long, env = "ADEVENTS_CASSANDRA_LOCAL_DC")]
    pub(crate) cassandra_local_dc: Option<String>,
    /// User name for password authentication.
    #[arg(
        long,
        env = "ADEVENTS_CASSANDRA_USERNAME",
        requires = "cassandra_password"
    )]
    pub(crate) cassandra_username: Option<String>,
    /// Password for password authentication (prefer the environment variable to the flag).
    #[arg(
        long,
        env = "ADEVENTS_CASSANDRA_PASSWORD",
        hide_env_values = true,
        requires = "cassandra_username"
    )]
    pub(crate) cassandra_password: Option<String>,
    /// Bound on opening one connection to a node.
    #[arg(long, env = "ADEVENTS_CASSANDRA_CONNECT_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub(crate) cassandra_connect_timeout: Duration,
    /// Bound on one request to the cluster, retries included.
    #[arg(long, env = "ADEVENTS_CASSANDRA_REQUEST_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub(crate) cassandra_request_timeout: Duration,
    /// How a partition's events are written: unlogged single-partition batches, or one insert
    /// per row with many in flight (see docs/BENCHMARKS.md for the measurement).
    #[arg(long, env = "ADEVENTS_CASSANDRA_WRITE_MODE", value_enum, default_value_t = WriteMode::Batch)]
    pub(crate) cassandra_write_mode: WriteMode,
}

impl CassandraArgs {
    fn to_config(&self, retain_raw: Retention, retain_aggregates: Retention) -> CassandraConfig {
        CassandraConfig {
            nodes: self.cassandra_nodes.clone(),
            keyspace: self.keyspace.clone(),
            replication: self.replication.clone(),
            consistency: self.consistency,
            local_datacenter: self.cassandra_local_dc.clone(),
            credentials: self
                .cassandra_username
                .clone()
                .zip(self.cassandra_password.clone())
                .map(|(username, password)| Credentials { username, password }),
            connect_timeout: self.cassandra_connect_timeout,
            request_timeout: self.cassandra_request_timeout,
            write_mode: self.cassandra_write_mode,
            retain_raw,
            retain_aggregates,
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Log line format.
    #[arg(long, env = "ADEVENTS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    /// Which events to log, as tracing directives (`info`, `adevents=debug,tower_http=info`, …).
    #[arg(long, env = "ADEVENTS_LOG_LEVEL", default_value = "info")]
    pub(crate) log_level: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn no_subcommand_means_serve() {
        let command = Cli::try_parse_from(["adevents"])
            .expect("parses")
            .into_command();
        assert!(matches!(command, Command::Serve(_)));
    }

    /// Read from the definition, not from a parse, so ADEVENTS_* variables in the test
    /// environment (the test script sets some) cannot change the answer.
    #[test]
    fn documented_defaults() {
        let cli = Cli::command();
        let default_of = |name: &str| {
            let arg = cli
                .get_arguments()
                .find(|arg| arg.get_long() == Some(name))
                .unwrap_or_else(|| panic!("no --{name}"));
            arg.get_default_values()
                .iter()
                .map(|value| value.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(",")
        };
        assert_eq!(default_of("listen"), "127.0.0.1:8080");
        assert_eq!(default_of("store"), "embedded");
        assert_eq!(default_of("data-dir"), "./data");
        assert_eq!(default_of("fsync"), "always");
        assert_eq!(default_of("embedded-memtable"), "8MiB");
        assert_eq!(default_of("embedded-cache"), "16MiB");
        assert_eq!(default_of("embedded-journal"), "64MiB");
        assert_eq!(default_of("cassandra-nodes"), "127.0.0.1:9042");
        assert_eq!(default_of("keyspace"), "adevents");
        assert_eq!(default_of("replication"), "simple:1");
        assert_eq!(default_of("consistency"), "local-quorum");
        assert_eq!(default_of("store-ip"), "truncated");
        assert_eq!(default_of("retain-raw"), "forever");
        assert_eq!(default_of("retain-aggregates"), "forever");
    }

    #[test]
    fn flags_parse_into_typed_values() {
        let command = Cli::try_parse_from([
            "adevents",
            "migrate",
            "--cassandra-nodes",
            "10.0.0.1:9042,10.0.0.2:9042",
            "--replication",
            "dc1:3,dc2:3",
            "--keyspace",
            "ads_prod",
        ])
        .expect("parses")
        .into_command();
        let Command::Migrate(args) = command else {
            panic!("expected migrate");
        };
        let config = args.store.cassandra_config().expect("valid");
        assert_eq!(config.nodes.len(), 2);
        assert_eq!(config.keyspace.as_str(), "ads_prod");
        assert!(
            matches!(config.replication, Replication::NetworkTopology(ref dcs) if dcs.len() == 2)
        );
    }

    #[test]
    fn the_address_rewrite_takes_the_store_flags_and_a_policy() {
        let command = Cli::try_parse_from([
            "adevents",
            "privacy",
            "truncate-addresses",
            "--store",
            "cassandra",
            "--store-ip",
            "none",
        ])
        .expect("parses")
        .into_command();
        let Command::Privacy(args) = command else {
            panic!("expected privacy");
        };
        let PrivacyCommand::TruncateAddresses(args) = args.command else {
            panic!("expected truncate-addresses");
        };
        assert_eq!(args.store.kind, StoreKind::Cassandra);
        assert_eq!(args.store_ip, StoreIp::None);
        let error =
            Cli::try_parse_from(["adevents", "--store-ip", "partial"]).expect_err("refused");
        assert!(error.to_string().contains("--store-ip"), "{error}");
    }

    #[test]
    fn retain_raw_takes_its_old_name_until_the_next_release() {
        let retained = |args: &[&str]| {
            let Command::Serve(args) = Cli::try_parse_from(args).expect("parses").into_command()
            else {
                panic!("serve is the default command");
            };
            (args.store.retain_raw(), args.store.retain_aggregates())
        };
        let days = |text: &str| Retention::parse(text).expect("a retention");
        assert_eq!(
            retained(&["adevents", "--retain-raw", "400days"]).0,
            days("400days")
        );
        assert_eq!(
            retained(&["adevents", "--retention", "30days"]).0,
            days("30days")
        );
        assert_eq!(retained(&["adevents"]).0, Retention::Forever);
        let error = Cli::try_parse_from(["adevents", "--retain-raw", "1day"]).expect_err("refused");
        assert!(error.to_string().contains("--retain-raw"), "{error}");
        assert!(
            Cli::try_parse_from(["adevents", "--retain-raw", "3days", "--retention", "3days"])
                .is_err()
        );
        let (_, aggregates) = retained(&[
            "adevents",
            "--retain-raw",
            "30days",
            "--retain-aggregates",
            "10days",
        ]);
        assert!(aggregates.is_err());
    }

    #[test]
    fn invalid_values_are_refused_with_the_flag_named() {
        let error =
            Cli::try_parse_from(["adevents", "--keyspace", "bad-name"]).expect_err("refused");
        assert!(error.to_string().contains("--keyspace"), "{error}");
    }

    #[test]
    fn seal_memory_sets_what_a_site_day_pass_holds_from_a_mebibyte_on() {
        let Command::Serve(args) = Cli::try_parse_from(["adevents", "--seal-memory", "64MiB"])
            .expect("parses")
            .into_command()
        else {
            panic!("serve is the default command");
        };
        assert_eq!(args.options(None).service.seal_memory, 64 * 1024 * 1024);
        let error =
            Cli::try_parse_from(["adevents", "--seal-memory", "512KiB"]).expect_err("refused");
        assert!(error.to_string().contains("--seal-memory"), "{error}");
    }

    #[test]
    fn engine_sizes_below_what_the_engine_accepts_are_refused_with_the_flag_named() {
        for (flag, value) in [
            ("--embedded-journal", "32MiB"),
            ("--embedded-memtable", "512KiB"),
            ("--embedded-cache", "lots"),
        ] {
            let error = Cli::try_parse_from(["adevents", flag, value]).expect_err("refused");
            assert!(error.to_string().contains(flag), "{error}");
        }
        let Command::Serve(args) = Cli::try_parse_from(["adevents", "--embedded-journal", "1GiB"])
            .expect("parses")
            .into_command()
        else {
            panic!("serve is the default command");
        };
        assert_eq!(
            args.store.embedded_config().memory.journal_bytes,
            1024 * 1024 * 1024
        );
    }
}
