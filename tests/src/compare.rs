//! Responses normalised for comparison: (rcode, AA, TC, answer, authority, additional),
//! sections as sets of records with lower-case owners, TTLs kept and RDATA in canonical
//! wire form (RFC 4034 §6.2: names uncompressed and lower-cased), and readable differences.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use hickory_proto::rr::Record;
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder};

use crate::client::Reply;
use crate::wire::{RawOpt, flag, rcode_name, type_name};

/// One record, normalised. Equality and order ignore `text`.
#[derive(Debug, Clone)]
pub struct Rr {
    /// Owner name, lower case, with its trailing dot.
    pub owner: String,
    /// Record type.
    pub rtype: u16,
    /// Class.
    pub class: u16,
    /// TTL.
    pub ttl: u32,
    /// RDATA in canonical wire form.
    pub rdata: Vec<u8>,
    /// Presentation form of the RDATA, for printing.
    pub text: String,
}

impl Rr {
    /// Normalises a hickory-proto record.
    pub fn from_record(r: &Record) -> Rr {
        let mut rdata = Vec::new();
        {
            let mut enc = BinEncoder::new(&mut rdata);
            enc.set_canonical_form(true);
            if r.data.emit(&mut enc).is_err() {
                rdata = format!("unencodable: {}", r.data).into_bytes();
            }
        }
        Rr {
            owner: r.name.to_ascii().to_ascii_lowercase(),
            rtype: r.record_type().into(),
            class: r.dns_class.into(),
            ttl: r.ttl,
            rdata,
            text: r.data.to_string(),
        }
    }

    fn key(&self) -> (&str, u16, u16, u32, &[u8]) {
        (&self.owner, self.rtype, self.class, self.ttl, &self.rdata)
    }

    /// The same record without its TTL (TTL 0), for TTL-blind comparisons.
    pub fn without_ttl(&self) -> Rr {
        Rr {
            ttl: 0,
            ..self.clone()
        }
    }
}

impl PartialEq for Rr {
    fn eq(&self, o: &Self) -> bool {
        self.key() == o.key()
    }
}
impl Eq for Rr {}
impl PartialOrd for Rr {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Rr {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.key().cmp(&o.key())
    }
}

impl fmt::Display for Rr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let class = if self.class == 1 {
            "IN".to_string()
        } else {
            format!("CLASS{}", self.class)
        };
        write!(
            f,
            "{} {} {class} {} {}",
            self.owner,
            self.ttl,
            type_name(self.rtype),
            self.text
        )
    }
}

/// A section as a set of records.
pub type Section = BTreeSet<Rr>;

/// A response reduced to what the comparisons look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized {
    /// The full rcode (header and OPT).
    pub rcode: u16,
    /// Authoritative answer.
    pub aa: bool,
    /// Truncated.
    pub tc: bool,
    /// Answer section.
    pub answer: Section,
    /// Authority section.
    pub authority: Section,
    /// Additional section without the OPT.
    pub additional: Section,
    /// The OPT record, if any.
    pub opt: Option<RawOpt>,
    /// The question section was echoed byte for byte (exact case).
    pub question_exact: bool,
}

impl Normalized {
    /// Normalises a reply.
    pub fn from_reply(r: &Reply) -> Normalized {
        let set = |rs: &[Record]| rs.iter().map(Rr::from_record).collect::<Section>();
        Normalized {
            rcode: r.head.rcode(),
            aa: r.head.has(flag::AA),
            tc: r.head.has(flag::TC),
            answer: set(&r.msg.answers),
            authority: set(&r.msg.authorities),
            additional: set(&r.msg.additionals),
            opt: r.head.opt.clone(),
            question_exact: r.head.question == crate::wire::question_of(&r.query),
        }
    }

    /// The value of one aspect, printed.
    pub fn show(&self, a: Aspect) -> String {
        match a {
            Aspect::Rcode => rcode_name(self.rcode),
            Aspect::Aa => self.aa.to_string(),
            Aspect::Tc => self.tc.to_string(),
            Aspect::Answer => show_section(&self.answer),
            Aspect::Authority => show_section(&self.authority),
            Aspect::Additional => show_section(&self.additional),
            Aspect::Opt => match &self.opt {
                None => "no OPT".into(),
                Some(o) => format!(
                    "OPT v{} size {} flags {:#06x} options {:?}",
                    o.version,
                    o.udp_size,
                    o.flags,
                    o.options.iter().map(|(c, _)| *c).collect::<Vec<_>>()
                ),
            },
        }
    }

    /// True when both agree on aspect `a` (OPT: presence, version and payload size).
    pub fn same(&self, o: &Normalized, a: Aspect) -> bool {
        match a {
            Aspect::Rcode => self.rcode == o.rcode,
            Aspect::Aa => self.aa == o.aa,
            Aspect::Tc => self.tc == o.tc,
            Aspect::Answer => self.answer == o.answer,
            Aspect::Authority => self.authority == o.authority,
            Aspect::Additional => self.additional == o.additional,
            Aspect::Opt => {
                let k = |n: &Normalized| n.opt.as_ref().map(|x| (x.version, x.udp_size));
                k(self) == k(o)
            }
        }
    }
}

fn show_section(s: &Section) -> String {
    if s.is_empty() {
        return "(empty)".into();
    }
    s.iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join(" | ")
}

