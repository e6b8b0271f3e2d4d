//! Sampled access logs of passed requests: records normalised at the source (RFC 3339 and epoch-ms time, full URL, non-negative duration, status), a bounded queue, and a writer thread feeding a [`RecordSink`].
//!
//! # Record shape (one JSON object per line)
//!
//! ```json
//! {"kind":"http_front.access","timestamp":"2025-01-01T00:00:10.123Z","ts_ms":1735689610123,
//!  "site":"example.com","tenant":7,"client":"192.0.2.1","method":"GET",
//!  "url":"http://example.com/a?b=1","proto":"HTTP/1.1","status":200,"duration_ms":1.234,
//!  "upstream":"app","action":"pass","user_agent":"curl/8","referer":null,
//!  "request_bytes":null,"response_bytes":2}
//! ```
//!
//! `duration_ms` runs from the request's arrival to the upstream's response head, measured on
//! the monotonic clock (never negative), in milliseconds with microsecond precision. Byte
//! counts come from `Content-Length` (null when the body is streamed without one).
//!
//! Records go to shield's sinks (generic over the record type): the same JSON-lines and
//! Unix-socket outputs as the events, and ClickHouse's access table.

use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;
pub use shield::clock::rfc3339_ms;

use crate::config::Output;
use crate::counters::{Counter, Counters};

/// One passed request, every field ready for a log shipper.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AccessRecord {
    /// Always `http_front.access`.
    pub kind: &'static str,
    /// Arrival time, RFC 3339 UTC with milliseconds.
    pub timestamp: String,
    /// Arrival time, unix milliseconds.
    pub ts_ms: u64,
    /// Site name.
    pub site: Arc<str>,
    /// Tenant id, when the site has one.
    pub tenant: Option<u32>,
    /// Client address.
    pub client: IpAddr,
    /// Method.
    pub method: String,
    /// Full URL: scheme, host as sent (lower case), path and query.
    pub url: String,
    /// The request's version: `HTTP/1.0`, `HTTP/1.1` or `HTTP/2`.
    pub proto: &'static str,
    /// Status sent to the client.
    pub status: u16,
    /// Milliseconds from arrival to the response head (monotonic, never negative).
    pub duration_ms: f64,
    /// Upstream name.
    pub upstream: String,
    /// `pass` (no rule applied) or `allow` (a rule allowed it).
    pub action: &'static str,
    /// User-Agent, when sent and valid text.
    pub user_agent: Option<String>,
    /// Referer, when sent and valid text.
    pub referer: Option<String>,
    /// Request Content-Length, when given.
    pub request_bytes: Option<u64>,
    /// Response Content-Length, when given.
    pub response_bytes: Option<u64>,
    /// JA4 of the connection's ClientHello (TLS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ja4: Option<String>,
    /// The connection's HTTP/2 fingerprint (HTTP/2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub h2_fingerprint: Option<String>,
}

/// Milliseconds (with microsecond precision) of a duration.
pub fn duration_ms(d: Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}

/// An output for access records: shield's record sinks (JSON lines to a file, stdout or a
/// Unix socket; ClickHouse), which run on the writer thread and may block.
pub use shield::events::Sink as RecordSink;

/// The sink for an `[access_log] output` (`None` for `none`).
pub fn sink_for(output: &Output) -> io::Result<Option<Box<dyn RecordSink<AccessRecord>>>> {
    output.sink()
}

impl AccessRecord {
    /// The bytes the record holds (what a queued one costs).
    pub fn size(&self) -> usize {
        std::mem::size_of::<AccessRecord>()
            + self.timestamp.len()
            + self.method.len()
            + self.url.len()
            + self.upstream.len()
            + self.user_agent.as_ref().map_or(0, String::len)
            + self.referer.as_ref().map_or(0, String::len)
            + self.ja4.as_ref().map_or(0, String::len)
            + self.h2_fingerprint.as_ref().map_or(0, String::len)
    }
}

/// A thread's way into the writer's queue: bounded in records and in bytes.
#[derive(Clone, Debug)]
pub struct RecordSender {
    tx: SyncSender<AccessRecord>,
    queued: Arc<AtomicUsize>,
    max_bytes: usize,
}

