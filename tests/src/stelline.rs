//! A driver for a subset of Stelline (`.rpl`), the answer-conformance scenario format of
//! NLnet Labs' `domain` crate (an ldns-testns / unbound testbound / Deckard variant), run
//! against a real server on loopback.
//!
//! What it reads: the `server:` block before `CONFIG_END` ([`ServerConfig`]: `local-file`,
//! `local-data`, `provide-xfr`, cookie settings, anything else kept as it is), then
//! `STEP n QUERY [ADDRESS ip] [KEY name]`, `STEP n CHECK_ANSWER` and `STEP n TIME_PASSES
//! ELAPSE s`, each with an `ENTRY_BEGIN` … `ENTRY_END` holding `MATCH`, `REPLY` (flags and
//! rcode), `OPCODE`, `SECTION QUESTION/ANSWER/AUTHORITY/ADDITIONAL`, `EXTRA_PACKET`,
//! `HEX_EDNSDATA_BEGIN/END` and `$ORIGIN`.
//!
//! How it checks, as `domain`'s matcher does (`stelline/matches.rs`): `MATCH all` compares the
//! opcode, the question (name case-insensitively, type), the flags QR AA TC RA RD AD CD
//! exactly, the rcode (extended), and the three sections as multisets (owner
//! case-insensitively, class, type, RDATA in canonical form; the OPT is not a record of the
//! additional section). `ANY_ANSWER` accepts any one of the `EXTRA_PACKET` alternatives;
//! `EXTRA_PACKETS` pools the answers of every message of a multi-message reply (AXFR); without
//! either, each `EXTRA_PACKET` is one message, in order. Stricter than `domain`: a TTL the
//! scenario writes is compared (`domain` compares TTLs only under `MATCH ttl`).
//! `server_cookie` asks for a COOKIE option echoing the client cookie with a server cookie;
//! `ednsdata` for the OPT's options exactly as written.
//!
//! How it queries: like `domain`'s client, with an OPT record (payload 1232, DO from the query
//! entry's `REPLY DO`) unless `MATCH MOCK_CLIENT`, which sends the entry as written. `MATCH TCP`
//! goes over TCP; an AXFR reads messages until the closing SOA. `ADDRESS` binds the source
//! address (loopback only). The default source is 127.0.0.1, `domain`'s default client.
//!
//! Time: `domain` runs its scenarios on a mock clock that starts at 0 and moves only with
//! `TIME_PASSES`. The driver maps scenario time onto the wall clock: a timestamp `t` written
//! into a query at scenario time `s` is sent as `now + (t - s)`, so that its age as the server
//! sees it is the age the scenario means. That applies to RFC 9018 server cookies (when their
//! hash verifies with the scenario's cookie secret, which is then recomputed) and to TSIG
//! records (when their MAC verifies with the scenario's key, which then signs again). The
//! verification of what the scenario wrote doubles as a known-answer test of the driver.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hickory_proto::op::Message;
use hickory_proto::rr::{Name, RecordType};
use hickory_proto::serialize::txt::Parser;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::compare::Rr;
use crate::wire::{RCODE_NAMES, RawMsg, name_to_wire, rcode_name, type_name};

/// How long to wait for each message of a reply.
const TIMEOUT: Duration = Duration::from_secs(3);

// ---------------------------------------------------------------------------------------
// The scenario

/// A parsed `.rpl` file.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The file name (`auth_zones.rpl`).
    pub name: String,
    /// The directory the file is in.
    pub dir: PathBuf,
    /// The lines before `CONFIG_END`, comments removed.
    pub config: Vec<String>,
    /// The steps, in file order.
    pub steps: Vec<Step>,
}

/// One `STEP`.
#[derive(Debug, Clone)]
pub struct Step {
    /// The step number.
    pub n: u64,
    /// What it does.
    pub kind: StepKind,
}

/// What a step does.
#[derive(Debug, Clone)]
pub enum StepKind {
    /// `QUERY [ADDRESS ip] [KEY name]`.
    Query {
        /// The query.
        entry: Entry,
        /// `ADDRESS`: the client's source address.
        address: Option<IpAddr>,
        /// `KEY`: sign with this TSIG key.
        key: Option<String>,
    },
    /// `CHECK_ANSWER`.
    CheckAnswer(Entry),
    /// `TIME_PASSES ELAPSE s`.
    TimePasses(u64),
    /// Anything else (`TRAFFIC`, `ASSIGN`, ...): not supported.
    Other(String),
}

/// What `MATCH` asks for.
#[derive(Debug, Clone, Default)]
pub struct Matches {
    /// Opcode.
    pub opcode: bool,
    /// Question name.
    pub qname: bool,
    /// Question type.
    pub qtype: bool,
    /// All header flags exactly.
    pub flags: bool,
    /// Rcode.
    pub rcode: bool,
    /// Answer section.
    pub answer: bool,
    /// Authority section.
    pub authority: bool,
    /// Additional section.
    pub additional: bool,
    /// TTLs.
    pub ttl: bool,
    /// Over TCP.
    pub tcp: bool,
    /// AD must be set.
    pub ad: bool,
    /// CD must be set.
    pub cd: bool,
    /// RD must be set.
    pub rd: bool,
    /// DO must be set.
    pub do_bit: bool,
    /// The answer with a fresh server cookie.
    pub server_cookie: bool,
    /// The OPT options exactly.
    pub edns_data: bool,
    /// Send the query exactly as written (no OPT added).
    pub mock_client: bool,
    /// The server must have closed the connection.
    pub connection_closed: bool,
    /// Pool the answers of all messages.
    pub extra_packets: bool,
    /// Any one of the answer alternatives.
    pub any_answer: bool,
}

/// What `REPLY` says: flags and rcode.
#[derive(Debug, Clone, Default)]
pub struct ReplyFlags {
    /// QR.
    pub qr: bool,
    /// AA.
    pub aa: bool,
    /// TC.
    pub tc: bool,
    /// RA.
    pub ra: bool,
    /// RD.
    pub rd: bool,
    /// AD.
    pub ad: bool,
    /// CD.
    pub cd: bool,
    /// DO.
    pub do_bit: bool,
    /// Opcode NOTIFY.
    pub notify: bool,
    /// The rcode, when one is named.
    pub rcode: Option<u16>,
}

/// A question line.
#[derive(Debug, Clone)]
pub struct Question {
    /// The name as written.
    pub name: String,
    /// The type.
    pub qtype: u16,
    /// The class.
    pub qclass: u16,
}

/// A record line of a section.
#[derive(Debug, Clone)]
pub struct Rec {
    /// The record, normalised (owner lower case, RDATA canonical).
    pub rr: Rr,
    /// The line gave a TTL (else the TTL is 3600, as in `domain`, and not compared).
    pub ttl_given: bool,
    /// The line as written.
    pub line: String,
}

/// An `ENTRY_BEGIN` … `ENTRY_END`.
#[derive(Debug, Clone, Default)]
pub struct Entry {
    /// `MATCH`.
    pub matches: Matches,
    /// `OPCODE`.
    pub opcode: Option<u8>,
    /// `REPLY`.
    pub reply: ReplyFlags,
    /// `SECTION QUESTION`.
    pub question: Vec<Question>,
    /// `SECTION ANSWER`, one list per `EXTRA_PACKET`.
    pub answer: Vec<Vec<Rec>>,
    /// `SECTION AUTHORITY`.
    pub authority: Vec<Rec>,
    /// `SECTION ADDITIONAL` records.
    pub additional: Vec<Rec>,
    /// `HEX_EDNSDATA`: the OPT's options.
    pub edns_data: Option<Vec<u8>>,
}

/// The comment-free, trimmed text of a line, or `None` when nothing is left. A `;` inside
/// double quotes does not start a comment.
fn clean(line: &str) -> Option<&str> {
    let mut quoted = false;
    let mut end = line.len();
    for (i, c) in line.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ';' if !quoted => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let t = line[..end].trim();
    (!t.is_empty()).then_some(t)
}

/// Tokens of a line (quoted strings are one token, quotes kept) with their byte offsets.
fn tokens(s: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(b.len());
        } else {
            while i < b.len() && !b[i].is_ascii_whitespace() {
                i += 1;
            }
        }
        out.push((start, &s[start..i]));
    }
    out
}

/// A record type from its mnemonic or `TYPEnnn`.
fn parse_type(s: &str) -> Option<u16> {
    let u = s.to_ascii_uppercase();
    if let Some(n) = u.strip_prefix("TYPE")
        && let Ok(v) = n.parse()
    {
        return Some(v);
    }
    match u.parse::<RecordType>() {
        Ok(RecordType::Unknown(_)) | Err(_) => None,
        Ok(t) => Some(t.into()),
    }
}

