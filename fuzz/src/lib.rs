//! Helpers shared by the fuzz targets: the zone fixture the pipeline is fuzzed against, the
//! invariants every parsed query must satisfy, the normaliser of the differential target and
//! the HTTP view of a request head.

pub mod differential;
pub mod fixture;
pub mod http_view;

use dnsd::query::wire::{ParseError, Query};

/// Checks what `parse_query` promises about a query it parsed from `req` (or partly parsed,
/// when the error says the question was read).
pub fn check_query(req: &[u8], q: &Query, r: Result<(), ParseError>) {
    match r {
        Err(ParseError::Drop) => {
            assert!(req.len() < 12 || req[2] & 0x80 != 0, "dropped a query");
            return;
        }
        Err(ParseError::NotImp { .. }) => {
            assert!(!matches!(q.opcode(), 0 | 4), "NOTIMP for QUERY/NOTIFY");
            return;
        }
        Err(ParseError::FormErr {
            question: false, ..
        }) => return,
        Err(ParseError::FormErr { question: true, .. }) | Ok(()) => {}
    }
    // The question was read: a well-formed, lower-case, uncompressed name.
    let name = q.qname();
    assert!(!name.is_empty() && name.len() <= 255, "qname length");
    assert_eq!(*name.last().unwrap(), 0, "qname ends at the root");
    let mut p = 0;
    let mut labels = Vec::new();
    while name[p] != 0 {
        let l = name[p] as usize;
        assert!(l <= 63, "label length");
        labels.push(p as u8);
        p += 1 + l;
        assert!(p < name.len(), "label past the name");
    }
    assert_eq!(p + 1, name.len(), "bytes after the root label");
    assert_eq!(q.label_offs(), &labels[..], "label offsets");
    assert!(
        !name.iter().any(u8::is_ascii_uppercase),
        "qname not lower-cased"
    );
    assert_eq!(q.question_end, 12 + name.len() + 4, "question end");
    assert!(q.question_end <= req.len());
    // The question as sent is the name in its original case.
    let sent = &req[12..12 + name.len()];
    assert!(
        sent.eq_ignore_ascii_case(name),
        "qname differs from the wire"
    );
    assert_eq!(
        u16::from_be_bytes([req[q.question_end - 4], req[q.question_end - 3]]),
        q.qtype
    );
    assert_eq!(
        u16::from_be_bytes([req[q.question_end - 2], req[q.question_end - 1]]),
        q.qclass
    );
    if r.is_err() {
        return;
    }
    assert!(matches!(q.opcode(), 0 | 4), "accepted opcode");
    assert_eq!(q.flags & 0x8000, 0, "accepted a response");
    if let Some(e) = q.edns {
        assert!(e.udp_size >= 512);
        if let Some((client, server)) = e.cookie(req) {
            assert_eq!(client.len(), 8);
            assert!(server.is_empty() || (8..=32).contains(&server.len()));
        }
    }
    if let Some(t) = q.tsig_off {
        assert!(t >= q.question_end && t < req.len(), "TSIG offset");
    }
}

/// The fields of a query that callers read, for comparing two parses of the same bytes.
pub fn query_fields(q: &Query, r: Result<(), ParseError>) -> String {
    let question = matches!(r, Ok(()) | Err(ParseError::FormErr { question: true, .. }));
    if r == Err(ParseError::Drop) {
        return format!("{r:?}"); // nothing of the query is used
    }
    let mut s = format!("{r:?} id={} flags={:#x}", q.id, q.flags);
    if question {
        s += &format!(
            " qname={:?} offs={:?} qtype={} qclass={} end={}",
            q.qname(),
            q.label_offs(),
            q.qtype,
            q.qclass,
            q.question_end
        );
    }
    if r.is_ok() {
        s += &format!(" edns={:?} tsig={:?} ns={}", q.edns, q.tsig_off, q.nscount);
    }
    s
}

/// Reads a name at `p` of `msg`, following pointers (strictly backwards, as compression
/// must point to an earlier name); returns the offset past it and its uncompressed length.
fn read_name(msg: &[u8], mut p: usize) -> Result<(usize, usize), String> {
    let mut end = None;
    let mut len = 1;
    let mut limit = p;
    loop {
        let l = *msg.get(p).ok_or("name runs past the end")? as usize;
        match l & 0xC0 {
            0xC0 => {
                let ptr = ((l & 0x3F) << 8) | *msg.get(p + 1).ok_or("cut pointer")? as usize;
                if ptr >= limit {
                    return Err(format!("pointer at {p} to {ptr} does not point back"));
                }
                end.get_or_insert(p + 2);
                limit = ptr;
                p = ptr;
            }
            0 if l == 0 => return Ok((end.unwrap_or(p + 1), len)),
            0 => {
                len += 1 + l;
                if len > 255 {
                    return Err("name longer than 255".into());
                }
                p += 1 + l;
            }
            _ => return Err(format!("label type {l:#x}")),
        }
    }
}

/// Checks that `msg` is a framed DNS message: every name and record the header counts is
/// there, names decompress, RDATA lengths fit, and nothing follows the last record.
pub fn check_framing(msg: &[u8]) -> Result<(), String> {
    if msg.len() < 12 {
        return Err("shorter than a header".into());
    }
    let c = |o: usize| u16::from_be_bytes([msg[o], msg[o + 1]]) as usize;
    let (qd, rr) = (c(4), c(6) + c(8) + c(10));
    let mut p = 12;
    for _ in 0..qd {
        p = read_name(msg, p)?.0 + 4;
    }
    for _ in 0..rr {
        p = read_name(msg, p)?.0;
        if p + 10 > msg.len() {
            return Err("record header past the end".into());
        }
        p += 10 + c(p + 8);
    }
    match p.cmp(&msg.len()) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Greater => Err("records past the end".into()),
        std::cmp::Ordering::Less => Err(format!("{} bytes after the last record", msg.len() - p)),
    }
}

/// True when TOML `text` has a key that names a file to read (`file`, `files`, `cert`,
/// `key`): config fuzzers skip those, so that no input makes them read `/dev/zero` or
/// wait on a FIFO. Text that is not TOML names nothing (the parsers refuse it first).
pub fn names_files(text: &str) -> bool {
    fn walk(v: &toml::Value) -> bool {
        match v {
            toml::Value::Table(t) => t
                .iter()
                .any(|(k, v)| matches!(k.as_str(), "file" | "files" | "cert" | "key") || walk(v)),
            toml::Value::Array(a) => a.iter().any(walk),
            _ => false,
        }
    }
    match text.parse::<toml::Table>() {
        Ok(t) => t
            .iter()
            .any(|(k, v)| matches!(k.as_str(), "file" | "files" | "cert" | "key") || walk(v)),
        Err(_) => false,
    }
}
