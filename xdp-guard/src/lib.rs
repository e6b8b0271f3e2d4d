//! XDP program and loader that drops blocked sources and rate-limits UDP/53.
//!
//! Three places, as in aya's template: the C program (`bpf/guard.c`, built by build.rs with
//! clang), the Rust mirror of its map layouts ([`maps`], checked against `bpf/guard.h` at build
//! time), and the userspace side: [`XdpGuard`] loads, pins and attaches; [`GuardMaps`] reads and
//! writes the kernel maps; [`Mirror`] drains the shield block map's change feed into them.
//!
//! ```no_run
//! # fn main() -> Result<(), xdp_guard::Error> {
//! use xdp_guard::{Mirror, XdpConfig, XdpGuard, unavailable_reason};
//! let cfg = XdpConfig::new("eth0");
//! if let Some(why) = unavailable_reason(Some(&cfg)) {
//!     eprintln!("running without XDP: {why}");
//!     return Ok(());
//! }
//! let blocks = shield::block::BlockMap::new(Default::default());
//! let guard = XdpGuard::start(&cfg)?;
//! let mirror = Mirror::new(guard.maps().clone(), blocks.subscribe("xdp")).spawn().unwrap();
//! println!("{:?}", guard.counters()?);
//! drop(mirror); // last drain, thread joined
//! drop(guard); // detached; pinned maps stay for the next run and for `dnsd ctl`
//! # Ok(())
//! # }
//! ```
//!
//! Out of scope: per-tenant policy (the guard knows addresses, not tenants), TCP rate limits,
//! and reassembly (non-first fragments are judged by source address only).

mod answers;
mod available;
mod clock;
mod config;
pub mod daemon;
mod error;
mod guard;
mod guard_maps;
pub mod maps;
mod mirror;
pub mod sk_lookup;
mod sys;

pub use answers::{
    ANSWER_LEASE, AnsRateBucket, AnswerRate, AnswerReport, CookieKeys, ROUTE_SYSCTLS,
    StagedAnswers, addr_key, enable_route_lookups, mapped,
};
pub use available::{check_available, unavailable_reason};
pub use clock::{ExpiryClock, KernelExpiry, boot_ns, mono_ns};
pub use config::{DEFAULT_PIN_PATH, Mode, XdpConfig};
pub use error::{Error, Unavailable};
pub use guard::{
    NodeAttachment, TestRunResult, Verdict, XdpGuard, detach_node, ensure_bpffs, map_sizes,
    node_attachments, pinned_maps_fit,
};
pub use guard_maps::{ApplyReport, BlockMapKind, Counters, GuardMaps, KernelBlock, KernelEntry};
pub use maps::{SLOT_DNSD, SLOT_HTTP_FRONT, SLOT_NAMES, SLOT_OPERATOR, SLOT_RULES, SLOTS};
pub use mirror::{Mirror, MirrorHandle, MirrorOptions, MirrorSnapshot, MirrorStats};
