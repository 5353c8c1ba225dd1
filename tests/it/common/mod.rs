//! Shared set-up for the integration tests: where the real Cassandra node is, the keyspace
//! this test run shares, servers started on port 0, and a TCP proxy that can cut a server off
//! from the node.
//!
//! The node is the one `scripts/test` started (or the cluster `ADEVENTS_CASSANDRA_NODES`
//! names). If it is not there, tests fail: they never skip.

pub mod ad_site;
pub mod beacons;
pub mod browser;
pub mod events;
pub mod process;
pub mod proxy;
pub mod tags;

use adevents::access::OperatorKey;
use adevents::app::{App, Options};
use adevents::domain::retention::Retention;
use adevents::migrations::{self, Migration};
use adevents::store::Store;
use adevents::store::cassandra::CassandraStore;
use adevents::store::cassandra::config::{
    CassandraConfig, ConsistencyLevel, KeyspaceName, WriteMode,
};
use adevents::store::embedded::{EmbeddedConfig, EmbeddedStore, EngineMemory, Fsync};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The operator's admin key every test server accepts (`ADEVENTS_ADMIN_KEY`); [`http`]'s client
/// sends it unless a test asks otherwise, so tests about something else are not about keys.
pub const ADMIN_KEY: &str = "adevents-test-admin-key-0123456789abcdef";

/// Contact points of the cluster under test.
pub fn cassandra_nodes() -> Vec<String> {
    std::env::var("ADEVENTS_CASSANDRA_NODES")
        .unwrap_or_else(|_| "127.0.0.1:9042".to_owned())
        .split(',')
        .map(|node| node.trim().to_owned())
        .filter(|node| !node.is_empty())
        .collect()
}

/// The first contact point as a socket address, for the proxy to forward to.
pub fn first_node_address() -> SocketAddr {
    let node = cassandra_nodes()
        .into_iter()
        .next()
        .expect("a Cassandra node");
    std::net::ToSocketAddrs::to_socket_addrs(&node)
        .expect("resolvable node address")
        .next()
        .expect("an address for the node")
}

/// The keyspace every test of this run shares; tests isolate themselves by fresh ids.
pub fn shared_keyspace() -> KeyspaceName {
    std::env::var("ADEVENTS_TEST_KEYSPACE")
        .unwrap_or_else(|_| "adevents_test".to_owned())
        .parse()
        .expect("valid ADEVENTS_TEST_KEYSPACE")
}

/// A keyspace name unique to one test, for the few tests that need a store no other test
/// writes to (keyspaces themselves, an empty store, a sealer or sweep of their own).
///
/// The test leaves its keyspace behind. For a dropped table the node flushes every table with
/// unflushed writes, the other tests' included, to recycle its commit log, then compacts what
/// it flushed: dropping a dozen keyspaces amid the suite took four times the flushes and a
/// sixth of the node's CPU (3,970 flushes and 484 s against 969 and 400 s, fresh node, one
/// run each). The first private keyspace of a run drops, in the background, those of earlier
/// runs of the same shared keyspace ([`sweep_earlier_runs`]); a fresh node (CI) has none.
pub fn private_keyspace(purpose: &str) -> KeyspaceName {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let keyspace: KeyspaceName = format!("{}_{purpose}_{}", shared_keyspace(), &suffix[..8])
        .parse()
        .expect("valid keyspace name");
    this_runs_keyspaces()
        .lock()
        .expect("lock")
        .insert(keyspace.to_string());
    sweep_earlier_runs();
    keyspace
}

/// The private keyspaces this test process named, which the sweep never drops (it names one
/// before the keyspace is created).
fn this_runs_keyspaces() -> &'static Mutex<HashSet<String>> {
    static NAMED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    NAMED.get_or_init(Default::default)
}

/// Whether `keyspace` is a private keyspace of the shared keyspace `shared`, as
/// [`private_keyspace`] names them: `{shared}_{purpose}_{8 hex digits}`.
fn is_private_keyspace_of(shared: &str, keyspace: &str) -> bool {
    keyspace
        .strip_prefix(shared)
        .and_then(|rest| rest.strip_prefix('_'))
        .and_then(|rest| rest.rsplit_once('_'))
        .is_some_and(|(purpose, suffix)| {
            !purpose.is_empty()
                && suffix.len() == 8
                && suffix.bytes().all(|byte| byte.is_ascii_hexdigit())
        })
}

/// Once per test process, on a thread of its own (a test's runtime ends with the test):
/// drops the private keyspaces that earlier runs left on the node. A node that cannot be
/// reached is reported on stderr; the tests that need it fail on their own.
fn sweep_earlier_runs() {
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(|| {
        std::thread::spawn(|| {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime.block_on(drop_earlier_private_keyspaces()),
                Err(error) => eprintln!("warning: no runtime to sweep old test keyspaces: {error}"),
            }
        });
    });
}

