//! DNS messages at the byte level: a query builder with full control (mixed case, any
//! EDNS version, flags and options, any opcode and class) and a raw reader for the header,
//! question and OPT of a response — what a compliance test must see exactly.

use std::time::Duration;

/// Header flag bits (the second 16-bit word).
pub mod flag {
    /// Response.
    pub const QR: u16 = 0x8000;
    /// Authoritative answer.
    pub const AA: u16 = 0x0400;
    /// Truncated.
    pub const TC: u16 = 0x0200;
    /// Recursion desired.
    pub const RD: u16 = 0x0100;
    /// Recursion available.
    pub const RA: u16 = 0x0080;
    /// The reserved (must be zero) bit.
    pub const Z: u16 = 0x0040;
    /// Authentic data.
    pub const AD: u16 = 0x0020;
    /// Checking disabled.
    pub const CD: u16 = 0x0010;
}

/// Response codes used by the tests (extended ones include the OPT's upper bits).
pub mod rcode {
    /// No error.
    pub const NOERROR: u16 = 0;
    /// Format error.
    pub const FORMERR: u16 = 1;
    /// Server failure.
    pub const SERVFAIL: u16 = 2;
    /// Name error.
    pub const NXDOMAIN: u16 = 3;
    /// Not implemented.
    pub const NOTIMP: u16 = 4;
    /// Refused.
    pub const REFUSED: u16 = 5;
    /// Name exists when it should not.
    pub const YXDOMAIN: u16 = 6;
    /// Not authoritative.
    pub const NOTAUTH: u16 = 9;
    /// Bad EDNS version.
    pub const BADVERS: u16 = 16;
}

/// Response code names by value (RFC 6895 §2.3): 16 is BADVERS in an OPT (BADSIG in a TSIG),
/// 23 BADCOOKIE.
pub const RCODE_NAMES: [&str; 24] = [
    "NOERROR",
    "FORMERR",
    "SERVFAIL",
    "NXDOMAIN",
    "NOTIMP",
    "REFUSED",
    "YXDOMAIN",
    "YXRRSET",
    "NXRRSET",
    "NOTAUTH",
    "NOTZONE",
    "DSOTYPENI",
    "RCODE12",
    "RCODE13",
    "RCODE14",
    "RCODE15",
    "BADVERS",
    "BADKEY",
    "BADTIME",
    "BADMODE",
    "BADNAME",
    "BADALG",
    "BADTRUNC",
    "BADCOOKIE",
];

/// The name of a response code (`RCODE42` for unnamed ones).
pub fn rcode_name(rc: u16) -> String {
    RCODE_NAMES
        .get(rc as usize)
        .map_or_else(|| format!("RCODE{rc}"), |n| n.to_string())
}

/// The mnemonic of a record type (`TYPE1000` for unknown ones).
pub fn type_name(t: u16) -> String {
    match hickory_proto::rr::RecordType::from(t) {
        hickory_proto::rr::RecordType::Unknown(_) => format!("TYPE{t}"),
        known => known.to_string(),
    }
}

/// Record types by number, for building queries.
pub mod qtype {
    /// IPv4 address.
    pub const A: u16 = 1;
    /// Name server.
    pub const NS: u16 = 2;
    /// Alias.
    pub const CNAME: u16 = 5;
    /// Start of authority.
    pub const SOA: u16 = 6;
    /// Domain name pointer.
    pub const PTR: u16 = 12;
    /// Mail exchanger.
    pub const MX: u16 = 15;
    /// Text.
    pub const TXT: u16 = 16;
    /// IPv6 address.
    pub const AAAA: u16 = 28;
    /// Responsible person.
    pub const RP: u16 = 17;
    /// Service locator.
    pub const SRV: u16 = 33;
    /// Naming authority pointer.
    pub const NAPTR: u16 = 35;
    /// Key exchanger.
    pub const KX: u16 = 36;
    /// Subtree alias.
    pub const DNAME: u16 = 39;
    /// EDNS pseudo-record.
    pub const OPT: u16 = 41;
    /// Delegation signer.
    pub const DS: u16 = 43;
    /// DNSSEC signature.
    pub const RRSIG: u16 = 46;
    /// DNS key.
    pub const DNSKEY: u16 = 48;
    /// Certification authority authorisation.
    pub const CAA: u16 = 257;
    /// Incremental zone transfer.
    pub const IXFR: u16 = 251;
    /// Zone transfer.
    pub const AXFR: u16 = 252;
    /// Any type.
    pub const ANY: u16 = 255;
}