/// A class from its mnemonic or `CLASSnnn`.
fn parse_class(s: &str) -> Option<u16> {
    let u = s.to_ascii_uppercase();
    match u.as_str() {
        "IN" => Some(1),
        "CH" | "CHAOS" => Some(3),
        "HS" => Some(4),
        "NONE" => Some(254),
        "ANY" => Some(255),
        _ => u.strip_prefix("CLASS").and_then(|n| n.parse().ok()),
    }
}

/// An rcode by name (`NOERROR`, `BADCOOKIE`, ...).
fn parse_rcode(s: &str) -> Option<u16> {
    (0..RCODE_NAMES.len() as u16).find(|&rc| RCODE_NAMES[rc as usize].eq_ignore_ascii_case(s))
}

/// An opcode by name.
fn parse_opcode(s: &str) -> Option<u8> {
    match s.to_ascii_uppercase().as_str() {
        "QUERY" => Some(0),
        "IQUERY" => Some(1),
        "STATUS" => Some(2),
        "NOTIFY" => Some(4),
        "UPDATE" => Some(5),
        x => x.parse().ok(),
    }
}

/// `name` made absolute against `origin` (`@` is the origin).
fn absolute(name: &str, origin: &str) -> String {
    if name == "@" {
        return origin.to_string();
    }
    if name.ends_with('.') && !name.ends_with("\\.") {
        return name.to_string();
    }
    if origin == "." {
        format!("{name}.")
    } else {
        format!("{name}.{origin}")
    }
}

fn hex_decode(s: &str) -> Result<Vec<u8>, String> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    if !s.len().is_multiple_of(2) {
        return Err(format!("odd number of hex digits in {s:?}"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).map_err(|e| format!("{s:?}: {e}")))
        .collect()
}

fn base64_decode(s: &str) -> Result<Vec<u8>, String> {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=') {
        let v = A
            .iter()
            .position(|&x| x == c)
            .ok_or_else(|| format!("not base64: {s:?}"))? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok(out)
}

/// Parses one record line against `origin`, the way `domain` does (a missing TTL is 3600,
/// a missing class IN).
pub fn parse_record(line: &str, origin: &str) -> Result<Rec, String> {
    let toks = tokens(line);
    let err = |m: &str| format!("record {line:?}: {m}");
    let owner = absolute(toks.first().ok_or_else(|| err("empty"))?.1, origin);
    let (mut ttl, mut class, mut rtype, mut at) = (None, None, None, 1);
    while at < toks.len() && rtype.is_none() {
        let t = toks[at].1;
        if ttl.is_none() && t.bytes().all(|c| c.is_ascii_digit()) {
            ttl = Some(t.parse::<u32>().map_err(|e| err(&e.to_string()))?);
        } else if class.is_none()
            && let Some(c) = parse_class(t)
        {
            class = Some(c);
        } else {
            rtype = Some(parse_type(t).ok_or_else(|| err(&format!("unknown type {t}")))?);
        }
        at += 1;
    }
    let rtype = rtype.ok_or_else(|| err("no type"))?;
    let rdata_text = toks.get(at).map_or("", |(off, _)| &line[*off..]).trim();
    let rest: Vec<&str> = toks[at..].iter().map(|t| t.1).collect();
    let class = class.unwrap_or(1);
    let raw = |rdata: Vec<u8>| Rr {
        owner: owner.to_ascii_lowercase(),
        rtype,
        class,
        ttl: ttl.unwrap_or(3600),
        rdata,
        text: rdata_text.to_string(),
    };
    let rr = if rest.first() == Some(&"\\#") {
        // RFC 3597: \# LENGTH HEX...
        let len: usize = rest
            .get(1)
            .and_then(|l| l.parse().ok())
            .ok_or_else(|| err("\\# without a length"))?;
        let data = hex_decode(&rest[2..].concat()).map_err(|e| err(&e))?;
        if data.len() != len {
            return Err(err(&format!("\\# says {len} octets, has {}", data.len())));
        }
        raw(data)
    } else if rtype == 48 {
        // DNSKEY: flags protocol algorithm base64 (no names: canonical as it is).
        let n = |i: usize| -> Result<u16, String> {
            rest.get(i)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| err("bad DNSKEY"))
        };
        let mut d = n(0)?.to_be_bytes().to_vec();
        d.push(n(1)? as u8);
        d.push(n(2)? as u8);
        d.extend(base64_decode(&rest[3..].concat()).map_err(|e| err(&e))?);
        raw(d)
    } else if rtype == 43 {
        // DS: key tag, algorithm, digest type, hex digest.
        let n = |i: usize| -> Result<u16, String> {
            rest.get(i)
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| err("bad DS"))
        };
        let mut d = n(0)?.to_be_bytes().to_vec();
        d.push(n(1)? as u8);
        d.push(n(2)? as u8);
        d.extend(hex_decode(&rest[3..].concat()).map_err(|e| err(&e))?);
        raw(d)
    } else if let Some(d) = names_rdata(rtype, &rest, origin) {
        // Types made of names and numbers, encoded here in canonical form (hickory's names
        // refuse some labels zone files hold, such as `with_glue`).
        raw(d.map_err(|e| err(&e))?)
    } else {
        if class != 1 {
            return Err(err(
                "only class IN is parsed from text (use \\# for others)",
            ));
        }
        let text = format!(
            "$ORIGIN {origin}\nplaceholder.invalid. {} IN {} {rdata_text}\n",
            ttl.unwrap_or(3600),
            type_name(rtype)
        );
        let origin_name = Name::from_ascii(origin).map_err(|e| err(&e.to_string()))?;
        let (_, sets) = Parser::new(text.as_str(), None, Some(origin_name))
            .parse()
            .map_err(|e| err(&e.to_string()))?;
        let rec = sets
            .values()
            .flat_map(|s| s.records_without_rrsigs())
            .next()
            .ok_or_else(|| err("no record parsed"))?;
        let parsed = Rr::from_record(rec);
        Rr {
            rdata: parsed.rdata,
            text: parsed.text,
            ..raw(Vec::new())
        }
    };
    Ok(Rec {
        rr,
        ttl_given: ttl.is_some(),
        line: line.to_string(),
    })
}

/// The canonical RDATA of NS, CNAME, PTR, DNAME, MX and SOA from their fields; `None` for
/// other types.
fn names_rdata(rtype: u16, f: &[&str], origin: &str) -> Option<Result<Vec<u8>, String>> {
    let name = |i: usize| -> Result<Vec<u8>, String> {
        let n = f.get(i).ok_or("too few fields")?;
        Ok(name_to_wire(&absolute(n, origin).to_ascii_lowercase()))
    };
    let num = |i: usize| -> Result<u32, String> {
        f.get(i)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("field {} is not a number", i + 1))
    };
    let fields = |n: usize| -> Result<(), String> {
        if f.len() == n {
            Ok(())
        } else {
            Err(format!("{} fields, {n} expected", f.len()))
        }
    };
    Some(match rtype {
        2 | 5 | 12 | 39 => fields(1).and_then(|()| name(0)),
        15 => fields(2).and_then(|()| {
            let mut d = (num(0)? as u16).to_be_bytes().to_vec();
            d.extend(name(1)?);
            Ok(d)
        }),
        6 => fields(7).and_then(|()| {
            let mut d = name(0)?;
            d.extend(name(1)?);
            for i in 2..7 {
                d.extend_from_slice(&num(i)?.to_be_bytes());
            }
            Ok(d)
        }),
        _ => return None,
    })
}

fn parse_question(line: &str) -> Result<Question, String> {
    let toks: Vec<&str> = tokens(line).into_iter().map(|t| t.1).collect();
    let err = || format!("question {line:?}");
    let name = toks.first().ok_or_else(err)?.to_string();
    // NAME [CLASS] TYPE: the type is last (ANY is a type there, not the class).
    let qtype =
        parse_type(toks.last().filter(|_| toks.len() > 1).ok_or_else(err)?).ok_or_else(err)?;
    let qclass = match toks.len() {
        2 => 1,
        3 => parse_class(toks[1]).ok_or_else(err)?,
        _ => return Err(err()),
    };
    Ok(Question {
        name,
        qtype,
        qclass,
    })
}

