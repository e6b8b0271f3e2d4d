//! The XDP answer publisher, dnsd's side of the fast path: a thread of its own compiles
//! ([`super::compile`]) the answers of the served set and publishes them into the guard's
//! answer maps for dnsd's service addresses.
//!
//! Hot names: with `[xdp_hot] names = N`, workers sample one UDP answer in `sample` from zones
//! with `xdp_answers = "hot"` (the default) into a bounded channel
//! ([`crate::observe::hot_sampler::HotSampler`]: no lock, no allocation; a full channel drops
//! the sample, counted); every `interval_ms` this thread picks the N (name, type) pairs
//! sampled most (counts halve each interval) and, when the pick changed, compiles and
//! publishes them beside the marked zones' names.
//!
//! Cookies: the secrets are written with each flip and renewal, and within a second of a
//! rotation.
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
use xdp_guard::maps::AnsAddrKey;

use super::compile::{Compiled, compile};
use crate::config::XdpHot;
use crate::observe::hot_sampler::{HotSample, HotSampler};
use crate::query::defence::{Shared, cookies::Cookies};
use crate::query::process_query::PipelineConfig;
use crate::xdp::Xdp;
use crate::xdp::hot_names::{HotCounts, HotKey};
use crate::zone::served::ZoneSet;

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
                "Queries left to dnsd at the last sync (TC, name or answer too long, a second name of one name hash).",
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

/// A pause of XDP answering ([`AnswerSync::paused`]), resumed when dropped.
pub struct Paused(Arc<AnswerSync>);

impl Drop for Paused {
    fn drop(&mut self) {
        self.0.resume();
    }
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
    /// Pauses under way ([`AnswerSync::pause`]): nothing is compiled or flipped meanwhile.
    paused: std::sync::atomic::AtomicUsize,
    xdp: Arc<Mutex<Option<Xdp>>>,
    cookies: Option<Arc<Cookies>>,
    wake: SyncSender<()>,
    /// Where workers send their samples (with `[xdp_hot] names`).
    hot_tx: Option<SyncSender<HotSample>>,
    hot_every: u32,
    /// The counters.
    pub stats: Arc<AnswerStats>,
    /// Withdrawn for good (the process is stopping): nothing is published after.
    withdrawn: std::sync::atomic::AtomicBool,
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
            paused: std::sync::atomic::AtomicUsize::new(0),
            xdp,
            cookies: inputs.defence.cookies.clone(),
            wake,
            hot_tx,
            hot_every: hot.sample.max(1),
            stats: Arc::new(AnswerStats::default()),
            withdrawn: std::sync::atomic::AtomicBool::new(false),
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

    /// Switches answering off until [`AnswerSync::resume`], compiling nothing meanwhile: for a
    /// change dnsd applies outside the zone set (new rules), which no answer compiled before
    /// it may meet — a rules reload woke the publisher, which compiled with the old rules and
    /// answered a name the new ones deny for one more compilation (35–80 ms).
    pub fn pause(&self) {
        self.paused.fetch_add(1, Ordering::SeqCst);
        self.suspend();
    }

    /// [`AnswerSync::pause`] until the guard is dropped (whatever way the change ends).
    pub fn paused(self: &Arc<Self>) -> Paused {
        self.pause();
        Paused(self.clone())
    }

    /// Ends a [`AnswerSync::pause`]: what is compiled from now on sees the change.
    pub fn resume(&self) {
        let _ = self
            .paused
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        // A new epoch: a compilation begun before the change is never flipped.
        self.suspend();
    }

    /// Asks for a new compilation (rules reloaded, say).
    pub fn resync(&self) {
        match self.wake.try_send(()) {
            Ok(()) | Err(TrySendError::Full(())) => {}
            Err(TrySendError::Disconnected(())) => {}
        }
    }