async fn keyspace_names(session: &scylla::client::session::Session) -> Result<Vec<String>, String> {
    let rows = session
        .query_unpaged("SELECT keyspace_name FROM system_schema.keyspaces", ())
        .await
        .map_err(|error| error.to_string())?
        .into_rows_result()
        .map_err(|error| error.to_string())?;
    rows.rows::<(String,)>()
        .map_err(|error| error.to_string())?
        .map(|row| row.map(|(name,)| name).map_err(|error| error.to_string()))
        .collect()
}

async fn drop_earlier_private_keyspaces() {
    let shared = shared_keyspace();
    let session = match try_raw_session().await {
        Ok(session) => session,
        Err(error) => {
            eprintln!("warning: cannot sweep old test keyspaces: {error}");
            return;
        }
    };
    let listed = match keyspace_names(&session).await {
        Ok(listed) => listed,
        Err(error) => {
            eprintln!("warning: cannot list keyspaces to sweep old test keyspaces: {error}");
            return;
        }
    };
    for keyspace in listed {
        let ours = this_runs_keyspaces()
            .lock()
            .expect("lock")
            .contains(&keyspace);
        if !ours && is_private_keyspace_of(shared.as_str(), &keyspace) {
            drop_keyspace(&session, &keyspace).await;
        }
    }
}

pub fn config(keyspace: KeyspaceName) -> CassandraConfig {
    CassandraConfig {
        nodes: cassandra_nodes(),
        keyspace,
        replication: "simple:1".parse().expect("valid replication"),
        consistency: ConsistencyLevel::LocalQuorum,
        local_datacenter: None,
        credentials: None,
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(20),
        write_mode: WriteMode::Batch,
        retain_raw: Retention::Forever,
        retain_aggregates: Retention::Forever,
    }
}

pub fn embedded_migrations() -> Vec<Migration> {
    migrations::embedded().expect("embedded migrations are valid")
}

/// The stores the conformance suite runs every test against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Cassandra,
    Embedded,
}

impl Backend {
    /// The backend's store for this test run: the shared keyspace, or the shared data folder.
    pub async fn store(self) -> Arc<dyn Store> {
        match self {
            Self::Cassandra => Arc::new(migrated_store().await),
            Self::Embedded => shared_embedded_store(),
        }
    }

    pub async fn server(self) -> TestServer {
        TestServer::start(self.store().await).await
    }

    pub async fn server_with(self, options: Options) -> TestServer {
        TestServer::with_options(self.store().await, options).await
    }
}

/// A store of one test's own, for code that reads every campaign or site of the store (a
/// full scan would see, and change, other tests' rows): a private keyspace, or a fresh folder
/// (removed when this is dropped).
pub enum PrivateStore {
    Cassandra(KeyspaceName),
    Embedded { _folder: tempfile::TempDir },
}

impl PrivateStore {
    /// `purpose` names the keyspace; `retain_raw` is the store's raw-event retention.
    pub async fn open(
        backend: Backend,
        purpose: &str,
        retain_raw: Retention,
    ) -> (Self, Arc<dyn Store>) {
        match backend {
            Backend::Cassandra => {
                let keyspace = private_keyspace(purpose);
                let mut config = config(keyspace.clone());
                config.retain_raw = retain_raw;
                let store = store_for(config, true).await;
                (Self::Cassandra(keyspace), Arc::new(store))
            }
            Backend::Embedded => {
                let folder = tempfile::tempdir().expect("a temporary folder");
                let store = EmbeddedStore::open(&EmbeddedConfig {
                    data_dir: folder.path().to_path_buf(),
                    fsync: Fsync::Always,
                    memory: EngineMemory::default(),
                })
                .expect("open the embedded store");
                (Self::Embedded { _folder: folder }, Arc::new(store))
            }
        }
    }

    /// `store` (this private store, as [`PrivateStore::open`] gave it) keeping raw events and
    /// rollups as told from now on: on Cassandra a second client of the migrated keyspace,
    /// whose writes carry those TTLs; the embedded store itself (its sweep takes the
    /// retentions from the app's options).
    pub async fn keeping(
        &self,
        store: Arc<dyn Store>,
        retain_raw: Retention,
        retain_aggregates: Retention,
    ) -> Arc<dyn Store> {
        match self {
            Self::Cassandra(keyspace) => {
                let mut config = config(keyspace.clone());
                config.retain_raw = retain_raw;
                config.retain_aggregates = retain_aggregates;
                Arc::new(store_for(config, false).await)
            }
            Self::Embedded { .. } => store,
        }
    }
}

