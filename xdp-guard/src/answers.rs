//! The answer fast path's maps: dnsd's replies keyed by (service address, port, generation,
//! EDNS variant, qtype, qname), and per service address the live generation.
//!
//! A writer publishes a new set of answers for its addresses without a moment where old and
//! new mix: it writes every entry under the generation that is not live, flips the addresses'
//! generation (one write each), then deletes the old generation's entries. While it cannot
//! vouch for the maps (a zone changed and the new answers are not written yet), it switches
//! answering off for its addresses ([`GuardMaps::suspend_answers`]): the program then passes
//! every query to dnsd.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::os::fd::BorrowedFd;

use crate::Error;
use crate::guard_maps::{ANSWERS, GuardMaps};
use crate::maps::{ALL_MAPS, AnsAddr, AnsAddrKey, AnsKey, Answer, Plain, QNAME_MAX, name_hash};
use crate::sys;

/// The sysctls the answers' route look-up needs: the kernel's FIB helper asks for forwarding
/// on the device it routes from, and the program routes from the loopback device, as the
/// kernel routes what a local socket sends (on lo, forwarding forwards nothing from outside:
/// no packet arrives there from another host).
pub const ROUTE_SYSCTLS: [&str; 2] = [
    "/proc/sys/net/ipv4/conf/lo/forwarding",
    "/proc/sys/net/ipv6/conf/lo/forwarding",
];

/// Turns on what the answers' route look-up needs ([`ROUTE_SYSCTLS`]) in this network
/// namespace (IPv6's skipped where the kernel has none); the ones it changed. An error names
/// the sysctl it could not set (the program then passes every query to the daemon).
pub fn enable_route_lookups() -> Result<Vec<&'static str>, (&'static str, std::io::Error)> {
    let mut changed = Vec::new();
    let mut failed = None;
    // Each family on its own: one that cannot be set leaves the other's answers.
    for path in ROUTE_SYSCTLS {
        let r = match std::fs::read_to_string(path) {
            Ok(on) if on.trim() == "1" => Ok(false),
            Ok(_) => std::fs::write(path, "1").map(|()| true),
            // IPv6 turned off in the kernel: nothing of it to route.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && path.contains("ipv6") => {
                Ok(false)
            }
            Err(e) => Err(e),
        };
        match r {
            Ok(true) => changed.push(path),
            Ok(false) => {}
            Err(e) => {
                failed.get_or_insert((path, e));
            }
        }
    }
    match failed {
        Some(f) => Err(f),
        None => Ok(changed),
    }
}

/// How long answers stay live at an address without a renewal ([`GuardMaps::renew_answers`]).
pub const ANSWER_LEASE: std::time::Duration = std::time::Duration::from_secs(30);

/// Elements per batch syscall (answers are ~1.4 KB each).
const CHUNK: usize = 256;

/// What writing a generation of answers did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AnswerReport {
    /// Entries written.
    pub written: u64,
    /// Entries refused because the map is full (its `answer_entries` budget).
    pub full: u64,
    /// Entries of the previous generation deleted.
    pub deleted: u64,
    /// Entries left to dnsd: another name of the same hash ([`crate::maps::name_hash`]) is
    /// answered at the same address for the same type and variant (the program compares the
    /// name, so the other is passed, never answered wrongly).
    pub collided: u64,
}

/// How XDP answers at an address: RRL (how fast it answers one source prefix,
/// [`AnsAddr::rate`], and the slip beyond it), and where its replies go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AnswerRate {
    /// Answers per second per source prefix (per CPU); 0: not limited.
    pub per_second: u32,
    /// IPv4 source prefix length.
    pub v4_prefix: u8,
    /// IPv6 source prefix length.
    pub v6_prefix: u8,
    /// Over the rate, one reply in `slip` is TC=1, the others dropped (0: all dropped).
    pub slip: u32,
    /// Replies go back to the frame's sender without a route look-up (a point-to-point
    /// link, or `BPF_PROG_TEST_RUN`); false: where the kernel's route sends them.
    pub reply_to_sender: bool,
}

/// The RFC 9018 server-cookie secrets XDP verifies (both) and mints (the current one) with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CookieKeys {
    /// The secret that makes cookies.
    pub current: [u8; 16],
    /// The previous secret, still accepted.
    pub previous: Option<[u8; 16]>,
}

