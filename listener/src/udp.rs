//! The UDP fleet: one socket per address, owned by worker threads, drained with recvmmsg
//! and answered with sendmmsg.
//!
//! Each socket has its own kernel receive queue, so a flood that overflows one address's
//! queue leaves every other address answering. Workers own disjoint sets of sockets and
//! wait on them with level-triggered epoll; each round reads at most one batch from a
//! ready socket, so a flooded socket cannot starve the others on the same worker, and the
//! sockets whose last read filled a whole batch (flooded ones) are served last in a round,
//! so a quiet address's query waits for at most the batch being processed.

use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

use socket2::{Domain, Protocol, Socket, Type};

use crate::ListenerError;

/// Socket options for the fleet.
#[derive(Debug, Clone)]
pub struct UdpOptions {
    /// SO_RCVBUF in bytes (0: kernel default).
    pub rcvbuf: usize,
    /// SO_SNDBUF in bytes (0: kernel default).
    pub sndbuf: usize,
    /// Datagrams read per recvmmsg call (and per socket per round).
    pub batch: usize,
    /// Largest datagram accepted; longer ones are counted and dropped.
    pub max_request: usize,
    /// Largest reply a handler may write.
    pub max_response: usize,
}

impl Default for UdpOptions {
    fn default() -> Self {
        UdpOptions {
            rcvbuf: 0,
            sndbuf: 0,
            batch: 32,
            max_request: 4096,
            max_response: 4096,
        }
    }
}

/// What a handler does with one datagram.
pub trait Handler: Send + 'static {
    /// Called before each batch (refresh snapshots, read the clock once).
    fn begin_batch(&mut self) {}
    /// Handles one datagram from `src` to the address `local` (an index into the fleet's
    /// address list). Writes a reply into `out` and returns its length, or `None` to drop.
    fn handle(&mut self, req: &[u8], src: SocketAddr, local: u32, out: &mut [u8]) -> Option<usize>;
    /// Handles a datagram longer than the request limit, of which `head` is the start (it is
    /// counted as oversized either way); `None`, the default, drops it.
    fn oversized(
        &mut self,
        head: &[u8],
        src: SocketAddr,
        local: u32,
        out: &mut [u8],
    ) -> Option<usize> {
        let _ = (head, src, local, out);
        None
    }
}

/// Counters of one address, written by its worker only.
#[derive(Debug, Default)]
pub struct AddrCounters {
    /// Datagrams received.
    pub received: AtomicU64,
    /// Replies sent.
    pub answered: AtomicU64,
    /// Datagrams the kernel dropped because the receive queue was full (SO_RXQ_OVFL).
    pub kernel_drops: AtomicU64,
}

/// Counters of the whole fleet.
#[derive(Debug)]
pub struct FleetCounters {
    /// Per address, in the order of [`UdpFleet::addrs`].
    pub addrs: Box<[AddrCounters]>,
    /// Datagrams longer than the request limit (handed to [`Handler::oversized`]).
    pub oversized: AtomicU64,
    /// Replies the kernel would not take (send queue full).
    pub send_errors: AtomicU64,
    /// Receive calls that failed for other reasons than "nothing to read".
    pub recv_errors: AtomicU64,
}

impl FleetCounters {
    /// The `n` addresses with the most kernel drops: (index, drops), largest first.
    pub fn top_drops(&self, n: usize) -> Vec<(usize, u64)> {
        let mut v: Vec<(usize, u64)> = self
            .addrs
            .iter()
            .enumerate()
            .map(|(i, c)| (i, c.kernel_drops.load(Ordering::Relaxed)))
            .filter(|&(_, d)| d > 0)
            .collect();
        v.sort_unstable_by_key(|e| std::cmp::Reverse(e.1));
        v.truncate(n);
        v
    }

    /// Sums of (received, answered, kernel drops) over all addresses.
    pub fn totals(&self) -> (u64, u64, u64) {
        self.addrs.iter().fold((0, 0, 0), |(r, a, d), c| {
            (
                r + c.received.load(Ordering::Relaxed),
                a + c.answered.load(Ordering::Relaxed),
                d + c.kernel_drops.load(Ordering::Relaxed),
            )
        })
    }
}

/// One UDP socket per configured address, bound and ready.
pub struct UdpFleet {
    sockets: Vec<Socket>,
    addrs: Vec<SocketAddr>,
    opts: UdpOptions,
    counters: Arc<FleetCounters>,
    startup: std::time::Duration,
}

