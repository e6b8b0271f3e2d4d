//! The hot-path query parser: header, question and OPT, read without allocating.
//!
//! Only what answering needs is read: the question (its name lower-cased with label
//! offsets, and where it ends so that it can be echoed in its exact case), the EDNS(0)
//! options we act on (payload size, DO, version, COOKIE), and whether a TSIG is present.

use zones::name::{MAX_LABEL_LEN, MAX_NAME_LEN};

/// Header flag bits (second 16-bit word).
pub mod hf {
    /// Response.
    pub const QR: u16 = 0x8000;
    /// Authoritative answer.
    pub const AA: u16 = 0x0400;
    /// Truncated.
    pub const TC: u16 = 0x0200;
    /// Recursion desired.
    pub const RD: u16 = 0x0100;
    /// Checking disabled.
    pub const CD: u16 = 0x0010;
}

/// Opcodes.
pub mod opcode {
    /// Standard query.
    pub const QUERY: u8 = 0;
    /// NOTIFY (RFC 1996).
    pub const NOTIFY: u8 = 4;
}

/// Response codes (the low four bits, and extended ones).
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
    /// Name exists when it should not (DNAME substitution too long).
    pub const YXDOMAIN: u16 = 6;
    /// Not authoritative / not authorized.
    pub const NOTAUTH: u16 = 9;
    /// Bad EDNS version (extended: 16).
    pub const BADVERS: u16 = 16;
    /// Bad cookie (extended: 23).
    pub const BADCOOKIE: u16 = 23;
}

/// EDNS option codes.
pub const OPT_COOKIE: u16 = 10;
/// EDNS option code of edns-tcp-keepalive (RFC 7828).
pub const OPT_TCP_KEEPALIVE: u16 = 11;
/// EDNS option code of Padding (RFC 7830).
pub const OPT_PADDING: u16 = 12;
/// EDNS option code of the Name Server Identifier (RFC 5001).
pub const OPT_NSID: u16 = 3;
/// EDNS option code of Extended DNS Errors (RFC 8914).
pub const OPT_EDE: u16 = 15;
/// EDNS option code of EDNS Client Subnet (RFC 7871).
pub const OPT_ECS: u16 = 8;

/// An EDNS Client Subnet option of a query (RFC 7871 §6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ecs {
    /// 1 (IPv4) or 2 (IPv6).
    pub family: u8,
    /// SOURCE PREFIX-LENGTH.
    pub source: u8,
    /// The address, its bits past `source` zero (4 or 16 octets used).
    pub addr: [u8; 16],
}

impl Ecs {
    /// The client network's address.
    pub fn ip(&self) -> std::net::IpAddr {
        if self.family == 1 {
            std::net::IpAddr::from([self.addr[0], self.addr[1], self.addr[2], self.addr[3]])
        } else {
            std::net::IpAddr::from(self.addr)
        }
    }

    /// Reads an option's data; `None` for one RFC 7871 §7.1.1 calls malformed (FORMERR): an
    /// unknown family, a prefix past the family's length, a SCOPE PREFIX-LENGTH other than 0,
    /// an address longer or shorter than the prefix needs, or bits set past the prefix.
    pub fn parse(d: &[u8]) -> Option<Ecs> {
        if d.len() < 4 {
            return None;
        }
        let family = u16::from_be_bytes([d[0], d[1]]);
        let (source, scope) = (d[2], d[3]);
        let max = match family {
            1 => 32,
            2 => 128,
            _ => return None,
        };
        let a = &d[4..];
        if source > max || scope != 0 || a.len() != (source as usize).div_ceil(8) {
            return None;
        }
        if let Some(&last) = a.last()
            && source % 8 != 0
            && last & (0xff >> (source % 8)) != 0
        {
            return None;
        }
        let mut addr = [0u8; 16];
        addr[..a.len()].copy_from_slice(a);
        Some(Ecs {
            family: family as u8,
            source,
            addr,
        })
    }
}