/// One embedded store per test process: it owns its folder (a second open is refused), so
/// every test shares this instance, isolated by fresh ids like tests on the shared keyspace.
pub fn shared_embedded_store() -> Arc<dyn Store> {
    static STORE: OnceLock<Arc<EmbeddedStore>> = OnceLock::new();
    STORE
        .get_or_init(|| {
            // Fresh for every run (this process holds the folder's lock while it runs).
            let folder = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("embedded-store");
            let _ = std::fs::remove_dir_all(&folder);
            let config = EmbeddedConfig {
                data_dir: folder,
                fsync: Fsync::Always,
                memory: EngineMemory::default(),
            };
            Arc::new(EmbeddedStore::open(&config).expect("open the embedded store"))
        })
        .clone()
}

/// Runs each listed `async fn name(backend: Backend)` as one test per store, so the same
/// specification holds for both (`cassandra::name` and `embedded::name`).
macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        mod cassandra {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(crate::common::Backend::Cassandra).await;
                    crate::common::finish_stopping().await;
                }
            )*
        }
        mod embedded {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(crate::common::Backend::Embedded).await;
                    crate::common::finish_stopping().await;
                }
            )*
        }
    };
}

/// A store on the shared keyspace, migrated (a no-op once the first test has done it).
pub async fn migrated_store() -> CassandraStore {
    store_for(config(shared_keyspace()), true).await
}

pub async fn store_for(config: CassandraConfig, migrate: bool) -> CassandraStore {
    let migrations = embedded_migrations();
    let store = CassandraStore::connect(config, &migrations)
        .await
        .expect("connect to the Cassandra node under test (is it running? scripts/test starts it)");
    if migrate {
        store.migrate(&migrations).await.expect("migrations apply");
    }
    store
}

/// The service's defaults, without the per-address beacon rate limit (the tests send all
/// their beacons from one address).
pub fn test_options() -> Options {
    let mut options = Options::default();
    options.edge.rate_limits.beacons_per_second = None;
    options
}

/// The service running in this process on a free port. Dropped, it stops as a deployed
/// process does on SIGTERM: it saves its live counts and leaves the list of processes, so no
/// later process of the shared keyspace repairs its days; [`TestServer::crash`] is the other
/// way to go. The stop finishes when the conformance test ends ([`finish_stopping`]).
pub struct TestServer {
    pub address: SocketAddr,
    task: Option<JoinHandle<std::io::Result<()>>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

thread_local! {
    /// The stops of this test's dropped servers, awaited when it ends (each test runs on a
    /// thread and a runtime of its own).
    static STOPPING: std::cell::RefCell<Vec<JoinHandle<std::io::Result<()>>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Lets the servers this test dropped finish their stop (at most 20 s each; then they are
/// aborted like a killed process): called by [`conformance!`] after each test.
pub async fn finish_stopping() {
    const STOP_WAIT: Duration = Duration::from_secs(20);
    let stopping = STOPPING.with(|stopping| std::mem::take(&mut *stopping.borrow_mut()));
    for mut task in stopping {
        if tokio::time::timeout(STOP_WAIT, &mut task).await.is_err() {
            task.abort();
        }
    }
}

impl TestServer {
    /// A server with the defaults, but for the per-address beacon rate: every test client
    /// sends from 127.0.0.1 (tests about the limit set it with [`Self::with_options`]).
    pub async fn start(store: Arc<dyn Store>) -> Self {
        Self::with_options(store, test_options()).await
    }

    /// A server with `options`; keys are on with [`ADMIN_KEY`] as the operator's key unless
    /// the options name another.
    pub async fn with_options(store: Arc<dyn Store>, mut options: Options) -> Self {
        if options.service.access.operator_key.is_none() {
            options.service.access.operator_key =
                Some(OperatorKey::new(ADMIN_KEY).expect("long enough"));
        }
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind port 0");
        let address = listener.local_addr().expect("local address");
        let app = App::new(store, options);
        // Ready to judge keys before the first request (unless the store is not ready yet:
        // then /readyz loads them once it is).
        let _ = app.access().refresh().await;
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let stopped = async move {
            let _ = stop.await;
        };
        let task = tokio::spawn(async move { app.serve(listener, stopped).await });
        Self {
            address,
            task: Some(task),
            shutdown: Some(shutdown),
        }
    }

    /// Stops at once, saving nothing, as a killed process does: what it held live is left to
    /// the next process's start-up repair.
    pub fn crash(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take() {
            STOPPING.with(|stopping| stopping.borrow_mut().push(task));
        }
    }
}

/// A client that sends [`ADMIN_KEY`] with every request.
pub fn http() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {ADMIN_KEY}").parse().expect("header value"),
    );
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .default_headers(headers)
        .build()
        .expect("HTTP client")
}

/// A key made with the admin key, as an operator makes one: `POST /v1/keys` with `body`
/// (its scope and owner). Returns the key's secret and id.
pub async fn create_key(server: &TestServer, body: serde_json::Value) -> (String, String) {
    let response = http()
        .post(server.url("/v1/keys"))
        .json(&body)
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), reqwest::StatusCode::CREATED);
    let answer: serde_json::Value = response.json().await.expect("JSON");
    assert_eq!(answer["scope"], body["scope"], "{answer}");
    (
        answer["key"].as_str().expect("key").to_owned(),
        answer["id"].as_str().expect("id").to_owned(),
    )
}

