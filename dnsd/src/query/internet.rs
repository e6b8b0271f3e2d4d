//! Answering in class IN: RFC 1034 §4.3.2 with wildcards (RFC 4592), DNAME (RFC 6672),
//! negative answers (RFC 2308) and minimal ANY (RFC 8482).

use std::sync::atomic::Ordering;

use zones::name::MAX_NAME_LEN;
use zones::rdata;
use zones::rrtype::t;
use zones::zone::{Lookup, NodeId, flags};
use zones::{RRset, Zone};

use crate::query::alias::{AliasCache, BOUNDS};
use crate::query::nsec_proofs::Prover;
use crate::query::response::{Full, Owner, Section, Writer};
use crate::query::wire::{Query, hf, rcode};
use crate::signing::online::{CompactSigner, Denier};
use crate::zone::served::ZoneSet;

/// How many CNAME/DNAME steps are followed before giving up.
const MAX_CHAIN: usize = 8;

/// Records an ALIAS answer carries at most (of its target's A or AAAA), and a variant holds.
const MAX_ALIAS_RRS: usize = crate::zone::geo::MAX_VARIANT_RRS;

/// What kind of response was written (for response rate limiting and statistics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Kind {
    /// Data in the answer section.
    Answer,
    /// The name exists without the type.
    NoData,
    /// The name does not exist.
    NxDomain,
    /// A referral to a child zone.
    Referral,
    /// The name is in no zone served here.
    Refused,
}

/// The result of answering one question.
#[derive(Debug, Clone, Copy)]
pub struct Answered {
    /// Response kind.
    pub kind: Kind,
    /// The response was truncated.
    pub truncated: bool,
    /// The answer was made when asked from more than the zone (an ALIAS, the client's
    /// network): it changes with other zones, the resolver or the client, so it is never
    /// compiled into XDP nor sampled as hot.
    pub volatile: bool,
    /// The client prefix length that chose the answer (RFC 7871 SCOPE PREFIX-LENGTH; 0: the
    /// answer is the same for every client).
    pub scope: u8,
    /// The name the answer was synthesised from when a wildcard or a DNAME answered the name
    /// asked (its node in the query's zone), or `Synth::Geo` for a wildcard variant: rate
    /// limits count such answers by it, as BIND, Knot and NSD do (random names under a
    /// wildcard, or under a DNAME into a wildcard, were each an account of their own, never
    /// limited: 21 times the bytes of forged queries reflected).
    pub synth: Synth,
}

/// What synthesised an answer (see [`Answered::synth`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synth {
    /// Nothing: the name asked has the records.
    #[default]
    None,
    /// This wildcard node of the query's zone.
    Wildcard(NodeId),
    /// This DNAME node of the query's zone (any name below it is answered).
    Dname(NodeId),
    /// A wildcard of the zone's variants by client network.
    Geo,
}

/// A name being resolved: lower-case wire name and label offsets, in a fixed buffer.
#[derive(Clone)]
struct Target {
    name: [u8; MAX_NAME_LEN],
    len: usize,
    offs: [u8; 128],
    labels: usize,
}

impl Target {
    fn from_query(q: &Query) -> Target {
        let mut t = Target {
            name: [0; MAX_NAME_LEN],
            len: q.qname_len as usize,
            offs: [0; 128],
            labels: q.labels as usize,
        };
        t.name[..t.len].copy_from_slice(q.qname());
        t.offs[..t.labels].copy_from_slice(q.label_offs());
        t
    }

    fn of(wire_lower: &[u8]) -> Target {
        let mut t = Target {
            name: [0; MAX_NAME_LEN],
            len: 0,
            offs: [0; 128],
            labels: 0,
        };
        t.set(wire_lower);
        t
    }

    fn set(&mut self, wire_lower: &[u8]) {
        self.len = wire_lower.len();
        self.name[..self.len].copy_from_slice(wire_lower);
        self.labels = zones::name::label_offsets(&self.name[..self.len], &mut self.offs);
    }

    fn name(&self) -> &[u8] {
        &self.name[..self.len]
    }

    fn offs(&self) -> &[u8] {
        &self.offs[..self.labels]
    }
}

/// What a zone answered with compact denial needs at query time: its signer, and the
/// worker's budget, cache and counters.
pub struct Online<'a> {
    /// The zone's online signer.
    pub signer: &'a CompactSigner,
    /// The zone's id (cache key).
    pub zone_id: u32,
    /// The worker's budget and cache.
    pub denier: &'a mut Denier,
    /// The query's source and whether it is proven (its share of the budget).
    pub who: crate::signing::online::Asker,
    /// The worker's counters.
    pub stats: &'a crate::observe::counters::WorkerStats,
    /// The query set Compact Answers OK (RFC 9824 §5): a compact NXDOMAIN keeps its rcode.
    pub compact_ok: bool,
    /// Past a budget, prove with the zone's chain instead of truncating (TCP: a truncated
    /// answer cannot be retried on a bigger transport).
    pub chain_past_budget: bool,
    /// An NXDOMAIN to this source is truncated once answered (an unproven NXDOMAIN suspect
    /// over UDP): its denial is not signed, for nobody would receive it.
    pub nx_truncated: bool,
}

/// Who asks, for names with variants by client network.
#[derive(Debug, Clone, Copy)]
pub struct Client<'a> {
    /// The client's network: its Client Subnet where ECS is on, else the source address.
    pub ip: std::net::IpAddr,
    /// The MaxMind database `geo:` variants are chosen by.
    pub geodb: Option<&'a crate::zone::geo::GeoDb>,
    /// The answer carries a Client Subnet option: its scope is worked out.
    pub ecs: bool,
}

impl Client<'_> {
    /// A client at `ip`, without a location database.
    pub fn at(ip: std::net::IpAddr) -> Client<'static> {
        Client {
            ip,
            geodb: None,
            ecs: false,
        }
    }
}

/// A wildcard's variants may answer `q` in `zone`: not at or below a delegation or a DNAME
/// (the name is another zone's, or the DNAME's), nor at a name holding a CNAME.
fn wildcard_variants_apply(zone: &Zone, q: &Query) -> bool {
    match zone.lookup(q.qname(), q.label_offs()) {
        Lookup::Delegation { .. } | Lookup::Dname(_) => false,
        Lookup::Exact(node) => zone.rrset(node, t::CNAME).is_none(),
        Lookup::Wildcard { .. } | Lookup::NxDomain { .. } => true,
    }
}