/// Writes `keys` and the clock offset the cookies' timestamps need into `a`.
fn set_keys(a: &mut AnsAddr, keys: Option<&CookieKeys>) {
    let words = |s: &[u8; 16]| {
        [
            u64::from_le_bytes(s[..8].try_into().expect("8 bytes")),
            u64::from_le_bytes(s[8..].try_into().expect("8 bytes")),
        ]
    };
    a.cookie_keys = crate::maps::KEYS_NONE;
    a.secret = [0; 2];
    a.previous = [0; 2];
    if let Some(k) = keys {
        a.secret = words(&k.current);
        a.cookie_keys = crate::maps::KEYS_CURRENT;
        if let Some(p) = &k.previous {
            a.previous = words(p);
            a.cookie_keys = crate::maps::KEYS_BOTH;
        }
    }
    let unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    a.unix_off_ns = unix_ns.saturating_sub(crate::clock::mono_ns());
}

/// A generation of answers written and not yet live ([`GuardMaps::stage_answers`]).
#[derive(Debug)]
pub struct StagedAnswers {
    addrs: Vec<AnsAddrKey>,
    next: Vec<u8>,
    /// `next` by address and port.
    by_addr: HashMap<([u8; 16], u16), u8>,
    report: AnswerReport,
}

/// The key of a service address (IPv4 as `::ffff:a.b.c.d`).
pub fn addr_key(ip: IpAddr, port: u16) -> AnsAddrKey {
    AnsAddrKey {
        addr: mapped(ip),
        port,
        pad: 0,
    }
}

