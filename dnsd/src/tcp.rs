//! DNS over TCP (RFC 7766): one wildcard listener, pipelined queries, bounded everything.
//!
//! The local address of an accepted connection says which service address was asked; a
//! connection to any other address is closed. Queries on a connection are read while
//! earlier answers are still being written (a reader and a writer task joined by a
//! bounded queue), so a client that does not read stops being read from instead of
//! growing our memory. Connections are bounded in total and per source, idle connections
//! are closed, and so are connections that reach the query limit.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use listener::addrs::AddrSet;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};

use crate::process_query::{Outcome, Processor, Transport};
use crate::query_module::Step;
use crate::stats::{DropCause, WorkerStats};

/// Longest query accepted over TCP; a longer length prefix closes the connection.
const MAX_QUERY: usize = 16 * 1024;

thread_local! {
    /// Scratch space for one response: processing never awaits, so one per thread is enough.
    static OUT: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; 65535 + 2]);
}

/// Limits for TCP clients.
#[derive(Debug, Clone)]
pub struct TcpLimits {
    /// Connections at once.
    pub max_connections: usize,
    /// Connections from one source address.
    pub max_per_source: usize,
    /// Idle time before closing.
    pub idle: Duration,
    /// Queries per connection.
    pub max_queries: usize,
    /// Answers queued for writing before reading stops.
    pub max_pipelined: usize,
}

/// Shared state of the TCP side.
pub struct TcpServer {
    limits: TcpLimits,
    addrs: AddrSet,
    slots: Arc<Semaphore>,
    per_source: Mutex<HashMap<IpAddr, usize>>,
    stats: Arc<WorkerStats>,
    defence: Option<Arc<crate::defence::Shared>>,
    make: Box<dyn Fn() -> Processor + Send + Sync>,
}

impl TcpServer {
    /// A TCP server for the service addresses `addrs`; `make` builds a query processor
    /// (writing to `stats`); with `defence`, accepted connections walk its `on_accept` point.
    pub fn new(
        limits: TcpLimits,
        addrs: AddrSet,
        stats: Arc<WorkerStats>,
        defence: Option<Arc<crate::defence::Shared>>,
        make: Box<dyn Fn() -> Processor + Send + Sync>,
    ) -> Arc<TcpServer> {
        Arc::new(TcpServer {
            slots: Arc::new(Semaphore::new(limits.max_connections)),
            limits,
            addrs,
            per_source: Mutex::new(HashMap::new()),
            stats,
            defence,
            make,
        })
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.limits.max_connections - self.slots.available_permits()
    }

    /// Accepts connections on `l` until the task is dropped.
    pub async fn serve(self: Arc<Self>, l: std::net::TcpListener) -> std::io::Result<()> {
        let l = TcpListener::from_std(l)?;
        // The pipeline's `on_accept` point (a blocked source is closed before anything is
        // read): one plan for this accept loop.
        let mut plan = self.defence.as_ref().map(|d| d.plan());
        let mut last_warn = None;
        loop {
            let (sock, peer) = match l.accept().await {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors and the like: back off briefly, keep serving, and
                    // say so at most once a second.
                    let now = std::time::Instant::now();
                    if last_warn
                        .is_none_or(|t: std::time::Instant| now - t >= Duration::from_secs(1))
                    {
                        tracing::warn!(error = %e, "TCP accept failed");
                        last_warn = Some(now);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let stats = &self.stats;
            if let Some(p) = &mut plan {
                p.refresh();
                if let Step::Drop(why) = p.on_accept(peer.ip()) {
                    stats.dropped(why);
                    drop(sock);
                    continue;
                }
            }
            let local = match sock.local_addr() {
                Ok(a) => a,
                Err(_) => continue,
            };
            if !self.addrs.contains(local.ip()) {
                stats.dropped(DropCause::TcpWrongAddress);
                drop(sock);
                continue;
            }
            let Ok(permit) = self.slots.clone().try_acquire_owned() else {
                stats.dropped(DropCause::TcpLimit);
                drop(sock);
                continue;
            };
            if !self.enter(peer.ip()) {
                stats.dropped(DropCause::TcpLimit);
                drop(sock);
                continue;
            }
            let me = self.clone();
            tokio::spawn(async move {
                let _permit = permit;
                me.connection(sock, peer).await;
                me.leave(peer.ip());
            });
        }
    }

    fn enter(&self, ip: IpAddr) -> bool {
        let mut m = self.per_source.lock().expect("per-source lock");
        let n = m.entry(ip).or_insert(0);
        if *n >= self.limits.max_per_source {
            return false;
        }
        *n += 1;
        true
    }

    fn leave(&self, ip: IpAddr) {
        let mut m = self.per_source.lock().expect("per-source lock");
        if let Some(n) = m.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                m.remove(&ip);
            }
        }
    }

    async fn connection(&self, sock: TcpStream, peer: SocketAddr) {
        let _ = sock.set_nodelay(true);
        let (mut rd, mut wr) = sock.into_split();
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(self.limits.max_pipelined.max(1));
        let idle = self.limits.idle;
        let writer = tokio::spawn(async move {
            while let Some(msg) = rx.recv().await {
                // A client that does not read is cut off after the idle time.
                match tokio::time::timeout(idle, wr.write_all(&msg)).await {
                    Ok(Ok(())) => {}
                    _ => return,
                }
            }
            let _ = wr.shutdown().await;
        });
        let mut p = (self.make)();
        let stats = self.stats.clone();
        let mut len_buf = [0u8; 2];
        let mut req = vec![0u8; 512];
        let mut served = 0;
        while served < self.limits.max_queries {
            match tokio::time::timeout(idle, rd.read_exact(&mut len_buf)).await {
                Ok(Ok(_)) => {}
                Ok(Err(_)) => break,
                Err(_) => {
                    stats.dropped(DropCause::TcpTimeout);
                    break;
                }
            }
            let len = u16::from_be_bytes(len_buf) as usize;
            if len == 0 || len > MAX_QUERY {
                stats.dropped(DropCause::Malformed);
                break;
            }
            req.resize(len, 0);
            match tokio::time::timeout(idle, rd.read_exact(&mut req[..len])).await {
                Ok(Ok(_)) => {}
                _ => break,
            }
            p.refresh();
            let reply = OUT.with(|o| {
                let out = &mut *o.borrow_mut();
                match p.process(&req[..len], peer, Transport::Tcp, &mut out[2..]) {
                    Outcome::Reply(n) => {
                        out[..2].copy_from_slice(&(n as u16).to_be_bytes());
                        Some(out[..n + 2].to_vec())
                    }
                    Outcome::Drop | Outcome::Transfer => None,
                }
            });
            if let Some(msg) = reply
                && tx.send(msg).await.is_err()
            {
                break;
            }
            // A zone transfer streams its messages into the writer queue before the next
            // query is read.
            if let Some(job) = p.take_transfer()
                && !job.run(&tx).await
            {
                break;
            }
            served += 1;
        }
        if served == self.limits.max_queries {
            // Closed at the query limit: a bound hit, counted.
            stats.dropped(DropCause::TcpQueryLimit);
        }
        drop(tx);
        let _ = writer.await;
    }
}
