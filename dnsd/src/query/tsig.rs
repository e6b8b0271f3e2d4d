//! TSIG (RFC 8945): keys, signing and verifying messages with HMAC-SHA256 and HMAC-SHA512,
//! and the multi-message chaining of zone transfers (§5.3.1: each MAC covers the prior MAC,
//! the messages since it and the timers).
//!
//! A server verifies a request with [`verify_request`] (key, then MAC, then time, in the
//! order of §5.2) and signs its responses with a [`Signer`] made from the request's MAC; a
//! client signs its request with a [`Signer`] and checks the response stream with a
//! [`Verifier`].

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::{Sha256, Sha512};
use zones::Name;

use crate::query::wire::rcode;

/// The TSIG RR type.
pub const TSIG: u16 = 250;
/// Class ANY, which TSIG RRs carry.
pub const CLASS_ANY: u16 = 255;
/// Fudge we put in the TSIGs we make, seconds.
pub const FUDGE: u16 = 300;

/// TSIG error codes (the Error field, RFC 8945 §4.3).
pub mod error {
    /// The MAC did not verify.
    pub const BADSIG: u16 = 16;
    /// The key or algorithm is unknown.
    pub const BADKEY: u16 = 17;
    /// The time is outside the fudge.
    pub const BADTIME: u16 = 18;
    /// The MAC is truncated below what is allowed.
    pub const BADTRUNC: u16 = 22;
}

/// A MAC algorithm (the config's).
pub use crate::config::transfer::TsigAlgorithm as Algorithm;

impl Algorithm {
    /// The algorithm name in wire form.
    pub fn wire_name(self) -> &'static [u8] {
        match self {
            Algorithm::HmacSha256 => b"\x0bhmac-sha256\x00",
            Algorithm::HmacSha512 => b"\x0bhmac-sha512\x00",
        }
    }

    /// The algorithm whose lower-case wire name is `w`.
    pub fn from_wire(w: &[u8]) -> Option<Algorithm> {
        [Algorithm::HmacSha256, Algorithm::HmacSha512]
            .into_iter()
            .find(|a| a.wire_name() == w)
    }

    /// Length of a full MAC.
    pub fn mac_len(self) -> usize {
        match self {
            Algorithm::HmacSha256 => 32,
            Algorithm::HmacSha512 => 64,
        }
    }
}

/// A shared secret with its name and algorithm.
pub struct Key {
    /// Key name (lower case).
    pub name: Name,
    /// Algorithm.
    pub alg: Algorithm,
    secret: Vec<u8>,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({} {:?})", self.name, self.alg)
    }
}

impl Key {
    /// A key named `name` (presentation form).
    pub fn new(name: &str, alg: Algorithm, secret: Vec<u8>) -> Result<Key, String> {
        let n = Name::parse(name, Some(&Name::root())).map_err(|e| e.to_string())?;
        Ok(Key {
            name: n.to_lowercase(),
            alg,
            secret,
        })
    }

    fn mac(&self) -> MacState {
        match self.alg {
            Algorithm::HmacSha256 => MacState::S256(
                Hmac::<Sha256>::new_from_slice(&self.secret).expect("HMAC takes any key length"),
            ),
            Algorithm::HmacSha512 => MacState::S512(
                Hmac::<Sha512>::new_from_slice(&self.secret).expect("HMAC takes any key length"),
            ),
        }
    }
}

/// The keys a server knows.
#[derive(Debug, Default)]
pub struct KeyStore {
    keys: Vec<Arc<Key>>,
}

impl KeyStore {
    /// A store of `keys`.
    pub fn new(keys: Vec<Arc<Key>>) -> KeyStore {
        KeyStore { keys }
    }

    /// The key with this lower-case wire name.
    pub fn find(&self, name_lower: &[u8]) -> Option<&Arc<Key>> {
        self.keys.iter().find(|k| k.name.as_wire() == name_lower)
    }

    /// The key named `name` (presentation form).
    pub fn by_name(&self, name: &str) -> Option<&Arc<Key>> {
        let n = Name::parse(name, Some(&Name::root())).ok()?.to_lowercase();
        self.find(n.as_wire())
    }
}

enum MacState {
    S256(Hmac<Sha256>),
    S512(Hmac<Sha512>),
}