/// Answers `q` into `w` (header and question already written) from `zone`, the zone
/// [`find_zone`] chose (REFUSED when none). `online` is set for a zone answered with
/// compact denial (RFC 9824).
pub fn answer_in<'q>(
    w: &mut Writer<'_>,
    q: &'q Query,
    zones: &'q ZoneSet,
    zone: Option<(u32, &'q std::sync::Arc<Zone>)>,
    online: Option<Online<'q>>,
    alias: Option<&'q AliasCache>,
    client: Client<'_>,
) -> Answered {
    let Some((zi, zone)) = zone else {
        w.set_rcode(rcode::REFUSED);
        return Answered {
            kind: Kind::Refused,
            truncated: false,
            volatile: false,
            scope: 0,
            synth: Synth::None,
        };
    };
    w.set_flags(hf::AA);
    let mut a = Answerer {
        w,
        q,
        zones,
        dnssec: q.dnssec_ok(),
        truncated: false,
        online,
        alias,
        volatile: false,
        after: After::Nothing,
        dnames: [(0, 0); MAX_CHAIN],
        n_dnames: 0,
        proofs: None,
        synth: Synth::None,
    };
    let mut target = Target::from_query(q);
    // A name with variants by client network: the variant of the client's network when it
    // has the type asked (or a CNAME), else the zone's own records (as Knot's geoip module).
    let mut scope = 0;
    let picked = zones
        .geo(zi)
        .and_then(|g| g.lookup(q.qname()).map(|(n, wild)| (g.ttl, n, wild)))
        .filter(|&(_, _, wild)| !wild || wildcard_variants_apply(zone, q))
        .map(|(ttl, n, wild)| {
            if wild {
                a.synth = Synth::Geo;
            }
            let (chosen, len) = n.pick(client.ip, client.geodb);
            let v = chosen.and_then(|v| v.rrset(q.qtype).map(|(rtype, rds)| (v, rtype, rds)));
            (n, v, ttl, chosen.is_some(), len)
        });
    // Whatever answers (a variant, or the zone's own records where none applies or it
    // lacks the type), it is the answer of the client's part of the variants' networks
    // only (worked out only for an answer that carries a scope).
    let kind = match picked {
        Some((n, Some((v, rtype, rds)), ttl, _, len)) => {
            a.volatile = true;
            if client.ecs {
                scope = n.scope(client.ip, len, q.qtype);
            }
            a.variant(zone, v, (rtype, rds), ttl, &mut target)
        }
        Some((n, None, _, chose, len)) => {
            a.volatile = true;
            let k = a.resolve(zone, &mut target, Owner::Qname, 0);
            let k = if k == Kind::NxDomain && chose && !is_signed(zone) {
                // A name of the geo file alone, its variant without the type: the name
                // exists for this client (NODATA, as Knot answers; an NXDOMAIN lost its other
                // types from a resolver's cache, RFC 8020). A signed zone's proof says NXDOMAIN.
                a.w.set_rcode(rcode::NOERROR);
                Kind::NoData
            } else {
                k
            };
            if client.ecs {
                // A name of the geo file alone differs by client in its rcode whatever the
                // type (NODATA for the covered, NXDOMAIN for the others).
                let geo_only = k == Kind::NxDomain || (k == Kind::NoData && chose);
                scope = if geo_only {
                    n.scope_any(client.ip, len)
                } else {
                    n.scope(client.ip, len, q.qtype)
                };
            }
            k
        }
        None => a.resolve(zone, &mut target, Owner::Qname, 0),
    };
    // Additional data last, once the answer's authority records (proofs, NS, DS) are all
    // written: the sections follow each other on the wire. None in a truncated response.
    if !a.truncated {
        a.write_after();
    }
    Answered {
        kind,
        truncated: a.truncated,
        volatile: a.volatile,
        scope,
        synth: a.synth,
    }
}

/// The zone that answers `q`: the most specific one, except that DS at a zone's apex is
/// answered by the parent zone when we serve it (RFC 4035 §3.1.4.1).
pub fn find_zone<'z>(q: &Query, zones: &'z ZoneSet) -> Option<(u32, &'z std::sync::Arc<Zone>)> {
    zone_for(zones, q.qname(), q.label_offs(), q.qtype)
}

/// The zone that answers `qtype` at `name` (lower case, wire form, with its label offsets):
/// for the query's name, and again for each name a CNAME or DNAME leads to.
fn zone_for<'z>(
    zones: &'z ZoneSet,
    name: &[u8],
    offs: &[u8],
    qtype: u16,
) -> Option<(u32, &'z std::sync::Arc<Zone>)> {
    let hit = zones.find(name, offs)?;
    if qtype == t::DS
        && !offs.is_empty()
        && hit.1.apex().as_wire() == name
        && let Some(parent) = zones.find(name, &offs[1..])
    {
        return Some(parent);
    }
    Some(hit)
}

struct Answerer<'w, 'b, 'q> {
    w: &'w mut Writer<'b>,
    q: &'q Query,
    zones: &'q ZoneSet,
    dnssec: bool,
    truncated: bool,
    online: Option<Online<'q>>,
    alias: Option<&'q AliasCache>,
    volatile: bool,
    /// The additional data the answer calls for, written after everything else.
    after: After<'q>,
    /// DNAMEs already in the answer (zone address, node): a chain through one DNAME twice
    /// carries it once (an RRset is a set, RFC 2181 §5), as Knot and NSD answer.
    dnames: [(usize, NodeId); MAX_CHAIN],
    n_dnames: usize,
    /// The NSEC and NSEC3 proofs written (each once, however many denials rest on it);
    /// made with the first proof (most answers carry none).
    proofs: Option<crate::query::nsec_proofs::Written>,
    /// What synthesised the answer to the name asked.
    synth: Synth,
}