impl UdpFleet {
    /// Binds one socket per address on `port` (IP_FREEBIND, so the address need not be up).
    pub fn bind(addrs: &[IpAddr], port: u16, opts: &UdpOptions) -> Result<UdpFleet, ListenerError> {
        let start = Instant::now();
        crate::limits::ensure_nofile(addrs.len() + crate::limits::RESERVED_FDS)?;
        let mut sockets = Vec::with_capacity(addrs.len());
        let mut bound = Vec::with_capacity(addrs.len());
        for &ip in addrs {
            let sa = SocketAddr::new(ip, port);
            let s = udp_socket(sa, opts).map_err(|e| ListenerError::Bind {
                addr: sa,
                source: e,
            })?;
            // With port 0 each socket gets its own port: record what was bound.
            let actual = s
                .local_addr()
                .ok()
                .and_then(|a| a.as_socket())
                .unwrap_or(sa);
            sockets.push(s);
            bound.push(actual);
        }
        let counters = Arc::new(FleetCounters {
            addrs: (0..addrs.len()).map(|_| AddrCounters::default()).collect(),
            oversized: AtomicU64::new(0),
            send_errors: AtomicU64::new(0),
            recv_errors: AtomicU64::new(0),
        });
        Ok(UdpFleet {
            sockets,
            addrs: bound,
            opts: opts.clone(),
            counters,
            startup: start.elapsed(),
        })
    }

    /// The bound addresses, index = the `local` argument handlers receive.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The fleet's counters (shared with the workers).
    pub fn counters(&self) -> Arc<FleetCounters> {
        self.counters.clone()
    }

    /// How long binding took.
    pub fn startup_time(&self) -> std::time::Duration {
        self.startup
    }

    /// Starts `workers` threads; worker `w` gets the sockets `i` with `i % workers == w` and
    /// the handler `make(w)`. The threads stop when `stop` is set and [`Waker::wake`] called.
    pub fn run<H: Handler>(
        self,
        workers: usize,
        mut make: impl FnMut(usize) -> H,
        stop: Arc<AtomicBool>,
    ) -> Result<(Vec<JoinHandle<()>>, Waker), ListenerError> {
        let workers = workers.max(1).min(self.sockets.len().max(1));
        let wake = eventfd().map_err(ListenerError::Io)?;
        let wake = Arc::new(wake);
        let mut per: Vec<Vec<(u32, Socket)>> = (0..workers).map(|_| Vec::new()).collect();
        for (i, s) in self.sockets.into_iter().enumerate() {
            per[i % workers].push((i as u32, s));
        }
        let mut handles = Vec::with_capacity(workers);
        for (w, socks) in per.into_iter().enumerate() {
            let handler = make(w);
            let counters = self.counters.clone();
            let opts = self.opts.clone();
            let stop = stop.clone();
            let wake = wake.clone();
            let h = std::thread::Builder::new()
                .name(format!("udp-{w}"))
                .spawn(move || {
                    if let Err(e) = worker(socks, handler, counters, opts, stop, wake) {
                        tracing::error!(worker = w, error = %e, "UDP worker stopped");
                    }
                })
                .map_err(ListenerError::Io)?;
            handles.push(h);
        }
        Ok((handles, Waker { fd: wake }))
    }
}

/// Wakes the workers so that they see the stop flag.
#[derive(Clone)]
pub struct Waker {
    fd: Arc<OwnedFd>,
}

impl Waker {
    /// Wakes every worker.
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a valid u64 to an eventfd we own.
        unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            );
        }
    }
}

