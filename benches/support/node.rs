//! What the repository's Cassandra node did while a benchmark variant ran: the CPU it used and
//! the memtable flushes, compactions and GC pauses its log reports. Sustained writes are limited
//! by the node, and these say by what.

use std::path::PathBuf;
use std::time::Instant;

/// Where `scripts/cassandra` keeps the single node's pid file and log.
fn node_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cassandra/node")
}

/// Clock ticks per second of `/proc/<pid>/stat` (`getconf CLK_TCK`; 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // utime and stime: fields 14 and 15 of the whole line, 12 and 13 after the name.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// The node's activity from [`NodeWatch::start`] to [`NodeWatch::stop`].
pub struct NodeActivity {
    /// CPU cores the node used on average (0 when its pid is unknown: a cluster of one's own).
    pub node_cores: f64,
    /// CPU cores this benchmark process used on average (client, server and driver).
    pub bench_cores: f64,
    /// Memtables the node wrote out.
    pub flushes: usize,
    /// Compactions the node finished.
    pub compactions: usize,
    /// GC pauses the node reported (it logs those of 200 ms and more).
    pub gc_pauses: usize,
}

pub struct NodeWatch {
    pid: Option<u32>,
    node_ticks: u64,
    bench_ticks: u64,
    log_offset: u64,
    started: Instant,
}

impl NodeWatch {
    /// Starts watching the node `scripts/cassandra` runs (none when `ADEVENTS_CASSANDRA_NODES`
    /// names another cluster: its CPU and log are not ours to read).
    pub fn start() -> Self {
        let pid = if std::env::var_os("ADEVENTS_CASSANDRA_NODES").is_some() {
            None
        } else {
            std::fs::read_to_string(node_dir().join("cassandra.pid"))
                .ok()
                .and_then(|pid| pid.trim().parse().ok())
        };
        Self {
            pid,
            node_ticks: pid.and_then(cpu_ticks).unwrap_or_default(),
            bench_ticks: cpu_ticks(std::process::id()).unwrap_or_default(),
            log_offset: std::fs::metadata(log_path()).map_or(0, |meta| meta.len()),
            started: Instant::now(),
        }
    }

    pub fn stop(self) -> NodeActivity {
        let seconds = self.started.elapsed().as_secs_f64().max(f64::EPSILON);
        let cores = |now: Option<u64>, then: u64| {
            now.map_or(0.0, |now| {
                now.saturating_sub(then) as f64 / TICKS_PER_SECOND / seconds
            })
        };
        let log = std::fs::read(log_path()).unwrap_or_default();
        // A rotated log starts over: then all of the new one is this variant's.
        let start = usize::try_from(self.log_offset)
            .ok()
            .filter(|offset| *offset <= log.len())
            .unwrap_or(0);
        let written = String::from_utf8_lossy(&log[start..]);
        let count = |needle: &str| written.lines().filter(|line| line.contains(needle)).count();
        NodeActivity {
            node_cores: if self.pid.is_some() {
                cores(self.pid.and_then(cpu_ticks), self.node_ticks)
            } else {
                0.0
            },
            bench_cores: cores(cpu_ticks(std::process::id()), self.bench_ticks),
            flushes: count("Completed flushing"),
            compactions: count("Compacted ("),
            gc_pauses: count("GCInspector"),
        }
    }
}

fn log_path() -> PathBuf {
    node_dir().join("logs/system.log")
}

/// Runs `f` with the node watched over exactly its duration: a variant's set-up (building its
/// request bodies, starting its server) stays out of the node's and the process's cores.
pub async fn watched<T>(
    f: impl std::future::Future<Output = T>,
) -> (T, std::time::Duration, NodeActivity) {
    let watch = NodeWatch::start();
    let (value, elapsed) = super::timed(f).await;
    (value, elapsed, watch.stop())
}