/// `ip` as the 16 bytes the program compares (IPv4 mapped into IPv6).
pub fn mapped(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

impl GuardMaps {
    fn answers_fd(&self) -> BorrowedFd<'_> {
        self.raw_fd(ANSWERS)
    }

    fn addrs_fd(&self) -> BorrowedFd<'_> {
        self.raw_fd(ANSWERS + 1)
    }

    /// How many answers one generation holds (`answer_entries` of whoever loaded the map,
    /// which holds two: the live generation and the one a publish stages beside it).
    pub fn answer_capacity(&self) -> u32 {
        self.map_capacity(ANSWERS) / 2
    }

    /// The state of answering at a service address, if it is registered.
    pub fn answer_addr(&self, key: &AnsAddrKey) -> Result<Option<AnsAddr>, Error> {
        let mut v = [0u8; size_of::<AnsAddr>()];
        let found = sys::lookup(self.addrs_fd(), key.as_bytes(), &mut v).map_err(|source| {
            crate::guard_maps::syscall_err("lookup", ALL_MAPS[ANSWERS + 1], source)
        })?;
        Ok(found.then(|| AnsAddr::read_from(&v)))
    }

    /// Switches answering off at `addrs` (their queries pass to dnsd) until the next
    /// [`GuardMaps::publish_answers`].
    pub fn suspend_answers(&self, addrs: &[AnsAddrKey]) -> Result<(), Error> {
        for k in addrs {
            if let Some(mut a) = self.answer_addr(k)?
                && a.on != 0
            {
                a.on = 0;
                sys::update(self.addrs_fd(), k.as_bytes(), a.as_bytes(), sys::BPF_ANY).map_err(
                    |source| {
                        crate::guard_maps::syscall_err("update", ALL_MAPS[ANSWERS + 1], source)
                    },
                )?;
            }
        }
        Ok(())
    }

    /// Publishes `entries` as the answers of `addrs` in one go: [`GuardMaps::stage_answers`],
    /// [`GuardMaps::flip_answers`], [`GuardMaps::finish_answers`].
    pub fn publish_answers(
        &self,
        addrs: &[AnsAddrKey],
        entries: &mut [(AnsKey, Answer)],
        udp_payload: u16,
        rate: AnswerRate,
        keys: Option<&CookieKeys>,
    ) -> Result<AnswerReport, Error> {
        let staged = self.stage_answers(addrs, entries)?;
        self.flip_answers(&staged, udp_payload, rate, keys)?;
        self.finish_answers(staged)
    }

    /// Writes `entries` (each key names one of `addrs`; its `gen_` is set here) under each
    /// address's generation that is not live; nothing is answered from them yet.
    pub fn stage_answers(
        &self,
        addrs: &[AnsAddrKey],
        entries: &mut [(AnsKey, Answer)],
    ) -> Result<StagedAnswers, Error> {
        let mut report = AnswerReport::default();
        // Per address, its next generation (addresses never registered start at 0).
        let mut next = Vec::with_capacity(addrs.len());
        for k in addrs {
            let cur = self.answer_addr(k)?;
            next.push(cur.map_or(0, |a| a.gen_ ^ 1));
        }
        // Looked up once per entry and per key: by hash, not a walk over the addresses.
        let by_addr: HashMap<([u8; 16], u16), u8> = addrs
            .iter()
            .zip(&next)
            .map(|(k, g)| ((k.addr, k.port), *g))
            .collect();
        let gen_of = |addr: &[u8; 16], port: u16| by_addr.get(&(*addr, port)).copied();
        // Anything left over in the target generation (a writer that died mid-publish).
        report.deleted += self.delete_answers(|k| gen_of(&k.addr, k.port) == Some(k.gen_))?;
        // Each key's name hash made from its answer's name (so the two always agree); of two
        // names with one key, the first is written and the other left to dnsd.
        let mut names: HashMap<AnsKey, [u8; QNAME_MAX]> = HashMap::with_capacity(entries.len());
        let mut skip = vec![false; entries.len()];
        for (i, (k, v)) in entries.iter_mut().enumerate() {
            k.gen_ = gen_of(&k.addr, k.port).unwrap_or(0);
            let n = usize::from(k.qname_len).min(QNAME_MAX);
            k.name_hash = name_hash(&v.qname[..n]);
            match names.get(k) {
                Some(name) if *name != v.qname => {
                    report.collided += 1;
                    skip[i] = true;
                }
                Some(_) => {}
                None => {
                    names.insert(*k, v.qname);
                }
            }
        }
        drop(names);
        let kept: Vec<&(AnsKey, Answer)> = entries
            .iter()
            .zip(&skip)
            .filter(|(_, s)| !**s)
            .map(|(e, _)| e)
            .collect();
        let fd = self.answers_fd();
        let (ks, vs) = (size_of::<AnsKey>(), size_of::<Answer>());
        let mut keys = Vec::with_capacity(CHUNK * ks);
        let mut vals = Vec::with_capacity(CHUNK * vs);
        for chunk in kept.chunks(CHUNK) {
            keys.clear();
            vals.clear();
            for (k, v) in chunk {
                keys.extend_from_slice(k.as_bytes());
                vals.extend_from_slice(v.as_bytes());
            }
            let (done, r) = sys::update_batch(fd, &keys, &vals, chunk.len());
            report.written += done as u64;
            if r.is_err() {
                // Batch refused or stopped (E2BIG when full): the rest one by one, so every
                // entry that fits is written and each that does not is counted.
                for (k, v) in &chunk[done..] {
                    match sys::update(fd, k.as_bytes(), v.as_bytes(), sys::BPF_ANY) {
                        Ok(()) => report.written += 1,
                        Err(e) if e.raw_os_error() == Some(libc::E2BIG) => report.full += 1,
                        Err(source) => {
                            return Err(crate::guard_maps::syscall_err(
                                "update",
                                ALL_MAPS[ANSWERS],
                                source,
                            ));
                        }
                    }
                }
            }
        }
        Ok(StagedAnswers {
            addrs: addrs.to_vec(),
            next,
            by_addr,
            report,
        })
    }

    /// Makes the staged generation live at its addresses, answering on, with the cookie
    /// secrets `keys`.
    pub fn flip_answers(
        &self,
        staged: &StagedAnswers,
        udp_payload: u16,
        rate: AnswerRate,
        keys: Option<&CookieKeys>,
    ) -> Result<(), Error> {
        let expires_ns = crate::clock::mono_ns() + ANSWER_LEASE.as_nanos() as u64;
        // Nothing to answer (the entries written only for the cookie secrets, by which the
        // rate limit lets a proven source pass): answering off, so that every query is not
        // parsed for a look-up that always misses.
        let on = u8::from(staged.report.written > 0);
        for (k, g) in staged.addrs.iter().zip(&staged.next) {
            let mut a = AnsAddr {
                gen_: *g,
                on,
                udp_payload,
                rate: rate.per_second,
                v4_prefix: rate.v4_prefix,
                v6_prefix: rate.v6_prefix,
                slip: rate.slip,
                reply_to_sender: u8::from(rate.reply_to_sender),
                expires_ns,
                ..AnsAddr::default()
            };
            set_keys(&mut a, keys);
            sys::update(self.addrs_fd(), k.as_bytes(), a.as_bytes(), sys::BPF_ANY).map_err(
                |source| crate::guard_maps::syscall_err("update", ALL_MAPS[ANSWERS + 1], source),
            )?;
        }
        Ok(())
    }

    /// Deletes the answers of the generation the flip left behind; the whole report.
    pub fn finish_answers(&self, staged: StagedAnswers) -> Result<AnswerReport, Error> {
        let mut report = staged.report;
        let by_addr = &staged.by_addr;
        report.deleted +=
            self.delete_answers(|k| by_addr.get(&(k.addr, k.port)).is_some_and(|g| *g != k.gen_))?;
        Ok(report)
    }

    /// Extends the lease of the answers at `addrs` by [`ANSWER_LEASE`] from now (a live writer
    /// does this well within the lease; one that died stops being answered for), with the
    /// cookie secrets `keys` (rotated meanwhile, perhaps) and the clock offset refreshed.
    pub fn renew_answers(
        &self,
        addrs: &[AnsAddrKey],
        keys: Option<&CookieKeys>,
    ) -> Result<(), Error> {
        let expires_ns = crate::clock::mono_ns() + ANSWER_LEASE.as_nanos() as u64;
        for k in addrs {
            if let Some(mut a) = self.answer_addr(k)? {
                a.expires_ns = expires_ns;
                set_keys(&mut a, keys);
                sys::update(self.addrs_fd(), k.as_bytes(), a.as_bytes(), sys::BPF_EXIST).map_err(
                    |source| {
                        crate::guard_maps::syscall_err("update", ALL_MAPS[ANSWERS + 1], source)
                    },
                )?;
            }
        }
        Ok(())
    }

    /// Removes `addrs` and every answer of theirs (dnsd stopping, or no longer answering).
    pub fn withdraw_answers(&self, addrs: &[AnsAddrKey]) -> Result<u64, Error> {
        for k in addrs {
            sys::delete(self.addrs_fd(), k.as_bytes()).map_err(|source| {
                crate::guard_maps::syscall_err("delete", ALL_MAPS[ANSWERS + 1], source)
            })?;
        }
        let gone: HashSet<([u8; 16], u16)> = addrs.iter().map(|a| (a.addr, a.port)).collect();
        self.delete_answers(|k| gone.contains(&(k.addr, k.port)))
    }

    /// Every bucket of the answer-rate map (a source prefix and an account) and the
    /// replies RRL in XDP limited (dropped or slipped) for it so far, summed over the CPUs
    /// (the bucket lives until the LRU map evicts it).
    pub fn answer_rate_limited(&self) -> Result<Vec<AnsRateBucket>, Error> {
        const RATE: usize = ANSWERS + 3;
        let cpus = sys::possible_cpus().map_err(|source| {
            crate::guard_maps::syscall_err("possible_cpus", ALL_MAPS[RATE], source)
        })?;
        // struct guard_ans_bucket: tokens, last_ns, limited (u64 each) per CPU.
        let mut v = vec![0u8; cpus * 24];
        let mut out = Vec::new();
        // struct guard_ans_rate_key: the prefix, the account.
        for k in self.keys(RATE, 24)? {
            let found = sys::lookup(self.raw_fd(RATE), &k, &mut v).map_err(|source| {
                crate::guard_maps::syscall_err("lookup", ALL_MAPS[RATE], source)
            })?;
            if !found {
                continue;
            }
            let limited: u64 = v
                .chunks_exact(24)
                .map(|c| u64::from_ne_bytes(c[16..24].try_into().expect("8 bytes")))
                .sum();
            let a: [u8; 16] = k[..16].try_into().expect("16 bytes");
            let v6 = std::net::Ipv6Addr::from(a);
            out.push(AnsRateBucket {
                prefix: v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
                rrl_key: u64::from_ne_bytes(k[16..24].try_into().expect("8 bytes")),
                limited,
            });
        }
        Ok(out)
    }

    /// Writes one entry as given, its name hash unchecked: for tests that the program compares
    /// the name itself (a key's hash is never taken for its name).
    #[doc(hidden)]
    pub fn insert_answer_unchecked(&self, key: &AnsKey, answer: &Answer) -> Result<(), Error> {
        sys::update(
            self.answers_fd(),
            key.as_bytes(),
            answer.as_bytes(),
            sys::BPF_ANY,
        )
        .map_err(|source| crate::guard_maps::syscall_err("update", ALL_MAPS[ANSWERS], source))
    }

    /// Answers in the map now (all writers).
    pub fn answer_count(&self) -> Result<u64, Error> {
        Ok(self.keys(ANSWERS, size_of::<AnsKey>())?.len() as u64)
    }

    /// Deletes the answers whose key `doomed` picks; how many.
    fn delete_answers(&self, doomed: impl Fn(&AnsKey) -> bool) -> Result<u64, Error> {
        let mut n = 0;
        for k in self.keys(ANSWERS, size_of::<AnsKey>())? {
            if doomed(&AnsKey::read_from(&k))
                && sys::delete(self.answers_fd(), &k).map_err(|source| {
                    crate::guard_maps::syscall_err("delete", ALL_MAPS[ANSWERS], source)
                })?
            {
                n += 1;
            }
        }
        Ok(n)
    }
}

/// One bucket of RRL in XDP: a source prefix's replies of one account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnsRateBucket {
    /// The source prefix (its address, masked).
    pub prefix: IpAddr,
    /// The account ([`crate::maps::Answer::rrl_key`]).
    pub rrl_key: u64,
    /// Replies limited (dropped or slipped) so far, over all CPUs.
    pub limited: u64,
}