impl MacState {
    fn update(&mut self, b: &[u8]) {
        match self {
            MacState::S256(m) => m.update(b),
            MacState::S512(m) => m.update(b),
        }
    }
    fn finalize(self) -> Vec<u8> {
        match self {
            MacState::S256(m) => m.finalize().into_bytes().to_vec(),
            MacState::S512(m) => m.finalize().into_bytes().to_vec(),
        }
    }
    /// Constant-time check of a (possibly truncated) MAC.
    fn verify(self, tag: &[u8]) -> bool {
        match self {
            MacState::S256(m) => m.verify_truncated_left(tag).is_ok(),
            MacState::S512(m) => m.verify_truncated_left(tag).is_ok(),
        }
    }
}

/// Seconds since the epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A TSIG RR read from a message.
#[derive(Debug, Clone)]
pub struct TsigRr {
    /// Offset of the RR in the message.
    pub start: usize,
    /// Key name, lower-case wire form.
    pub key_name: Vec<u8>,
    /// Algorithm name, lower-case wire form.
    pub alg: Vec<u8>,
    /// Time signed (seconds since the epoch, 48 bits).
    pub time: u64,
    /// Fudge, seconds.
    pub fudge: u16,
    /// The MAC.
    pub mac: Vec<u8>,
    /// Original message ID.
    pub orig_id: u16,
    /// TSIG error.
    pub error: u16,
    /// Other data.
    pub other: Vec<u8>,
}

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(o)?, *b.get(o + 1)?]))
}

/// Reads the TSIG RR at `start` (the last RR of `msg`); `None` when malformed.
pub fn read(msg: &[u8], start: usize) -> Option<TsigRr> {
    let mut key_name = Vec::with_capacity(64);
    let p = zones::name::read_compressed(msg, start, &mut key_name)?;
    key_name.make_ascii_lowercase();
    if u16_at(msg, p)? != TSIG {
        return None;
    }
    let rdlen = u16_at(msg, p + 8)? as usize;
    let rd = p + 10;
    let end = rd + rdlen;
    if end != msg.len() {
        return None;
    }
    // The algorithm name is never compressed; read it as a plain name within RDATA.
    let mut alg = Vec::with_capacity(32);
    let mut q = zones::name::read_compressed(&msg[..end], rd, &mut alg)?;
    alg.make_ascii_lowercase();
    if q + 10 > end {
        return None;
    }
    let time = msg[q..q + 6].iter().fold(0u64, |a, &b| (a << 8) | b as u64);
    let fudge = u16_at(msg, q + 6)?;
    let mac_len = u16_at(msg, q + 8)? as usize;
    q += 10;
    if q + mac_len + 6 > end {
        return None;
    }
    let mac = msg[q..q + mac_len].to_vec();
    q += mac_len;
    let orig_id = u16_at(msg, q)?;
    let error = u16_at(msg, q + 2)?;
    let olen = u16_at(msg, q + 4)? as usize;
    q += 6;
    if q + olen != end {
        return None;
    }
    Some(TsigRr {
        start,
        key_name,
        alg,
        time,
        fudge,
        mac,
        orig_id,
        error,
        other: msg[q..q + olen].to_vec(),
    })
}

/// Feeds `msg` without its TSIG RR at `tsig_start`: the header with the original ID and
/// ARCOUNT one less, then everything before the TSIG.
fn feed_message(m: &mut MacState, msg: &[u8], tsig_start: usize, orig_id: u16) {
    let mut h = [0u8; 12];
    h.copy_from_slice(&msg[..12]);
    h[0..2].copy_from_slice(&orig_id.to_be_bytes());
    let ar = u16::from_be_bytes([h[10], h[11]]).saturating_sub(1);
    h[10..12].copy_from_slice(&ar.to_be_bytes());
    m.update(&h);
    m.update(&msg[12..tsig_start]);
}

/// Feeds the TSIG variables (§4.3.3): all of them, or the timers alone (§5.3.1).
#[allow(clippy::too_many_arguments)]
fn feed_vars(
    m: &mut MacState,
    full: bool,
    key_name: &[u8],
    alg: &[u8],
    time: u64,
    fudge: u16,
    error: u16,
    other: &[u8],
) {
    if full {
        m.update(key_name);
        m.update(&CLASS_ANY.to_be_bytes());
        m.update(&0u32.to_be_bytes());
        m.update(alg);
    }
    m.update(&time.to_be_bytes()[2..8]);
    m.update(&fudge.to_be_bytes());
    if full {
        m.update(&error.to_be_bytes());
        m.update(&(other.len() as u16).to_be_bytes());
        m.update(other);
    }
}