/// The queue into the writer thread; `log` never blocks.
pub struct AccessLogger {
    tx: Option<RecordSender>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for AccessLogger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessLogger").finish_non_exhaustive()
    }
}

/// Records written per sink call at most.
const BATCH: usize = 512;

impl AccessLogger {
    /// Starts the writer thread for `sink` with room for `queue` records of `queue_bytes`
    /// bytes in all.
    pub fn spawn(
        mut sink: Box<dyn RecordSink<AccessRecord>>,
        queue: usize,
        queue_bytes: usize,
        counters: Arc<Counters>,
    ) -> io::Result<Self> {
        let (tx, rx): (SyncSender<AccessRecord>, Receiver<AccessRecord>) =
            sync_channel(queue.max(1));
        let queued = Arc::new(AtomicUsize::new(0));
        let taken = Arc::clone(&queued);
        let thread = std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || {
                let mut batch = Vec::with_capacity(BATCH);
                while let Ok(first) = rx.recv() {
                    batch.push(first);
                    while batch.len() < BATCH {
                        match rx.try_recv() {
                            Ok(r) => batch.push(r),
                            Err(_) => break,
                        }
                    }
                    // The batch counts against the budget until it is written.
                    let bytes: usize = batch.iter().map(AccessRecord::size).sum();
                    match sink.write(&batch) {
                        Ok(()) => {
                            counters
                                .access_log_written
                                .fetch_add(batch.len() as u64, Ordering::Relaxed);
                        }
                        Err(e) => {
                            counters.access_log_write_errors.fetch_add(1, Ordering::Relaxed);
                            counters.add(Counter::AccessLogDropped, batch.len() as u64);
                            // Clients drive the rate: limited as every line they can cause.
                            shield::limited!(
                                1,
                                warn!(sink = sink.name(), error = %e, records = batch.len(), "access records dropped")
                            );
                        }
                    }
                    batch.clear();
                    taken.fetch_sub(bytes, Ordering::Relaxed);
                }
            })?;
        Ok(AccessLogger {
            tx: Some(RecordSender {
                tx,
                queued,
                max_bytes: queue_bytes,
            }),
            thread: Some(thread),
        })
    }

    /// A sender for one thread (the writer stops once every sender and the logger are gone).
    pub fn sender(&self) -> Option<RecordSender> {
        self.tx.clone()
    }

    /// Queues a record; when the queue is full it is dropped and counted.
    pub fn log(&self, rec: AccessRecord, counters: &Counters) {
        match &self.tx {
            Some(tx) => send(tx, rec, counters),
            None => counters.bump(Counter::AccessLogDropped),
        }
    }

    /// Stops taking records and waits until the queued ones are written.
    pub fn close(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for AccessLogger {
    fn drop(&mut self) {
        self.close();
    }
}

/// Queues `rec` on `tx` without blocking; a queue full of records or of bytes drops it and
/// counts.
pub fn send(tx: &RecordSender, rec: AccessRecord, counters: &Counters) {
    let size = rec.size();
    let full = || {
        counters.bump(Counter::AccessLogDropped);
        counters.bump(Counter::LimitAccessLogQueue);
    };
    if tx.queued.fetch_add(size, Ordering::Relaxed) + size > tx.max_bytes {
        tx.queued.fetch_sub(size, Ordering::Relaxed);
        return full();
    }
    match tx.tx.try_send(rec) {
        Ok(()) => counters.bump(Counter::AccessLogQueued),
        Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
            tx.queued.fetch_sub(size, Ordering::Relaxed);
            full();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec() -> AccessRecord {
        AccessRecord {
            kind: "http_front.access",
            timestamp: rfc3339_ms(1_735_689_610_123),
            ts_ms: 1_735_689_610_123,
            site: "example.com".into(),
            tenant: Some(7),
            client: "192.0.2.1".parse().unwrap(),
            method: "GET".into(),
            url: "http://example.com/a?b=1".into(),
            proto: "HTTP/1.1",
            status: 200,
            duration_ms: duration_ms(Duration::from_micros(1234)),
            upstream: "app".into(),
            action: "pass",
            ja4: None,
            h2_fingerprint: None,
            user_agent: Some("curl/8".into()),
            referer: None,
            request_bytes: None,
            response_bytes: Some(2),
        }
    }

    #[test]
    fn timestamps_and_shape() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_735_689_610_123), "2025-01-01T00:00:10.123Z");
        assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        let j = serde_json::to_string(&rec()).unwrap();
        assert!(j.starts_with(r#"{"kind":"http_front.access","timestamp":"2025-01-01T00:00:10.123Z","ts_ms":1735689610123,"#), "{j}");
        assert!(j.contains(r#""duration_ms":1.234"#), "{j}");
        assert!(j.contains(r#""client":"192.0.2.1""#), "{j}");
    }

    #[test]
    fn writer_drains_queue_and_counts_drops() {
        use std::io::Write;
        struct Mem(Arc<std::sync::Mutex<Vec<u8>>>);
        impl Write for Mem {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let buf = Arc::new(std::sync::Mutex::new(Vec::new()));
        let counters = Arc::new(Counters::default());
        let mut l = AccessLogger::spawn(
            Box::new(shield::events::JsonLines::new("mem", Mem(buf.clone()))),
            4,
            1 << 20,
            counters.clone(),
        )
        .unwrap();
        for _ in 0..3 {
            l.log(rec(), &counters);
        }
        l.close();
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert_eq!(counters.access_log_written.load(Ordering::Relaxed), 3);
        l.log(rec(), &counters);
        assert_eq!(
            counters.get(Counter::AccessLogDropped),
            1,
            "closed logger drops"
        );
    }

    /// Records a failing sink (a full disk) could not take count as dropped; they counted
    /// as nothing but a write error, and each batch logged a line of its own (hundreds a
    /// second, at the clients' rate).
    #[test]
    fn records_a_failing_sink_loses_count_as_dropped() {
        use std::io::Write;
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::from(io::ErrorKind::StorageFull))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let counters = Arc::new(Counters::default());
        let mut l = AccessLogger::spawn(
            Box::new(shield::events::JsonLines::new("full", Full)),
            64,
            1 << 20,
            counters.clone(),
        )
        .unwrap();
        for _ in 0..5 {
            l.log(rec(), &counters);
        }
        l.close();
        assert_eq!(counters.get(Counter::AccessLogDropped), 5);
        assert_eq!(counters.access_log_written.load(Ordering::Relaxed), 0);
        assert!(counters.access_log_write_errors.load(Ordering::Relaxed) >= 1);
    }

    #[test]
    fn a_stalled_writer_holds_at_most_the_queues_bytes() {
        use std::io::Write;
        /// A sink that never returns while the gate is held.
        struct Stalled(Arc<std::sync::Mutex<()>>);
        impl Write for Stalled {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                drop(self.0.lock().unwrap());
                Ok(b.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let gate = Arc::new(std::sync::Mutex::new(()));
        let held = gate.lock().unwrap();
        let counters = Arc::new(Counters::default());
        let mut l = AccessLogger::spawn(
            Box::new(shield::events::JsonLines::new(
                "stalled",
                Stalled(gate.clone()),
            )),
            65_536,
            1 << 20,
            counters.clone(),
        )
        .unwrap();
        // 8 KB URLs and User-Agents: a megabyte is some 60 records, not 65,536.
        let big = "a".repeat(8000);
        let tx = l.sender().unwrap();
        for _ in 0..1000 {
            let mut r = rec();
            r.url = big.clone();
            r.user_agent = Some(big.clone());
            send(&tx, r, &counters);
        }
        let queued = counters.get(Counter::AccessLogQueued);
        assert!((30..=80).contains(&queued), "{queued} queued");
        assert_eq!(counters.get(Counter::AccessLogDropped), 1000 - queued);
        assert!(tx.queued.load(Ordering::Relaxed) <= 1 << 20);
        drop(held);
        drop(tx);
        l.close();
        assert_eq!(counters.access_log_written.load(Ordering::Relaxed), queued);
    }
}
