//! Differential test: the same zones in dnsd, Knot DNS and NSD, a few hundred queries, the
//! answers compared.
//!
//! Rcode, AA and TC are compared exactly, the answer and authority sections as sets (owner
//! names lower-cased, TTLs kept, RDATA in canonical wire form), the additional section
//! loosely (ours ⊆ Knot's ∪ NSD's; referral glue both give must be ours too), OPT by
//! presence and version. Where Knot and NSD agree and dnsd differs, the test fails; where
//! Knot and NSD disagree with each other, the disagreement is recorded in a table and dnsd
//! is only reported against each. Every query name is sent in mixed case, and the question
//! must come back byte for byte.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;

use palisade_tests::client::{self, Reply};
use palisade_tests::compare::{Aspect, Normalized, diff, partial_rrsets, section_diff};
use palisade_tests::rng::Rng;
use palisade_tests::servers::{Dnsd, Knot, Nsd, Zone};
use palisade_tests::wire::{QueryOpts, build_query, qtype as T, rcode_name, type_name};

/// The seed of the case mixing: fixed, so that a failure can be replayed.
const SEED: u64 = 0x5EED_0FD1_FF00;

fn zones() -> Vec<Zone> {
    vec![
        Zone::data("example.com."),
        Zone::data("example.net."),
        Zone::data("child.example.com."),
    ]
}

/// dnsd and whichever reference servers are installed; `None` (after SKIPPED) when none.
struct Trio {
    dnsd: Dnsd,
    knot: Option<Knot>,
    nsd: Option<Nsd>,
}

impl Trio {
    fn start() -> Option<Trio> {
        let (k, n) = (Knot::available(), Nsd::available());
        if !k && !n {
            palisade_tests::skipped(
                "neither knotd nor nsd is installed: no oracle for the differential test",
            );
            assert!(
                !palisade_tests::in_ci(),
                "CI must have knotd and nsd (scripts/install-deps)"
            );
            return None;
        }
        if !k {
            palisade_tests::skipped("knotd not installed: comparing with NSD alone");
        }
        if !n {
            palisade_tests::skipped("nsd not installed: comparing with Knot alone");
        }
        let z = zones();
        Some(Trio {
            // Rate limiting off, as in the references (NSD's rrl-ratelimit 0, Knot without
            // mod-rrl): this compares answers, and four transports of every case from one
            // source would otherwise meet RRL's slip and drop.
            dnsd: Dnsd::builder()
                .zones(&z)
                .raw("[defence.rrl]\nenabled = false")
                .start(),
            knot: k.then(|| Knot::start(&z)),
            nsd: n.then(|| Nsd::start(&z)),
        })
    }

    fn refs(&self) -> Vec<(&'static str, SocketAddr)> {
        let mut v = Vec::new();
        if let Some(k) = &self.knot {
            v.push(("knot", k.addr()));
        }
        if let Some(n) = &self.nsd {
            v.push(("nsd", n.addr()));
        }
        v
    }
}

/// One question of the test.
#[derive(Debug, Clone)]
struct Case {
    cat: &'static str,
    name: String,
    qtype: u16,
    qclass: u16,
    /// A dnsd bug this case shows (reported to the owner of dnsd): the case still fails.
    bug: Option<&'static str>,
}

fn c(cat: &'static str, name: &str, qtype: u16) -> Case {
    Case {
        cat,
        name: name.to_string(),
        qtype,
        qclass: 1,
        bug: None,
    }
}

impl Case {
    fn class(mut self, qclass: u16) -> Case {
        self.qclass = qclass;
        self
    }
}