fn feed_prior(m: &mut MacState, prior: &[u8]) {
    if !prior.is_empty() {
        m.update(&(prior.len() as u16).to_be_bytes());
        m.update(prior);
    }
}

/// A request whose TSIG verified.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The key that signed it.
    pub key: Arc<Key>,
    /// The request's MAC (the response's MAC covers it).
    pub mac: Vec<u8>,
}

/// A request whose TSIG did not verify, and how to answer it (§5.2).
#[derive(Debug, Clone)]
pub struct Failure {
    /// The response code: NOTAUTH, or FORMERR for a malformed TSIG.
    pub rcode: u16,
    /// The TSIG error to report.
    pub error: u16,
    /// The request's TSIG, when it could be read.
    pub rr: Option<Box<TsigRr>>,
    /// For BADTIME: the key, so that the error response is signed.
    pub key: Option<Arc<Key>>,
}

/// What kind of TSIG failure a request had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// A malformed TSIG (FORMERR).
    FormErr,
    /// An unknown key or algorithm.
    BadKey,
    /// A MAC that does not verify.
    BadSig,
    /// A time outside the fudge.
    BadTime,
    /// A truncated MAC too short.
    BadTrunc,
    /// Anything else.
    Other,
}

impl FailureKind {
    /// The kind's name, for logs.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::FormErr => "formerr",
            FailureKind::BadKey => "badkey",
            FailureKind::BadSig => "badsig",
            FailureKind::BadTime => "badtime",
            FailureKind::BadTrunc => "badtrunc",
            FailureKind::Other => "other",
        }
    }
}

impl Failure {
    /// What kind of failure it is.
    pub fn kind(&self) -> FailureKind {
        match (self.rcode, self.error) {
            (rcode::FORMERR, _) => FailureKind::FormErr,
            (_, error::BADKEY) => FailureKind::BadKey,
            (_, error::BADSIG) => FailureKind::BadSig,
            (_, error::BADTIME) => FailureKind::BadTime,
            (_, error::BADTRUNC) => FailureKind::BadTrunc,
            _ => FailureKind::Other,
        }
    }
}

/// Verifies the TSIG at `tsig_start` of a request, at time `now` (key, MAC, then time).
pub fn verify_request(
    keys: &KeyStore,
    msg: &[u8],
    tsig_start: usize,
    now: u64,
) -> Result<Verified, Failure> {
    let fail = |rc, error, rr: Option<TsigRr>, key| Failure {
        rcode: rc,
        error,
        rr: rr.map(Box::new),
        key,
    };
    let Some(rr) = read(msg, tsig_start) else {
        return Err(fail(rcode::FORMERR, 0, None, None));
    };
    let key = match (keys.find(&rr.key_name), Algorithm::from_wire(&rr.alg)) {
        (Some(k), Some(a)) if k.alg == a => k.clone(),
        _ => return Err(fail(rcode::NOTAUTH, error::BADKEY, Some(rr), None)),
    };
    // A MAC of any other length than the algorithm's: BADSIG, unsigned. Truncated MACs
    // (RFC 8945 §5.2.2.1) are refused by local policy, as Knot and NSD refuse them: a
    // shorter MAC is a weaker one, and no client of ours needs it.
    if rr.mac.len() != key.alg.mac_len() {
        return Err(fail(rcode::NOTAUTH, error::BADSIG, Some(rr), None));
    }
    let mut m = key.mac();
    feed_message(&mut m, msg, tsig_start, rr.orig_id);
    feed_vars(
        &mut m,
        true,
        &rr.key_name,
        &rr.alg,
        rr.time,
        rr.fudge,
        rr.error,
        &rr.other,
    );
    if !m.verify(&rr.mac) {
        return Err(fail(rcode::NOTAUTH, error::BADSIG, Some(rr), None));
    }
    if now.abs_diff(rr.time) > rr.fudge as u64 {
        return Err(fail(rcode::NOTAUTH, error::BADTIME, Some(rr), Some(key)));
    }
    Ok(Verified { key, mac: rr.mac })
}

