//! The differential of our hot-path query parser against hickory-proto's message parser.
//!
//! # What "accept" means
//!
//! Ours accepts when `dnsd::query::wire::parse_query` returns `Ok`. Hickory accepts a *query* when
//! `Message::from_vec` parses the message and the query rules that our parser also applies
//! hold on what hickory read ([`hickory_accepts`]): QR = 0, opcode QUERY or NOTIFY, exactly
//! one question, answer and authority empty except one SOA-carrying record in the authority
//! section of IXFR and NOTIFY (and one answer record in NOTIFY). When both accept, they must
//! agree on the question (name lower-cased, type, class) and on EDNS (present, payload size
//! raised to 512, version, DO).
//!
//! # Disagreements by design
//!
//! Ours reads only what answering needs, so:
//!
//! - **ours rejects, hickory accepts** only for these ([`ours_stricter`]): a compression
//!   pointer in the question name (nothing precedes the question, so a pointer there is
//!   malformed; hickory follows it); an OPT owner written as a pointer (ours wants the literal
//!   root label); a TSIG that is not the last additional record (RFC 8945 §5.1; hickory built
//!   without DNSSEC does not know TSIG); a COOKIE option of a length RFC 7873 §5.2.2 forbids
//!   (hickory does not look); an OPT RDATA that is not made of whole options (RFC 6891 §6.1.2;
//!   hickory drops a cut option header, and checks an option's length against the whole
//!   RDATA rather than what is left of it).
//! - **ours accepts, hickory rejects** only for what ours does not read: owners of the records
//!   after the question (never followed, so a bad pointer there goes unseen), their RDATA
//!   (records are skipped by RDLENGTH, whatever their type; empty RDATA, which hickory calls an
//!   UPDATE prerequisite, included; an OPT or TSIG in the answer or authority section is just a
//!   record there), and the contents of EDNS options other than COOKIE. The target checks this
//!   mechanically ([`normalise`]): it rewrites exactly those parts into neutral forms, and
//!   hickory must then accept the rewritten message with the same question.

use hickory_proto::op::{Message, MessageType, OpCode};

/// What a parse tells about the question and EDNS, for comparing the two parsers.
#[derive(Debug, PartialEq, Eq)]
pub struct Seen {
    /// The question name, lower-case wire format.
    pub qname: Vec<u8>,
    /// Question type.
    pub qtype: u16,
    /// Question class.
    pub qclass: u16,
    /// EDNS: (payload size raised to 512, version, DO).
    pub edns: Option<(u16, u8, bool)>,
}

const IXFR: u16 = 251;
const OPT: u16 = 41;
const TSIG: u16 = 250;
const COOKIE: u16 = 10;
/// A private-use type (RFC 6895) that hickory reads as opaque RDATA.
const NEUTRAL_TYPE: u16 = 0xFF00;
/// A private-use EDNS option code (RFC 6891 §9) that hickory keeps as opaque bytes.
const NEUTRAL_OPTION: u16 = 65001;

/// Hickory's view of `msg` when it accepts it as a query (see the module documentation).
pub fn hickory_accepts(msg: &[u8]) -> Option<Seen> {
    let m = Message::from_vec(msg).ok()?;
    if m.metadata.message_type != MessageType::Query {
        return None;
    }
    let op = m.metadata.op_code;
    if op != OpCode::Query && op != OpCode::Notify {
        return None;
    }
    if m.queries.len() != 1 {
        return None;
    }
    let q = &m.queries[0];
    let qtype = u16::from(q.query_type());
    let (an, ns) = (m.answers.len(), m.authorities.len());
    let soa_allowed =
        ((qtype == IXFR || op == OpCode::Notify) && ns <= 1) || (op == OpCode::Notify && an <= 1);
    if (an != 0 || ns != 0) && !soa_allowed {
        return None;
    }
    let mut qname = Vec::new();
    for l in q.name().iter() {
        qname.push(l.len() as u8);
        qname.extend(l.iter().map(u8::to_ascii_lowercase));
    }
    qname.push(0);
    let edns = m
        .edns
        .as_ref()
        .map(|e| (e.max_payload().max(512), e.version(), e.flags().dnssec_ok));
    Some(Seen {
        qname,
        qtype,
        qclass: u16::from(q.query_class()),
        edns,
    })
}

/// Ours' view of a query it accepted.
pub fn ours_seen(q: &dnsd::query::wire::Query) -> Seen {
    Seen {
        qname: q.qname().to_vec(),
        qtype: q.qtype,
        qclass: q.qclass,
        edns: q.edns.map(|e| (e.udp_size, e.version, e.dnssec_ok)),
    }
}

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(o)?, *b.get(o + 1)?]))
}

