//! Just enough DNS for a load generator: build queries (EDNS, cookies) and read replies.

use crate::Rng;

/// One piece of a query-name template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Lit(String),
    /// `{n}`: a number below the template's limit.
    N,
    /// `{rand}`: 12 random letters and digits (a random-subdomain label).
    Rand,
}

/// A query-name template such as `h{n}.bench.test` or `{rand}.victim.test`.
#[derive(Debug, Clone)]
pub struct NameTemplate {
    parts: Vec<Part>,
    n_max: u64,
}

impl NameTemplate {
    /// Parses a template; `{n}` draws from `0..n_max`, `{rand}` is a random label.
    pub fn parse(s: &str, n_max: u64) -> Result<NameTemplate, String> {
        let mut parts = Vec::new();
        let mut rest = s;
        while let Some(i) = rest.find('{') {
            if i > 0 {
                parts.push(Part::Lit(rest[..i].to_string()));
            }
            let end = rest[i..]
                .find('}')
                .ok_or_else(|| format!("unclosed '{{' in {s}"))?;
            match &rest[i + 1..i + end] {
                "n" => parts.push(Part::N),
                "rand" => parts.push(Part::Rand),
                other => return Err(format!("unknown placeholder {{{other}}} in {s}")),
            }
            rest = &rest[i + end + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Lit(rest.to_string()));
        }
        Ok(NameTemplate {
            parts,
            n_max: n_max.max(1),
        })
    }

    /// Writes one name drawn from the template into `out` (cleared first).
    pub fn draw(&self, rng: &mut Rng, out: &mut String) {
        use std::fmt::Write as _;
        const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        out.clear();
        for p in &self.parts {
            match p {
                Part::Lit(l) => out.push_str(l),
                Part::N => {
                    let _ = write!(out, "{}", rng.below(self.n_max));
                }
                Part::Rand => {
                    for _ in 0..12 {
                        out.push(ALNUM[rng.below(ALNUM.len() as u64) as usize] as char);
                    }
                }
            }
        }
    }
}

/// The DNS COOKIE option code (RFC 7873).
pub const OPT_COOKIE: u16 = 10;
/// BADCOOKIE, an extended rcode.
pub const RCODE_BADCOOKIE: u16 = 23;

/// EDNS settings of a query.
#[derive(Debug, Clone, Copy)]
pub struct Edns<'a> {
    /// Our UDP payload size.
    pub udp_size: u16,
    /// The client cookie and the server cookie last seen (possibly empty).
    pub cookie: Option<(&'a [u8; 8], &'a [u8])>,
}

/// Writes a query into `buf` (cleared first); returns the end of the question section, or
/// `None` when the name is not a valid domain name.
pub fn build_query(
    buf: &mut Vec<u8>,
    id: u16,
    qname: &str,
    qtype: u16,
    edns: Option<Edns<'_>>,
) -> Option<usize> {
    buf.clear();
    buf.extend_from_slice(&id.to_be_bytes());
    buf.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, u8::from(edns.is_some())]);
    for label in qname.trim_end_matches('.').split('.') {
        if label.is_empty() {
            if qname.trim_end_matches('.').is_empty() {
                break;
            }
            return None;
        }
        if label.len() > 63 {
            return None;
        }
        buf.push(label.len() as u8);
        buf.extend_from_slice(label.as_bytes());
    }
    buf.push(0);
    buf.extend_from_slice(&qtype.to_be_bytes());
    buf.extend_from_slice(&1u16.to_be_bytes());
    let qend = buf.len();
    if let Some(e) = edns {
        buf.extend_from_slice(&[0, 0, 41]);
        buf.extend_from_slice(&e.udp_size.to_be_bytes());
        buf.extend_from_slice(&[0, 0, 0, 0]);
        match e.cookie {
            Some((client, server)) => {
                let len = 8 + server.len();
                buf.extend_from_slice(&((4 + len) as u16).to_be_bytes());
                buf.extend_from_slice(&OPT_COOKIE.to_be_bytes());
                buf.extend_from_slice(&(len as u16).to_be_bytes());
                buf.extend_from_slice(client);
                buf.extend_from_slice(server);
            }
            None => buf.extend_from_slice(&[0, 0]),
        }
    }
    Some(qend)
}

/// Flags of a reply read from its header alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Message id.
    pub id: u16,
    /// QR: this is a response.
    pub qr: bool,
    /// TC: truncated (an RRL slip, or too long for UDP).
    pub tc: bool,
    /// The 4-bit rcode of the header.
    pub rcode: u8,
    /// Answer records.
    pub ancount: u16,
}

/// Reads the header of a message.
pub fn header(msg: &[u8]) -> Option<Header> {
    if msg.len() < 12 {
        return None;
    }
    Some(Header {
        id: u16::from_be_bytes([msg[0], msg[1]]),
        qr: msg[2] & 0x80 != 0,
        tc: msg[2] & 0x02 != 0,
        rcode: msg[3] & 0x0f,
        ancount: u16::from_be_bytes([msg[6], msg[7]]),
    })
}

