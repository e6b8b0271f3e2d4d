//! The answers of the XDP fast path, compiled by the query pipeline itself (so the kernel
//! sends dnsd's bytes): every owner name of a zone marked `xdp_answers = true` (and the hot
//! names of zones marked `"hot"`) is asked, for each type at the name plus A and AAAA, in each
//! EDNS variant (none; EDNS; EDNS with DO) as a client allowing our whole payload would ask. A
//! reply with TC, a name longer than the program parses, or an answer bigger than a map value
//! is left to dnsd (counted). Zones whose tenant has rules of its own, zones that require
//! cookies and names another served zone answers are not compiled.
//!
//! Cookies: each EDNS entry is asked once more with a client cookie, and says what dnsd does
//! with one — ignores it (cookies off), or appends the COOKIE option to its OPT record — so
//! that the program verifies and mints RFC 9018 server cookies with dnsd's secrets and
//! answers as dnsd would.

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use xdp_guard::maps::{
    ANSWER_MAX, AnsKey, Answer, COOKIE_ANSWER, COOKIE_IGNORE, COOKIE_PASS, QNAME_MAX, V_EDNS,
    V_EDNS_DO, V_NO_EDNS,
};

use crate::config::defence::CookiePolicy;
use crate::observe::counters::WorkerStats;
use crate::query::defence::Shared;
use crate::query::process_query::{Outcome, PipelineConfig, Processor, Transport};
use crate::xdp::hot_names::HotKey;
use crate::zone::served::ZoneSet;
/// What a compilation produced.
pub struct Compiled {
    /// The entries, at most the budget.
    pub entries: Vec<(AnsKey, Answer)>,
    /// Queries left to dnsd (TC, too long a name or answer).
    pub skipped: u64,
    /// Entries beyond the budget, not compiled.
    pub over_budget: u64,
}

/// The answers of `set`'s zones marked for XDP, and of the `hot` (name, type) pairs of zones
/// whose hottest names XDP may answer, for every address in `addrs` — at most `budget`
/// entries (the map's `answer_entries`: a big zone never makes more than the map holds, nor
/// the memory to build it; marked zones first). `defence` gives the cookie check (none:
/// cookies off).
pub fn compile(
    set: &Arc<ZoneSet>,
    addrs: &[SocketAddr],
    pcfg: &Arc<PipelineConfig>,
    has_rules: &dyn Fn(u32) -> bool,
    budget: usize,
    defence: Option<&Arc<Shared>>,
    hot: &[HotKey],
) -> Compiled {
    let mut c = Compiler {
        out: Vec::new(),
        skipped: 0,
        over_budget: 0,
        budget,
        p: Processor::new(
            Arc::new(ArcSwap::new(set.clone())),
            pcfg.clone(),
            Arc::new(WorkerStats::default()),
            None,
        )
        .keep_rrl_account(),
        addrs,
        q: Vec::with_capacity(512),
        reply: vec![0u8; 65535],
        with_cookie: vec![0u8; 65535],
    };
    if addrs.is_empty() {
        return c.done();
    }
    if let Some(d) = defence {
        c.p = c.p.with_plan(d.cookie_plan());
    }
    // Zones XDP may not answer for: expired, cookies required, the tenant's own rules.
    let barred = |i: u32| {
        set.is_expired(i)
            || set.cookie_policy(i) == CookiePolicy::Require
            || has_rules(set.tenant(i))
    };
    let mut types: Vec<u16> = Vec::new();
    for (i, zone) in set.zones() {
        if !set.xdp_answers(i) || barred(i) {
            continue;
        }
        for node in zone.node_ids() {
            let name = zone.node_name(node);
            if name.len() > QNAME_MAX {
                c.skipped += 1;
                continue;
            }
            // Another served zone below this one answers the name: not ours to compile.
            if set
                .find(name, &label_offsets(name))
                .is_none_or(|(j, _)| j != i)
            {
                continue;
            }
            types.clear();
            types.extend(
                zone.rrsets(node)
                    .iter()
                    .filter(|s| s.rtype != 46)
                    .map(|s| s.rtype),
            );
            for t in [1u16, 28] {
                if !types.contains(&t) {
                    types.push(t);
                }
            }
            for &qtype in &types {
                c.add(name, qtype, false);
            }
        }
    }
    for (name, qtype) in hot {
        if name.len() > QNAME_MAX {
            continue;
        }
        // The zone that answers the name now: one whose hottest names XDP answers (a
        // marked zone's names are all in already).
        match set.find(name, &label_offsets(name)) {
            Some((i, _)) if set.xdp_hot(i) && !set.xdp_answers(i) && !barred(i) => {
                c.add(name, *qtype, true);
            }
            _ => {}
        }
    }
    c.done()
}