/// What EDNS(0) said in a query.
#[derive(Debug, Clone, Copy, Default)]
pub struct Edns {
    /// Requestor's UDP payload size (already raised to at least 512).
    pub udp_size: u16,
    /// EDNS version.
    pub version: u8,
    /// DNSSEC OK.
    pub dnssec_ok: bool,
    /// Compact Answers OK (RFC 9824 §5): NXDOMAIN may come with a compact denial.
    pub compact_ok: bool,
    /// Offset of the COOKIE option's data in the request, and its length (0: absent).
    pub cookie_off: u16,
    /// Length of the COOKIE option data (8 for a client cookie alone, 16..=40 with a server cookie).
    pub cookie_len: u8,
    /// The query carried edns-tcp-keepalive (RFC 7828): a TCP client asks our idle timeout.
    pub keepalive: bool,
    /// The query asked for our name server identifier (RFC 5001).
    pub nsid: bool,
    /// The query was padded (RFC 7830): over an encrypted transport, so is the response.
    pub padding: bool,
    /// Its EDNS Client Subnet option (RFC 7871), when well-formed.
    pub ecs: Option<Ecs>,
    /// It carried a malformed EDNS Client Subnet option (FORMERR where ECS is on).
    pub ecs_bad: bool,
}

impl Edns {
    /// The client cookie and server cookie (possibly empty) from the request.
    pub fn cookie<'a>(&self, req: &'a [u8]) -> Option<(&'a [u8], &'a [u8])> {
        if self.cookie_len == 0 {
            return None;
        }
        let o = self.cookie_off as usize;
        let data = &req[o..o + self.cookie_len as usize];
        Some((&data[..8], &data[8..]))
    }
}

/// A parsed query. Fixed size: lives on the stack or in a worker's scratch space.
#[derive(Clone)]
pub struct Query {
    /// Message ID.
    pub id: u16,
    /// Header flags word as received.
    pub flags: u16,
    /// The question name, lower case, wire format.
    pub qname: [u8; MAX_NAME_LEN],
    /// Length of `qname`.
    pub qname_len: u8,
    /// Offset of each label in `qname`, leftmost first.
    pub label_offs: [u8; 128],
    /// Number of labels (root not counted).
    pub labels: u8,
    /// Question type.
    pub qtype: u16,
    /// Question class.
    pub qclass: u16,
    /// Offset just past the question in the request.
    pub question_end: usize,
    /// EDNS(0), when the query had an OPT record.
    pub edns: Option<Edns>,
    /// The query ends with a TSIG record; its offset in the request.
    pub tsig_off: Option<usize>,
    /// NSCOUNT of the request (IXFR carries an SOA there).
    pub nscount: u16,
}

impl Default for Query {
    fn default() -> Self {
        Query {
            id: 0,
            flags: 0,
            qname: [0; MAX_NAME_LEN],
            qname_len: 0,
            label_offs: [0; 128],
            labels: 0,
            qtype: 0,
            qclass: 0,
            question_end: 0,
            edns: None,
            tsig_off: None,
            nscount: 0,
        }
    }
}

impl Query {
    /// The opcode.
    pub fn opcode(&self) -> u8 {
        ((self.flags >> 11) & 0xF) as u8
    }
    /// The lower-case question name.
    pub fn qname(&self) -> &[u8] {
        &self.qname[..self.qname_len as usize]
    }
    /// Label offsets of the question name.
    pub fn label_offs(&self) -> &[u8] {
        &self.label_offs[..self.labels as usize]
    }
    /// True when the query carries EDNS with DO set.
    pub fn dnssec_ok(&self) -> bool {
        self.edns.is_some_and(|e| e.dnssec_ok)
    }
}

/// Why a message was not parsed as a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Not worth answering (shorter than a header, or a response): drop it.
    Drop,
    /// A malformed query: answer FORMERR. `question` tells whether the question was read
    /// (and can be echoed); `edns` whether the OPT was sound (and can be answered with one).
    FormErr {
        /// The question parsed.
        question: bool,
        /// A well-formed OPT was seen.
        edns: bool,
    },
    /// An opcode we do not implement; `edns` when the message had a sound OPT (so that the
    /// NOTIMP answer carries one, RFC 6891 §7).
    NotImp {
        /// A well-formed OPT was seen.
        edns: bool,
    },
}

#[inline]
fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}