impl Scenario {
    /// Reads and parses a `.rpl` file.
    pub fn load(path: &Path) -> Result<Scenario, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(
            &path.file_name().unwrap_or_default().to_string_lossy(),
            path.parent().unwrap_or(Path::new(".")),
            &text,
        )
        .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses `.rpl` text; `dir` is where relative paths of the config start.
    pub fn parse(name: &str, dir: &Path, text: &str) -> Result<Scenario, String> {
        let mut lines = text.lines().enumerate().peekable();
        let mut config = Vec::new();
        let mut ended = false;
        for (_, l) in lines.by_ref() {
            let Some(c) = clean(l) else { continue };
            if c == "CONFIG_END" {
                ended = true;
                break;
            }
            config.push(c.to_string());
        }
        if !ended {
            return Err("no CONFIG_END".into());
        }
        let mut steps = Vec::new();
        let mut begun = false;
        while let Some((no, l)) = lines.next() {
            let Some(c) = clean(l) else { continue };
            let at = |m: String| format!("line {}: {m}", no + 1);
            let t: Vec<&str> = c.split_whitespace().collect();
            match t[0] {
                "SCENARIO_BEGIN" => begun = true,
                "SCENARIO_END" => break,
                "STEP" if begun => {
                    let n: u64 = t
                        .get(1)
                        .and_then(|v| v.parse().ok())
                        .ok_or_else(|| at("STEP without a number".into()))?;
                    let kind = match t.get(2).copied() {
                        Some("QUERY") => {
                            let (mut address, mut key) = (None, None);
                            let mut i = 3;
                            while i + 1 < t.len() {
                                match t[i] {
                                    "ADDRESS" => {
                                        address = Some(t[i + 1].parse().map_err(|e| {
                                            at(format!("ADDRESS {}: {e}", t[i + 1]))
                                        })?)
                                    }
                                    "KEY" => key = Some(t[i + 1].to_string()),
                                    p => return Err(at(format!("unknown QUERY parameter {p}"))),
                                }
                                i += 2;
                            }
                            StepKind::Query {
                                entry: parse_entry(&mut lines).map_err(at)?,
                                address,
                                key,
                            }
                        }
                        Some("CHECK_ANSWER") => {
                            StepKind::CheckAnswer(parse_entry(&mut lines).map_err(at)?)
                        }
                        Some("TIME_PASSES") if t.get(3) == Some(&"ELAPSE") => StepKind::TimePasses(
                            t.get(4)
                                .and_then(|v| v.parse().ok())
                                .ok_or_else(|| at("TIME_PASSES ELAPSE without seconds".into()))?,
                        ),
                        other => StepKind::Other(other.unwrap_or("").to_string()),
                    };
                    steps.push(Step { n, kind });
                }
                other => return Err(at(format!("unexpected {other:?}"))),
            }
        }
        Ok(Scenario {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            config,
            steps,
        })
    }

    /// The server settings of the config block.
    pub fn server_config(&self) -> ServerConfig {
        ServerConfig::parse(&self.config)
    }
}

fn parse_entry<'a, I: Iterator<Item = (usize, &'a str)>>(lines: &mut I) -> Result<Entry, String> {
    let mut e = Entry {
        answer: vec![Vec::new()],
        ..Entry::default()
    };
    let mut section = "";
    let mut origin = ".".to_string();
    let mut hex: Option<String> = None;
    for (no, l) in lines.by_ref() {
        let Some(c) = clean(l) else { continue };
        let at = |m: String| format!("line {}: {m}", no + 1);
        if let Some(h) = &mut hex {
            if c == "HEX_EDNSDATA_END" {
                e.edns_data = Some(hex_decode(h).map_err(at)?);
                hex = None;
            } else {
                h.push_str(c);
            }
            continue;
        }
        let t: Vec<&str> = c.split_whitespace().collect();
        match t[0] {
            "ENTRY_END" => return Ok(e),
            "ENTRY_BEGIN" => {}
            "MATCH" => {
                let m = &mut e.matches;
                for w in &t[1..] {
                    match *w {
                        "all" => {
                            m.opcode = true;
                            m.qname = true;
                            m.qtype = true;
                            m.flags = true;
                            m.rcode = true;
                            m.answer = true;
                            m.authority = true;
                            m.additional = true;
                        }
                        "question" => {
                            m.qname = true;
                            m.qtype = true;
                        }
                        "qname" => m.qname = true,
                        "qtype" => m.qtype = true,
                        "opcode" => m.opcode = true,
                        "flags" => m.flags = true,
                        "rcode" => m.rcode = true,
                        "answer" => m.answer = true,
                        "authority" => m.authority = true,
                        "additional" => m.additional = true,
                        "ttl" => m.ttl = true,
                        "TCP" => m.tcp = true,
                        "UDP" => m.tcp = false,
                        "AD" => m.ad = true,
                        "CD" => m.cd = true,
                        "RD" => m.rd = true,
                        "DO" => m.do_bit = true,
                        "server_cookie" => m.server_cookie = true,
                        "ednsdata" => m.edns_data = true,
                        "MOCK_CLIENT" => m.mock_client = true,
                        "CONNECTION_CLOSED" => m.connection_closed = true,
                        "EXTRA_PACKETS" => m.extra_packets = true,
                        "ANY_ANSWER" => m.any_answer = true,
                        other => return Err(at(format!("unknown MATCH {other}"))),
                    }
                }
            }
            "REPLY" => {
                let r = &mut e.reply;
                for w in &t[1..] {
                    match *w {
                        "QR" => r.qr = true,
                        "AA" => r.aa = true,
                        "TC" => r.tc = true,
                        "RA" => r.ra = true,
                        "RD" => r.rd = true,
                        "AD" => r.ad = true,
                        "CD" => r.cd = true,
                        "DO" => r.do_bit = true,
                        "NOTIFY" => r.notify = true,
                        other => {
                            r.rcode = Some(
                                parse_rcode(other)
                                    .ok_or_else(|| at(format!("unknown REPLY {other}")))?,
                            )
                        }
                    }
                }
            }
            "OPCODE" => {
                e.opcode = Some(
                    t.get(1)
                        .and_then(|o| parse_opcode(o))
                        .ok_or_else(|| at("bad OPCODE".into()))?,
                )
            }
            "ADJUST" => {}
            "SECTION" => {
                section = match t.get(1).copied() {
                    Some(s @ ("QUESTION" | "ANSWER" | "AUTHORITY" | "ADDITIONAL")) => s,
                    other => return Err(at(format!("bad SECTION {other:?}"))),
                };
                origin = ".".into();
            }
            "EXTRA_PACKET" => e.answer.push(Vec::new()),
            "HEX_EDNSDATA_BEGIN" => hex = Some(String::new()),
            "$ORIGIN" => origin = t.get(1).unwrap_or(&".").to_string(),
            _ => match section {
                "QUESTION" => e.question.push(parse_question(c).map_err(at)?),
                "ANSWER" => {
                    let r = parse_record(c, &origin).map_err(at)?;
                    e.answer.last_mut().expect("an answer list").push(r);
                }
                "AUTHORITY" => e.authority.push(parse_record(c, &origin).map_err(at)?),
                "ADDITIONAL" => e.additional.push(parse_record(c, &origin).map_err(at)?),
                _ => return Err(at(format!("unexpected {c:?}"))),
            },
        }
    }
    Err("no ENTRY_END".into())
}

// ---------------------------------------------------------------------------------------
// The server config block

/// The `server:` block of a scenario's config.
#[derive(Debug, Clone, Default)]
pub struct ServerConfig {
    /// `local-file:` paths as written.
    pub local_files: Vec<String>,
    /// `local-data:` lines, unquoted.
    pub local_data: Vec<String>,
    /// `provide-xfr:` (address, options such as `NOKEY`, `COMPATIBLE`).
    pub provide_xfr: Vec<(String, Vec<String>)>,
    /// `answer-cookie: yes`.
    pub answer_cookie: bool,
    /// `cookie-secret:` (hex).
    pub cookie_secret: Option<String>,
    /// `access-control:` (prefix, action).
    pub access_control: Vec<(String, String)>,
    /// Every setting as (name, value), for what the mapping does not know.
    pub settings: Vec<(String, String)>,
}

impl ServerConfig {
    fn parse(lines: &[String]) -> ServerConfig {
        let mut c = ServerConfig::default();
        for l in lines {
            if l == "server:" {
                continue;
            }
            let Some((k, v)) = l.split_once(':') else {
                continue;
            };
            let (k, v) = (k.trim(), v.trim());
            let unq = v.trim_matches('"').to_string();
            match k {
                "local-file" => c.local_files.push(unq),
                "local-data" => c.local_data.push(unq),
                "provide-xfr" => {
                    let mut w = v.split_whitespace().map(str::to_string);
                    if let Some(a) = w.next() {
                        c.provide_xfr.push((a, w.collect()));
                    }
                }
                "answer-cookie" => c.answer_cookie = v == "yes",
                "cookie-secret" => c.cookie_secret = Some(unq),
                "access-control" => {
                    if let Some((p, a)) = v.split_once(char::is_whitespace) {
                        c.access_control.push((p.to_string(), a.trim().to_string()));
                    }
                }
                _ => {}
            }
            c.settings.push((k.to_string(), v.to_string()));
        }
        c
    }

    /// The zone files of `local-file:`, resolved against `corpus` (the corpus directory: the
    /// paths are written relative to it, e.g. `zonefiles/x.zone` from `server/`), each with
    /// the origin its SOA names.
    pub fn zone_files(&self, scenario_dir: &Path) -> Result<Vec<(String, PathBuf)>, String> {
        let mut out = Vec::new();
        for f in &self.local_files {
            let candidates = [
                scenario_dir.parent().map(|p| p.join(f)),
                Some(scenario_dir.join(f)),
            ];
            let path = candidates
                .into_iter()
                .flatten()
                .find(|p| p.is_file())
                .ok_or_else(|| {
                    format!("local-file {f:?} not found from {}", scenario_dir.display())
                })?;
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{f}: {e}"))?;
            let origin = soa_owner(&text).ok_or_else(|| format!("{f}: no SOA record"))?;
            out.push((origin, path));
        }
        Ok(out)
    }

