//! dns-load: the load generator of the attack and isolation benchmarks.
//!
//! `legit` plays many well-behaved clients: a fixed total query rate spread over many
//! source addresses (one UDP socket each), EDNS and optionally DNS cookies, TCP retry on
//! TC like a resolver; every query is recorded with its send time and its latency
//! (kernel receive timestamp of the reply minus the send time, so the client's own
//! scheduling delays do not count). `flood` plays attackers: many sources, a fixed rate or
//! as fast as possible, sendmmsg batches, and it counts the replies the attackers receive.
//! Both are bounded by a duration and write one JSON object.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::mem::MaybeUninit;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use palisade_bench::dns::{self, Edns, NameTemplate};
use palisade_bench::net::{self, UdpClientOpts};
use palisade_bench::{Rng, realtime_ns};

/// DNS load generator for benchmarks (legitimate clients and floods).
#[derive(Parser)]
#[command(name = "dns-load")]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Well-behaved clients at a fixed total rate; records every query's latency.
    Legit {
        #[command(flatten)]
        c: Common,
        /// A query without an answer after this many milliseconds is lost.
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
        /// Send DNS cookies (RFC 7873) and echo server cookies, as modern resolvers do.
        #[arg(long)]
        cookies: bool,
        /// Do not retry over TCP when a reply is truncated.
        #[arg(long)]
        no_tcp: bool,
        /// Before the start, send one query from every source to every target (not
        /// recorded) to learn server cookies, as resolvers that know a server have them.
        #[arg(long)]
        prime: bool,
    },
    /// A flood: many sources, fixed rate or as fast as possible; counts replies received.
    Flood {
        #[command(flatten)]
        c: Common,
        /// Stop after this many packets.
        #[arg(long, default_value_t = 50_000_000)]
        max_packets: u64,
        /// Datagrams per sendmmsg (per source visit).
        #[arg(long, default_value_t = 16)]
        batch: usize,
        /// Add an EDNS OPT record (1232 bytes) to each query.
        #[arg(long)]
        edns: bool,
        /// A label for the output (e.g. random-subdomain).
        #[arg(long, default_value = "flood")]
        kind: String,
    },
}

#[derive(clap::Args)]
struct Common {
    /// Service addresses and prefixes, comma-separated (127.2.0.1,127.2.0.2 or 127.1.0.0/18).
    #[arg(long)]
    targets: String,
    /// Addresses left out of the targets, comma-separated.
    #[arg(long, default_value = "")]
    exclude: String,
    /// Service port.
    #[arg(long)]
    port: u16,
    /// Source addresses and prefixes (one socket per address), comma-separated.
    #[arg(long)]
    sources: String,
    /// Most source addresses (taken evenly spaced from --sources).
    #[arg(long, default_value_t = 1024)]
    max_sources: usize,
    /// Query name template: {n} is a number below --names, {rand} a random label.
    #[arg(long)]
    qname: String,
    /// Range of {n} in the query name.
    #[arg(long, default_value_t = 10_000)]
    names: u64,
    /// Query type (A, AAAA, TXT, MX, NS, SOA, ANY or a number).
    #[arg(long, default_value = "A")]
    qtype: String,
    /// Queries per second in total (0: as fast as possible).
    #[arg(long)]
    rate: f64,
    /// Seconds to send.
    #[arg(long)]
    duration: f64,
    /// Start sending at this Unix time (seconds), once the sockets are ready.
    #[arg(long)]
    start_at: Option<f64>,
    /// PRNG seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the JSON result here (default: stdout).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn qtype_code(s: &str) -> Result<u16, String> {
    Ok(match s.to_ascii_uppercase().as_str() {
        "A" => 1,
        "NS" => 2,
        "SOA" => 6,
        "MX" => 15,
        "TXT" => 16,
        "AAAA" => 28,
        "ANY" => 255,
        n => n.parse().map_err(|_| format!("unknown qtype {s}"))?,
    })
}

struct Setup {
    targets: Vec<Ipv4Addr>,
    sources: Vec<Ipv4Addr>,
    template: NameTemplate,
    qtype: u16,
}