/// Appends a TSIG RR to the message `buf[..len]` (bumping ARCOUNT); returns the new length,
/// or `None` when `buf` has no room.
#[allow(clippy::too_many_arguments)]
fn append_rr(
    buf: &mut [u8],
    len: usize,
    key_name: &[u8],
    alg: &[u8],
    time: u64,
    fudge: u16,
    mac: &[u8],
    error: u16,
    other: &[u8],
) -> Option<usize> {
    let rdlen = alg.len() + 10 + mac.len() + 6 + other.len();
    let need = key_name.len() + 10 + rdlen;
    if len + need > buf.len() {
        return None;
    }
    let orig_id = [buf[0], buf[1]];
    let mut p = len;
    let mut put = |b: &[u8]| {
        buf[p..p + b.len()].copy_from_slice(b);
        p += b.len();
    };
    put(key_name);
    put(&TSIG.to_be_bytes());
    put(&CLASS_ANY.to_be_bytes());
    put(&0u32.to_be_bytes());
    put(&(rdlen as u16).to_be_bytes());
    put(alg);
    put(&time.to_be_bytes()[2..8]);
    put(&fudge.to_be_bytes());
    put(&(mac.len() as u16).to_be_bytes());
    put(mac);
    put(&orig_id);
    put(&error.to_be_bytes());
    put(&(other.len() as u16).to_be_bytes());
    put(other);
    let ar = u16::from_be_bytes([buf[10], buf[11]]) + 1;
    buf[10..12].copy_from_slice(&ar.to_be_bytes());
    Some(p)
}

/// Appends an unsigned TSIG error (BADKEY, BADSIG: MAC size 0, §5.3.2) echoing the
/// request's key and algorithm names; returns the new length.
pub fn append_unsigned_error(buf: &mut [u8], len: usize, rr: &TsigRr, err: u16) -> Option<usize> {
    append_rr(
        buf,
        len,
        &rr.key_name,
        &rr.alg,
        rr.time,
        rr.fudge,
        &[],
        err,
        &[],
    )
}

/// Signs a message, or a stream of them (each MAC chained to the one before).
pub struct Signer {
    key: Arc<Key>,
    prior: Vec<u8>,
    first: bool,
    pending: Option<MacState>,
}

impl Signer {
    /// A signer for a request (nothing before it).
    pub fn request(key: Arc<Key>) -> Signer {
        Signer {
            key,
            prior: Vec::new(),
            first: true,
            pending: None,
        }
    }

    /// A signer for the responses to a verified request.
    pub fn response(v: &Verified) -> Signer {
        Signer {
            key: v.key.clone(),
            prior: v.mac.clone(),
            first: true,
            pending: None,
        }
    }

    /// A signer for a response to a request whose TSIG failed with BADTIME.
    pub fn badtime(key: Arc<Key>, rr: &TsigRr) -> Signer {
        Signer {
            key,
            prior: rr.mac.clone(),
            first: true,
            pending: None,
        }
    }

    /// Leaves a message of a stream unsigned: the next MAC covers it (§5.3.1).
    pub fn skip(&mut self, msg: &[u8]) {
        let (key, prior) = (&self.key, &self.prior);
        self.pending
            .get_or_insert_with(|| {
                let mut m = key.mac();
                feed_prior(&mut m, prior);
                m
            })
            .update(msg);
    }

    /// The key.
    pub fn key(&self) -> &Arc<Key> {
        &self.key
    }

    /// Room a TSIG RR of this signer takes.
    pub fn reserve(&self) -> usize {
        self.key.name.wire_len()
            + 10
            + self.key.alg.wire_name().len()
            + 16
            + 6
            + self.key.alg.mac_len()
            + 6
    }

    /// The MAC of the last message signed (a request's, for checking the response).
    pub fn last_mac(&self) -> &[u8] {
        &self.prior
    }

    /// Signs the message `buf[..len]` at time `now`: appends the TSIG; returns the new
    /// length, or `None` when there is no room.
    pub fn sign(&mut self, buf: &mut [u8], len: usize, now: u64) -> Option<usize> {
        self.sign_with(buf, len, now, 0, &[])
    }

