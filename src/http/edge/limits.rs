//! What a caller can make the server spend per second and at once: token buckets per ingest
//! key (events per second) and per client address (beacons per second, on `/track` and the ad
//! tags), and a cap on the writes and the queries in flight. Past a rate: 429 `rate_limited`;
//! past a cap: 503 `overloaded`; both with `Retry-After`, never a queue, nothing stored.

use crate::http::AppState;
use crate::http::edge::error::ApiError;
use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::StateStore;
use governor::{Quota, RateLimiter};
use lru::LruCache;
use std::hash::{BuildHasher, Hash};
use std::net::IpAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// What a client may hold of the server's connections and time.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections open at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// From a request's first byte to the end of its headers.
    pub header_timeout: Duration,
    /// The request line and headers, in bytes (431 past it).
    pub max_header_bytes: usize,
    /// How long a keep-alive connection may wait for its next request.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            header_timeout: Duration::from_secs(10),
            max_header_bytes: 16 * 1024,
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// Connections past the cap kept for liveness and readiness probes, each for one request.
const PROBE_CONNECTIONS: usize = 16;

/// The server's connection slots: `max_connections` for anything, and a few more that only
/// health probes may take, so a saturated server still answers its supervisor and its load
/// balancer.
#[derive(Debug)]
pub(crate) struct ConnectionSlots {
    regular: Arc<Semaphore>,
    probes: Arc<Semaphore>,
}

impl ConnectionSlots {
    pub(crate) fn new(max_connections: usize) -> Self {
        Self {
            regular: Arc::new(Semaphore::new(max_connections.max(1))),
            probes: Arc::new(Semaphore::new(PROBE_CONNECTIONS)),
        }
    }

    /// A slot under the cap.
    pub(crate) fn try_regular(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.regular).try_acquire_owned().ok()
    }

    /// A slot past the cap, for a health probe.
    pub(crate) fn try_probe(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.probes).try_acquire_owned().ok()
    }

    /// Whether every slot under the cap is taken.
    pub(crate) fn full(&self) -> bool {
        self.regular.available_permits() == 0
    }
}

/// Rate limits, as configured.
#[derive(Debug, Clone, Copy)]
pub struct RateLimits {
    /// Events per second per ingest key; `None`: unlimited.
    pub ingest_events_per_second: Option<NonZeroU32>,
    /// Requests per second per client address on `/track` and the ad tags; `None`: off.
    pub beacons_per_second: Option<NonZeroU32>,
    /// How many beacon requests an address may send at once above its rate.
    pub beacon_burst: NonZeroU32,
    /// Client addresses remembered at once; past it the least recently seen go first.
    pub addresses: NonZeroUsize,
}

impl Default for RateLimits {
    fn default() -> Self {
        Self {
            ingest_events_per_second: None,
            beacons_per_second: NonZeroU32::new(50),
            beacon_burst: NonZeroU32::new(200).unwrap_or(NonZeroU32::MIN),
            addresses: NonZeroUsize::new(100_000).unwrap_or(NonZeroUsize::MIN),
        }
    }
}

/// How many requests of each kind may run at once.
#[derive(Debug, Clone, Copy)]
pub struct InFlight {
    /// Ingestion, beacons and settings changes.
    pub writes: usize,
    /// Summaries, reports, exports (for their whole stream), uniques, recent.
    pub queries: usize,
}

impl Default for InFlight {
    fn default() -> Self {
        Self {
            writes: 256,
            queries: 64,
        }
    }
}

/// Independent locks of the address table, so concurrent beacons rarely wait for each other.
const SHARDS: usize = 16;

/// A rate limiter's state per key, in a bounded table: a key not seen for long enough to be
/// dropped is as good as a fresh one, so forgetting the least recently seen is safe.
pub(crate) struct BoundedStore<K> {
    shards: Vec<Mutex<LruCache<K, Nanos>>>,
    hasher: std::collections::hash_map::RandomState,
}

impl<K: Hash + Eq + Clone> BoundedStore<K> {
    pub(crate) fn new(capacity: NonZeroUsize) -> Self {
        let per_shard = NonZeroUsize::new(capacity.get().div_ceil(SHARDS)).unwrap_or(capacity);
        Self {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(LruCache::new(per_shard)))
                .collect(),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }
}

