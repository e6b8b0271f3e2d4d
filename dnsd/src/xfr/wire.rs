//! Whole transfer messages, read and built: names and RDATA decompressed (the RR-type
//! knowledge comes from `zones`), responses of primaries and NOTIFY answers read, queries
//! built, the SOA serial of a record or a request.

use zones::Zone;
use zones::rrtype::t;

use super::XfrError;
use crate::query::handoff::Ctx;
use crate::query::response::{Owner, Section, Writer};
use crate::query::tsig::{self, Signer};
use crate::query::wire::{Query, hf, opcode, rcode};

/// Reads a possibly compressed name at `pos` into `out` (wire form, case kept); returns
/// its length and the offset just past it in place.
pub fn read_name(msg: &[u8], pos: usize, out: &mut [u8; 255]) -> Option<(usize, usize)> {
    let mut v = Vec::with_capacity(64);
    let next = zones::name::read_compressed(msg, pos, &mut v)?;
    out[..v.len()].copy_from_slice(&v);
    Some((v.len(), next))
}

/// One RR of a message, names decompressed.
#[derive(Debug, Clone, Copy)]
pub struct RrRef<'a> {
    /// Owner, wire form as sent.
    pub owner: &'a [u8],
    /// Type.
    pub rtype: u16,
    /// Class.
    pub class: u16,
    /// TTL.
    pub ttl: u32,
    /// RDATA, uncompressed.
    pub rdata: &'a [u8],
}

/// Scratch space for reading RRs.
pub struct RrBuf {
    owner: [u8; 255],
    rdata: Vec<u8>,
}

impl Default for RrBuf {
    fn default() -> Self {
        RrBuf {
            owner: [0; 255],
            rdata: Vec::with_capacity(512),
        }
    }
}

/// Reads the RR at `pos`; returns it and the offset of the next one. Names in RDATA are
/// decompressed as `zones` describes each type (one description per type).
pub fn read_rr<'b>(msg: &[u8], pos: usize, b: &'b mut RrBuf) -> Option<(RrRef<'b>, usize)> {
    let (olen, p) = read_name(msg, pos, &mut b.owner)?;
    let head = msg.get(p..p + 10)?;
    let rtype = u16::from_be_bytes([head[0], head[1]]);
    let class = u16::from_be_bytes([head[2], head[3]]);
    let ttl = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
    let rdlen = u16::from_be_bytes([head[8], head[9]]) as usize;
    let rd = p + 10;
    let end = rd + rdlen;
    if end > msg.len() {
        return None;
    }
    b.rdata.clear();
    zones::rdata::decompress(rtype, msg, rd, end, &mut b.rdata)?;
    if b.rdata.len() > 65535 {
        return None;
    }
    Some((
        RrRef {
            owner: &b.owner[..olen],
            rtype,
            class,
            ttl,
            rdata: &b.rdata,
        },
        end,
    ))
}

/// A response read: its header fields and TSIG; answer RRs went to the callback.
#[derive(Debug)]
pub struct Response {
    /// Message ID.
    pub id: u16,
    /// Flags word.
    pub flags: u16,
    /// RCODE (low four bits).
    pub rcode: u16,
    /// Answer RRs.
    pub ancount: u16,
    /// The TSIG RR, when the message ends with one.
    pub tsig: Option<tsig::TsigRr>,
    /// Questions (QDCOUNT).
    pub qdcount: u16,
    /// The first question's name (wire, as sent), type and class.
    qname: [u8; 255],
    qname_len: u8,
    qtype: u16,
    qclass: u16,
}

impl Response {
    /// Whether it answers the one question `qname` (wire, any case) `qtype` IN: a response
    /// to another question (forged, or late for an earlier one) is no answer to ours
    /// (RFC 5452 §9.1).
    pub fn echoes(&self, qname: &[u8], qtype: u16) -> bool {
        self.qdcount == 1
            && self.qtype == qtype
            && self.qclass == 1
            && self.qname[..usize::from(self.qname_len)].eq_ignore_ascii_case(qname)
    }
}

