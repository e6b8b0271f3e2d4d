//! Client fingerprints, computed once per connection and offered to the rules, the access
//! records and the events: JA4 of the TLS ClientHello (FoxIO's published algorithm; JA4
//! only) and the HTTP/2 fingerprint in Akamai's format (`SETTINGS|WINDOW_UPDATE|PRIORITY|
//! pseudo-header order`).
//!
//! The ClientHello is held by [`HelloTap`] until it is whole, its records' payloads joined
//! (at most `tls.max_client_hello_bytes`, never past [`HELLO_MAX`]), fingerprinted, then given
//! to rustls; the HTTP/2 frames are followed
//! by [`crate::h2watch`], which hands the client's first frames to [`H2Print`].

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, ReadBuf};

/// Most bytes of a ClientHello message kept, its records joined: what rustls takes (a 16-bit
/// length and the message header; a browser's is under 2 KiB). A hello sent one byte per
/// record took six times its size on the wire, and one of 2.7 KB went unfingerprinted; one
/// padded past 16 KiB passed every `ja4` rule.
pub const HELLO_MAX: usize = 4 + 0xffff;

fn grease(v: u16) -> bool {
    v & 0x0f0f == 0x0a0a && v >> 8 == v & 0xff
}

/// A cursor over a byte slice; each read fails (None) past its end.
struct Cur<'a>(&'a [u8]);

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
}

/// The ClientHello handshake message from TLS records `wire` (its fragments joined), when whole.
fn hello_message(wire: &[u8]) -> Option<Vec<u8>> {
    let mut c = Cur(wire);
    let mut msg = Vec::new();
    loop {
        let kind = c.u8()?;
        if kind != 0x16 {
            return None;
        }
        c.take(2)?;
        msg.extend_from_slice(c.vec16()?);
        if msg.len() >= 4 {
            if msg[0] != 0x01 {
                return None;
            }
            let len = usize::from(msg[1]) << 16 | usize::from(msg[2]) << 8 | usize::from(msg[3]);
            if msg.len() >= 4 + len {
                msg.truncate(4 + len);
                return Some(msg);
            }
        }
    }
}

fn version_code(v: u16) -> &'static str {
    match v {
        0x0304 => "13",
        0x0303 => "12",
        0x0302 => "11",
        0x0301 => "10",
        0x0300 => "s3",
        0x0002 => "s2",
        0xfeff => "d1",
        0xfefd => "d2",
        0xfefc => "d3",
        _ => "00",
    }
}

/// JA4's two ALPN characters for the first ALPN value `v`.
fn alpn_chars(v: &[u8]) -> String {
    let end = |b: u8| match b {
        0x20..=0x7e => Some(b as char),
        0x80..=0xff => Some('9'),
        _ => None,
    };
    match (v.first(), v.last()) {
        (Some(&f), Some(&l)) => match (end(f), end(l)) {
            (Some(a), Some(b)) => format!("{a}{b}"),
            _ => "99".into(),
        },
        _ => "00".into(),
    }
}

fn hash12(s: &str) -> String {
    let d = Sha256::digest(s.as_bytes());
    let mut out = String::with_capacity(12);
    for b in &d[..6] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn hex_list(v: &[u16]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(v.len() * 5);
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{x:04x}");
    }
    s
}

/// Most cipher suites, extensions and signature algorithms a fingerprint reads of one
/// ClientHello (browsers send some 20 extensions and 20 suites): a hello packed with 15,000
/// empty extensions cost seven handshakes' CPU in the fingerprint alone.
const FINGERPRINT_ITEMS: usize = 256;

/// JA4 of the ClientHello in TLS records `wire` (over TCP), or None when they do not hold a whole one.
pub fn ja4(wire: &[u8]) -> Option<String> {
    ja4_cut(wire).map(|(print, _)| print)
}

/// JA4 of the ClientHello in `wire`, and whether the 256-item bound cut a list of it short.
pub fn ja4_cut(wire: &[u8]) -> Option<(String, bool)> {
    ja4_of_message(&hello_message(wire)?)
}

