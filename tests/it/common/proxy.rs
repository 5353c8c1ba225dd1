//! A TCP proxy between a server under test and the Cassandra node. `cut` drops every
//! connection and refuses new ones (the node "goes away" for that server only, so the shared
//! node keeps serving other tests); `restore` lets connections through again. A delay on the
//! way to the node makes requests slow enough to be caught in flight.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::Instant;

pub struct TcpProxy {
    pub address: SocketAddr,
    shared: Arc<Shared>,
    accept_loop: JoinHandle<()>,
}

struct Shared {
    upstream: SocketAddr,
    open: AtomicBool,
    delay_millis: AtomicU64,
    connections: Mutex<Vec<AbortHandle>>,
}

impl TcpProxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let address = listener.local_addr().expect("proxy address");
        let shared = Arc::new(Shared {
            upstream,
            open: AtomicBool::new(true),
            delay_millis: AtomicU64::new(0),
            connections: Mutex::new(Vec::new()),
        });
        let accept_loop = tokio::spawn(accept(listener, Arc::clone(&shared)));
        Self {
            address,
            shared,
            accept_loop,
        }
    }

    /// Drops every open connection and refuses new ones until [`restore`](Self::restore).
    pub fn cut(&self) {
        self.shared.open.store(false, Ordering::SeqCst);
        for connection in self.shared.connections.lock().expect("lock").drain(..) {
            connection.abort();
        }
    }

    pub fn restore(&self) {
        self.shared.open.store(true, Ordering::SeqCst);
    }

    /// Forwards every chunk sent towards the node `delay` after it arrived.
    pub fn delay_requests(&self, delay: Duration) {
        let millis = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.shared.delay_millis.store(millis, Ordering::SeqCst);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.accept_loop.abort();
        self.cut();
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    while let Ok((client, _)) = listener.accept().await {
        if !shared.open.load(Ordering::SeqCst) {
            drop(client);
            continue;
        }
        let task = tokio::spawn(forward(client, Arc::clone(&shared)));
        let mut connections = shared.connections.lock().expect("lock");
        connections.retain(|connection| !connection.is_finished());
        connections.push(task.abort_handle());
    }
}

async fn forward(client: TcpStream, shared: Arc<Shared>) {
    let Ok(upstream) = TcpStream::connect(shared.upstream).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut upstream_read, mut upstream_write) = upstream.into_split();
    // The delay is latency, not a slower link: each chunk leaves `delay` after it arrived,
    // so chunks sent together (a background write beside the request under test) do not
    // queue behind one another's delays.
    let (chunks, mut delayed) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read_from_client = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let n = match client_read.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let delay = Duration::from_millis(shared.delay_millis.load(Ordering::SeqCst));
            if chunks
                .send((Instant::now() + delay, buffer[..n].to_vec()))
                .is_err()
            {
                break;
            }
        }
    };
    let write_to_node = async move {
        while let Some((due, chunk)) = delayed.recv().await {
            tokio::time::sleep_until(due).await;
            if upstream_write.write_all(&chunk).await.is_err() {
                break;
            }
        }
    };
    let towards_node = async {
        tokio::join!(read_from_client, write_to_node);
    };
    let towards_client = tokio::io::copy(&mut upstream_read, &mut client_write);
    tokio::select! {
        () = towards_node => {}
        _ = towards_client => {}
    }
}
