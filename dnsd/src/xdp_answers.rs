//! The XDP answer fast path, dnsd's side: the answers of zones marked `xdp_answers = true`,
//! compiled by the query pipeline itself (so the kernel sends dnsd's bytes) and published
//! into the guard's answer maps for dnsd's service addresses.
//!
//! Every owner name of such a zone is asked, for each type at the name plus A and AAAA, in
//! each EDNS variant (none; EDNS; EDNS with DO) as a client allowing our whole payload would
//! ask. A reply with TC, a name longer than the program parses, or an answer bigger than a map
//! value is left to dnsd (counted). Zones whose tenant has rules of its own, zones that require
//! cookies and names another served zone answers are not compiled.
//!
//! Hot names: with `[xdp_hot] names = N`, workers sample one UDP answer in `sample` from zones
//! with `xdp_answers = "hot"` (the default) into a bounded channel ([`HotSampler`]: no lock, no
//! allocation; a full channel drops the sample, counted); every `interval_ms` this thread
//! picks the N (name, type) pairs sampled most (counts halve each interval) and, when the
//! pick changed, compiles and publishes them beside the marked zones' names.
//!
//! Cookies: each EDNS entry is asked once more with a client cookie, and says what dnsd does
//! with one — ignores it (cookies off), or appends the COOKIE option to its OPT record — so
//! that the program verifies and mints RFC 9018 server cookies with dnsd's secrets (written
//! with each flip and renewal, and within a second of a rotation) and answers as dnsd would.
//!
//! Consistency: before a new zone set is published, answering is suspended at dnsd's
//! addresses ([`AnswerSync::suspend`], from the registry's publish hook): the program passes
//! everything to dnsd until the sync thread has written the new generation and flipped to it,
//! so no answer of an old serial is served once dnsd serves the new one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use xdp_guard::maps::{
    ANSWER_MAX, AnsAddrKey, AnsKey, Answer, COOKIE_ANSWER, COOKIE_IGNORE, COOKIE_PASS, QNAME_MAX,
    V_EDNS, V_EDNS_DO, V_NO_EDNS,
};

use crate::config::XdpHot;
use crate::config::defence::CookiePolicy;
use crate::defence::{Shared, cookies::Cookies};
use crate::hot_names::{HotCounts, HotKey, HotSample, HotSampler};
use crate::process_query::{Outcome, PipelineConfig, Processor, Transport};
use crate::served_zones::ZoneSet;
use crate::stats::WorkerStats;
use crate::xdp::Xdp;

/// What the last compile and publication did, for `ctl stats` and /metrics.
#[derive(Debug, Default)]
pub struct AnswerStats {
    /// Answers published in the maps by the last sync.
    pub published: AtomicU64,
    /// Answers the map had no room for (its `answer_entries` budget), last sync.
    pub full: AtomicU64,
    /// Queries left to dnsd at compile time (TC, too long a name or answer), last sync.
    pub skipped: AtomicU64,
    /// Syncs done.
    pub syncs: AtomicU64,
    /// Syncs that failed (maps unavailable, a syscall error).
    pub failures: AtomicU64,
    /// Duration of the last sync, in microseconds.
    pub last_us: AtomicU64,
    /// Hot (name, type) pairs picked at the last sync.
    pub hot: AtomicU64,
    /// Samples lost because the channel to the publisher was full.
    pub hot_dropped: Arc<AtomicU64>,
    /// Sampled names not counted because the count table was full.
    pub hot_overflow: AtomicU64,
}

impl shield::metrics::Source for AnswerStats {
    fn collect(&self, out: &mut shield::metrics::Samples) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for (what, v, help) in [
            (
                "published",
                &self.published,
                "Answers in the XDP answer map after the last sync.",
            ),
            (
                "full",
                &self.full,
                "Answers the XDP answer map had no room for at the last sync (answer_entries).",
            ),
            (
                "skipped",
                &self.skipped,
                "Queries left to dnsd at the last sync (TC, name or answer too long).",
            ),
            (
                "hot",
                &self.hot,
                "Hot (name, type) pairs of [xdp_hot] picked at the last sync.",
            ),
        ] {
            out.gauge(
                format!("xdp_answers.{what}"),
                "dnsd_xdp_answers",
                format!("what=\"{what}\""),
                help,
                l(v),
            );
        }
        for (what, v) in [("ok", &self.syncs), ("failed", &self.failures)] {
            out.counter(
                format!("xdp_answers.syncs.{what}"),
                "dnsd_xdp_answer_syncs_total",
                format!("result=\"{what}\""),
                "Compilations of the XDP answers published (one per zone set or rules change).",
                l(v),
            );
        }
        for (what, v) in [
            ("dropped", &*self.hot_dropped),
            ("overflow", &self.hot_overflow),
        ] {
            out.counter(
                format!("xdp_answers.hot_samples_{what}"),
                "dnsd_xdp_hot_samples_lost_total",
                format!("why=\"{what}\""),
                "Samples of answered names lost: the channel was full, or the count table.",
                l(v),
            );
        }
        out.gauge(
            "xdp_answers.last_sync_us",
            "dnsd_xdp_answer_sync_microseconds",
            "",
            "How long the last compilation and publication of the XDP answers took.",
            l(&self.last_us),
        );
    }
}

