//! Writing responses: the question echoed, RRsets copied from their stored wire form,
//! names compressed, and nothing written partly: an RRset fits whole or not at all.

use zones::Zone;
use zones::rdata;
use zones::rrtype::t;
use zones::zone::{RR_HEAD, RRset};

use crate::config::NSID_MAX;
use crate::query::wire::{Query, hf};

/// A response section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// Answer.
    Answer = 0,
    /// Authority.
    Authority = 1,
    /// Additional.
    Additional = 2,
}

/// Whose name an RR carries as owner.
#[derive(Debug, Clone, Copy)]
pub enum Owner<'n> {
    /// The question name (pointer to offset 12).
    Qname,
    /// A name already in the packet at this offset.
    At(u16),
    /// A name given in lower-case wire format (compressed against the packet).
    Name(&'n [u8]),
}

/// The RRset did not fit in the space left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// Where the encoded name at `at` in `msg` ends: after its root label or its pointer (not
/// followed); None when it runs past `msg`.
fn name_end(msg: &[u8], at: usize) -> Option<usize> {
    let mut p = at;
    loop {
        let l = *msg.get(p)?;
        if l & 0xC0 == 0xC0 {
            p += 2;
            break;
        }
        p += 1 + l as usize;
        if l == 0 {
            break;
        }
    }
    (p <= msg.len()).then_some(p)
}

/// Offsets a compression pointer can reach (14 bits).
const MAX_POINTER: usize = 0x4000;

/// Places of the compression table (a power of two).
const COMP_SLOTS: usize = 256;
/// Suffixes the table holds at most (three quarters of its places: probes stay short).
const COMP_ENTRIES: usize = 192;

/// Names already written, by the offset of each of their suffixes, for compression: a hash
/// table (open addressing), so that a suffix is looked up in a probe or two however many
/// are written. Left uninitialised but for the bitmap of places taken (cleared per message).
struct Compressor {
    n: usize,
    /// A suffix found the table full (left out: later names point less far).
    full: bool,
    used: [u64; COMP_SLOTS / 64],
    off: [std::mem::MaybeUninit<u16>; COMP_SLOTS],
    hash: [std::mem::MaybeUninit<u32>; COMP_SLOTS],
    /// The places taken, in order: a rollback frees the latest.
    order: [std::mem::MaybeUninit<u8>; COMP_ENTRIES],
}

/// Most labels a wire name has (255 bytes, one-byte labels, the root apart).
const MAX_LABELS: usize = 128;

/// The hashes of every suffix of a lower-case wire name at once, in time linear in its
/// length: FNV-1a over the labels taken from the root up, so that each suffix's hash goes on
/// from the next one's. (Hashed one by one, a name of 127 labels cost some 16,000 steps.)
struct Suffixes {
    n: usize,
    // Left uninitialised past `n` (a response writes several names: no 640-byte clear each).
    off: [std::mem::MaybeUninit<u8>; MAX_LABELS],
    hash: [std::mem::MaybeUninit<u32>; MAX_LABELS],
}

impl Suffixes {
    /// No name's.
    fn none() -> Suffixes {
        Suffixes {
            n: 0,
            off: [const { std::mem::MaybeUninit::uninit() }; MAX_LABELS],
            hash: [const { std::mem::MaybeUninit::uninit() }; MAX_LABELS],
        }
    }

    #[inline]
    fn of(name: &[u8]) -> Suffixes {
        let mut s = Suffixes::none();
        let mut i = 0usize;
        while let Some(&l) = name.get(i) {
            if l == 0 || s.n == MAX_LABELS {
                break;
            }
            s.off[s.n].write(i as u8);
            s.n += 1;
            i += 1 + l as usize;
        }
        let mut h: u32 = 0x811c9dc5;
        for k in (0..s.n).rev() {
            let o = s.off(k);
            let end = (o + 1 + name[o] as usize).min(name.len());
            for &b in &name[o..end] {
                h ^= b as u32;
                h = h.wrapping_mul(0x01000193);
            }
            s.hash[k].write(h);
        }
        s
    }

    /// Where the `k`-th suffix starts (`k < n`).
    #[inline]
    fn off(&self, k: usize) -> usize {
        assert!(k < self.n);
        // SAFETY: `of` wrote the first `n` offsets.
        unsafe { self.off[k].assume_init() as usize }
    }

    /// The `k`-th suffix's hash (`k < n`).
    #[inline]
    fn hash(&self, k: usize) -> u32 {
        assert!(k < self.n);
        // SAFETY: `of` wrote the first `n` hashes.
        unsafe { self.hash[k].assume_init() }
    }
}

impl Compressor {
    fn new() -> Compressor {
        Compressor {
            n: 0,
            full: false,
            used: [0; COMP_SLOTS / 64],
            off: [const { std::mem::MaybeUninit::uninit() }; COMP_SLOTS],
            hash: [const { std::mem::MaybeUninit::uninit() }; COMP_SLOTS],
            order: [const { std::mem::MaybeUninit::uninit() }; COMP_ENTRIES],
        }
    }

    fn clear(&mut self) {
        self.n = 0;
        self.full = false;
        self.used = [0; COMP_SLOTS / 64];
    }

    /// The first place a hash probes.
    #[inline]
    fn home(hash: u32) -> usize {
        (hash.wrapping_mul(0x9E37_79B1) >> 24) as usize % COMP_SLOTS
    }

    #[inline]
    fn taken(&self, i: usize) -> bool {
        self.used[i / 64] & (1 << (i % 64)) != 0
    }

    fn add(&mut self, off: usize, hash: u32) {
        if off >= 0x3FFF {
            return;
        }
        if self.n == COMP_ENTRIES {
            self.full = true;
            return;
        }
        let mut i = Self::home(hash);
        while self.taken(i) {
            i = (i + 1) % COMP_SLOTS;
        }
        self.used[i / 64] |= 1 << (i % 64);
        self.off[i].write(off as u16);
        self.hash[i].write(hash);
        self.order[self.n].write(i as u8);
        self.n += 1;
    }

    /// Forgets the suffixes added after the first `n` (each probe chain of those kept holds
    /// only places taken before it).
    fn truncate(&mut self, n: usize) {
        while self.n > n {
            self.n -= 1;
            // SAFETY: `add` wrote the first `self.n` places of `order`.
            let i = unsafe { self.order[self.n].assume_init() } as usize;
            self.used[i / 64] &= !(1 << (i % 64));
        }
    }