    /// The `local-data:` lines as a zone file written into `dir`, with its origin (the
    /// owner of its SOA); `None` when there are none.
    pub fn local_zone(&self, dir: &Path) -> Result<Option<(String, PathBuf)>, String> {
        if self.local_data.is_empty() {
            return Ok(None);
        }
        let mut text = self.local_data.join("\n");
        text.push('\n');
        let origin = soa_owner(&text).ok_or("local-data has no SOA record")?;
        let path = dir.join("local-data.zone");
        std::fs::write(&path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Some((origin, path)))
    }
}

/// The owner of the first SOA record of a master file (following `$ORIGIN`).
fn soa_owner(text: &str) -> Option<String> {
    let mut origin = ".".to_string();
    let mut last_owner = None;
    for l in text.lines() {
        let Some(c) = clean(l) else { continue };
        let t: Vec<&str> = c.split_whitespace().collect();
        if t[0].eq_ignore_ascii_case("$ORIGIN") {
            origin = t.get(1)?.to_string();
            continue;
        }
        let owner = if l.starts_with(char::is_whitespace) {
            last_owner.clone()?
        } else {
            absolute(t[0], &origin)
        };
        if t.iter().take(5).any(|w| w.eq_ignore_ascii_case("SOA")) {
            return Some(owner);
        }
        last_owner = Some(owner);
    }
    None
}

// ---------------------------------------------------------------------------------------
// Running

/// A TSIG key the driver signs and verifies with (HMAC-SHA256 only).
#[derive(Debug, Clone)]
pub struct TsigKey {
    /// The key name.
    pub name: String,
    /// The secret.
    pub secret: Vec<u8>,
}

/// How to run a scenario.
#[derive(Debug, Clone, Default)]
pub struct RunOpts {
    /// Keys for `KEY` and for TSIG records written in queries.
    pub keys: Vec<TsigKey>,
    /// The cookie secret of the server (to map the timestamps of scenario cookies).
    pub cookie_secret: Option<[u8; 16]>,
    /// CHECK_ANSWER steps not to run (with their query), and why.
    pub skip: Vec<(u64, String)>,
}

/// What became of one QUERY / CHECK_ANSWER pair.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The QUERY step.
    pub query_step: u64,
    /// The CHECK_ANSWER step.
    pub check_step: u64,
    /// Why it was not run, when it was not.
    pub skipped: Option<String>,
    /// How the answer differs from what the scenario expects (empty: it matches).
    pub diffs: Vec<String>,
    /// What the driver did beyond the scenario (time mapping).
    pub notes: Vec<String>,
    /// The reply, printed.
    pub got: String,
}

impl Outcome {
    /// Ran and matched.
    pub fn matched(&self) -> bool {
        self.skipped.is_none() && self.diffs.is_empty()
    }
}

/// A reply message, parsed.
struct Msg {
    raw: Vec<u8>,
    head: RawMsg,
    msg: Message,
}

impl Msg {
    fn parse(raw: Vec<u8>) -> Result<Msg, String> {
        let head = RawMsg::parse(&raw)?;
        let msg = Message::from_vec(&raw).map_err(|e| format!("reply does not parse: {e}"))?;
        Ok(Msg { raw, head, msg })
    }

    fn show(&self) -> String {
        let h = &self.head;
        let f = h.flags;
        let mut flags = Vec::new();
        for (bit, n) in [
            (0x8000, "QR"),
            (0x0400, "AA"),
            (0x0200, "TC"),
            (0x0100, "RD"),
            (0x0080, "RA"),
            (0x0020, "AD"),
            (0x0010, "CD"),
        ] {
            if f & bit != 0 {
                flags.push(n);
            }
        }
        let mut s = format!(
            "opcode {} {} {} qd {} an {} ns {} ar {}",
            h.opcode(),
            flags.join(" "),
            rcode_name(h.rcode()),
            h.counts[0],
            h.counts[1],
            h.counts[2],
            h.counts[3]
        );
        for (n, recs) in [
            ("answer", &self.msg.answers),
            ("authority", &self.msg.authorities),
            ("additional", &self.msg.additionals),
        ] {
            for r in recs.iter() {
                s.push_str(&format!("\n    {n:<10} {}", Rr::from_record(r)));
            }
        }
        if let Some(o) = &h.opt {
            s.push_str(&format!(
                "\n    OPT size {} flags {:#06x} options {:02x?}",
                o.udp_size, o.flags, o.options
            ));
        }
        if let Ok(Some(t)) = tsig_of(&self.raw) {
            s.push_str(&format!(
                "\n    TSIG {} time {} error {} mac {} octets",
                String::from_utf8_lossy(&t.key_text),
                t.time,
                t.error,
                t.mac.len()
            ));
        }
        s
    }
}

/// Runs the scenario's steps against `server`; one [`Outcome`] per CHECK_ANSWER.
pub fn run(s: &Scenario, server: SocketAddr, opts: &RunOpts) -> Vec<Outcome> {
    let mut out = Vec::new();
    let mut clock: u64 = 0; // the scenario's clock
    let mut pending: Option<(u64, Result<Sent, String>, Vec<String>)> = None;
    for (i, step) in s.steps.iter().enumerate() {
        match &step.kind {
            StepKind::TimePasses(secs) => clock += secs,
            StepKind::Other(what) => out.push(Outcome {
                query_step: step.n,
                check_step: step.n,
                skipped: Some(format!("step type {what} is not supported")),
                diffs: Vec::new(),
                notes: Vec::new(),
                got: String::new(),
            }),
            StepKind::Query {
                entry,
                address,
                key,
            } => {
                let check = s.steps[i + 1..]
                    .iter()
                    .find(|x| matches!(x.kind, StepKind::CheckAnswer(_)))
                    .map_or(step.n, |x| x.n);
                if let Some((_, why)) = opts.skip.iter().find(|(n, _)| *n == check) {
                    pending = Some((step.n, Err(format!("SKIP {why}")), Vec::new()));
                    continue;
                }
                let mut notes = Vec::new();
                let sent = send(
                    entry,
                    *address,
                    key.as_deref(),
                    server,
                    opts,
                    clock,
                    &mut notes,
                );
                pending = Some((step.n, sent, notes));
            }
            StepKind::CheckAnswer(entry) => {
                let Some((qn, sent, notes)) = pending.take() else {
                    out.push(Outcome {
                        query_step: step.n,
                        check_step: step.n,
                        skipped: None,
                        diffs: vec!["CHECK_ANSWER without a QUERY before it".into()],
                        notes: Vec::new(),
                        got: String::new(),
                    });
                    continue;
                };
                let mut o = Outcome {
                    query_step: qn,
                    check_step: step.n,
                    skipped: None,
                    diffs: Vec::new(),
                    notes,
                    got: String::new(),
                };
                match sent {
                    Err(e) if e.starts_with("SKIP ") => o.skipped = Some(e[5..].to_string()),
                    Err(e) => o.diffs.push(e),
                    Ok(sent) => {
                        o.got = sent
                            .replies
                            .iter()
                            .map(Msg::show)
                            .collect::<Vec<_>>()
                            .join("\n  ---\n  ");
                        if sent.replies.len() > 1 {
                            o.notes.push(format!("{} messages", sent.replies.len()));
                        }
                        if sent.closed_early {
                            o.notes.push("the server closed the connection".into());
                        }
                        o.diffs = check_reply(entry, &sent, opts);
                    }
                }
                out.push(o);
            }
        }
    }
    out
}

