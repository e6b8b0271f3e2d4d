//! An HTTP/2 client connection's transport, watched for the HPACK dynamic-table size updates
//! the h2 crate answers with the wrong error code.
//!
//! A header block may open with a dynamic table size update (RFC 7541 §6.3), which must not
//! exceed the SETTINGS_HEADER_TABLE_SIZE we announced (4,096: hyper announces none); one that
//! does is a decoding error, which RFC 9113 §4.3.1 makes a connection error of type
//! COMPRESSION_ERROR. h2 0.4 closes such a connection with PROTOCOL_ERROR. [`H2Watch`] sits
//! between the socket (or TLS stream) and hyper: it follows the client's frames by their
//! 9-byte headers (payloads are skipped, not copied), reads the first bytes of each HEADERS
//! block, and on an oversized update withholds that read from h2, writes GOAWAY
//! (COMPRESSION_ERROR, the last stream h2 saw) at the next frame boundary of what h2 writes
//! (it follows those headers too), and ends the connection. Size updates split across a
//! CONTINUATION, or not at a block's start, are left to h2.
//!
//! It also bounds the frames that cost the server work but carry nothing to serve: PRIORITY
//! (which h2 ignores, and the fingerprint gathered until the first HEADERS read), SETTINGS,
//! PING and WINDOW_UPDATE from the client. A connection may send [`CONTROL_BASE`] of them,
//! and more as it earns them: per request, per DATA or HEADERS frame and per KiB of DATA we
//! sent (a client returns window for them, and gRPC's clients ping as they read), per PING or
//! SETTINGS of ours (each wants an answer) and per second of its life.
//! Past that it is a flood (nginx's answer is the same): GOAWAY ENHANCE_YOUR_CALM and the
//! connection ends (`limit_hits_total{limit="h2_control_flood"}`).

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::counters::{Counter, Counters};

/// The client connection preface (RFC 9113 §3.4).
const PREFACE_LEN: usize = 24;
/// SETTINGS_HEADER_TABLE_SIZE as we announce it (the protocol default).
const TABLE_SIZE: u64 = 4096;
/// Bytes of a header block's start read for size updates (two updates at most, §4.2).
const BLOCK_START: usize = 12;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const RST_STREAM: u8 = 0x3;
const GOAWAY: u8 = 0x7;
const COMPRESSION_ERROR: u32 = 0x9;
const ENHANCE_YOUR_CALM: u32 = 0xb;
/// Control frames (PRIORITY, SETTINGS, PING, WINDOW_UPDATE) any connection may send.
pub const CONTROL_BASE: u64 = 1_000;
/// Control frames more per request (HEADERS) the client sent.
const CONTROL_PER_REQUEST: u64 = 100;
/// Bytes of DATA sent to the client per control frame more it may send.
const DATA_PER_CONTROL: u64 = 1_024;

/// Follows frames by their headers, in one direction.
#[derive(Debug, Default)]
struct Frames {
    /// Bytes still to skip before the first frame (the client's preface).
    preface: usize,
    head: [u8; 9],
    have: usize,
    /// Payload bytes of the current frame still to come.
    left: usize,
}

impl Frames {
    /// True between frames.
    fn at_boundary(&self) -> bool {
        self.preface == 0 && self.have == 0 && self.left == 0
    }
}

/// What the read side collects of a HEADERS frame's payload.
#[derive(Debug, Default)]
struct Block {
    /// Padding-length and priority bytes still to skip.
    skip: usize,
    start: [u8; BLOCK_START],
    len: usize,
    /// Bytes of the block start wanted (less when the payload is shorter).
    want: usize,
    active: bool,
    /// The frame's stream, counted as seen by h2 once its block start passed.
    stream: u32,
}

