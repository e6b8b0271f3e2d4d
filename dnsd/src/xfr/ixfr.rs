//! IXFR (RFC 1995), the client side: [`IxfrIn`] follows an IXFR answer, incremental or
//! AXFR-style, and applies it (the journal that answers IXFR requests is
//! [`super::journal`]).

use std::collections::{HashMap, HashSet};

use zones::rrtype::t;
use zones::{Name, Zone};

use super::axfr::Collector;
use super::journal::key;
pub use super::wire::soa_serial as serial_of;
use super::wire::{RrRef, soa_serial};
use super::{XfrError, serial_gt};

/// What an IXFR answer said.
pub enum Received {
    /// The primary has nothing newer (its serial).
    Current(u32),
    /// The whole zone (AXFR-style answer, or an AXFR).
    Full(Box<Collector>),
    /// Differences to apply to the zone we hold.
    Incremental(Box<Changes>),
}

/// Differences received, merged over every step.
pub struct Changes {
    removed: HashSet<u128>,
    added: HashMap<u128, (Vec<u8>, u16, u32, Vec<u8>)>,
    order: Vec<u128>,
    /// Every deletion (false) and addition (true), in order: each must apply to the zone as
    /// the steps before left it, or the IXFR is not applied (an AXFR is asked instead).
    ops: Vec<(u128, bool)>,
    new_soa: (Vec<u8>, u32, Vec<u8>),
    /// Steps received.
    pub steps: usize,
    /// Serial before and after.
    pub serials: (u32, u32),
}

impl Changes {
    /// Records deleted and added, over all steps.
    pub fn counts(&self) -> (usize, usize) {
        (self.removed.len(), self.added.len())
    }

    /// The zone `base` with the changes applied, collected for validation (blocking).
    pub fn apply(&self, base: &Zone, max: usize) -> Result<Collector, XfrError> {
        if base.serial() != self.serials.0 {
            return Err(XfrError::Protocol(
                "the IXFR starts at another serial than ours",
            ));
        }
        let mut c = Collector::new(base.apex(), max);
        let (o, ttl, rd) = &self.new_soa;
        c.add_parts(o, t::SOA, 1, *ttl, rd)?;
        let mut scratch = Vec::with_capacity(512);
        // Whether each record the steps touch is held, as the steps go.
        let mut held: HashMap<u128, bool> = self.ops.iter().map(|(k, _)| (*k, false)).collect();
        for (o, rt, ttl, rd) in base.records().skip(1) {
            let k = key(o, rt, None, rd, &mut scratch);
            if let Some(h) = held.get_mut(&k) {
                *h = true;
            }
            if !self.removed.contains(&k) {
                c.add_parts(o, rt, 1, ttl, rd)?;
            }
        }
        // As Knot and NSD: a step that deletes a record not held, or adds one held, says the
        // primary's history is not ours; applied anyway, the copy would drift from it.
        for (k, add) in &self.ops {
            let h = held.get_mut(k).expect("every touched record");
            if *h == *add {
                return Err(XfrError::Protocol(if *add {
                    "an IXFR step adds a record already held"
                } else {
                    "an IXFR step deletes a record not held"
                }));
            }
            *h = *add;
        }
        let mut emitted = HashSet::with_capacity(self.added.len());
        for k in &self.order {
            if let Some((o, rt, ttl, rd)) = self.added.get(k)
                && emitted.insert(*k)
            {
                c.add_parts(o, *rt, 1, *ttl, rd)?;
            }
        }
        Ok(c)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    First,
    Second,
    Body,
    Del,
    Add,
    Done,
}

/// Follows the records of an IXFR (or AXFR) answer, in order, across messages.
pub struct IxfrIn {
    apex: Name,
    ours: Option<u32>,
    max: usize,
    state: State,
    first_soa: Option<(Vec<u8>, u32, Vec<u8>)>,
    new_serial: u32,
    running: u32,
    count: usize,
    full: Option<Collector>,
    ch: Option<Changes>,
    scratch: Vec<u8>,
}

impl IxfrIn {
    /// A follower for zone `apex`; `ours` is the serial we hold (none for an AXFR).
    pub fn new(apex: &Name, ours: Option<u32>, max: usize) -> IxfrIn {
        IxfrIn {
            apex: apex.clone(),
            ours,
            max,
            state: State::First,
            first_soa: None,
            new_serial: 0,
            running: 0,
            count: 0,
            full: None,
            ch: None,
            scratch: Vec::new(),
        }
    }

    /// True when the answer is complete.
    pub fn done(&self) -> bool {
        self.state == State::Done
    }