/// What a query brought back.
struct Sent {
    query: Vec<u8>,
    /// The client cookie sent, if any.
    client_cookie: Option<Vec<u8>>,
    /// The MAC of the signed query and its key.
    signed: Option<(Vec<u8>, TsigKey)>,
    /// The time the query was signed with.
    signed_at: u64,
    replies: Vec<Msg>,
    closed_early: bool,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Scenario time `t`, written at scenario time `clock`, on the wall clock.
fn map_time(t: u64, clock: u64) -> u64 {
    (now_secs() as i64 + t as i64 - clock as i64).max(0) as u64
}

fn send(
    e: &Entry,
    address: Option<IpAddr>,
    key: Option<&str>,
    server: SocketAddr,
    opts: &RunOpts,
    clock: u64,
    notes: &mut Vec<String>,
) -> Result<Sent, String> {
    let src = address.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    if !src.is_loopback() {
        return Err(format!(
            "source address {src} is not a loopback address this test can send from"
        ));
    }
    let q = e.question.first().ok_or("a query without a question")?;
    // Header and question.
    let id: u16 = crate::client::next_id();
    let mut m = Vec::new();
    let opcode = if e.reply.notify {
        4
    } else {
        e.opcode.unwrap_or(0)
    };
    let mut flags = (opcode as u16 & 0xF) << 11;
    if e.reply.rd {
        flags |= 0x0100;
    }
    if e.reply.ad {
        flags |= 0x0020;
    }
    if e.reply.cd {
        flags |= 0x0010;
    }
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&flags.to_be_bytes());
    m.extend_from_slice(&(e.question.len() as u16).to_be_bytes());
    m.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    for q in &e.question {
        m.extend_from_slice(&name_to_wire(&q.name));
        m.extend_from_slice(&q.qtype.to_be_bytes());
        m.extend_from_slice(&q.qclass.to_be_bytes());
    }
    // Additional records as written (a TSIG among them is signed last), then OPT.
    let mut arcount = 0u16;
    let mut tsig_written = None;
    for r in &e.additional {
        if r.rr.rtype == 250 {
            tsig_written = Some(r.clone());
            continue;
        }
        m.extend_from_slice(&name_to_wire(&r.rr.owner));
        m.extend_from_slice(&r.rr.rtype.to_be_bytes());
        m.extend_from_slice(&r.rr.class.to_be_bytes());
        m.extend_from_slice(&r.rr.ttl.to_be_bytes());
        m.extend_from_slice(&(r.rr.rdata.len() as u16).to_be_bytes());
        m.extend_from_slice(&r.rr.rdata);
        arcount += 1;
    }
    let mut client_cookie = None;
    if !e.matches.mock_client || e.edns_data.is_some() {
        let mut data = e.edns_data.clone().unwrap_or_default();
        if let Some(secret) = &opts.cookie_secret {
            map_cookies(&mut data, secret, src, clock, notes);
        }
        client_cookie = cookie_of(&data).map(|(c, _)| c.to_vec());
        m.extend_from_slice(&[0, 0, 41]);
        m.extend_from_slice(&1232u16.to_be_bytes());
        m.extend_from_slice(&[0, 0]);
        m.extend_from_slice(&(if e.reply.do_bit { 0x8000u16 } else { 0 }).to_be_bytes());
        m.extend_from_slice(&(data.len() as u16).to_be_bytes());
        m.extend_from_slice(&data);
        arcount += 1;
    }
    m[10..12].copy_from_slice(&arcount.to_be_bytes());
    // TSIG: the record the scenario wrote (its MAC checked, then signed again at the mapped
    // time), or a signature with the KEY of the step.
    let mut signed = None;
    let mut signed_at = 0;
    let tsig_key = |name: &str| {
        opts.keys
            .iter()
            .find(|k| {
                k.name
                    .trim_end_matches('.')
                    .eq_ignore_ascii_case(name.trim_end_matches('.'))
            })
            .cloned()
            .ok_or_else(|| format!("no TSIG key {name} given to the driver"))
    };
    if let Some(w) = tsig_written {
        let t =
            parse_tsig_rdata(&w.rr.rdata, 0).ok_or("the scenario's TSIG RDATA does not parse")?;
        let k = tsig_key(&w.rr.owner)?;
        // The scenario's query: its original ID, without the OPT the driver may add.
        let mut theirs = m.clone();
        theirs[0..2].copy_from_slice(&t.orig_id.to_be_bytes());
        let mac = tsig_mac(&k, None, &theirs, &t.alg_wire, t.time, t.fudge, 0, &[]);
        if mac != t.mac {
            return Err(format!(
                "the scenario's TSIG MAC {} does not verify with key {} at time {}: {}",
                hex(&t.mac),
                k.name,
                t.time,
                hex(&mac)
            ));
        }
        m[0..2].copy_from_slice(&t.orig_id.to_be_bytes());
        signed_at = map_time(t.time, clock);
        notes.push(format!(
            "TSIG: the scenario's MAC verifies with key {} at its time {}; signed again at {signed_at} (scenario time {} at clock {clock})",
            k.name, t.time, t.time
        ));
        let mac = sign(&mut m, &k, signed_at, t.fudge);
        signed = Some((mac, k));
    } else if let Some(name) = key {
        let k = tsig_key(name)?;
        signed_at = map_time(clock, clock);
        let mac = sign(&mut m, &k, signed_at, 300);
        signed = Some((mac, k));
    }
    // Send.
    let mut sent = Sent {
        query: m.clone(),
        client_cookie,
        signed,
        signed_at,
        replies: Vec::new(),
        closed_early: false,
    };
    if e.matches.tcp {
        let xfr = q.qtype == 252;
        tcp_send(src, server, &m, xfr, &mut sent)?;
    } else {
        let s = UdpSocket::bind(SocketAddr::new(src, 0)).map_err(|e| format!("bind {src}: {e}"))?;
        s.connect(server).map_err(|e| e.to_string())?;
        s.send(&m).map_err(|e| e.to_string())?;
        let deadline = Instant::now() + TIMEOUT;
        let mut buf = vec![0u8; 65535];
        loop {
            let left = deadline
                .checked_duration_since(Instant::now())
                .ok_or("no reply over UDP")?;
            s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .map_err(|e| e.to_string())?;
            let n = s
                .recv(&mut buf)
                .map_err(|e| format!("no reply over UDP: {e}"))?;
            if n >= 2 && buf[..2] == m[..2] {
                sent.replies.push(Msg::parse(buf[..n].to_vec())?);
                break;
            }
        }
    }
    Ok(sent)
}

fn tcp_send(
    src: IpAddr,
    server: SocketAddr,
    m: &[u8],
    xfr: bool,
    sent: &mut Sent,
) -> Result<(), String> {
    let sock = Socket::new(
        Domain::for_address(server),
        Type::STREAM,
        Some(Protocol::TCP),
    )
    .map_err(|e| e.to_string())?;
    sock.bind(&SockAddr::from(SocketAddr::new(src, 0)))
        .map_err(|e| format!("bind {src}: {e}"))?;
    sock.connect_timeout(&SockAddr::from(server), TIMEOUT)
        .map_err(|e| format!("connect {server}: {e}"))?;
    let mut s: TcpStream = sock.into();
    s.set_read_timeout(Some(TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.write_all(&crate::client::frame(m))
        .map_err(|e| format!("write: {e}"))?;
    let mut soas = 0;
    loop {
        let mut len = [0u8; 2];
        match s.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                sent.closed_early = true;
                break;
            }
            Err(e) if sent.replies.is_empty() => return Err(format!("no reply over TCP: {e}")),
            Err(e) => {
                return Err(format!(
                    "reply stream ended after {} messages: {e}",
                    sent.replies.len()
                ));
            }
        }
        let mut b = vec![0u8; u16::from_be_bytes(len) as usize];
        s.read_exact(&mut b).map_err(|e| format!("read: {e}"))?;
        let msg = Msg::parse(b)?;
        let rc = msg.head.rcode();
        soas += msg
            .msg
            .answers
            .iter()
            .filter(|r| r.record_type() == RecordType::SOA)
            .count();
        sent.replies.push(msg);
        if !xfr || rc != 0 || soas >= 2 || sent.replies.len() > 100_000 {
            break;
        }
    }
    Ok(())
}

/// The client and server cookie of a COOKIE option in OPT option bytes.
fn cookie_of(opts: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut p = 0;
    while p + 4 <= opts.len() {
        let code = u16::from_be_bytes([opts[p], opts[p + 1]]);
        let len = u16::from_be_bytes([opts[p + 2], opts[p + 3]]) as usize;
        let d = opts.get(p + 4..p + 4 + len)?;
        if code == 10 && len >= 8 {
            return Some((&d[..8], &d[8..]));
        }
        p += 4 + len;
    }
    None
}

/// RFC 9018 §4.4: the hash of a server cookie.
fn cookie_hash(secret: &[u8; 16], client: &[u8], head: &[u8], ip: IpAddr) -> [u8; 8] {
    use std::hash::Hasher;
    let k0 = u64::from_le_bytes(secret[..8].try_into().expect("8 octets"));
    let k1 = u64::from_le_bytes(secret[8..].try_into().expect("8 octets"));
    // SipHash-2-4, which RFC 9018 names (std's SipHasher is that function).
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new_with_keys(k0, k1);
    h.write(client);
    h.write(head);
    match ip {
        IpAddr::V4(a) => h.write(&a.octets()),
        IpAddr::V6(a) => h.write(&a.octets()),
    }
    h.finish().to_le_bytes()
}

