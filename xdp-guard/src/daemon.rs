//! What a daemon does with the XDP guard, the same in dnsd and http-front: mirror its block
//! map into its own writer slot of the node's pinned maps (what `xdp-guard attach` left), or,
//! for a one-process setup, attach the program itself (`interface` in its `[xdp]`) — never
//! over an attachment `xdp-guard` made. Without privileges or bpf(2) the daemon runs on and
//! says why once. The counters of the guard and of the mirror are one metrics source, named
//! alike in both daemons.

use std::sync::{Arc, Mutex};

use shield::block::Subscription;
use shield::metrics::{Samples, Source};

use crate::{Mirror, MirrorHandle, MirrorOptions, XdpConfig, XdpGuard, node_attachments};

/// A daemon's part of the XDP guard: its mirror, and the attachment when it made one.
pub struct DaemonXdp {
    /// The mirror (dropped first: a last drain, then its thread stops).
    mirror: Option<MirrorHandle>,
    /// The program this daemon attached (one-process setup); dropped last, detaching it.
    guard: Option<XdpGuard>,
}

impl Drop for DaemonXdp {
    fn drop(&mut self) {
        drop(self.mirror.take());
        drop(self.guard.take());
    }
}

impl DaemonXdp {
    /// The mirror's handle.
    pub fn mirror(&self) -> Option<&MirrorHandle> {
        self.mirror.as_ref()
    }

    /// Whether `net` is blocked in this daemon's writer slot of the XDP maps now; `None`
    /// without maps to look in (pinned maps awaited, a lookup failed).
    pub fn holds_block(&self, net: ipnet::IpNet) -> Option<bool> {
        let maps = self.mirror()?.maps()?;
        let net = shield::never_block::canonical_net(net.trunc());
        let entry = maps.get(net).ok()?;
        Some(entry.is_some_and(|e| e.value.slot(maps.slot()).is_some()))
    }

    /// Blocks the XDP maps had no room for so far (`None`: no mirror).
    pub fn refused_full(&self) -> Option<u64> {
        Some(self.mirror()?.stats().snapshot().full)
    }

    /// Whether this daemon attached the program itself.
    pub fn attached_here(&self) -> bool {
        self.guard.is_some()
    }
}

/// Starts the daemon's part: `who` names the daemon in logs, `slot` is its writer slot,
/// `sub` subscribes to its block map. `None` when there is no `[xdp]` section or XDP cannot
/// be used here (said once, at error level when configured).
pub fn start(
    cfg: Option<&XdpConfig>,
    who: &str,
    slot: usize,
    sub: impl FnOnce() -> Subscription,
) -> Option<DaemonXdp> {
    let Some(cfg) = cfg else {
        tracing::info!("{who}: running without XDP: no [xdp] section");
        return None;
    };
    if let Err(why) = crate::check_available() {
        tracing::error!("{who}: running without XDP: {why}");
        return None;
    }
    let spawn = |m: Mirror| match m.spawn() {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::error!("{who}: XDP mirror thread: {e}; running without it");
            None
        }
    };
    if cfg.attaches() {
        let node = node_attachments(&cfg.pin_path).unwrap_or_default();
        if let Some(a) = node.first() {
            tracing::error!(
                "{who}: xdp.interface {}: xdp-guard is attached ({} on {}): not attaching over \
                 it; mirroring into its maps at {} (leave interface out of [xdp])",
                cfg.interface,
                a.mode,
                a.interface,
                cfg.pin_path.display()
            );
        } else {
            match XdpGuard::start(cfg) {
                Ok(g) => {
                    if cfg.rate > 0 {
                        slip_route_lookups(who);
                    }
                    let maps = g.maps().clone().with_slot(slot);
                    let mirror = spawn(Mirror::new(maps, sub()));
                    return Some(DaemonXdp {
                        mirror,
                        guard: Some(g),
                    });
                }
                Err(e) => {
                    tracing::error!(
                        "{who}: cannot attach XDP to {}: {e}; mirroring into the maps pinned \
                         at {} once xdp-guard attaches",
                        cfg.interface,
                        cfg.pin_path.display()
                    );
                }
            }
        }
    }
    let m = Mirror::pinned(cfg.pin_path.clone(), slot, sub(), MirrorOptions::default());
    Some(DaemonXdp {
        mirror: spawn(m),
        guard: None,
    })
}

/// Turns on the route look-up of the rate limit's TC=1 replies (sent where the kernel's route
/// to the source leads: the look-up wants forwarding on lo), and says what it set or why not.
fn slip_route_lookups(who: &str) {
    match crate::enable_route_lookups() {
        Ok(set) => {
            for sysctl in set {
                tracing::info!(
                    sysctl,
                    "{who}: XDP: set to 1 for the route look-up of the rate limit's TC=1 replies (forwarding on lo forwards nothing from outside)"
                );
            }
        }
        Err((sysctl, e)) => tracing::warn!(
            sysctl,
            error = %e,
            "{who}: XDP: cannot turn on the route look-up: queries over a source's rate are all dropped, none answered TC=1"
        ),
    }
}

/// The XDP guard's packet counters (by verdict, summed over CPUs) and this daemon's mirror
/// counters: `palisade_xdp_packets_total`, `palisade_xdp_mirror_total`.
pub struct XdpSource(pub Arc<Mutex<Option<DaemonXdp>>>);

impl Source for XdpSource {
    fn collect(&self, out: &mut Samples) {
        let x = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(m) = x.as_ref().and_then(|x| x.mirror.as_ref()) else {
            return;
        };
        if let Some(c) = m.maps().and_then(|maps| maps.counters().ok()) {
            for (name, value) in c.named() {
                out.counter(
                    format!("xdp.{name}"),
                    "palisade_xdp_packets_total",
                    format!("verdict=\"{name}\""),
                    "Packets the XDP guard saw, by verdict.",
                    value,
                );
            }
        }
        let s = m.stats().snapshot();
        for (name, value) in [
            ("upserted", s.upserted),
            ("deleted", s.deleted),
            ("resyncs", s.resyncs),
            ("full", s.full),
            ("failed", s.failed),
            ("swept", s.swept),
            ("reopens", s.reopens),
            ("never_full", s.never_full),
            ("dropped_unopened", s.dropped_unopened),
            ("global_writes", s.global_writes),
            ("global_failures", s.global_failures),
        ] {
            out.counter(
                format!("xdp.mirror.{name}"),
                "palisade_xdp_mirror_total",
                format!("event=\"{name}\""),
                "Block-map changes mirrored into this daemon's slot of the XDP maps, by outcome \
                 (full: refused by a full map; dropped_unopened: taken while the pinned maps were \
                 absent, written by the resync after).",
                value,
            );
        }
        out.gauge(
            "xdp.mirror.open",
            "palisade_xdp_mirror_open",
            "",
            "1 when the mirror holds the XDP maps (0: waiting for xdp-guard attach).",
            u64::from(s.open),
        );
    }
}