    /// After a whole message: true when the answer was the SOA alone, not newer than ours.
    pub fn current_after_message(&self) -> bool {
        self.state == State::Second && self.ours.is_some_and(|o| !serial_gt(self.new_serial, o))
    }

    /// Takes one record.
    pub fn add(&mut self, r: RrRef<'_>) -> Result<(), XfrError> {
        self.count += 1;
        if self.count > self.max.saturating_add(8) {
            return Err(XfrError::TooManyRecords(self.max));
        }
        let is_soa = r.rtype == t::SOA;
        let serial = if is_soa {
            Some(soa_serial(r.rdata).ok_or(XfrError::Malformed("SOA"))?)
        } else {
            None
        };
        match self.state {
            State::First => {
                let s =
                    serial.ok_or(XfrError::Protocol("the answer does not start with the SOA"))?;
                if !zones::name::is_subdomain(r.owner, self.apex.as_wire())
                    || r.owner.len() != self.apex.wire_len()
                {
                    return Err(XfrError::Protocol("the first SOA is not the zone's"));
                }
                self.new_serial = s;
                self.first_soa = Some((r.owner.to_vec(), r.ttl, r.rdata.to_vec()));
                self.state = State::Second;
            }
            State::Second => match serial {
                Some(s) if self.ours == Some(s) && s != self.new_serial => {
                    let (o, ttl, rd) = self.first_soa.clone().expect("first SOA");
                    self.ch = Some(Changes {
                        removed: HashSet::new(),
                        added: HashMap::new(),
                        order: Vec::new(),
                        ops: Vec::new(),
                        new_soa: (o, ttl, rd),
                        steps: 1,
                        serials: (s, self.new_serial),
                    });
                    self.running = s;
                    self.state = State::Del;
                }
                Some(_) => {
                    // An AXFR of a zone holding only its SOA (not a valid zone), or an IXFR
                    // that starts elsewhere.
                    return Err(XfrError::Protocol("unexpected second SOA in the answer"));
                }
                _ => {
                    let mut c = Collector::new(&self.apex, self.max);
                    let (o, ttl, rd) = self.first_soa.as_ref().expect("first SOA");
                    c.add_parts(o, t::SOA, 1, *ttl, rd)?;
                    c.add(r)?;
                    self.full = Some(c);
                    self.state = State::Body;
                }
            },
            State::Body => match serial {
                Some(s) => {
                    if s != self.new_serial {
                        return Err(XfrError::Protocol("the closing SOA differs from the first"));
                    }
                    self.state = State::Done;
                }
                None => self.full.as_mut().expect("collector").add(r)?,
            },
            State::Del => {
                let ch = self.ch.as_mut().expect("changes");
                match serial {
                    Some(s) => {
                        if !serial_gt(s, self.running) {
                            return Err(XfrError::Protocol("an IXFR step goes backwards"));
                        }
                        self.running = s;
                        self.state = State::Add;
                    }
                    None => {
                        let k = key(r.owner, r.rtype, None, r.rdata, &mut self.scratch);
                        // (Its place in `order` stays: apply passes over keys no longer
                        // added, and each key once; a retain here made a hostile IXFR of
                        // adds and deletes quadratic.)
                        ch.added.remove(&k);
                        ch.removed.insert(k);
                        // A record outside the zone was never held (transfers pass such
                        // records over): its deletion is no sign of another history.
                        if zones::name::is_subdomain(r.owner, self.apex.as_wire()) {
                            ch.ops.push((k, false));
                        }
                    }
                }
            }
            State::Add => {
                let ch = self.ch.as_mut().expect("changes");
                match serial {
                    Some(s) if s == self.new_serial && self.running == self.new_serial => {
                        self.state = State::Done;
                    }
                    Some(s) if s == self.running => {
                        ch.steps += 1;
                        self.state = State::Del;
                    }
                    Some(_s) => {
                        return Err(XfrError::Protocol(
                            "an IXFR step starts at another serial than the last ended at",
                        ));
                    }
                    None => {
                        let k = key(r.owner, r.rtype, None, r.rdata, &mut self.scratch);
                        let v = (r.owner.to_vec(), r.rtype, r.ttl, r.rdata.to_vec());
                        if ch.added.insert(k, v).is_none() {
                            ch.order.push(k);
                        }
                        if zones::name::is_subdomain(r.owner, self.apex.as_wire()) {
                            ch.ops.push((k, true));
                        }
                    }
                }
            }
            State::Done => return Err(XfrError::Protocol("records after the closing SOA")),
        }
        Ok(())
    }