/// Moves the timestamp of each RFC 9018 server cookie in `opts` whose hash verifies with
/// `secret` from scenario time to wall-clock time, recomputing its hash.
fn map_cookies(
    opts: &mut [u8],
    secret: &[u8; 16],
    ip: IpAddr,
    clock: u64,
    notes: &mut Vec<String>,
) {
    let mut p = 0;
    while p + 4 <= opts.len() {
        let code = u16::from_be_bytes([opts[p], opts[p + 1]]);
        let len = u16::from_be_bytes([opts[p + 2], opts[p + 3]]) as usize;
        if p + 4 + len > opts.len() {
            return;
        }
        if code == 10 && len == 24 && opts[p + 12] == 1 {
            let d = &mut opts[p + 4..p + 4 + len];
            let ts = u32::from_be_bytes([d[12], d[13], d[14], d[15]]);
            let (client, server) = d.split_at_mut(8);
            if cookie_hash(secret, client, &server[..8], ip) == server[8..16] {
                let mapped = map_time(ts as u64, clock) as u32;
                server[4..8].copy_from_slice(&mapped.to_be_bytes());
                let h = cookie_hash(secret, client, &server[..8], ip);
                server[8..16].copy_from_slice(&h);
                notes.push(format!(
                    "cookie: the scenario's hash verifies at its timestamp {ts}; sent with timestamp {mapped} (scenario clock {clock}, so {} s old)",
                    clock as i64 - ts as i64
                ));
            } else {
                notes.push(format!(
                    "cookie: the scenario's server cookie (timestamp {ts}) does not verify with the secret: sent as written"
                ));
            }
        }
        p += 4 + len;
    }
}

// ---------------------------------------------------------------------------------------
// Checking

/// Compares what came back with the CHECK_ANSWER entry; the differences, readable.
fn check_reply(e: &Entry, sent: &Sent, opts: &RunOpts) -> Vec<String> {
    let mut d = Vec::new();
    let m = &e.matches;
    if m.connection_closed {
        if !sent.replies.is_empty() {
            d.push("the connection should have been closed, a reply came".into());
        }
        return d;
    }
    if sent.replies.is_empty() {
        d.push("no reply".into());
        return d;
    }
    let many = sent.replies.len() > 1;
    for (i, r) in sent.replies.iter().enumerate() {
        let at = if many {
            format!("message {}: ", i + 1)
        } else {
            String::new()
        };
        for x in check_header(e, r) {
            d.push(format!("{at}{x}"));
        }
        if m.authority {
            let got = r.msg.authorities.iter().map(Rr::from_record).collect();
            for x in section_diff("authority", &e.authority, got, m.ttl) {
                d.push(format!("{at}{x}"));
            }
        }
        if m.additional {
            let got: Vec<Rr> = r
                .msg
                .additionals
                .iter()
                .map(Rr::from_record)
                .filter(|x| x.rtype != 250)
                .collect();
            let want: Vec<Rec> = e
                .additional
                .iter()
                .filter(|x| x.rr.rtype != 250)
                .cloned()
                .collect();
            for x in section_diff("additional", &want, got, m.ttl) {
                d.push(format!("{at}{x}"));
            }
        }
        // A TSIG the scenario expects, checked for what a real clock leaves comparable.
        let want_tsig = e.additional.iter().find(|x| x.rr.rtype == 250);
        let got_tsig = tsig_of(&r.raw);
        match (want_tsig, got_tsig) {
            (None, Ok(None)) => {}
            (None, Ok(Some(_))) if !m.additional => {}
            (None, Ok(Some(t))) => d.push(format!(
                "{at}additional: an unexpected TSIG ({})",
                String::from_utf8_lossy(&t.key_text)
            )),
            (Some(_), Ok(None)) if m.additional => d.push(format!("{at}additional: no TSIG")),
            (Some(w), Ok(Some(t))) if m.additional => {
                for x in tsig_diff(w, &t, r, sent, i, opts) {
                    d.push(format!("{at}{x}"));
                }
            }
            (_, Err(x)) => d.push(format!("{at}{x}")),
            _ => {}
        }
        if m.server_cookie {
            let got = r.head.opt.as_ref().and_then(|o| {
                o.options
                    .iter()
                    .find(|(c, _)| *c == 10)
                    .map(|(_, v)| v.clone())
            });
            match (got, &sent.client_cookie) {
                (None, _) => d.push(format!("{at}no COOKIE option")),
                (Some(v), Some(cc)) if v.len() < 16 || v.len() > 40 || v[..8] != cc[..] => {
                    d.push(format!(
                        "{at}COOKIE {} does not echo the client cookie {} with a server cookie",
                        hex(&v),
                        hex(cc)
                    ))
                }
                (Some(v), None) if v.len() < 16 => {
                    d.push(format!("{at}COOKIE {} without a server cookie", hex(&v)))
                }
                _ => {}
            }
        }
        if m.edns_data {
            let want = e.edns_data.clone().unwrap_or_default();
            match &r.head.opt {
                None => d.push(format!("{at}no OPT (expected options {})", hex(&want))),
                Some(o) => {
                    let mut got = Vec::new();
                    for (c, v) in &o.options {
                        got.extend_from_slice(&c.to_be_bytes());
                        got.extend_from_slice(&(v.len() as u16).to_be_bytes());
                        got.extend_from_slice(v);
                    }
                    if got != want {
                        d.push(format!(
                            "{at}OPT options {} (expected {})",
                            hex(&got),
                            hex(&want)
                        ));
                    }
                }
            }
        }
    }
    if m.answer {
        let got: Vec<Vec<Rr>> = sent
            .replies
            .iter()
            .map(|r| r.msg.answers.iter().map(Rr::from_record).collect())
            .collect();
        if m.extra_packets {
            let all: Vec<Rr> = got.into_iter().flatten().collect();
            let want: Vec<Rec> = e.answer.iter().flatten().cloned().collect();
            d.extend(section_diff("answer (all messages)", &want, all, m.ttl));
        } else if m.any_answer {
            let first = got.into_iter().next().unwrap_or_default();
            let ok = e
                .answer
                .iter()
                .any(|alt| section_diff("answer", alt, first.clone(), m.ttl).is_empty());
            if !ok {
                d.push(format!(
                    "answer matches none of the {} alternatives: {}",
                    e.answer.len(),
                    if first.is_empty() {
                        "(empty)".to_string()
                    } else {
                        first
                            .iter()
                            .map(|r| r.to_string())
                            .collect::<Vec<_>>()
                            .join(" | ")
                    }
                ));
            }
        } else {
            if got.len() != e.answer.len() {
                d.push(format!(
                    "{} messages, the scenario expects {}",
                    got.len(),
                    e.answer.len()
                ));
            }
            for (i, (want, got)) in e.answer.iter().zip(got).enumerate() {
                let what = if e.answer.len() > 1 || many {
                    format!("message {} answer", i + 1)
                } else {
                    "answer".into()
                };
                d.extend(section_diff(&what, want, got, m.ttl));
            }
        }
    }
    d
}

fn check_header(e: &Entry, r: &Msg) -> Vec<String> {
    let m = &e.matches;
    let h = &r.head;
    let mut d = Vec::new();
    let f = h.flags;
    for (want, bit, n) in [
        (m.ad, 0x0020, "AD"),
        (m.cd, 0x0010, "CD"),
        (m.rd, 0x0100, "RD"),
    ] {
        if want && f & bit == 0 {
            d.push(format!("flag {n} not set"));
        }
    }
    if m.do_bit && h.opt.as_ref().is_none_or(|o| o.flags & 0x8000 == 0) {
        d.push("DO not set".into());
    }
    if m.flags {
        let rp = &e.reply;
        for (want, bit, n) in [
            (rp.qr, 0x8000, "QR"),
            (rp.aa, 0x0400, "AA"),
            (rp.tc, 0x0200, "TC"),
            (rp.ra, 0x0080, "RA"),
            (rp.rd, 0x0100, "RD"),
            (rp.ad, 0x0020, "AD"),
            (rp.cd, 0x0010, "CD"),
        ] {
            let got = f & bit != 0;
            if got != want {
                d.push(format!(
                    "flag {n} {} (expected {})",
                    if got { "set" } else { "clear" },
                    if want { "set" } else { "clear" }
                ));
            }
        }
    }
    if m.opcode {
        let want = if e.reply.notify {
            4
        } else {
            e.opcode.unwrap_or(0)
        };
        if h.opcode() != want {
            d.push(format!("opcode {} (expected {want})", h.opcode()));
        }
    }
    if (m.qname || m.qtype)
        && let Some(wq) = e.question.first()
    {
        for q in r.msg.queries.iter() {
            let name = q.name().to_ascii();
            let want = absolute(&wq.name, ".");
            if m.qname && !name.eq_ignore_ascii_case(&want) {
                d.push(format!("question name {name} (expected {want})"));
            }
            let qt: u16 = q.query_type().into();
            if m.qtype && qt != wq.qtype {
                d.push(format!(
                    "question type {} (expected {})",
                    type_name(qt),
                    type_name(wq.qtype)
                ));
            }
        }
    }
    if m.rcode
        && let Some(rc) = e.reply.rcode
        && h.rcode() != rc
    {
        d.push(format!(
            "rcode {} (expected {})",
            rcode_name(h.rcode()),
            rcode_name(rc)
        ));
    }
    d
}