/// A client that sends no key: a browser, or an attacker.
/// The server's `/metrics` text, read with the administrator's key.
pub async fn metrics_text(server: &TestServer) -> String {
    http()
        .get(server.url("/metrics"))
        .send()
        .await
        .expect("answered")
        .text()
        .await
        .expect("text")
}

pub fn anonymous_http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("HTTP client")
}

/// Polls `check` until it returns true or `limit` passes; returns the last result, so the
/// caller asserts on it with its own message. The pause between checks starts at 200 ms and
/// grows by half up to a second: a quick answer is seen quickly, and a long wait (a batch of
/// decisions, a seal) does not keep a busy node and server answering a check five times a
/// second, CPU the suite's other tests need.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    const LONGEST_PAUSE: Duration = Duration::from_secs(1);
    let deadline = tokio::time::Instant::now() + limit;
    let mut pause = Duration::from_millis(200);
    loop {
        if check().await {
            return true;
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return false;
        }
        // The last check comes at the deadline, not up to a second after it.
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 3 / 2).min(LONGEST_PAUSE);
    }
}

/// Waits until the UTC day has turned if it ends within `margin`: for tests about today's live
/// counts (caps, pacing), whose "today" a midnight in their middle would move.
pub async fn clear_of_midnight(margin: Duration) {
    let now = chrono::Utc::now();
    let midnight = (now.date_naive() + chrono::Days::new(1))
        .and_hms_opt(0, 0, 0)
        .expect("midnight")
        .and_utc();
    let left = (midnight - now).to_std().unwrap_or_default();
    if left < margin {
        tokio::time::sleep(left + Duration::from_secs(1)).await;
    }
}

/// A plain driver session, for inspecting `system_schema` and cleaning up private keyspaces.
pub async fn raw_session() -> scylla::client::session::Session {
    try_raw_session()
        .await
        .expect("connect to the Cassandra node under test")
}

async fn try_raw_session()
-> Result<scylla::client::session::Session, scylla::errors::NewSessionError> {
    scylla::client::session_builder::SessionBuilder::new()
        .known_nodes(cassandra_nodes())
        .build()
        .await
}

/// Drops a private keyspace of an earlier run. A loaded node has answered a schema change
/// with a server error, or not within the request timeout, where the same statement a moment
/// later succeeded; `IF EXISTS` makes a repeat harmless, so it is tried for about a minute.
/// A node that refuses even then is reported on stderr, and the next run tries again.
async fn drop_keyspace(session: &scylla::client::session::Session, keyspace: &str) {
    const ATTEMPTS: u32 = 6;
    let mut errors = Vec::new();
    for attempt in 1..=ATTEMPTS {
        match session
            .query_unpaged(format!("DROP KEYSPACE IF EXISTS {keyspace}"), ())
            .await
        {
            Ok(_) => return,
            Err(error) => errors.push(format!("attempt {attempt}: {error}")),
        }
        tokio::time::sleep(Duration::from_secs(2 * u64::from(attempt))).await;
    }
    eprintln!(
        "warning: DROP KEYSPACE {keyspace} failed, the keyspace is left behind: {}",
        errors.join("; ")
    );
}

#[test]
fn the_sweep_takes_only_names_that_private_keyspace_makes() {
    for name in [
        "adevents_test_cli_0a1b2c3d",
        "adevents_test_delivery_windows_0a1b2c3d",
    ] {
        assert!(is_private_keyspace_of("adevents_test", name), "{name}");
    }
    for name in [
        "adevents_test",
        "adevents_test2_cli_0a1b2c3d",
        "adevents_test_mine",
        "adevents_test__0a1b2c3d",
        "adevents_test_cli_0a1b2c3",
        "adevents_test_cli_0a1b2c3x",
    ] {
        assert!(!is_private_keyspace_of("adevents_test", name), "{name}");
    }
}
