//! An HTTP/1.1 client connection's transport, watched for the request heads hyper reads only
//! in part.
//!
//! hyper 1 drops a Content-Length sent together with Transfer-Encoding, and a second
//! Content-Length equal to the first, before the service sees the head: the request would go
//! upstream framed by what was left. nginx answers both 400 (RFC 9112 §6.3 lets a server
//! refuse them; a proxy that forwards either has been a request-smuggling vector wherever the
//! next hop reads the other header). [`H1Watch`] sits between the socket (or TLS stream) and
//! hyper and follows the client's messages by their framing, as hyper reads them: heads line
//! by line (only each line's first bytes are kept), bodies skipped by their Content-Length or
//! their chunk sizes. The first such head is marked on the connection's control block by its
//! ordinal; the service answers that request 400 and the connection closes.
//!
//! Where hyper and nginx would read the bytes differently, or the watch cannot follow them as
//! hyper does, the watch does not stop: it marks the request it is in ([`OddHead::Framing`]),
//! so that request and every later one on the connection are refused rather than forwarded
//! by a framing nobody checked: a Content-Length or Transfer-Encoding line with a tab, an
//! empty list item, or a value longer than the bytes kept; a trailer line ended by a bare LF.
//! A `#` in a request line marks it too ([`OddHead::Fragment`]).
//!
//! Heads hyper refuses (a bad length, a coding other than a final `chunked`, Transfer-Encoding
//! in HTTP/1.0) end the connection in hyper, and the watch stops following. So does a
//! WebSocket taking the connection over.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

use crate::conn_registry::{ConnCtl, OddHead};
use crate::counters::{Counter, Counters};

/// Bytes of an unfinished head that no budget counts: hyper's first read takes as much on
/// every connection anyway, and a browser's head fits in it.
pub const HEAD_FREE: usize = 8192;

/// Bytes kept of each head line: enough for any header name we look for and its value.
const LINE_KEEP: usize = 64;
/// Significant hex digits of a chunk size hyper reads (a `u64`; leading zeros do not count).
const CHUNK_DIGITS: u8 = 16;

/// Where in a chunked body the watch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// The chunk size's hex digits (`digits`: significant ones; `any`: one seen).
    Size { size: u64, digits: u8, any: bool },
    /// The rest of the size line (extensions, CR) up to its LF.
    SizeLine { size: u64 },
    /// Chunk data still to come.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
}

/// What the watch expects next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A request line (empty lines before it are skipped, as httparse does).
    Start,
    /// A head's field lines.
    Fields,
    /// Content-Length body bytes still to come.
    Body(u64),
    /// A chunked body.
    Chunked(Chunk),
    /// The trailer lines after the last chunk.
    Trailers,
    /// Not followed any more (hyper ends the connection, or a tunnel took it over).
    Off,
}

/// What one head said about its body.
#[derive(Debug, Default)]
struct Head {
    lengths: u8,
    length: Option<u64>,
    coded: bool,
    chunked: bool,
    http10: bool,
    /// Framing nginx refuses or the watch cannot read (see [`OddHead::Framing`]).
    framing: bool,
    /// A `#` in the request line.
    fragment: bool,
}

/// Follows a client's HTTP/1.1 messages by their framing and finds the heads hyper reads in
/// part.
#[derive(Debug)]
pub struct Heads {
    phase: Phase,
    line: [u8; LINE_KEEP],
    kept: usize,
    long: bool,
    /// The line's last byte so far was a CR.
    cr: bool,
    head: Head,
    /// Request lines seen (the current head's ordinal).
    ordinal: u32,
    /// Bytes of the head being read (0 between heads): what hyper holds of it unparsed.
    held: usize,
    /// Whole heads read and not yet handed to the service (pipelined behind a request in
    /// flight: hyper holds them): `(ordinal, bytes)`, the oldest first.
    done: [(u32, u32); DONE_KEPT],
    done_len: usize,
}

/// Whole heads remembered while they wait in hyper's buffer (more are summed into the last).
const DONE_KEPT: usize = 16;