/// JA4 of a whole ClientHello handshake message (its records joined), and whether the
/// 256-item bound cut a list of it short.
pub fn ja4_of_message(msg: &[u8]) -> Option<(String, bool)> {
    let mut cut = false;
    if msg.first() != Some(&0x01) {
        return None;
    }
    let mut c = Cur(msg.get(4..)?);
    let legacy = c.u16()?;
    c.take(32)?;
    c.vec8()?;
    let mut ciphers: Vec<u16> = Vec::new();
    let mut cs = Cur(c.vec16()?);
    // Counted with GREASE values: a hello of nothing else is read no further either.
    for v in std::iter::from_fn(|| cs.u16()).take(FINGERPRINT_ITEMS) {
        if !grease(v) {
            ciphers.push(v);
        }
    }
    cut |= cs.0.len() > 1;
    c.vec8()?;
    let mut exts: Vec<u16> = Vec::new();
    let (mut sni, mut alpn, mut sigs, mut best): (bool, Option<&[u8]>, Vec<u16>, Option<u16>) =
        (false, None, Vec::new(), None);
    if !c.0.is_empty() {
        let mut e = Cur(c.vec16()?);
        let mut read = 0;
        while !e.0.is_empty() && read < FINGERPRINT_ITEMS {
            read += 1;
            let ty = e.u16()?;
            let body = e.vec16()?;
            if grease(ty) {
                continue;
            }
            exts.push(ty);
            let mut b = Cur(body);
            match ty {
                0x0000 => sni = true,
                0x0010 => alpn = b.vec16().and_then(|l| Cur(l).vec8()),
                0x000d => {
                    let mut l = Cur(b.vec16()?);
                    for s in std::iter::from_fn(|| l.u16()).take(FINGERPRINT_ITEMS) {
                        if !grease(s) {
                            sigs.push(s);
                        }
                    }
                    cut |= l.0.len() > 1;
                }
                0x002b => {
                    let mut l = Cur(b.vec8()?);
                    while let Some(v) = l.u16() {
                        if !grease(v) {
                            best = Some(best.map_or(v, |b: u16| b.max(v)));
                        }
                    }
                }
                _ => {}
            }
        }
        cut |= !e.0.is_empty();
    }
    let a = format!(
        "t{}{}{:02}{:02}{}",
        version_code(best.unwrap_or(legacy)),
        if sni { 'd' } else { 'i' },
        ciphers.len().min(99),
        exts.len().min(99),
        alpn.map_or_else(|| "00".to_string(), alpn_chars)
    );
    let b = if ciphers.is_empty() {
        "000000000000".to_string()
    } else {
        let mut s = ciphers.clone();
        s.sort_unstable();
        hash12(&hex_list(&s))
    };
    let mut sorted: Vec<u16> = exts
        .iter()
        .copied()
        .filter(|&e| e != 0x0000 && e != 0x0010)
        .collect();
    sorted.sort_unstable();
    let c = if sorted.is_empty() {
        "000000000000".to_string()
    } else {
        let mut s = hex_list(&sorted);
        if !sigs.is_empty() {
            s.push('_');
            s.push_str(&hex_list(&sigs));
        }
        hash12(&s)
    };
    Some((format!("{a}_{b}_{c}"), cut))
}

/// A client connection's transport that holds its ClientHello back from rustls until the
/// hello is whole (its records' payloads joined, at most `max` bytes, charged to the heads'
/// budget as they come), fingerprints it, then gives rustls the hello framed again and what
/// followed it; later reads pass through. A stalled hello is held once, here, not also in
/// rustls's growing buffer; one longer than its bound, one the budget cannot hold, or records
/// no client sends around it fail the read ([`HelloRefused`]).
#[derive(Debug)]
pub struct HelloTap<S> {
    inner: S,
    /// The handshake message so far (at most `max` bytes).
    msg: Vec<u8>,
    /// Longest hello message taken.
    max: usize,
    /// What the hello being read (then given to rustls) holds of the heads' budget.
    charge: crate::h1watch::HeadCharge,
    /// The current record's header, as much of it as was read.
    hdr: [u8; 5],
    hdr_len: usize,
    /// Payload bytes of the current record still to come.
    left: usize,
    /// The current record is an alert before the hello, which rustls tolerates (a warning
    /// alert first took the JA4 away, and with it every `ja4` rule): read past.
    skipping: bool,
    /// Alert records read past so far (rustls takes four).
    alerts: u8,
    /// The current alert's level and description, as much of them as was read.
    alert: [u8; 2],
    alert_len: usize,
    /// The first hello record's version field, given to the records framed again.
    version: [u8; 2],
    state: Tapped,
    /// What rustls reads before the connection again: the hello framed again and what came
    /// after it, or a first record that was no handshake as it came.
    replay: Vec<u8>,
    at: usize,
    /// The hello's JA4, and whether the item bound cut a list of it short.
    print: Option<(String, bool)>,
}

/// Why a [`HelloTap`] failed a handshake's read (the error inside its `io::Error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HelloRefused {
    /// The ClientHello is longer than `tls.max_client_hello_bytes`.
    #[error("ClientHello over tls.max_client_hello_bytes")]
    TooLong,
    /// Unfinished hellos and heads hold `server.header_buffer_total_bytes` (or the source's share).
    #[error("unfinished ClientHello over server.header_buffer_total_bytes")]
    OverBudget,
    /// A handshake that begins with no ClientHello, or records inside or after it in its
    /// last record that no client sends.
    #[error("malformed ClientHello records")]
    Malformed,
}

impl HelloRefused {
    /// The refusal inside `e`, when `e` is one.
    pub fn of(e: &io::Error) -> Option<HelloRefused> {
        e.get_ref()?.downcast_ref::<HelloRefused>().copied()
    }
}

/// What a [`HelloTap`] holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tapped {
    /// Still reading the hello (rustls has none of it yet).
    Copying,
    /// The whole ClientHello, fingerprinted and given to rustls.
    Whole,
    /// A ClientHello longer than the tap's bound: refused.
    Over,
    /// The heads' budget could not hold the hello as it came: refused (counted there).
    OverBudget,
    /// The first record is no TLS handshake: given to rustls as it came (which answers it).
    NotHello,
    /// A handshake message other than a ClientHello first, an alert inside the hello, more
    /// than four alerts before it, or more than the hello in its last record: refused.
    Odd,
}

/// Most payload bytes of one TLS record (RFC 8446 §5.1).
const RECORD_MAX: usize = 1 << 14;

impl<S> HelloTap<S> {
    /// Taps `inner`, taking hellos whose body is up to `max` bytes (their 4-byte header
    /// aside, as BoringSSL counts; at most [`HELLO_MAX`] in all) while `charge` can hold them.
    pub fn new(inner: S, max: usize, charge: crate::h1watch::HeadCharge) -> HelloTap<S> {
        HelloTap {
            inner,
            msg: Vec::new(),
            max: max.min(HELLO_MAX - 4) + 4,
            charge,
            hdr: [0; 5],
            hdr_len: 0,
            left: 0,
            skipping: false,
            alerts: 0,
            alert: [0; 2],
            alert_len: 0,
            version: [3, 1],
            state: Tapped::Copying,
            replay: Vec::new(),
            at: 0,
            print: None,
        }
    }