    /// The offsets written for suffixes of hash `hash`, as long as `f` says go on.
    #[inline]
    fn each(&self, hash: u32, mut f: impl FnMut(u16) -> bool) -> Option<u16> {
        let mut i = Self::home(hash);
        while self.taken(i) {
            // SAFETY: a place marked taken was written by `add`.
            let (h, o) = unsafe { (self.hash[i].assume_init(), self.off[i].assume_init()) };
            if h == hash && f(o) {
                return Some(o);
            }
            i = (i + 1) % COMP_SLOTS;
        }
        None
    }
}

/// Builds one response in a caller's buffer.
pub struct Writer<'b> {
    buf: &'b mut [u8],
    len: usize,
    limit: usize,
    counts: [u16; 3],
    comp: Compressor,
    /// The question name's labels (at offset 12): every suffix of it can be pointed at,
    /// however deep, without taking the table's places.
    question: Suffixes,
}

impl<'b> Writer<'b> {
    /// A writer over `buf` that will not write past `limit` bytes (space for OPT reserved
    /// by the caller).
    pub fn new(buf: &'b mut [u8], limit: usize) -> Writer<'b> {
        let limit = limit.min(buf.len());
        Writer {
            buf,
            len: 0,
            limit,
            counts: [0; 3],
            comp: Compressor::new(),
            question: Suffixes::none(),
        }
    }

    /// Bytes written so far.
    pub fn position(&self) -> usize {
        self.len
    }

    /// The most bytes it may write.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Changes the size limit (to make room for OPT, or after the question is known).
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit.min(self.buf.len());
    }

    /// Writes the header for a reply to `q` with `rcode` (low 4 bits), echoing the
    /// question when `with_question`. `req` is the request bytes.
    pub fn start(&mut self, req: &[u8], q: &Query, rcode: u16, with_question: bool) {
        self.comp.clear();
        self.question.n = 0;
        self.counts = [0; 3];
        let flags = hf::QR | (q.flags & (0x7800 | hf::RD | hf::CD)) | (rcode & 0xF);
        self.buf[0..2].copy_from_slice(&q.id.to_be_bytes());
        self.buf[2..4].copy_from_slice(&flags.to_be_bytes());
        self.buf[4..12].fill(0);
        self.len = 12;
        if with_question && q.question_end > 12 && q.question_end <= self.buf.len() {
            let qlen = q.question_end - 12;
            self.buf[12..12 + qlen].copy_from_slice(&req[12..q.question_end]);
            self.buf[5] = 1;
            self.len += qlen;
            self.question = Suffixes::of(q.qname());
        }
    }

    /// Sets header flag bits.
    pub fn set_flags(&mut self, bits: u16) {
        let f = u16::from_be_bytes([self.buf[2], self.buf[3]]) | bits;
        self.buf[2..4].copy_from_slice(&f.to_be_bytes());
    }

    /// Clears header flag bits.
    pub fn clear_flags(&mut self, bits: u16) {
        let f = u16::from_be_bytes([self.buf[2], self.buf[3]]) & !bits;
        self.buf[2..4].copy_from_slice(&f.to_be_bytes());
    }

    /// TC is set: the response already lacks something it needed.
    pub fn truncated(&self) -> bool {
        self.buf[2] & 0x02 != 0
    }

    /// Sets the low four bits of the rcode.
    pub fn set_rcode(&mut self, rcode: u16) {
        self.buf[3] = (self.buf[3] & 0xF0) | (rcode & 0xF) as u8;
    }

    /// The rcode's low four bits as written.
    pub fn rcode(&self) -> u16 {
        (self.buf[3] & 0xF) as u16
    }

    /// Whether a name's suffix found the compression table full (the message is larger than
    /// it could be).
    pub fn compression_full(&self) -> bool {
        self.comp.full
    }

    /// Finishes the message: writes the section counts, returns its length.
    pub fn finish(&mut self) -> usize {
        self.buf[6..8].copy_from_slice(&self.counts[0].to_be_bytes());
        self.buf[8..10].copy_from_slice(&self.counts[1].to_be_bytes());
        self.buf[10..12].copy_from_slice(&self.counts[2].to_be_bytes());
        self.len
    }

    /// A mark to roll back to.
    pub fn mark(&self) -> (usize, [u16; 3], usize) {
        (self.len, self.counts, self.comp.n)
    }

    /// Rolls back to a mark.
    pub fn rollback(&mut self, m: (usize, [u16; 3], usize)) {
        self.len = m.0;
        self.counts = m.1;
        self.comp.truncate(m.2);
    }

    /// Writes a whole RRset from a zone, or nothing (returns `Full`).
    pub fn rrset(
        &mut self,
        sec: Section,
        zone: &Zone,
        s: &RRset,
        owner: Owner<'_>,
    ) -> Result<(), Full> {
        let data = zone.wire(s);
        let compress_rdata = s.has_names() && compressible(s.rtype);
        if !compress_rdata {
            match owner {
                Owner::Qname => {
                    // The stored form already points at the question: one copy.
                    if self.len + data.len() > self.limit {
                        return Err(Full);
                    }
                    self.buf[self.len..self.len + data.len()].copy_from_slice(data);
                    self.len += data.len();
                }
                Owner::At(off) => {
                    if self.len + data.len() > self.limit {
                        return Err(Full);
                    }
                    self.put_pointing(data, off);
                }
                Owner::Name(name) => {
                    let m = self.mark();
                    let at = self.name(name).inspect_err(|_| self.rollback(m))?;
                    if at >= MAX_POINTER {
                        // Written past where a pointer reaches (a TCP answer over 16 KiB):
                        // each RR carries the name (below).
                        self.rollback(m);
                        return self.rrset_by_rr(sec, zone, s, owner);
                    }
                    // The first RR carries the name; the others point at it.
                    let first = zone.rrs(s).next().map(|(rr, _)| rr.len()).unwrap_or(0);
                    let rest = &data[first..];
                    let need = first - 2 + rest.len();
                    if self.len + need > self.limit {
                        self.rollback(m);
                        return Err(Full);
                    }
                    self.buf[self.len..self.len + first - 2].copy_from_slice(&data[2..first]);
                    self.len += first - 2;
                    self.put_pointing(rest, at as u16);
                }
            }
            self.counts[sec as usize] += s.count;
            return Ok(());
        }
        self.rrset_by_rr(sec, zone, s, owner)
    }

    /// Copies stored RRs (`rrs`, room checked by the caller), each owner a pointer to `at`.
    fn put_pointing(&mut self, rrs: &[u8], at: u16) {
        let start = self.len;
        self.buf[start..start + rrs.len()].copy_from_slice(rrs);
        let ptr = (0xC000 | at).to_be_bytes();
        let mut p = start;
        while p < start + rrs.len() {
            self.buf[p..p + 2].copy_from_slice(&ptr);
            let rdlen = u16::from_be_bytes([self.buf[p + 10], self.buf[p + 11]]);
            p += RR_HEAD + rdlen as usize;
        }
        self.len += rrs.len();
    }