impl Default for Heads {
    fn default() -> Self {
        Heads {
            phase: Phase::Start,
            line: [0; LINE_KEEP],
            kept: 0,
            long: false,
            cr: false,
            head: Head::default(),
            ordinal: 0,
            held: 0,
            done: [(0, 0); DONE_KEPT],
            done_len: 0,
        }
    }
}

fn value_of<'a>(line: &'a [u8], name: &str) -> Option<&'a [u8]> {
    let colon = line.iter().position(|&b| b == b':')?;
    line[..colon]
        .eq_ignore_ascii_case(name.as_bytes())
        .then(|| line[colon + 1..].trim_ascii())
}

impl Heads {
    /// Bytes of the head being read now, unfinished (0 between heads, in a body, or once
    /// not followed).
    pub fn held(&self) -> usize {
        match self.phase {
            Phase::Start | Phase::Fields | Phase::Trailers => self.held,
            _ => 0,
        }
    }

    /// Bytes of heads hyper holds while `started` requests have reached the service: the
    /// whole heads read past them (pipelined) but the `fresh` last, which ended in the read
    /// just made (hyper parses them at once), and the one being read.
    pub fn pending(&mut self, started: u32, fresh: usize) -> usize {
        if self.phase == Phase::Off {
            self.done_len = 0;
            return 0;
        }
        let gone = self.done[..self.done_len]
            .iter()
            .take_while(|(ordinal, _)| *ordinal <= started)
            .count();
        if gone > 0 {
            self.done.copy_within(gone..self.done_len, 0);
            self.done_len -= gone;
        }
        let waiting = self.done_len.saturating_sub(fresh);
        let whole: usize = self.done[..waiting].iter().map(|(_, n)| *n as usize).sum();
        whole + self.held()
    }

    /// Follows `data`, the next bytes the client sent; returns the first odd head in them with
    /// its ordinal (1 for the connection's first request).
    pub fn feed(&mut self, mut data: &[u8]) -> Option<(u32, OddHead)> {
        let mut found = None;
        while !data.is_empty() {
            match self.phase {
                Phase::Off => break,
                Phase::Body(left) => {
                    let n = left.min(data.len() as u64);
                    data = &data[n as usize..];
                    self.phase = if n == left {
                        Phase::Start
                    } else {
                        Phase::Body(left - n)
                    };
                }
                Phase::Start | Phase::Fields | Phase::Trailers => {
                    let (part, rest, ended) = match memchr::memchr(b'\n', data) {
                        Some(i) => (&data[..i], &data[i + 1..], true),
                        None => (data, &data[data.len()..], false),
                    };
                    self.held = self.held.saturating_add(part.len() + usize::from(ended));
                    if self.phase == Phase::Start && memchr::memchr(b'#', part).is_some() {
                        self.head.fragment = true;
                    }
                    if let Some(&last) = part.last() {
                        self.cr = last == b'\r';
                    }
                    let room = LINE_KEEP - self.kept;
                    let take = part.len().min(room);
                    self.line[self.kept..self.kept + take].copy_from_slice(&part[..take]);
                    self.kept += take;
                    self.long |= part.len() > room;
                    data = rest;
                    if ended {
                        if let Some(odd) = self.line_ended() {
                            found.get_or_insert((self.ordinal, odd));
                        }
                        self.kept = 0;
                        self.long = false;
                        self.cr = false;
                    }
                }
                Phase::Chunked(c) => data = self.chunk(c, data),
            }
        }
        found
    }

