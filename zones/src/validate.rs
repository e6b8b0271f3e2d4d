//! What an authoritative server must check before serving a zone.
//!
//! Errors (the zone does not load): no SOA or several at the apex, CNAME beside other data
//! or several CNAMEs, several DNAMEs, several ALIASes or A/AAAA beside an ALIAS, SOA away
//! from the apex, data below a DNAME, a record too large for any message. Warnings (loaded,
//! as Knot and NSD load them): an RRset too large for one message, no NS
//! at the apex, DS at the apex or away from a zone cut, data occluded by a zone cut (other
//! than glue), a DNAME beside NS, NS targets inside the zone without an address.

pub use crate::error::Severity;
use crate::error::{SetSrc, Src};
use crate::name::display;
use crate::rrtype::{self, t};
use crate::zone::{NodeId, Zone, flags};

/// The largest DNS message (TCP's two-octet length).
const MAX_MESSAGE: usize = 65_535;

/// Checks a compiled zone; `srcs[i]` is where `zone.rrsets[i]` came from.
pub(crate) fn check(zone: &Zone, srcs: &[SetSrc], report: &mut dyn FnMut(Severity, Src, String)) {
    use Severity::*;
    let set_of = |id: NodeId, rtype: u16| -> SetSrc {
        let n = zone.node(id);
        let start = n.rrset_start as usize;
        zone.rrsets(id)
            .iter()
            .position(|s| s.rtype == rtype)
            .map(|i| srcs[start + i])
            .unwrap_or_else(|| srcs.get(start).copied().unwrap_or_default())
    };
    let src_of = |id: NodeId, rtype: u16| set_of(id, rtype).first;
    // A second record where one is allowed: its line, as NSD and BIND name it.
    let second_of = |id: NodeId, rtype: u16| set_of(id, rtype).second;
    // Two RRsets that may not stand together: the line of the one read last.
    let later_of = |id: NodeId, a: u16, b: u16| {
        let (x, y) = (set_of(id, a), set_of(id, b));
        if y.order > x.order { y.first } else { x.first }
    };
    // Apex: one SOA, some NS.
    match zone.rrset(0, t::SOA) {
        None => report(
            Error,
            Src::default(),
            format!("no SOA record at the zone apex {}", zone.apex()),
        ),
        Some(s) if s.count > 1 => report(
            Error,
            second_of(0, t::SOA),
            format!("multiple SOA records at the zone apex {}", zone.apex()),
        ),
        _ => {}
    }
    if zone.rrset(0, t::NS).is_none() {
        // Knot loads it with a warning and NSD without: served, but no resolver can find it.
        report(
            Warning,
            src_of(0, t::SOA),
            format!("missing NS at the zone apex {}", zone.apex()),
        );
    }
    if zone.rrset(0, t::DS).is_some() {
        // Knot and NSD load it (as data nobody asks this side for).
        report(
            Warning,
            src_of(0, t::DS),
            format!(
                "DS at the zone apex {}: DS belongs in the parent zone",
                zone.apex()
            ),
        );
    }
    if zone.rrset(0, t::CDS).is_some() || zone.rrset(0, t::CDNSKEY).is_some() {
        crate::dnssec::check_cds(zone, src_of(0, t::SOA), report);
    }
    crate::dnssec::check_signed(zone, &|id| src_of(id, t::SOA), report);
    let mut occluded_warned = 0usize;
    let mut alias_targets = 0usize;
    for id in zone.node_ids() {
        let node = zone.node(id);
        let name = || display(zone.node_name(id));
        let sets = zone.rrsets(id);
        // An RRset no message can carry (a header, the question, and each record with its
        // owner compressed) can never be answered: warned of, and the zone served — as Knot
        // and NSD serve it, TC=1 to a query for it and every other name answered (BIND alone
        // refuses the zone). A transfer carries it over several messages.
        let question = 12 + zone.node_name(id).len() + 4;
        for s in sets {
            let (records, wire) = zone.rrs(s).fold((0usize, 0usize), |(n, w), (_, rd)| {
                (n + 1, w + 2 + 10 + rd.len())
            });
            // One record no message can carry: no query or transfer ever could (Knot's
            // transfers of it fail too; BIND refuses the zone): refused.
            let largest = zone.rrs(s).map(|(_, rd)| rd.len()).max().unwrap_or(0);
            if question + 2 + 10 + largest > MAX_MESSAGE {
                report(
                    Error,
                    src_of(id, s.rtype),
                    format!(
                        "a {} record at {} with {largest} octets of RDATA cannot fit in any DNS \
                         message of {MAX_MESSAGE} octets: no answer or transfer could carry it",
                        rrtype::to_text(s.rtype),
                        name(),
                    ),
                );
            } else if question + wire > MAX_MESSAGE {
                report(
                    Warning,
                    src_of(id, s.rtype),
                    format!(
                        "the {} RRset at {} ({} records, {} octets) does not fit in a DNS \
                         message of {MAX_MESSAGE} octets: a query for it is answered TC=1",
                        rrtype::to_text(s.rtype),
                        name(),
                        records,
                        wire
                    ),
                );
            }
        }
        if node.has(flags::CNAME) {
            let c = zone.rrset(id, t::CNAME).expect("CNAME flag");
            if c.count > 1 {
                report(
                    Error,
                    second_of(id, t::CNAME),
                    format!("multiple CNAME records at {}", name()),
                );
            }
            if let Some(other) = sets
                .iter()
                .filter(|s| s.rtype != t::CNAME && !rrtype::is_dnssec(s.rtype))
                .min_by_key(|s| set_of(id, s.rtype).order)
            {
                report(
                    Error,
                    later_of(id, t::CNAME, other.rtype),
                    format!(
                        "another record exists beside CNAME at {} ({}): a CNAME must stand alone",
                        name(),
                        rrtype::to_text(other.rtype)
                    ),
                );
            }
        }
        if let Some(a) = zone.rrset(id, t::ALIAS) {
            if a.count > 1 {
                report(
                    Error,
                    second_of(id, t::ALIAS),
                    format!("multiple ALIAS records at {}", name()),
                );
            }
            if let Some(other) = sets
                .iter()
                .filter(|s| s.rtype == t::A || s.rtype == t::AAAA)
                .min_by_key(|s| set_of(id, s.rtype).order)
            {
                report(
                    Error,
                    later_of(id, t::ALIAS, other.rtype),
                    format!(
                        "{} beside ALIAS at {}: the ALIAS answers A and AAAA there",
                        rrtype::to_text(other.rtype),
                        name()
                    ),
                );
            }
        }
        if node.has(flags::DNAME) {
            let d = zone.rrset(id, t::DNAME).expect("DNAME flag");
            if d.count > 1 {
                report(
                    Error,
                    second_of(id, t::DNAME),
                    format!("multiple DNAME records at {}", name()),
                );
            }
            if id != 0 && zone.rrset(id, t::NS).is_some() {
                // A zone cut wins: the DNAME is occluded (BIND loads this; Knot refuses).
                report(
                    Warning,
                    later_of(id, t::DNAME, t::NS),
                    format!(
                        "NS record exists beside DNAME at {}: the delegation occludes the DNAME",
                        name()
                    ),
                );
            }
        }
        if node.has(flags::HAS_DS)
            && id != 0
            && !node.has(flags::DELEG)
            && !node.has(flags::OCCLUDED)
        {
            // Knot and NSD load it: served as data at that name.
            report(
                Warning,
                src_of(id, t::DS),
                format!("DS record at {} which is not a delegation point", name()),
            );
        }
        if id != 0 && zone.rrset(id, t::SOA).is_some() && !node.has(flags::OCCLUDED) {
            report(
                Error,
                src_of(id, t::SOA),
                format!("SOA record at {} which is not the zone apex", name()),
            );
        }
        if node.has(flags::OCCLUDED) && !node.has(flags::EMPTY) {
            // Below a DNAME nothing may exist; below a zone cut only glue is kept.
            let mut top = node.parent();
            while zone.node(top).has(flags::OCCLUDED) {
                top = zone.node(top).parent();
            }
            // Beside a zone cut, the cut's own glue (an address the NS RRset names) may sit
            // below it, as BIND takes it; anything else below a DNAME is refused.
            let glue = zone.node(top).has(flags::DELEG)
                && sets.iter().all(|s| matches!(s.rtype, t::A | t::AAAA))
                && zone.rrset(top, t::NS).is_some_and(|ns| {
                    zone.rrs(ns)
                        .any(|(_, rd)| rd.eq_ignore_ascii_case(zone.node_name(id)))
                });
            if zone.node(top).has(flags::DNAME) && !glue {
                // RFC 6672 §2.3: a server MAY refuse; Knot and NSD do (BIND loads with a
                // warning), beside a zone cut too. Every such name is an error: the zone
                // does not load.
                if occluded_warned < 20 {
                    report(
                        Error,
                        srcs[node.rrset_start as usize].first,
                        format!(
                            "child record exists under DNAME at {}: {} (RFC 6672 §2.3: no data may sit below a DNAME)",
                            display(zone.node_name(top)),
                            name()
                        ),
                    );
                }
                occluded_warned += 1;
            } else if let Some(s) = sets
                .iter()
                .find(|s| !matches!(s.rtype, t::A | t::AAAA | t::NS | t::DS | t::RRSIG))
            {
                if occluded_warned < 20 {
                    report(
                        Warning,
                        src_of(id, s.rtype),
                        format!(
                            "{} {} is below the zone cut at {}: not served (only glue is)",
                            name(),
                            rrtype::to_text(s.rtype),
                            display(zone.node_name(top))
                        ),
                    );
                }
                occluded_warned += 1;
            }
        }
        // MX and SRV targets inside the zone that are aliases (RFC 2181 §10.3; BIND warns of
        // them, check-mx-cname and check-srv-cname): mail and services may not follow them.
        for (rtype, skip) in [(t::MX, 2), (t::SRV, 6)] {
            let Some(set) = zone.rrset(id, rtype) else {
                continue;
            };
            if node.has(flags::OCCLUDED) {
                continue;
            }
            for (_, rd) in zone.rrs(set) {
                let Some(target) = rd.get(skip..) else {
                    continue;
                };
                let Some(len) = crate::name::wire_name_len(target) else {
                    continue;
                };
                let mut lower = [0u8; 255];
                lower[..len].copy_from_slice(&target[..len]);
                lower[..len].make_ascii_lowercase();
                let target = &lower[..len];
                if crate::name::is_subdomain(target, zone.apex().as_wire())
                    && zone.find(target).is_some_and(|n| {
                        zone.rrset(n, t::CNAME).is_some() && !zone.node(n).has(flags::OCCLUDED)
                    })
                {
                    // Bounded as the occluded names are: a zone of 100,000 made as many.
                    if alias_targets < 20 {
                        report(
                            Warning,
                            src_of(id, rtype),
                            format!(
                                "{} target {} of {} is a CNAME (RFC 2181 §10.3: it names a host, never an alias)",
                                rrtype::to_text(rtype),
                                display(target),
                                name()
                            ),
                        );
                    }
                    alias_targets += 1;
                }
            }
        }
        // NS targets inside the zone need an address (glue below a cut, or authoritative).
        if let Some(ns) = zone.rrset(id, t::NS)
            && (id == 0 || node.has(flags::DELEG))
            && !node.has(flags::OCCLUDED)
        {
            for (_, rd) in zone.rrs(ns) {
                let Some(len) = crate::name::wire_name_len(rd) else {
                    continue;
                };
                let target = &rd[..len];
                let mut lower = [0u8; 255];
                lower[..len].copy_from_slice(target);
                lower[..len].make_ascii_lowercase();
                let target = &lower[..len];
                if !crate::name::is_subdomain(target, zone.apex().as_wire()) {
                    continue;
                }
                let (under_dname, has_addr) = target_state(zone, id, target);
                if under_dname {
                    // BIND: the zone's own servers cannot be reached then; a child's can be
                    // looked up elsewhere.
                    let sev = if id == 0 { Error } else { Warning };
                    report(
                        sev,
                        src_of(id, t::NS),
                        format!(
                            "NS target {} of {} is below a DNAME and cannot be resolved",
                            display(target),
                            name()
                        ),
                    );
                } else if zone
                    .find(target)
                    .is_some_and(|n| zone.rrset(n, t::CNAME).is_some())
                {
                    // Knot and BIND refuse it; NSD loads it, as we do.
                    report(
                        Warning,
                        src_of(id, t::NS),
                        format!(
                            "NS target {} of {} is a CNAME (RFC 2181 §10.3: an NS names a host, never an alias; resolvers may not follow it)",
                            display(target),
                            name()
                        ),
                    );
                } else if !has_addr {
                    report(
                        Warning,
                        src_of(id, t::NS),
                        format!(
                            "missing glue record: NS target {} of {} has no A or AAAA",
                            display(target),
                            name()
                        ),
                    );
                }
            }
        }
    }
    if alias_targets > 20 {
        report(
            Warning,
            Src::default(),
            format!(
                "{} more MX or SRV targets that are CNAMEs",
                alias_targets - 20
            ),
        );
    }
    if occluded_warned > 20 {
        report(
            Warning,
            Src::default(),
            format!(
                "{} more occluded names below zone cuts",
                occluded_warned - 20
            ),
        );
    }
}