/// Multiset comparison of a section: every record must match one expected record and the
/// counts must agree. A TTL is compared where the scenario wrote one (or under `MATCH ttl`).
fn section_diff(what: &str, want: &[Rec], got: Vec<Rr>, match_ttl: bool) -> Vec<String> {
    let mut left: Vec<&Rec> = want.iter().collect();
    let mut extra = Vec::new();
    for g in got {
        let pos = left.iter().position(|w| {
            w.rr.owner == g.owner
                && w.rr.rtype == g.rtype
                && w.rr.class == g.class
                && w.rr.rdata == g.rdata
                && (!(w.ttl_given || match_ttl) || w.rr.ttl == g.ttl)
        });
        match pos {
            Some(p) => {
                left.swap_remove(p);
            }
            None => extra.push(g),
        }
    }
    let mut d: Vec<String> = extra
        .iter()
        .map(|g| format!("{what}: unexpected {g}"))
        .collect();
    d.extend(left.iter().map(|w| format!("{what}: missing {}", w.line)));
    d
}

// ---------------------------------------------------------------------------------------
// TSIG (RFC 8945) with HMAC-SHA256

/// A TSIG record read from a message.
#[derive(Debug, Clone)]
struct Tsig {
    /// The owner (key name) in wire form, lower case.
    key_wire: Vec<u8>,
    /// The owner, printable.
    key_text: Vec<u8>,
    class: u16,
    ttl: u32,
    alg_wire: Vec<u8>,
    time: u64,
    fudge: u16,
    mac: Vec<u8>,
    orig_id: u16,
    error: u16,
    other: Vec<u8>,
    /// Where the record starts in the message.
    start: usize,
}

/// Reads a name at `p` (following compression): (lower-case wire form, offset after it).
fn read_name(b: &[u8], mut p: usize) -> Option<(Vec<u8>, usize)> {
    let mut out = Vec::new();
    let mut end = None;
    for _ in 0..128 {
        let l = *b.get(p)? as usize;
        if l & 0xC0 == 0xC0 {
            let q = ((l & 0x3F) << 8) | *b.get(p + 1)? as usize;
            end.get_or_insert(p + 2);
            p = q;
            continue;
        }
        out.push(l as u8);
        if l == 0 {
            return Some((out, end.unwrap_or(p + 1)));
        }
        out.extend(b.get(p + 1..p + 1 + l)?.iter().map(u8::to_ascii_lowercase));
        p += 1 + l;
    }
    None
}

fn wire_to_text(w: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut p = 0;
    while p < w.len() && w[p] != 0 {
        let l = w[p] as usize;
        out.extend_from_slice(&w[p + 1..p + 1 + l]);
        out.push(b'.');
        p += 1 + l;
    }
    if out.is_empty() {
        out.push(b'.');
    }
    out
}

/// The fields of a TSIG RDATA (`start` is where the RDATA starts in `b`).
fn parse_tsig_rdata(b: &[u8], start: usize) -> Option<Tsig> {
    let (alg_wire, mut p) = read_name(b, start)?;
    let u16_at =
        |p: usize| -> Option<u16> { Some(u16::from_be_bytes([*b.get(p)?, *b.get(p + 1)?])) };
    let t = b.get(p..p + 6)?;
    let time = t.iter().fold(0u64, |a, &x| (a << 8) | x as u64);
    p += 6;
    let fudge = u16_at(p)?;
    let mac_len = u16_at(p + 2)? as usize;
    let mac = b.get(p + 4..p + 4 + mac_len)?.to_vec();
    p += 4 + mac_len;
    let orig_id = u16_at(p)?;
    let error = u16_at(p + 2)?;
    let olen = u16_at(p + 4)? as usize;
    let other = b.get(p + 6..p + 6 + olen)?.to_vec();
    Some(Tsig {
        key_wire: Vec::new(),
        key_text: Vec::new(),
        class: 255,
        ttl: 0,
        alg_wire,
        time,
        fudge,
        mac,
        orig_id,
        error,
        other,
        start: 0,
    })
}

/// The TSIG of a message (the last record of its additional section), if it has one.
fn tsig_of(b: &[u8]) -> Result<Option<Tsig>, String> {
    let h = RawMsg::parse(b)?;
    let total = h.counts[1] as usize + h.counts[2] as usize + h.counts[3] as usize;
    if h.counts[3] == 0 {
        return Ok(None);
    }
    let mut p = 12 + h.question.len();
    let mut last = None;
    for _ in 0..total {
        let start = p;
        let (owner, q) = read_name(b, p).ok_or("a record does not parse")?;
        let f = b.get(q..q + 10).ok_or("a record runs past the end")?;
        let rtype = u16::from_be_bytes([f[0], f[1]]);
        let class = u16::from_be_bytes([f[2], f[3]]);
        let ttl = u32::from_be_bytes([f[4], f[5], f[6], f[7]]);
        let rdlen = u16::from_be_bytes([f[8], f[9]]) as usize;
        p = q + 10 + rdlen;
        last = Some((start, owner, rtype, class, ttl, q + 10));
    }
    let Some((start, owner, rtype, class, ttl, rd)) = last else {
        return Ok(None);
    };
    if rtype != 250 {
        return Ok(None);
    }
    let mut t = parse_tsig_rdata(b, rd).ok_or("the TSIG RDATA does not parse")?;
    t.key_text = wire_to_text(&owner);
    t.key_wire = owner;
    t.class = class;
    t.ttl = ttl;
    t.start = start;
    Ok(Some(t))
}

/// What a message's TSIG says: (key name, time signed, error, other data, MAC length).
pub fn tsig_summary(msg: &[u8]) -> Option<(String, u64, u16, Vec<u8>, usize)> {
    let t = tsig_of(msg).ok()??;
    Some((
        String::from_utf8_lossy(&t.key_text).into_owned(),
        t.time,
        t.error,
        t.other,
        t.mac.len(),
    ))
}

/// The query a QUERY entry describes, as written (no OPT added, a TSIG record left as the
/// scenario wrote it, after the others), with `id`: to send it unmapped.
pub fn literal_query(e: &Entry, id: u16) -> Vec<u8> {
    let mut m = id.to_be_bytes().to_vec();
    let mut flags = (e.opcode.unwrap_or(0) as u16 & 0xF) << 11;
    if e.reply.rd {
        flags |= 0x0100;
    }
    m.extend_from_slice(&flags.to_be_bytes());
    m.extend_from_slice(&(e.question.len() as u16).to_be_bytes());
    m.extend_from_slice(&[0, 0, 0, 0]);
    m.extend_from_slice(&(e.additional.len() as u16).to_be_bytes());
    for q in &e.question {
        m.extend_from_slice(&name_to_wire(&q.name));
        m.extend_from_slice(&q.qtype.to_be_bytes());
        m.extend_from_slice(&q.qclass.to_be_bytes());
    }
    let mut recs: Vec<&Rec> = e.additional.iter().filter(|r| r.rr.rtype != 250).collect();
    recs.extend(e.additional.iter().filter(|r| r.rr.rtype == 250));
    for r in recs {
        m.extend_from_slice(&name_to_wire(&r.rr.owner));
        m.extend_from_slice(&r.rr.rtype.to_be_bytes());
        m.extend_from_slice(&r.rr.class.to_be_bytes());
        m.extend_from_slice(&r.rr.ttl.to_be_bytes());
        m.extend_from_slice(&(r.rr.rdata.len() as u16).to_be_bytes());
        m.extend_from_slice(&r.rr.rdata);
    }
    m
}

/// The MAC of RFC 8945 §4.3.3 over `msg` (without its TSIG, ARCOUNT not counting it, with
/// the original ID), preceded by the request MAC for a response.
#[allow(clippy::too_many_arguments)]
fn tsig_mac(
    k: &TsigKey,
    request_mac: Option<&[u8]>,
    msg: &[u8],
    alg_wire: &[u8],
    time: u64,
    fudge: u16,
    error: u16,
    other: &[u8],
) -> Vec<u8> {
    let mut d = Vec::new();
    if let Some(rm) = request_mac {
        d.extend_from_slice(&(rm.len() as u16).to_be_bytes());
        d.extend_from_slice(rm);
    }
    d.extend_from_slice(msg);
    let key_wire = name_to_wire(&k.name.to_ascii_lowercase());
    d.extend_from_slice(&key_wire);
    d.extend_from_slice(&255u16.to_be_bytes());
    d.extend_from_slice(&0u32.to_be_bytes());
    d.extend_from_slice(&alg_wire.to_ascii_lowercase());
    d.extend_from_slice(&time.to_be_bytes()[2..8]);
    d.extend_from_slice(&fudge.to_be_bytes());
    d.extend_from_slice(&error.to_be_bytes());
    d.extend_from_slice(&(other.len() as u16).to_be_bytes());
    d.extend_from_slice(other);
    hmac_sha256(&k.secret, &d).to_vec()
}

const HMAC_SHA256: &[u8] = b"\x0bhmac-sha256\x00";