    /// Signs with a TSIG error and other data (BADTIME: the server's time).
    pub fn sign_with(
        &mut self,
        buf: &mut [u8],
        len: usize,
        time: u64,
        err: u16,
        other: &[u8],
    ) -> Option<usize> {
        let mut m = match self.pending.take() {
            Some(m) => m,
            None => {
                let mut m = self.key.mac();
                feed_prior(&mut m, &self.prior);
                m
            }
        };
        m.update(&buf[..len]);
        let alg = self.key.alg.wire_name();
        feed_vars(
            &mut m,
            self.first,
            self.key.name.as_wire(),
            alg,
            time,
            FUDGE,
            err,
            other,
        );
        let mac = m.finalize();
        let n = append_rr(
            buf,
            len,
            self.key.name.as_wire(),
            alg,
            time,
            FUDGE,
            &mac,
            err,
            other,
        )?;
        self.prior = mac;
        self.first = false;
        Some(n)
    }

    /// Signs a message held in a vector (grown as needed) from `start` on.
    pub fn sign_vec(&mut self, v: &mut Vec<u8>, start: usize, now: u64) {
        let len = v.len() - start;
        v.resize(v.len() + self.reserve(), 0);
        let n = self
            .sign(&mut v[start..], len, now)
            .expect("room was reserved");
        v.truncate(start + n);
    }
}

/// Checks the TSIGs of a response stream to a signed request (§5.3.1: up to 99 unsigned
/// messages between signed ones; the first and the last must be signed).
pub struct Verifier {
    key: Arc<Key>,
    prior: Vec<u8>,
    first: bool,
    pending: Option<MacState>,
    unsigned: usize,
}

impl Verifier {
    /// A verifier for the responses to the request `req` signed.
    pub fn new(req: &Signer) -> Verifier {
        Verifier {
            key: req.key.clone(),
            prior: req.prior.clone(),
            first: true,
            pending: None,
            unsigned: 0,
        }
    }

    /// Checks one message; `tsig` is its TSIG RR when it has one. The error says what was
    /// wrong.
    pub fn check(
        &mut self,
        msg: &[u8],
        tsig: Option<&TsigRr>,
        now: u64,
    ) -> Result<(), &'static str> {
        let m = self.pending.get_or_insert_with(|| {
            let mut m = self.key.mac();
            feed_prior(&mut m, &self.prior);
            m
        });
        let Some(rr) = tsig else {
            if self.first {
                return Err("response is not signed");
            }
            self.unsigned += 1;
            if self.unsigned > 99 {
                return Err("more than 99 unsigned messages in a row");
            }
            m.update(msg);
            return Ok(());
        };
        if rr.key_name != self.key.name.as_wire() || rr.alg != self.key.alg.wire_name() {
            return Err("response signed with another key");
        }
        if rr.error != 0 {
            return Err(error_name(rr.error));
        }
        feed_message(m, msg, rr.start, rr.orig_id);
        feed_vars(
            m,
            self.first,
            &rr.key_name,
            &rr.alg,
            rr.time,
            rr.fudge,
            rr.error,
            &rr.other,
        );
        let full = self.key.alg.mac_len();
        if rr.mac.len() > full || rr.mac.len() < (full / 2).max(10) {
            return Err("bad MAC length");
        }
        let m = self.pending.take().expect("set above");
        if !m.verify(&rr.mac) {
            return Err("bad MAC in response");
        }
        if now.abs_diff(rr.time) > rr.fudge as u64 {
            return Err("time outside the fudge");
        }
        self.prior = rr.mac.clone();
        self.first = false;
        self.unsigned = 0;
        Ok(())
    }

    /// True when the last message checked was signed.
    pub fn ends_signed(&self) -> bool {
        !self.first && self.unsigned == 0
    }
}