/// Additional data an answer calls for, held until the other sections are written (an
/// authority record written after an additional one would be read as additional).
enum After<'q> {
    Nothing,
    /// A and AAAA of the names an answer RRset points at.
    Additional(&'q Zone, RRset),
    /// A referral's glue: the NS RRset and its owner, the cut.
    Glue(&'q Zone, RRset, NodeId),
}

/// What a compact denial came to.
enum Compacted {
    /// Written.
    Done,
    /// Over a budget: the response is truncated.
    Truncated,
    /// Not possible for this name: prove with the zone's chain instead.
    Chain,
}

impl<'q> Answerer<'_, '_, 'q> {
    /// Denies `types`-only at `name` with one NSEC signed now (RFC 9824), when the zone is
    /// answered so and DO is set — or, at an ALIAS (`alias`), when dnsd signs the zone with
    /// NSEC (an NSEC whose next name is the owner's successor, RFC 4470's, proves that name's
    /// types beside any chain).
    fn compact(&mut self, zone: &Zone, name: &[u8], types: &mut [u16], alias: bool) -> Compacted {
        // A query for NSEC itself cannot be denied by an NSEC whose bitmap must list NSEC
        // (RFC 4034 §4.1.2): no validator accepts that proof. The zone's chain proves it.
        let online = self.compact_for(zone)
            || (alias && self.dnssec && zone.rrset(0, t::NSEC3PARAM).is_none() && {
                self.online.as_ref().is_some_and(|o| o.signer.signs(zone))
            });
        if !online || self.q.qtype == t::NSEC {
            return Compacted::Chain;
        }
        let Some(o) = self.online.as_mut() else {
            return Compacted::Chain;
        };
        let now = shield::clock::unix_ms() / 1000;
        match o.denier.deny(o.signer, o.zone_id, name, types, o.who, now) {
            Ok((nsec, sig, how)) => {
                o.stats.compact(how);
                let ttl = o.signer.ttl();
                let owner = if name == self.q.qname() {
                    Owner::Qname
                } else {
                    Owner::Name(name)
                };
                let m = self.w.mark();
                if self
                    .w
                    .rr(Section::Authority, owner, t::NSEC, ttl, nsec)
                    .is_err()
                    || self
                        .w
                        .rr(Section::Authority, owner, t::RRSIG, ttl, sig)
                        .is_err()
                {
                    self.w.rollback(m);
                    self.tc();
                }
                Compacted::Done
            }
            Err(Some(over)) => {
                o.stats.compact(over);
                if o.chain_past_budget {
                    return Compacted::Chain;
                }
                self.tc();
                Compacted::Truncated
            }
            Err(None) => Compacted::Chain,
        }
    }

    /// True when `zone` (the query's, not one a CNAME led to) is answered with compact
    /// denial and DO is set.
    fn compact_for(&self, zone: &Zone) -> bool {
        self.dnssec
            && self
                .online
                .as_ref()
                .is_some_and(|o| o.signer.denies() && o.signer.signs(zone))
    }

    /// The types a compact NSEC lists at `node` (its own, with RRSIG and NSEC); None when
    /// there are more than a compact NSEC carries.
    fn types_at(
        zone: &Zone,
        node: NodeId,
        denied: u16,
        out: &mut [u16; crate::signing::online::MAX_TYPES],
    ) -> Option<usize> {
        out[0] = t::RRSIG;
        out[1] = t::NSEC;
        let mut n = 2;
        let mut alias = false;
        for s in zone.rrsets(node) {
            // An ALIAS is never answered as itself: not listed (as PowerDNS lists it).
            alias |= s.rtype == t::ALIAS;
            if matches!(s.rtype, t::RRSIG | t::NSEC | t::ALIAS) || out[..n].contains(&s.rtype) {
                continue;
            }
            *out.get_mut(n)? = s.rtype;
            n += 1;
        }
        // An ALIAS answers A and AAAA here (its zone's chain lists them): denied only the
        // one asked, which its target lacks now.
        if alias {
            for ty in [t::A, t::AAAA] {
                if ty != denied && !out[..n].contains(&ty) {
                    *out.get_mut(n)? = ty;
                    n += 1;
                }
            }
        }
        Some(n)
    }

    fn tc(&mut self) {
        self.truncated = true;
        self.w.set_flags(hf::TC);
    }

    /// A proof that did not fit truncates the response.
    fn proved(&mut self, r: Result<(), Full>) {
        if r.is_err() {
            self.tc();
        }
    }

    /// Writes an RRset (and its RRSIGs when DO is set); sets TC when it does not fit.
    fn put(
        &mut self,
        sec: Section,
        zone: &Zone,
        node: NodeId,
        s: &RRset,
        owner: Owner<'_>,
    ) -> bool {
        let m = self.w.mark();
        if self.w.rrset(sec, zone, s, owner).is_err() {
            self.tc();
            return false;
        }
        if self.dnssec
            && let Some(sig) = zone.rrsig(node, s.rtype)
            && self.w.rrset(sec, zone, sig, owner).is_err()
        {
            // Never an RRset without its signatures.
            self.w.rollback(m);
            self.tc();
            return false;
        }
        true
    }

    fn resolve(
        &mut self,
        zone: &'q Zone,
        target: &mut Target,
        owner: Owner<'_>,
        depth: usize,
    ) -> Kind {
        let qtype = self.q.qtype;
        match zone.lookup(target.name(), target.offs()) {
            Lookup::Exact(node) => {
                let k = self.positive(zone, node, target, owner, depth);
                if k == Kind::NoData && self.dnssec {
                    let mut types = [0u16; crate::signing::online::MAX_TYPES];
                    // An ALIAS whose target lacks the address type asked: the chain lists
                    // both (they are answered here), so the denial is signed now.
                    let alias =
                        (qtype == t::A || qtype == t::AAAA) && zone.rrset(node, t::ALIAS).is_some();
                    let done = match Self::types_at(zone, node, qtype, &mut types) {
                        Some(n) => self.compact(zone, target.name(), &mut types[..n], alias),
                        None => Compacted::Chain,
                    };
                    if let Compacted::Chain = done {
                        let r = Prover::new(zone, self.proofs.get_or_insert_default())
                            .nodata(self.w, node);
                        self.proved(r);
                    }
                }
                k
            }
            Lookup::Wildcard {
                closest_encloser: ce,
                wildcard,
            } => {
                if depth == 0 && self.synth == Synth::None {
                    self.synth = Synth::Wildcard(wildcard);
                }
                // The proof is about this name, which a CNAME chain may replace: keep it.
                let asked = self.dnssec.then(|| target.clone());
                let k = self.positive(zone, wildcard, target, owner, depth);
                if let Some(q) = asked {
                    let mut p = Prover::new(zone, self.proofs.get_or_insert_default());
                    let r = if k == Kind::NoData {
                        p.wildcard_nodata(self.w, q.name(), q.offs(), ce, wildcard)
                    } else {
                        p.wildcard_answer(self.w, q.name(), q.offs(), ce)
                    };
                    self.proved(r);
                }
                k
            }
            Lookup::Delegation { cut, exact } => {
                if exact && qtype == t::DS {
                    // DS lives on the parent side of the cut: answer it here.
                    return match zone.rrset(cut, t::DS) {
                        Some(ds) => {
                            self.put(Section::Answer, zone, cut, ds, owner);
                            Kind::Answer
                        }
                        None => {
                            self.negative(zone);
                            if self.dnssec {
                                let r = Prover::new(zone, self.proofs.get_or_insert_default())
                                    .nodata(self.w, cut);
                                self.proved(r);
                            }
                            Kind::NoData
                        }
                    };
                }
                self.referral(zone, cut, depth);
                Kind::Referral
            }
            Lookup::Dname(node) => self.dname(zone, node, target, owner, depth),
            Lookup::NxDomain { closest_encloser } => {
                let compact = self.compact_for(zone);
                if compact {
                    // Compact denial: the name "exists" with no type but NXNAME, NOERROR
                    // (still an NXDOMAIN to the defences and the counters).
                    self.negative(zone);
                    if self.online.as_ref().is_some_and(|o| o.nx_truncated) {
                        self.tc();
                        return Kind::NxDomain;
                    }
                    let mut types = [t::RRSIG, t::NSEC, crate::signing::online::NXNAME];
                    match self.compact(zone, target.name(), &mut types, false) {
                        Compacted::Done | Compacted::Truncated => {
                            if self.online.as_ref().is_some_and(|o| o.compact_ok) {
                                self.w.set_rcode(rcode::NXDOMAIN);
                            }
                            return Kind::NxDomain;
                        }
                        Compacted::Chain => {}
                    }
                }
                self.w.set_rcode(rcode::NXDOMAIN);
                if !compact {
                    self.negative(zone);
                }
                if self.dnssec {
                    let r = Prover::new(zone, self.proofs.get_or_insert_default()).nxdomain(
                        self.w,
                        target.name(),
                        target.offs(),
                        closest_encloser,
                    );
                    self.proved(r);
                }
                Kind::NxDomain
            }
        }
    }

    fn positive(
        &mut self,
        zone: &'q Zone,
        node: NodeId,
        target: &mut Target,
        owner: Owner<'_>,
        depth: usize,
    ) -> Kind {
        let qtype = self.q.qtype;
        let n = zone.node(node);
        if qtype == t::ANY {
            // RFC 8482: one RRset, not all of them (a CNAME alone, not followed).
            let first = zone
                .rrsets(node)
                .iter()
                .find(|s| s.rtype != t::RRSIG && s.rtype != t::NSEC)
                .copied();
            return match first {
                // With its additional data, as for the type asked (Knot and NSD add an MX's
                // or SRV's target addresses here too).
                Some(s) => {
                    if self.put(Section::Answer, zone, node, &s, owner) && s.has_names() {
                        self.after = After::Additional(zone, s);
                    }
                    Kind::Answer
                }
                None => {
                    self.negative(zone);
                    Kind::NoData
                }
            };
        }
        // A CNAME is followed unless the type asked is there beside it (NSEC, RRSIG, as
        // Knot, NSD and BIND answer: RFC 2181 §10.1, RFC 4035 §2.5).
        if n.has(flags::CNAME)
            && qtype != t::CNAME
            && qtype != t::RRSIG
            && zone.rrset(node, qtype).is_none()
        {
            let cname = *zone.rrset(node, t::CNAME).expect("CNAME flag");
            if !self.put(Section::Answer, zone, node, &cname, owner) {
                return Kind::Answer;
            }
            let Some((_, rd)) = zone.rrs(&cname).next() else {
                return Kind::Answer;
            };
            return self.follow(rd, target, depth);
        }
        if qtype == t::RRSIG {
            let mut any = false;
            for s in zone.rrsets(node).iter().filter(|s| s.rtype == t::RRSIG) {
                any = true;
                if self.w.rrset(Section::Answer, zone, s, owner).is_err() {
                    self.tc();
                    break;
                }
            }
            if !any {
                self.negative(zone);
                return Kind::NoData;
            }
            return Kind::Answer;
        }
        // An ALIAS stands for the addresses it answers, never for itself (PowerDNS answers a
        // query for its type NODATA; its target's name stays ours).
        match zone
            .rrset(node, qtype)
            .copied()
            .filter(|_| qtype != t::ALIAS)
        {
            Some(s) => {
                if self.put(Section::Answer, zone, node, &s, owner) && s.has_names() {
                    self.after = After::Additional(zone, s);
                }
                Kind::Answer
            }
            None if (qtype == t::A || qtype == t::AAAA) && zone.rrset(node, t::ALIAS).is_some() => {
                let asked = Target::of(target.name());
                self.alias(zone, node, &asked, owner)
            }
            None => {
                self.negative(zone);
                Kind::NoData
            }
        }
    }

    /// A or AAAA at an ALIAS (PowerDNS's), made when asked: the target's records in the
    /// zones served now (following CNAMEs and ALIASes), else what the resolver gave for it,
    /// under the asked name, with the lowest TTL met on the way. No records: NODATA; a
    /// target that cannot be had (no resolver, not resolved yet, a loop, a name that does not
    /// exist): SERVFAIL.
    fn alias(&mut self, zone: &Zone, node: NodeId, asked: &Target, owner: Owner<'_>) -> Kind {
        self.volatile = true;
        let qtype = self.q.qtype;
        // A wildcard's ALIAS is signed over the wildcard (the RRSIG's labels without the `*`,
        // RFC 4034 §3.1.3), as the wildcard's other records are: one signature serves every
        // name it answers, from the cache. Signed over the name asked, each new name cost a
        // signature (and the proof beside it said the name does not exist).
        let wild = zone.node_name(node);
        let signed_as = if wild.starts_with(b"\x01*") {
            let mut lower = [0u8; MAX_NAME_LEN];
            let n = wild.len().min(MAX_NAME_LEN);
            lower[..n].copy_from_slice(&wild[..n]);
            lower[..n].make_ascii_lowercase();
            Target::of(&lower[..n])
        } else {
            asked.clone()
        };
        let asked = &signed_as;
        let a = *zone.rrset(node, t::ALIAS).expect("checked");
        let Some((_, rd)) = zone.rrs(&a).next() else {
            self.negative(zone);
            return Kind::NoData;
        };
        let mut ttl = a.ttl;
        let mut target = Target::of(rd);
        for _ in 0..MAX_CHAIN {
            let Some((zi, z)) = self.zones.find(target.name(), target.offs()) else {
                return self.alias_resolved(zone, &target, ttl, asked, owner);
            };
            if self.zones.is_expired(zi) {
                // A target in a zone answered SERVFAIL (expired, or without data): it cannot
                // be had, neither from stale data nor from none.
                self.w.set_rcode(rcode::SERVFAIL);
                return Kind::Answer;
            }
            let z = z.clone();
            let n = match z.lookup(target.name(), target.offs()) {
                Lookup::Exact(n) => n,
                Lookup::Wildcard { wildcard, .. } => wildcard,
                // A target that does not exist: SERVFAIL, as PowerDNS answers it (the name
                // asked exists; what it stands for cannot be had).
                Lookup::NxDomain { .. } => {
                    self.w.set_rcode(rcode::SERVFAIL);
                    return Kind::Answer;
                }
                // Delegated away or renamed: the resolver knows.
                Lookup::Delegation { .. } | Lookup::Dname(_) => {
                    return self.alias_resolved(zone, &target, ttl, asked, owner);
                }
            };
            if let Some(s) = z.rrset(n, qtype).copied() {
                let mut rds: [&[u8]; MAX_ALIAS_RRS] = [&[]; MAX_ALIAS_RRS];
                let mut k = 0;
                for (_, rd) in z.rrs(&s).take(MAX_ALIAS_RRS) {
                    rds[k] = rd;
                    k += 1;
                }
                if k == MAX_ALIAS_RRS && z.rrs(&s).nth(MAX_ALIAS_RRS).is_some() {
                    BOUNDS.records.fetch_add(1, Ordering::Relaxed);
                }
                return self.put_made(
                    zone,
                    asked.name(),
                    owner,
                    qtype,
                    ttl.min(s.ttl),
                    &mut rds[..k],
                );
            }
            let next = z
                .rrset(n, t::CNAME)
                .or_else(|| z.rrset(n, t::ALIAS))
                .copied();
            let Some(next) = next else {
                self.negative(zone);
                return Kind::NoData;
            };
            let Some((_, rd)) = z.rrs(&next).next() else {
                break;
            };
            ttl = ttl.min(next.ttl);
            let Some(len) = zones::name::wire_name_len(rd) else {
                break;
            };
            let mut lower = [0u8; MAX_NAME_LEN];
            lower[..len].copy_from_slice(&rd[..len]);
            lower[..len].make_ascii_lowercase();
            target.set(&lower[..len]);
        }
        // A loop, or too long a chain.
        BOUNDS.chain.fetch_add(1, Ordering::Relaxed);
        self.w.set_rcode(rcode::SERVFAIL);
        Kind::Answer
    }

    /// An ALIAS target outside our zones: from the resolver's cache, else SERVFAIL (the name
    /// is queued for the resolver; without one configured it never will be).
    fn alias_resolved(
        &mut self,
        zone: &Zone,
        target: &Target,
        ttl: u32,
        asked: &Target,
        owner: Owner<'_>,
    ) -> Kind {
        let now = shield::clock::unix_ms() / 1000;
        let Some((e, left)) = self
            .alias
            .and_then(|c| c.get(target.name(), self.q.qtype, now))
        else {
            self.w.set_rcode(rcode::SERVFAIL);
            return Kind::Answer;
        };
        if e.nxdomain || e.failed {
            self.w.set_rcode(rcode::SERVFAIL);
            return Kind::Answer;
        }
        if e.rdatas.is_empty() {
            self.negative(zone);
            return Kind::NoData;
        }
        let mut rds: [&[u8]; MAX_ALIAS_RRS] = [&[]; MAX_ALIAS_RRS];
        let mut k = 0;
        for rd in e.rdatas.iter().take(MAX_ALIAS_RRS) {
            rds[k] = rd;
            k += 1;
        }
        let qtype = self.q.qtype;
        self.put_made(
            zone,
            asked.name(),
            owner,
            qtype,
            ttl.min(left),
            &mut rds[..k],
        )
    }

    /// A variant's records (`rtype`: the type asked, or its CNAME, followed) for a name with
    /// variants by client network.
    fn variant(
        &mut self,
        zone: &Zone,
        v: &crate::zone::geo::Variant,
        (rtype, rdatas): (u16, &[Box<[u8]>]),
        ttl: u32,
        target: &mut Target,
    ) -> Kind {
        let mut rds: [&[u8]; MAX_ALIAS_RRS] = [&[]; MAX_ALIAS_RRS];
        let mut k = 0;
        for rd in rdatas.iter().take(MAX_ALIAS_RRS) {
            rds[k] = rd;
            k += 1;
        }
        let qname = self.q.qname();
        let presigned =
            is_signed(zone) && !self.online.as_ref().is_some_and(|o| o.signer.signs(zone));
        let kind = if self.dnssec && presigned {
            // A pre-signed zone: the variant's signatures come from its file.
            let m = self.w.mark();
            let sigs = v.sigs(rtype).map(|s| (t::RRSIG, s));
            for (ty, rd) in rds[..k].iter().map(|rd| (rtype, *rd)).chain(sigs) {
                if self
                    .w
                    .rr(Section::Answer, Owner::Qname, ty, ttl, rd)
                    .is_err()
                {
                    self.w.rollback(m);
                    self.tc();
                    break;
                }
            }
            Kind::Answer
        } else {
            self.put_made(zone, qname, Owner::Qname, rtype, ttl, &mut rds[..k])
        };
        if rtype == t::CNAME && self.q.qtype != t::CNAME && self.w.rcode() == rcode::NOERROR {
            let mut first = [0u8; MAX_NAME_LEN];
            let rd = rds[0];
            let n = rd.len().min(MAX_NAME_LEN);
            first[..n].copy_from_slice(&rd[..n]);
            return self.follow(&first[..n], target, 0);
        }
        kind
    }

    /// Writes an RRset made when asked (an ALIAS's A or AAAA, a variant's records), signed
    /// over `asked` (lower-case wire: the name asked, or the wildcard that stands for it) now when the zone is one dnsd signs and DO is set
    /// (never unsigned there: over a budget, TC=1 over UDP; a signature that cannot be made,
    /// SERVFAIL).
    fn put_made(
        &mut self,
        zone: &Zone,
        asked: &[u8],
        owner: Owner<'_>,
        qtype: u16,
        ttl: u32,
        rds: &mut [&[u8]],
    ) -> Kind {
        let m = self.w.mark();
        for rd in rds.iter() {
            if self.w.rr(Section::Answer, owner, qtype, ttl, rd).is_err() {
                self.w.rollback(m);
                self.tc();
                return Kind::Answer;
            }
        }
        if !self.dnssec || !is_signed(zone) {
            return Kind::Answer;
        }
        let Some(o) = self.online.as_mut().filter(|o| o.signer.signs(zone)) else {
            // A signed zone without an online signer (pre-signed zones with an ALIAS are
            // refused at load): no unsigned answer.
            self.w.rollback(m);
            self.w.set_rcode(rcode::SERVFAIL);
            return Kind::Answer;
        };
        let now = shield::clock::unix_ms() / 1000;
        // Over TCP a proven source is not held to the budget — but a wildcard of the variants
        // by client network is signed over each name asked (the zone's chain holds no such
        // wildcard to prove it by): work a client picks, so it is budgeted there too.
        let budget = !o.chain_past_budget || self.synth == Synth::Geo;
        match o.denier.sign_rrset(
            o.signer, o.zone_id, asked, qtype, ttl, rds, o.who, now, budget,
        ) {
            Ok((sig, how)) => {
                o.stats.compact(how);
                if self
                    .w
                    .rr(Section::Answer, owner, t::RRSIG, ttl, sig)
                    .is_err()
                {
                    self.w.rollback(m);
                    self.tc();
                }
            }
            Err(Some(over)) => {
                o.stats.compact(over);
                self.w.rollback(m);
                if o.chain_past_budget {
                    // Over TCP (a geo wildcard's budget): no TC=1 a client could retry.
                    self.w.set_rcode(rcode::SERVFAIL);
                } else {
                    self.tc();
                }
            }
            Err(None) => {
                self.w.rollback(m);
                self.w.set_rcode(rcode::SERVFAIL);
            }
        }
        Kind::Answer
    }

    /// Follows a CNAME (or synthesised CNAME) to `rd`, the target name in wire format.
    fn follow(&mut self, rd: &[u8], target: &mut Target, depth: usize) -> Kind {
        let Some(len) = zones::name::wire_name_len(rd) else {
            return Kind::Answer;
        };
        let mut lower = [0u8; MAX_NAME_LEN];
        lower[..len].copy_from_slice(&rd[..len]);
        lower[..len].make_ascii_lowercase();
        let lower = &lower[..len];
        // Stop at loops (the name is already the target) and at long chains.
        if depth + 1 >= MAX_CHAIN || lower == target.name() || lower == self.q.qname() {
            return Kind::Answer;
        }
        target.set(lower);
        let zones = self.zones;
        // DS at a served child's apex comes from the parent, reached directly or not.
        let Some((zi, zone)) = zone_for(zones, target.name(), target.offs(), self.q.qtype) else {
            // Out of our zones: the resolver follows it.
            return Kind::Answer;
        };
        if zones.is_expired(zi) {
            // Into a zone answered SERVFAIL (expired, or without data): the resolver follows
            // it and meets that; its stale or absent data is never joined to this answer.
            return Kind::Answer;
        }
        let at = self.w.find_name(lower);
        let mut buf = [0u8; MAX_NAME_LEN];
        buf[..len].copy_from_slice(lower);
        let owner = match at {
            Some(o) => Owner::At(o),
            None => Owner::Name(&buf[..len]),
        };
        match self.resolve(zone, target, owner, depth + 1) {
            // The chain's answer data keeps the response positive; a missing end sets the rcode.
            Kind::NoData | Kind::Answer | Kind::Referral => Kind::Answer,
            Kind::NxDomain => Kind::NxDomain,
            Kind::Refused => Kind::Answer,
        }
    }

    fn dname(
        &mut self,
        zone: &Zone,
        node: NodeId,
        target: &mut Target,
        owner: Owner<'_>,
        depth: usize,
    ) -> Kind {
        let dn = *zone.rrset(node, t::DNAME).expect("DNAME flag");
        if depth == 0 && self.synth == Synth::None {
            self.synth = Synth::Dname(node);
        }
        let owner_name = zone.node_name(node);
        let mut owner_buf = [0u8; MAX_NAME_LEN];
        owner_buf[..owner_name.len()].copy_from_slice(owner_name);
        let owner_name = &owner_buf[..owner_name.len()];
        let key = (std::ptr::from_ref(zone) as usize, node);
        if !self.dnames[..self.n_dnames].contains(&key) {
            if !self.put(Section::Answer, zone, node, &dn, Owner::Name(owner_name)) {
                return Kind::Answer;
            }
            if self.n_dnames < MAX_CHAIN {
                self.dnames[self.n_dnames] = key;
                self.n_dnames += 1;
            }
        }
        let Some((_, dtarget)) = zone.rrs(&dn).next() else {
            return Kind::Answer;
        };
        // New name: the labels of the target name above the DNAME owner, then the DNAME target.
        let prefix_len = target.len - owner_name.len();
        let Some(dlen) = zones::name::wire_name_len(dtarget) else {
            return Kind::Answer;
        };
        if prefix_len + dlen > MAX_NAME_LEN {
            self.w.set_rcode(rcode::YXDOMAIN);
            return Kind::Answer;
        }
        let mut synth = [0u8; MAX_NAME_LEN];
        synth[..prefix_len].copy_from_slice(&target.name()[..prefix_len]);
        synth[prefix_len..prefix_len + dlen].copy_from_slice(&dtarget[..dlen]);
        let synth = &synth[..prefix_len + dlen];
        if self
            .w
            .rr(Section::Answer, owner, t::CNAME, dn.ttl, synth)
            .is_err()
        {
            self.tc();
            return Kind::Answer;
        }
        if self.q.qtype == t::CNAME {
            // The synthesised CNAME is the answer to a CNAME query (RFC 6672 §3, RFC 1034
            // §4.3.2 step 3a): nothing to follow, nothing in authority.
            return Kind::Answer;
        }
        self.follow(synth, target, depth)
    }

    fn referral(&mut self, zone: &'q Zone, cut: NodeId, depth: usize) {
        if depth == 0 {
            self.w.clear_flags(hf::AA);
        }
        let Some(ns) = zone.rrset(cut, t::NS).copied() else {
            return;
        };
        let cut_name = zone.node_name(cut);
        let mut nb = [0u8; MAX_NAME_LEN];
        nb[..cut_name.len()].copy_from_slice(cut_name);
        let cut_name = &nb[..cut_name.len()];
        if self
            .w
            .rrset(Section::Authority, zone, &ns, Owner::Name(cut_name))
            .is_err()
        {
            self.tc();
            return;
        }
        // DS and its proofs belong to signed zones (RFC 4035 §3.1.4): an unsigned zone's
        // referral is NS and glue whatever DO says, as Knot and NSD answer.
        if self.dnssec && is_signed(zone) {
            match zone.rrset(cut, t::DS).copied() {
                Some(ds) => {
                    self.put(Section::Authority, zone, cut, &ds, Owner::Name(cut_name));
                }
                // An unsigned child: prove that there is no DS.
                None => {
                    let r =
                        Prover::new(zone, self.proofs.get_or_insert_default()).no_ds(self.w, cut);
                    self.proved(r);
                }
            }
        }
        self.after = After::Glue(zone, ns, cut);
    }

    /// Writes the additional data held for the end.
    fn write_after(&mut self) {
        match std::mem::replace(&mut self.after, After::Nothing) {
            After::Nothing => {}
            After::Additional(zone, s) => self.additional(zone, &s),
            After::Glue(zone, ns, cut) => self.glue(zone, &ns, zone.node_name(cut)),
        }
    }

    /// A and AAAA of the NS targets of a referral; in-bailiwick glue that does not fit sets TC.
    /// Required glue (names below the cut) goes first, the rest after it where room is left
    /// (RFC 9471): an optional address that sorts first never takes a required one's room.
    fn glue(&mut self, zone: &Zone, ns: &RRset, cut_name: &[u8]) {
        for want_required in [true, false] {
            self.glue_pass(zone, ns, cut_name, want_required);
        }
    }

    /// One pass of [`Self::glue`]: the required glue, or the optional.
    fn glue_pass(&mut self, zone: &Zone, ns: &RRset, cut_name: &[u8], want_required: bool) {
        for (_, rd) in zone.rrs(ns) {
            let Some(len) = zones::name::wire_name_len(rd) else {
                continue;
            };
            let mut lower = [0u8; MAX_NAME_LEN];
            lower[..len].copy_from_slice(&rd[..len]);
            lower[..len].make_ascii_lowercase();
            let lower = &lower[..len];
            if !zones::name::is_subdomain(lower, zone.apex().as_wire()) {
                continue;
            }
            let required = zones::name::is_subdomain(lower, cut_name);
            if required != want_required {
                continue;
            }
            let Some(node) = address_node(zone, lower) else {
                continue;
            };
            for rtype in [t::A, t::AAAA] {
                if let Some(s) = zone.rrset(node, rtype).copied() {
                    let owner = match self.w.find_name(lower) {
                        Some(o) => Owner::At(o),
                        None => Owner::Name(lower),
                    };
                    // Addresses that are our signed data (not glue) go with their RRSIGs
                    // when DO is set (RFC 4035 §3.1.1), or not at all.
                    let sig = if self.dnssec {
                        zone.rrsig(node, rtype)
                    } else {
                        None
                    };
                    let m = self.w.mark();
                    let ok = self.w.rrset(Section::Additional, zone, &s, owner).is_ok()
                        && sig.is_none_or(|sig| {
                            self.w.rrset(Section::Additional, zone, sig, owner).is_ok()
                        });
                    if !ok {
                        self.w.rollback(m);
                        if required {
                            self.tc();
                        }
                        // Smaller records after it may still fit (as Knot packs them).
                    }
                }
            }
        }
    }

    /// A and AAAA for the names an answer points at (NS, MX, SRV targets), when we hold them;
    /// for SVCB and HTTPS, the target's own SVCB or HTTPS RRset too (RFC 9460 §4.1, as Knot
    /// adds it: an AliasMode answer then carries where it leads).
    fn additional(&mut self, zone: &Zone, s: &RRset) {
        let svcb = s.rtype == t::SVCB || s.rtype == t::HTTPS;
        let types: &[u16] = if svcb {
            &[t::A, t::AAAA, s.rtype]
        } else {
            &[t::A, t::AAAA]
        };
        let mut targets: [(usize, usize); 16] = [(0, 0); 16];
        for (_, rd) in zone.rrs(s) {
            let mut n = 0;
            rdata::names(s.rtype, rd, &mut |r| {
                if r.additional && n < targets.len() {
                    targets[n] = (r.offset, r.len);
                    n += 1;
                }
            });
            for &(off, len) in &targets[..n] {
                let mut lower = [0u8; MAX_NAME_LEN];
                lower[..len].copy_from_slice(&rd[off..off + len]);
                lower[..len].make_ascii_lowercase();
                let lower = &lower[..len];
                if !zones::name::is_subdomain(lower, zone.apex().as_wire()) {
                    continue;
                }
                // Its own node, else the wildcard that covers it (RFC 4592 §3.3.1), as Knot
                // and NSD find the addresses of an MX, SRV or SVCB target.
                let Some(node) = zone.find(lower).or_else(|| covering_wildcard(zone, lower)) else {
                    continue;
                };
                // Below a cut: glue, which an NS answer carries (the root's priming answer
                // carries root-servers.net's, below net.); never data a DNAME occludes.
                if zone.node(node).has(flags::OCCLUDED)
                    && !(s.rtype == t::NS && below_cut(zone, node))
                {
                    continue;
                }
                for &rtype in types {
                    if let Some(a) = zone.rrset(node, rtype).copied() {
                        // The answer itself (a target naming its own owner) is not repeated.
                        if a == *s {
                            continue;
                        }
                        let owner = match self.w.find_name(lower) {
                            Some(o) => Owner::At(o),
                            None => Owner::Name(lower),
                        };
                        let m = self.w.mark();
                        let ok = self.w.rrset(Section::Additional, zone, &a, owner).is_ok()
                            && (!self.dnssec
                                || zone.rrsig(node, rtype).is_none_or(|sig| {
                                    self.w.rrset(Section::Additional, zone, sig, owner).is_ok()
                                }));
                        if !ok {
                            // Additional data is optional: no TC; smaller RRsets after it
                            // may still fit (as Knot packs them).
                            self.w.rollback(m);
                        }
                    }
                }
            }
        }
    }

    /// NXDOMAIN / NODATA authority: the SOA with the negative TTL (RFC 2308 §3).
    fn negative(&mut self, zone: &Zone) {
        let Some(soa) = zone.rrset(0, t::SOA).copied() else {
            return;
        };
        let Some((_, rd)) = zone.rrs(&soa).next() else {
            return;
        };
        let apex = zone.apex().as_wire();
        let m = self.w.mark();
        let r: Result<(), Full> = self.w.rr(
            Section::Authority,
            Owner::Name(apex),
            t::SOA,
            zone.negative_ttl(),
            rd,
        );
        if r.is_err() {
            self.tc();
            return;
        }
        if self.dnssec
            && let Some(sig) = zone.rrsig(0, t::SOA).copied()
            && self
                .w
                .rrset_ttl(
                    Section::Authority,
                    zone,
                    &sig,
                    Owner::Name(apex),
                    zone.negative_ttl(),
                )
                .is_err()
        {
            // Never the SOA without its signature.
            self.w.rollback(m);
            self.tc();
        }
    }
}

/// True when `zone` is signed: a DNSKEY or a signed SOA at its apex.
#[inline]
fn is_signed(zone: &Zone) -> bool {
    let apex = zone.apex_node();
    zone.rrset(apex, t::DNSKEY).is_some() || zone.rrsig(apex, t::SOA).is_some()
}

/// True when `node` is below a zone cut (glue), not below a DNAME.
fn below_cut(zone: &Zone, node: NodeId) -> bool {
    let mut id = node;
    while zone.node(id).has(flags::OCCLUDED) {
        id = zone.node(id).parent();
    }
    zone.node(id).has(flags::DELEG)
}

/// The node holding a name server's addresses: its own name, else the wildcard that covers
/// it (RFC 4592) — in our data, or below the cut among the glue — as Knot and NSD find them
/// for a referral.
fn address_node(zone: &Zone, lower: &[u8]) -> Option<NodeId> {
    if let Some(n) = zone.find(lower) {
        return Some(n);
    }
    let t = Target::of(lower);
    match zone.lookup(t.name(), t.offs()) {
        Lookup::Wildcard { wildcard, .. } => Some(wildcard),
        Lookup::Delegation { exact: false, .. } => glue_wildcard(zone, lower),
        _ => None,
    }
}

/// The wildcard of `zone` that answers for `lower`, a name the zone lacks (none below a cut
/// or a DNAME).
fn covering_wildcard(zone: &Zone, lower: &[u8]) -> Option<NodeId> {
    let t = Target::of(lower);
    match zone.lookup(t.name(), t.offs()) {
        Lookup::Wildcard { wildcard, .. } => Some(wildcard),
        _ => None,
    }
}

/// Below a cut, the wildcard at the closest existing ancestor of `lower` (glue such as
/// `*.ns.child A`), if there is one.
fn glue_wildcard(zone: &Zone, lower: &[u8]) -> Option<NodeId> {
    let mut buf = [0u8; MAX_NAME_LEN + 2];
    buf[..2].copy_from_slice(b"\x01*");
    let mut at = 0;
    // The labels above `lower` in turn, nearest first: the first that exists is the
    // closest encloser, whose wildcard alone may match.
    while at < lower.len() && lower[at] != 0 {
        at += 1 + lower[at] as usize;
        let anc = &lower[at..];
        if zone.find(anc).is_some() {
            if anc.len() + 2 > buf.len() {
                return None;
            }
            buf[2..2 + anc.len()].copy_from_slice(anc);
            return zone.find(&buf[..2 + anc.len()]);
        }
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    //! Answering in class IN, straight into a writer: answers, NODATA and NXDOMAIN with the
    //! SOA (negative TTL) in authority, referrals with glue, CNAME chains, wildcards, DNAME.

    use super::*;
    use crate::query::testkit::{Q, Reply, example_set, load_zone, zone_set};
    use crate::zone::served::ServeOptions;

    /// Asks `q` of `zones`: the reply and what the answerer said it was.
    fn ask(zones: &ZoneSet, q: Q) -> (Reply, Answered) {
        ask_limited(zones, &q, 65535)
    }

    /// Asks `q` of `zones` with the writer limited to `limit` bytes.
    pub(crate) fn ask_limited(zones: &ZoneSet, q: &Q, limit: usize) -> (Reply, Answered) {
        let (req, q) = q.parsed();
        let mut out = vec![0u8; 65535];
        let mut w = Writer::new(&mut out, limit);
        w.start(&req, &q, rcode::NOERROR, true);
        let a = answer_in(
            &mut w,
            &q,
            zones,
            find_zone(&q, zones),
            None,
            None,
            Client::at(std::net::Ipv4Addr::LOCALHOST.into()),
        );
        let n = w.finish();
        (Reply::parse(&out[..n]), a)
    }

    /// Each record's owner and type, in order.
    fn owners_and_types(rrs: &[crate::query::testkit::Rr]) -> Vec<(&str, u16)> {
        rrs.iter().map(|x| (x.owner.as_str(), x.rtype)).collect()
    }

    fn example() -> std::sync::Arc<ZoneSet> {
        example_set().load_full()
    }

    /// The SOA in authority with the negative TTL (min of SOA TTL 300 and minimum 60).
    fn assert_negative(r: &Reply) {
        assert_eq!(r.authority.len(), 1, "{r:?}");
        let soa = &r.authority[0];
        assert_eq!((soa.owner.as_str(), soa.rtype), ("example.com.", t::SOA));
        assert_eq!(soa.ttl, 60);
        assert_eq!(r.rdata_name(soa, 0), "ns1.example.com.");
    }

    #[test]
    fn an_answer_with_additional_data() {
        let z = example();
        let (r, a) = ask(&z, Q::new("WWW.Example.com.", t::A));
        assert_eq!((a.kind, a.truncated), (Kind::Answer, false));
        assert!(r.aa() && !r.tc() && r.rcode() == rcode::NOERROR);
        // The question is echoed in its case; the answer points at it.
        assert_eq!(&r.bytes[13..16], b"WWW");
        assert_eq!(r.answer.len(), 1);
        assert_eq!(
            (r.answer[0].owner.as_str(), r.answer[0].ttl),
            ("www.example.com.", 300)
        );
        assert_eq!(r.answer[0].rdata, [192, 0, 2, 10]);
        assert!(r.authority.is_empty() && r.additional.is_empty());
        // MX: the exchange's A and AAAA go in additional.
        let (r, a) = ask(&z, Q::new("mail.example.com.", t::MX));
        assert_eq!(a.kind, Kind::Answer);
        assert_eq!(r.rdata_name(&r.answer[0], 2), "www.example.com.");
        let add = owners_and_types(&r.additional);
        assert_eq!(
            add,
            [("www.example.com.", t::A), ("www.example.com.", t::AAAA)]
        );
        // ANY: one RRset (RFC 8482), with its additional data (it had none).
        let (r, _) = ask(&z, Q::new("www.example.com.", t::ANY));
        assert_eq!(r.answer.len(), 1);
        let (r, _) = ask(&z, Q::new("mail.example.com.", t::ANY));
        assert_eq!(r.answer.len(), 1);
        assert_eq!(r.answer[0].rtype, t::MX);
        assert_eq!(
            owners_and_types(&r.additional),
            [("www.example.com.", t::A), ("www.example.com.", t::AAAA)]
        );
    }

    #[test]
    fn nodata_and_nxdomain_carry_the_soa_with_the_negative_ttl() {
        let z = example();
        let (r, a) = ask(&z, Q::new("www.example.com.", t::MX));
        assert_eq!(a.kind, Kind::NoData);
        assert!(r.aa() && r.rcode() == rcode::NOERROR && r.answer.is_empty());
        assert_negative(&r);
        // An empty non-terminal exists: NODATA, not NXDOMAIN.
        let (r, a) = ask(&z, Q::new("target.example.com.", t::A));
        assert_eq!((a.kind, r.rcode()), (Kind::NoData, rcode::NOERROR));
        assert_negative(&r);
        let (r, a) = ask(&z, Q::new("nothere.example.com.", t::A));
        assert_eq!(a.kind, Kind::NxDomain);
        assert!(r.aa() && r.rcode() == rcode::NXDOMAIN && r.answer.is_empty());
        assert_negative(&r);
        // A name in no zone: REFUSED, nothing else.
        let (r, a) = ask(&z, Q::new("example.org.", t::A));
        assert_eq!((a.kind, r.rcode()), (Kind::Refused, rcode::REFUSED));
        assert!(!r.aa() && r.is_empty());
    }

    #[test]
    fn a_referral_has_the_ns_in_authority_and_glue_in_additional() {
        let z = example();
        for name in ["host.sub.example.com.", "sub.example.com."] {
            let (r, a) = ask(&z, Q::new(name, t::A));
            assert_eq!(a.kind, Kind::Referral, "{name}");
            assert!(!r.aa() && r.rcode() == rcode::NOERROR && r.answer.is_empty());
            let ns: Vec<String> = r
                .authority
                .iter()
                .map(|x| {
                    assert_eq!((x.owner.as_str(), x.rtype), ("sub.example.com.", t::NS));
                    r.rdata_name(x, 0)
                })
                .collect();
            assert_eq!(ns, ["ns.sub.example.com.", "ns.elsewhere.net."]);
            // Glue for the in-bailiwick server only.
            assert_eq!(r.additional.len(), 1, "{r:?}");
            assert_eq!(r.additional[0].owner, "ns.sub.example.com.");
            assert_eq!(r.additional[0].rdata, [192, 0, 2, 30]);
        }
        // DS at the cut is the parent's: NODATA here.
        let (r, a) = ask(&z, Q::new("sub.example.com.", t::DS));
        assert_eq!(a.kind, Kind::NoData);
        assert!(r.aa());
        assert_negative(&r);
    }

    #[test]
    fn an_https_answer_carries_its_targets_https_and_addresses() {
        let text = "$ORIGIN s.test.\n$TTL 300\n@ SOA ns1 hm 1 2 3 4 5\n@ NS ns1\nns1 A 192.0.2.1\n\
                    @ HTTPS 0 pool\npool HTTPS 1 . alpn=h2\npool HTTPS 2 . alpn=h3\n\
                    pool A 192.0.2.7\nself HTTPS 1 self\nself A 192.0.2.8\n";
        let z = zone_set(vec![(load_zone("s.test.", text), ServeOptions::default())]).load_full();
        let (r, a) = ask(&z, Q::new("s.test.", t::HTTPS));
        assert_eq!(a.kind, Kind::Answer);
        let add = owners_and_types(&r.additional);
        // AliasMode: where it leads, its ServiceMode records (once) and address.
        assert_eq!(
            add,
            [
                ("pool.s.test.", t::A),
                ("pool.s.test.", t::HTTPS),
                ("pool.s.test.", t::HTTPS)
            ]
        );
        // A target naming its own owner: its address, the answer not repeated.
        let (r, _) = ask(&z, Q::new("self.s.test.", t::HTTPS));
        let add = owners_and_types(&r.additional);
        assert_eq!(add, [("self.s.test.", t::A)]);
    }

    #[test]
    fn required_glue_goes_before_optional_glue() {
        // Eight servers below the cut (required glue) and eight siblings in the parent
        // (optional, A and AAAA) whose names sort first: in 512 bytes every required address
        // fits, without TC, as Knot and NSD answer (RFC 9471).
        let mut text = String::from(
            "$ORIGIN big.test.\n$TTL 300\n@ SOA ns1 hm 1 2 3 4 5\n@ NS ns1\nns1 A 192.0.2.1\n",
        );
        for i in 0..8 {
            text.push_str(&format!(
                "delmix NS n{i}.delmix\nn{i}.delmix A 10.4.0.{i}\n"
            ));
        }
        for i in 0..8 {
            text.push_str(&format!(
                "delmix NS a{i}.big.test.\na{i} A 10.5.0.{i}\na{i} AAAA 2001:db8::5:{i}\n"
            ));
        }
        let z = zone_set(vec![(
            load_zone("big.test.", &text),
            ServeOptions::default(),
        )])
        .load_full();
        let (r, a) = ask_limited(&z, &Q::new("x.delmix.big.test.", t::A), 512);
        assert_eq!(a.kind, Kind::Referral);
        assert!(!r.tc(), "{r:?}");
        let required = r
            .additional
            .iter()
            .filter(|x| x.owner.ends_with(".delmix.big.test."))
            .count();
        assert_eq!(required, 8, "{r:?}");
    }

    #[test]
    fn cname_chains_are_followed_and_loops_end() {
        let z = example();
        let (r, a) = ask(&z, Q::new("cn.example.com.", t::A));
        assert_eq!(a.kind, Kind::Answer);
        let chain = owners_and_types(&r.answer);
        assert_eq!(
            chain,
            [
                ("cn.example.com.", t::CNAME),
                ("cn2.example.com.", t::CNAME),
                ("www.example.com.", t::A)
            ]
        );
        assert_eq!(r.rdata_name(&r.answer[0], 0), "cn2.example.com.");
        assert_eq!(r.answer[2].rdata, [192, 0, 2, 10]);
        // Asked for the CNAME itself: not followed.
        let (r, _) = ask(&z, Q::new("cn.example.com.", t::CNAME));
        assert_eq!(r.answer.len(), 1);
        // A chain to a name that does not exist: NXDOMAIN with the CNAME (RFC 6604).
        let (r, a) = ask(&z, Q::new("cnx.example.com.", t::A));
        assert_eq!((a.kind, r.rcode()), (Kind::NxDomain, rcode::NXDOMAIN));
        assert_eq!(r.answer.len(), 1);
        assert_eq!(r.answer[0].rtype, t::CNAME);
        assert_negative(&r);
        // A loop: each CNAME once, then stop.
        let (r, a) = ask(&z, Q::new("loop1.example.com.", t::A));
        assert_eq!((a.kind, r.rcode()), (Kind::Answer, rcode::NOERROR));
        let owners: Vec<&str> = r.answer.iter().map(|x| x.owner.as_str()).collect();
        assert_eq!(owners, ["loop1.example.com.", "loop2.example.com."]);
    }

    #[test]
    fn wildcards_synthesise_for_the_asked_name_only() {
        let z = example();
        let (r, a) = ask(&z, Q::new("a.b.wild.example.com.", t::A));
        assert_eq!(a.kind, Kind::Answer);
        assert!(r.aa());
        assert_eq!(r.answer.len(), 1);
        assert_eq!(r.answer[0].owner, "a.b.wild.example.com.");
        assert_eq!(r.answer[0].rdata, [192, 0, 2, 20]);
        // The wildcard without the type: NODATA.
        let (r, a) = ask(&z, Q::new("q.wild.example.com.", t::AAAA));
        assert_eq!((a.kind, r.rcode()), (Kind::NoData, rcode::NOERROR));
        assert_negative(&r);
        // A name that exists beside the wildcard is not synthesised.
        let (r, a) = ask(&z, Q::new("x.wild.example.com.", t::A));
        assert_eq!(a.kind, Kind::NoData);
        assert!(r.answer.is_empty());
        // Nor is the parent of the wildcard matched by it.
        let (_, a) = ask(&z, Q::new("wild.example.com.", t::A));
        assert_eq!(a.kind, Kind::NoData);
    }

    #[test]
    fn dname_substitutes_and_synthesises_a_cname() {
        let z = example();
        let (r, a) = ask(&z, Q::new("x.dn.example.com.", t::A));
        assert_eq!((a.kind, r.rcode()), (Kind::Answer, rcode::NOERROR));
        let got = owners_and_types(&r.answer);
        assert_eq!(
            got,
            [
                ("dn.example.com.", t::DNAME),
                ("x.dn.example.com.", t::CNAME),
                ("x.target.example.com.", t::A)
            ]
        );
        assert_eq!(r.rdata_name(&r.answer[0], 0), "target.example.com.");
        assert_eq!(r.rdata_name(&r.answer[1], 0), "x.target.example.com.");
        assert_eq!(
            r.answer[1].ttl, r.answer[0].ttl,
            "the CNAME has the DNAME's TTL"
        );
        assert_eq!(r.answer[2].rdata, [192, 0, 2, 40]);
        // Below the DNAME to nothing: the DNAME, the CNAME, NXDOMAIN.
        let (r, a) = ask(&z, Q::new("y.dn.example.com.", t::A));
        assert_eq!((a.kind, r.rcode()), (Kind::NxDomain, rcode::NXDOMAIN));
        assert_eq!(r.answer.len(), 2);
        // The DNAME owner itself is not substituted.
        let (r, a) = ask(&z, Q::new("dn.example.com.", t::DNAME));
        assert_eq!(a.kind, Kind::Answer);
        assert_eq!(r.answer.len(), 1);
    }

    #[test]
    fn ds_at_a_child_apex_is_answered_by_the_parent_when_both_are_served() {
        let child = load_zone(
            "sub.example.com.",
            "$TTL 300\n@ SOA ns hm 1 2 3 4 5\n@ NS ns\nns A 192.0.2.30\n",
        );
        let z = zone_set(vec![
            (
                load_zone("example.com.", &crate::query::testkit::example_text()),
                ServeOptions::default(),
            ),
            (child, ServeOptions::default()),
        ])
        .load_full();
        // Below the cut the child answers.
        let (r, a) = ask(&z, Q::new("ns.sub.example.com.", t::A));
        assert!(a.kind == Kind::Answer && r.aa());
        // DS at its apex: the parent's NODATA, with the parent's SOA.
        let (r, a) = ask(&z, Q::new("sub.example.com.", t::DS));
        assert_eq!(a.kind, Kind::NoData);
        assert_negative(&r);
        // Any other type at the child apex: the child.
        let (r, _) = ask(&z, Q::new("sub.example.com.", t::SOA));
        assert_eq!(r.answer[0].owner, "sub.example.com.");
        assert!(r.aa());
    }
}
