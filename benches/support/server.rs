//! The real `adevents` binary as a server process for the benchmarks that load it from
//! outside (`wrk`), and the `wrk` runner they share.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const ADMIN_KEY: &str = "adevents-bench-admin-key-0123456789abcdef";

/// A server process on an embedded folder (a fresh one unless given).
pub struct Server {
    pub child: Child,
    pub base: String,
    pub address: std::net::SocketAddr,
    _folder: Option<tempfile::TempDir>,
}

impl Server {
    pub async fn start(binary: &str, extra: &[String]) -> Self {
        let folder = tempfile::tempdir().expect("a temporary folder");
        let path = folder.path().to_owned();
        Self::start_on(binary, &path, Some(folder), extra).await
    }

    /// A server on `folder`, kept after it stops (data loaded once and reused).
    pub async fn start_in(binary: &str, folder: &std::path::Path, extra: &[String]) -> Self {
        Self::start_on(binary, folder, None, extra).await
    }

    async fn start_on(
        binary: &str,
        path: &std::path::Path,
        folder: Option<tempfile::TempDir>,
        extra: &[String],
    ) -> Self {
        let address = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port");
        let mut args = vec![
            "serve".to_owned(),
            "--listen".to_owned(),
            address.to_string(),
            "--store".to_owned(),
            "embedded".to_owned(),
            "--data-dir".to_owned(),
            path.display().to_string(),
        ];
        args.extend(extra.iter().cloned());
        let child = Command::new(binary)
            .args(&args)
            .env("ADEVENTS_ADMIN_KEY", ADMIN_KEY)
            .env("ADEVENTS_LOG_LEVEL", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start adevents");
        let server = Self {
            child,
            base: format!("http://{address}"),
            address,
            _folder: folder,
        };
        let client = reqwest::Client::new();
        for _ in 0..600 {
            if let Ok(response) = client.get(format!("{}/readyz", server.base)).send().await
                && response.status().is_success()
            {
                return server;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("adevents did not become ready");
    }

    pub fn stop(self) {
        drop(self);
    }
}

/// Stopped however the benchmark ends, a panic included: never left running.
impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let _ = self.child.wait();
        }
    }
}

pub fn admin() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {ADMIN_KEY}").parse().expect("header"),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("client")
}

/// Requests per second, requests sent, latency percentiles and error lines (empty when there
/// were none) as wrk reports them.
pub struct WrkResult {
    pub per_second: f64,
    pub requests: u64,
    pub p50: String,
    pub p99: String,
    pub errors: String,
}

/// Runs `wrk -t1 -c<connections> -d<seconds>s --latency [-s <script>] <url>` with `env`.
pub async fn wrk(
    url: &str,
    script: Option<&str>,
    seconds: usize,
    connections: usize,
    env: &[(&str, &str)],
) -> WrkResult {
    let mut command = Command::new("wrk");
    command.args([
        "-t1".to_owned(),
        format!("-c{connections}"),
        format!("-d{seconds}s"),
        "--latency".to_owned(),
    ]);
    if let Some(script) = script {
        command.args(["-s", script]);
    }
    command.arg(url);
    for (name, value) in env {
        command.env(name, value);
    }
    let output = tokio::task::spawn_blocking(move || {
        command
            .output()
            .expect("run wrk (scripts/bench installs it)")
    })
    .await
    .expect("wrk task");
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    let field = |prefix: &str| {
        text.lines()
            .find_map(|line| {
                line.trim()
                    .strip_prefix(prefix)
                    .map(|rest| rest.trim().to_owned())
            })
            .unwrap_or_default()
    };
    let percentile = |label: &str| {
        field(label)
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    WrkResult {
        per_second: field("Requests/sec:").parse().unwrap_or(0.0),
        // "  123456 requests in 20.00s, 12.34MB read"
        requests: text
            .lines()
            .find(|line| line.contains(" requests in "))
            .and_then(|line| line.split_whitespace().next())
            .and_then(|count| count.parse().ok())
            .unwrap_or(0),
        p50: percentile("50%"),
        p99: percentile("99%"),
        errors: [field("Non-2xx or 3xx responses:"), field("Socket errors:")]
            .into_iter()
            .filter(|e| !e.is_empty())
            .collect::<Vec<_>>()
            .join("; "),
    }
}
