//! dnsd's use of the XDP guard ([`xdp_guard::daemon`]): its block map mirrored into the dnsd
//! slot of the node's pinned maps (`xdp-guard attach`), or the program attached here for a
//! one-process setup (`[xdp] interface`), with the counters as a metrics source; the
//! answers compiled for the fast path ([`compile`]) and their publisher ([`sync`]), fed by
//! the [`hot_names`] the workers sample.

pub mod compile;
pub mod hot_names;
pub mod sync;

use std::sync::Arc;

pub use xdp_guard::daemon::{DaemonXdp as Xdp, XdpSource};

/// Starts dnsd's part of the XDP guard (see [`xdp_guard::daemon::start`]).
pub fn start(
    cfg: Option<&xdp_guard::XdpConfig>,
    blocks: &Arc<shield::block::BlockMap>,
) -> Option<Xdp> {
    xdp_guard::daemon::start(cfg, "dnsd", xdp_guard::SLOT_DNSD, || {
        blocks.subscribe("xdp")
    })
}