    /// What was found, and the hello's JA4 (with whether it was cut) when it was whole;
    /// nothing more is kept.
    pub fn take(&mut self) -> (Tapped, Option<(String, bool)>) {
        (self.state.clone(), self.print.take())
    }

    /// Whether the client began with a plain HTTP request (a method's capital letters)
    /// instead of a TLS record: it is answered 400, as nginx answers it.
    pub fn plain_http(&self) -> bool {
        let method = self
            .replay
            .iter()
            .take_while(|b| b.is_ascii_uppercase())
            .count();
        self.state == Tapped::NotHello
            && method > 0
            && self.replay.get(method).is_none_or(|&b| b == b' ')
    }

    /// The transport under it.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Takes `new`, read after what came before, while the hello is being read.
    fn feed(&mut self, mut new: &[u8]) {
        while !new.is_empty() && self.state == Tapped::Copying {
            if self.hdr_len < 5 {
                let n = (5 - self.hdr_len).min(new.len());
                self.hdr[self.hdr_len..self.hdr_len + n].copy_from_slice(&new[..n]);
                self.hdr_len += n;
                new = &new[n..];
                if self.hdr_len == 5 {
                    let first = self.msg.is_empty();
                    // Alerts before the hello's first byte are read past (rustls takes four
                    // warnings); any other record, or an alert inside the hello, ends it.
                    self.skipping = self.hdr[0] == 0x15 && first;
                    if self.skipping {
                        self.alerts += 1;
                        self.alert_len = 0;
                        if self.alerts > 4 {
                            self.stop(Tapped::Odd);
                            return;
                        }
                    } else if self.hdr[0] != 0x16 {
                        if first {
                            // No TLS handshake (a plain HTTP request, say): rustls reads it.
                            let mut raw = self.hdr.to_vec();
                            raw.extend_from_slice(new);
                            self.stop(Tapped::NotHello);
                            self.replay = raw;
                        } else {
                            self.stop(Tapped::Odd);
                        }
                        return;
                    } else if first {
                        self.version = [self.hdr[1], self.hdr[2]];
                    }
                    self.left = usize::from(u16::from_be_bytes([self.hdr[3], self.hdr[4]]));
                    if self.left > RECORD_MAX + 2048 {
                        // Past what any record may carry (rustls refuses it; framed again,
                        // it would never see it).
                        self.stop(Tapped::Odd);
                        return;
                    }
                    if self.left == 0 {
                        self.hdr_len = 0;
                    }
                }
                continue;
            }
            let n = self.left.min(new.len());
            if self.skipping {
                // Only warnings are read past: a fatal alert or close_notify ends the
                // connection, as rustls (and RFC 8446 §6) would.
                for &b in &new[..n] {
                    if self.alert_len < 2 {
                        self.alert[self.alert_len] = b;
                        self.alert_len += 1;
                        if self.alert_len == 2 && (self.alert[0] != 1 || self.alert[1] == 0) {
                            self.stop(Tapped::Odd);
                            return;
                        }
                    }
                }
                self.left -= n;
                new = &new[n..];
                if self.left == 0 {
                    self.hdr_len = 0;
                }
                continue;
            }
            if self.msg.len() + n > self.max {
                self.stop(Tapped::Over);
                return;
            }
            if self.msg.capacity() < self.msg.len() + n {
                // Grown as bytes come, to twice what came at most and never past the length
                // announced: room reserved for the announced length was held for 9 bytes.
                let need = self.msg.len() + n;
                let announced = match self.msg[..] {
                    [_, a, b, c, ..] => {
                        4 + (usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c))
                    }
                    _ => self.max,
                };
                let want = (2 * self.msg.capacity()).min(announced).max(need);
                self.msg.reserve_exact(want - self.msg.len());
            }
            self.msg.extend_from_slice(&new[..n]);
            self.left -= n;
            new = &new[n..];
            if self.left == 0 {
                self.hdr_len = 0;
            }
            if let [kind, a, b, c, ..] = self.msg[..] {
                let len = 4 + (usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c));
                if kind != 0x01 {
                    self.stop(Tapped::Odd);
                } else if len > self.max {
                    self.stop(Tapped::Over);
                } else if self.msg.len() > len || (self.msg.len() == len && self.left > 0) {
                    // More than the hello in its last record: nothing a client sends.
                    self.stop(Tapped::Odd);
                } else if self.msg.len() == len {
                    self.whole(new);
                    return;
                } else if !self.charge.set(self.msg.capacity()) {
                    // What it holds: its capacity, never more than twice what came.
                    self.stop(Tapped::OverBudget);
                }
            }
        }
    }

    /// The hello is whole, `rest` read after it: fingerprinted, and framed again for rustls.
    fn whole(&mut self, rest: &[u8]) {
        self.print = ja4_of_message(&self.msg);
        let records = self.msg.len().div_ceil(RECORD_MAX);
        let mut out = Vec::with_capacity(self.msg.len() + 5 * records + rest.len());
        for part in self.msg.chunks(RECORD_MAX) {
            out.extend_from_slice(&[0x16, self.version[0], self.version[1]]);
            out.extend_from_slice(&(part.len() as u16).to_be_bytes());
            out.extend_from_slice(part);
        }
        out.extend_from_slice(rest);
        self.msg = Vec::new();
        // Held until rustls read it.
        self.charge.set(out.len());
        self.replay = out;
        self.state = Tapped::Whole;
    }

    fn stop(&mut self, why: Tapped) {
        self.state = why;
        self.msg = Vec::new();
        self.charge.set(0);
    }
}