    /// [`Writer::rrset`] one RR at a time, each RDATA's names compressed.
    fn rrset_by_rr(
        &mut self,
        sec: Section,
        zone: &Zone,
        s: &RRset,
        owner: Owner<'_>,
    ) -> Result<(), Full> {
        let m = self.mark();
        let mut owner_at: Option<u16> = match owner {
            Owner::Qname => Some(12),
            Owner::At(o) => Some(o),
            Owner::Name(_) => None,
        };
        for (rr, rd) in zone.rrs(s) {
            let r = self.rr_compressed(s.rtype, &rr[2..10], rd, &mut owner_at, owner);
            if r.is_err() {
                self.rollback(m);
                return Err(Full);
            }
        }
        self.counts[sec as usize] += s.count;
        Ok(())
    }

    /// Writes a whole RRset like [`Writer::rrset`], with every TTL replaced by `ttl` (the
    /// negative TTL for the SOA's signatures, RFC 4035 §3.1.3 with RFC 2308).
    pub fn rrset_ttl(
        &mut self,
        sec: Section,
        zone: &Zone,
        s: &RRset,
        owner: Owner<'_>,
        ttl: u32,
    ) -> Result<(), Full> {
        let start = self.len;
        let first_count = self.counts[sec as usize];
        self.rrset(sec, zone, s, owner)?;
        // Walk the RRs just written and patch their TTLs.
        let mut p = start;
        for _ in first_count..self.counts[sec as usize] {
            // Past the owner (we wrote it: it ends within what we wrote).
            p = name_end(&self.buf[..self.len], p).expect("an owner we wrote");
            self.buf[p + 4..p + 8].copy_from_slice(&ttl.to_be_bytes());
            let rdlen = u16::from_be_bytes([self.buf[p + 8], self.buf[p + 9]]) as usize;
            p += 10 + rdlen;
        }
        Ok(())
    }

    /// One RR whose RDATA names may be compressed. `head` is TYPE CLASS TTL.
    fn rr_compressed(
        &mut self,
        rtype: u16,
        head: &[u8],
        rd: &[u8],
        owner_at: &mut Option<u16>,
        owner: Owner<'_>,
    ) -> Result<(), Full> {
        match *owner_at {
            Some(o) => self.put_owner(o as usize)?,
            None => {
                let Owner::Name(n) = owner else {
                    unreachable!("owner offset known for Qname and At")
                };
                *owner_at = Some(self.name(n)? as u16);
            }
        }
        self.rr_tail(rtype, head, rd)
    }

    /// TYPE CLASS TTL (`head`), RDLENGTH and RDATA with its compressible names compressed.
    fn rr_tail(&mut self, rtype: u16, head: &[u8], rd: &[u8]) -> Result<(), Full> {
        self.put(head)?;
        let rdlen_at = self.len;
        self.put(&[0, 0])?;
        let rd_start = self.len;
        let mut pos = 0usize;
        let mut refs = [(0usize, 0usize, false); 4];
        let mut nrefs = 0;
        if compressible(rtype) {
            rdata::names(rtype, rd, &mut |r| {
                if nrefs < refs.len() {
                    refs[nrefs] = (r.offset, r.len, r.compress);
                    nrefs += 1;
                }
            });
        }
        let mut lower = [0u8; 255];
        for &(off, len, compress) in &refs[..nrefs] {
            self.put(&rd[pos..off])?;
            let name = &rd[off..off + len];
            if compress {
                lower[..len].copy_from_slice(name);
                lower[..len].make_ascii_lowercase();
                self.name_with_case(&lower[..len], name)?;
            } else {
                self.put(name)?;
            }
            pos = off + len;
        }
        self.put(&rd[pos..])?;
        let rdlen = (self.len - rd_start) as u16;
        self.buf[rdlen_at..rdlen_at + 2].copy_from_slice(&rdlen.to_be_bytes());
        Ok(())
    }

    /// Writes the name written at `at` again: a pointer to it, or where a pointer cannot
    /// reach (past 16 KiB), its labels as written there (ending in their own pointer).
    fn put_owner(&mut self, at: usize) -> Result<(), Full> {
        if at < MAX_POINTER {
            return self.put(&(0xC000 | at as u16).to_be_bytes());
        }
        let end = name_end(&self.buf[..self.len], at).ok_or(Full)?;
        let n = end - at;
        if end > self.len || self.len + n > self.limit {
            return Err(Full);
        }
        self.buf.copy_within(at..end, self.len);
        self.len += n;
        Ok(())
    }

    #[inline]
    fn put(&mut self, b: &[u8]) -> Result<(), Full> {
        if self.len + b.len() > self.limit {
            return Err(Full);
        }
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
        Ok(())
    }

    /// Writes a lower-case name compressed; returns the offset where it starts.
    pub fn name(&mut self, lower: &[u8]) -> Result<usize, Full> {
        self.name_with_case(lower, lower)
    }

    /// Writes a name (labels as in `cased`, matching on `lower`) compressed against what the
    /// packet holds; returns the offset where it starts.
    /// A name written whole where it already is returns that offset (a pointer's target,
    /// never a pointer).
    fn name_with_case(&mut self, lower: &[u8], cased: &[u8]) -> Result<usize, Full> {
        let start = self.len;
        let sx = Suffixes::of(lower);
        if let Some((k, ptr)) = self.longest_written(lower, &sx) {
            // Labels before the k-th literally, then a pointer.
            let i = sx.off(k);
            self.put(&cased[..i])?;
            self.put(&(0xC000 | ptr).to_be_bytes())?;
            self.add_suffixes(start, &sx, k);
            return Ok(if k == 0 { ptr as usize } else { start });
        }
        self.put(cased)?;
        self.add_suffixes(start, &sx, sx.n);
        Ok(start)
    }

    /// The longest suffix of `lower` (its labels `sx`) already in the packet: its index in
    /// `sx` and where it is.
    fn longest_written(&self, lower: &[u8], sx: &Suffixes) -> Option<(usize, u16)> {
        let asked = self.in_question(lower, sx);
        let upto = asked.map_or(sx.n, |(k, _)| k);
        for k in 0..upto {
            let i = sx.off(k);
            if let Some(ptr) = self.find_hashed(&lower[i..], sx.hash(k)) {
                return Some((k, ptr));
            }
        }
        asked
    }