fn setup(c: &Common) -> Result<Setup, String> {
    let mut targets = net::expand(&c.targets, 1 << 20)?;
    if !c.exclude.is_empty() {
        let ex = net::expand(&c.exclude, 1 << 20)?;
        targets.retain(|t| !ex.contains(t));
    }
    if targets.is_empty() {
        return Err("no targets left".into());
    }
    let sources = net::expand(&c.sources, c.max_sources)?;
    let nofile = net::raise_nofile();
    if sources.len() as u64 + 64 > nofile {
        return Err(format!(
            "{} sources need more descriptors than the limit of {nofile}",
            sources.len()
        ));
    }
    Ok(Setup {
        targets,
        sources,
        template: NameTemplate::parse(&c.qname, c.names)?,
        qtype: qtype_code(&c.qtype)?,
    })
}

fn wait_start(start_at: Option<f64>) {
    if let Some(t) = start_at {
        let now = realtime_ns() as f64 / 1e9;
        if t > now {
            std::thread::sleep(Duration::from_secs_f64((t - now).min(60.0)));
        }
    }
}

fn write_out(out: &Option<PathBuf>, json: &str) {
    match out {
        Some(p) => {
            if let Err(e) = std::fs::write(p, json) {
                eprintln!("dns-load: cannot write {}: {e}", p.display());
                std::process::exit(1);
            }
        }
        None => println!("{json}"),
    }
}

fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn json_list<T: std::fmt::Display>(v: &[T]) -> String {
    let items: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("[{}]", items.join(","))
}

// ---------------------------------------------------------------------------------------
// Legitimate clients.

const F_TC: u8 = 1;
const F_TCP: u8 = 2;
const F_COOKIE_RETRY: u8 = 4;
const F_EMPTY: u8 = 8;

struct Rec {
    send_ns: u64,
    target: u32,
    src: u32,
    lat_ns: i64,
    rcode: i32,
    flags: u8,
}

struct Pend {
    rec: usize,
    query: Vec<u8>,
    qend: usize,
}

struct TcpJob {
    rec: usize,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    port: u16,
    query: Vec<u8>,
    qend: usize,
    send_ns: u64,
    deadline_ns: u64,
}

/// (record, latency, rcode, answer count).
type TcpResult = (usize, Option<(i64, i32, u16)>);

fn tcp_worker(
    jobs: std::sync::Arc<std::sync::Mutex<mpsc::Receiver<TcpJob>>>,
    res: mpsc::Sender<TcpResult>,
) {
    loop {
        let job = match jobs.lock().map(|r| r.recv()) {
            Ok(Ok(j)) => j,
            _ => return,
        };
        let now = realtime_ns();
        let r = if job.deadline_ns <= now {
            None
        } else {
            let left = Duration::from_nanos(job.deadline_ns - now);
            tcp_query(&job, left)
        };
        if res.send((job.rec, r)).is_err() {
            return;
        }
    }
}

fn tcp_query(job: &TcpJob, left: Duration) -> Option<(i64, i32, u16)> {
    let mut s = net::tcp_connect(job.src, job.dst, job.port, left).ok()?;
    let mut msg = Vec::with_capacity(job.query.len() + 2);
    msg.extend_from_slice(&(job.query.len() as u16).to_be_bytes());
    msg.extend_from_slice(&job.query);
    s.write_all(&msg).ok()?;
    let mut len = [0u8; 2];
    s.read_exact(&mut len).ok()?;
    let mut body = vec![0u8; u16::from_be_bytes(len) as usize];
    s.read_exact(&mut body).ok()?;
    let done = realtime_ns();
    let r = dns::parse_reply(&body, &job.query[12..job.qend])?;
    if done > job.deadline_ns {
        return None;
    }
    Some((
        (done - job.send_ns) as i64,
        i32::from(r.rcode),
        r.header.ancount,
    ))
}

struct Epoll(OwnedFd);