/// Parses a query into `q` (reused between calls to avoid re-zeroing).
pub fn parse_query(req: &[u8], q: &mut Query) -> Result<(), ParseError> {
    if req.len() < 12 {
        return Err(ParseError::Drop);
    }
    q.id = u16_at(req, 0);
    q.flags = u16_at(req, 2);
    q.edns = None;
    q.tsig_off = None;
    q.question_end = 12;
    q.qname_len = 0;
    q.labels = 0;
    if q.flags & hf::QR != 0 {
        return Err(ParseError::Drop);
    }
    let qd = u16_at(req, 4);
    let an = u16_at(req, 6);
    let ns = u16_at(req, 8);
    let ar = u16_at(req, 10);
    q.nscount = ns;
    let op = q.opcode();
    if op != opcode::QUERY && op != opcode::NOTIFY {
        // Read on only to learn whether the message carries EDNS.
        let edns = parse_sections(req, q, qd, an, ns, ar, true).is_ok() && q.edns.is_some();
        return Err(ParseError::NotImp { edns });
    }
    parse_sections(req, q, qd, an, ns, ar, false)
}

/// Reads the question and the remaining sections; `lenient` skips the query-only rules.
fn parse_sections(
    req: &[u8],
    q: &mut Query,
    qd: u16,
    an: u16,
    ns: u16,
    ar: u16,
    lenient: bool,
) -> Result<(), ParseError> {
    let op = q.opcode();
    let fe = |question, edns| ParseError::FormErr { question, edns };
    if qd == 0 && !lenient {
        // No question (a query for a server cookie, RFC 7873 §5.4): FORMERR, with OPT when
        // the message carries a sound one (RFC 6891 §6.1.1), as Knot answers it.
        q.question_end = 12;
        let edns = skip_sections(req, q, 12, an, ns, ar).is_some() && q.edns.is_some();
        return Err(fe(false, edns));
    }
    if qd != 1 {
        return Err(fe(false, false));
    }
    // The question name: no compression allowed (nothing precedes it).
    let mut p = 12usize;
    let mut out = 0usize;
    loop {
        let Some(&len) = req.get(p) else {
            return Err(fe(false, false));
        };
        let len = len as usize;
        if len == 0 {
            q.qname[out] = 0;
            out += 1;
            p += 1;
            break;
        }
        if len > MAX_LABEL_LEN || out + 1 + len >= MAX_NAME_LEN || p + 1 + len > req.len() {
            return Err(fe(false, false));
        }
        q.label_offs[q.labels as usize] = out as u8;
        q.labels += 1;
        q.qname[out] = len as u8;
        for (d, &s) in q.qname[out + 1..out + 1 + len]
            .iter_mut()
            .zip(&req[p + 1..p + 1 + len])
        {
            *d = s.to_ascii_lowercase();
        }
        out += 1 + len;
        p += 1 + len;
    }
    if p + 4 > req.len() {
        return Err(fe(false, false));
    }
    q.qname_len = out as u8;
    q.qtype = u16_at(req, p);
    q.qclass = u16_at(req, p + 2);
    p += 4;
    q.question_end = p;
    // Answer and authority must be empty in a query (IXFR and NOTIFY carry an SOA).
    let soa_allowed = (q.qtype == zones::rrtype::t::IXFR || op == opcode::NOTIFY) && ns <= 1;
    let soa_allowed = soa_allowed || (op == opcode::NOTIFY && an <= 1) || lenient;
    if (an != 0 || ns != 0) && !soa_allowed {
        return Err(fe(true, false));
    }
    for _ in 0..(an as usize + ns as usize) {
        p = skip_rr(req, p).ok_or(fe(true, false))?.0;
    }
    let mut saw_opt = false;
    for i in 0..ar {
        let start = p;
        // A record past the end or misplaced: FORMERR without OPT, even after a sound one (as
        // Knot and NSD answer: the message as a whole is not understood).
        let (next, rtype, name_root, rdata_off) = skip_rr(req, p).ok_or(fe(true, false))?;
        match rtype {
            zones::rrtype::t::OPT => {
                if saw_opt || !name_root {
                    return Err(fe(true, false));
                }
                saw_opt = true;
                match parse_opt(req, start, rdata_off, next) {
                    Ok(e) => q.edns = Some(e),
                    // A sound OPT with a malformed COOKIE: FORMERR carrying OPT (RFC 6891
                    // §7, RFC 7873 §5.2.2), the cookie left out.
                    Err(Some(e)) => {
                        q.edns = Some(e);
                        return Err(fe(true, true));
                    }
                    Err(None) => return Err(fe(true, false)),
                }
            }
            zones::rrtype::t::TSIG => {
                // TSIG must be the last record (RFC 8945 §5.1).
                if i != ar - 1 {
                    return Err(fe(true, false));
                }
                q.tsig_off = Some(start);
            }
            _ => {}
        }
        p = next;
    }
    Ok(())
}