impl<K: Hash + Eq + Clone> StateStore for BoundedStore<K> {
    type Key = K;

    fn measure_and_replace<T, F, E>(&self, key: &K, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        let shard = &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS];
        // A table of instants stays usable whatever panicked while it was held.
        let mut table = shard
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (outcome, next) = f(table.get(key).copied())?;
        table.put(key.clone(), next);
        Ok(outcome)
    }
}

type Limiter<K> = RateLimiter<K, BoundedStore<K>, DefaultClock, NoOpMiddleware>;

/// The key of a client address: an IPv4 address, or an IPv6 address's /64 (one subscriber's
/// network: rotating within it buys nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum AddressKey {
    V4(u32),
    V6Prefix(u64),
}

impl From<IpAddr> for AddressKey {
    fn from(address: IpAddr) -> Self {
        match address {
            IpAddr::V4(v4) => Self::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Self::V4(u32::from(v4)),
                None => Self::V6Prefix((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

/// The limiters of one server process.
pub(crate) struct Limiters {
    ingest: Option<Limiter<crate::domain::access::KeyId>>,
    beacons: Option<Limiter<AddressKey>>,
    writes: Arc<Semaphore>,
    queries: Arc<Semaphore>,
    clock: DefaultClock,
}

/// Seconds to wait before retrying, rounded up, at least 1.
fn retry_after(wait: Duration) -> u64 {
    wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
}

impl Limiters {
    /// `max_events` is the most events one request may hold: an ingest key's bucket holds at
    /// least that many, so any accepted request size can pass once the bucket is full.
    pub(crate) fn new(rates: RateLimits, in_flight: InFlight, max_events: usize) -> Self {
        let clock = DefaultClock::default();
        let ingest = rates.ingest_events_per_second.map(|rate| {
            let burst = u32::try_from(max_events)
                .ok()
                .and_then(NonZeroU32::new)
                .map_or(rate, |events| events.max(rate));
            RateLimiter::new(
                Quota::per_second(rate).allow_burst(burst),
                BoundedStore::new(rates.addresses),
                clock.clone(),
            )
        });
        let beacons = rates.beacons_per_second.map(|rate| {
            RateLimiter::new(
                Quota::per_second(rate).allow_burst(rates.beacon_burst),
                BoundedStore::new(rates.addresses),
                clock.clone(),
            )
        });
        Self {
            ingest,
            beacons,
            writes: Arc::new(Semaphore::new(in_flight.writes.max(1))),
            queries: Arc::new(Semaphore::new(in_flight.queries.max(1))),
            clock,
        }
    }

    /// Takes `events` from the ingest key's bucket, or says how long to wait.
    pub(crate) fn admit_events(
        &self,
        key: crate::domain::access::KeyId,
        events: usize,
    ) -> Result<(), ApiError> {
        let (Some(limiter), Some(n)) = (
            &self.ingest,
            u32::try_from(events).ok().and_then(NonZeroU32::new),
        ) else {
            return Ok(());
        };
        match limiter.check_key_n(&key, n) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => Err(ApiError::RateLimited {
                retry_after: retry_after(not_until.wait_time_from(self.clock.now())),
            }),
            // Larger than the bucket: cannot happen for an accepted request size.
            Err(_) => Err(ApiError::RateLimited { retry_after: 1 }),
        }
    }

    /// Takes one beacon request from the address's bucket, or says how long to wait.
    /// A place among the in-flight writes, if one is free: the ad tags take it by hand, since
    /// past the cap they still answer (the pixel its GIF, the redirect its `Location`) and only
    /// leave the event uncounted.
    pub(crate) fn try_write_slot(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.writes).try_acquire_owned().ok()
    }

    pub(crate) fn admit_beacon(&self, address: Option<IpAddr>) -> Result<(), ApiError> {
        let (Some(limiter), Some(address)) = (&self.beacons, address) else {
            return Ok(());
        };
        limiter
            .check_key(&AddressKey::from(address))
            .map_err(|not_until| ApiError::RateLimited {
                retry_after: retry_after(not_until.wait_time_from(self.clock.now())),
            })
    }
}

/// Which cap a request counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Write,
    Query,
}

fn kind(method: &Method, route: &str) -> Option<Kind> {
    match (method.as_str(), route) {
        ("OPTIONS" | "HEAD", _) => None,
        ("POST", "/v1/impressions" | "/v1/clicks" | "/v1/conversions" | "/v1/privacy/erasures")
        | (_, "/track") => Some(Kind::Write),
        ("PUT", route)
            if route.starts_with("/v1/advertisers/") || route.starts_with("/v1/sites/") =>
        {
            Some(Kind::Write)
        }
        ("GET", route)
            if route.starts_with("/v1/advertisers/")
                || route.starts_with("/v1/sites/")
                || route.starts_with("/v1/privacy/")
                || route == "/v1/sites" =>
        {
            Some(Kind::Query)
        }
        _ => None,
    }
}

/// Sheds load: a write or a query past its cap is answered 503 `overloaded` at once. The
/// permit lives as long as the answer's body, so a streamed export holds its place until its
/// last byte.
pub(crate) async fn shed(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_default();
    let semaphore = match kind(request.method(), &route) {
        Some(Kind::Write) => &state.limiters.writes,
        Some(Kind::Query) => &state.limiters.queries,
        None => return next.run(request).await,
    };
    let Ok(permit) = Arc::clone(semaphore).try_acquire_owned() else {
        metrics::counter!("adevents_requests_shed_total", "kind" => match kind(request.method(), &route) {
            Some(Kind::Write) => "write",
            _ => "query",
        })
        .increment(1);
        return ApiError::Overloaded.into_response();
    };
    let response = next.run(request).await;
    let (parts, body) = response.into_parts();
    Response::from_parts(
        parts,
        Body::new(Permitted {
            body,
            _permit: permit,
        }),
    )
}

/// A body that holds its request's in-flight permit until it is done or dropped.
struct Permitted {
    body: Body,
    /// Released with the body.
    _permit: OwnedSemaphorePermit,
}

impl http_body::Body for Permitted {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_addresses_share_a_bucket_per_64_and_mapped_v4_is_v4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().expect("ip");
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().expect("ip");
        let c: IpAddr = "2001:db8:1:3::1".parse().expect("ip");
        assert_eq!(AddressKey::from(a), AddressKey::from(b));
        assert_ne!(AddressKey::from(a), AddressKey::from(c));
        let mapped: IpAddr = "::ffff:203.0.113.7".parse().expect("ip");
        let v4: IpAddr = "203.0.113.7".parse().expect("ip");
        assert_eq!(AddressKey::from(mapped), AddressKey::from(v4));
    }

    #[test]
    fn an_address_past_its_burst_waits_and_the_table_stays_bounded() {
        let rates = RateLimits {
            beacons_per_second: NonZeroU32::new(1),
            beacon_burst: NonZeroU32::new(3).expect("nonzero"),
            addresses: NonZeroUsize::new(32).expect("nonzero"),
            ..RateLimits::default()
        };
        let limiters = Limiters::new(rates, InFlight::default(), 10);
        let address: IpAddr = "198.51.100.1".parse().expect("ip");
        for _ in 0..3 {
            assert!(limiters.admit_beacon(Some(address)).is_ok());
        }
        let Err(ApiError::RateLimited { retry_after }) = limiters.admit_beacon(Some(address))
        else {
            panic!("past the burst");
        };
        assert_eq!(retry_after, 1);
        let other: IpAddr = "198.51.100.2".parse().expect("ip");
        assert!(
            limiters.admit_beacon(Some(other)).is_ok(),
            "a bucket per address"
        );
    }

    #[test]
    fn the_bounded_store_forgets_the_least_recently_seen() {
        let store: BoundedStore<u32> = BoundedStore::new(NonZeroUsize::new(16).expect("nonzero"));
        for key in 0..1000u32 {
            let _: Result<(), ()> = store.measure_and_replace(&key, |_| Ok(((), Nanos::from(1))));
        }
        let held: usize = store
            .shards
            .iter()
            .map(|shard| shard.lock().expect("lock").len())
            .sum();
        assert!(held <= 16, "{held}");
    }
}