/// Categories whose differences are recorded but never fail: server identity queries are
/// deployment policy (RFC 4892), not protocol.
const INFORMATIONAL: &[&str] = &["chaos"];

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    let com = |n: &str| {
        if n.is_empty() {
            "example.com.".to_string()
        } else {
            format!("{n}.example.com.")
        }
    };
    // Exact matches and NODATA at existing names.
    for t in [
        T::SOA,
        T::NS,
        T::MX,
        T::TXT,
        T::CAA,
        T::A,
        T::AAAA,
        T::DS,
        T::DNAME,
    ] {
        v.push(c("exact", &com(""), t));
    }
    for (n, t) in [
        ("www", T::A),
        ("www", T::AAAA),
        ("www", T::TXT),
        ("www", T::CNAME),
        ("www", T::MX),
        ("www", 1000),
        ("ttl60", T::A),
        ("mixed-case", T::A),
        ("ns1", T::A),
        ("ns1", T::AAAA),
        ("ns2", T::AAAA),
        ("sip", T::AAAA),
        ("www", T::RRSIG),
    ] {
        v.push(c("exact", &com(n), t));
    }
    for (n, t) in [
        ("example.net.", T::SOA),
        ("example.net.", T::A),
        ("www.example.net.", T::A),
        ("www.example.net.", T::AAAA),
    ] {
        v.push(c("exact", n, t));
    }
    // CNAME chains.
    for (n, t) in [
        ("a1", T::A),
        ("a1", T::TXT),
        ("a1", T::AAAA),
        ("a1", T::CNAME),
        ("a2", T::A),
        ("alias", T::A),
        ("alias", T::AAAA),
        ("alias", T::MX),
        ("alias-case", T::A),
        ("to-net", T::A),
        ("to-net-nx", T::A),
        ("to-org", T::A),
        ("to-child", T::A),
        ("to-deleg", T::A),
        ("to-wild", T::A),
        ("to-nx", T::A),
        ("to-ns2", T::AAAA),
        ("to-mx", T::MX),
        ("loop1", T::A),
        ("loop2", T::AAAA),
        ("self", T::A),
        ("c1", T::A),
        ("c5", T::A),
        ("c9", T::A),
    ] {
        v.push(c("cname", &com(n), t));
    }
    v.push(c("cname", "alias.example.net.", T::A));
    // DNAME substitution.
    for (n, t) in [
        ("www.old", T::A),
        ("www.old", T::AAAA),
        ("old", T::DNAME),
        ("old", T::A),
        ("nx.old", T::A),
        ("a.www.old", T::A),
        ("mail.old", T::MX),
        ("www.d1", T::A),
        ("d1", T::DNAME),
        ("www.dnet", T::A),
        ("nothere.dnet", T::A),
        ("www.dorg", T::A),
        ("www.new", T::A),
        (
            "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.dlong",
            T::A,
        ),
        ("short.dlong", T::A),
        // A CNAME query below a DNAME: the DNAME and the synthesised CNAME answer it, with
        // nothing chased and nothing in authority (RFC 6672 §3), into this zone, another
        // served one, and one not served.
        ("www.old", T::CNAME),
        ("nx.old", T::CNAME),
        ("www.d1", T::CNAME),
        ("www.dnet", T::CNAME),
        ("nothere.dnet", T::CNAME),
        ("www.dorg", T::CNAME),
    ] {
        v.push(c("dname", &com(n), t));
    }
    // Wildcards and the closest encloser.
    for (n, t) in [
        ("foo.wild", T::A),
        ("foo.wild", T::TXT),
        ("foo.wild", T::MX),
        ("foo.bar.wild", T::A),
        ("exists.wild", T::A),
        ("exists.wild", T::TXT),
        ("x.exists.wild", T::A),
        ("ent.wild", T::A),
        ("foo.ent.wild", T::A),
        ("a.ent.wild", T::A),
        ("wild", T::A),
        ("*.wild", T::A),
        ("foo.wc", T::A),
        ("foo.wc", T::CNAME),
        ("foo.wc", T::AAAA),
        ("foo.wcnx", T::A),
        ("foo.wmx", T::MX),
        ("a.b.wmx", T::MX),
    ] {
        v.push(c("wildcard", &com(n), t));
    }
    // Delegations: referrals, DS on the parent side.
    for (n, t) in [
        ("deleg", T::A),
        ("deleg", T::NS),
        ("deleg", T::SOA),
        ("host.deleg", T::A),
        ("a.b.deleg", T::AAAA),
        ("ns1.deleg", T::A),
        ("deleg", T::DS),
        ("x.deleg", T::DS),
        ("nods", T::DS),
        ("nods", T::A),
        ("outdeleg", T::A),
        ("sibling", T::A),
        ("sibling", T::NS),
    ] {
        v.push(c("referral", &com(n), t));
    }
    // Negative answers (RFC 2308): NXDOMAIN and NODATA with the SOA and its negative TTL.
    for (n, t) in [
        ("nothere.example.com.", T::A),
        ("a.b.c.nothere.example.com.", T::AAAA),
        ("sub.example.com.", T::A),
        ("_udp.example.com.", T::A),
        ("_sip._udp.example.com.", T::A),
        ("nothere.example.net.", T::A),
        ("www.example.net.", T::TXT),
        ("example.net.", T::MX),
    ] {
        v.push(c("negative", n, t));
    }
    // Names in no zone.
    for (n, t) in [
        ("www.example.org.", T::A),
        (".", T::SOA),
        ("com.", T::NS),
        ("example.co.", T::A),
        ("org.", T::SOA),
    ] {
        v.push(c("refused", n, t));
    }
    // Additional-section processing.
    for (n, t) in [
        ("example.com.", T::NS),
        ("example.com.", T::MX),
        ("mx.example.com.", T::MX),
        ("_sip._udp.example.com.", T::SRV),
        ("_ldap._tcp.example.com.", T::SRV),
        ("example.net.", T::NS),
    ] {
        v.push(c("additional", n, t));
    }
    // A child zone served beside its parent.
    for (n, t) in [
        ("child.example.com.", T::SOA),
        ("child.example.com.", T::NS),
        ("child.example.com.", T::A),
        ("www.child.example.com.", T::A),
        ("ns1.child.example.com.", T::A),
        ("nothere.child.example.com.", T::A),
        ("www.child.example.com.", T::DS),
    ] {
        v.push(c("child", n, t));
    }
    v.push(c("child", "child.example.com.", T::DS));
    // Minimal ANY (RFC 8482).
    v.push(c("any", "a1.example.com.", T::ANY));
    for n in [
        "www.example.com.",
        "example.com.",
        "foo.wild.example.com.",
        "nothere.example.com.",
        "deleg.example.com.",
    ] {
        v.push(c("any", n, T::ANY));
    }
    // A name whose one RRset has names: ANY answers it with its targets' addresses in
    // additional, as Knot does for MX itself (dnsd added none).
    for n in ["mx.example.com.", "foo.wmx.example.com."] {
        v.push(c("additional", n, T::ANY));
    }
    // Meta types and classes.
    v.push(c("meta", "example.com.", T::IXFR));
    v.push(c("meta", "www.example.com.", T::A).class(3));
    v.push(c("meta", "example.com.", T::AXFR));
    v.push(c("meta", "www.example.com.", T::OPT));
    for t in [253, 254] {
        v.push(c("meta", "www.example.com.", t));
    }
    v.push(c("meta", "www.example.com.", T::A).class(255));
    v.push(c("chaos", "version.bind.", T::TXT).class(3));
    v.push(c("chaos", "id.server.", T::TXT).class(3));
    v
}

/// The transports each case is asked over.
fn variants() -> Vec<(&'static str, QueryOpts)> {
    vec![
        ("udp+edns", QueryOpts::edns(1232)),
        ("udp", QueryOpts::udp()),
        ("tcp+edns", QueryOpts::edns(1232).over_tcp()),
        // DO on unsigned zones: no DS in referrals, no proofs, the same answers (RFC 4035
        // §3.1.4's rules are for signed zones).
        ("udp+edns+do", QueryOpts::edns(1232).with_do()),
    ]
}

/// What the run found.
#[derive(Default)]
struct Report {
    queries: usize,
    all_agree: usize,
    /// dnsd differs from Knot and NSD agreeing: failures (with the known bug, if marked).
    discrepancies: Vec<(Option<&'static str>, String)>,
    /// Cases marked as known bugs that matched the references after all.
    fixed: Vec<String>,
    /// Knot and NSD disagree: (category, aspect) -> lines.
    disagreements: BTreeMap<(String, String), Vec<String>>,
    /// Differences that do not fail (loose aspects).
    notes: Vec<String>,
    /// What each server gives for ANY (RFC 8482 lets each choose).
    any: Vec<String>,
}

impl Report {
    fn disagree(&mut self, cat: &str, asp: &str, line: String) {
        self.disagreements
            .entry((cat.to_string(), asp.to_string()))
            .or_default()
            .push(line);
    }