/// How to build and send a query. `Default` is a plain UDP query without EDNS, RD clear.
#[derive(Debug, Clone)]
pub struct QueryOpts {
    /// EDNS UDP payload size; `None` sends no OPT.
    pub edns: Option<u16>,
    /// The DO bit (only with EDNS).
    pub do_bit: bool,
    /// EDNS version.
    pub edns_version: u8,
    /// Further EDNS flag bits ORed in beside DO (e.g. 0x4000, an unassigned one).
    pub edns_flags: u16,
    /// EDNS options (code, data), in order.
    pub options: Vec<(u16, Vec<u8>)>,
    /// A COOKIE option's data (8 octets of client cookie, maybe a server cookie).
    pub cookie: Option<Vec<u8>>,
    /// Over TCP instead of UDP.
    pub tcp: bool,
    /// Recursion desired.
    pub rd: bool,
    /// Further header flag bits ORed in (AD, CD, Z).
    pub flags: u16,
    /// The opcode.
    pub opcode: u8,
    /// The question class.
    pub qclass: u16,
    /// How long to wait for the reply.
    pub timeout: Duration,
}

impl Default for QueryOpts {
    fn default() -> Self {
        QueryOpts {
            edns: None,
            do_bit: false,
            edns_version: 0,
            edns_flags: 0,
            options: Vec::new(),
            cookie: None,
            tcp: false,
            rd: false,
            flags: 0,
            opcode: 0,
            qclass: 1,
            timeout: Duration::from_secs(2),
        }
    }
}

impl QueryOpts {
    /// A plain query over UDP without EDNS.
    pub fn udp() -> Self {
        Self::default()
    }

    /// A query over UDP with EDNS(0) and this payload size.
    pub fn edns(size: u16) -> Self {
        QueryOpts {
            edns: Some(size),
            ..Self::default()
        }
    }

    /// The same with RD set: a client asking directly (a stub, dig, a flood tool), where an
    /// iterating resolver clears it.
    pub fn with_rd(mut self) -> Self {
        self.rd = true;
        self
    }

    /// The same, sent over TCP.
    pub fn over_tcp(mut self) -> Self {
        self.tcp = true;
        self
    }

    /// The same with DO set (and EDNS at 1232 if there was none).
    pub fn with_do(mut self) -> Self {
        self.edns.get_or_insert(1232);
        self.do_bit = true;
        self
    }
}

/// `name` (presentation format; the trailing dot is optional; `\.` and `\DDD` escapes)
/// in wire format, keeping the case of every letter. Panics on an invalid name.
pub fn name_to_wire(name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + 2);
    if name == "." || name.is_empty() {
        out.push(0);
        return out;
    }
    let bytes = name.as_bytes();
    let mut label: Vec<u8> = Vec::new();
    let mut i = 0;
    let mut ended_with_dot = false;
    while i < bytes.len() {
        ended_with_dot = false;
        match bytes[i] {
            b'\\' => {
                if i + 3 < bytes.len() && bytes[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
                    let s = std::str::from_utf8(&bytes[i + 1..i + 4]).expect("digits");
                    label.push(s.parse::<u8>().expect("\\DDD escape below 256"));
                    i += 4;
                } else {
                    label.push(*bytes.get(i + 1).expect("escape at the end of a name"));
                    i += 2;
                }
                continue;
            }
            b'.' => {
                assert!(!label.is_empty(), "empty label in {name:?}");
                assert!(label.len() <= 63, "label longer than 63 octets in {name:?}");
                out.push(label.len() as u8);
                out.append(&mut label);
                ended_with_dot = true;
            }
            c => label.push(c),
        }
        i += 1;
    }
    if !ended_with_dot {
        assert!(label.len() <= 63, "label longer than 63 octets in {name:?}");
        out.push(label.len() as u8);
        out.append(&mut label);
    }
    out.push(0);
    assert!(out.len() <= 255, "name longer than 255 octets: {name:?}");
    out
}

/// The OPT record for `opts` (empty when it has no EDNS).
pub fn opt_record(opts: &QueryOpts) -> Vec<u8> {
    let Some(size) = opts.edns else {
        return Vec::new();
    };
    let mut rdata = Vec::new();
    for (code, data) in &opts.options {
        rdata.extend_from_slice(&code.to_be_bytes());
        rdata.extend_from_slice(&(data.len() as u16).to_be_bytes());
        rdata.extend_from_slice(data);
    }
    if let Some(c) = &opts.cookie {
        rdata.extend_from_slice(&10u16.to_be_bytes());
        rdata.extend_from_slice(&(c.len() as u16).to_be_bytes());
        rdata.extend_from_slice(c);
    }
    let flags = opts.edns_flags | if opts.do_bit { 0x8000 } else { 0 };
    let mut o = vec![0, 0, 41];
    o.extend_from_slice(&size.to_be_bytes());
    o.push(0); // extended rcode
    o.push(opts.edns_version);
    o.extend_from_slice(&flags.to_be_bytes());
    o.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    o.extend_from_slice(&rdata);
    o
}