/// How often the replies RRL in XDP limited are read from the kernel into the events.
const RRL_EVENTS_EVERY: Duration = Duration::from_secs(5);

/// What the publisher compiles from: dnsd's zones, pipeline, rules and defences.
pub struct AnswerInputs {
    /// The zone sets dnsd serves.
    pub zones: Arc<ArcSwap<ZoneSet>>,
    /// dnsd's pipeline settings.
    pub pcfg: Arc<PipelineConfig>,
    /// The shield rules (a tenant with rules of its own is left to dnsd).
    pub rules: Option<Arc<shield::rules::RuleSet>>,
    /// The defences (the cookie check and secrets).
    pub defence: Arc<Shared>,
}

/// dnsd's answer publisher: suspends answering before a zone set changes and republishes
/// after, on a thread of its own.
pub struct AnswerSync {
    keys: Vec<AnsAddrKey>,
    rate: xdp_guard::AnswerRate,
    /// The zone set generation the next compilation must see (set before it is published).
    wanted: AtomicU64,
    /// Suspensions so far; a flip happens only if none came since its compilation began
    /// (held across the suspension's write and the flip's check and write).
    epoch: Mutex<u64>,
    xdp: Arc<Mutex<Option<Xdp>>>,
    cookies: Option<Arc<Cookies>>,
    wake: SyncSender<()>,
    /// Where workers send their samples (with `[xdp_hot] names`).
    hot_tx: Option<SyncSender<HotSample>>,
    hot_every: u32,
    /// The counters.
    pub stats: Arc<AnswerStats>,
}

impl AnswerSync {
    /// Starts the publisher for the service addresses `addrs`, compiling from `inputs`;
    /// `rate` bounds what XDP answers one source prefix (beyond it, dnsd and its RRL
    /// answer); `hot` says how many hot names of other zones join the marked zones' names.
    pub fn start(
        addrs: &[SocketAddr],
        rate: xdp_guard::AnswerRate,
        xdp: Arc<Mutex<Option<Xdp>>>,
        inputs: AnswerInputs,
        hot: XdpHot,
    ) -> Arc<AnswerSync> {
        let keys: Vec<AnsAddrKey> = addrs
            .iter()
            .map(|a| xdp_guard::addr_key(a.ip(), a.port()))
            .collect();
        let (wake, rx) = std::sync::mpsc::sync_channel(1);
        let (hot_tx, hot_rx) = if hot.names > 0 {
            let (t, r) = std::sync::mpsc::sync_channel(4096);
            (Some(t), Some(r))
        } else {
            (None, None)
        };
        let sync = Arc::new(AnswerSync {
            keys,
            rate,
            wanted: AtomicU64::new(0),
            epoch: Mutex::new(0),
            xdp,
            cookies: inputs.defence.cookies.clone(),
            wake,
            hot_tx,
            hot_every: hot.sample.max(1),
            stats: Arc::new(AnswerStats::default()),
        });
        let s = sync.clone();
        let addrs = addrs_of(&s.keys);
        std::thread::Builder::new()
            .name("dnsd-xdp-answers".into())
            .spawn(move || {
                let hot = hot_rx.map(|r| (r, HotCounts::new(hot)));
                s.run(rx, addrs, inputs, hot)
            })
            .expect("spawn the XDP answer thread");
        sync.resync();
        sync
    }

    /// Switches answering off at dnsd's addresses before zone set `generation` is published,
    /// and asks for a compilation of that set.
    pub fn suspend_for(&self, generation: u64) {
        self.wanted.fetch_max(generation, Ordering::SeqCst);
        self.suspend();
    }

    /// Switches answering off at dnsd's addresses and asks for a new compilation.
    pub fn suspend(&self) {
        {
            let mut epoch = self.epoch.lock().unwrap_or_else(|e| e.into_inner());
            *epoch += 1;
            if let Some(m) = self.maps()
                && let Err(e) = m.suspend_answers(&self.keys)
            {
                tracing::warn!("XDP answers: cannot suspend: {e}");
            }
        }
        self.resync();
    }

