//! The writer: a bounded buffer of encoded rows and the thread that sends it as batched
//! gzip inserts, retrying what the server could not take and bisecting what it rejected.

use super::config::{ClickHouseConfig, MAX_BATCH_BYTES, Table};
use super::error::{ClickHouseError, exception_code};
use super::http::Endpoint;
use super::rows::{Fix, Invalid, Rows};
use flate2::Compression;
use flate2::write::GzEncoder;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Distinct rejection codes counted separately (further codes are counted under 0).
const MAX_CODES: usize = 32;
/// First retry delay.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// ClickHouse error codes that mean "this data is wrong" (the batch is bisected), not "the server cannot take it now" (retried).
const DATA_ERRORS: &[u32] = &[
    6,   // CANNOT_PARSE_TEXT
    25,  // CANNOT_PARSE_ESCAPE_SEQUENCE
    26,  // CANNOT_PARSE_QUOTED_STRING
    27,  // CANNOT_PARSE_INPUT_ASSERTION_FAILED
    38,  // CANNOT_PARSE_DATE
    41,  // CANNOT_PARSE_DATETIME
    53,  // TYPE_MISMATCH
    69,  // ARGUMENT_OUT_OF_BOUND
    70,  // CANNOT_CONVERT_TYPE
    72,  // CANNOT_PARSE_NUMBER
    117, // INCORRECT_DATA
    131, // TOO_LARGE_STRING_SIZE
    321, // VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE
    349, // CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN
];

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How an insert failed.
#[derive(Debug)]
pub(super) enum Failure {
    /// The data was refused: bisect.
    Rejected { code: u32, message: String },
    /// The request was too large for the server (or a proxy before it): bisect, and drop a
    /// single row that is still too large.
    TooLarge { code: u32, message: String },
    /// The server is down, slow or busy, or the table is missing: retry the same batch later.
    Transient { code: u32, message: String },
}

pub(super) fn classify(status: u16, body: &[u8]) -> Failure {
    let code = exception_code(body).unwrap_or(0);
    let message = String::from_utf8_lossy(&body[..body.len().min(500)])
        .trim()
        .to_string();
    // An unknown field means the table does not match the rows (a schema out of date), which
    // no row is to blame for.
    let schema = message.contains("Unknown field");
    if status == 413 || message.contains("size exceeded") {
        Failure::TooLarge { code, message }
    } else if (400..600).contains(&status) && DATA_ERRORS.contains(&code) && !schema {
        Failure::Rejected { code, message }
    } else {
        Failure::Transient {
            code,
            message: format!("HTTP {status}: {message}"),
        }
    }
}

/// A batch of rows: their bytes and per-row ends.
struct Chunk {
    bytes: Vec<u8>,
    ends: Vec<usize>,
    since: Instant,
}

impl Chunk {
    fn start(&self, i: usize) -> usize {
        if i == 0 { 0 } else { self.ends[i - 1] }
    }
}

/// Longest a shutdown drains a sink, whatever `timeout_ms` says.
const SHUTDOWN_DRAIN_MAX: Duration = Duration::from_secs(8);

/// How long past the drain deadline a shutdown waits for an insert in flight to answer.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(300);

struct Queue {
    chunks: VecDeque<Chunk>,
    spare: Vec<Chunk>,
    /// Rows and bytes held, the batch being sent included.
    rows: usize,
    bytes: usize,
    stopping: bool,
    deadline: Option<Instant>,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    landed: AtomicU64,
    overflow: AtomicU64,
    rejected: AtomicU64,
    shutdown_dropped: AtomicU64,
    invalid: [AtomicU64; Invalid::ALL.len()],
    fixed: [AtomicU64; Fix::ALL.len()],
    requests: AtomicU64,
    failures: AtomicU64,
    rejections: AtomicU64,
    bytes_sent: AtomicU64,
    batches: AtomicU64,
    schema_applied: AtomicU64,
    uncertain_retries: AtomicU64,
}

/// One endpoint of `urls`, with its counters and when it may be tried again.
struct Target {
    url: String,
    ep: Endpoint,
    requests: AtomicU64,
    failures: AtomicU64,
    /// Milliseconds since `Inner::t0` before which it is passed over (while others remain).
    aside_until: AtomicU64,
}