/// A compilation under way: dnsd's pipeline asked each query, the entries so far.
struct Compiler<'a> {
    out: Vec<(AnsKey, Answer)>,
    skipped: u64,
    over_budget: u64,
    budget: usize,
    p: Processor,
    addrs: &'a [SocketAddr],
    q: Vec<u8>,
    reply: Vec<u8>,
    with_cookie: Vec<u8>,
}

impl Compiler<'_> {
    /// Asks `name`/`qtype` in each EDNS variant and adds the answers (with `found_only`, only
    /// positive ones: a hot name that no longer exists is left to dnsd).
    fn add(&mut self, name: &[u8], qtype: u16, found_only: bool) {
        let src: SocketAddr = "[::1]:53".parse().expect("an address");
        for variant in [V_NO_EDNS, V_EDNS, V_EDNS_DO] {
            build_query(&mut self.q, name, qtype, variant);
            let Outcome::Reply(n) = self
                .p
                .process(&self.q, src, Transport::Udp, &mut self.reply)
            else {
                self.skipped += 1;
                continue;
            };
            if found_only && self.reply[3] & 0x0f != 0 {
                continue;
            }
            // Made from another name when asked (an ALIAS's A or AAAA, also at the end of a
            // CNAME chain): it changes with other zones, so it is left to dnsd.
            if self.p.volatile() {
                self.skipped += 1;
                continue;
            }
            let Some(mut ans) = answer_of(&self.reply[..n], self.q.len(), variant) else {
                self.skipped += 1;
                continue;
            };
            // RRL in XDP charges it to the account dnsd's RRL would (a referral to its
            // zone's, a NODATA to its name's): a zone's delegations are one account there
            // too, not one per name and type.
            let account = self.p.rrl_account();
            if account.is_empty() {
                self.skipped += 1;
                continue;
            }
            ans.rrl_key = xdp_guard::maps::name_hash(account);
            if variant != V_NO_EDNS {
                // What dnsd does with a client cookie in the same query.
                add_cookie(&mut self.q);
                ans.cookie =
                    match self
                        .p
                        .process(&self.q, src, Transport::Udp, &mut self.with_cookie)
                    {
                        Outcome::Reply(m) => cookie_mode(&self.reply[..n], &self.with_cookie[..m]),
                        _ => COOKIE_PASS,
                    };
            }
            let Some(qname) = xdp_guard::maps::padded_name(name) else {
                self.skipped += 1;
                continue;
            };
            ans.qname = qname;
            let mut key = AnsKey::for_name(variant, qtype, name);
            for a in self.addrs {
                if self.out.len() >= self.budget {
                    self.over_budget += 1;
                    continue;
                }
                key.addr = xdp_guard::mapped(a.ip());
                key.port = a.port();
                self.out.push((key, ans));
            }
        }
    }

    fn done(self) -> Compiled {
        Compiled {
            entries: self.out,
            skipped: self.skipped,
            over_budget: self.over_budget,
        }
    }
}

/// Offsets of the labels of a wire name (for [`ZoneSet::find`]).
fn label_offsets(name: &[u8]) -> Vec<u8> {
    let mut offs = Vec::new();
    let mut i = 0usize;
    while i < name.len() && name[i] != 0 {
        offs.push(i as u8);
        i += 1 + name[i] as usize;
    }
    offs
}

/// A query as the program sees one: ID 0, no flags, the question, and an OPT record
/// (UDP size 65535: the reply is limited by our payload alone) for the EDNS variants.
fn build_query(q: &mut Vec<u8>, name: &[u8], qtype: u16, variant: u8) {
    q.clear();
    let ar = u16::from(variant != V_NO_EDNS);
    q.extend_from_slice(&[0, 0, 0, 0, 0, 1, 0, 0, 0, 0]);
    q.extend_from_slice(&ar.to_be_bytes());
    q.extend_from_slice(name);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    if variant != V_NO_EDNS {
        let flags: u8 = if variant == V_EDNS_DO { 0x80 } else { 0 };
        q.extend_from_slice(&[0, 0, 41, 0xff, 0xff, 0, 0, flags, 0, 0, 0]);
    }
}

/// The client cookie of the compiler's queries.
const CLIENT_COOKIE: [u8; 8] = *b"palisade";

