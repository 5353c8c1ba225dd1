//! The real `adevents` binary as a child process, for what only a process shows: signals,
//! exit codes, environment variables and log lines.

use std::net::SocketAddr;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub struct ServerProcess {
    child: Child,
    pub address: SocketAddr,
    lines: Arc<Mutex<Vec<String>>>,
}

/// The binary with JSON logs and a free port, plus `args`; `env` adds variables. Like
/// `TestServer`, it runs without the per-address beacon rate limit (every test client is one
/// loopback address sending hundreds of beacons a second); a test of that limit sets it in `env`
/// or `args`.
pub fn adevents(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_adevents"));
    command
        .args(args)
        .env("ADEVENTS_ADMIN_KEY", super::ADMIN_KEY)
        .env("ADEVENTS_RATE_LIMIT_BEACONS", "off")
        .envs(env.iter().copied())
        .env("ADEVENTS_LOG_FORMAT", "json")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// `adevents serve` on the embedded store in `data_dir`, on a free port, with `extra`
/// arguments and `env` as in [`adevents`].
pub fn embedded_server(data_dir: &str, extra: &[&str], env: &[(&str, &str)]) -> Command {
    let mut args = vec![
        "serve",
        "--store",
        "embedded",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        data_dir,
    ];
    args.extend_from_slice(extra);
    adevents(&args, env)
}

impl ServerProcess {
    /// Starts the server and waits for its "listening" log line.
    pub async fn start(mut command: Command) -> Self {
        let mut child = command.spawn().expect("spawn adevents");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let (address_tx, address_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(collect(stdout, Arc::clone(&lines), Some(address_tx)));
        tokio::spawn(collect(stderr, Arc::clone(&lines), None));
        let address = match tokio::time::timeout(Duration::from_secs(90), address_rx).await {
            Ok(Ok(address)) => address,
            _ => panic!(
                "adevents did not log a listening address; its output:\n{}",
                lines.lock().expect("lock").join("\n")
            ),
        };
        Self {
            child,
            address,
            lines,
        }
    }

    /// Polls `/readyz` until it answers 200 (within 120 s); whether it did.
    pub async fn wait_ready(&self) -> bool {
        // A process on the shared keyspace first repairs every test server that went away
        // without stopping (a crash, or a plain test's server whose stop the test's end cut
        // short), which can take a while on a busy node.
        super::eventually(Duration::from_secs(120), || async {
            super::http()
                .get(self.url("/readyz"))
                .send()
                .await
                .is_ok_and(|response| response.status() == reqwest::StatusCode::OK)
        })
        .await
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("child still running")
    }

    /// Resident memory now, in MiB (Linux `/proc`).
    pub fn rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("the process's status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| {
                value
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .expect("VmRSS")
            / 1024.0
    }

    /// The address it logged it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    pub fn send_signal(&self, signal: &str) {
        let pid = self.child.id().expect("child still running");
        let status = std::process::Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {pid} failed");
    }

    /// Waits for the process to exit on its own.
    pub async fn wait(&mut self, limit: Duration) -> ExitStatus {
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(status) => status.expect("wait for adevents"),
            Err(_) => panic!(
                "adevents still running after {limit:?}; its output:\n{}",
                self.output()
            ),
        }
    }

    pub fn output(&self) -> String {
        self.lines.lock().expect("lock").join("\n")
    }
}

/// A server still running when its test ends is stopped as an operator stops it (SIGTERM, up
/// to 10 s to store its last sketches and leave the list of processes), so it leaves nothing
/// for the next process on the shared keyspace to repair; past that it is killed.
impl Drop for ServerProcess {
    fn drop(&mut self) {
        let Ok(None) = self.child.try_wait() else {
            return;
        };
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.start_kill();
    }
}

/// Runs the binary to completion and returns its exit status and output.
pub async fn run_to_end(mut command: Command) -> (ExitStatus, String) {
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("adevents finished within 120 s")
        .expect("run adevents");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status, text)
}

async fn collect(
    stream: impl tokio::io::AsyncRead + Unpin,
    lines: Arc<Mutex<Vec<String>>>,
    mut address_tx: Option<tokio::sync::oneshot::Sender<SocketAddr>>,
) {
    let mut reader = BufReader::new(stream).lines();
    while let Ok(Some(line)) = reader.next_line().await {
        if let Some(tx) = address_tx.take_if(|_| line.contains("\"listening\"")) {
            let address = serde_json::from_str::<serde_json::Value>(&line)
                .ok()
                .and_then(|entry| entry.get("address")?.as_str()?.parse().ok());
            match address {
                Some(address) => {
                    let _ = tx.send(address);
                }
                None => address_tx = Some(tx),
            }
        }
        lines.lock().expect("lock").push(line);
    }
}