    fn print(&self, title: &str) {
        let mut s = String::new();
        let _ = writeln!(s, "\n===== {title}: summary =====");
        let _ = writeln!(
            s,
            "{} queries per server; all servers agree on {}; dnsd discrepancies: {}; \
             Knot-vs-NSD disagreements: {}; notes: {}",
            self.queries,
            self.all_agree,
            self.discrepancies.len(),
            self.disagreements.values().map(Vec::len).sum::<usize>(),
            self.notes.len()
        );
        if !self.disagreements.is_empty() {
            let _ = writeln!(
                s,
                "\n-- Knot vs NSD disagreements (recorded, not failures) --"
            );
            let _ = writeln!(s, "{:<11} {:<11} {:>5}", "category", "aspect", "count");
            for ((cat, asp), lines) in &self.disagreements {
                let _ = writeln!(s, "{cat:<11} {asp:<11} {:>5}", lines.len());
            }
            for ((cat, asp), lines) in &self.disagreements {
                for l in lines {
                    let _ = writeln!(s, "  [{cat}/{asp}] {l}");
                }
            }
        }
        if !self.any.is_empty() {
            let _ = writeln!(
                s,
                "\n-- ANY (RFC 8482 minimal answers): what each server gives --"
            );
            for l in &self.any {
                let _ = writeln!(s, "  {l}");
            }
        }
        if !self.notes.is_empty() {
            let _ = writeln!(s, "\n-- notes (loose aspects, not failures) --");
            for n in &self.notes {
                let _ = writeln!(s, "  {n}");
            }
        }
        for f in &self.fixed {
            let _ = writeln!(s, "\nknown dnsd bug no longer seen, remove its mark: {f}");
        }
        if !self.discrepancies.is_empty() {
            let _ = writeln!(
                s,
                "\n-- dnsd DISCREPANCIES (Knot and NSD agree, dnsd differs) --"
            );
            for (bug, d) in &self.discrepancies {
                if let Some(b) = bug {
                    let _ = writeln!(s, "KNOWN DNSD BUG ({b}):");
                }
                let _ = writeln!(s, "{d}");
            }
        }
        println!("{s}");
    }