/// Reads a response: header, the first question kept ([`Response::echoes`]), each answer RR
/// to `f`, authority skipped, additional scanned for a final TSIG.
pub fn read_response(
    msg: &[u8],
    rr: &mut RrBuf,
    f: &mut dyn FnMut(RrRef<'_>) -> Result<(), XfrError>,
) -> Result<Response, XfrError> {
    use XfrError::{Malformed, Protocol};
    if msg.len() < 12 {
        return Err(Malformed("short message"));
    }
    let u = |o: usize| u16::from_be_bytes([msg[o], msg[o + 1]]);
    let (id, flags, qd, an, ns, ar) = (u(0), u(2), u(4), u(6), u(8), u(10));
    if flags & hf::QR == 0 {
        return Err(Protocol("not a response"));
    }
    let mut p = 12;
    let mut name = [0u8; 255];
    let (mut qname, mut qname_len, mut qtype, mut qclass) = ([0u8; 255], 0, 0, 0);
    for i in 0..qd {
        let (len, next) = read_name(msg, p, &mut name).ok_or(Malformed("bad question"))?;
        p = next + 4;
        if p > msg.len() {
            return Err(Malformed("bad question"));
        }
        if i == 0 {
            (qname, qname_len) = (name, len as u8);
            (qtype, qclass) = (u(next), u(next + 2));
        }
    }
    for _ in 0..an {
        let (r, next) = read_rr(msg, p, rr).ok_or(Malformed("answer record"))?;
        f(r)?;
        p = next;
    }
    for _ in 0..ns {
        p = read_rr(msg, p, rr).ok_or(Malformed("authority record"))?.1;
    }
    let mut tsig_rr = None;
    for i in 0..ar {
        let start = p;
        let (r, next) = read_rr(msg, p, rr).ok_or(Malformed("additional record"))?;
        if r.rtype == tsig::TSIG {
            if i != ar - 1 {
                return Err(Malformed("TSIG is not the last record"));
            }
            tsig_rr = Some(tsig::read(msg, start).ok_or(Malformed("TSIG"))?);
        }
        p = next;
    }
    Ok(Response {
        id,
        flags,
        rcode: flags & 0xF,
        ancount: an,
        tsig: tsig_rr,
        qdcount: qd,
        qname,
        qname_len,
        qtype,
        qclass,
    })
}

/// Builds a query: `qname` (wire) `qtype` IN with the opcode, an SOA in the authority
/// section (IXFR) or the answer section (NOTIFY), signed when `signer` is given.
pub fn build_query(
    id: u16,
    op: u8,
    qname: &[u8],
    qtype: u16,
    soa: Option<(&[u8], u32, &[u8])>,
    soa_in_answer: bool,
    signer: Option<&mut Signer>,
) -> Vec<u8> {
    let mut m = Vec::with_capacity(512);
    let mut flags = (op as u16) << 11;
    if op == opcode::NOTIFY {
        flags |= hf::AA;
    }
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&flags.to_be_bytes());
    let (an, ns) = match (soa.is_some(), soa_in_answer) {
        (false, _) => (0u16, 0u16),
        (true, true) => (1, 0),
        (true, false) => (0, 1),
    };
    for c in [1u16, an, ns, 0] {
        m.extend_from_slice(&c.to_be_bytes());
    }
    m.extend_from_slice(qname);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    if let Some((owner, ttl, rd)) = soa {
        m.extend_from_slice(owner);
        m.extend_from_slice(&t::SOA.to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes());
        m.extend_from_slice(&ttl.to_be_bytes());
        m.extend_from_slice(&(rd.len() as u16).to_be_bytes());
        m.extend_from_slice(rd);
    }
    if let Some(s) = signer {
        s.sign_vec(&mut m, 0, tsig::now());
    }
    m
}