/// Counters of one endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EndpointStats {
    /// Its URL.
    pub url: String,
    /// Inserts it took.
    pub requests: u64,
    /// Inserts and schema statements that failed on it.
    pub failures: u64,
    /// It is set aside now (failed within `set_aside_ms`).
    pub set_aside: bool,
}

struct Inner {
    cfg: ClickHouseConfig,
    targets: Vec<Target>,
    /// The endpoint inserts go to while it works.
    current: std::sync::atomic::AtomicUsize,
    t0: Instant,
    name: String,
    insert: String,
    q: Mutex<Queue>,
    cv: Condvar,
    c: Counters,
    codes: Mutex<BTreeMap<u32, u64>>,
    last_error: Mutex<Option<String>>,
}

/// Counters of one ClickHouse writer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClickHouseStats {
    /// `clickhouse:db.table`.
    pub name: String,
    /// Rows taken into the buffer.
    pub accepted: u64,
    /// Rows the server took.
    pub landed: u64,
    /// Rows held now (waiting or being sent).
    pub buffered_rows: u64,
    /// Bytes held now.
    pub buffered_bytes: u64,
    /// Rows refused because the buffer was full.
    pub overflow: u64,
    /// Rows refused at the source, by reason.
    pub invalid: Vec<(&'static str, u64)>,
    /// Values normalised in rows kept, by kind.
    pub fixed: Vec<(&'static str, u64)>,
    /// Rows the server rejected (alone, after bisection).
    pub rejected: u64,
    /// Rejected rows by ClickHouse error code (0: codes beyond the first 32 seen).
    pub rejected_by_code: Vec<(u32, u64)>,
    /// Rows still held when the writer stopped and its drain time ran out.
    pub shutdown_dropped: u64,
    /// Inserts that succeeded.
    pub requests: u64,
    /// Inserts that failed for want of the server (each is retried).
    pub request_failures: u64,
    /// Inserts rejected for their data (each is split or its row dropped).
    pub request_rejections: u64,
    /// Bytes sent in successful inserts (compressed).
    pub bytes_sent: u64,
    /// Batches taken from the buffer.
    pub batches: u64,
    /// Times the schema was applied.
    pub schema_applied: u64,
    /// Failed inserts whose request had gone out whole: the server may have stored them, and
    /// the retry relies on the row identity to be stored once.
    pub uncertain_retries: u64,
    /// The last failure, while the server is failing.
    pub last_error: Option<String>,
    /// Per endpoint (`urls` order).
    pub endpoints: Vec<EndpointStats>,
}

impl ClickHouseStats {
    /// Rows lost for any reason (overflow, invalid, rejected, shutdown).
    pub fn lost(&self) -> u64 {
        self.overflow
            + self.rejected
            + self.shutdown_dropped
            + self.invalid.iter().map(|(_, n)| n).sum::<u64>()
    }
}

impl Inner {
    fn stats(&self) -> ClickHouseStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (rows, bytes) = {
            let q = lock(&self.q);
            (q.rows as u64, q.bytes as u64)
        };
        ClickHouseStats {
            name: self.name.clone(),
            accepted: l(&self.c.accepted),
            landed: l(&self.c.landed),
            buffered_rows: rows,
            buffered_bytes: bytes,
            overflow: l(&self.c.overflow),
            invalid: Invalid::ALL
                .iter()
                .map(|r| (r.name(), l(&self.c.invalid[*r as usize])))
                .collect(),
            fixed: Fix::ALL
                .iter()
                .map(|f| (f.name(), l(&self.c.fixed[*f as usize])))
                .collect(),
            rejected: l(&self.c.rejected),
            rejected_by_code: lock(&self.codes).iter().map(|(k, v)| (*k, *v)).collect(),
            shutdown_dropped: l(&self.c.shutdown_dropped),
            requests: l(&self.c.requests),
            request_failures: l(&self.c.failures),
            request_rejections: l(&self.c.rejections),
            bytes_sent: l(&self.c.bytes_sent),
            batches: l(&self.c.batches),
            schema_applied: l(&self.c.schema_applied),
            uncertain_retries: l(&self.c.uncertain_retries),
            last_error: lock(&self.last_error).clone(),
            endpoints: self
                .targets
                .iter()
                .map(|t| EndpointStats {
                    url: t.url.clone(),
                    requests: l(&t.requests),
                    failures: l(&t.failures),
                    set_aside: l(&t.aside_until) > self.now_ms(),
                })
                .collect(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.t0.elapsed().as_millis() as u64
    }

    /// The endpoint to use now: the current one unless set aside, else the next that is not,
    /// else the one whose time aside ends first.
    fn pick(&self) -> usize {
        let n = self.targets.len();
        let now = self.now_ms();
        let cur = self.current.load(Ordering::Relaxed) % n;
        let i = (0..n)
            .map(|k| (cur + k) % n)
            .find(|&i| self.targets[i].aside_until.load(Ordering::Relaxed) <= now)
            .unwrap_or_else(|| {
                (0..n)
                    .min_by_key(|&i| self.targets[i].aside_until.load(Ordering::Relaxed))
                    .unwrap_or(0)
            });
        if i != cur {
            tracing::info!(sink = %self.name, endpoint = %self.targets[i].url, "ClickHouse: inserts go to another endpoint");
            self.current.store(i, Ordering::Relaxed);
        }
        i
    }

    /// Notes a failure of endpoint `i`: with others configured, it is passed over for
    /// `set_aside_ms`.
    fn failed(&self, i: usize) {
        let t = &self.targets[i];
        t.failures.fetch_add(1, Ordering::Relaxed);
        if self.targets.len() > 1 {
            t.aside_until
                .store(self.now_ms() + self.cfg.set_aside_ms, Ordering::Relaxed);
        }
    }

    /// Waits for the next batch: full, or its oldest row `flush_ms` old, or stopping.
    fn next_batch(&self) -> Option<Chunk> {
        let flush = Duration::from_millis(self.cfg.flush_ms);
        let mut q = lock(&self.q);
        loop {
            if let Some(front) = q.chunks.front() {
                let age = front.since.elapsed();
                if q.chunks.len() > 1
                    || front.ends.len() >= self.cfg.batch_rows
                    || q.stopping
                    || age >= flush
                {
                    return q.chunks.pop_front();
                }
                q = self
                    .cv
                    .wait_timeout(q, flush - age)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            } else if q.stopping {
                return None;
            } else {
                q = self.cv.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        }
    }

    /// Gives a sent (or dropped) batch's room back.
    fn release(&self, mut c: Chunk) {
        let mut q = lock(&self.q);
        q.rows -= c.ends.len();
        q.bytes -= c.bytes.len();
        if q.spare.len() < 2 && c.bytes.capacity() <= MAX_BATCH_BYTES * 2 {
            c.bytes.clear();
            c.ends.clear();
            q.spare.push(c);
        }
    }

    /// Sleeps `d` unless stopping past the deadline; false when the drain time is over.
    fn backoff(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        let mut q = lock(&self.q);
        loop {
            // Pushes wake the condvar too: sleep until the end, or the drain deadline.
            let now = Instant::now();
            let until = match (q.stopping, q.deadline) {
                (true, Some(dl)) if now >= dl => return false,
                (true, Some(dl)) => end.min(dl),
                _ => end,
            };
            if now >= until {
                return true;
            }
            q = self
                .cv
                .wait_timeout(q, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn drain_over(&self) -> bool {
        let q = lock(&self.q);
        q.stopping && q.deadline.is_some_and(|d| Instant::now() >= d)
    }

    fn compress(&self, body: &[u8]) -> io::Result<Vec<u8>> {
        let mut e = GzEncoder::new(Vec::with_capacity(body.len() / 8 + 64), Compression::fast());
        e.write_all(body)?;
        e.finish()
    }

    /// One insert of `body` (rows already encoded).
    fn insert(&self, body: &[u8]) -> Result<(), Failure> {
        let gz;
        let payload = if self.cfg.gzip {
            gz = self.compress(body).map_err(|e| Failure::Transient {
                code: 0,
                message: format!("gzip: {e}"),
            })?;
            &gz[..]
        } else {
            body
        };
        let mut sent = false;
        let i = self.pick();
        let res = self.post_insert(i, payload, &mut sent);
        // A batch rejected for its data is no fault of the endpoint (it is bisected there).
        if matches!(res, Err(Failure::Transient { .. })) {
            self.failed(i);
        }
        res
    }

    fn post_insert(&self, i: usize, payload: &[u8], sent: &mut bool) -> Result<(), Failure> {
        let t = &self.targets[i];
        match t.ep.post_tracked(
            Some(&self.insert),
            payload,
            self.cfg.gzip,
            self.cfg.timeout(),
            sent,
        ) {
            // A 200 of some other server (a proxy misrouted, a wrong port) stored nothing:
            // counted landed, its rows would be lost unsaid. One carrying an exception in
            // its body failed after its head went.
            Ok(r) if r.status == 200 && !r.from_clickhouse => Err(Failure::Transient {
                code: 0,
                message: "HTTP 200 without ClickHouse's X-ClickHouse-* headers: not ClickHouse's reply (a proxy or another server on that address?)".into(),
            }),
            // Judged as the same exception sent with an error status: a row's fault is
            // bisected, a server's waited for.
            Ok(r) if r.status == 200 && exception_code(&r.body).is_some() => {
                Err(classify(500, &r.body))
            }
            Ok(r) if r.status == 200 => {
                self.c.requests.fetch_add(1, Ordering::Relaxed);
                t.requests.fetch_add(1, Ordering::Relaxed);
                self.c
                    .bytes_sent
                    .fetch_add(payload.len() as u64, Ordering::Relaxed);
                Ok(())
            }
            Ok(r) => Err(classify(r.status, &r.body)),
            Err(e) => {
                if *sent {
                    // The server may have stored the batch before it failed to answer: the
                    // retry is harmless (rows keep their identity) but counted.
                    self.c.uncertain_retries.fetch_add(1, Ordering::Relaxed);
                }
                Err(Failure::Transient {
                    code: 0,
                    message: e.to_string(),
                })
            }
        }
    }

    fn apply_schema(&self) -> Result<(), Failure> {
        let i = self.pick();
        let res = self.apply_schema_at(i);
        if res.is_err() {
            self.failed(i);
        }
        res
    }

    fn apply_schema_at(&self, i: usize) -> Result<(), Failure> {
        for s in self.cfg.schema() {
            match self.targets[i]
                .ep
                .post(None, s.as_bytes(), false, self.cfg.timeout())
            {
                Ok(r) if r.status == 200 => {}
                Ok(r) => {
                    let code = exception_code(&r.body).unwrap_or(0);
                    return Err(Failure::Transient {
                        code,
                        message: format!(
                            "schema: HTTP {}: {}",
                            r.status,
                            String::from_utf8_lossy(&r.body).trim()
                        ),
                    });
                }
                Err(e) => {
                    return Err(Failure::Transient {
                        code: 0,
                        message: format!("schema: {e}"),
                    });
                }
            }
        }
        self.c.schema_applied.fetch_add(1, Ordering::Relaxed);
        tracing::info!(sink = %self.name, "ClickHouse schema applied");
        Ok(())
    }

    /// Counts a row the server refused, dropped, by its error code (the first [`MAX_CODES`]
    /// codes, the rest as 0), and warns at most once a second (the message cut short).
    fn row_dropped(&self, code: u32, message: &str, what: &'static str) {
        self.c.rejected.fetch_add(1, Ordering::Relaxed);
        let short = &message[..message.floor_char_boundary(200)];
        crate::limited!(1, warn!(sink = %self.name, code, error = %short, "{what}"));
        let mut codes = lock(&self.codes);
        let key = if codes.len() < MAX_CODES || codes.contains_key(&code) {
            code
        } else {
            0
        };
        *codes.entry(key).or_insert(0) += 1;
    }

    /// Counts a failure that a retry may mend, waits the backoff (false: the drain time ran
    /// out meanwhile; the caller's loop counts the rest as dropped).
    fn transient(&self, st: &mut SenderState, code: u32, message: String) {
        self.c.failures.fetch_add(1, Ordering::Relaxed);
        // The first failure, a new cause (a server back up with a table that no longer
        // matches), and a lasting one once a minute: said; the rest at debug.
        let say = st.failures == 0
            || st
                .logged
                .is_none_or(|(c, at)| c != code || at.elapsed() >= FAILING_LOG_EVERY);
        if say {
            st.logged = Some((code, Instant::now()));
            if st.failures == 0 {
                tracing::warn!(sink = %self.name, code, error = %message, "ClickHouse insert failed; retrying with backoff");
            } else {
                tracing::warn!(sink = %self.name, code, failed_attempts = st.failures, error = %message, "ClickHouse insert still failing");
            }
        } else {
            tracing::debug!(sink = %self.name, error = %message, "ClickHouse insert failed again");
        }
        *lock(&self.last_error) = Some(message);
        st.failures += 1;
        // A table or database gone: apply the schema again when configured to.
        if self.cfg.init && (code == 60 || code == 81) {
            st.schema_pending = true;
        }
        if self.backoff(st.backoff) {
            st.backoff = (st.backoff * 2).min(Duration::from_millis(self.cfg.max_backoff_ms));
        }
    }

    /// Delivers one batch: retries while the server fails, bisects what it rejects. A row
    /// refused alone is dropped only once another row lands after it (the table takes rows:
    /// that one is to blame); row after row refused and none taken is the table's fault, and
    /// those rows wait with the rest.
    fn deliver(&self, chunk: &Chunk, st: &mut SenderState) {
        let mut pending: VecDeque<(usize, usize)> = VecDeque::from([(0, chunk.ends.len())]);
        // Single rows refused since a row last landed: (row, code, message).
        let mut held: Vec<Held> = Vec::new();
        let mut landed_here = false;
        let mut rounds = 0;
        loop {
            while let Some((a, b)) = pending.pop_front() {
                loop {
                    if self.drain_over() {
                        let left = (b - a)
                            + pending.iter().map(|(a, b)| b - a).sum::<usize>()
                            + held.len();
                        self.c
                            .shutdown_dropped
                            .fetch_add(left as u64, Ordering::Relaxed);
                        tracing::warn!(sink = %self.name, rows = left, "ClickHouse drain time over at shutdown: rows dropped");
                        return;
                    }
                    let res = if st.schema_pending {
                        self.apply_schema()
                            .map(|()| st.schema_pending = false)
                            .and_then(|()| {
                                self.insert(&chunk.bytes[chunk.start(a)..chunk.ends[b - 1]])
                            })
                    } else {
                        self.insert(&chunk.bytes[chunk.start(a)..chunk.ends[b - 1]])
                    };
                    // A single row no larger than what landed (or than any row is) refused as
                    // too large: judged as a row refused — held while the others go on, dropped
                    // once another lands, waited for with the rest when none does (something in
                    // front that refuses everything lost every row).
                    let res = match res {
                        Err(Failure::TooLarge { code, message })
                            if b - a == 1
                                && chunk.ends[b - 1] - chunk.start(a)
                                    <= st.largest_landed.max(TOO_LARGE_FLOOR) =>
                        {
                            Err(Failure::Rejected { code, message })
                        }
                        r => r,
                    };
                    match res {
                        Ok(()) => {
                            landed_here = true;
                            st.largest_landed =
                                st.largest_landed.max(chunk.ends[b - 1] - chunk.start(a));
                            self.c.landed.fetch_add((b - a) as u64, Ordering::Relaxed);
                            self.drop_held(held.drain(..));
                            if st.failures > 0 {
                                tracing::info!(sink = %self.name, failed_attempts = st.failures, "ClickHouse takes inserts again");
                                *lock(&self.last_error) = None;
                            }
                            st.failures = 0;
                            st.backoff = FIRST_BACKOFF;
                            st.rows_rejected_in_a_row = 0;
                            break;
                        }
                        Err(Failure::Rejected { code, message })
                            if b - a == 1 && st.rows_rejected_in_a_row >= SCHEMA_SUSPECT_ROWS =>
                        {
                            // Row after row refused and none taken: the table no longer matches
                            // the rows (a column's type changed), which no row is to blame for.
                            // Wait for it as for a server that is down, rather than drop them all:
                            // the rows held meanwhile are sent again with this one.
                            self.transient(
                            st,
                            code,
                            format!("{SCHEMA_SUSPECT_ROWS} rows in a row refused: does the table match the rows? {message}"),
                        );
                            pending.push_front((a, b));
                            requeue(&mut held, &mut pending);
                            st.rows_rejected_in_a_row = 0;
                            break;
                        }
                        Err(Failure::Rejected { code, message }) => {
                            self.c.rejections.fetch_add(1, Ordering::Relaxed);
                            if b - a == 1 {
                                st.rows_rejected_in_a_row += 1;
                                held.push((a, code, message));
                            } else {
                                halve(&mut pending, a, b);
                            }
                            break;
                        }
                        Err(Failure::TooLarge { code, message }) => {
                            if b - a == 1 {
                                self.c.rejections.fetch_add(1, Ordering::Relaxed);
                                self.row_dropped(
                                    code,
                                    &message,
                                    "ClickHouse refused a row as too large: dropped",
                                );
                            } else {
                                // Halves until they fit.
                                halve(&mut pending, a, b);
                            }
                            break;
                        }
                        Err(Failure::Transient { code, message }) => {
                            self.transient(st, code, message);
                        }
                    }
                }
            }
            // Every row of a batch too small to suspect the table refused, none taken: they
            // wait a while as for a server that is down (a column retyped for a few seconds must
            // not cost them), then are dropped.
            if held.is_empty() || landed_here || rounds == HELD_ROUNDS {
                break;
            }
            rounds += 1;
            let (code, message) = held
                .last()
                .map(|(_, c, m)| (*c, m.clone()))
                .unwrap_or_default();
            self.transient(
                st,
                code,
                format!(
                    "all {} rows of a batch refused: does the table match the rows? {message}",
                    held.len()
                ),
            );
            requeue(&mut held, &mut pending);
        }
        self.drop_held(held);
    }

    /// Drops the rows `held` (refused alone, and another row taken since: theirs is the fault).
    fn drop_held(&self, held: impl IntoIterator<Item = Held>) {
        for (_, code, message) in held {
            self.row_dropped(code, &message, "ClickHouse rejected a row: dropped");
        }
    }
}

/// A row refused alone, not dropped yet: its index, the error code and message.
type Held = (usize, u32, String);

/// Puts the rows `held` back, one by one and in order, to be sent first.
fn requeue(held: &mut Vec<Held>, pending: &mut VecDeque<(usize, usize)>) {
    for (r, _, _) in held.drain(..).rev() {
        pending.push_front((r, r + 1));
    }
}

/// Times the rows of a batch refused one by one, none taken, are sent again (after the
/// backoff of a server that is down, about 16 s in all) before they are dropped.
const HELD_ROUNDS: u32 = 8;

/// Puts the rows `a..b` back as two halves, to be sent first.
fn halve(pending: &mut VecDeque<(usize, usize)>, a: usize, b: usize) {
    let mid = a + (b - a) / 2;
    pending.push_front((mid, b));
    pending.push_front((a, mid));
}

struct SenderState {
    schema_pending: bool,
    failures: u64,
    backoff: Duration,
    /// Single rows refused since a row was last taken.
    rows_rejected_in_a_row: u32,
    /// The error code last logged in a failure streak, and when.
    logged: Option<(u32, Instant)>,
    /// Bytes of the largest insert that landed (0: none yet).
    largest_landed: usize,
}

/// A row this small is never too large for ClickHouse: a 413 for it (from a proxy in front
/// that refuses everything) is judged as a refused row (dropped only once another lands),
/// not dropped at once.
const TOO_LARGE_FLOOR: usize = 256 * 1024;

/// How often a failure streak with an unchanged cause is logged again.
const FAILING_LOG_EVERY: Duration = Duration::from_secs(60);

/// Single rows refused in a row, none taken, after which the table is suspected (not the
/// rows) and the batch waits instead of being dropped row by row.
const SCHEMA_SUSPECT_ROWS: u32 = 16;

fn run_sender(inner: Arc<Inner>) {
    let mut st = SenderState {
        schema_pending: inner.cfg.init,
        failures: 0,
        backoff: FIRST_BACKOFF.min(Duration::from_millis(inner.cfg.max_backoff_ms)),
        rows_rejected_in_a_row: 0,
        logged: None,
        largest_landed: 0,
    };
    while let Some(chunk) = inner.next_batch() {
        inner.c.batches.fetch_add(1, Ordering::Relaxed);
        inner.deliver(&chunk, &mut st);
        inner.release(chunk);
    }
}

/// Reads a writer's counters from anywhere (stats, metrics, `ctl events-init`).
#[derive(Clone)]
pub struct ClickHouseMonitor {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ClickHouseMonitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClickHouseMonitor")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

impl ClickHouseMonitor {
    /// Current counters.
    pub fn stats(&self) -> ClickHouseStats {
        self.inner.stats()
    }

    /// One line for `ctl status`: `what` (the config section), rows landed, held, lost, and
    /// while inserts fail, the last failure.
    pub fn status_line(&self, what: &str) -> String {
        let s = self.stats();
        let aside = s.endpoints.iter().filter(|e| e.set_aside).count();
        let mut line = format!(
            "{what}: {} rows landed, {} held, {} lost",
            s.landed,
            s.buffered_rows,
            s.lost()
        );
        if aside > 0 {
            line.push_str(&format!(
                ", {aside} of {} endpoints set aside",
                s.endpoints.len()
            ));
        }
        match s.last_error {
            Some(e) => {
                // One line, of printable characters, not too long (a refused row's bytes
                // may be in it).
                let e: String = e
                    .chars()
                    .map(|c| {
                        if c.is_control() || c == '\u{fffd}' {
                            ' '
                        } else {
                            c
                        }
                    })
                    .take(300)
                    .collect();
                line.push_str(&format!(", FAILING: {e}"));
            }
            None => line.push_str(", ok"),
        }
        line.push('\n');
        line
    }

    /// The writer's configuration.
    pub fn config(&self) -> &ClickHouseConfig {
        &self.inner.cfg
    }
}

/// A bounded buffer of rows for one table and the thread that inserts them; see the module doc.
pub struct ClickHouseWriter {
    inner: Arc<Inner>,
    thread: Option<JoinHandle<()>>,
    /// Says when the sender thread has ended (a shutdown waits for it no longer than its
    /// drain deadline).
    done: Mutex<std::sync::mpsc::Receiver<()>>,
}

impl std::fmt::Debug for ClickHouseWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClickHouseWriter")
            .field("stats", &self.inner.stats())
            .finish()
    }
}

impl ClickHouseWriter {
    /// Starts the sender thread for `table` (the config is checked first).
    pub fn spawn(cfg: &ClickHouseConfig, table: Table) -> Result<Self, ClickHouseError> {
        cfg.validate().map_err(ClickHouseError::Config)?;
        // Fields the table lacks are not skipped: a column dropped (or a table of the older
        // layout, before `ctl events-init` migrates it) fails the insert, which waits and
        // says why, rather than storing rows without that column's values.
        let targets = cfg
            .endpoints()?
            .into_iter()
            .map(|(url, ep)| Target {
                url,
                ep,
                requests: AtomicU64::new(0),
                failures: AtomicU64::new(0),
                aside_until: AtomicU64::new(0),
            })
            .collect();
        let table_name = cfg.table_name(table);
        let inner = Arc::new(Inner {
            cfg: cfg.clone(),
            targets,
            current: std::sync::atomic::AtomicUsize::new(0),
            t0: Instant::now(),
            name: format!("clickhouse:{table_name}"),
            insert: format!("INSERT INTO {table_name} FORMAT JSONEachRow"),
            q: Mutex::new(Queue {
                chunks: VecDeque::new(),
                spare: Vec::new(),
                rows: 0,
                bytes: 0,
                stopping: false,
                deadline: None,
            }),
            cv: Condvar::new(),
            c: Counters::default(),
            codes: Mutex::new(BTreeMap::new()),
            last_error: Mutex::new(None),
        });
        let i = Arc::clone(&inner);
        let (done_tx, done) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("shield-clickhouse".into())
            .spawn(move || {
                run_sender(i);
                let _ = done_tx.send(());
            })?;
        Ok(ClickHouseWriter {
            inner,
            thread: Some(thread),
            done: Mutex::new(done),
        })
    }

    /// `clickhouse:db.table`.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// A handle for reading counters.
    pub fn monitor(&self) -> ClickHouseMonitor {
        ClickHouseMonitor {
            inner: Arc::clone(&self.inner),
        }
    }

    /// Current counters.
    pub fn stats(&self) -> ClickHouseStats {
        self.inner.stats()
    }

    /// Takes `rows` into the buffer without waiting for the server; returns how many fit
    /// (the rest are counted as overflow). The rows' validation counts are added too.
    pub fn push(&self, rows: &Rows) -> usize {
        let c = &self.inner.c;
        for (i, n) in rows.invalid.iter().enumerate() {
            if *n > 0 {
                c.invalid[i].fetch_add(*n, Ordering::Relaxed);
            }
        }
        for (i, n) in rows.fixed.iter().enumerate() {
            if *n > 0 {
                c.fixed[i].fetch_add(*n, Ordering::Relaxed);
            }
        }
        if rows.is_empty() {
            return 0;
        }
        let cfg = &self.inner.cfg;
        let (mut accepted, mut over) = (0usize, 0usize);
        {
            let mut q = lock(&self.inner.q);
            let mut start = 0;
            for &end in &rows.ends {
                let row = &rows.bytes[start..end];
                start = end;
                if q.rows >= cfg.max_buffered_rows || q.bytes + row.len() > cfg.max_buffered_bytes {
                    over += 1;
                    continue;
                }
                let fresh = match q.chunks.back() {
                    None => true,
                    Some(b) => {
                        b.ends.len() >= cfg.batch_rows
                            || (!b.ends.is_empty() && b.bytes.len() + row.len() > MAX_BATCH_BYTES)
                    }
                };
                if fresh {
                    let mut ch = q.spare.pop().unwrap_or_else(|| Chunk {
                        bytes: Vec::new(),
                        ends: Vec::new(),
                        since: Instant::now(),
                    });
                    ch.since = Instant::now();
                    q.chunks.push_back(ch);
                }
                let ch = q.chunks.back_mut().expect("a chunk was pushed above");
                ch.bytes.extend_from_slice(row);
                ch.ends.push(ch.bytes.len());
                q.rows += 1;
                q.bytes += row.len();
                accepted += 1;
            }
        }
        if accepted > 0 {
            c.accepted.fetch_add(accepted as u64, Ordering::Relaxed);
            self.inner.cv.notify_all();
        }
        if over > 0 {
            c.overflow.fetch_add(over as u64, Ordering::Relaxed);
            crate::limited!(
                1,
                warn!(sink = %self.inner.name, rows = over, max_buffered_rows = self.inner.cfg.max_buffered_rows, "ClickHouse buffer full: rows dropped (counted as overflow)")
            );
        }
        accepted
    }

    /// Stops taking rows, sends what is buffered (for at most `timeout_ms`) and returns the counters.
    pub fn close(mut self) -> ClickHouseStats {
        self.shutdown();
        self.inner.stats()
    }

    fn shutdown(&mut self) {
        let Some(t) = self.thread.take() else {
            return;
        };
        // At most `timeout_ms`, and never past SHUTDOWN_DRAIN_MAX: the packaged units give a
        // stop 15 s in all, the Redis sync's last writes and the other sinks included.
        let deadline = Instant::now() + self.inner.cfg.timeout().min(SHUTDOWN_DRAIN_MAX);
        {
            let mut q = lock(&self.inner.q);
            q.stopping = true;
            q.deadline = Some(deadline);
        }
        self.inner.cv.notify_all();
        // An insert in flight when the deadline passes runs for its own timeout: it is not
        // waited for (the process is leaving); what it carried, and what waits behind it, is
        // counted dropped.
        let wait = deadline.saturating_duration_since(Instant::now()) + SHUTDOWN_GRACE;
        let done = lock(&self.done).recv_timeout(wait);
        match done {
            Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                let _ = t.join();
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let rows = lock(&self.inner.q).rows;
                self.inner
                    .c
                    .shutdown_dropped
                    .fetch_add(rows as u64, Ordering::Relaxed);
                tracing::warn!(sink = %self.inner.name, rows, "ClickHouse drain time over at shutdown with an insert unanswered: rows dropped");
            }
        }
    }
}

impl Drop for ClickHouseWriter {
    fn drop(&mut self) {
        self.shutdown();
    }
}