    /// Fails when dnsd differed from agreeing references, known bugs included.
    fn assert_clean(&self) {
        let known = self.discrepancies.iter().filter(|d| d.0.is_some()).count();
        let unexpected = self.discrepancies.len() - known;
        assert!(
            self.discrepancies.is_empty(),
            "dnsd differs where Knot and NSD agree: {unexpected} unexpected discrepancies, {known} \
             from known dnsd bugs (reported, still failing until dnsd is fixed); see the report above"
        );
    }
}

/// The RRsets of a section as `owner TYPE×count`, for the ANY table.
fn types(s: &palisade_tests::compare::Section) -> String {
    let sets = palisade_tests::compare::rrsets(s);
    if sets.is_empty() {
        return "nothing".into();
    }
    sets.iter()
        .map(|((o, t), rs)| format!("{o} {}×{}", type_name(*t), rs.len()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn describe(case: &Case, qname: &str, var: &str) -> String {
    let class = if case.qclass == 1 {
        String::new()
    } else {
        format!(" CLASS{}", case.qclass)
    };
    format!(
        "[{}] {qname} {}{class} ({var})",
        case.cat,
        type_name(case.qtype)
    )
}

/// What each server answered (or why not).
type Answers = (
    Result<Reply, String>,
    Vec<(&'static str, Result<Reply, String>)>,
);

/// Asks every server the same bytes.
fn ask_all(trio: &Trio, q: &[u8], opts: &QueryOpts) -> Answers {
    let d = client::exchange(trio.dnsd.addr(), q, opts);
    let refs = trio
        .refs()
        .into_iter()
        .map(|(n, a)| (n, client::exchange(a, q, opts)))
        .collect();
    (d, refs)
}

/// Compares one query's answers and records the outcome; true when dnsd differs from
/// agreeing references.
fn judge(
    rep: &mut Report,
    what: &str,
    case: &Case,
    d: &Normalized,
    refs: &[(&'static str, Normalized)],
) -> bool {
    let cat = case.cat;
    rep.queries += 1;
    let mut lines = Vec::new();
    let truncated = d.tc || refs.iter().any(|(_, r)| r.tc);
    let loose_answer = cat == "any";
    let mut all_same = true;
    for asp in [
        Aspect::Rcode,
        Aspect::Aa,
        Aspect::Tc,
        Aspect::Answer,
        Aspect::Authority,
        Aspect::Opt,
    ] {
        if truncated && matches!(asp, Aspect::Answer | Aspect::Authority) {
            continue; // what a truncated response keeps is the server's choice
        }
        if loose_answer && asp == Aspect::Answer {
            continue; // checked below
        }
        let refs_agree = refs.windows(2).all(|w| w[0].1.same(&w[1].1, asp));
        let dnsd_same = refs.iter().filter(|(_, r)| d.same(r, asp)).count();
        if dnsd_same != refs.len() {
            all_same = false;
        }
        if refs_agree {
            if dnsd_same == 0 {
                lines.push(format!(
                    "{asp}: dnsd {} / reference {}",
                    d.show(asp),
                    refs[0].1.show(asp)
                ));
            }
        } else {
            all_same = false;
            let mut l = format!("{what}: ");
            for (n, r) in refs {
                let _ = write!(l, "{n}: {} ; ", r.show(asp));
            }
            let _ = write!(l, "dnsd: {}", d.show(asp));
            let m: Vec<&str> = refs
                .iter()
                .filter(|(_, r)| d.same(r, asp))
                .map(|(n, _)| *n)
                .collect();
            let _ = write!(
                l,
                " (dnsd matches {})",
                if m.is_empty() {
                    "NEITHER".into()
                } else {
                    m.join("+")
                }
            );
            rep.disagree(cat, &asp.to_string(), l);
        }
    }
    // ANY (RFC 8482): each server may pick; dnsd's RRsets must come from what the
    // references gave, whole, and be there exactly when theirs are.
    if loose_answer && !truncated {
        let mut union = palisade_tests::compare::Section::new();
        for (_, r) in refs {
            union.extend(r.answer.iter().cloned());
        }
        let extra: Vec<String> = d.answer.difference(&union).map(|r| r.to_string()).collect();
        if !extra.is_empty() {
            lines.push(format!(
                "ANY answer: dnsd has records no reference gave: {extra:?}"
            ));
        }
        if d.answer.is_empty() != refs[0].1.answer.is_empty()
            && refs
                .windows(2)
                .all(|w| w[0].1.answer.is_empty() == w[1].1.answer.is_empty())
        {
            lines.push(format!(
                "ANY answer: dnsd {} / references {}",
                d.show(Aspect::Answer),
                refs[0].1.show(Aspect::Answer)
            ));
        }
        // What each server chose to give, recorded for every ANY query.
        let mut l = format!("{what}: ");
        for (n, r) in refs {
            let _ = write!(l, "{n}: {} ; ", types(&r.answer));
        }
        let _ = write!(l, "dnsd: {}", types(&d.answer));
        rep.any.push(l);
    }
    // Additional: ours ⊆ union of theirs; referral glue that all references give is ours too.
    if !truncated {
        let mut union = palisade_tests::compare::Section::new();
        for (_, r) in refs {
            union.extend(r.additional.iter().cloned());
        }
        let extra: Vec<String> = d
            .additional
            .difference(&union)
            .map(|r| r.to_string())
            .collect();
        if !extra.is_empty() {
            lines.push(format!(
                "additional: dnsd has records no reference gave: {extra:?}"
            ));
        }
        let mut common = refs[0].1.additional.clone();
        for (_, r) in &refs[1..] {
            common = common.intersection(&r.additional).cloned().collect();
        }
        let missing: Vec<String> = common
            .difference(&d.additional)
            .map(|r| r.to_string())
            .collect();
        let referral = !d.aa && d.answer.is_empty() && d.authority.iter().any(|r| r.rtype == T::NS);
        if !missing.is_empty() {
            all_same = false;
            if referral {
                lines.push(format!("referral glue: dnsd lacks {missing:?}"));
            } else {
                rep.notes
                    .push(format!("{what}: dnsd's additional lacks {missing:?}"));
            }
        }
        // Additional-section processing proper (NS, MX, SRV targets): NSD runs with minimal
        // responses, so Knot's full additional section is the oracle here.
        if cat == "additional"
            && let Some((_, k)) = refs.iter().find(|(n, _)| *n == "knot")
        {
            let lacks: Vec<String> = k
                .additional
                .difference(&d.additional)
                .map(|r| r.to_string())
                .collect();
            if !lacks.is_empty() {
                lines.push(format!(
                    "additional processing: dnsd lacks what Knot adds: {lacks:?}"
                ));
            }
        }
        if refs.len() > 1
            && !refs
                .windows(2)
                .all(|w| w[0].1.same(&w[1].1, Aspect::Additional))
        {
            let (a, b) = (&refs[0], &refs[1]);
            let dl = section_diff("additional", a.0, &a.1.additional, b.0, &b.1.additional);
            rep.disagree(cat, "additional", format!("{what}: {}", dl.join("; ")));
        }
    }
    // The question comes back in the exact case it was sent.
    if !d.question_exact {
        lines.push("question: not echoed byte for byte (case changed?)".into());
    }
    for (n, r) in refs {
        if !r.question_exact {
            rep.notes
                .push(format!("{what}: {n} did not echo the question exactly"));
        }
    }
    if lines.is_empty() {
        if all_same {
            rep.all_agree += 1;
        }
        return false;
    }
    if INFORMATIONAL.contains(&cat) {
        rep.notes
            .push(format!("{what} (informational): {}", lines.join("; ")));
        return false;
    }
    let mut s = format!("DISCREPANCY {what}\n");
    for l in &lines {
        let _ = writeln!(s, "  - {l}");
    }
    let _ = writeln!(s, "  dnsd:\n{d}");
    for (n, r) in refs {
        let _ = writeln!(s, "  {n}:\n{r}");
        for l in diff("dnsd", d, n, r) {
            let _ = writeln!(s, "    {l}");
        }
    }
    rep.discrepancies.push((case.bug, s));
    true
}

#[test]
fn differential_against_knot_and_nsd() {
    let Some(trio) = Trio::start() else { return };
    let mut rng = Rng::new(SEED);
    let mut rep = Report::default();
    for case in cases() {
        let mut differed = false;
        for (var, base) in variants() {
            let qname = rng.mix_case(&case.name);
            let opts = QueryOpts {
                qclass: case.qclass,
                ..base.clone()
            };
            let q = build_query(client::next_id(), &qname, case.qtype, &opts);
            let what = describe(&case, &qname, var);
            let (d, refs) = ask_all(&trio, &q, &opts);
            let mut rn = Vec::new();
            let mut silent = Vec::new();
            for (n, r) in refs {
                match r {
                    Ok(r) => rn.push((n, Normalized::from_reply(&r))),
                    Err(e) => silent.push(format!("{n}: {e}")),
                }
            }
            let d = match d {
                Ok(d) => Normalized::from_reply(&d),
                Err(e) => {
                    rep.queries += 1;
                    if rn.is_empty() {
                        rep.disagree(
                            case.cat,
                            "no answer",
                            format!("{what}: nobody answered ({e})"),
                        );
                    } else {
                        rep.discrepancies
                            .push((case.bug, format!("DISCREPANCY {what}\n  - dnsd: {e}\n")));
                        differed = true;
                    }
                    continue;
                }
            };
            if !silent.is_empty() {
                rep.disagree(
                    case.cat,
                    "no answer",
                    format!(
                        "{what}: {}; dnsd {}",
                        silent.join(", "),
                        rcode_name(d.rcode)
                    ),
                );
            }
            if rn.is_empty() {
                rep.queries += 1;
                continue;
            }
            differed |= judge(&mut rep, &what, &case, &d, &rn);
        }
        if let Some(b) = case.bug
            && !differed
        {
            rep.fixed
                .push(format!("{} {}: {b}", case.name, type_name(case.qtype)));
        }
    }
    rep.print("differential");
    rep.assert_clean();
}

/// Large responses: truncated over UDP at the client's limit (TC set, never part of an
/// RRset), whole over TCP and equal to the references' there.
#[test]
fn truncation_udp_and_complete_over_tcp() {
    let Some(trio) = Trio::start() else { return };
    let mut rng = Rng::new(SEED ^ 1);
    let mut rep = Report::default();
    let mut failures = Vec::new();
    let big = [
        ("big.example.com.", T::TXT),
        ("mid.example.com.", T::TXT),
        ("manya.example.com.", T::A),
        ("bigdeleg.example.com.", T::A),
        ("www.bigdeleg.example.com.", T::AAAA),
        ("example.com.", T::ANY),
    ];
    let sizes: [(&str, Option<u16>); 5] = [
        ("no EDNS", None),
        ("EDNS 512", Some(512)),
        ("EDNS 1232", Some(1232)),
        ("EDNS 4096", Some(4096)),
        ("EDNS 100 (below 512)", Some(100)),
    ];
    for (name, t) in big {
        let case = c("trunc", name, t);
        let qname = rng.mix_case(name);
        // The whole answer, over TCP.
        let tcp = QueryOpts::edns(1232).over_tcp();
        let q = build_query(client::next_id(), &qname, t, &tcp);
        let (d_full, refs_full) = ask_all(&trio, &q, &tcp);
        let d_full =
            Normalized::from_reply(&d_full.unwrap_or_else(|e| panic!("{name} over TCP: {e}")));
        if d_full.tc {
            failures.push(format!("{name} {}: TC set over TCP", type_name(t)));
        }
        let rn: Vec<(&'static str, Normalized)> = refs_full
            .into_iter()
            .filter_map(|(n, r)| r.ok().map(|r| (n, Normalized::from_reply(&r))))
            .collect();
        let _ = judge(
            &mut rep,
            &describe(&case, &qname, "tcp+edns"),
            &case,
            &d_full,
            &rn,
        );
        for (label, size) in sizes {
            let opts = match size {
                Some(s) => QueryOpts::edns(s),
                None => QueryOpts::udp(),
            };
            let q = build_query(client::next_id(), &qname, t, &opts);
            let what = describe(&case, &qname, label);
            let (d, refs) = ask_all(&trio, &q, &opts);
            let d_reply = match d {
                Ok(r) => r,
                Err(e) => {
                    failures.push(format!("{what}: dnsd: {e}"));
                    continue;
                }
            };
            let limit = size.map_or(512, |s| s.clamp(512, 1232)) as usize;
            if d_reply.raw.len() > limit {
                failures.push(format!(
                    "{what}: dnsd sent {} octets over a {limit}-octet limit",
                    d_reply.raw.len()
                ));
            }
            let d = Normalized::from_reply(&d_reply);
            for (sec, s, f) in [
                ("answer", &d.answer, &d_full.answer),
                ("authority", &d.authority, &d_full.authority),
            ] {
                let p = partial_rrsets(s, f);
                if !p.is_empty() {
                    failures.push(format!("{what}: dnsd's {sec} holds partial RRsets: {p:?}"));
                }
            }
            let mut shapes = format!(
                "{what}: dnsd tc={} {} octets, answer {} RRs",
                d.tc,
                d_reply.raw.len(),
                d.answer.len()
            );
            let rn: Vec<(&'static str, Normalized)> = refs
                .into_iter()
                .filter_map(|(n, r)| {
                    r.ok().map(|r| {
                        let _ = write!(
                            shapes,
                            "; {n} tc={} {} octets, answer {} RRs",
                            r.head.has(palisade_tests::wire::flag::TC),
                            r.raw.len(),
                            r.msg.answers.len()
                        );
                        (n, Normalized::from_reply(&r))
                    })
                })
                .collect();
            rep.notes.push(shapes);
            if !rn.is_empty() {
                let _ = judge(&mut rep, &what, &case, &d, &rn);
            }
        }
    }
    rep.print("truncation");
    for f in &failures {
        println!("FAILURE {f}");
    }
    assert!(
        failures.is_empty(),
        "{} truncation failures (see above)",
        failures.len()
    );
    rep.assert_clean();
}

/// What needs no oracle, checked on dnsd alone (so it runs even without Knot and NSD):
/// RFC 2308 negative TTLs, the shape of a referral, REFUSED outside the zones, the
/// question's case.
#[test]
fn dnsd_alone_negative_ttl_referral_refused_case() {
    let dnsd = Dnsd::start(&zones());
    let a = dnsd.addr();
    let o = QueryOpts::edns(1232);
    // Negative answers carry the SOA with TTL min(SOA TTL, MINIMUM): 300 in example.com
    // (TTL 3600, MINIMUM 300), 60 in example.net (TTL 60, MINIMUM 600).
    for (name, t, rc, ttl) in [
        ("nothere.example.com.", T::A, 3, 300),
        ("www.example.com.", T::MX, 0, 300),
        ("nothere.example.net.", T::A, 3, 60),
        ("www.example.net.", T::TXT, 0, 60),
        ("nothere.child.example.com.", T::A, 3, 120),
    ] {
        let r = client::query_reply(a, name, t, &o);
        assert_eq!(r.head.rcode(), rc, "{name} {}: {:?}", type_name(t), r.msg);
        assert!(r.msg.authoritative, "{name}: AA clear");
        assert!(r.msg.answers.is_empty(), "{name}: answer section not empty");
        let soa: Vec<_> = r
            .msg
            .authorities
            .iter()
            .filter(|x| u16::from(x.record_type()) == T::SOA)
            .collect();
        assert_eq!(soa.len(), 1, "{name}: one SOA in authority: {:?}", r.msg);
        assert_eq!(soa[0].ttl, ttl, "{name}: negative TTL (RFC 2308 §3)");
    }
    // A referral: AA clear, the NS RRset in authority, in-bailiwick glue in additional.
    let r = client::query_reply(a, "host.deleg.example.com.", T::A, &o);
    let n = Normalized::from_reply(&r);
    assert_eq!(n.rcode, 0);
    assert!(!n.aa, "referral with AA set");
    assert!(n.answer.is_empty());
    assert_eq!(
        n.authority.iter().filter(|x| x.rtype == T::NS).count(),
        3,
        "{n}"
    );
    for glue in ["ns1.deleg.example.com.", "ns2.deleg.example.com."] {
        assert!(
            n.additional.iter().any(|x| x.owner == glue),
            "glue {glue} missing:\n{n}"
        );
    }
    // Names in no zone are refused.
    for name in ["www.example.org.", "."] {
        let r = client::query_reply(a, name, T::A, &o);
        assert_eq!(r.head.rcode(), 5, "{name}: {:?}", r.msg);
        assert!(!r.msg.authoritative, "{name}: REFUSED with AA");
    }
    // The question comes back in the case it was sent, over UDP and TCP.
    for opts in [QueryOpts::udp(), QueryOpts::edns(1232).over_tcp()] {
        let r = client::query_reply(a, "wWw.ExAmPlE.cOm.", T::A, &opts);
        assert_eq!(r.head.question, palisade_tests::wire::question_of(&r.query));
    }
}

/// dnsd, Knot and NSD serving one zone `origin` written from `text`; None (skipped, which
/// CI does not allow) unless both references are installed.
fn three_serving(origin: &str, text: &str) -> Option<(tempfile::TempDir, Dnsd, Knot, Nsd)> {
    if !Knot::available() || !Nsd::available() {
        palisade_tests::skipped("knotd and nsd are both needed: what both give is the reference");
        assert!(!palisade_tests::in_ci(), "CI must have knotd and nsd");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("{origin}zone"));
    std::fs::write(&file, text).unwrap();
    let zones = [Zone::new(origin, &file)];
    Some((
        dir,
        Dnsd::start(&zones),
        Knot::start(&zones),
        Nsd::start(&zones),
    ))
}

#[test]
fn name_server_addresses_below_a_cut_or_from_a_wildcard_go_where_knot_and_nsd_put_them() {
    // The apex's name servers below a child's cut (as the root's are below net.), a
    // delegation whose name server is covered by our wildcard, and one whose name server is
    // covered by a wildcard below its own cut (knot-semcheck's glue_wildcard).
    let Some((_dir, dnsd, knot, nsd)) = three_serving(
        "glue.test.",
        "$ORIGIN glue.test.\n$TTL 3600\n@ SOA ns hostmaster 1 7200 3600 1209600 300\n\
         @ NS a.ns.child.glue.test.\n@ NS ns.glue.test.\nns A 192.0.2.1\n\
         child NS a.ns.child.glue.test.\na.ns.child A 192.0.2.2\na.ns.child AAAA 2001:db8::2\n\
         deleg NS a.ns.w.glue.test.\n*.w AAAA 2001:db8::3\n\
         abc NS a.ns.abc.glue.test.\n*.ns.abc AAAA 2001:db8::4\n",
    ) else {
        return;
    };
    let o = QueryOpts::edns(1232);
    for (name, t) in [
        ("glue.test.", T::NS),
        ("www.deleg.glue.test.", T::A),
        ("www.abc.glue.test.", T::A),
    ] {
        let ask = |a| Normalized::from_reply(&client::query_reply(a, name, t, &o));
        let (ours, k, n) = (ask(dnsd.addr()), ask(knot.addr()), ask(nsd.addr()));
        assert_eq!(
            (&ours.answer, &ours.authority),
            (&k.answer, &k.authority),
            "{name}: answer and authority as Knot's:\n{ours}\n--- knot\n{k}"
        );
        let both: Vec<_> = k.additional.intersection(&n.additional).collect();
        assert!(
            !both.is_empty(),
            "{name}: Knot and NSD give addresses:\n{k}"
        );
        for rr in both {
            assert!(
                ours.additional.contains(rr),
                "{name}: {rr:?} in Knot's and NSD's additional section, not in dnsd's:\n{ours}"
            );
        }
    }
}

#[test]
fn a_zone_without_ttls_gets_the_ttls_knot_and_nsd_give_it() {
    // No $TTL and no TTL on any record (as RFC 1034's example zones are written).
    let Some((_dir, dnsd, knot, nsd)) = three_serving(
        "nottl.test.",
        "$ORIGIN nottl.test.\n@ IN SOA ns hostmaster 1 7200 3600 1209600 86400\n\
         @ IN NS ns\nns IN A 192.0.2.1\nwww IN A 192.0.2.2\n\
         a 99 IN A 192.0.2.3\nb IN A 192.0.2.4\n",
    ) else {
        return;
    };
    let o = QueryOpts::edns(1232);
    for (name, t) in [
        ("www.nottl.test.", T::A),
        ("nottl.test.", T::SOA),
        ("nottl.test.", T::NS),
        ("nothere.nottl.test.", T::A),
        // After a record with its own TTL, still the default (not that one, as RFC 1035 §5.1
        // would have it).
        ("b.nottl.test.", T::A),
    ] {
        let ask = |a| Normalized::from_reply(&client::query_reply(a, name, t, &o));
        let (ours, k, n) = (ask(dnsd.addr()), ask(knot.addr()), ask(nsd.addr()));
        assert_eq!(
            (&k.answer, &k.authority),
            (&n.answer, &n.authority),
            "{name}: Knot and NSD agree"
        );
        assert_eq!(
            (&ours.answer, &ours.authority),
            (&k.answer, &k.authority),
            "{name}:\n{ours}\n--- knot and nsd\n{k}"
        );
    }
}

#[test]
fn ds_at_a_served_childs_apex_reached_through_a_cname_comes_from_the_parent() {
    let dir = tempfile::tempdir().unwrap();
    let parent = dir.path().join("example.com.zone");
    let child = dir.path().join("sub.example.com.zone");
    std::fs::write(
        &parent,
        "$ORIGIN example.com.\n$TTL 300\n@ SOA ns hostmaster 1 7200 3600 1209600 300\n\
         @ NS ns\nns A 192.0.2.1\nsub NS ns.sub\nns.sub A 192.0.2.2\n\
         sub DS 12345 13 2 0102030405060708091011121314151617181920212223242526272829303132\n\
         tosub CNAME sub.example.com.\n",
    )
    .unwrap();
    std::fs::write(
        &child,
        "$ORIGIN sub.example.com.\n$TTL 300\n@ SOA ns hostmaster 7 7200 3600 1209600 60\n\
         @ NS ns\nns A 192.0.2.2\n",
    )
    .unwrap();
    let zones = [
        Zone::new("example.com.", &parent),
        Zone::new("sub.example.com.", &child),
    ];
    let dnsd = Dnsd::start(&zones);
    let o = QueryOpts::edns(1232);
    let ds = |a| {
        let n = Normalized::from_reply(&client::query_reply(a, "tosub.example.com.", T::DS, &o));
        let got: Vec<_> = n
            .answer
            .iter()
            .map(|r| (r.owner.clone(), r.rtype))
            .collect();
        (n.rcode, got)
    };
    let want = (
        0,
        vec![
            ("sub.example.com.".to_string(), T::DS),
            ("tosub.example.com.".to_string(), T::CNAME),
        ],
    );
    assert_eq!(ds(dnsd.addr()), want, "the parent's DS after the CNAME");
    // NSD answers it so (Knot stops at the CNAME into another zone).
    if Nsd::available() {
        let nsd = Nsd::start(&zones);
        assert_eq!(ds(nsd.addr()), want, "NSD, the reference here");
    }
}

#[test]
fn names_in_rdata_come_in_the_case_knot_and_nsd_give_them() {
    // A zone written in mixed case: the RFC 4034 §6.2 types' names are served lower-cased by
    // both (SVCB's target, not in that list, is left out: they differ there).
    let Some((_dir, dnsd, knot, nsd)) = three_serving(
        "case.test.",
        "$ORIGIN case.test.\n$TTL 300\n\
         @ SOA NS1.Case.Test. HostMaster.Case.TEST. 1 3600 900 604800 300\n\
         @ NS NS1.Case.Test.\n@ MX 10 Mail.CASE.test.\nNS1 A 192.0.2.1\nMail A 192.0.2.2\n\
         WWW CNAME Target.Case.Test.\nTarget A 192.0.2.3\n\
         _sip._tcp SRV 0 0 5060 SipHost.Case.Test.\nSipHost A 192.0.2.4\n\
         ptr PTR Some.Host.EXAMPLE.\nnaptr NAPTR 100 10 \"S\" \"SIP+D2U\" \"\" _Sip._Udp.Case.Test.\n\
         rp RP Admin.Case.Test. TXT.Case.Test.\nkx KX 5 KxHost.Case.Test.\n\
         dn DNAME Other.Example.\nSub NS NS.Sub.Case.Test.\nNS.Sub A 192.0.2.9\n",
    ) else {
        return;
    };
    let o = QueryOpts::edns(1232);
    let texts = |a, name: &str, t| {
        let r = client::query_reply(a, name, t, &o);
        let mut v: Vec<String> = r
            .msg
            .answers
            .iter()
            .chain(&r.msg.authorities)
            .map(|r| format!("{} {}", r.name, r.data))
            .collect();
        v.sort();
        v
    };
    for (name, t) in [
        ("case.test.", T::SOA),
        ("case.test.", T::NS),
        ("case.test.", T::MX),
        ("www.case.test.", T::A),
        ("_sip._tcp.case.test.", T::SRV),
        ("ptr.case.test.", T::PTR),
        ("naptr.case.test.", T::NAPTR),
        ("rp.case.test.", T::RP),
        ("kx.case.test.", T::KX),
        ("x.dn.case.test.", T::A),
        ("a.sub.case.test.", T::A),
    ] {
        let (ours, k, n) = (
            texts(dnsd.addr(), name, t),
            texts(knot.addr(), name, t),
            texts(nsd.addr(), name, t),
        );
        assert_eq!(k, n, "{name}: Knot and NSD agree");
        assert_eq!(ours, k, "{name}: as Knot and NSD");
    }
}

#[test]
fn identity_queries_in_class_ch_are_answered_as_knot_and_nsd_answer_them() {
    // Each server's default identity is this host's name: the three answers agree.
    let Some((_dir, dnsd, knot, nsd)) = three_serving(
        "ch.test.",
        "$ORIGIN ch.test.\n$TTL 300\n@ SOA ns hostmaster 1 3600 900 604800 300\n@ NS ns\nns A 192.0.2.1\n",
    ) else {
        return;
    };
    let o = QueryOpts {
        qclass: 3,
        ..QueryOpts::edns(1232)
    };
    let ask = |a, name: &str, t| {
        let r = client::query_reply(a, name, t, &o);
        let rrs: Vec<String> = r
            .msg
            .answers
            .iter()
            .map(|r| format!("{} {} {:?} {}", r.name, r.ttl, r.dns_class, r.data))
            .collect();
        (
            rcode_name(r.head.rcode()),
            r.head.has(palisade_tests::wire::flag::AA),
            rrs,
        )
    };
    for (name, t) in [
        ("id.server.", T::TXT),
        ("hostname.bind.", T::TXT),
        ("id.server.", T::A),
        ("nothing.bind.", T::TXT),
    ] {
        let (ours, k, n) = (
            ask(dnsd.addr(), name, t),
            ask(knot.addr(), name, t),
            ask(nsd.addr(), name, t),
        );
        assert_eq!(k, n, "{name}: Knot and NSD agree");
        assert_eq!(ours, k, "{name}: as Knot and NSD");
    }
    // The versions differ by name; each answers one TXT.
    for a in [dnsd.addr(), knot.addr(), nsd.addr()] {
        let (rc, _, rrs) = ask(a, "version.bind.", T::TXT);
        assert_eq!((rc.as_str(), rrs.len()), ("NOERROR", 1), "{a}: {rrs:?}");
    }
}

/// A zone signed with two NSEC3 chains (`dnssec-signzone` with salt aaaa, the chain its
/// NSEC3PARAM names, and with salt bbbb, as a zone holds while its parameters change):
/// dnsd proves from the named chain alone, as Knot and NSD do, and `delv` validates its
/// denials (with records of both chains mixed, they failed validation).
#[test]
fn a_zone_changing_nsec3_parameters_proves_from_the_chain_its_nsec3param_names() {
    for p in ["dnssec-keygen", "dnssec-signzone", "delv", "dig"] {
        if !palisade_tests::have_program(p) {
            palisade_tests::skipped(&format!("{p} not installed (BIND's tools)"));
            assert!(!palisade_tests::in_ci(), "CI must have {p}");
            return;
        }
    }
    let origin = "n2c.test.";
    let keys = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(args[0])
            .args(&args[1..])
            .current_dir(keys.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let key = run(&[
        "dnssec-keygen",
        "-q",
        "-K",
        ".",
        "-a",
        "ECDSAP256SHA256",
        "-f",
        "KSK",
        origin,
    ]);
    let key = key.trim();
    let key_text = std::fs::read_to_string(keys.path().join(format!("{key}.key"))).unwrap();
    let unsigned = format!(
        "$ORIGIN n2c.test.\n$TTL 3600\n@ SOA ns hostmaster 1 7200 3600 1209600 300\n@ NS ns\n\
         ns A 192.0.2.1\nwww A 192.0.2.2\n*.wild A 192.0.2.3\nx.y.ent TXT \"t\"\n\
         insdel NS ns.elsewhere.example.\n{key_text}"
    );
    std::fs::write(keys.path().join("unsigned"), unsigned).unwrap();
    for (salt, out) in [("aaaa", "s1"), ("bbbb", "s2")] {
        run(&[
            "dnssec-signzone",
            "-q",
            "-z",
            "-K",
            ".",
            "-o",
            origin,
            "-3",
            salt,
            "-H",
            "0",
            "-O",
            "full",
            "-f",
            out,
            "unsigned",
            key,
        ]);
    }
    let read = |f: &str| std::fs::read_to_string(keys.path().join(f)).unwrap();
    // The first signing whole, and the second chain's NSEC3 records and their signatures.
    let mut text = read("s1");
    for l in read("s2").lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.get(3) == Some(&"NSEC3") || f.get(3..5) == Some(&["RRSIG", "NSEC3"][..]) {
            text.push_str(l);
            text.push('\n');
        }
    }
    let Some((dir, dnsd, knot, nsd)) = three_serving(origin, &text) else {
        return;
    };
    let anchor = dir.path().join("anchor.conf");
    palisade_tests::delv::anchor_from_served(dnsd.addr(), "n2c.test", &anchor);
    let o = QueryOpts::edns(1232).with_do();
    for (name, qtype, t) in [
        ("nothere.n2c.test.", "A", T::A),
        ("www.n2c.test.", "MX", T::MX),
        ("foo.wild.n2c.test.", "MX", T::MX),
        ("foo.wild.n2c.test.", "A", T::A),
        ("y.ent.n2c.test.", "A", T::A),
        ("a.insdel.n2c.test.", "A", T::A),
        ("zzz.n2c.test.", "TXT", T::TXT),
    ] {
        let ask = |a| Normalized::from_reply(&client::query_reply(a, name, t, &o));
        let (ours, k, n) = (ask(dnsd.addr()), ask(knot.addr()), ask(nsd.addr()));
        assert!(
            ours.authority == k.authority || ours.authority == n.authority,
            "{name} {qtype}: authority as Knot's or NSD's:\n{ours}\n--- knot\n{k}\n--- nsd\n{n}"
        );
        let out = palisade_tests::delv::delv(dnsd.addr(), None, &anchor, "n2c.test", name, qtype);
        assert!(
            out.contains("fully validated") || name.contains("insdel"),
            "delv {name} {qtype}:\n{out}"
        );
    }
}

#[test]
fn an_rrset_too_large_for_any_message_leaves_the_zone_served_as_knot_and_nsd_serve_it() {
    // 4,200 A records at one name: 67 KB, more than any message carries. BIND refuses such a
    // zone; Knot and NSD serve it, TC=1 to a query for that name.
    let mut text = String::from(
        "$ORIGIN big.test.\n$TTL 3600\n@ SOA ns hostmaster 1 7200 3600 1209600 300\n\
         @ NS ns\nns A 192.0.2.1\nwww A 192.0.2.2\n",
    );
    for i in 0..4_200u32 {
        text.push_str(&format!(
            "x A 10.{}.{}.{}\n",
            i >> 16,
            (i >> 8) & 255,
            i & 255
        ));
    }
    let Some((_dir, dnsd, knot, nsd)) = three_serving("big.test.", &text) else {
        return;
    };
    let o = QueryOpts::edns(1232);
    for (name, t) in [
        ("www.big.test.", T::A),
        ("big.test.", T::SOA),
        ("nothere.big.test.", T::A),
    ] {
        let ask = |a| Normalized::from_reply(&client::query_reply(a, name, t, &o));
        let (ours, k, n) = (ask(dnsd.addr()), ask(knot.addr()), ask(nsd.addr()));
        assert_eq!(
            (&k.answer, &k.authority),
            (&n.answer, &n.authority),
            "{name}: Knot and NSD agree"
        );
        assert_eq!(
            (&ours.rcode, &ours.answer, &ours.authority),
            (&k.rcode, &k.answer, &k.authority),
            "{name}:\n{ours}\n--- knot and nsd\n{k}"
        );
    }
    let ask = |a| Normalized::from_reply(&client::query_reply(a, "x.big.test.", T::A, &o));
    for (who, r) in [
        ("dnsd", ask(dnsd.addr())),
        ("knot", ask(knot.addr())),
        ("nsd", ask(nsd.addr())),
    ] {
        assert!(
            r.tc && r.rcode == 0,
            "{who}: TC=1 for the RRset no message carries:\n{r}"
        );
    }
}

#[test]
fn addresses_of_targets_a_wildcard_answers_for_go_in_additional_as_knot_puts_them() {
    let Some((_dir, dnsd, knot, nsd)) = three_serving(
        "wt.test.",
        "$ORIGIN wt.test.\n$TTL 3600\n@ SOA ns hostmaster 1 7200 3600 1209600 300\n\
         @ NS ns\nns A 192.0.2.1\n*.w A 192.0.2.200\n*.w AAAA 2001:db8::200\n\
         mx MX 10 a.w.wt.test.\nsrv SRV 0 0 80 b.w.wt.test.\n*.wm MX 10 c.w.wt.test.\n\
         cn CNAME x.w.wt.test.\n",
    ) else {
        return;
    };
    let o = QueryOpts::edns(1232);
    for (name, t) in [
        ("mx.wt.test.", T::MX),
        ("srv.wt.test.", T::SRV),
        ("q.wm.wt.test.", T::MX),
    ] {
        let ask = |a| Normalized::from_reply(&client::query_reply(a, name, t, &o));
        let (ours, k, n) = (ask(dnsd.addr()), ask(knot.addr()), ask(nsd.addr()));
        assert_eq!(
            (&ours.answer, &ours.authority),
            (&k.answer, &k.authority),
            "{name}:\n{ours}\n--- knot\n{k}"
        );
        // NSD as the tests run it (minimal responses) adds none; Knot adds them, as NSD
        // does by default.
        assert!(
            !k.additional.is_empty(),
            "{name}: Knot gives addresses:\n{k}"
        );
        assert_eq!(
            ours.additional, k.additional,
            "{name}: additional as Knot's:\n{ours}\n--- knot\n{k}\n--- nsd\n{n}"
        );
    }
}