/// The serial of an SOA's RDATA (uncompressed).
pub fn soa_serial(rd: &[u8]) -> Option<u32> {
    let a = zones::name::wire_name_len(rd)?;
    let b = zones::name::wire_name_len(rd.get(a..)?)?;
    let s = rd.get(a + b..a + b + 4)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// The client's serial: the SOA in the authority section of an IXFR request, owned by the
/// zone asked for (RFC 1995 §3; another owner is a malformed request, FORMERR as Knot).
pub fn request_serial(req: &[u8], q: &Query) -> Option<u32> {
    if q.nscount != 1 || req.len() < 12 || req[6..8] != [0, 0] {
        return None;
    }
    let mut b = RrBuf::default();
    let (r, _) = read_rr(req, q.question_end, &mut b)?;
    if r.rtype != t::SOA || !r.owner.eq_ignore_ascii_case(q.qname()) {
        return None;
    }
    soa_serial(r.rdata)
}

/// A reply with `rc`, the question echoed, an optional SOA answer, OPT when the request had
/// one, and a TSIG when `signer` is given.
pub fn reply(
    c: &Ctx<'_>,
    out: &mut [u8],
    rc: u16,
    soa: Option<&Zone>,
    signer: Option<&mut Signer>,
) -> usize {
    let limit = c.limit(out.len());
    // The OPT with its options, and the signature after it, keep their room.
    let sig = signer.as_ref().map_or(0, |s| s.reserve());
    let o = &c.opt;
    let opt = 11
        + o.cookie.map_or(0, |_| 4 + 24)
        + o.nsid.map_or(0, |n| 4 + n.len())
        + o.keepalive.map_or(0, |_| 6)
        + 6;
    let mut w = Writer::new(out, limit.saturating_sub(sig + opt));
    w.start(c.req, c.q, rc & 0xF, true);
    if rc == rcode::NOERROR {
        w.set_flags(hf::AA);
    }
    if let Some(z) = soa
        && let Some((owner, rtype, ttl, rd)) = z.records().next()
    {
        let _ = w.rr(Section::Answer, Owner::Name(owner), rtype, ttl, rd);
    }
    w.set_limit(limit.saturating_sub(sig));
    if c.q.edns.is_some() {
        use crate::query::response::{OptOptions, ede};
        let o = &c.opt;
        let opts = OptOptions {
            cookie: o.cookie.as_ref(),
            keepalive: o.keepalive,
            nsid: o.nsid,
            // A refused transfer or NOTIFY says why (RFC 8914), as NSD says it.
            ede: (rc == rcode::REFUSED).then_some(ede::PROHIBITED),
            pad: o.pad && signer.is_none(),
            ..Default::default()
        };
        crate::query::response::put_opt(&mut w, c.q, c.udp_payload, rc, opts);
    }
    let mut n = w.finish();
    if let Some(s) = signer {
        n = s.sign(&mut out[..limit], n, tsig::now()).unwrap_or(n);
    }
    c.stats.response(rc, false);
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IXFR request's serial is read from the SOA of the zone asked for only: an SOA of
    /// another owner makes the request malformed (FORMERR, as Knot answers).
    #[test]
    fn an_ixfr_serial_is_read_only_from_the_zones_own_soa() {
        let request = |soa_owner: &[u8]| {
            let mut m = vec![0x12, 0x34, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0];
            m.extend_from_slice(b"\x07example\x00");
            m.extend_from_slice(&[0, 251, 0, 1]);
            m.extend_from_slice(soa_owner);
            // SOA IN, TTL 0, RDATA: two root names and five numbers (serial 42).
            m.extend_from_slice(&[0, 6, 0, 1, 0, 0, 0, 0, 0, 22, 0, 0]);
            m.extend_from_slice(&[0, 0, 0, 42, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1]);
            m
        };
        let serial = |req: &[u8]| {
            let mut q = Query::default();
            crate::query::wire::parse_query(req, &mut q).unwrap();
            request_serial(req, &q)
        };
        assert_eq!(serial(&request(b"\x07example\x00")), Some(42));
        assert_eq!(serial(&request(b"\x07EXAMPLE\x00")), Some(42));
        assert_eq!(serial(&request(b"\x05other\x00")), None);
        assert_eq!(serial(&request(b"\x03www\x07example\x00")), None);
    }
}