    /// Follows a chunked body from `c` through `data`; returns what is left of `data`.
    fn chunk<'a>(&mut self, c: Chunk, data: &'a [u8]) -> &'a [u8] {
        match c {
            Chunk::Size {
                mut size,
                mut digits,
                mut any,
            } => {
                for (i, &b) in data.iter().enumerate() {
                    let Some(d) = (b as char).to_digit(16) else {
                        self.phase = if !any {
                            Phase::Off
                        } else {
                            Phase::Chunked(Chunk::SizeLine { size })
                        };
                        return &data[i..];
                    };
                    any = true;
                    if size != 0 || d != 0 {
                        digits += 1;
                    }
                    if digits > CHUNK_DIGITS {
                        // Past a u64: hyper refuses it and ends the connection.
                        self.phase = Phase::Off;
                        return &[];
                    }
                    size = size << 4 | u64::from(d);
                }
                self.phase = Phase::Chunked(Chunk::Size { size, digits, any });
                &[]
            }
            Chunk::SizeLine { size } => match memchr::memchr(b'\n', data) {
                Some(i) => {
                    self.phase = match size {
                        0 => Phase::Trailers,
                        n => Phase::Chunked(Chunk::Data(n)),
                    };
                    &data[i + 1..]
                }
                None => &[],
            },
            Chunk::Data(left) => {
                let n = left.min(data.len() as u64);
                self.phase = Phase::Chunked(if n == left {
                    Chunk::DataEnd
                } else {
                    Chunk::Data(left - n)
                });
                &data[n as usize..]
            }
            Chunk::DataEnd => match memchr::memchr(b'\n', data) {
                Some(i) => {
                    self.phase = Phase::Chunked(Chunk::Size {
                        size: 0,
                        digits: 0,
                        any: false,
                    });
                    &data[i + 1..]
                }
                None => &[],
            },
        }
    }

    /// A whole line was kept (or its first bytes): moves on by it.
    fn line_ended(&mut self) -> Option<OddHead> {
        let mut line = &self.line[..self.kept];
        if let [rest @ .., b'\r'] = line {
            line = rest;
        }
        let empty = line.is_empty() && !self.long;
        match self.phase {
            Phase::Start if empty => self.head.fragment = false,
            Phase::Start => {
                self.ordinal = self.ordinal.wrapping_add(1);
                self.head = Head {
                    http10: !self.long && line.ends_with(b"HTTP/1.0"),
                    fragment: self.head.fragment,
                    ..Head::default()
                };
                self.phase = Phase::Fields;
            }
            Phase::Trailers if !self.cr => {
                // A bare LF: nginx ends the message at an empty one, hyper reads on to the
                // next CRLF CRLF. What follows is read two ways: refused from here on.
                self.phase = Phase::Off;
                return Some(OddHead::Framing);
            }
            Phase::Trailers if empty => {
                self.phase = Phase::Start;
                self.held = 0;
            }
            Phase::Fields if empty => return self.head_ended(),
            Phase::Fields => {
                let long = self.long;
                let h = &mut self.head;
                if let Some(v) = value_of(line, "content-length") {
                    // nginx refuses a tab in it; a value longer than kept is not followed.
                    h.framing |= long || line.contains(&b'\t');
                    h.lengths = h.lengths.saturating_add(1);
                    let n = std::str::from_utf8(v).ok().filter(|_| !long);
                    h.length = n
                        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                        .and_then(|s| s.parse().ok());
                } else if let Some(v) = value_of(line, "transfer-encoding") {
                    // nginx takes one coding, `chunked`, and refuses the rest (501): a tab,
                    // an empty list item, a value longer than kept are read otherwise by hyper.
                    h.framing |= long
                        || line.contains(&b'\t')
                        || v.split(|&b| b == b',').any(|t| t.trim_ascii().is_empty());
                    h.coded = true;
                    // hyper goes by the last line's last coding.
                    let last = v.rsplit(|&b| b == b',').next().unwrap_or_default();
                    h.chunked = !long && last.trim_ascii().eq_ignore_ascii_case(b"chunked");
                }
            }
            _ => {}
        }
        None
    }

    /// The head's empty line came: the body's framing, or the oddity that ends the watch.
    fn head_ended(&mut self) -> Option<OddHead> {
        let bytes = u32::try_from(self.held).unwrap_or(u32::MAX);
        if self.done_len < DONE_KEPT {
            self.done[self.done_len] = (self.ordinal, bytes);
            self.done_len += 1;
        } else {
            let last = &mut self.done[DONE_KEPT - 1];
            *last = (self.ordinal, last.1.saturating_add(bytes));
        }
        self.held = 0;
        let h = &self.head;
        let odd = if h.lengths > 0 && h.coded {
            Some(OddHead::LengthAndCoding)
        } else if h.lengths > 1 {
            Some(OddHead::LengthTwice)
        } else if h.framing {
            Some(OddHead::Framing)
        } else if h.fragment {
            Some(OddHead::Fragment)
        } else {
            None
        };
        self.phase = match (odd, h.coded, h.lengths) {
            (Some(_), ..) => Phase::Off,
            (None, true, _) if h.http10 || !h.chunked => Phase::Off,
            (None, true, _) => Phase::Chunked(Chunk::Size {
                size: 0,
                digits: 0,
                any: false,
            }),
            (None, false, 0) => Phase::Start,
            (None, false, _) => match h.length {
                Some(0) => Phase::Start,
                Some(n) => Phase::Body(n),
                None => Phase::Off,
            },
        };
        self.head.fragment = false;
        odd
    }
}