    /// The longest suffix of `lower` (its labels `sx`) that ends the question name: its
    /// index in `sx` and where it is. Compared label by label from the root, in one pass.
    fn in_question(&self, lower: &[u8], sx: &Suffixes) -> Option<(usize, u16)> {
        let q = &self.buf[12..self.len];
        let (mut a, mut b) = (sx.n, self.question.n);
        let mut found = None;
        while a > 0 && b > 0 {
            let (i, j) = (sx.off(a - 1), self.question.off(b - 1));
            let l = lower[i] as usize;
            let same = q.get(j) == Some(&lower[i])
                && q.get(j + 1..j + 1 + l)
                    .is_some_and(|x| x.eq_ignore_ascii_case(&lower[i + 1..i + 1 + l]));
            if !same {
                break;
            }
            a -= 1;
            b -= 1;
            found = Some((a, (12 + j) as u16));
        }
        found
    }

    /// Notes the first `upto` suffixes of a name written at `start`.
    fn add_suffixes(&mut self, start: usize, sx: &Suffixes, upto: usize) {
        for k in 0..upto {
            self.comp.add(start + sx.off(k), sx.hash(k));
        }
    }

    /// An offset in the packet where the name `suffix` (lower case) is written.
    fn find(&self, suffix: &[u8]) -> Option<u16> {
        let sx = Suffixes::of(suffix);
        if sx.n == 0 {
            return None;
        }
        match self.in_question(suffix, &sx) {
            Some((0, at)) => Some(at),
            _ => self.find_hashed(suffix, sx.hash(0)),
        }
    }

    /// As [`find`](Self::find), with the suffix's hash known.
    #[inline]
    fn find_hashed(&self, suffix: &[u8], h: u32) -> Option<u16> {
        self.comp.each(h, |o| self.matches_at(o as usize, suffix))
    }

    /// True when the name written at `off` (following pointers) equals `name` (lower case).
    fn matches_at(&self, mut off: usize, name: &[u8]) -> bool {
        let mut i = 0usize;
        let mut hops = 0;
        loop {
            let Some(&l) = self.buf[..self.len].get(off) else {
                return false;
            };
            if l & 0xC0 == 0xC0 {
                hops += 1;
                if hops > 16 || off + 1 >= self.len {
                    return false;
                }
                off = (((l & 0x3F) as usize) << 8) | self.buf[off + 1] as usize;
                continue;
            }
            let l = l as usize;
            if name.get(i) != Some(&(l as u8)) {
                return false;
            }
            if l == 0 {
                return i + 1 == name.len();
            }
            if off + 1 + l > self.len || i + 1 + l > name.len() {
                return false;
            }
            let a = &self.buf[off + 1..off + 1 + l];
            let b = &name[i + 1..i + 1 + l];
            if !a.iter().zip(b).all(|(x, y)| x.to_ascii_lowercase() == *y) {
                return false;
            }
            off += 1 + l;
            i += 1 + l;
        }
    }

    /// Writes one RR from parts (for synthesised records): owner, TYPE, class IN, TTL, RDATA.
    pub fn rr(
        &mut self,
        sec: Section,
        owner: Owner<'_>,
        rtype: u16,
        ttl: u32,
        rd: &[u8],
    ) -> Result<(), Full> {
        let m = self.mark();
        let mut head = [0u8; 8];
        head[0..2].copy_from_slice(&rtype.to_be_bytes());
        head[2..4].copy_from_slice(&1u16.to_be_bytes());
        head[4..8].copy_from_slice(&ttl.to_be_bytes());
        let mut at = match owner {
            Owner::Qname => Some(12),
            Owner::At(o) => Some(o),
            Owner::Name(_) => None,
        };
        if let Err(e) = self.rr_compressed(rtype, &head, rd, &mut at, owner) {
            self.rollback(m);
            return Err(e);
        }
        self.counts[sec as usize] += 1;
        Ok(())
    }

    /// Appends raw bytes counted as `rrs` records of a section (OPT, TSIG).
    pub fn raw_rr(&mut self, sec: Section, bytes: &[u8]) -> Result<(), Full> {
        if self.len + bytes.len() > self.buf.len() {
            return Err(Full);
        }
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
        self.counts[sec as usize] += 1;
        Ok(())
    }

    /// Where a lower-case name is already written in the packet, if it is.
    pub fn find_name(&self, lower: &[u8]) -> Option<u16> {
        self.find(lower)
    }
}

/// Types whose RDATA names may be compressed (RFC 3597 §4), as `zones` describes each type.
#[inline]
pub fn compressible(rtype: u16) -> bool {
    zones::rdata::compresses_names(rtype)
}

// ---------------------------------------------------------------------------------------------
// The glue every reply shares: OPT, the size limit, the slip and BADCOOKIE replies. Written
// once here; the query pipeline and the transfers use it.

/// Bytes of an OPT RR without options.
pub const OPT_LEN: usize = 11;
/// Bytes of a COOKIE option with a client and a server cookie.
pub const COOKIE_OPT_LEN: usize = 4 + 8 + 16;
/// Bytes of an edns-tcp-keepalive option with its TIMEOUT.
pub const KEEPALIVE_OPT_LEN: usize = 4 + 2;
/// Bytes of an Extended DNS Error option with its INFO-CODE and no text.
pub const EDE_OPT_LEN: usize = 4 + 2;
/// Extended DNS Error (RFC 8914) INFO-CODEs dnsd sends.
pub mod ede {
    /// The client may not have this (a rules deny, a transfer refused).
    pub const PROHIBITED: u16 = 18;
    /// Not a zone served here.
    pub const NOT_AUTHORITATIVE: u16 = 20;
    /// Not done this way (AXFR over UDP).
    pub const NOT_SUPPORTED: u16 = 21;
}

/// The options our OPT carries.
#[derive(Debug, Default, Clone, Copy)]
pub struct OptOptions<'a> {
    /// Our cookie for the client (RFC 7873).
    pub cookie: Option<&'a crate::query::module::CookieOut>,
    /// The idle timeout announced to a TCP client that asked, in units of 100 ms (RFC 7828).
    pub keepalive: Option<u16>,
    /// Set the Compact Answers OK flag (RFC 9824 §5: a compact-denial zone asked with it).
    pub compact_ok: bool,
    /// Our name server identifier, to a query that asked (RFC 5001).
    pub nsid: Option<&'a [u8]>,
    /// An Extended DNS Error INFO-CODE (RFC 8914, [`ede`]).
    pub ede: Option<u16>,
    /// The query's EDNS Client Subnet echoed with this SCOPE PREFIX-LENGTH (RFC 7871 §7.2).
    pub ecs: Option<(crate::query::wire::Ecs, u8)>,
    /// Pad the response to a multiple of [`PAD_BLOCK`] bytes, as far as its limit allows
    /// (RFC 7830 §4, RFC 8467 §4.1: a padded query over an encrypted transport). Written last:
    /// nothing may follow the OPT.
    pub pad: bool,
}