/// A query message: header with `id`, one question (`name` in its exact case), and the
/// OPT record of `opts`.
pub fn build_query(id: u16, name: &str, qtype: u16, opts: &QueryOpts) -> Vec<u8> {
    let mut m = Vec::with_capacity(64);
    m.extend_from_slice(&id.to_be_bytes());
    let mut flags = ((opts.opcode as u16 & 0xF) << 11) | opts.flags;
    if opts.rd {
        flags |= flag::RD;
    }
    m.extend_from_slice(&flags.to_be_bytes());
    let ar: u16 = if opts.edns.is_some() { 1 } else { 0 };
    for c in [1u16, 0, 0, ar] {
        m.extend_from_slice(&c.to_be_bytes());
    }
    m.extend_from_slice(&name_to_wire(name));
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&opts.qclass.to_be_bytes());
    m.extend_from_slice(&opt_record(opts));
    m
}

/// What a response's OPT record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawOpt {
    /// The owner is the root name (it must be).
    pub owner_root: bool,
    /// The responder's UDP payload size (the CLASS field).
    pub udp_size: u16,
    /// The upper eight bits of the rcode.
    pub ext_rcode: u8,
    /// EDNS version.
    pub version: u8,
    /// The flags word (DO is 0x8000).
    pub flags: u16,
    /// Options (code, data) in order.
    pub options: Vec<(u16, Vec<u8>)>,
}

/// A message read at the byte level: header, question bytes, OPT.
#[derive(Debug, Clone)]
pub struct RawMsg {
    /// Message ID.
    pub id: u16,
    /// The flags word.
    pub flags: u16,
    /// QDCOUNT, ANCOUNT, NSCOUNT, ARCOUNT.
    pub counts: [u16; 4],
    /// The question section exactly as sent (names uncompressed).
    pub question: Vec<u8>,
    /// The OPT record, if one.
    pub opt: Option<RawOpt>,
    /// How many OPT records the message holds.
    pub opt_count: usize,
    /// Length of the message in octets.
    pub len: usize,
}

fn u16_at(b: &[u8], p: usize) -> Result<u16, String> {
    match b.get(p..p + 2) {
        Some(x) => Ok(u16::from_be_bytes([x[0], x[1]])),
        None => Err(format!("truncated at offset {p}")),
    }
}

/// Skips a (possibly compressed) name at `p`; returns the offset after it.
fn skip_name(b: &[u8], mut p: usize) -> Result<usize, String> {
    for _ in 0..128 {
        let l = *b
            .get(p)
            .ok_or_else(|| format!("name runs past the end at {p}"))? as usize;
        match l & 0xC0 {
            0xC0 => {
                b.get(p + 1).ok_or("pointer runs past the end")?;
                return Ok(p + 2);
            }
            0 if l == 0 => return Ok(p + 1),
            0 => p += 1 + l,
            _ => return Err(format!("bad label type {l:#x} at {p}")),
        }
    }
    Err("name with more than 128 labels".into())
}

impl RawMsg {
    /// Reads the header, the question and every record's type, finding the OPT.
    pub fn parse(b: &[u8]) -> Result<RawMsg, String> {
        if b.len() < 12 {
            return Err(format!("{} octets: shorter than a header", b.len()));
        }
        let counts = [u16_at(b, 4)?, u16_at(b, 6)?, u16_at(b, 8)?, u16_at(b, 10)?];
        let mut p = 12;
        for _ in 0..counts[0] {
            p = skip_name(b, p)? + 4;
            if p > b.len() {
                return Err("question runs past the end".into());
            }
        }
        let question = b[12..p].to_vec();
        let mut opt = None;
        let mut opt_count = 0;
        let rrs = counts[1] as usize + counts[2] as usize + counts[3] as usize;
        for i in 0..rrs {
            let start = p;
            p = skip_name(b, p)?;
            let rtype = u16_at(b, p)?;
            let class = u16_at(b, p + 2)?;
            let ttl = u16_at(b, p + 4)? as u32 * 65536 + u16_at(b, p + 6)? as u32;
            let rdlen = u16_at(b, p + 8)? as usize;
            let rd = p + 10;
            if rd + rdlen > b.len() {
                return Err(format!("record {i} runs past the end"));
            }
            if rtype == 41 {
                opt_count += 1;
                let mut options = Vec::new();
                let mut q = rd;
                while q < rd + rdlen {
                    let code = u16_at(b, q)?;
                    let len = u16_at(b, q + 2)? as usize;
                    let data = b
                        .get(q + 4..q + 4 + len)
                        .filter(|_| q + 4 + len <= rd + rdlen)
                        .ok_or("EDNS option runs past the OPT")?;
                    options.push((code, data.to_vec()));
                    q += 4 + len;
                }
                opt.get_or_insert(RawOpt {
                    owner_root: p == start + 1 && b[start] == 0,
                    udp_size: class,
                    ext_rcode: (ttl >> 24) as u8,
                    version: (ttl >> 16) as u8,
                    flags: ttl as u16,
                    options,
                });
            }
            p = rd + rdlen;
        }
        Ok(RawMsg {
            id: u16_at(b, 0)?,
            flags: u16_at(b, 2)?,
            counts,
            question,
            opt,
            opt_count,
            len: b.len(),
        })
    }