impl fmt::Display for Normalized {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "  rcode {} aa {} tc {} {}",
            rcode_name(self.rcode),
            self.aa,
            self.tc,
            self.show(Aspect::Opt)
        )?;
        for (name, s) in [
            ("answer", &self.answer),
            ("authority", &self.authority),
            ("additional", &self.additional),
        ] {
            for r in s {
                writeln!(f, "  {name:<10} {r}")?;
            }
        }
        Ok(())
    }
}

/// What can be compared about two responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Aspect {
    /// The rcode.
    Rcode,
    /// The AA bit.
    Aa,
    /// The TC bit.
    Tc,
    /// The answer section as a set.
    Answer,
    /// The authority section as a set.
    Authority,
    /// The additional section as a set.
    Additional,
    /// OPT presence, version and payload size.
    Opt,
}

impl Aspect {
    /// Every aspect, in report order.
    pub const ALL: [Aspect; 7] = [
        Aspect::Rcode,
        Aspect::Aa,
        Aspect::Tc,
        Aspect::Answer,
        Aspect::Authority,
        Aspect::Additional,
        Aspect::Opt,
    ];
}

impl fmt::Display for Aspect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Aspect::Rcode => "rcode",
            Aspect::Aa => "AA",
            Aspect::Tc => "TC",
            Aspect::Answer => "answer",
            Aspect::Authority => "authority",
            Aspect::Additional => "additional",
            Aspect::Opt => "OPT",
        })
    }
}

/// Readable lines of what differs between `a` (called `an`) and `b` (called `bn`).
pub fn diff(an: &str, a: &Normalized, bn: &str, b: &Normalized) -> Vec<String> {
    let mut out = Vec::new();
    for asp in [Aspect::Rcode, Aspect::Aa, Aspect::Tc, Aspect::Opt] {
        if !a.same(b, asp) {
            out.push(format!(
                "{asp}: {an} {} / {bn} {}",
                a.show(asp),
                b.show(asp)
            ));
        }
    }
    for (asp, x, y) in [
        (Aspect::Answer, &a.answer, &b.answer),
        (Aspect::Authority, &a.authority, &b.authority),
        (Aspect::Additional, &a.additional, &b.additional),
    ] {
        out.extend(section_diff(&asp.to_string(), an, x, bn, y));
    }
    out
}

/// Lines for the records only one of two sections holds.
pub fn section_diff(what: &str, an: &str, a: &Section, bn: &str, b: &Section) -> Vec<String> {
    let mut out = Vec::new();
    for r in a.difference(b) {
        out.push(format!("{what}: only {an}: {r}"));
    }
    for r in b.difference(a) {
        out.push(format!("{what}: only {bn}: {r}"));
    }
    out
}

/// A section grouped into RRsets by (owner, type).
pub fn rrsets(s: &Section) -> BTreeMap<(String, u16), Section> {
    let mut m: BTreeMap<(String, u16), Section> = BTreeMap::new();
    for r in s {
        m.entry((r.owner.clone(), r.rtype))
            .or_default()
            .insert(r.clone());
    }
    m
}

/// RRsets of `partial` that are not whole in `full` (a truncated response must never hold
/// part of an RRset): their (owner, type) and what is missing.
pub fn partial_rrsets(partial: &Section, full: &Section) -> Vec<String> {
    let full = rrsets(full);
    let mut out = Vec::new();
    for (k, set) in rrsets(partial) {
        match full.get(&k) {
            Some(f) if f == &set => {}
            Some(f) => out.push(format!(
                "{} {}: {} of {} records",
                k.0,
                type_name(k.1),
                set.len(),
                f.len()
            )),
            None => out.push(format!(
                "{} {}: not in the full response",
                k.0,
                type_name(k.1)
            )),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rr(owner: &str, rtype: u16, rdata: &[u8]) -> Rr {
        Rr {
            owner: owner.into(),
            rtype,
            class: 1,
            ttl: 60,
            rdata: rdata.to_vec(),
            text: String::new(),
        }
    }

    #[test]
    fn partial_rrsets_are_found() {
        let full: Section = [rr("a.", 16, b"1"), rr("a.", 16, b"2"), rr("b.", 1, b"x")].into();
        let whole: Section = [rr("b.", 1, b"x")].into();
        let part: Section = [rr("a.", 16, b"1"), rr("b.", 1, b"x")].into();
        assert!(partial_rrsets(&whole, &full).is_empty());
        assert_eq!(partial_rrsets(&part, &full).len(), 1);
        assert_eq!(section_diff("answer", "x", &part, "y", &whole).len(), 1);
    }

    #[test]
    fn records_normalise_case_and_compression() {
        use hickory_proto::rr::{Name, RData, rdata::CNAME};
        let upper = Record::from_rdata(
            Name::from_ascii("WWW.Example.COM.").unwrap(),
            60,
            RData::CNAME(CNAME(Name::from_ascii("Host.EXAMPLE.com.").unwrap())),
        );
        let lower = Record::from_rdata(
            Name::from_ascii("www.example.com.").unwrap(),
            60,
            RData::CNAME(CNAME(Name::from_ascii("host.example.com.").unwrap())),
        );
        assert_eq!(Rr::from_record(&upper), Rr::from_record(&lower));
        assert_eq!(Rr::from_record(&upper).owner, "www.example.com.");
    }
}