/// The block a padded response's length is a multiple of (RFC 8467 §4.1).
pub const PAD_BLOCK: usize = 468;

impl<'a> OptOptions<'a> {
    /// Only our cookie, if any.
    pub fn cookie(cookie: Option<&'a crate::query::module::CookieOut>) -> Self {
        OptOptions {
            cookie,
            ..OptOptions::default()
        }
    }

    /// Bytes the options take.
    #[inline]
    pub fn len(&self) -> usize {
        self.cookie.map_or(0, |_| COOKIE_OPT_LEN)
            + self.keepalive.map_or(0, |_| KEEPALIVE_OPT_LEN)
            + self.nsid.map_or(0, |n| 4 + n.len().min(NSID_MAX))
            + self.ede.map_or(0, |_| EDE_OPT_LEN)
            + self
                .ecs
                .map_or(0, |(e, _)| 8 + (e.source as usize).div_ceil(8))
    }

    /// True when there are none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An OPT RR with our payload size, an extended rcode and the DO bit echoed.
pub fn opt_rr(udp_payload: u16, ext_rcode: u8, dnssec_ok: bool) -> [u8; OPT_LEN] {
    let mut o = [0u8; OPT_LEN];
    o[1..3].copy_from_slice(&t::OPT.to_be_bytes());
    o[3..5].copy_from_slice(&udp_payload.to_be_bytes());
    o[5] = ext_rcode;
    o[6] = 0; // version
    if dnssec_ok {
        o[7] = 0x80;
    }
    o
}

/// Room an OPT with `opts` takes at the end of a response to `q` (none without EDNS).
#[inline]
pub fn opt_room(q: &Query, opts: &OptOptions<'_>) -> usize {
    match q.edns {
        None => 0,
        Some(_) => OPT_LEN + opts.len(),
    }
}

/// Appends OPT (our payload `udp_payload`, the extended bits of `rc`, DO echoed from `q`)
/// with `opts`.
pub fn put_opt(w: &mut Writer<'_>, q: &Query, udp_payload: u16, rc: u16, opts: OptOptions<'_>) {
    let mut buf = [0u8; OPT_LEN
        + COOKIE_OPT_LEN
        + KEEPALIVE_OPT_LEN
        + 4
        + NSID_MAX
        + EDE_OPT_LEN
        + 8
        + 16
        + 4
        + PAD_BLOCK];
    buf[..OPT_LEN].copy_from_slice(&opt_rr(udp_payload, (rc >> 4) as u8, q.dnssec_ok()));
    if opts.compact_ok {
        buf[7] |= 0x40;
    }
    let mut len = OPT_LEN;
    if let Some(c) = opts.cookie {
        buf[len..len + 2].copy_from_slice(&crate::query::wire::OPT_COOKIE.to_be_bytes());
        buf[len + 2..len + 4].copy_from_slice(&24u16.to_be_bytes());
        buf[len + 4..len + 12].copy_from_slice(&c.client);
        buf[len + 12..len + 28].copy_from_slice(&c.server);
        len += COOKIE_OPT_LEN;
    }
    if let Some(t) = opts.keepalive {
        buf[len..len + 2].copy_from_slice(&crate::query::wire::OPT_TCP_KEEPALIVE.to_be_bytes());
        buf[len + 2..len + 4].copy_from_slice(&2u16.to_be_bytes());
        buf[len + 4..len + 6].copy_from_slice(&t.to_be_bytes());
        len += KEEPALIVE_OPT_LEN;
    }
    if let Some(n) = opts.nsid {
        let n = &n[..n.len().min(NSID_MAX)];
        buf[len..len + 2].copy_from_slice(&crate::query::wire::OPT_NSID.to_be_bytes());
        buf[len + 2..len + 4].copy_from_slice(&(n.len() as u16).to_be_bytes());
        buf[len + 4..len + 4 + n.len()].copy_from_slice(n);
        len += 4 + n.len();
    }
    if let Some(code) = opts.ede {
        buf[len..len + 2].copy_from_slice(&crate::query::wire::OPT_EDE.to_be_bytes());
        buf[len + 2..len + 4].copy_from_slice(&2u16.to_be_bytes());
        buf[len + 4..len + 6].copy_from_slice(&code.to_be_bytes());
        len += EDE_OPT_LEN;
    }
    if let Some((e, scope)) = opts.ecs {
        let a = (e.source as usize).div_ceil(8);
        buf[len..len + 2].copy_from_slice(&crate::query::wire::OPT_ECS.to_be_bytes());
        buf[len + 2..len + 4].copy_from_slice(&((4 + a) as u16).to_be_bytes());
        buf[len + 4..len + 6].copy_from_slice(&u16::from(e.family).to_be_bytes());
        buf[len + 6] = e.source;
        buf[len + 7] = scope;
        buf[len + 8..len + 8 + a].copy_from_slice(&e.addr[..a]);
        len += 8 + a;
    }
    if opts.pad {
        // The message with this option's header: padded up to the next block, or as far as
        // the limit lets it (no padding where even the header does not fit).
        let whole = w.position() + len + 4;
        if whole <= w.limit() {
            let pad = ((PAD_BLOCK - whole % PAD_BLOCK) % PAD_BLOCK).min(w.limit() - whole);
            buf[len..len + 2].copy_from_slice(&crate::query::wire::OPT_PADDING.to_be_bytes());
            buf[len + 2..len + 4].copy_from_slice(&(pad as u16).to_be_bytes());
            // The padding octets are zeros (RFC 7830 §3): buf is zeroed.
            len += 4 + pad;
        }
    }
    buf[9..11].copy_from_slice(&((len - OPT_LEN) as u16).to_be_bytes());
    let _ = w.raw_rr(Section::Additional, &buf[..len]);
}

/// The most a response to `q` may take: over UDP the smaller of the client's EDNS size
/// (512 without EDNS) and ours, over TCP 65535; never more than the buffer.
#[inline]
pub fn size_limit(
    q: &Query,
    transport: crate::query::module::Transport,
    udp_payload: u16,
    buf: usize,
) -> usize {
    match transport {
        crate::query::module::Transport::Tcp => buf.min(65535),
        crate::query::module::Transport::Udp => {
            let client = q.edns.map_or(512, |e| e.udp_size) as usize;
            client.min(udp_payload.max(512) as usize).min(buf)
        }
    }
}

/// The minimal reply that makes a client prove itself: BADCOOKIE with our cookie to a
/// client that sent one, else TC=1 (so that it comes back over TCP). Returns its length and
/// rcode.
pub fn slip(
    out: &mut [u8],
    req: &[u8],
    q: &Query,
    udp_payload: u16,
    with_question: bool,
    cookie: Option<&crate::query::module::CookieOut>,
) -> (usize, u16) {
    let mut w = Writer::new(out, out.len().min(512));
    if cookie.is_some() {
        w.start(
            req,
            q,
            crate::query::wire::rcode::BADCOOKIE & 0xF,
            with_question,
        );
        put_opt(
            &mut w,
            q,
            udp_payload,
            crate::query::wire::rcode::BADCOOKIE,
            OptOptions::cookie(cookie),
        );
        (w.finish(), crate::query::wire::rcode::BADCOOKIE)
    } else {
        w.start(req, q, crate::query::wire::rcode::NOERROR, with_question);
        w.set_flags(hf::TC);
        if q.edns.is_some() {
            put_opt(&mut w, q, udp_payload, 0, OptOptions::default());
        }
        (w.finish(), crate::query::wire::rcode::NOERROR)
    }
}

/// TC=1 with the question alone — a suspect's UDP reply: never more bytes than the query
/// (`req`), so that a forged source gets no more than was sent in its name. OPT goes in when
/// the query had one and it fits; our cookie too when it fits (a resolver that retries with
/// it is then proven and answered over UDP). Returns its length.
pub fn truncated(
    out: &mut [u8],
    req: &[u8],
    q: &Query,
    udp_payload: u16,
    cookie: Option<&crate::query::module::CookieOut>,
) -> usize {
    let cap = req.len().min(out.len());
    let mut w = Writer::new(out, cap);
    w.start(req, q, crate::query::wire::rcode::NOERROR, true);
    w.set_flags(hf::TC);
    if q.edns.is_some() && w.len + OPT_LEN <= cap {
        let cookie = cookie.filter(|_| w.len + OPT_LEN + COOKIE_OPT_LEN <= cap);
        put_opt(&mut w, q, udp_payload, 0, OptOptions::cookie(cookie));
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    //! The writer and the glue every reply shares: the size limit, the slip and BADCOOKIE
    //! replies, OPT; and an RRset never written partly.

    use super::*;
    use crate::query::module::{CookieOut, Transport};
    use crate::query::testkit::{Q, Reply, example_text, load_zone};
    use crate::query::wire::rcode;

    /// Names compress against every suffix written, the question's deepest ones too: the
    /// zone's name after a question of 120 labels is a pointer into it (its suffixes were
    /// hashed one by one, 16,000 steps for such a name, and only the 48 longest kept).
    #[test]
    fn names_compress_against_the_questions_suffixes_however_deep() {
        let deep: String = (0..120).map(|_| "a.").collect::<String>() + "example.com.";
        let q = Q::new(&deep, 1);
        let (req, parsed) = q.parsed();
        let mut buf = [0u8; 1024];
        let mut w = Writer::new(&mut buf, 1024);
        w.start(&req, &parsed, rcode::NOERROR, true);
        let at = w.position();
        let apex = b"\x07example\x03com\x00";
        w.name(apex).unwrap();
        assert_eq!(w.position() - at, 2, "the zone's name is a pointer");
        let ptr = u16::from_be_bytes([buf[at], buf[at + 1]]) & 0x3FFF;
        assert_eq!(&buf[ptr as usize..ptr as usize + apex.len()], apex);
        // A name sharing the zone's name, and one sharing a deeper suffix: a label and a
        // pointer each.
        let mut w = Writer::new(&mut buf, 1024);
        w.start(&req, &parsed, rcode::NOERROR, true);
        let at = w.position();
        w.name(b"\x03www\x07example\x03com\x00").unwrap();
        assert_eq!(w.position() - at, 4 + 2);
        let at = w.position();
        w.name(b"\x01b\x01a\x01a\x07example\x03com\x00").unwrap();
        assert_eq!(w.position() - at, 2 + 2);
        // Found where it was written (the same hash as the writer's).
        assert!(w.find_name(b"\x01a\x01a\x07example\x03com\x00").is_some());
        assert!(w.find_name(b"\x03zzz\x07example\x03com\x00").is_none());
    }

    /// An RRset whose owner is written past where a pointer reaches (a TCP answer over
    /// 16 KiB): each RR carries the name — its later RRs pointed at the offset cut to 14
    /// bits, somewhere else in the message (unparseable; Knot and NSD fine).
    #[test]
    fn an_rrset_written_past_16_kib_repeats_its_owner_rather_than_point_short() {
        let zone = load_zone(
            "example.com.",
            "$ORIGIN example.com.\n$TTL 300\n@ SOA ns h 1 2 3 4 5\n@ NS ns\nns A 192.0.2.1\n\
             many MX 10 a.other.\nmany MX 20 b.other.\nmany MX 30 c.other.\n\
             many TXT one\nmany TXT two\n",
        );
        let node = zone.find(b"\x04many\x07example\x03com\x00").unwrap();
        let (req, parsed) = Q::new("example.com.", 1).parsed();
        let mut buf = vec![0u8; 65535];
        let mut w = Writer::new(&mut buf, 65535);
        w.start(&req, &parsed, rcode::NOERROR, true);
        // 17 KiB of TXT at the apex name (pointers to the question) fill the message first.
        let mut filler = vec![0xC0, 12, 0, 16, 0, 1, 0, 0, 0, 60];
        filler.extend_from_slice(&(256u16 * 68).to_be_bytes());
        for _ in 0..68 {
            filler.push(255);
            filler.extend_from_slice(&[b'x'; 255]);
        }
        w.raw_rr(Section::Answer, &filler).unwrap();
        assert!(w.position() > MAX_POINTER);
        let owner = b"\x04many\x07example\x03com\x00";
        for ty in [15, 16] {
            let set = *zone.rrset(node, ty).unwrap();
            w.rrset(Section::Answer, &zone, &set, Owner::Name(owner))
                .unwrap();
        }
        let n = w.finish();
        let r = crate::query::testkit::Reply::parse(&buf[..n]);
        assert_eq!(r.answer.len(), 1 + 3 + 2);
        for rr in &r.answer[1..] {
            assert_eq!(rr.owner, "many.example.com.", "{rr:?}");
        }
    }

    /// A wire name of `n` labels `l` under `tail` (wire form, with its root).
    fn labels(l: u8, n: usize, tail: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        for _ in 0..n {
            v.extend_from_slice(&[1, l]);
        }
        v.extend_from_slice(tail);
        v
    }

    /// More distinct names than the table holds are still written (whole), and the writer
    /// says the table was full (counted in metrics).
    #[test]
    fn a_full_compression_table_is_told() {
        let q = Q::new("q.", 15);
        let (req, parsed) = q.parsed();
        let mut buf = [0u8; 4096];
        let mut w = Writer::new(&mut buf, 4096);
        w.start(&req, &parsed, rcode::NOERROR, true);
        let name = |i: usize| {
            let l = format!("n{i}");
            let mut v = vec![l.len() as u8];
            v.extend_from_slice(l.as_bytes());
            v.extend_from_slice(b"\x01q\x00");
            v
        };
        for i in 0..COMP_ENTRIES {
            w.name(&name(i)).unwrap();
        }
        assert!(!w.compression_full());
        let at = w.position();
        w.name(&name(COMP_ENTRIES)).unwrap();
        assert_eq!(w.position() - at, 1 + 4 + 2, "its label, then q pointed at");
        assert!(w.compression_full());
        let at = w.position();
        w.name(&name(COMP_ENTRIES)).unwrap();
        assert_eq!(w.position() - at, 1 + 4 + 2, "not found: written again");
        assert!(w.find_name(&name(0)).is_some());
    }

    /// A deep question leaves the table's places to the names written after it: names
    /// sharing any suffix of the question point into it, and deep names written later
    /// compress against each other (the question's shortest 48 suffixes took every place:
    /// a 100-label MX query came out truncated where Knot's answer fitted in 367 bytes).
    /// A name written whole where it already is gives the pointer's target, never a pointer
    /// to a pointer (referrals' NS owners pointed at one).
    #[test]
    fn a_deep_question_takes_no_place_from_the_names_after_it() {
        let q = Q::new(&((0..100).map(|_| "a.").collect::<String>() + "q."), 15);
        let (req, parsed) = q.parsed();
        let mut buf = [0u8; 4096];
        let mut w = Writer::new(&mut buf, 4096);
        w.start(&req, &parsed, rcode::NOERROR, true);
        let tail = b"\x01q\x00";
        // The question's own suffixes: one pointer, or a label and a pointer.
        let at = w.position();
        let whole = w.name(&labels(b'a', 99, tail)).unwrap();
        assert_eq!(w.position() - at, 2);
        assert_eq!(whole, 12 + 2, "the target, not the pointer");
        let at = w.position();
        w.name(&labels(b'a', 101, tail)).unwrap();
        assert_eq!(w.position() - at, 2 + 2);
        let at = w.position();
        w.name(&labels(b'a', 120, tail)).unwrap();
        assert_eq!(
            w.position() - at,
            19 * 2 + 2,
            "19 labels, then the 101 written"
        );
        // Deep names the question does not hold: the second points at the first.
        let e = labels(b'e', 60, tail);
        let at = w.position();
        let first = w.name(&e).unwrap();
        assert_eq!(w.position() - at, 60 * 2 + 2, "e... written, q pointed at");
        let mut g = vec![1, b'g'];
        g.extend_from_slice(&e);
        let at = w.position();
        w.name(&g).unwrap();
        assert_eq!(w.position() - at, 2 + 2);
        assert_eq!(w.name(&e).unwrap(), first);
        assert_eq!(w.find_name(&e), Some(first as u16));
        assert_eq!(w.find_name(&labels(b'a', 50, tail)), Some(12 + 100));
        // More suffixes than the old table's 48 places, written after all that: found too.
        let h = labels(b'h', 119, tail);
        let m = w.mark();
        let at = w.name(&h).unwrap();
        assert_eq!(w.name(&h).unwrap(), at);
        assert_eq!(
            w.find_name(&labels(b'h', 20, tail)),
            Some((at + 99 * 2) as u16)
        );
        // Rolled back: forgotten, the names before it kept.
        w.rollback(m);
        assert_eq!(w.find_name(&h), None);
        assert_eq!(w.find_name(&e), Some(first as u16));
    }

    #[test]
    fn size_limit_over_udp_with_and_without_edns_and_over_tcp() {
        let lim =
            |q: Q, t: Transport, ours: u16, buf: usize| size_limit(&q.parsed().1, t, ours, buf);
        let www = || Q::new("www.example.com.", 1);
        let (udp, tcp) = (Transport::Udp, Transport::Tcp);
        // No EDNS: 512 (RFC 1035), whatever we would take.
        assert_eq!(lim(www(), udp, 1232, 65535), 512);
        assert_eq!(lim(www(), udp, 4096, 65535), 512);
        // EDNS: the smaller of the client's size and ours.
        assert_eq!(lim(www().edns(4096), udp, 1232, 65535), 1232);
        assert_eq!(lim(www().edns(1000), udp, 1232, 65535), 1000);
        assert_eq!(lim(www().edns(4096), udp, 4000, 65535), 4000);
        // Sizes below 512 count as 512 (RFC 6891 §6.2.5), theirs and ours.
        assert_eq!(lim(www().edns(100), udp, 1232, 65535), 512);
        assert_eq!(lim(www().edns(4096), udp, 200, 65535), 512);
        // Never more than the buffer.
        assert_eq!(lim(www().edns(4096), udp, 1232, 700), 700);
        // TCP: 65535 or the buffer, EDNS or not.
        assert_eq!(lim(www(), tcp, 1232, 70000), 65535);
        assert_eq!(lim(www().edns(512), tcp, 1232, 65535), 65535);
        assert_eq!(lim(www(), tcp, 1232, 4000), 4000);
    }

    #[test]
    fn slip_is_badcookie_to_a_client_with_a_cookie_else_tc() {
        let mut out = vec![0u8; 4096];
        // A client cookie: BADCOOKIE (23: 7 in the header, 1 in OPT) with ours, no TC.
        let client = [5u8; 8];
        let (req, q) = Q::new("www.example.com.", 1)
            .cookie(&client)
            .id(42)
            .parsed();
        let c = CookieOut {
            client,
            server: [7u8; 16],
        };
        let (n, rc) = slip(&mut out, &req, &q, 1232, true, Some(&c));
        assert_eq!(rc, rcode::BADCOOKIE);
        let r = Reply::parse(&out[..n]);
        assert_eq!((r.id, r.rcode(), r.flags & 0xF), (42, rcode::BADCOOKIE, 7));
        assert!(r.qr() && !r.tc() && !r.aa() && r.is_empty());
        assert_eq!(r.question, Some(("www.example.com.".into(), 1, 1)));
        let mut want = client.to_vec();
        want.extend_from_slice(&[7u8; 16]);
        assert_eq!(r.cookie(), Some(want));
        assert_eq!(r.opt.as_ref().unwrap().class, 1232);
        // No cookie: TC=1, NOERROR, the question, OPT only when the query had EDNS.
        let (req, q) = Q::new("www.example.com.", 1).edns(1232).parsed();
        let (n, rc) = slip(&mut out, &req, &q, 1232, true, None);
        assert_eq!(rc, rcode::NOERROR);
        let r = Reply::parse(&out[..n]);
        assert!(r.tc() && r.rcode() == rcode::NOERROR && r.is_empty());
        assert!(r.opt.is_some() && r.cookie().is_none());
        let (req, q) = Q::new("www.example.com.", 1).parsed();
        let (n, _) = slip(&mut out, &req, &q, 1232, false, None);
        let r = Reply::parse(&out[..n]);
        assert!(r.tc() && r.opt.is_none() && r.question.is_none());
        assert_eq!(n, 12, "a bare header");
        // Recursion desired is echoed, QR set, AA not.
        assert_eq!(r.flags & 0x8500, 0x8100);
    }

    #[test]
    fn put_opt_writes_the_extended_rcode_do_and_the_cookie() {
        let mut out = vec![0u8; 512];
        let (req, q) = Q::new("www.example.com.", 1).dnssec().parsed();
        let mut w = Writer::new(&mut out, 512);
        w.start(&req, &q, rcode::BADVERS & 0xF, true);
        let c = CookieOut {
            client: [1; 8],
            server: [2; 16],
        };
        put_opt(
            &mut w,
            &q,
            1400,
            rcode::BADVERS,
            OptOptions::cookie(Some(&c)),
        );
        let n = w.finish();
        let r = Reply::parse(&out[..n]);
        let opt = r.opt.as_ref().unwrap();
        assert_eq!((opt.owner.as_str(), opt.class), (".", 1400));
        assert_eq!(opt.ttl, 0x0100_8000, "ext rcode 1, version 0, DO");
        assert_eq!(opt.rdata.len(), COOKIE_OPT_LEN);
        assert_eq!(r.rcode(), rcode::BADVERS);
        let with_cookie = OptOptions::cookie(Some(&c));
        assert_eq!(opt_room(&q, &with_cookie), OPT_LEN + COOKIE_OPT_LEN);
        assert_eq!(opt_room(&Q::new("a.", 1).parsed().1, &with_cookie), 0);
    }

    /// Writes the `rtype` RRset of `owner_name` after the question `qname` at every limit
    /// from nothing to all of it: below the whole RRset nothing is written (and the writer
    /// is as before), from it on all of it.
    fn whole_or_nothing(
        zone: &zones::Zone,
        qname: &str,
        owner_name: &str,
        rtype: u16,
        owner: Owner<'_>,
    ) {
        let wire = zones::Name::parse(owner_name, None).unwrap();
        let node = zone.find(wire.as_wire()).expect("node");
        let s = *zone.rrset(node, rtype).expect("rrset");
        let (req, q) = Q::new(qname, rtype).parsed();
        let mut out = vec![0u8; 65535];
        // The size of the whole RRset after the question.
        let full = {
            let mut w = Writer::new(&mut out, 65535);
            w.start(&req, &q, 0, true);
            let before = w.mark().0;
            w.rrset(Section::Answer, zone, &s, owner).unwrap();
            w.mark().0 - before
        };
        let mut fits = 0;
        for extra in 0..full + 3 {
            let mut w = Writer::new(&mut out, 65535);
            w.start(&req, &q, 0, true);
            let m = w.mark();
            w.set_limit(m.0 + extra);
            match w.rrset(Section::Answer, zone, &s, owner) {
                Ok(()) => {
                    assert!(extra >= full, "{owner_name}: wrote {full} bytes in {extra}");
                    fits += 1;
                    let n = w.finish();
                    let r = Reply::parse(&out[..n]);
                    assert_eq!(r.answer.len(), s.count as usize);
                    assert!(
                        r.answer
                            .iter()
                            .all(|x| x.owner == owner_name && x.rtype == rtype)
                    );
                }
                Err(Full) => {
                    assert!(
                        extra < full,
                        "{owner_name}: refused with {extra} for {full}"
                    );
                    assert_eq!(w.mark(), m, "{owner_name}: a partial RRset at {extra}");
                    let n = w.finish();
                    let r = Reply::parse(&out[..n]);
                    assert!(r.is_empty());
                }
            }
        }
        assert_eq!(fits, 3);
    }

    #[test]
    fn an_rrset_is_written_whole_or_not_at_all() {
        let zone = load_zone("example.com.", &example_text());
        let big = "big.example.com.";
        let apex = b"\x07example\x03com\x00";
        // The stored form copied as is, owned by the question …
        whole_or_nothing(&zone, big, big, t::TXT, Owner::Qname);
        // … with the owner written out …
        whole_or_nothing(
            &zone,
            "x.",
            big,
            t::TXT,
            Owner::Name(b"\x03big\x07example\x03com\x00"),
        );
        // … names in RDATA compressed one by one, the owner written out or already in the
        // packet (the question's suffix `example.com.` at offset 16).
        whole_or_nothing(&zone, "x.", "example.com.", t::NS, Owner::Name(apex));
        whole_or_nothing(
            &zone,
            "www.example.com.",
            "example.com.",
            t::NS,
            Owner::At(16),
        );
        whole_or_nothing(
            &zone,
            "www.example.com.",
            "sub.example.com.",
            t::NS,
            Owner::Name(b"\x03sub\x07example\x03com\x00"),
        );
    }

    #[test]
    fn rrset_ttl_rewrites_every_ttl_and_rr_rolls_back_when_full() {
        let zone = load_zone("example.com.", &example_text());
        let node = zone.find(b"\x03big\x07example\x03com\x00").unwrap();
        let s = *zone.rrset(node, t::TXT).unwrap();
        let (req, q) = Q::new("big.example.com.", t::TXT).parsed();
        let mut out = vec![0u8; 65535];
        let mut w = Writer::new(&mut out, 65535);
        w.start(&req, &q, 0, true);
        w.rrset_ttl(Section::Authority, &zone, &s, Owner::Qname, 42)
            .unwrap();
        let m = w.mark();
        // A synthesised record that does not fit leaves nothing behind.
        w.set_limit(m.0 + 10);
        assert_eq!(
            w.rr(
                Section::Answer,
                Owner::Name(b"\x01x\x07example\x03com\x00"),
                t::A,
                5,
                &[1, 2, 3, 4]
            ),
            Err(Full)
        );
        assert_eq!(w.mark(), m);
        let n = w.finish();
        let r = Reply::parse(&out[..n]);
        assert_eq!(r.authority.len(), 12);
        assert!(r.authority.iter().all(|x| x.ttl == 42), "{:?}", r.authority);
        assert!(r.answer.is_empty());
    }
}