/// A client's HTTP/1.1 transport whose reads are followed by [`Heads`]; the odd heads found are
/// marked on the connection's control block.
pub struct H1Watch<I> {
    io: I,
    heads: Heads,
    ctl: Arc<ConnCtl>,
    charge: HeadCharge,
}

/// The budget all connections' unfinished heads share (`[server] header_buffer_total_bytes`).
#[derive(Debug, Clone)]
pub struct HeadBudget {
    /// Bytes held now over all connections.
    pub held: Arc<AtomicUsize>,
    /// Most bytes they may hold.
    pub limit: usize,
    /// Bytes the connection's source holds now over its connections (none: a listed hop,
    /// which carries many clients).
    pub source: Option<Arc<AtomicUsize>>,
    /// Where a head refused is counted.
    pub counters: Arc<Counters>,
}

/// What one connection holds of the heads' budget; given back as it drops.
#[derive(Debug, Default)]
pub struct HeadCharge {
    budget: Option<HeadBudget>,
    charged: usize,
}

impl HeadCharge {
    /// A connection's share of `budget` (none: nothing is counted).
    pub fn new(budget: Option<HeadBudget>) -> Self {
        HeadCharge { budget, charged: 0 }
    }

    /// Charges (or gives back) what `held` bytes of unfinished heads take past
    /// [`HEAD_FREE`]; false, counted, when the budget cannot take them (nothing more charged).
    pub fn set(&mut self, held: usize) -> bool {
        let Some(b) = &self.budget else {
            return true;
        };
        let want = held.saturating_sub(HEAD_FREE);
        if want < self.charged {
            let less = self.charged - want;
            b.held.fetch_sub(less, Ordering::Relaxed);
            if let Some(s) = &b.source {
                s.fetch_sub(less, Ordering::Relaxed);
            }
            self.charged = want;
        } else if want > self.charged {
            let more = want - self.charged;
            // A source's share first: a few addresses filled the whole budget, and every
            // other client's head past the free part was refused.
            if let Some(s) = &b.source {
                let before = s.fetch_add(more, Ordering::Relaxed);
                if before.saturating_add(more) > source_share(b.limit) {
                    s.fetch_sub(more, Ordering::Relaxed);
                    b.counters.bump(Counter::LimitHeaderBufferSource);
                    return false;
                }
            }
            let mut cur = b.held.load(Ordering::Relaxed);
            loop {
                if cur.saturating_add(more) > b.limit {
                    if let Some(s) = &b.source {
                        s.fetch_sub(more, Ordering::Relaxed);
                    }
                    b.counters.bump(Counter::LimitHeaderBufferTotal);
                    return false;
                }
                match b.held.compare_exchange_weak(
                    cur,
                    cur + more,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(now) => cur = now,
                }
            }
            self.charged = want;
        }
        true
    }
}