/// Reads the records from `p` on (a message without a question) for its OPT only; `None`
/// when they are not sound.
fn skip_sections(req: &[u8], q: &mut Query, mut p: usize, an: u16, ns: u16, ar: u16) -> Option<()> {
    for _ in 0..(an as usize + ns as usize) {
        p = skip_rr(req, p)?.0;
    }
    for _ in 0..ar {
        let (next, rtype, root, rdata_off) = skip_rr(req, p)?;
        if rtype == zones::rrtype::t::OPT {
            if q.edns.is_some() || !root {
                q.edns = None;
                return None;
            }
            q.edns = Some(parse_opt(req, p, rdata_off, next).ok()?);
        }
        p = next;
    }
    Some(())
}

/// Skips one RR at `p`: (next offset, type, owner is the root, RDATA offset).
fn skip_rr(req: &[u8], mut p: usize) -> Option<(usize, u16, bool, usize)> {
    let name_start = p;
    // A name: labels, possibly ending in a compression pointer (pointers are not followed).
    let mut total = 0usize;
    loop {
        let len = *req.get(p)? as usize;
        if len & 0xC0 == 0xC0 {
            req.get(p + 1)?;
            p += 2;
            break;
        }
        if len > MAX_LABEL_LEN {
            return None;
        }
        p += 1 + len;
        total += 1 + len;
        if total > MAX_NAME_LEN {
            return None;
        }
        if len == 0 {
            break;
        }
    }
    let root = p == name_start + 1 && req[name_start] == 0;
    if p + 10 > req.len() {
        return None;
    }
    let rtype = u16_at(req, p);
    let rdlen = u16_at(req, p + 8) as usize;
    let rdata = p + 10;
    if rdata + rdlen > req.len() {
        return None;
    }
    Some((rdata + rdlen, rtype, root, rdata))
}