/// For an NS target of node `at` inside the zone (lower case): whether it lies below a
/// DNAME, and whether it has an address (itself or through a wildcard).
///
/// Glue below a cut sits just after the cut in canonical order: look there first, then
/// fall back to one hash probe.
fn target_state(zone: &Zone, at: NodeId, name: &[u8]) -> (bool, bool) {
    let has = |id: NodeId| zone.rrset(id, t::A).is_some() || zone.rrset(id, t::AAAA).is_some();
    let near = if at != 0 && crate::name::is_subdomain(name, zone.node_name(at)) {
        let cut = zone.node_name(at);
        (at + 1..(at + 17).min(zone.node_count() as NodeId))
            .take_while(|&i| crate::name::is_subdomain(zone.node_name(i), cut))
            .find(|&i| zone.node_name(i) == name)
    } else {
        None
    };
    if let Some(id) = near.or_else(|| zone.find(name)) {
        let node = zone.node(id);
        if node.has(flags::OCCLUDED) {
            let mut top = node.parent();
            while zone.node(top).has(flags::OCCLUDED) {
                top = zone.node(top).parent();
            }
            let t = zone.node(top);
            if t.has(flags::DNAME) && !t.has(flags::DELEG) {
                return (true, has(id));
            }
        }
        return (false, has(id));
    }
    let mut offs = [0u8; 128];
    let n = crate::name::label_offsets(name, &mut offs);
    match zone.lookup(name, &offs[..n]) {
        crate::zone::Lookup::Dname(_) => (true, false),
        crate::zone::Lookup::Wildcard { wildcard, .. } => (false, has(wildcard)),
        _ => (false, false),
    }
}