    /// The answer, once complete (or the SOA alone).
    pub fn finish(self) -> Result<Received, XfrError> {
        if self.current_after_message() {
            return Ok(Received::Current(self.new_serial));
        }
        if self.state != State::Done {
            return Err(XfrError::Protocol("the answer ended early"));
        }
        if let Some(c) = self.full {
            return Ok(Received::Full(Box::new(c)));
        }
        self.ch
            .map(|c| Received::Incremental(Box::new(c)))
            .ok_or(XfrError::Protocol("empty answer"))
    }

    /// The serial the answer brings.
    pub fn new_serial(&self) -> u32 {
        self.new_serial
    }
}

#[cfg(test)]
mod tests {
    use super::super::journal::{Journal, Rec, diff, soa};
    use super::*;

    fn zone(serial: u32, extra: &str) -> Zone {
        let origin = Name::parse("example.", None).unwrap();
        let text = format!(
            "$ORIGIN example.\n$TTL 300\n@ SOA ns hm {serial} 60 60 600 60\n@ NS ns\nns A 192.0.2.1\n{extra}"
        );
        zones::load_bytes("t", text, &origin, &zones::ReadOptions::new(&origin))
            .unwrap()
            .zone
    }

    fn feed(f: &mut IxfrIn, recs: impl Iterator<Item = (Vec<u8>, u16, u32, Vec<u8>)>) {
        for (o, rt, ttl, rd) in recs {
            f.add(RrRef {
                owner: &o,
                rtype: rt,
                class: 1,
                ttl,
                rdata: &rd,
            })
            .unwrap();
        }
    }

    fn owned(r: Rec<'_>) -> (Vec<u8>, u16, u32, Vec<u8>) {
        (r.0.to_vec(), r.1, r.2, r.3.to_vec())
    }

    #[test]
    fn the_total_journal_budget_drops_the_oldest_steps_of_any_zone() {
        use super::super::journal::Journals;
        let zs: Vec<Zone> = (1..=4)
            .map(|s| zone(s, &format!("h{s} A 10.0.0.{s}\n")))
            .collect();
        let step = diff(&zs[0], &zs[1], 1 << 20).unwrap().bytes();
        let mut js = Journals::default();
        // Budget for about four steps; zone a gets three, then zone b two.
        let total = step * 4 + step / 2;
        for (apex, k) in [(&b"\x01a\0"[..], 0), (b"\x01a\0", 1), (b"\x01a\0", 2)] {
            let d = diff(&zs[k], &zs[k + 1], 1 << 20).unwrap();
            let ((), dropped) = js.with(apex, 1 << 20, total, |j| {
                j.push(d);
            });
            assert_eq!(dropped, 0);
        }
        let mut dropped = 0;
        for k in 0..2 {
            let d = diff(&zs[k], &zs[k + 1], 1 << 20).unwrap();
            dropped += js
                .with(b"\x01b\0", 1 << 20, total, |j| {
                    j.push(d);
                })
                .1;
        }
        // Five steps over a budget of four: zone a's oldest (1 → 2) went, not b's.
        assert_eq!(dropped, 1);
        assert!(js.bytes() <= total);
        let (a_chain, _) = js.with(b"\x01a\0", 1 << 20, total, |j| {
            (j.chain(1, 4).is_some(), j.chain(2, 4).is_some())
        });
        assert_eq!(a_chain, (false, true));
        let (b_chain, _) = js.with(b"\x01b\0", 1 << 20, total, |j| j.chain(1, 3).is_some());
        assert!(b_chain);
        js.remove(b"\x01a\0");
        js.remove(b"\x01b\0");
        assert_eq!(js.bytes(), 0);
    }