/// The OPT record at `start`: its EDNS, or an error with the EDNS read so far when only an
/// option's value is malformed (the option list itself sound), without when the list is not.
fn parse_opt(req: &[u8], start: usize, rdata: usize, end: usize) -> Result<Edns, Option<Edns>> {
    // OPT: name(1) type(2) class=udp size(2) ttl=ext rcode(1) version(1) flags(2) rdlen(2).
    let udp = u16_at(req, start + 3);
    let version = req[start + 6];
    let flags = u16_at(req, start + 7);
    let mut e = Edns {
        udp_size: udp.max(512),
        version,
        dnssec_ok: flags & 0x8000 != 0,
        compact_ok: flags & 0x4000 != 0,
        cookie_off: 0,
        cookie_len: 0,
        keepalive: false,
        nsid: false,
        padding: false,
        ecs: None,
        ecs_bad: false,
    };
    let mut p = rdata;
    while p < end {
        if p + 4 > end {
            return Err(None);
        }
        let code = u16_at(req, p);
        let len = u16_at(req, p + 2) as usize;
        if p + 4 + len > end {
            return Err(None);
        }
        if code == OPT_COOKIE {
            // RFC 7873 §5.2.2: 8 (client) or 16..=40 (client + server) octets.
            if e.cookie_len != 0 || !(len == 8 || (16..=40).contains(&len)) {
                e.cookie_off = 0;
                e.cookie_len = 0;
                return Err(Some(e));
            }
            e.cookie_off = (p + 4) as u16;
            e.cookie_len = len as u8;
        } else if code == OPT_TCP_KEEPALIVE {
            // Clients send it empty (RFC 7828 §3.2.1); one carrying anything is not that
            // question and is ignored whole, as Knot and NSD ignore it (unbound answers
            // FORMERR): no keepalive option comes back.
            e.keepalive = len == 0;
        } else if code == OPT_PADDING {
            e.padding = true;
        } else if code == OPT_NSID {
            // Sent empty (RFC 5001 §2.3); whatever it carries, it asks for ours.
            e.nsid = true;
        } else if code == OPT_ECS {
            // Judged by the pipeline: ignored where ECS is off, FORMERR where it is on.
            match Ecs::parse(&req[p + 4..p + 4 + len]) {
                Some(c) if e.ecs.is_none() && !e.ecs_bad => e.ecs = Some(c),
                _ => e.ecs_bad = true,
            }
        }
        p += 4 + len;
    }
    Ok(e)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a query for tests: name in presentation form, type, optional EDNS size.
    pub fn build(name: &str, qtype: u16, edns: Option<u16>) -> Vec<u8> {
        let mut m = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        let n = zones::Name::parse(name, Some(&zones::Name::root())).unwrap();
        m.extend_from_slice(n.as_wire());
        m.extend_from_slice(&qtype.to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes());
        if let Some(sz) = edns {
            m[11] = 1;
            m.extend_from_slice(&[0, 0, 41]);
            m.extend_from_slice(&sz.to_be_bytes());
            m.extend_from_slice(&[0, 0, 0x80, 0, 0, 0]);
        }
        m
    }

    #[test]
    fn parses_question_and_edns() {
        let m = build("WwW.Example.COM.", 1, Some(4096));
        let mut q = Query::default();
        parse_query(&m, &mut q).unwrap();
        assert_eq!(q.qname(), b"\x03www\x07example\x03com\x00");
        assert_eq!(q.label_offs(), &[0, 4, 12]);
        assert_eq!(q.qtype, 1);
        let e = q.edns.unwrap();
        assert_eq!(e.udp_size, 4096);
        assert!(e.dnssec_ok);
        assert_eq!(q.question_end, 12 + 17 + 4);
    }

    #[test]
    fn malformed() {
        let mut q = Query::default();
        assert_eq!(parse_query(&[0; 5], &mut q), Err(ParseError::Drop));
        let mut m = build("a.", 1, None);
        m[2] |= 0x80;
        assert_eq!(parse_query(&m, &mut q), Err(ParseError::Drop));
        let mut m = build("a.", 1, None);
        m[5] = 2; // QDCOUNT 2
        assert!(matches!(
            parse_query(&m, &mut q),
            Err(ParseError::FormErr { .. })
        ));
        let mut m = build("a.", 1, None);
        m[5] = 0;
        assert!(matches!(
            parse_query(&m, &mut q),
            Err(ParseError::FormErr { .. })
        ));
        // Compression pointer in the question.
        let m = vec![0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xC0, 0x0C, 0, 1, 0, 1];
        assert!(matches!(
            parse_query(&m, &mut q),
            Err(ParseError::FormErr { .. })
        ));
        // Truncated question.
        let m = build("abc.", 1, None);
        assert!(parse_query(&m[..m.len() - 2], &mut q).is_err());
        // ARCOUNT larger than the packet.
        let mut m = build("a.", 1, None);
        m[11] = 3;
        assert!(matches!(
            parse_query(&m, &mut q),
            Err(ParseError::FormErr { question: true, .. })
        ));
        // Opcode 5 (UPDATE).
        let mut m = build("a.", 1, None);
        m[2] = 5 << 3;
        assert_eq!(
            parse_query(&m, &mut q),
            Err(ParseError::NotImp { edns: false })
        );
        let mut m = build("a.", 1, Some(1232));
        m[2] = 5 << 3;
        assert_eq!(
            parse_query(&m, &mut q),
            Err(ParseError::NotImp { edns: true })
        );
        // Two OPTs.
        let mut m = build("a.", 1, Some(1232));
        m[11] = 2;
        m.extend_from_slice(&[0, 0, 41, 4, 0, 0, 0, 0, 0, 0, 0]);
        assert!(matches!(
            parse_query(&m, &mut q),
            Err(ParseError::FormErr { edns: false, .. })
        ));
        // Bad cookie length.
        let mut m = build("a.", 1, Some(1232));
        let l = m.len();
        m[l - 1] = 7;
        m.extend_from_slice(&[0, 10, 0, 3, 1, 2, 3]);
        assert!(matches!(
            parse_query(&m, &mut q),
            Err(ParseError::FormErr { .. })
        ));
    }

    #[test]
    fn oversized_name_refused() {
        let mut m = vec![0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        for _ in 0..5 {
            m.push(63);
            m.extend_from_slice(&[b'a'; 63]);
        }
        m.extend_from_slice(&[0, 0, 1, 0, 1]);
        assert!(matches!(
            parse_query(&m, &mut Query::default()),
            Err(ParseError::FormErr { .. })
        ));
    }
}