impl Drop for HeadCharge {
    fn drop(&mut self) {
        if let Some(b) = &self.budget
            && self.charged > 0
        {
            b.held.fetch_sub(self.charged, Ordering::Relaxed);
            if let Some(s) = &b.source {
                s.fetch_sub(self.charged, Ordering::Relaxed);
            }
        }
    }
}

/// What one source (an IPv4 address, an IPv6 /64) may hold of a heads' budget of `limit`:
/// a sixty-fourth, 256 KiB at least — filling the budget takes 64 sources.
pub fn source_share(limit: usize) -> usize {
    (limit / 64).max(256 << 10).min(limit)
}

impl<I> H1Watch<I> {
    /// Watches `io`, the connection `ctl` controls; what hyper holds of its heads past
    /// [`HEAD_FREE`] is charged to `budget`.
    pub fn new(io: I, ctl: Arc<ConnCtl>, budget: Option<HeadBudget>) -> Self {
        H1Watch {
            io,
            heads: Heads::default(),
            ctl,
            charge: HeadCharge::new(budget),
        }
    }

    /// Charges what hyper holds of heads now: the one being read, and whole ones waiting
    /// behind the requests in flight (but the `fresh` ones that ended in this read).
    fn charge(&mut self, fresh: usize) -> bool {
        let started = self.ctl.requests.load(Ordering::Relaxed);
        let held = self.heads.pending(started, fresh);
        self.charge.set(held)
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for H1Watch<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut me.io).poll_read(cx, buf);
        if read.is_pending() {
            // hyper asks for more: the requests it started since gave their heads back.
            me.charge(0);
            return Poll::Pending;
        }
        if let Poll::Ready(Err(e)) = read {
            return Poll::Ready(Err(e));
        }
        let had = me.heads.done_len;
        if me.heads.phase != Phase::Off {
            if me.ctl.tunnels() > 0 {
                // A WebSocket took the connection over: its bytes are no HTTP.
                me.heads.phase = Phase::Off;
            } else if let Some((ordinal, odd)) = me.heads.feed(&buf.filled()[before..]) {
                me.ctl.mark_odd_head(ordinal, odd);
            }
        }
        let fresh = me.heads.done_len.saturating_sub(had);
        if !me.charge(fresh) {
            // Heads being read hold the budget: this one goes, its connection with it (a
            // client's head that fits in the free part is never refused).
            me.heads.phase = Phase::Off;
            me.charge(0);
            return Poll::Ready(Err(io::Error::other(
                "unfinished request heads over server.header_buffer_total_bytes",
            )));
        }
        Poll::Ready(Ok(()))
    }
}