fn udp_socket(sa: SocketAddr, opts: &UdpOptions) -> io::Result<Socket> {
    let domain = if sa.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(
        domain,
        Type::DGRAM.nonblocking().cloexec(),
        Some(Protocol::UDP),
    )?;
    if sa.is_ipv6() {
        s.set_only_v6(true)?;
        s.set_freebind_v6(true)?;
    } else {
        s.set_freebind_v4(true)?;
    }
    if opts.rcvbuf > 0 {
        s.set_recv_buffer_size(opts.rcvbuf)?;
    }
    if opts.sndbuf > 0 {
        s.set_send_buffer_size(opts.sndbuf)?;
    }
    let one: libc::c_int = 1;
    // SAFETY: setsockopt with a valid int on a socket we own.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RXQ_OVFL,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    s.bind(&sa.into())?;
    Ok(s)
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the fd is owned on success.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh, valid descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

const CMSG_SPACE: usize = 64;
const WAKE_TOKEN: u64 = u64::MAX;

struct Batch {
    req: Vec<u8>,
    resp: Vec<u8>,
    req_len: usize,
    resp_len: usize,
    names: Vec<libc::sockaddr_storage>,
    cmsg: Vec<[u8; CMSG_SPACE]>,
    iov_in: Vec<libc::iovec>,
    iov_out: Vec<libc::iovec>,
    hdr_in: Vec<libc::mmsghdr>,
    hdr_out: Vec<libc::mmsghdr>,
    lens: Vec<usize>,
}

impl Batch {
    fn new(n: usize, req_len: usize, resp_len: usize) -> Batch {
        // SAFETY: sockaddr_storage and mmsghdr are plain C structs; all-zero is valid.
        let zero_ss: libc::sockaddr_storage = unsafe { MaybeUninit::zeroed().assume_init() };
        let zero_h: libc::mmsghdr = unsafe { MaybeUninit::zeroed().assume_init() };
        let mut b = Batch {
            req: vec![0; n * req_len],
            resp: vec![0; n * resp_len],
            req_len,
            resp_len,
            names: vec![zero_ss; n],
            cmsg: vec![[0; CMSG_SPACE]; n],
            iov_in: Vec::with_capacity(n),
            iov_out: Vec::with_capacity(n),
            hdr_in: vec![zero_h; n],
            hdr_out: vec![zero_h; n],
            lens: vec![0; n],
        };
        for i in 0..n {
            b.iov_in.push(libc::iovec {
                iov_base: b.req[i * req_len..].as_mut_ptr().cast(),
                iov_len: req_len,
            });
            b.iov_out.push(libc::iovec {
                iov_base: b.resp[i * resp_len..].as_mut_ptr().cast(),
                iov_len: 0,
            });
        }
        b
    }

    /// Resets the receive headers (the kernel overwrites lengths).
    fn arm_recv(&mut self) {
        for i in 0..self.hdr_in.len() {
            let h = &mut self.hdr_in[i].msg_hdr;
            h.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut self.iov_in[i];
            h.msg_iovlen = 1;
            h.msg_control = self.cmsg[i].as_mut_ptr().cast();
            h.msg_controllen = CMSG_SPACE;
            h.msg_flags = 0;
            self.hdr_in[i].msg_len = 0;
        }
    }
}

fn worker<H: Handler>(
    socks: Vec<(u32, Socket)>,
    mut handler: H,
    counters: Arc<FleetCounters>,
    opts: UdpOptions,
    stop: Arc<AtomicBool>,
    wake: Arc<OwnedFd>,
) -> io::Result<()> {
    // SAFETY: plain syscall; the fd is owned below.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: ep is a fresh descriptor.
    let ep = unsafe { OwnedFd::from_raw_fd(ep) };
    let add = |fd: RawFd, token: u64| -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: valid epoll fd, valid event struct.
        let rc = unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    };
    for (slot, (_, s)) in socks.iter().enumerate() {
        add(s.as_raw_fd(), slot as u64)?;
    }
    add(wake.as_raw_fd(), WAKE_TOKEN)?;
    let n = opts.batch.clamp(1, 1024);
    let mut b = Batch::new(n, opts.max_request.max(512), opts.max_response.max(512));
    // Per socket: its last read filled a whole batch (more is probably waiting).
    let mut hot = vec![false; socks.len()];
    // SAFETY: epoll_event is a plain C struct.
    let mut events: Vec<libc::epoll_event> =
        vec![unsafe { MaybeUninit::zeroed().assume_init() }; 256];
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: events buffer is valid for its length.
        let ready = unsafe {
            libc::epoll_wait(
                ep.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                1000,
            )
        };
        if ready < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // Quiet sockets first, then those whose last read filled a batch.
        let evs = &events[..ready as usize];
        for pass_hot in [false, true] {
            for ev in evs {
                let token = ev.u64;
                if token == WAKE_TOKEN || hot[token as usize] != pass_hot {
                    continue;
                }
                let (idx, sock) = &socks[token as usize];
                let got = serve_socket(sock.as_raw_fd(), *idx, &mut b, &mut handler, &counters);
                hot[token as usize] = got >= n;
            }
        }
    }
    Ok(())
}