    /// Asks for a new compilation (rules reloaded, say).
    pub fn resync(&self) {
        match self.wake.try_send(()) {
            Ok(()) | Err(TrySendError::Full(())) => {}
            Err(TrySendError::Disconnected(())) => {}
        }
    }

    /// Removes dnsd's addresses and answers from the maps (at shutdown).
    pub fn withdraw(&self) {
        if let Some(m) = self.maps()
            && let Err(e) = m.withdraw_answers(&self.keys)
        {
            tracing::warn!("XDP answers: cannot withdraw: {e}");
        }
    }

    /// A sampler for a worker (with `[xdp_hot] names`).
    pub fn sampler(&self) -> Option<HotSampler> {
        self.hot_tx
            .as_ref()
            .map(|tx| HotSampler::new(tx.clone(), self.hot_every, self.stats.hot_dropped.clone()))
    }

    /// The cookie secrets in force, for the program.
    fn keys(&self) -> Option<xdp_guard::CookieKeys> {
        self.cookies.as_ref().map(|c| {
            let s = c.secrets();
            xdp_guard::CookieKeys {
                current: s.current(),
                previous: s.previous(),
            }
        })
    }

    fn maps(&self) -> Option<xdp_guard::GuardMaps> {
        let x = self.xdp.lock().unwrap_or_else(|e| e.into_inner());
        x.as_ref().and_then(|x| x.mirror()).and_then(|m| m.maps())
    }

    fn run(
        self: Arc<Self>,
        rx: Receiver<()>,
        addrs: Vec<SocketAddr>,
        inputs: AnswerInputs,
        mut hot: Option<(Receiver<HotSample>, HotCounts)>,
    ) {
        let AnswerInputs {
            zones,
            pcfg,
            rules,
            defence,
        } = inputs;
        // A weak wake-up: waits for a request, or retries every second when the maps were
        // not there yet; looks at the cookie secrets every second.
        let mut pending = true;
        // Renewed well within the lease, so that answering never lapses while dnsd runs.
        let renew_every = xdp_guard::ANSWER_LEASE / 6;
        let mut renewed = Instant::now();
        let mut keys = self.keys();
        let mut hot_names: Vec<HotKey> = Vec::new();
        // RRL in XDP reaches the events as counts per source prefix, from the kernel's
        // buckets every few seconds.
        let recorder = defence.events.recorder();
        let mut limited_seen: HashMap<std::net::IpAddr, u64> = HashMap::new();
        let mut rrl_read = Instant::now();
        loop {
            match rx.recv_timeout(Duration::from_secs(1)) {
                Ok(()) => pending = true,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
            }
            if self.rate.per_second > 0 && rrl_read.elapsed() >= RRL_EVENTS_EVERY {
                rrl_read = Instant::now();
                if let Some(m) = self.maps() {
                    match m.answer_rate_limited() {
                        Ok(now) => {
                            let mut next = HashMap::with_capacity(now.len());
                            for (ip, n) in now {
                                // A bucket evicted and made again counts from zero.
                                let prev = limited_seen.get(&ip).copied().unwrap_or(0);
                                let new = if n >= prev { n - prev } else { n };
                                if new > 0 {
                                    recorder.record_n(
                                        defence.connection_tenant,
                                        ip,
                                        shield::events::Action::RateLimited,
                                        shield::block::Evidence::Udp,
                                        crate::defence::reason::XDP_RRL,
                                        new,
                                    );
                                }
                                next.insert(ip, n);
                            }
                            limited_seen = next;
                        }
                        Err(e) => tracing::warn!("XDP answers: cannot read the RRL buckets: {e}"),
                    }
                }
            }
            if let Some((hot_rx, counts)) = &mut hot {
                counts.drain(hot_rx, &self.stats.hot_overflow);
                // A new pick is published without a suspension: the zones did not change.
                if let Some(picked) = counts.pick()
                    && picked != hot_names
                {
                    hot_names = picked;
                    pending = true;
                }
            }
            if !pending {
                let now_keys = self.keys();
                if (renewed.elapsed() >= renew_every || now_keys != keys)
                    && let Some(m) = self.maps()
                {
                    // Under the suspension lock: a renewal never races a suspension's write.
                    let _g = self.epoch.lock().unwrap_or_else(|e| e.into_inner());
                    if let Err(e) = m.renew_answers(&self.keys, now_keys.as_ref()) {
                        tracing::warn!("XDP answers: cannot renew: {e}");
                    }
                    keys = now_keys;
                    renewed = Instant::now();
                }
                continue;
            }
            let Some(maps) = self.maps() else {
                continue;
            };
            let t0 = Instant::now();
            let epoch = *self.epoch.lock().unwrap_or_else(|e| e.into_inner());
            // The set announced by suspend_for, once it is published (bounded wait).
            let wanted = self.wanted.load(Ordering::SeqCst);
            let mut set = zones.load_full();
            while set.generation() < wanted && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(1));
                set = zones.load_full();
            }
            let prepared = rules.as_ref().map(|r| r.current());
            let has_rules = |t: u32| prepared.as_ref().is_some_and(|p| p.has_rules(t));
            let Compiled {
                mut entries,
                skipped,
                over_budget,
            } = compile(
                &set,
                &addrs,
                &pcfg,
                &has_rules,
                maps.answer_capacity() as usize,
                Some(&defence),
                &hot_names,
            );
            let published = maps
                .stage_answers(&self.keys, &mut entries)
                .and_then(|staged| {
                    let flipped = {
                        let now = self.epoch.lock().unwrap_or_else(|e| e.into_inner());
                        if *now == epoch {
                            keys = self.keys();
                            maps.flip_answers(&staged, pcfg.udp_payload, self.rate, keys.as_ref())?;
                            true
                        } else {
                            false
                        }
                    };
                    let r = maps.finish_answers(staged)?;
                    Ok((r, flipped))
                });
            match published {
                Ok((_, false)) => {
                    // Suspended meanwhile: a newer compilation is asked for already.
                    pending = true;
                }
                Ok((r, true)) => {
                    renewed = Instant::now();
                    let s = &self.stats;
                    s.published.store(r.written, Ordering::Relaxed);
                    s.full.store(r.full + over_budget, Ordering::Relaxed);
                    s.skipped.store(skipped, Ordering::Relaxed);
                    s.hot.store(hot_names.len() as u64, Ordering::Relaxed);
                    s.syncs.fetch_add(1, Ordering::Relaxed);
                    s.last_us
                        .store(t0.elapsed().as_micros() as u64, Ordering::Relaxed);
                    if over_budget > 0 {
                        tracing::warn!(
                            over = over_budget,
                            room = maps.answer_capacity(),
                            "XDP answers: more answers than [xdp] answer_entries (what one generation holds); the rest is answered by dnsd"
                        );
                    }
                    if r.full > 0 {
                        tracing::warn!(
                            full = r.full,
                            "XDP answers: the answer map had no room though within answer_entries (another writer's answers, or a generation left by one that died); the rest is answered by dnsd"
                        );
                    }
                    tracing::info!(
                        answers = r.written,
                        skipped,
                        ms = t0.elapsed().as_millis() as u64,
                        "XDP answers published"
                    );
                    pending = false;
                }
                Err(e) => {
                    self.stats.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("XDP answers: cannot publish: {e}");
                }
            }
        }
    }
}