/// The transport of one HTTP/2 server connection; see the module documentation.
pub struct H2Watch<I> {
    io: I,
    counters: Arc<Counters>,
    rd: Frames,
    block: Block,
    wr: Frames,
    /// Highest client stream id whose HEADERS reached h2.
    last_stream: u32,
    /// The GOAWAY to send and how much of it went; set once a violation is seen.
    goaway: Option<([u8; 17], usize)>,
    /// The HTTP/2 fingerprint being gathered (until the first HEADERS).
    print: Option<Box<crate::fingerprint::H2Collect>>,
    /// Control frames the client sent (PRIORITY, SETTINGS, PING, WINDOW_UPDATE).
    control: u64,
    /// HEADERS frames the client sent.
    requests: u64,
    /// DATA payload bytes written to the client.
    data_out: u64,
    /// PING and SETTINGS frames written to the client.
    asked: u64,
    /// DATA and HEADERS frames written to the client.
    frames_out: u64,
    /// When the connection began (control frames are also earned by the second).
    opened: std::time::Instant,
    /// The GOAWAY's error code once a violation is seen.
    error: u32,
    /// The connection's control block: RST_STREAM frames are counted on it.
    ctl: Option<Arc<crate::conn_registry::ConnCtl>>,
    /// Bytes of the header block being sent (HEADERS without END_HEADERS, then its
    /// CONTINUATIONs): h2 holds them until the block ends.
    open_block: usize,
    /// Its share of the heads' budget (`[server] header_buffer_total_bytes`).
    charge: crate::h1watch::HeadCharge,
    /// The violation was an open header block past the heads' budget (counted there).
    over_budget: bool,
}

impl<I> H2Watch<I> {
    /// Watches `io`, a connection that starts with the client's preface; its HTTP/2
    /// fingerprint goes into `print` (when given).
    pub fn new(
        io: I,
        counters: Arc<Counters>,
        print: Option<Arc<std::sync::OnceLock<Box<str>>>>,
        ctl: Option<Arc<crate::conn_registry::ConnCtl>>,
        budget: Option<crate::h1watch::HeadBudget>,
    ) -> H2Watch<I> {
        H2Watch {
            io,
            counters,
            ctl,
            open_block: 0,
            charge: crate::h1watch::HeadCharge::new(budget),
            over_budget: false,
            rd: Frames {
                preface: PREFACE_LEN,
                ..Frames::default()
            },
            block: Block::default(),
            wr: Frames::default(),
            last_stream: 0,
            goaway: None,
            print: print.map(|p| Box::new(crate::fingerprint::H2Collect::new(p))),
            control: 0,
            requests: 0,
            data_out: 0,
            asked: 0,
            frames_out: 0,
            opened: std::time::Instant::now(),
            error: COMPRESSION_ERROR,
        }
    }

    /// True while the client's control frames stay within what it earned.
    fn control_allowed(&self) -> bool {
        let earned = CONTROL_BASE
            + self.requests * CONTROL_PER_REQUEST
            + self.data_out / DATA_PER_CONTROL
            + 2 * self.frames_out
            + 2 * self.asked;
        // The clock is read only past the other allowances.
        self.control <= earned || self.control <= earned + self.opened.elapsed().as_secs()
    }