impl Epoll {
    fn new() -> std::io::Result<Epoll> {
        // SAFETY: plain syscall; the fd is owned on success.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is fresh and valid.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn add(&self, fd: RawFd, token: u64) -> std::io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: valid epoll fd, valid target fd and event.
        let rc = unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn wait(&self, evs: &mut [libc::epoll_event], timeout_ms: i32) -> usize {
        // SAFETY: the buffer is valid for evs.len() events.
        let n = unsafe {
            libc::epoll_wait(
                self.0.as_raw_fd(),
                evs.as_mut_ptr(),
                evs.len() as libc::c_int,
                timeout_ms,
            )
        };
        n.max(0) as usize
    }
}

/// Receives one datagram; returns its length and kernel receive time (ns, realtime).
fn recv_ts(fd: RawFd, buf: &mut [u8]) -> Option<(usize, u64)> {
    let mut cmsg = [0u64; 16];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is a plain C struct; all-zero is valid.
    let mut h: libc::msghdr = unsafe { MaybeUninit::zeroed().assume_init() };
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    h.msg_control = cmsg.as_mut_ptr().cast();
    h.msg_controllen = std::mem::size_of_val(&cmsg) as _;
    // SAFETY: all pointers in h are valid for the call.
    let n = unsafe { libc::recvmsg(fd, &mut h, libc::MSG_DONTWAIT) };
    if n < 0 {
        return None;
    }
    let mut ts = 0u64;
    // SAFETY: the kernel filled msg_control with well-formed cmsgs up to msg_controllen.
    unsafe {
        let mut cm = libc::CMSG_FIRSTHDR(&h);
        while !cm.is_null() {
            if (*cm).cmsg_level == libc::SOL_SOCKET && (*cm).cmsg_type == libc::SCM_TIMESTAMPNS {
                let t: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(cm).cast());
                ts = t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64;
            }
            cm = libc::CMSG_NXTHDR(&h, cm);
        }
    }
    if ts == 0 {
        ts = realtime_ns();
    }
    Some((n as usize, ts))
}