/// A TSIG error's name.
pub fn error_name(e: u16) -> &'static str {
    match e {
        0 => "NOERROR",
        error::BADSIG => "BADSIG",
        error::BADKEY => "BADKEY",
        error::BADTIME => "BADTIME",
        error::BADTRUNC => "BADTRUNC",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Arc<Key> {
        Arc::new(Key::new("k.example.", Algorithm::HmacSha256, b"secret".to_vec()).unwrap())
    }

    fn msg() -> Vec<u8> {
        crate::query::wire::tests::build("example.com.", 252, None)
    }

    #[test]
    fn sign_then_verify_request_and_stream() {
        let k = key();
        let keys = KeyStore::new(vec![k.clone()]);
        let mut m = msg();
        let mut s = Signer::request(k.clone());
        s.sign_vec(&mut m, 0, now());
        let mut q = crate::query::wire::Query::default();
        crate::query::wire::parse_query(&m, &mut q).unwrap();
        let toff = q.tsig_off.unwrap();
        let v = verify_request(&keys, &m, toff, now()).unwrap();
        assert_eq!(v.mac, s.last_mac());
        // A response stream of three messages, the middle one unsigned.
        let mut rs = Signer::response(&v);
        let mut ver = Verifier::new(&s);
        for i in 0..3 {
            let mut r = msg();
            r[2] |= 0x80;
            if i != 1 {
                rs.sign_vec(&mut r, 0, now());
                let mut q = crate::query::wire::Query::default();
                r[2] &= !0x80;
                crate::query::wire::parse_query(&r, &mut q).unwrap();
                r[2] |= 0x80;
                let rr = read(&r, q.tsig_off.unwrap()).unwrap();
                ver.check(&r, Some(&rr), now()).unwrap();
            } else {
                rs.skip(&r);
                ver.check(&r, None, now()).unwrap();
            }
        }
        assert!(ver.ends_signed());
    }

    #[test]
    fn failures() {
        let k = key();
        let keys = KeyStore::new(vec![k.clone()]);
        let other =
            Arc::new(Key::new("k.example.", Algorithm::HmacSha256, b"nope".to_vec()).unwrap());
        let mut m = msg();
        Signer::request(other).sign_vec(&mut m, 0, now());
        let mut q = crate::query::wire::Query::default();
        crate::query::wire::parse_query(&m, &mut q).unwrap();
        let e = verify_request(&keys, &m, q.tsig_off.unwrap(), now()).unwrap_err();
        assert_eq!((e.rcode, e.error), (rcode::NOTAUTH, error::BADSIG));
        let unknown = Arc::new(Key::new("x.", Algorithm::HmacSha512, b"s".to_vec()).unwrap());
        let mut m = msg();
        Signer::request(unknown).sign_vec(&mut m, 0, now());
        crate::query::wire::parse_query(&m, &mut q).unwrap();
        let e = verify_request(&keys, &m, q.tsig_off.unwrap(), now()).unwrap_err();
        assert_eq!(e.error, error::BADKEY);
        let mut m = msg();
        Signer::request(k.clone()).sign_vec(&mut m, 0, now() - 1000);
        crate::query::wire::parse_query(&m, &mut q).unwrap();
        let e = verify_request(&keys, &m, q.tsig_off.unwrap(), now()).unwrap_err();
        assert_eq!(e.error, error::BADTIME);
        assert!(e.key.is_some());
        // A valid MAC truncated to 16, 10 and 0 octets: BADSIG, unsigned (as Knot and NSD).
        for keep in [16usize, 10, 0] {
            let mut m = msg();
            Signer::request(k.clone()).sign_vec(&mut m, 0, now());
            crate::query::wire::parse_query(&m, &mut q).unwrap();
            let t = q.tsig_off.unwrap();
            let skip_name = |m: &[u8], mut p: usize| {
                while m[p] != 0 {
                    p += 1 + m[p] as usize;
                }
                p + 1
            };
            let rdlen_at = skip_name(&m, t) + 8;
            let mac_len_at = skip_name(&m, rdlen_at + 2) + 8;
            let full = u16::from_be_bytes([m[mac_len_at], m[mac_len_at + 1]]) as usize;
            let cut = full - keep;
            m.drain(mac_len_at + 2 + keep..mac_len_at + 2 + full);
            m[mac_len_at..mac_len_at + 2].copy_from_slice(&(keep as u16).to_be_bytes());
            let rdlen = u16::from_be_bytes([m[rdlen_at], m[rdlen_at + 1]]) as usize - cut;
            m[rdlen_at..rdlen_at + 2].copy_from_slice(&(rdlen as u16).to_be_bytes());
            crate::query::wire::parse_query(&m, &mut q).unwrap();
            let e = verify_request(&keys, &m, q.tsig_off.unwrap(), now()).unwrap_err();
            assert_eq!(
                (e.rcode, e.error),
                (rcode::NOTAUTH, error::BADSIG),
                "{keep}"
            );
            assert!(e.key.is_none(), "unsigned");
        }
    }
}
