//! dnsd's use of the XDP guard: attached here (`[xdp] interface`) for a one-process setup,
//! with the block map mirrored into its maps, and its counters as a metrics source.

use std::sync::{Arc, Mutex};

use shield::metrics::{Samples, Source};

/// The XDP guard attached to an interface and the mirror of the block map into its maps.
pub struct Xdp {
    /// The mirror (dropped first on shutdown: a last drain, then its thread stops).
    pub mirror: Option<xdp_guard::MirrorHandle>,
    /// The attached program (dropped last: detaches it).
    pub guard: xdp_guard::XdpGuard,
}

impl Drop for Xdp {
    fn drop(&mut self) {
        // The mirror goes before the guard detaches.
        drop(self.mirror.take());
    }
}

/// Attaches the XDP guard and mirrors the block map into it; without it (no `[xdp]`, no
/// privileges, an attach that fails) dnsd runs on and says why once — an optional part never
/// stops the daemon from serving.
pub fn start(
    cfg: Option<&xdp_guard::XdpConfig>,
    blocks: &Arc<shield::block::BlockMap>,
) -> Option<Xdp> {
    if let Some(reason) = xdp_guard::unavailable_reason(cfg) {
        if cfg.is_some() {
            tracing::error!("running without XDP: {reason}");
        } else {
            tracing::info!("running without XDP: no [xdp] section");
        }
        return None;
    }
    let cfg = cfg?;
    let guard = match xdp_guard::XdpGuard::start(cfg) {
        Ok(g) => g,
        Err(e) => {
            tracing::error!(
                "running without XDP: cannot attach to {}: {e}",
                cfg.interface
            );
            return None;
        }
    };
    let mirror = xdp_guard::Mirror::new(
        guard.maps().clone().with_owner(xdp_guard::OWNER_DNSD),
        blocks.subscribe("xdp"),
    )
    .spawn()
    .map_err(|e| tracing::error!("XDP mirror thread: {e}"))
    .ok();
    tracing::info!(interface = %cfg.interface, "XDP guard attached");
    Some(Xdp { mirror, guard })
}

/// The XDP guard's counters (verdicts summed over CPUs) and its mirror's.
pub struct XdpSource(pub Arc<Mutex<Option<Xdp>>>);

impl Source for XdpSource {
    fn collect(&self, out: &mut Samples) {
        let x = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(x) = x.as_ref() else {
            return;
        };
        if let Ok(c) = x.guard.counters() {
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
        if let Some(m) = &x.mirror {
            let s = m.stats().snapshot();
            for (name, value) in [
                ("upserted", s.upserted),
                ("deleted", s.deleted),
                ("resyncs", s.resyncs),
                ("full", s.full),
                ("failed", s.failed),
            ] {
                out.counter(
                    format!("xdp.mirror.{name}"),
                    "palisade_xdp_mirror_total",
                    format!("event=\"{name}\""),
                    "Block-map changes mirrored into the XDP maps, by outcome (full: refused by a full map).",
                    value,
                );
            }
        }
    }
}