fn addrs_of(keys: &[AnsAddrKey]) -> Vec<SocketAddr> {
    keys.iter()
        .map(|k| {
            let v6 = std::net::Ipv6Addr::from(k.addr);
            let ip = v6
                .to_ipv4_mapped()
                .map_or(std::net::IpAddr::V6(v6), std::net::IpAddr::V4);
            SocketAddr::new(ip, k.port)
        })
        .collect()
}

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
        ),
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
            let Some(mut ans) = answer_of(&self.reply[..n], self.q.len(), variant) else {
                self.skipped += 1;
                continue;
            };
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
            let mut key = AnsKey {
                addr: [0; 16],
                port: 0,
                gen_: 0,
                variant,
                qtype,
                qname_len: name.len() as u16,
                qname: [0; QNAME_MAX],
            };
            key.qname[..name.len()].copy_from_slice(name);
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

    use crate::served_zones::ServeOptions;

    /// example.com. served with `com`, and example.net. with the defaults (its answers never
    /// go to XDP); one service address; the default pipeline.
    fn two_zones(com: ServeOptions) -> (Arc<ZoneSet>, Vec<SocketAddr>, Arc<PipelineConfig>) {
        use crate::process_query::tests::{example_text, load_zone};
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
            let name = &k.qname[..k.qname_len as usize];
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
    fn entries_say_what_dnsd_does_with_a_cookie() {
        use crate::process_query::tests::{defences, example_text, load_zone, shared};
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
                .all(|(k, _)| k.qname[..k.qname_len as usize]
                    == b"\x03www\x07example\x03com\x00"[..])
        );
    }

    #[test]
    fn ones_complement_sums_fold() {
        assert_eq!(ones_sum(&[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
        assert_eq!(ones_sum(&[0xff, 0xff, 0x00, 0x02]), 0x0002);
        assert_eq!(label_offsets(b"\x03www\x07example\x00"), vec![0, 4]);
    }
}