impl<S: AsyncRead + Unpin> HelloTap<S> {
    /// Reads until the hello is whole (or the client ends, or it is refused: the error);
    /// rustls need not exist meanwhile — a stalled hello then holds its bytes alone, not a
    /// TLS session and its buffer too.
    pub async fn hello(&mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_hello(cx)).await?;
        if self.state == Tapped::Copying {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }

    /// Reads while the hello is being read: ready once it is whole, refused (the error), not
    /// a handshake, or the client ended (still [`Tapped::Copying`]).
    fn poll_hello(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.state == Tapped::Copying {
            let mut tmp = [0u8; 4096];
            let mut got = ReadBuf::new(&mut tmp);
            ready!(Pin::new(&mut self.inner).poll_read(cx, &mut got))?;
            if got.filled().is_empty() {
                return Poll::Ready(Ok(()));
            }
            self.feed(got.filled());
        }
        let refused = match self.state {
            Tapped::Over => Some(HelloRefused::TooLong),
            Tapped::OverBudget => Some(HelloRefused::OverBudget),
            Tapped::Odd => Some(HelloRefused::Malformed),
            _ => None,
        };
        match refused {
            Some(why) => Poll::Ready(Err(io::Error::other(why))),
            None => Poll::Ready(Ok(())),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for HelloTap<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        ready!(me.poll_hello(cx))?;
        if me.state == Tapped::Copying {
            // The client went away mid-hello: rustls reads the end.
            return Poll::Ready(Ok(()));
        }
        if me.at < me.replay.len() {
            let n = (me.replay.len() - me.at).min(buf.remaining());
            buf.put_slice(&me.replay[me.at..me.at + n]);
            me.at += n;
            if me.at == me.replay.len() {
                me.replay = Vec::new();
                me.at = 0;
                me.charge.set(0);
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut me.inner).poll_read(cx, buf)
    }
}

write_through!(HelloTap, inner);

/// An HPACK integer with an `n`-bit prefix (RFC 7541 §5.1): its value and length, or `None`
/// when it is cut short (left to h2) or absurdly long (over any size).
pub(crate) fn hpack_int(b: &[u8], n: u32) -> Option<(u64, usize)> {
    let max = (1u64 << n) - 1;
    let first = u64::from(*b.first()?) & max;
    if first < max {
        return Some((first, 1));
    }
    let mut v = max;
    for (i, &byte) in b.iter().enumerate().skip(1) {
        let shift = 7 * (i as u32 - 1);
        if shift > 56 {
            return Some((u64::MAX, i + 1));
        }
        v = v.saturating_add(u64::from(byte & 0x7f) << shift);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Bytes of the first HEADERS block read for its pseudo-header order.
pub const H2_BLOCK_MAX: usize = 512;

/// PRIORITY frames the fingerprint lists at most.
const PRIORITIES_MAX: usize = 16;

/// Bytes of a HEADERS payload before its header block: the pad length (PADDED, 0x8) and the
/// priority fields (PRIORITY, 0x20).
pub(crate) fn headers_prefix(flags: u8) -> usize {
    usize::from(flags & 0x8 != 0) + if flags & 0x20 != 0 { 5 } else { 0 }
}

/// Follows the client's frames up to its first HEADERS for [`H2Print`]: each frame's
/// payload (at most 256 bytes; a HEADERS block's first [`H2_BLOCK_MAX`]) is gathered as the
/// transport passes it, and the fingerprint is published once the first HEADERS is whole.
#[derive(Debug)]
pub struct H2Collect {
    print: H2Print,
    kind: u8,
    stream: u32,
    skip: usize,
    want: usize,
    buf: Vec<u8>,
    out: std::sync::Arc<std::sync::OnceLock<Box<str>>>,
}

impl H2Collect {
    /// Publishes into `out`.
    pub fn new(out: std::sync::Arc<std::sync::OnceLock<Box<str>>>) -> H2Collect {
        H2Collect {
            print: H2Print::default(),
            kind: 0,
            stream: 0,
            skip: 0,
            want: 0,
            buf: Vec::new(),
            out,
        }
    }

    /// A frame of `len` payload bytes begins.
    pub fn begin(&mut self, kind: u8, flags: u8, stream: u32, len: usize) {
        self.kind = kind;
        self.stream = stream;
        self.buf.clear();
        let (skip, cap) = match kind {
            0x1 => (headers_prefix(flags), H2_BLOCK_MAX),
            0x2 | 0x4 | 0x8 => (0, 256),
            _ => (0, 0),
        };
        self.skip = skip;
        self.want = len.saturating_sub(skip).min(cap);
    }

    /// Payload bytes of the current frame.
    pub fn feed(&mut self, mut data: &[u8]) {
        let s = self.skip.min(data.len());
        self.skip -= s;
        data = &data[s..];
        let take = (self.want - self.buf.len()).min(data.len());
        self.buf.extend_from_slice(&data[..take]);
    }

    /// The current frame ended; true once the fingerprint is published (stop following).
    pub fn end(&mut self) -> bool {
        if matches!(self.kind, 0x1 | 0x2 | 0x4 | 0x8) {
            self.print.frame(self.kind, self.stream, &self.buf);
        }
        if let Some(f) = self.print.finish() {
            let _ = self.out.set(f.into());
            return true;
        }
        false
    }
}

/// The HTTP/2 fingerprint as the client's first frames build it (see the module documentation).
#[derive(Debug, Default)]
pub struct H2Print {
    settings: String,
    window: Option<u32>,
    priorities: String,
    /// PRIORITY frames in `priorities`.
    priority_count: usize,
    /// The first HEADERS block's start (its pseudo-headers).
    block: Vec<u8>,
    /// The first SETTINGS was seen.
    got_settings: bool,
    /// The first HEADERS was seen: the fingerprint is complete.
    pub done: bool,
}

impl H2Print {
    /// One whole client frame before the first HEADERS (`payload` complete; a HEADERS
    /// frame's `payload` is its block start, padding and priority removed).
    pub fn frame(&mut self, kind: u8, stream: u32, payload: &[u8]) {
        if self.done {
            return;
        }
        match kind {
            0x4 if !self.got_settings => {
                self.got_settings = true;
                for (i, s) in payload.chunks_exact(6).enumerate() {
                    if i > 0 {
                        self.settings.push(';');
                    }
                    let id = u16::from_be_bytes([s[0], s[1]]);
                    let v = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
                    self.settings.push_str(&format!("{id}:{v}"));
                }
            }
            0x8 if stream == 0 && self.window.is_none() && payload.len() >= 4 => {
                self.window = Some(
                    u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]])
                        & 0x7fff_ffff,
                );
            }
            0x2 if payload.len() >= 5 => self.priority(stream, payload),
            0x1 => {
                // Akamai's format lists PRIORITY frames only, not a HEADERS frame's own.
                self.block = payload[..payload.len().min(H2_BLOCK_MAX)].to_vec();
                self.done = true;
            }
            _ => {}
        }
    }

    fn priority(&mut self, stream: u32, p: &[u8]) {
        // Browsers send a handful; the rest of a long run adds nothing to the fingerprint
        // (and the connection's control frames are bounded by the watch).
        if self.priority_count >= PRIORITIES_MAX {
            return;
        }
        self.priority_count += 1;
        let dep = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
        if !self.priorities.is_empty() {
            self.priorities.push(',');
        }
        self.priorities.push_str(&format!(
            "{stream}:{}:{}:{}",
            dep >> 31,
            dep & 0x7fff_ffff,
            u16::from(p[4]) + 1
        ));
    }

    /// The fingerprint, once the first HEADERS came.
    pub fn finish(&self) -> Option<String> {
        if !self.done {
            return None;
        }
        Some(format!(
            "{}|{}|{}|{}",
            self.settings,
            self.window
                .map_or_else(|| "00".to_string(), |w| w.to_string()),
            if self.priorities.is_empty() {
                "0"
            } else {
                &self.priorities
            },
            pseudo_order(&self.block)
        ))
    }
}

/// The order of the pseudo-headers at the start of an HPACK block, as `m,a,s,p` (the first
/// letters of :method, :authority, :scheme, :path), read until the first regular header.
fn pseudo_order(block: &[u8]) -> String {
    let mut c = Cur(block);
    let mut out = String::new();
    let name_of = |idx: u64| match idx {
        1 => Some('a'),
        2 | 3 => Some('m'),
        4 | 5 => Some('p'),
        6 | 7 => Some('s'),
        _ => None,
    };
    let mut push = |ch: char| {
        if !out.is_empty() {
            out.push(',');
        }
        out.push(ch);
    };
    while let Some(&b) = c.0.first() {
        let (idx, literal) = if b & 0x80 != 0 {
            (hpack_int(c.0, 7), false)
        } else if b & 0xc0 == 0x40 {
            (hpack_int(c.0, 6), true)
        } else if b & 0xe0 == 0x20 {
            // A table size update: skip it.
            match hpack_int(c.0, 5) {
                Some((_, n)) => {
                    c.take(n);
                    continue;
                }
                None => break,
            }
        } else {
            (hpack_int(c.0, 4), true)
        };
        let Some((idx, n)) = idx else { break };
        c.take(n);
        if idx == 0 {
            // A literal name: pseudo-headers are in the static table, so a literal one is
            // odd; read its name to know whether it is one.
            let Some((len, n)) = hpack_int(c.0, 7) else {
                break;
            };
            let huff = c.0[0] & 0x80 != 0;
            c.take(n);
            let Some(name) = c.take(len as usize) else {
                break;
            };
            // Huffman-coded names are regular headers in practice (every client names
            // pseudo-headers by the static table): the pseudo-headers ended.
            if huff || name.first() != Some(&b':') {
                break;
            }
            push(name.get(1).map_or('?', |&x| x as char));
        } else {
            match name_of(idx) {
                Some(ch) => push(ch),
                None => break,
            }
        }
        if literal {
            let Some((len, n)) = c.0.first().and(hpack_int(c.0, 7)) else {
                break;
            };
            c.take(n);
            if c.take(len as usize).is_none() {
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello record from its parts.
    fn hello(version: u16, ciphers: &[u16], exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&0x0303u16.to_be_bytes());
        body.extend_from_slice(&[7u8; 32]);
        body.push(0);
        body.extend_from_slice(&((ciphers.len() * 2) as u16).to_be_bytes());
        for c in ciphers {
            body.extend_from_slice(&c.to_be_bytes());
        }
        body.extend_from_slice(&[1, 0]);
        let mut e = Vec::new();
        for (t, d) in exts {
            e.extend_from_slice(&t.to_be_bytes());
            e.extend_from_slice(&(d.len() as u16).to_be_bytes());
            e.extend_from_slice(d);
        }
        body.extend_from_slice(&(e.len() as u16).to_be_bytes());
        body.extend_from_slice(&e);
        let mut msg = vec![1, 0, (body.len() >> 8) as u8, body.len() as u8];
        msg.extend_from_slice(&body);
        let mut rec = vec![0x16, 0x03, 0x01];
        rec.extend_from_slice(&(msg.len() as u16).to_be_bytes());
        rec.extend_from_slice(&msg);
        let _ = version;
        rec
    }

    #[test]
    fn plain_http_is_told_apart_from_tls_records() {
        let seen = |first: &[u8]| {
            let mut t = HelloTap::new((), 16 << 10, crate::h1watch::HeadCharge::default());
            t.feed(first);
            t.plain_http()
        };
        for http in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"OPTIONS * HTTP/1.1",
            b"PRI * HTTP/2.0",
            b"POST ",
        ] {
            assert!(seen(http), "{http:?}");
        }
        // A TLS record, SSLv2's hello, lower case, a method glued to its target: not told
        // as plain HTTP (rustls answers them).
        for other in [
            &[0x16u8, 3, 1, 0, 5][..],
            &[0x80, 0x2e, 1, 3, 1],
            b"get / HTTP/1.1",
            b"GET/ HTTP",
        ] {
            assert!(!seen(other), "{other:?}");
        }
    }

    /// A hello packed with extensions (GREASE or not) is fingerprinted from its first
    /// [`FINGERPRINT_ITEMS`] only: what it costs is bounded.
    #[test]
    fn a_hello_packed_with_extensions_is_read_no_further_than_the_bound() {
        let many: Vec<(u16, Vec<u8>)> = (0..12_000u16).map(|i| (0x1000 + i, Vec::new())).collect();
        let (j, cut) = ja4_cut(&hello(0x0303, &[0x1301], &many)).unwrap();
        assert!(j.starts_with("t12i0199") && cut, "{j}");
        let grease: Vec<(u16, Vec<u8>)> = (0..12_000).map(|_| (0x0a0a, Vec::new())).collect();
        let (j, cut) = ja4_cut(&hello(0x0303, &[0x1301], &grease)).unwrap();
        assert!(j.starts_with("t12i0100") && cut, "{j}");
        let few: Vec<(u16, Vec<u8>)> = (0..256u16).map(|i| (0x1000 + i, Vec::new())).collect();
        let (j, cut) = ja4_cut(&hello(0x0303, &[0x1301], &few)).unwrap();
        assert!(
            j.starts_with("t12i0199") && !cut,
            "{j}: as many as the bound cut nothing"
        );
        let suites: Vec<u16> = (0..300).map(|i| 0x1300 + i).collect();
        let (_, cut) = ja4_cut(&hello(0x0303, &suites, &[])).unwrap();
        assert!(cut, "300 suites");
    }

    #[test]
    fn ja4_parts() {
        let sni = {
            let mut d = vec![0, 12, 0, 0, 9];
            d.extend_from_slice(b"a.example");
            d
        };
        let alpn = vec![
            0, 12, 2, b'h', b'2', 8, b'h', b't', b't', b'p', b'/', b'1', b'.', b'1',
        ];
        let sigs = vec![0, 6, 0x04, 0x03, 0x08, 0x04, 0x04, 0x01];
        let versions = vec![4, 0x0a, 0x0a, 0x03, 0x04];
        let rec = hello(
            0x0303,
            &[0x1a1a, 0x1301, 0x1302, 0xc02b],
            &[
                (0x0a0a, vec![]),
                (0x0000, sni),
                (0x0010, alpn),
                (0x000d, sigs),
                (0x002b, versions),
                (0x000a, vec![0, 2, 0, 0x1d]),
            ],
        );
        let j = ja4(&rec).unwrap();
        let want_b = hash12("1301,1302,c02b");
        let want_c = hash12("000a,000d,002b_0403,0804,0401");
        assert_eq!(j, format!("t13d0305h2_{want_b}_{want_c}"));
        // Split across two records, the same.
        let msg = &rec[5..];
        let mut two = vec![0x16, 3, 1, 0, 10];
        two.extend_from_slice(&msg[..10]);
        two.extend_from_slice(&[0x16, 3, 1]);
        two.extend_from_slice(&((msg.len() - 10) as u16).to_be_bytes());
        two.extend_from_slice(&msg[10..]);
        assert_eq!(ja4(&two).unwrap(), j);
        // Cut short: none.
        assert_eq!(ja4(&rec[..rec.len() - 1]), None);
        // The tap joins the records, however the reads cut them, and stops at the hello's
        // end; one byte per record (six on the wire for each) is the same hello. rustls then
        // reads the hello in one record and, as they came, the bytes after it.
        let tap_max = |wire: &[u8], step: usize, max: usize| {
            let mut t = HelloTap::new((), max, crate::h1watch::HeadCharge::default());
            let mut after = Vec::new();
            for chunk in wire.chunks(step) {
                if t.state == Tapped::Copying {
                    t.feed(chunk);
                } else {
                    after.extend_from_slice(chunk);
                }
            }
            let mut rustls = std::mem::take(&mut t.replay);
            rustls.extend_from_slice(&after);
            let (state, print) = t.take();
            (state, print.map(|p| p.0), rustls)
        };
        let tap = |wire: &[u8], step: usize| tap_max(wire, step, HELLO_MAX);
        let ccs_rec = [0x14, 3, 3, 0, 1, 1];
        let mut more = rec.clone();
        more.extend_from_slice(&ccs_rec);
        for (wire, then) in [(&rec, &[][..]), (&two, &[]), (&more, &ccs_rec)] {
            for step in [1, 3, 7, 4096] {
                let (state, print, rustls) = tap(wire, step);
                assert_eq!(state, Tapped::Whole, "{step}");
                assert_eq!(print.as_deref(), Some(&j[..]), "{step}");
                assert_eq!(rustls, [&rec[..], then].concat(), "{step}");
            }
        }
        // A 3 KB hello (padding) one byte per record: 18 KB on the wire, the same print,
        // and one record of 3 KB for rustls.
        let padded = hello(0x0303, &[0x1301], &[(0x0015, vec![0; 3000])]);
        let bytewise: Vec<u8> = padded[5..]
            .iter()
            .flat_map(|&b| [0x16, 3, 1, 0, 1, b])
            .collect();
        assert!(bytewise.len() > 16 * 1024, "{}", bytewise.len());
        let (state, print, rustls) = tap(&bytewise, 1500);
        assert_eq!(state, Tapped::Whole);
        assert_eq!(print, ja4(&padded));
        assert_eq!(rustls, padded);
        assert_eq!(tap(&rec[..rec.len() - 1], 100).0, Tapped::Copying);
        // No handshake first (plain HTTP on the TLS port): rustls reads it as it came.
        let plain = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        for step in [1, 4096] {
            let (state, print, rustls) = tap(plain, step);
            assert_eq!((state, print), (Tapped::NotHello, None));
            assert_eq!(rustls, plain);
        }
        let mut ccs = ccs_rec.to_vec();
        ccs.extend_from_slice(&rec);
        assert_eq!(tap(&ccs, 4096).2, ccs);
        // Warning alerts and empty records before the hello are read past (rustls takes
        // four alerts); a fifth, an alert inside the hello, another handshake message first,
        // or more than the hello in its last record are refused.
        let alert = [0x15, 3, 1, 0, 2, 1, 0x5a];
        let empty = [0x16, 3, 1, 0, 0];
        let mut lead = Vec::new();
        for _ in 0..4 {
            lead.extend_from_slice(&alert);
        }
        lead.extend_from_slice(&empty);
        lead.extend_from_slice(&two);
        for step in [1, 5, 4096] {
            let (state, print, rustls) = tap(&lead, step);
            assert_eq!(state, Tapped::Whole, "{step}");
            assert_eq!(print.as_deref(), Some(&j[..]));
            assert_eq!(rustls, rec);
        }
        assert_eq!(tap(&[&alert[..], &lead].concat(), 4096).0, Tapped::Odd);
        // A fatal alert or close_notify first ends it, however the reads cut it.
        for bad in [[0x15, 3, 1, 0, 2, 2, 40], [0x15, 3, 1, 0, 2, 1, 0]] {
            for step in [1, 4096] {
                assert_eq!(tap(&[&bad[..], &rec].concat(), step).0, Tapped::Odd);
            }
        }
        let mut inside = two[..15].to_vec();
        inside.extend_from_slice(&alert);
        inside.extend_from_slice(&two[15..]);
        assert_eq!(tap(&inside, 4096).0, Tapped::Odd);
        let mut finished = rec.clone();
        finished[5] = 20;
        assert_eq!(tap(&finished, 4096).0, Tapped::Odd);
        let mut tail = rec.clone();
        tail.extend_from_slice(&[20, 0, 0, 0]);
        let n = (tail.len() - 5) as u16;
        tail[3..5].copy_from_slice(&n.to_be_bytes());
        assert_eq!(tap(&tail, 4096).0, Tapped::Odd);
        // Past 16 KiB, as two records (for the 16-bit record length): fingerprinted too,
        // and framed again in records of at most 16 KiB.
        let big: Vec<(u16, Vec<u8>)> = vec![(0x1234, vec![0; 20_000])];
        let mut huge = hello(0x0303, &[0x1301], &big);
        let hm = huge.split_off(5);
        let mut wire = Vec::new();
        for part in hm.chunks(16_000) {
            wire.extend_from_slice(&[0x16, 3, 1]);
            wire.extend_from_slice(&(part.len() as u16).to_be_bytes());
            wire.extend_from_slice(part);
        }
        let (state, print, rustls) = tap(&wire, 4096);
        assert_eq!(state, Tapped::Whole);
        assert!(print.is_some());
        assert_eq!(rustls.len(), hm.len() + 10);
        assert_eq!(ja4(&rustls), print);
        assert_eq!(&rustls[..5], &[0x16, 3, 1, 0x40, 0]);
        // Under the default bound (16 KiB, BoringSSL's) it is refused, from the message
        // header in its first nine bytes.
        assert_eq!(tap_max(&wire, 4096, 16 << 10).0, Tapped::Over);
        assert_eq!(tap_max(&wire[..9], 9, 16 << 10).0, Tapped::Over);
        assert_eq!(tap_max(&wire, 4096, 20_100).0, Tapped::Whole);
        // The bound counts the body, as BoringSSL's: 16,384 taken, 16,385 refused.
        let body = |n: usize| {
            let mut m = vec![1, 0, (n >> 8) as u8, n as u8];
            m.resize(4 + n, 0);
            let mut w = vec![0x16, 3, 1];
            w.extend_from_slice(&(m.len() as u16).to_be_bytes());
            w.extend_from_slice(&m);
            w
        };
        assert_eq!(tap_max(&body(16_384), 4096, 16 << 10).0, Tapped::Whole);
        assert_eq!(tap_max(&body(16_385), 4096, 16 << 10).0, Tapped::Over);
        // A record longer than any may be (2^14 and 2,048): refused.
        assert_eq!(tap(&[0x16, 3, 1, 0x48, 1, 1, 0, 0, 4], 4096).0, Tapped::Odd);
        // A message header announcing more than rustls takes: refused.
        let mut over = vec![0x16, 3, 1, 0, 4, 1, 1, 0, 0];
        over.extend_from_slice(&[0x16, 3, 1, 0x40, 0, 0]);
        assert_eq!(tap(&over, 4096).0, Tapped::Over);
        assert_eq!(alpn_chars(b""), "00");
        assert_eq!(alpn_chars(&[0xba, 0xad]), "99");
        assert_eq!(alpn_chars(&[b'h', 0x1f]), "99");
        assert_eq!(alpn_chars(b"x"), "xx");
    }

    /// A hello being read holds the heads' budget, past the free part a browser's hello
    /// never leaves, until rustls read it; over the budget the read fails, and all is given
    /// back.
    #[test]
    fn an_unfinished_hello_is_charged_to_the_heads_budget() {
        use crate::h1watch::HEAD_FREE;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let held = Arc::new(AtomicUsize::new(0));
        let source = Arc::new(AtomicUsize::new(0));
        let counters = Arc::new(crate::counters::Counters::default());
        let charge = || {
            crate::h1watch::HeadCharge::new(Some(crate::h1watch::HeadBudget {
                held: Arc::clone(&held),
                limit: 1 << 20,
                source: Some(Arc::clone(&source)),
                counters: Arc::clone(&counters),
            }))
        };
        let now = || held.load(Ordering::Relaxed);
        let browser = hello(0x0303, &[0x1301], &[(0x0015, vec![0; 1500])]);
        let big = hello(0x0303, &[0x1301], &[(0x0015, vec![0; 16_000])]);
        // A browser's hello, whole: nothing charged.
        let mut t = HelloTap::new((), 16 << 10, charge());
        t.feed(&browser);
        assert_eq!(t.state, Tapped::Whole);
        assert_eq!(now(), 0);
        // A 16 KB one stalled after 10 KB: what it holds past the free part; whole, what
        // rustls has yet to read; dropped, nothing.
        let mut t = HelloTap::new((), 16 << 10, charge());
        t.feed(&big[..10_005]);
        assert_eq!(t.state, Tapped::Copying);
        assert_eq!(now(), 10_000 - HEAD_FREE);
        assert_eq!(source.load(Ordering::Relaxed), now());
        t.feed(&big[10_005..]);
        assert_eq!(t.state, Tapped::Whole);
        assert_eq!(now(), big.len() - HEAD_FREE);
        drop(t);
        assert_eq!(now(), 0);
        // Nine bytes announcing 16 KB hold nine bytes, not the announced length; trickled,
        // the copy grows to twice what came at most.
        let mut t = HelloTap::new((), 16 << 10, charge());
        t.feed(&big[..9]);
        assert_eq!((t.state.clone(), t.msg.capacity()), (Tapped::Copying, 4));
        for end in (9..big.len() - 1).step_by(997) {
            t.feed(&big[end..(end + 997).min(big.len() - 1)]);
            assert!(
                t.msg.capacity() <= 2 * t.msg.len(),
                "{} {}",
                t.msg.capacity(),
                t.msg.len()
            );
        }
        assert_eq!(now(), t.msg.capacity() - HEAD_FREE);
        drop(t);
        // Stalled ones from one source fill its share (a sixty-fourth, at least 256 KiB):
        // the next is refused, counted, and nothing of it stays charged.
        let each = big.len() - 6 - HEAD_FREE;
        let mut stalled = Vec::new();
        for _ in 0..64 {
            let mut t = HelloTap::new((), 16 << 10, charge());
            t.feed(&big[..big.len() - 1]);
            if t.state != Tapped::Copying {
                assert_eq!(t.state, Tapped::OverBudget);
                break;
            }
            stalled.push(t);
        }
        assert_eq!(stalled.len(), crate::h1watch::source_share(1 << 20) / each);
        assert_eq!(now(), stalled.len() * each);
        assert_eq!(
            counters.get(crate::counters::Counter::LimitHeaderBufferSource),
            1
        );
        drop(stalled);
        assert_eq!(now(), 0);
        assert_eq!(source.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn h2_fingerprint_in_akamai_format() {
        let mut p = H2Print::default();
        let mut settings = Vec::new();
        for (id, v) in [(1u16, 65536u32), (2, 0), (4, 6291456), (6, 262144)] {
            settings.extend_from_slice(&id.to_be_bytes());
            settings.extend_from_slice(&v.to_be_bytes());
        }
        p.frame(0x4, 0, &settings);
        p.frame(0x8, 0, &15663105u32.to_be_bytes());
        assert_eq!(p.finish(), None);
        // :method GET, :authority (literal, indexed name 1), :scheme https, :path /
        let block = [0x82, 0x41, 0x03, b'a', b'.', b'b', 0x87, 0x84];
        p.frame(0x1, 1, &block);
        assert_eq!(
            p.finish().unwrap(),
            "1:65536;2:0;4:6291456;6:262144|15663105|0|m,a,s,p"
        );
        assert_eq!(
            pseudo_order(&[0x82, 0x86, 0x84, 0x41, 0x01, b'x']),
            "m,s,p,a"
        );
    }
}