    /// Follows `data` from the client. `Err(keep)` when a header block opens with a size
    /// update above what we announced, or control frames pass what the client earned
    /// (`error` says which): `keep` bytes of `data` come before that frame.
    fn scan_read(&mut self, mut data: &[u8]) -> Result<(), usize> {
        let total = data.len();
        // Where in `data` the frame being read began (0: in an earlier read).
        let mut frame_start = 0;
        while !data.is_empty() {
            let r = &mut self.rd;
            if r.preface > 0 {
                let n = r.preface.min(data.len());
                r.preface -= n;
                data = &data[n..];
                continue;
            }
            if r.left == 0 {
                if r.have == 0 {
                    frame_start = total - data.len();
                }
                let n = (9 - r.have).min(data.len());
                r.head[r.have..r.have + n].copy_from_slice(&data[..n]);
                r.have += n;
                data = &data[n..];
                if r.have < 9 {
                    break;
                }
                r.have = 0;
                let h = r.head;
                r.left = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                let left = r.left;
                let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                // A header block open across frames is held by h2 until it ends: charged
                // past its free part, and past the budget the connection goes.
                let end_headers = h[4] & 0x4 != 0;
                match h[3] {
                    HEADERS | CONTINUATION => {
                        self.open_block = match (h[3], end_headers) {
                            (_, true) => 0,
                            (HEADERS, false) => left,
                            _ => self.open_block.saturating_add(left),
                        };
                        if !self.charge.set(self.open_block) {
                            self.error = ENHANCE_YOUR_CALM;
                            self.over_budget = true;
                            return Err(frame_start);
                        }
                    }
                    _ => {}
                }
                match h[3] {
                    HEADERS => self.requests += 1,
                    RST_STREAM => {
                        if let Some(c) = &self.ctl {
                            c.resets.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    0x2 | 0x4 | 0x6 | 0x8 => {
                        self.control += 1;
                        if !self.control_allowed() {
                            self.error = ENHANCE_YOUR_CALM;
                            return Err(frame_start);
                        }
                    }
                    _ => {}
                }
                if let Some(p) = &mut self.print {
                    p.begin(h[3], h[4], stream, left);
                    if left == 0 && p.end() {
                        self.print = None;
                    }
                }
                self.block = Block::default();
                if h[3] == HEADERS {
                    let skip = crate::fingerprint::headers_prefix(h[4]);
                    let want = left.saturating_sub(skip).min(BLOCK_START);
                    if want == 0 {
                        self.last_stream = self.last_stream.max(stream);
                    } else {
                        self.block = Block {
                            skip,
                            want,
                            active: true,
                            stream,
                            ..Block::default()
                        };
                    }
                }
                continue;
            }
            let n = r.left.min(data.len());
            let mut part = &data[..n];
            r.left -= n;
            data = &data[n..];
            if let Some(p) = &mut self.print {
                p.feed(part);
                if r.left == 0 && p.end() {
                    self.print = None;
                }
            }
            let b = &mut self.block;
            if b.active {
                let s = b.skip.min(part.len());
                b.skip -= s;
                part = &part[s..];
                let take = (b.want - b.len).min(part.len());
                b.start[b.len..b.len + take].copy_from_slice(&part[..take]);
                b.len += take;
                if b.len == b.want {
                    b.active = false;
                    if oversized_update(&b.start[..b.len]) {
                        self.error = COMPRESSION_ERROR;
                        return Err(frame_start);
                    }
                    self.last_stream = self.last_stream.max(b.stream);
                }
            }
        }
        Ok(())
    }

    /// Follows `n` bytes of `bufs` written to the client.
    fn scan_write(&mut self, bufs: &[IoSlice<'_>], mut n: usize) {
        for b in bufs {
            if n == 0 {
                break;
            }
            let take = b.len().min(n);
            self.scan_written(&b[..take]);
            n -= take;
        }
    }

    fn scan_written(&mut self, mut data: &[u8]) {
        let w = &mut self.wr;
        while !data.is_empty() {
            if w.left > 0 {
                let n = w.left.min(data.len());
                w.left -= n;
                data = &data[n..];
                continue;
            }
            let n = (9 - w.have).min(data.len());
            w.head[w.have..w.have + n].copy_from_slice(&data[..n]);
            w.have += n;
            data = &data[n..];
            if w.have == 9 {
                w.have = 0;
                let h = w.head;
                w.left = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                match h[3] {
                    0x0 => {
                        self.data_out += w.left as u64;
                        self.frames_out += 1;
                    }
                    HEADERS => self.frames_out += 1,
                    // Ours, not our ACKs of the client's (those would earn a PING flood
                    // its own allowance).
                    0x4 | 0x6 if h[4] & 0x1 == 0 => self.asked += 1,
                    _ => {}
                }
            }
        }
    }
}

/// True when `block` opens with a dynamic table size update above [`TABLE_SIZE`].
fn oversized_update(mut block: &[u8]) -> bool {
    // At most two updates may open a block (RFC 7541 §4.2).
    for _ in 0..2 {
        match block.first() {
            Some(b) if b & 0xe0 == 0x20 => {}
            _ => return false,
        }
        let Some((size, used)) = crate::fingerprint::hpack_int(block, 5) else {
            return false;
        };
        if size > TABLE_SIZE {
            return true;
        }
        block = &block[used..];
    }
    false
}

impl<I: AsyncWrite + Unpin> H2Watch<I> {
    /// Sends what is left of the GOAWAY; ready once it went (or the socket failed).
    fn poll_goaway(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some((frame, sent)) = self.goaway.as_mut() else {
            return Poll::Ready(());
        };
        while *sent < frame.len() {
            match ready!(Pin::new(&mut self.io).poll_write(cx, &frame[*sent..])) {
                Ok(0) | Err(_) => return Poll::Ready(()),
                Ok(n) => *sent += n,
            }
        }
        let _ = ready!(Pin::new(&mut self.io).poll_flush(cx));
        Poll::Ready(())
    }

    fn fail(&mut self) {
        let mut f = [0u8; 17];
        f[2] = 8;
        f[3] = GOAWAY;
        f[9..13].copy_from_slice(&self.last_stream.to_be_bytes());
        f[13..17].copy_from_slice(&self.error.to_be_bytes());
        self.goaway = Some((f, 0));
        if self.over_budget {
            tracing::debug!("HTTP/2 header block over the heads' budget: GOAWAY ENHANCE_YOUR_CALM");
        } else if self.error == ENHANCE_YOUR_CALM {
            self.counters.bump(Counter::LimitH2ControlFlood);
            tracing::debug!(
                frames = self.control,
                "HTTP/2 control frame flood: GOAWAY ENHANCE_YOUR_CALM"
            );
        } else {
            self.counters.bump(Counter::LimitH2Protocol);
            tracing::debug!("HPACK table size update above SETTINGS: GOAWAY COMPRESSION_ERROR");
        }
    }
}

impl<I: AsyncRead + AsyncWrite + Unpin> AsyncRead for H2Watch<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.goaway.is_some() {
            // Nothing more reaches h2; the GOAWAY goes once h2's own frame is whole.
            if me.wr.at_boundary() {
                ready!(me.poll_goaway(cx));
            }
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut me.io).poll_read(cx, buf))?;
        if let Err(keep) = me.scan_read(&buf.filled()[before..]) {
            // The frames before the offending one reach h2; it and what follows never do.
            buf.set_filled(before + keep);
            me.fail();
            if me.wr.at_boundary() {
                ready!(me.poll_goaway(cx));
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for H2Watch<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if me.goaway.is_some() && me.wr.at_boundary() {
            ready!(me.poll_goaway(cx));
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let n = ready!(Pin::new(&mut me.io).poll_write(cx, buf))?;
        me.scan_written(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if me.goaway.is_some() && me.wr.at_boundary() {
            ready!(me.poll_goaway(cx));
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let n = ready!(Pin::new(&mut me.io).poll_write_vectored(cx, bufs))?;
        me.scan_write(bufs, n);
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.goaway.is_some() && me.wr.at_boundary() {
            ready!(me.poll_goaway(cx));
        }
        Pin::new(&mut me.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let l = payload.len();
        let mut f = vec![(l >> 16) as u8, (l >> 8) as u8, l as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn watch() -> H2Watch<tokio::io::DuplexStream> {
        H2Watch::new(tokio::io::duplex(64).0, Arc::default(), None, None, None)
    }

    #[test]
    fn integers_and_updates() {
        assert_eq!(
            crate::fingerprint::hpack_int(&[0x3f, 0xe1, 0x1f], 5),
            Some((4096, 3))
        );
        assert_eq!(
            crate::fingerprint::hpack_int(&[0x3f, 0xe2, 0x1f], 5),
            Some((4097, 3))
        );
        assert_eq!(crate::fingerprint::hpack_int(&[0x3f, 0xe2], 5), None);
        assert!(!oversized_update(&[0x3f, 0xe1, 0x1f, 0x82]));
        assert!(oversized_update(&[0x3f, 0xe2, 0x1f, 0x82]));
        // A second update may be the oversized one; a field first means none.
        assert!(oversized_update(&[0x20, 0x3f, 0xe2, 0x1f]));
        assert!(!oversized_update(&[0x82, 0x3f, 0xe2, 0x1f]));
    }

    #[test]
    fn finds_an_oversized_update_at_any_split() {
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        bytes.extend(frame(0x4, 0, 0, &[]));
        bytes.extend(frame(HEADERS, 0x4 | 0x1, 1, &[0x3f, 0xe1, 0x1f, 0x82]));
        bytes.extend(frame(0x0, 0, 1, &[0u8; 300]));
        // Padded and with priority: the update comes after six bytes.
        let bad = frame(
            HEADERS,
            0x4 | 0x8 | 0x20, // END_HEADERS, PADDED, PRIORITY
            3,
            &[1, 0, 0, 0, 0, 16, 0x3f, 0xe2, 0x1f, 0x82, 0],
        );
        let ok_len = bytes.len();
        bytes.extend(bad);
        for split in [1, 5, 9, 10, 17, 24, 25, 33, ok_len, ok_len + 8, ok_len + 16] {
            let mut w = watch();
            let (a, b) = bytes.split_at(split);
            assert_eq!(w.scan_read(a), Ok(()), "split {split}");
            // What is kept of the second read: the bytes before the bad frame began in it.
            assert_eq!(
                w.scan_read(b),
                Err(ok_len.saturating_sub(split)),
                "split {split}"
            );
            assert_eq!(w.last_stream, 1, "the bad stream never reached h2");
        }
        let mut w = watch();
        assert_eq!(w.scan_read(&bytes), Err(ok_len));
        assert_eq!(w.scan_read(&[]), Ok(()));
    }

    #[test]
    fn a_control_frame_flood_is_cut_and_earned_frames_pass() {
        let mut pre = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        pre.extend(frame(0x4, 0, 0, &[]));
        let prio = frame(0x2, 0, 3, &[0, 0, 0, 1, 16]);
        let wu = frame(0x8, 0, 0, &[0, 0, 0x40, 0]);
        // A PRIORITY flood before any request: cut at the base allowance.
        let mut w = watch();
        assert_eq!(w.scan_read(&pre), Ok(()));
        let mut cut = None;
        for i in 0..5_000u64 {
            if w.scan_read(&prio).is_err() {
                cut = Some(i);
                break;
            }
        }
        assert_eq!(cut, Some(CONTROL_BASE - 1), "SETTINGS was one");
        assert_eq!(w.error, ENHANCE_YOUR_CALM);
        // WINDOW_UPDATEs earned by DATA sent and requests made pass.
        let mut w = watch();
        assert_eq!(w.scan_read(&pre), Ok(()));
        for s in 0..20u32 {
            assert_eq!(
                w.scan_read(&frame(HEADERS, 0x5, 2 * s + 1, &[0x82])),
                Ok(())
            );
        }
        w.scan_written(&frame(0x0, 0, 1, &vec![0u8; 1 << 20]));
        let earned = CONTROL_BASE + 20 * CONTROL_PER_REQUEST + (1 << 20) / DATA_PER_CONTROL + 2;
        for i in 1..earned {
            assert_eq!(w.scan_read(&wu), Ok(()), "frame {i}");
        }
        assert!(w.scan_read(&wu).is_err(), "past what it earned");
        // A PING flood whose every PING we acknowledge earns nothing by our ACKs.
        let mut w = watch();
        assert_eq!(w.scan_read(&pre), Ok(()));
        let ping = frame(0x6, 0, 0, &[0; 8]);
        let ack = frame(0x6, 0x1, 0, &[0; 8]);
        let mut cut = None;
        for i in 0..5_000u64 {
            if w.scan_read(&ping).is_err() {
                cut = Some(i);
                break;
            }
            w.scan_written(&ack);
        }
        assert_eq!(cut, Some(CONTROL_BASE - 1));
    }

    #[test]
    fn follows_written_frames() {
        let mut w = watch();
        let mut out = frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]);
        out.extend(frame(0x0, 0, 1, &[7u8; 40]));
        w.scan_written(&out[..20]);
        assert!(!w.wr.at_boundary());
        w.scan_written(&out[20..]);
        assert!(w.wr.at_boundary());
    }
}