    /// The full rcode: the header's four bits and the OPT's upper eight.
    pub fn rcode(&self) -> u16 {
        (self.flags & 0xF) | self.opt.as_ref().map_or(0, |o| (o.ext_rcode as u16) << 4)
    }

    /// The opcode.
    pub fn opcode(&self) -> u8 {
        ((self.flags >> 11) & 0xF) as u8
    }

    /// True when all bits of `f` are set in the flags word.
    pub fn has(&self, f: u16) -> bool {
        self.flags & f == f
    }
}

/// The query's question section (what a response must echo byte for byte).
pub fn question_of(query: &[u8]) -> Vec<u8> {
    RawMsg::parse(query).map(|m| m.question).unwrap_or_default()
}

/// The 16 bytes written as 32 hex digits in `hex` (a cookie secret).
pub fn hex16(hex: &str) -> [u8; 16] {
    std::array::from_fn(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
}

/// An RFC 9018 server cookie for `client` at `ip` made at `ts` (Unix seconds) under `key`.
pub fn server_cookie(key: &[u8; 16], client: &[u8], ip: std::net::IpAddr, ts: u32) -> Vec<u8> {
    use std::hash::Hasher;
    let mut head = vec![1u8, 0, 0, 0];
    head.extend_from_slice(&ts.to_be_bytes());
    let mut h = siphasher::sip::SipHasher24::new_with_key(key);
    h.write(client);
    h.write(&head);
    match ip {
        std::net::IpAddr::V4(a) => h.write(&a.octets()),
        std::net::IpAddr::V6(a) => h.write(&a.octets()),
    }
    head.extend_from_slice(&h.finish().to_le_bytes());
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_case_and_escapes() {
        assert_eq!(name_to_wire("."), vec![0]);
        assert_eq!(name_to_wire("WwW.Ex"), b"\x03WwW\x02Ex\x00".to_vec());
        assert_eq!(name_to_wire("a\\.b.c."), b"\x03a.b\x01c\x00".to_vec());
        assert_eq!(name_to_wire("\\065."), b"\x01A\x00".to_vec());
    }

    #[test]
    fn query_round_trip_through_the_raw_reader() {
        let o = QueryOpts {
            edns: Some(1232),
            do_bit: true,
            edns_version: 1,
            edns_flags: 0x0040,
            options: vec![(100, vec![1, 2])],
            rd: true,
            flags: flag::CD,
            ..QueryOpts::default()
        };
        let q = build_query(0xBEEF, "Www.Example.COM.", qtype::SOA, &o);
        let m = RawMsg::parse(&q).unwrap();
        assert_eq!(m.id, 0xBEEF);
        assert!(m.has(flag::RD | flag::CD));
        assert_eq!(m.counts, [1, 0, 0, 1]);
        assert_eq!(&m.question[..4], b"\x03Www");
        let opt = m.opt.unwrap();
        assert!(opt.owner_root);
        assert_eq!((opt.udp_size, opt.version, opt.flags), (1232, 1, 0x8040));
        assert_eq!(opt.options, vec![(100, vec![1, 2])]);
        assert_eq!(question_of(&q), m.question);
    }

    #[test]
    fn raw_reader_refuses_what_runs_past_the_end() {
        let q = build_query(1, "a.b.", qtype::A, &QueryOpts::edns(512));
        for cut in 0..q.len() {
            assert!(RawMsg::parse(&q[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(rcode_name(16), "BADVERS");
        assert_eq!(type_name(1000), "TYPE1000");
    }
}