/// Appends a COOKIE option with a client cookie to the OPT record that ends `q`.
fn add_cookie(q: &mut Vec<u8>) {
    let n = q.len();
    q[n - 2..].copy_from_slice(&12u16.to_be_bytes());
    q.extend_from_slice(&[0, 10, 0, 8]);
    q.extend_from_slice(&CLIENT_COOKIE);
}

/// How the program answers a query with a cookie, from dnsd's replies to the query
/// without (`plain`) and with a client cookie: the same reply ([`COOKIE_IGNORE`]), the same
/// with a COOKIE option appended to the OPT record that ends it ([`COOKIE_ANSWER`]), else
/// passed to dnsd.
fn cookie_mode(plain: &[u8], cookie: &[u8]) -> u16 {
    let n = plain.len();
    if cookie == plain {
        return COOKIE_IGNORE;
    }
    let opt_last = n >= 12 + 11 && plain[n - 11..n - 8] == [0, 0, 41] && plain[n - 2..] == [0, 0];
    if opt_last
        && cookie.len() == n + 28
        && cookie[..n - 2] == plain[..n - 2]
        && cookie[n - 2..n + 4] == [0, 28, 0, 10, 0, 24]
        && cookie[n + 4..n + 12] == CLIENT_COOKIE
    {
        COOKIE_ANSWER
    } else {
        COOKIE_PASS
    }
}

/// The map value of dnsd's `reply` to a query whose question ends at `qend`.
fn answer_of(reply: &[u8], query_len: usize, variant: u8) -> Option<Answer> {
    let opt = if variant == V_NO_EDNS { 0 } else { 11 };
    let qend = query_len - opt;
    if reply.len() < qend || reply.len() < 12 {
        return None;
    }
    let flags = u16::from_be_bytes([reply[2], reply[3]]);
    if flags & 0x0200 != 0 {
        return None; // truncated: dnsd decides per client
    }
    let tail = &reply[qend..];
    if tail.is_empty() || tail.len() > ANSWER_MAX {
        return None;
    }
    let count = |i: usize| u16::from_be_bytes([reply[i], reply[i + 1]]);
    let mut data = [0u8; ANSWER_MAX];
    data[..tail.len()].copy_from_slice(tail);
    Some(Answer {
        flags: flags & !(0x0100 | 0x0010),
        an: count(6),
        ns: count(8),
        ar: count(10),
        len: tail.len() as u16,
        csum: ones_sum(tail),
        cookie: COOKIE_PASS,
        reserved: 0,
        rrl_key: 0,
        qname: [0; QNAME_MAX],
        data,
    })
}