write_through!(H1Watch, io);

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `bytes` whole, then split at every point, then byte by byte: each finds the same.
    fn odd(bytes: &[u8]) -> Vec<(u32, OddHead)> {
        let whole = {
            let mut h = Heads::default();
            h.feed(bytes).into_iter().collect::<Vec<_>>()
        };
        for cut in 0..=bytes.len() {
            let mut h = Heads::default();
            let mut got: Vec<_> = h.feed(&bytes[..cut]).into_iter().collect();
            if got.is_empty() {
                got.extend(h.feed(&bytes[cut..]));
            }
            assert_eq!(got, whole, "cut at {cut}");
        }
        let mut h = Heads::default();
        let mut got = Vec::new();
        for b in bytes.chunks(1) {
            if got.is_empty() {
                got.extend(h.feed(b));
            }
        }
        assert_eq!(got, whole, "byte by byte");
        whole
    }

    #[test]
    fn length_with_coding_or_twice_is_found_by_ordinal() {
        let both = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
        assert_eq!(odd(both), [(1, OddHead::LengthAndCoding)]);
        let other_order =
            b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n";
        assert_eq!(odd(other_order), [(1, OddHead::LengthAndCoding)]);
        let twice = b"POST / HTTP/1.1\r\nContent-Length: 3\r\nCONTENT-LENGTH:3\r\n\r\nabc";
        assert_eq!(odd(twice), [(1, OddHead::LengthTwice)]);
        // Bare LF line ends, as httparse takes them.
        assert_eq!(
            odd(b"POST / HTTP/1.1\ncontent-length: 1\ntransfer-encoding: chunked\n\n"),
            [(1, OddHead::LengthAndCoding)]
        );
    }

    #[test]
    fn bodies_are_skipped_by_their_framing() {
        // Bodies that look like heads: by length, chunked (with extensions and trailers), after
        // empty lines; the third request is the odd one.
        let fake = "GET / HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 1\r\n\r\nxx";
        let data = "Content-Length: 1\r\n\r\n";
        let s = format!(
            "POST /a HTTP/1.1\r\nContent-Length: {}\r\n\r\n{fake}\r\n\r\n\
             POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
             {:x};ext=1\r\n{data}\r\n0\r\nTrailer-Field: Content-Length: 4\r\n\r\n\
             GET /c HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
            fake.len(),
            data.len(),
        );
        let s = s.as_bytes();
        assert_eq!(odd(s), [(3, OddHead::LengthTwice)]);
        // Plain pipelined requests: nothing.
        let plain = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n";
        assert!(odd(plain).is_empty());
    }

    #[test]
    fn framing_hyper_refuses_ends_the_watch() {
        for head in [
            &b"POST / HTTP/1.1\r\ncontent-length: x\r\n\r\n"[..],
            b"POST / HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\ntransfer-encoding: gzip\r\n\r\n",
        ] {
            let mut h = Heads::default();
            assert_eq!(h.feed(head), None);
            assert_eq!(h.phase, Phase::Off, "{:?}", String::from_utf8_lossy(head));
        }
        let mut h = Heads::default();
        h.feed(b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n11111111111111111\r\n");
        assert_eq!(h.phase, Phase::Off);
    }

    #[test]
    fn framing_read_otherwise_by_nginx_or_not_followed_is_marked() {
        // A long line keeps its first bytes: a long length (hyper takes leading zeros) is no
        // length we could follow, so its request is refused rather than left unchecked.
        let long = format!(
            "POST / HTTP/1.1\r\ncontent-length: {}1\r\n\r\nx",
            "0".repeat(80)
        );
        assert_eq!(odd(long.as_bytes()), [(1, OddHead::Framing)]);
        let long_te = format!(
            "POST / HTTP/1.1\r\ntransfer-encoding:{}chunked\r\n\r\n0\r\n\r\n",
            " ".repeat(60)
        );
        assert_eq!(odd(long_te.as_bytes()), [(1, OddHead::Framing)]);
        // Tabs and empty list items, which nginx refuses.
        for head in [
            &b"POST / HTTP/1.1\r\ncontent-length:\t5\t\r\n\r\nhello"[..],
            b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\t\r\n\r\n0\r\n\r\n",
            b"POST / HTTP/1.1\r\ntransfer-encoding: ,chunked\r\n\r\n0\r\n\r\n",
        ] {
            assert_eq!(odd(head), [(1, OddHead::Framing)], "{head:?}");
        }
        // A trailer section ended, or a trailer line ended, by a bare LF: nginx ends the
        // message there, hyper reads on; the request itself and all after it are marked.
        let te_cl = "POST /tecl HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
        for trailer in ["0\r\n\n", "0\r\nX-T: 1\n\r\n"] {
            let s = format!(
                "POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n{trailer}\
                 GET /swallowed HTTP/1.1\r\n\r\n{te_cl}"
            );
            assert_eq!(odd(s.as_bytes()), [(1, OddHead::Framing)], "{trailer:?}");
        }
        // Trailers with CRLFs, and chunk sizes with leading zeros past 16 digits, are followed.
        let s = format!(
            "POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
             00000000000000005\r\nhello\r\n0\r\nX-T: 1\r\n\r\n{te_cl}"
        );
        assert_eq!(odd(s.as_bytes()), [(2, OddHead::LengthAndCoding)]);
        // A fragment in a request line, the second one here.
        let s = b"GET /a HTTP/1.1\r\n\r\nGET http://other.test#f HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(odd(s), [(2, OddHead::Fragment)]);
    }
}