/// A reply matched against its query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The header.
    pub header: Header,
    /// The full rcode (with the EDNS extended bits).
    pub rcode: u16,
    /// The server cookie, when the reply carries one.
    pub server_cookie: Option<Vec<u8>>,
}

fn skip_name(msg: &[u8], mut i: usize) -> Option<usize> {
    loop {
        let l = *msg.get(i)? as usize;
        if l == 0 {
            return Some(i + 1);
        }
        if l & 0xc0 == 0xc0 {
            return Some(i + 2);
        }
        if l & 0xc0 != 0 {
            return None;
        }
        i += 1 + l;
    }
}

/// The question section (name, type, class) of a message with one question.
pub fn question_of(msg: &[u8]) -> Option<&[u8]> {
    let end = skip_name(msg, 12)? + 4;
    msg.get(12..end)
}

/// Parses a reply to a query whose question section is `question` (bytes 12.. of the
/// query up to the end of the question); `None` when it is not a reply to that question.
pub fn parse_reply(msg: &[u8], question: &[u8]) -> Option<Reply> {
    let h = header(msg)?;
    if !h.qr || u16::from_be_bytes([msg[4], msg[5]]) != 1 {
        return None;
    }
    let q = msg.get(12..12 + question.len())?;
    if !q.eq_ignore_ascii_case(question) {
        return None;
    }
    let mut rcode = u16::from(h.rcode);
    let mut server_cookie = None;
    let an = u16::from_be_bytes([msg[6], msg[7]]) as usize;
    let ns = u16::from_be_bytes([msg[8], msg[9]]) as usize;
    let ar = u16::from_be_bytes([msg[10], msg[11]]) as usize;
    let mut i = 12 + question.len();
    for n in 0..an + ns + ar {
        i = skip_name(msg, i)?;
        let fixed = msg.get(i..i + 10)?;
        let rtype = u16::from_be_bytes([fixed[0], fixed[1]]);
        let rdlen = u16::from_be_bytes([fixed[8], fixed[9]]) as usize;
        let rdata = msg.get(i + 10..i + 10 + rdlen)?;
        if n >= an + ns && rtype == 41 {
            rcode |= u16::from(fixed[4]) << 4;
            let mut j = 0;
            while j + 4 <= rdata.len() {
                let code = u16::from_be_bytes([rdata[j], rdata[j + 1]]);
                let len = u16::from_be_bytes([rdata[j + 2], rdata[j + 3]]) as usize;
                let val = rdata.get(j + 4..j + 4 + len)?;
                if code == OPT_COOKIE && len > 8 {
                    server_cookie = Some(val[8..].to_vec());
                }
                j += 4 + len;
            }
        }
        i += 10 + rdlen;
    }
    Some(Reply {
        header: h,
        rcode,
        server_cookie,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_and_query() {
        let t = NameTemplate::parse("h{n}.x{rand}.test", 10).unwrap();
        let mut rng = Rng::new(1);
        let mut s = String::new();
        t.draw(&mut rng, &mut s);
        assert!(s.starts_with('h') && s.ends_with(".test") && s.len() == 1 + 1 + 2 + 12 + 5);
        assert!(NameTemplate::parse("{bogus}", 1).is_err());
        let mut b = Vec::new();
        let qend = build_query(&mut b, 7, "a.b.", 1, None).unwrap();
        assert_eq!(&b[12..qend], b"\x01a\x01b\x00\x00\x01\x00\x01");
        let c = [1u8; 8];
        let qend2 = build_query(
            &mut b,
            7,
            "a.b",
            1,
            Some(Edns {
                udp_size: 1232,
                cookie: Some((&c, &[])),
            }),
        )
        .unwrap();
        assert_eq!(qend, qend2);
        assert_eq!(b.len(), qend + 11 + 12);
        // A reply: the query itself with QR set and an OPT carrying a server cookie.
        let mut r = b[..qend].to_vec();
        r[2] |= 0x80;
        r[11] = 1;
        r.extend_from_slice(&[0, 0, 41, 4, 208, 1, 0, 0, 0, 0, 20, 0, 10, 0, 16]);
        r.extend_from_slice(&[1; 8]);
        r.extend_from_slice(&[9; 8]);
        let p = parse_reply(&r, &b[12..qend]).unwrap();
        assert_eq!(p.rcode, 16 + (r[3] & 15) as u16);
        assert_eq!(p.server_cookie.as_deref(), Some(&[9u8; 8][..]));
        assert!(parse_reply(&r, b"\x01z\x00\x00\x01\x00\x01").is_none());
        assert_eq!(question_of(&r), Some(&b[12..qend]));
    }
}