    #[test]
    fn diff_journal_and_apply() {
        let z1 = zone(1, "a A 10.0.0.1\nb A 10.0.0.2\n");
        let z2 = zone(2, "a A 10.0.0.1\nb 600 A 10.0.0.2\nc A 10.0.0.3\n");
        let z3 = zone(3, "c A 10.0.0.3\n");
        let d12 = diff(&z1, &z2, 1 << 20).unwrap();
        assert_eq!((d12.removed.len(), d12.added.len()), (1, 2));
        let d23 = diff(&z2, &z3, 1 << 20).unwrap();
        assert_eq!((d23.removed.len(), d23.added.len()), (2, 0));
        assert!(diff(&z1, &z2, 10).is_none());
        let mut j = Journal::new(1 << 20);
        j.push(d12);
        j.push(d23);
        assert_eq!(j.chain(1, 3).unwrap().len(), 2);
        assert_eq!(j.chain(2, 3).unwrap().len(), 1);
        assert!(j.chain(0, 3).is_none());
        // The IXFR answer from 1 to 3, followed and applied to z1, gives z3.
        let soa3 = owned(soa(&z3).unwrap());
        let mut recs = vec![soa3.clone()];
        for d in j.chain(1, 3).unwrap() {
            recs.extend(d.records().map(owned));
        }
        recs.push(soa3);
        let mut f = IxfrIn::new(z1.apex(), Some(1), 1000);
        feed(&mut f, recs.into_iter());
        assert!(f.done());
        let Received::Incremental(ch) = f.finish().unwrap() else {
            panic!("not incremental")
        };
        assert_eq!(ch.steps, 2);
        let z = ch.apply(&z1, 1000).unwrap().finish("t").unwrap();
        assert_eq!(
            zones::present::zone_to_text(&z),
            zones::present::zone_to_text(&z3)
        );
        // A small journal keeps the newest step only.
        let mut j = Journal::new(d_bytes(&z1, &z2).max(d_bytes(&z2, &z3)) + 1);
        j.push(diff(&z1, &z2, 1 << 20).unwrap());
        assert_eq!(j.push(diff(&z2, &z3, 1 << 20).unwrap()), 1);
        assert!(j.chain(1, 3).is_none());
    }

    fn d_bytes(a: &Zone, b: &Zone) -> usize {
        diff(a, b, 1 << 20).unwrap().bytes()
    }

    /// Steps that do not apply to the zone held (a deletion of a record not held, an
    /// addition of one held) are refused, as Knot and NSD refuse them; a record added by one
    /// step and deleted by a later one is no such case.
    #[test]
    fn steps_that_do_not_apply_to_the_zone_held_are_refused() {
        let z1 = zone(1, "a A 10.0.0.1\n");
        let rec = |text: &str| {
            let z = zone(9, text);
            z.records()
                .map(owned)
                .find(|r| r.1 == t::A && r.0.starts_with(b"\x01x"))
                .expect("the record")
        };
        let x = rec("x A 10.0.0.9\n");
        let held = {
            let z = zone(9, "a A 10.0.0.1\n");
            z.records()
                .map(owned)
                .find(|r| r.1 == t::A && r.0.starts_with(b"\x01a"))
                .unwrap()
        };
        let soa_of = |s: u32| owned(soa(&zone(s, "")).unwrap());
        let run = |steps: Vec<(Vec<_>, Vec<_>)>| {
            let last = steps.len() as u32 + 1;
            let mut recs = vec![soa_of(last)];
            for (i, (del, add)) in steps.into_iter().enumerate() {
                recs.push(soa_of(i as u32 + 1));
                recs.extend(del);
                recs.push(soa_of(i as u32 + 2));
                recs.extend(add);
            }
            recs.push(soa_of(last));
            let mut f = IxfrIn::new(z1.apex(), Some(1), 1000);
            feed(&mut f, recs.into_iter());
            let Received::Incremental(ch) = f.finish().unwrap() else {
                panic!("not incremental")
            };
            ch.apply(&z1, 1000).map(|_| ())
        };
        let e = run(vec![(vec![x.clone()], vec![])]).unwrap_err();
        assert!(e.to_string().contains("not held"), "{e}");
        let e = run(vec![(vec![], vec![held.clone()])]).unwrap_err();
        assert!(e.to_string().contains("already held"), "{e}");
        let e = run(vec![(vec![], vec![x.clone()]), (vec![], vec![x.clone()])]).unwrap_err();
        assert!(e.to_string().contains("already held"), "{e}");
        // Added, deleted, added again across steps; a held record deleted and put back.
        run(vec![
            (vec![], vec![x.clone()]),
            (vec![x.clone(), held.clone()], vec![]),
            (vec![], vec![x, held]),
        ])
        .unwrap();
    }

    #[test]
    fn axfr_style_and_current() {
        let z = zone(5, "a A 10.0.0.1\n");
        let mut f = IxfrIn::new(z.apex(), Some(4), 1000);
        let mut recs: Vec<_> = z.records().map(owned).collect();
        recs.push(owned(soa(&z).unwrap()));
        feed(&mut f, recs.into_iter());
        assert!(matches!(f.finish().unwrap(), Received::Full(_)));
        let mut f = IxfrIn::new(z.apex(), Some(5), 1000);
        feed(&mut f, std::iter::once(owned(soa(&z).unwrap())));
        assert!(f.current_after_message());
        assert!(matches!(f.finish().unwrap(), Received::Current(5)));
    }
}