/// The 16-bit one's complement sum of `b` (big-endian words from its first byte).
fn ones_sum(b: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in b.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from(c[0]) << 8
        };
        s += u32::from(w);
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::zone::served::ServeOptions;

    /// example.com. served with `com`, and example.net. with the defaults (its answers never
    /// go to XDP); one service address; the default pipeline.
    fn two_zones(com: ServeOptions) -> (Arc<ZoneSet>, Vec<SocketAddr>, Arc<PipelineConfig>) {
        use crate::query::testkit::{example_text, load_zone};
        let set = Arc::new(ZoneSet::new(
            vec![
                (load_zone("example.com.", &example_text()), com),
                (
                    load_zone(
                        "example.net.",
                        &example_text().replace("ns2.example.net.", "ns2"),
                    ),
                    ServeOptions::default(),
                ),
            ],
            1,
        ));
        let addrs = vec!["192.0.2.53:53".parse().unwrap()];
        (set, addrs, Arc::new(PipelineConfig::default()))
    }

    #[test]
    fn compiles_marked_zones_only_within_the_budget() {
        let (set, addrs, pcfg) = two_zones(ServeOptions {
            xdp_answers: true,
            ..Default::default()
        });
        let all = compile(&set, &addrs, &pcfg, &|_| false, usize::MAX, None, &[]);
        assert!(all.entries.len() > 10, "{}", all.entries.len());
        assert_eq!(all.over_budget, 0);
        // Only example.com.'s names; each answer's header says AA or referral, never TC.
        for (k, v) in &all.entries {
            let name = &v.qname[..k.qname_len as usize];
            assert_eq!(k.name_hash, xdp_guard::maps::name_hash(name));
            assert!(name.ends_with(b"\x07example\x03com\x00"), "{name:?}");
            assert_eq!(v.flags & 0x0200, 0);
            assert_eq!(v.csum, ones_sum(&v.data[..v.len as usize]));
        }
        // The budget bounds what is built; the rest is counted.
        let few = compile(&set, &addrs, &pcfg, &|_| false, 5, None, &[]);
        assert_eq!(few.entries.len(), 5);
        assert_eq!(few.over_budget as usize, all.entries.len() - 5);
        // A tenant with rules of its own keeps its zones out of XDP.
        let none = compile(&set, &addrs, &pcfg, &|_| true, usize::MAX, None, &[]);
        assert!(none.entries.is_empty());
    }

    #[test]
    fn each_answer_carries_the_account_dnsd_s_rrl_charges_it_to() {
        let (set, addrs, pcfg) = two_zones(ServeOptions {
            xdp_answers: true,
            ..Default::default()
        });
        let all = compile(&set, &addrs, &pcfg, &|_| false, usize::MAX, None, &[]);
        let name_of = |k: &AnsKey, v: &Answer| v.qname[..k.qname_len as usize].to_vec();
        // Referrals (no AA) are one account, the zone's, whatever name and type was asked:
        // a zone's delegations are not a bucket each.
        let referrals: std::collections::HashSet<u64> = all
            .entries
            .iter()
            .filter(|(_, v)| v.flags & 0x0400 == 0)
            .map(|(_, v)| v.rrl_key)
            .collect();
        assert!(all.entries.iter().any(|(_, v)| v.flags & 0x0400 == 0));
        assert_eq!(referrals.len(), 1, "{referrals:?}");
        // A positive answer's account is its name and type: www's A and AAAA two accounts,
        // neither the referrals'.
        let www = b"\x03www\x07example\x03com\x00".to_vec();
        let of = |qtype: u16| {
            all.entries
                .iter()
                .find(|(k, v)| k.qtype == qtype && name_of(k, v) == www)
                .map(|(_, v)| v.rrl_key)
                .expect("an answer")
        };
        assert_ne!(of(1), of(28));
        assert!(!referrals.contains(&of(1)));
    }

    #[test]
    fn entries_say_what_dnsd_does_with_a_cookie() {
        use crate::query::testkit::{defences, example_text, load_zone, shared};
        let zone = |policy| {
            Arc::new(ZoneSet::new(
                vec![(
                    load_zone("example.com.", &example_text()),
                    ServeOptions {
                        xdp_answers: true,
                        cookies: policy,
                        ..Default::default()
                    },
                )],
                1,
            ))
        };
        let addrs: Vec<SocketAddr> = vec!["192.0.2.53:53".parse().unwrap()];
        let pcfg = Arc::new(PipelineConfig::default());
        let modes = |set: &Arc<ZoneSet>, d: Option<&Arc<Shared>>| {
            let c = compile(set, &addrs, &pcfg, &|_| false, usize::MAX, d, &[]);
            assert!(!c.entries.is_empty());
            let mut m: Vec<(u8, u16)> = c
                .entries
                .iter()
                .map(|(k, v)| (k.variant, v.cookie))
                .collect();
            m.sort();
            m.dedup();
            m
        };
        // Cookies on: every EDNS answer carries the cookie appended to its OPT.
        let on = shared(defences(None, true));
        assert_eq!(
            modes(&zone(CookiePolicy::On), Some(&on)),
            vec![
                (V_NO_EDNS, COOKIE_PASS),
                (V_EDNS, COOKIE_ANSWER),
                (V_EDNS_DO, COOKIE_ANSWER)
            ]
        );
        // Off for the zone, or for the server: the cookie is ignored.
        let ignored = vec![
            (V_NO_EDNS, COOKIE_PASS),
            (V_EDNS, COOKIE_IGNORE),
            (V_EDNS_DO, COOKIE_IGNORE),
        ];
        assert_eq!(modes(&zone(CookiePolicy::Off), Some(&on)), ignored);
        let off = shared(defences(None, false));
        assert_eq!(modes(&zone(CookiePolicy::On), Some(&off)), ignored);
        // Replies that are not the plain one plus a COOKIE option pass.
        let plain = [0u8, 1, 0, 0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0];
        assert_eq!(cookie_mode(&plain, &plain), COOKIE_IGNORE);
        assert_eq!(cookie_mode(&plain, &plain[..12]), COOKIE_PASS);
    }

    #[test]
    fn hot_names_are_compiled_for_hot_zones_only() {
        let (set, addrs, pcfg) = two_zones(ServeOptions {
            xdp_hot: true,
            ..Default::default()
        });
        let wire = |s: &[u8]| Box::<[u8]>::from(s);
        let hot = vec![
            (wire(b"\x03www\x07example\x03com\x00"), 1),
            (wire(b"\x02nx\x07example\x03com\x00"), 1),
            (wire(b"\x03www\x07example\x03net\x00"), 1),
        ];
        let c = compile(&set, &addrs, &pcfg, &|_| false, usize::MAX, None, &hot);
        // www.example.com. in three variants; the name that does not exist and the zone
        // that is not hot left to dnsd.
        assert_eq!(c.entries.len(), 3);
        assert!(
            c.entries
                .iter()
                .all(|(k, v)| v.qname[..k.qname_len as usize]
                    == b"\x03www\x07example\x03com\x00"[..])
        );
    }

    #[test]
    fn answers_made_from_an_alias_stay_out_of_xdp() {
        use crate::query::testkit::{example_text, load_zone};
        let text =
            example_text() + "flat 300 ALIAS www.example.com.\nvia 300 CNAME flat.example.com.\n";
        let set = Arc::new(ZoneSet::new(
            vec![(
                load_zone("example.com.", &text),
                ServeOptions {
                    xdp_answers: true,
                    xdp_hot: true,
                    ..Default::default()
                },
            )],
            1,
        ));
        let addrs = vec!["192.0.2.53:53".parse().unwrap()];
        let pcfg = Arc::new(PipelineConfig::default());
        let wire = |s: &[u8]| Box::<[u8]>::from(s);
        let hot = vec![(wire(b"\x04flat\x07example\x03com\x00"), 1)];
        let c = compile(&set, &addrs, &pcfg, &|_| false, usize::MAX, None, &hot);
        let has = |name: &[u8], qtype: u16| {
            c.entries
                .iter()
                .any(|(k, v)| v.qname[..k.qname_len as usize] == *name && k.qtype == qtype)
        };
        // The ALIAS's A and AAAA, and a CNAME chain ending there, are left to dnsd; a query
        // for the ALIAS's own type (NODATA) and other names are compiled.
        for name in [
            &b"\x04flat\x07example\x03com\x00"[..],
            b"\x03via\x07example\x03com\x00",
        ] {
            assert!(!has(name, 1) && !has(name, 28), "{name:?}");
        }
        assert!(has(
            b"\x04flat\x07example\x03com\x00",
            zones::rrtype::t::ALIAS
        ));
        assert!(has(b"\x03www\x07example\x03com\x00", 1));
        assert!(c.skipped >= 12, "{}", c.skipped);
    }

    #[test]
    fn names_with_variants_by_client_network_stay_out_of_xdp() {
        use crate::query::testkit::{example_text, load_zone};
        let dir = tempfile::tempdir().unwrap();
        let geo = dir.path().join("geo.yaml");
        std::fs::write(
            &geo,
            "www.example.com:\n  - net: 10.0.0.0/8\n    A: 198.51.100.1\n",
        )
        .unwrap();
        let origin = zones::Name::parse("example.com.", None).unwrap();
        let g = crate::zone::geo::GeoZone::load(&geo, &origin, &Default::default(), 60, 0).unwrap();
        let mut set = ZoneSet::empty(0);
        set.put(
            0,
            Some(load_zone("example.com.", &example_text())),
            ServeOptions {
                xdp_answers: true,
                ..Default::default()
            },
            false,
            0,
            None,
            Some(Arc::new(g)),
        );
        let set = Arc::new(set);
        let addrs = vec!["192.0.2.53:53".parse().unwrap()];
        let c = compile(
            &set,
            &addrs,
            &Arc::new(PipelineConfig::default()),
            &|_| false,
            usize::MAX,
            None,
            &[],
        );
        let named = |name: &[u8]| {
            c.entries
                .iter()
                .any(|(k, v)| v.qname[..k.qname_len as usize] == *name)
        };
        // Every type of the name with variants is left to dnsd (its answer depends on the
        // client); its neighbours are compiled.
        assert!(!named(b"\x03www\x07example\x03com\x00"));
        assert!(named(b"\x04mail\x07example\x03com\x00"));
    }

    #[test]
    fn ones_complement_sums_fold() {
        assert_eq!(ones_sum(&[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
        assert_eq!(ones_sum(&[0xff, 0xff, 0x00, 0x02]), 0x0002);
        assert_eq!(label_offsets(b"\x03www\x07example\x00"), vec![0, 4]);
    }
}