/// A name at `p`: (offset past it, it holds a pointer, its bytes up to the pointer).
fn walk_name(b: &[u8], mut p: usize) -> Option<(usize, bool)> {
    loop {
        let l = *b.get(p)? as usize;
        if l & 0xC0 == 0xC0 {
            b.get(p + 1)?;
            return Some((p + 2, true));
        }
        if l & 0xC0 != 0 {
            return None;
        }
        p += 1 + l;
        if l == 0 {
            return Some((p, false));
        }
    }
}

/// One record after the question, as framed on the wire.
struct Rr {
    owner: (usize, usize),
    pointer: bool,
    rtype: u16,
    class_ttl: (usize, usize),
    rdata: (usize, usize),
}

fn walk_rr(b: &[u8], p: usize) -> Option<(Rr, usize)> {
    let (end, pointer) = walk_name(b, p)?;
    let rtype = u16_at(b, end)?;
    let rdlen = u16_at(b, end + 8)? as usize;
    let rd = end + 10;
    if rd + rdlen > b.len() {
        return None;
    }
    Some((
        Rr {
            owner: (p, end),
            pointer,
            rtype,
            class_ttl: (end + 2, end + 8),
            rdata: (rd, rd + rdlen),
        },
        rd + rdlen,
    ))
}

/// The question's end when it is framed (name, type, class), and whether its name holds a
/// pointer.
fn question(b: &[u8]) -> Option<(usize, bool)> {
    let (end, pointer) = walk_name(b, 12)?;
    (end + 4 <= b.len()).then_some((end + 4, pointer))
}

/// `msg` with the parts ours never reads rewritten into forms hickory accepts whatever they
/// held (see the module documentation); `None` when the message is not framed as ours reads it.
pub fn normalise(msg: &[u8]) -> Option<Vec<u8>> {
    let an = u16_at(msg, 6)? as usize;
    let ns = u16_at(msg, 8)? as usize;
    let ar = u16_at(msg, 10)? as usize;
    let (mut p, _) = question(msg)?;
    let mut out = msg[..p].to_vec();
    let neutral = |out: &mut Vec<u8>, rr: &Rr| {
        if rr.pointer {
            out.push(0);
        } else {
            out.extend_from_slice(&msg[rr.owner.0..rr.owner.1]);
        }
        out.extend_from_slice(&NEUTRAL_TYPE.to_be_bytes());
        out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 1, 0]);
    };
    for i in 0..an + ns + ar {
        let (rr, next) = walk_rr(msg, p)?;
        if i >= an + ns && rr.rtype == OPT {
            // Options other than COOKIE are never read: make them opaque.
            out.extend_from_slice(&msg[rr.owner.0..rr.owner.1]);
            out.extend_from_slice(&OPT.to_be_bytes());
            out.extend_from_slice(&msg[rr.class_ttl.0..rr.class_ttl.1]);
            let data = &msg[rr.rdata.0..rr.rdata.1];
            out.extend_from_slice(&(data.len() as u16).to_be_bytes());
            let mut o = 0;
            while o + 4 <= data.len() {
                let code = u16_at(data, o)?;
                let len = u16_at(data, o + 2)? as usize;
                let code = if code == COOKIE { code } else { NEUTRAL_OPTION };
                out.extend_from_slice(&code.to_be_bytes());
                out.extend_from_slice(&data[o + 2..(o + 4 + len).min(data.len())]);
                o += 4 + len;
            }
            if o < data.len() {
                out.extend_from_slice(&data[o..]);
            }
        } else {
            neutral(&mut out, &rr);
        }
        p = next;
    }
    out.extend_from_slice(&msg[p..]);
    Some(out)
}

/// Why ours may reject a message that hickory accepts as a query, if one of the by-design
/// reasons of the module documentation applies.
pub fn ours_stricter(msg: &[u8]) -> Option<&'static str> {
    let (mut p, pointer) = question(msg)?;
    if pointer {
        return Some("compression pointer in the question");
    }
    let an = u16_at(msg, 6)? as usize;
    let ns = u16_at(msg, 8)? as usize;
    let ar = u16_at(msg, 10)? as usize;
    for i in 0..an + ns + ar {
        let (rr, next) = walk_rr(msg, p)?;
        if i >= an + ns {
            if rr.rtype == OPT && rr.pointer {
                return Some("OPT owner written as a pointer");
            }
            if rr.rtype == TSIG && i != an + ns + ar - 1 {
                return Some("TSIG not the last record");
            }
            if rr.rtype == OPT {
                let data = &msg[rr.rdata.0..rr.rdata.1];
                let mut o = 0;
                let mut cookies = 0;
                while o + 4 <= data.len() {
                    let code = u16_at(data, o)?;
                    let len = u16_at(data, o + 2)? as usize;
                    if code == COOKIE {
                        cookies += 1;
                        if !(len == 8 || (16..=40).contains(&len)) || cookies > 1 {
                            return Some("COOKIE option of a forbidden length, or twice");
                        }
                    }
                    o += 4 + len;
                }
                if o != data.len() {
                    return Some("OPT RDATA not made of whole options");
                }
            }
        }
        p = next;
    }
    None
}