fn send_to(fd: RawFd, buf: &[u8], dst: &libc::sockaddr_in) -> bool {
    // SAFETY: valid buffer and sockaddr.
    let n = unsafe {
        libc::sendto(
            fd,
            buf.as_ptr().cast(),
            buf.len(),
            0,
            (dst as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    n == buf.len() as isize
}

/// Primes server cookies: one query per (source, target) pair, replies read for a while.
/// Returns how many pairs learnt a cookie.
fn prime_cookies(
    s: &Setup,
    socks: &[OwnedFd],
    dsts: &[libc::sockaddr_in],
    client_cookies: &[[u8; 8]],
    server_cookies: &mut HashMap<(u32, u32), Vec<u8>>,
    rng: &mut Rng,
) -> usize {
    let mut name = String::new();
    let mut q = Vec::with_capacity(64);
    let mut buf = vec![0u8; 4096];
    let drain = |server_cookies: &mut HashMap<(u32, u32), Vec<u8>>, buf: &mut [u8]| {
        for (si, sk) in socks.iter().enumerate() {
            while let Some((len, _)) = recv_ts(sk.as_raw_fd(), buf) {
                let msg = &buf[..len];
                let (Some(h), Some(qs)) = (dns::header(msg), dns::question_of(msg)) else {
                    continue;
                };
                if let Some(r) = dns::parse_reply(msg, qs)
                    && let Some(sc) = r.server_cookie
                {
                    server_cookies.insert((si as u32, u32::from(h.id)), sc);
                }
            }
        }
    };
    let start = Instant::now();
    let mut sent = 0u64;
    for (si, sk) in socks.iter().enumerate() {
        for (ti, dst) in dsts.iter().enumerate() {
            s.template.draw(rng, &mut name);
            let edns = Edns {
                udp_size: 1232,
                cookie: Some((&client_cookies[si], &[])),
            };
            // The id names the target, so that a reply says whose cookie it carries.
            if dns::build_query(&mut q, ti as u16, &name, s.qtype, Some(edns)).is_some() {
                send_to(sk.as_raw_fd(), &q, dst);
            }
            sent += 1;
            // About 10,000 queries/s: far below any rate limit per source prefix.
            let due = start + Duration::from_micros(sent * 100);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        if si % 64 == 63 {
            drain(server_cookies, &mut buf);
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    drain(server_cookies, &mut buf);
    server_cookies.len()
}

fn legit(c: &Common, timeout_ms: u64, cookies: bool, tcp: bool, prime: bool) -> Result<(), String> {
    let s = setup(c)?;
    if c.rate <= 0.0 {
        return Err("legit needs a --rate above 0".into());
    }
    let mut rng = Rng::new(c.seed);
    let ep = Epoll::new().map_err(|e| e.to_string())?;
    let mut socks = Vec::with_capacity(s.sources.len());
    let mut client_cookies = Vec::with_capacity(s.sources.len());
    for (i, &ip) in s.sources.iter().enumerate() {
        let fd = net::udp_client(
            ip,
            UdpClientOpts {
                timestamps: true,
                ..Default::default()
            },
        )
        .map_err(|e| format!("bind {ip}: {e}"))?;
        ep.add(fd.as_raw_fd(), i as u64)
            .map_err(|e| e.to_string())?;
        socks.push(fd);
        client_cookies.push(rng.next_u64().to_ne_bytes());
    }
    let dsts: Vec<libc::sockaddr_in> = s
        .targets
        .iter()
        .map(|&t| net::sockaddr(t, c.port))
        .collect();
    let (job_tx, job_rx) = mpsc::channel::<TcpJob>();
    let (res_tx, res_rx) = mpsc::channel::<TcpResult>();
    let job_rx = std::sync::Arc::new(std::sync::Mutex::new(job_rx));
    let mut workers = Vec::new();
    if tcp {
        for _ in 0..4 {
            let (j, r) = (job_rx.clone(), res_tx.clone());
            workers.push(std::thread::spawn(move || tcp_worker(j, r)));
        }
    }
    drop(res_tx);

    let total = (c.rate * c.duration).round() as u64;
    let timeout = Duration::from_millis(timeout_ms);
    let mut recs: Vec<Rec> = Vec::with_capacity(total as usize);
    let mut pending: HashMap<(u32, u16), Pend> = HashMap::new();
    let mut order: VecDeque<(Instant, u32, u16, usize)> = VecDeque::new();
    let mut server_cookies: HashMap<(u32, u32), Vec<u8>> = HashMap::new();
    let mut tcp_inflight = 0usize;
    let mut name = String::new();
    let mut buf = vec![0u8; 65536];
    let mut evs = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    let mut unmatched = 0u64;
    let mut send_fail = 0u64;

    let mut primed = 0;
    if prime && cookies && socks.len() * s.targets.len() <= 65_536 {
        primed = prime_cookies(
            &s,
            &socks,
            &dsts,
            &client_cookies,
            &mut server_cookies,
            &mut rng,
        );
    }
    wait_start(c.start_at);
    let t0 = Instant::now();
    let t0_ns = realtime_ns();
    let mut k = 0u64;
    let mut next_src = 0u32;
    loop {
        let now = Instant::now();
        // Send every query that is due.
        while k < total && t0 + Duration::from_secs_f64(k as f64 / c.rate) <= now {
            k += 1;
            let src = next_src;
            next_src = (next_src + 1) % socks.len() as u32;
            let target = rng.below(s.targets.len() as u64) as u32;
            let mut id = rng.next_u64() as u16;
            while pending.contains_key(&(src, id)) {
                id = id.wrapping_add(1);
            }
            s.template.draw(&mut rng, &mut name);
            let mut q = Vec::with_capacity(64);
            let sc = server_cookies
                .get(&(src, target))
                .map(|v| v.as_slice())
                .unwrap_or(&[]);
            let edns = Edns {
                udp_size: 1232,
                cookie: cookies.then_some((&client_cookies[src as usize], sc)),
            };
            let Some(qend) = dns::build_query(&mut q, id, &name, s.qtype, Some(edns)) else {
                return Err(format!("bad query name {name}"));
            };
            let send_ns = realtime_ns();
            let ok = send_to(socks[src as usize].as_raw_fd(), &q, &dsts[target as usize]);
            let rec = recs.len();
            recs.push(Rec {
                send_ns,
                target,
                src,
                lat_ns: -1,
                rcode: -1,
                flags: 0,
            });
            if !ok {
                send_fail += 1;
                continue;
            }
            pending.insert(
                (src, id),
                Pend {
                    rec,
                    query: q,
                    qend,
                },
            );
            order.push_back((Instant::now() + timeout, src, id, rec));
        }
        // Expire lost queries.
        while let Some(&(dl, src, id, rec)) = order.front() {
            if dl > now {
                break;
            }
            order.pop_front();
            if pending.get(&(src, id)).is_some_and(|p| p.rec == rec) {
                pending.remove(&(src, id));
            }
        }
        // Collect TCP retries.
        while let Ok((rec, r)) = res_rx.try_recv() {
            tcp_inflight -= 1;
            if let Some((lat, rcode, an)) = r {
                let rr = &mut recs[rec];
                rr.lat_ns = lat;
                rr.rcode = rcode;
                if an == 0 {
                    rr.flags |= F_EMPTY;
                }
            }
        }
        if k >= total && pending.is_empty() && tcp_inflight == 0 {
            break;
        }
        let next_due = if k < total {
            t0 + Duration::from_secs_f64(k as f64 / c.rate)
        } else {
            now + Duration::from_millis(5)
        };
        let next_dl = order.front().map_or(next_due, |o| o.0);
        let wake = next_due.min(next_dl);
        let ms = wake
            .saturating_duration_since(Instant::now())
            .as_micros()
            .div_ceil(1000)
            .min(5) as i32;
        let n = ep.wait(&mut evs, ms);
        for ev in evs.iter().take(n) {
            let src = ev.u64 as u32;
            let fd = socks[src as usize].as_raw_fd();
            while let Some((len, rx_ns)) = recv_ts(fd, &mut buf) {
                let msg = &buf[..len];
                let Some(h) = dns::header(msg) else {
                    unmatched += 1;
                    continue;
                };
                let key = (src, h.id);
                let Some(p) = pending.get(&key) else {
                    unmatched += 1;
                    continue;
                };
                let Some(r) = dns::parse_reply(msg, &p.query[12..p.qend]) else {
                    unmatched += 1;
                    continue;
                };
                let rec = p.rec;
                let target = recs[rec].target;
                if let Some(sc) = &r.server_cookie {
                    server_cookies.insert((src, target), sc.clone());
                }
                if r.rcode == dns::RCODE_BADCOOKIE && recs[rec].flags & F_COOKIE_RETRY == 0 {
                    // RFC 7873 §5.3: retry once with the server cookie just received.
                    recs[rec].flags |= F_COOKIE_RETRY;
                    let sc = r.server_cookie.clone().unwrap_or_default();
                    let mut q = Vec::with_capacity(64);
                    let qname_end = p.qend;
                    let question = p.query[12..qname_end].to_vec();
                    q.extend_from_slice(&p.query[..12]);
                    q.extend_from_slice(&question);
                    q.extend_from_slice(&[0, 0, 41, 4, 208, 0, 0, 0, 0]);
                    let len = 8 + sc.len();
                    q.extend_from_slice(&((4 + len) as u16).to_be_bytes());
                    q.extend_from_slice(&dns::OPT_COOKIE.to_be_bytes());
                    q.extend_from_slice(&(len as u16).to_be_bytes());
                    q.extend_from_slice(&client_cookies[src as usize]);
                    q.extend_from_slice(&sc);
                    send_to(fd, &q, &dsts[target as usize]);
                    if let Some(p) = pending.get_mut(&key) {
                        p.query = q;
                    }
                    continue;
                }
                let p = pending.remove(&key).expect("pending");
                let rr = &mut recs[rec];
                if r.header.tc && tcp {
                    rr.flags |= F_TC | F_TCP;
                    let deadline_ns = rr.send_ns + timeout_ms * 1_000_000;
                    tcp_inflight += 1;
                    let _ = job_tx.send(TcpJob {
                        rec,
                        src: s.sources[src as usize],
                        dst: s.targets[target as usize],
                        port: c.port,
                        query: p.query,
                        qend: p.qend,
                        send_ns: rr.send_ns,
                        deadline_ns,
                    });
                    continue;
                }
                if r.header.tc {
                    rr.flags |= F_TC;
                }
                if r.header.ancount == 0 {
                    rr.flags |= F_EMPTY;
                }
                rr.lat_ns = rx_ns.saturating_sub(rr.send_ns) as i64;
                rr.rcode = i32::from(r.rcode);
            }
        }
    }
    drop(job_tx);
    for w in workers {
        let _ = w.join();
    }
    let wall = t0.elapsed().as_secs_f64();
    let ok = recs
        .iter()
        .filter(|r| {
            r.lat_ns >= 0
                && r.rcode == 0
                && r.flags & F_EMPTY == 0
                && (r.flags & F_TC == 0 || r.flags & F_TCP != 0)
        })
        .count();
    let lost = recs.iter().filter(|r| r.lat_ns < 0).count();
    let tcp_n = recs.iter().filter(|r| r.flags & F_TCP != 0).count();
    eprintln!(
        "dns-load legit: {} queries, {ok} answered ({:.3}%), {lost} lost, {tcp_n} retried over TCP, {:.1} s",
        recs.len(),
        100.0 * ok as f64 / recs.len().max(1) as f64,
        wall
    );
    let mut j = String::with_capacity(64 + recs.len() * 32);
    j.push_str(&format!(
        "{{\"mode\":\"legit\",\"t0\":{:.6},\"rate\":{},\"duration\":{},\"timeout_ms\":{timeout_ms},\"cookies\":{cookies},\"primed\":{primed},\"tcp_retry\":{tcp},\"sources\":{},\"n_targets\":{},\"sent\":{},\"send_fail\":{send_fail},\"unmatched\":{unmatched},\"ok\":{ok},\"lost\":{lost},\"tcp\":{tcp_n},",
        t0_ns as f64 / 1e9,
        c.rate,
        c.duration,
        socks.len(),
        s.targets.len(),
        recs.len()
    ));
    if s.targets.len() <= 256 {
        let t: Vec<String> = s.targets.iter().map(|t| json_str(&t.to_string())).collect();
        j.push_str(&format!("\"targets\":[{}],", t.join(",")));
    }
    j.push_str(
        "\"fields\":[\"send_ms\",\"target\",\"lat_us\",\"rcode\",\"flags\",\"src\"],\"samples\":[",
    );
    for (i, r) in recs.iter().enumerate() {
        if i > 0 {
            j.push(',');
        }
        let lat = if r.lat_ns < 0 {
            -1.0
        } else {
            r.lat_ns as f64 / 1000.0
        };
        j.push_str(&format!(
            "[{:.3},{},{:.1},{},{},{}]",
            r.send_ns.saturating_sub(t0_ns) as f64 / 1e6,
            r.target,
            lat,
            r.rcode,
            r.flags,
            r.src
        ));
    }
    j.push_str("]}");
    write_out(&c.out, &j);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Floods.

const MSG: usize = 512;
const RX: usize = 64;

struct Counts {
    replies: u64,
    tc: u64,
    rcode: [u64; 16],
    /// Bytes of the replies (DNS messages).
    bytes: u64,
}

struct RxRing {
    bufs: Vec<u8>,
    iov: Vec<libc::iovec>,
    cmsg: Vec<[u64; 8]>,
    hdr: Vec<libc::mmsghdr>,
}

impl RxRing {
    fn new() -> RxRing {
        // SAFETY: mmsghdr is a plain C struct; all-zero is valid.
        let zero: libc::mmsghdr = unsafe { MaybeUninit::zeroed().assume_init() };
        let mut r = RxRing {
            bufs: vec![0; RX * MSG],
            iov: Vec::with_capacity(RX),
            cmsg: vec![[0; 8]; RX],
            hdr: vec![zero; RX],
        };
        for i in 0..RX {
            r.iov.push(libc::iovec {
                iov_base: r.bufs[i * MSG..].as_mut_ptr().cast(),
                iov_len: MSG,
            });
        }
        r
    }

    /// Reads every queued reply on `fd`; returns the socket's cumulative overflow count.
    fn drain(&mut self, fd: RawFd, c: &mut Counts, per_sec: &mut [u64], sec: usize) -> Option<u32> {
        let mut ovfl = None;
        loop {
            for i in 0..RX {
                let h = &mut self.hdr[i].msg_hdr;
                h.msg_iov = &mut self.iov[i];
                h.msg_iovlen = 1;
                h.msg_control = self.cmsg[i].as_mut_ptr().cast();
                h.msg_controllen = std::mem::size_of::<[u64; 8]>() as _;
                h.msg_name = std::ptr::null_mut();
                h.msg_namelen = 0;
            }
            // SAFETY: the headers point at buffers owned by self, valid for the call.
            let n = unsafe {
                libc::recvmmsg(
                    fd,
                    self.hdr.as_mut_ptr(),
                    RX as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if n <= 0 {
                return ovfl;
            }
            for i in 0..n as usize {
                let len = self.hdr[i].msg_len as usize;
                if let Some(h) = dns::header(&self.bufs[i * MSG..i * MSG + len.min(MSG)]) {
                    c.replies += 1;
                    c.bytes += len as u64;
                    if h.tc {
                        c.tc += 1;
                    }
                    c.rcode[h.rcode as usize] += 1;
                    if let Some(p) = per_sec.get_mut(sec) {
                        *p += 1;
                    }
                }
                // SAFETY: the kernel filled msg_control with well-formed cmsgs.
                unsafe {
                    let mh = &self.hdr[i].msg_hdr;
                    let mut cm = libc::CMSG_FIRSTHDR(mh);
                    while !cm.is_null() {
                        if (*cm).cmsg_level == libc::SOL_SOCKET
                            && (*cm).cmsg_type == libc::SO_RXQ_OVFL
                        {
                            ovfl =
                                Some(std::ptr::read_unaligned(libc::CMSG_DATA(cm).cast::<u32>()));
                        }
                        cm = libc::CMSG_NXTHDR(mh, cm);
                    }
                }
            }
            if (n as usize) < RX {
                return ovfl;
            }
        }
    }
}

fn flood(c: &Common, max_packets: u64, batch: usize, edns: bool, kind: &str) -> Result<(), String> {
    let s = setup(c)?;
    let batch = batch.clamp(1, 256);
    let mut rng = Rng::new(c.seed);
    let mut socks = Vec::with_capacity(s.sources.len());
    for &ip in &s.sources {
        socks.push(
            net::udp_client(
                ip,
                UdpClientOpts {
                    rcvbuf: 1 << 20,
                    rxq_ovfl: true,
                    ..Default::default()
                },
            )
            .map_err(|e| format!("bind {ip}: {e}"))?,
        );
    }
    let dsts: Vec<libc::sockaddr_in> = s
        .targets
        .iter()
        .map(|&t| net::sockaddr(t, c.port))
        .collect();
    let mut bufs = vec![0u8; batch * MSG];
    let mut names: Vec<libc::sockaddr_in> = vec![dsts[0]; batch];
    let mut iov: Vec<libc::iovec> = Vec::with_capacity(batch);
    for i in 0..batch {
        iov.push(libc::iovec {
            iov_base: bufs[i * MSG..].as_mut_ptr().cast(),
            iov_len: 0,
        });
    }
    // SAFETY: mmsghdr is a plain C struct; all-zero is valid.
    let mut hdr: Vec<libc::mmsghdr> = vec![unsafe { MaybeUninit::zeroed().assume_init() }; batch];
    let mut rx = RxRing::new();
    let secs = c.duration.ceil() as usize + 2;
    let mut sent_ps = vec![0u64; secs];
    let mut reply_ps = vec![0u64; secs];
    let mut counts = Counts {
        replies: 0,
        tc: 0,
        rcode: [0; 16],
        bytes: 0,
    };
    let mut ovfl = vec![0u32; socks.len()];
    let mut q = Vec::with_capacity(MSG);
    let mut name = String::new();
    let (mut sent, mut attempts, mut send_errors) = (0u64, 0u64, 0u64);
    let mut sent_bytes = 0u64;
    let dur = Duration::from_secs_f64(c.duration);

    wait_start(c.start_at);
    let t0 = Instant::now();
    let t0_ns = realtime_ns();
    let mut si = 0usize;
    loop {
        let now = Instant::now();
        let el = now - t0;
        if el >= dur || attempts >= max_packets {
            break;
        }
        if c.rate > 0.0 {
            let due = t0 + Duration::from_secs_f64(attempts as f64 / c.rate);
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        let sec = el.as_secs() as usize;
        let n = batch.min((max_packets - attempts) as usize);
        for i in 0..n {
            s.template.draw(&mut rng, &mut name);
            let e = edns.then_some(Edns {
                udp_size: 1232,
                cookie: None,
            });
            dns::build_query(&mut q, rng.next_u64() as u16, &name, s.qtype, e)
                .ok_or_else(|| format!("bad query name {name}"))?;
            let len = q.len().min(MSG);
            bufs[i * MSG..i * MSG + len].copy_from_slice(&q[..len]);
            iov[i].iov_len = len;
            names[i] = dsts[rng.below(dsts.len() as u64) as usize];
            let h = &mut hdr[i].msg_hdr;
            h.msg_name = (&mut names[i] as *mut libc::sockaddr_in).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            h.msg_iov = &mut iov[i];
            h.msg_iovlen = 1;
        }
        let fd = socks[si].as_raw_fd();
        // SAFETY: the headers point at buffers and addresses owned here, valid for the call.
        let r = unsafe { libc::sendmmsg(fd, hdr.as_mut_ptr(), n as libc::c_uint, 0) };
        attempts += n as u64;
        let ok = r.max(0) as u64;
        sent += ok;
        sent_bytes += iov[..ok as usize]
            .iter()
            .map(|v| v.iov_len as u64)
            .sum::<u64>();
        send_errors += n as u64 - ok;
        if let Some(p) = sent_ps.get_mut(sec) {
            *p += ok;
        }
        if let Some(o) = rx.drain(fd, &mut counts, &mut reply_ps, sec) {
            ovfl[si] = o;
        }
        si = (si + 1) % socks.len();
    }
    let wall = t0.elapsed().as_secs_f64();
    // Replies still in flight: wait a little, then read everything.
    std::thread::sleep(Duration::from_millis(300));
    let sec = (t0.elapsed().as_secs() as usize).min(secs - 1);
    for (i, sk) in socks.iter().enumerate() {
        if let Some(o) = rx.drain(sk.as_raw_fd(), &mut counts, &mut reply_ps, sec) {
            ovfl[i] = o;
        }
    }
    let lost_at_client: u64 = ovfl.iter().map(|&o| u64::from(o)).sum();
    eprintln!(
        "dns-load flood {kind}: {sent} sent ({:.0}/s), {} replies ({} TC), {send_errors} send errors",
        sent as f64 / wall,
        counts.replies,
        counts.tc
    );
    let rc: Vec<String> = counts
        .rcode
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(i, n)| format!("\"{i}\":{n}"))
        .collect();
    let j = format!(
        "{{\"mode\":\"flood\",\"kind\":{},\"t0\":{:.6},\"rate\":{},\"duration\":{},\"wall\":{wall:.3},\"sources\":{},\"n_targets\":{},\"sent\":{sent},\"send_errors\":{send_errors},\"replies\":{},\"replies_tc\":{},\"replies_rcode\":{{{}}},\"replies_lost_at_client\":{lost_at_client},\"sent_bytes\":{sent_bytes},\"reply_bytes\":{},\"per_second\":{{\"sent\":{},\"replies\":{}}}}}",
        json_str(kind),
        t0_ns as f64 / 1e9,
        c.rate,
        c.duration,
        socks.len(),
        s.targets.len(),
        counts.replies,
        counts.tc,
        rc.join(","),
        counts.bytes,
        json_list(&sent_ps),
        json_list(&reply_ps)
    );
    write_out(&c.out, &j);
    Ok(())
}

fn main() {
    let cli = Cli::parse();
    let r = match &cli.mode {
        Mode::Legit {
            c,
            timeout_ms,
            cookies,
            no_tcp,
            prime,
        } => legit(c, *timeout_ms, *cookies, !*no_tcp, *prime),
        Mode::Flood {
            c,
            max_packets,
            batch,
            edns,
            kind,
        } => flood(c, *max_packets, *batch, *edns, kind),
    };
    if let Err(e) = r {
        eprintln!("dns-load: {e}");
        std::process::exit(1);
    }
}