/// Reads one batch from a socket and answers it; returns how many datagrams were read.
fn serve_socket<H: Handler>(
    fd: RawFd,
    idx: u32,
    b: &mut Batch,
    handler: &mut H,
    counters: &FleetCounters,
) -> usize {
    b.arm_recv();
    let n = b.hdr_in.len();
    // SAFETY: headers point into buffers owned by `b`, valid for the call.
    let got = unsafe {
        libc::recvmmsg(
            fd,
            b.hdr_in.as_mut_ptr(),
            n as u32,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if got <= 0 {
        if got < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::WouldBlock && e.kind() != io::ErrorKind::Interrupted {
                counters.recv_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        return 0;
    }
    let got = got as usize;
    let c = &counters.addrs[idx as usize];
    c.received.fetch_add(got as u64, Ordering::Relaxed);
    handler.begin_batch();
    let mut out = 0usize;
    for i in 0..got {
        let h = &b.hdr_in[i];
        if let Some(d) = rxq_ovfl(&h.msg_hdr) {
            c.kernel_drops.store(d as u64, Ordering::Relaxed);
        }
        let truncated = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        if truncated {
            counters.oversized.fetch_add(1, Ordering::Relaxed);
        }
        let Some(src) = sockaddr_to_std(&b.names[i]) else {
            continue;
        };
        let len = (h.msg_len as usize).min(b.req_len);
        let req = &b.req[i * b.req_len..i * b.req_len + len];
        let resp = &mut b.resp[i * b.resp_len..(i + 1) * b.resp_len];
        let reply = if truncated {
            handler.oversized(req, src, idx, resp)
        } else {
            handler.handle(req, src, idx, resp)
        };
        if let Some(rlen) = reply {
            b.lens[out] = rlen.min(b.resp_len);
            // Reply slot `out` takes its address from request slot `i`.
            if out != i {
                b.names[out] = b.names[i];
                b.resp.copy_within(
                    i * b.resp_len..i * b.resp_len + b.lens[out],
                    out * b.resp_len,
                );
            }
            out += 1;
        }
    }
    if out == 0 {
        return got;
    }
    for k in 0..out {
        b.iov_out[k].iov_len = b.lens[k];
        let h = &mut b.hdr_out[k].msg_hdr;
        h.msg_name = (&mut b.names[k] as *mut libc::sockaddr_storage).cast();
        h.msg_namelen = if b.names[k].ss_family as i32 == libc::AF_INET6 {
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t
        } else {
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
        };
        h.msg_iov = &mut b.iov_out[k];
        h.msg_iovlen = 1;
        h.msg_control = std::ptr::null_mut();
        h.msg_controllen = 0;
        h.msg_flags = 0;
    }
    let mut sent = 0usize;
    while sent < out {
        // SAFETY: headers point into buffers owned by `b`.
        let r = unsafe {
            libc::sendmmsg(
                fd,
                b.hdr_out[sent..].as_mut_ptr(),
                (out - sent) as u32,
                libc::MSG_DONTWAIT,
            )
        };
        if r <= 0 {
            let e = io::Error::last_os_error();
            if r < 0 && e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // Send queue full or a bad destination: skip the first and go on.
            counters.send_errors.fetch_add(1, Ordering::Relaxed);
            sent += 1;
            continue;
        }
        sent += r as usize;
        c.answered.fetch_add(r as u64, Ordering::Relaxed);
    }
    got
}

fn rxq_ovfl(h: &libc::msghdr) -> Option<u32> {
    if h.msg_controllen == 0 {
        return None;
    }
    // SAFETY: the kernel filled msg_control with well-formed cmsgs up to msg_controllen.
    unsafe {
        let mut cm = libc::CMSG_FIRSTHDR(h);
        while !cm.is_null() {
            if (*cm).cmsg_level == libc::SOL_SOCKET && (*cm).cmsg_type == libc::SO_RXQ_OVFL {
                let p = libc::CMSG_DATA(cm) as *const u32;
                return Some(p.read_unaligned());
            }
            cm = libc::CMSG_NXTHDR(h, cm);
        }
    }
    None
}

/// Converts a kernel socket address to a std one.
pub(crate) fn sockaddr_to_std(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match ss.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: family says this is a sockaddr_in.
            let a = unsafe { &*(ss as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                u32::from_be(a.sin_addr.s_addr).into(),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: family says this is a sockaddr_in6.
            let a = unsafe { &*(ss as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                a.sin6_addr.s6_addr.into(),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}