/// Signs `m` (its ID is the original ID) with `k` at `time`: appends the TSIG; the MAC.
fn sign(m: &mut Vec<u8>, k: &TsigKey, time: u64, fudge: u16) -> Vec<u8> {
    let mac = tsig_mac(k, None, m, HMAC_SHA256, time, fudge, 0, &[]);
    let mut rd = HMAC_SHA256.to_vec();
    rd.extend_from_slice(&time.to_be_bytes()[2..8]);
    rd.extend_from_slice(&fudge.to_be_bytes());
    rd.extend_from_slice(&(mac.len() as u16).to_be_bytes());
    rd.extend_from_slice(&mac);
    rd.extend_from_slice(&m[0..2]);
    rd.extend_from_slice(&[0, 0, 0, 0]);
    m.extend_from_slice(&name_to_wire(&k.name));
    m.extend_from_slice(&250u16.to_be_bytes());
    m.extend_from_slice(&255u16.to_be_bytes());
    m.extend_from_slice(&0u32.to_be_bytes());
    m.extend_from_slice(&(rd.len() as u16).to_be_bytes());
    m.extend_from_slice(&rd);
    let ar = u16::from_be_bytes([m[10], m[11]]) + 1;
    m[10..12].copy_from_slice(&ar.to_be_bytes());
    mac
}

/// Compares a reply's TSIG with the one the scenario wrote: key, class, TTL, algorithm,
/// fudge, error, other data and original ID as written; the time near the mapped time; the
/// MAC verified (it cannot equal the scenario's, which covers a time of 0).
fn tsig_diff(w: &Rec, t: &Tsig, r: &Msg, sent: &Sent, i: usize, opts: &RunOpts) -> Vec<String> {
    let mut d = Vec::new();
    let Some(want) = parse_tsig_rdata(&w.rr.rdata, 0) else {
        return vec!["the scenario's TSIG RDATA does not parse".into()];
    };
    let owner = name_to_wire(&w.rr.owner);
    if t.key_wire != owner {
        d.push(format!(
            "TSIG key {} (expected {})",
            String::from_utf8_lossy(&t.key_text),
            w.rr.owner
        ));
    }
    if (t.class, t.ttl) != (w.rr.class, w.rr.ttl) {
        d.push(format!(
            "TSIG class {} TTL {} (expected {} {})",
            t.class, t.ttl, w.rr.class, w.rr.ttl
        ));
    }
    if t.alg_wire != want.alg_wire.to_ascii_lowercase() {
        d.push("TSIG algorithm differs".into());
    }
    if (t.fudge, t.error, &t.other) != (want.fudge, want.error, &want.other) {
        d.push(format!(
            "TSIG fudge {} error {} other {} (expected {} {} {})",
            t.fudge,
            t.error,
            hex(&t.other),
            want.fudge,
            want.error,
            hex(&want.other)
        ));
    }
    let qid = u16::from_be_bytes([sent.query[0], sent.query[1]]);
    if t.orig_id != qid {
        d.push(format!("TSIG original ID {} (expected {qid})", t.orig_id));
    }
    if t.time.abs_diff(sent.signed_at) > 5 {
        d.push(format!(
            "TSIG time {} is not the (mapped) time {} of the query",
            t.time, sent.signed_at
        ));
    }
    // The MAC (§5.3): the request MAC, then the reply without its TSIG, with the original ID.
    let key = match &sent.signed {
        Some((_, k)) => Some(k.clone()),
        None => opts
            .keys
            .iter()
            .find(|k| name_to_wire(&k.name.to_ascii_lowercase()) == t.key_wire)
            .cloned(),
    };
    match key {
        None => d.push("no key to verify the reply's TSIG with".into()),
        Some(k) if i == 0 => {
            let mut msg = r.raw[..t.start].to_vec();
            msg[0..2].copy_from_slice(&t.orig_id.to_be_bytes());
            let ar = u16::from_be_bytes([msg[10], msg[11]]) - 1;
            msg[10..12].copy_from_slice(&ar.to_be_bytes());
            let req = sent.signed.as_ref().map(|(m, _)| m.as_slice());
            let mac = tsig_mac(
                &k,
                req,
                &msg,
                &t.alg_wire,
                t.time,
                t.fudge,
                t.error,
                &t.other,
            );
            if mac != t.mac {
                d.push(format!(
                    "TSIG MAC {} does not verify (expected {})",
                    hex(&t.mac),
                    hex(&mac)
                ));
            }
        }
        Some(_) => {}
    }
    d
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// HMAC-SHA256 (RFC 2104), for TSIG MACs.
pub fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    use hmac::{Hmac, Mac};
    let mut m = Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(data);
    m.finalize().into_bytes().into()
}

/// A one-line summary per outcome, and a count line: for printing.
pub fn report(scenario: &str, target: &str, outcomes: &[Outcome]) -> String {
    let mut s = String::new();
    let (mut ok, mut differ, mut skipped) = (0, 0, 0);
    for o in outcomes {
        let state = if let Some(why) = &o.skipped {
            skipped += 1;
            format!("not run: {why}")
        } else if o.diffs.is_empty() {
            ok += 1;
            "matches".to_string()
        } else {
            differ += 1;
            format!("DIFFERS:\n      {}", o.diffs.join("\n      "))
        };
        s.push_str(&format!(
            "{scenario} [{target}] step {} / {}: {state}\n",
            o.query_step, o.check_step
        ));
        for n in &o.notes {
            s.push_str(&format!("      note: {n}\n"));
        }
        if !o.diffs.is_empty() && !o.got.is_empty() {
            s.push_str(&format!("      got: {}\n", o.got.replace('\n', "\n      ")));
        }
    }
    s.push_str(&format!(
        "{scenario} [{target}]: {ok} matched, {differ} differ, {skipped} not run\n"
    ));
    s
}

/// The outcomes by CHECK_ANSWER step.
pub fn by_step(outcomes: &[Outcome]) -> BTreeMap<u64, &Outcome> {
    outcomes.iter().map(|o| (o.check_step, o)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_known_answer() {
        // RFC 4231 test case 2.
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn records_and_entries_parse() {
        let r = parse_record("SRI-NIC.ARPA. 86400 IN MX 0 SRI-NIC.ARPA", ".").unwrap();
        assert!(r.ttl_given);
        assert_eq!(r.rr.owner, "sri-nic.arpa.");
        assert_eq!(r.rr.rdata, b"\x00\x00\x07sri-nic\x04arpa\x00".to_vec());
        let r = parse_record("A.ISI.EDU. A 26.3.0.103", ".").unwrap();
        assert!(!r.ttl_given);
        assert_eq!(r.rr.rdata, vec![26, 3, 0, 103]);
        let r = parse_record("txt0001 3600 IN CNAME some.name.", "example.com.").unwrap();
        assert_eq!(r.rr.owner, "txt0001.example.com.");
        let r = parse_record("TESTKEY 0 CLASS255 TYPE250 \\# 3 01 0203", ".").unwrap();
        assert_eq!(
            (r.rr.class, r.rr.rtype, r.rr.rdata.clone()),
            (255, 250, vec![1, 2, 3])
        );
        let r = parse_record("com. 86400 IN DS 370 13 2 BE74 3599", ".").unwrap();
        assert_eq!(r.rr.rdata, vec![1, 114, 13, 2, 0xBE, 0x74, 0x35, 0x99]);
        let r = parse_record("test. IN TXT \"te;st\"", ".").unwrap();
        assert_eq!(r.rr.rtype, 16);
        let s = Scenario::parse(
            "x.rpl",
            Path::new("."),
            "server:\n  local-data: \"a. 1 IN SOA a. b. 1 2 3 4 5\"\nCONFIG_END\nSCENARIO_BEGIN x\n\
             STEP 1 QUERY ADDRESS 127.0.0.2\nENTRY_BEGIN\nMATCH TCP\nSECTION QUESTION\na. IN AXFR\nENTRY_END\n\
             STEP 2 CHECK_ANSWER\nENTRY_BEGIN\nMATCH all ANY_ANSWER\nREPLY QR AA BADCOOKIE\nSECTION QUESTION\n\
             a. IN A\nSECTION ANSWER\na. A 1.2.3.4\nEXTRA_PACKET\na. A 1.2.3.5\nSECTION ADDITIONAL\n\
             HEX_EDNSDATA_BEGIN\n00 0a ; code\n00 00\nHEX_EDNSDATA_END\nENTRY_END\nSCENARIO_END\n",
        )
        .unwrap();
        assert_eq!(s.steps.len(), 2);
        let StepKind::CheckAnswer(e) = &s.steps[1].kind else {
            panic!("not a check")
        };
        assert_eq!(e.answer.len(), 2);
        assert_eq!(e.reply.rcode, Some(23));
        assert_eq!(e.edns_data, Some(vec![0, 10, 0, 0]));
        assert!(e.matches.any_answer && e.matches.additional);
        assert_eq!(
            soa_owner(&s.server_config().local_data.join("\n")).as_deref(),
            Some("a.")
        );
    }
}