    /// Removes dnsd's addresses and answers from the maps, for good: nothing is published
    /// after (at shutdown, while workers, signing or catalogs may still ask for it).
    pub fn withdraw(&self) {
        self.withdrawn.store(true, Ordering::SeqCst);
        // A flip under way finishes first (it holds the epoch across its writes); one whose
        // compilation began before does not happen (the epoch moved).
        let mut flips = self.epoch.lock().unwrap_or_else(|e| e.into_inner());
        *flips += 1;
        if let Some(m) = self.maps_any()
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

    /// The maps to publish in; none once withdrawn for good.
    fn maps(&self) -> Option<xdp_guard::GuardMaps> {
        if self.withdrawn.load(Ordering::SeqCst) {
            return None;
        }
        self.maps_any()
    }

    /// How many times the mirror (re)opened the pinned maps: a new count means maps replaced
    /// by `xdp-guard attach` (another size, a layout), empty of answers.
    fn maps_opened(&self) -> u64 {
        let x = self.xdp.lock().unwrap_or_else(|e| e.into_inner());
        x.as_ref()
            .and_then(|x| x.mirror())
            .map_or(0, |m| m.stats().snapshot().reopens)
    }

    fn maps_any(&self) -> Option<xdp_guard::GuardMaps> {
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
        let mut opened = self.maps_opened();
        let mut keys = self.keys();
        let mut hot_names: Vec<HotKey> = Vec::new();
        // RRL in XDP reaches the events as counts per source prefix, from the kernel's
        // buckets every few seconds.
        let recorder = defence.events.recorder();
        let mut limited_seen: HashMap<(std::net::IpAddr, u64), u64> = HashMap::new();
        let mut rrl_read = Instant::now();
        // The route look-up's sysctl, set at start and again at each renewal (below).
        let mut route_ok = true;
        if !self.rate.reply_to_sender {
            route_lookups(true, &mut route_ok);
        }
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
                            // Summed per source prefix over its buckets (one per account),
                            // each counted from what it held at the last read.
                            let mut next = HashMap::with_capacity(now.len());
                            let mut per_prefix: HashMap<std::net::IpAddr, u64> = HashMap::new();
                            for b in now {
                                let key = (b.prefix, b.rrl_key);
                                // A bucket evicted and made again counts from zero.
                                let prev = limited_seen.get(&key).copied().unwrap_or(0);
                                let new = if b.limited >= prev {
                                    b.limited - prev
                                } else {
                                    b.limited
                                };
                                if new > 0 {
                                    *per_prefix.entry(b.prefix).or_default() += new;
                                }
                                next.insert(key, b.limited);
                            }
                            for (ip, new) in per_prefix {
                                recorder.record_n(
                                    defence.connection_tenant,
                                    ip,
                                    shield::events::Action::RateLimited,
                                    shield::block::Evidence::Udp,
                                    crate::query::defence::reason::XDP_RRL,
                                    new,
                                );
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
            // Maps replaced meanwhile hold no answer: everything is published again.
            let now_opened = self.maps_opened();
            if now_opened != opened {
                opened = now_opened;
                pending = true;
                tracing::info!(
                    "XDP answers: the pinned maps were replaced; publishing every answer again"
                );
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
                    // The route look-up's sysctl, again: turning forwarding off for the whole
                    // host (`all.forwarding`, `ip_forward`) turns lo's off too, and every
                    // answer would pass to dnsd unseen but for answer_pass_route.
                    if !self.rate.reply_to_sender {
                        route_lookups(false, &mut route_ok);
                    }
                    keys = now_keys;
                    renewed = Instant::now();
                }
                continue;
            }
            if self.paused.load(Ordering::SeqCst) > 0 {
                // Resumed by a wake-up (pending stays set).
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
                        // Paused since the check above (it read 0, then a pause came before
                        // the epoch was read): this compilation may hold what is changing.
                        if *now == epoch && self.paused.load(Ordering::SeqCst) == 0 {
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
                    // A name whose hash another name of the same key has: dnsd answers it.
                    s.skipped.store(skipped + r.collided, Ordering::Relaxed);
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
                    if r.written > 0 || skipped > 0 {
                        tracing::info!(
                            answers = r.written,
                            skipped,
                            ms = t0.elapsed().as_millis() as u64,
                            "XDP answers published"
                        );
                    }
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

/// Turns on what the answers' route look-up needs ([`xdp_guard::enable_route_lookups`]) and
/// says what it set — at start as a step, later as a change someone made (forwarding turned
/// off host-wide turns lo's off too) — and, once until it can again, that it cannot (`ok`:
/// whether it could the last time).
fn route_lookups(at_start: bool, ok: &mut bool) {
    match xdp_guard::enable_route_lookups() {
        Ok(changed) => {
            for path in changed {
                if at_start {
                    tracing::info!(
                        sysctl = path,
                        "XDP answers: set to 1 for the replies' route look-up (forwarding on lo forwards nothing from outside)"
                    );
                } else {
                    tracing::warn!(
                        sysctl = path,
                        "XDP answers: the route look-up's sysctl was turned off (forwarding turned off host-wide?): set to 1 again"
                    );
                }
            }
            *ok = true;
        }
        Err((path, e)) => {
            if *ok {
                tracing::warn!(
                    sysctl = path,
                    error = %e,
                    "XDP answers: cannot turn on the replies' route look-up: every query passes to dnsd (answer_pass_route); set it to 1, or [xdp] answer_route = false on a point-to-point link"
                );
            }
            *ok = false;
        }
    }
}
