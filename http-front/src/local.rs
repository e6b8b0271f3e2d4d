//! Per-thread handles of the shared policy core: a block-map reader, an event recorder, cached rules and an access-log sender — so the request path takes no shared lock.

use std::cell::RefCell;
use std::net::IpAddr;

use shield::block::{BlockReader, Check, Traffic};
use shield::events::{Action, Recorder};
use shield::rules::LocalRules;

/// What a thread's handles are made from: the front's shared parts (a trait so that this
/// module needs nothing of the front that assembles them).
pub trait Parts {
    /// A process-unique id of the parts (handles are remade when it changes).
    fn id(&self) -> u64;
    /// The block map.
    fn blocks(&self) -> &std::sync::Arc<shield::block::BlockMap>;
    /// The event aggregator.
    fn events(&self) -> &std::sync::Arc<shield::events::Aggregator>;
    /// The rules.
    fn rules(&self) -> &std::sync::Arc<shield::rules::RuleSet>;
    /// A sender into the access-log writer, when access logs are on.
    fn access_log_sender(&self) -> Option<crate::access_log::RecordSender>;
}

/// One thread's handles for one front.
pub struct Local {
    owner: u64,
    /// Block-map lookups.
    pub reader: BlockReader,
    /// Event recording into this thread's aggregator shard.
    pub recorder: Recorder,
    /// The current rules, refreshed after a reload with one relaxed load.
    pub rules: LocalRules,
    /// Access-log queue, when access logs are on.
    pub access: Option<crate::access_log::RecordSender>,
    /// Passed requests seen by this thread (sampling).
    pub sample_tick: u64,
}

impl Local {
    fn new<P: Parts + ?Sized>(p: &P) -> Local {
        Local {
            owner: p.id(),
            reader: p.blocks().reader(),
            recorder: p.events().recorder(),
            rules: p.rules().local(),
            access: p.access_log_sender(),
            sample_tick: 0,
        }
    }

    /// True when a block of every packet (proven, scope `all`) holds `ip` now — DNS-only
    /// blocks and suspects never stop HTTP — recorded as a `blocked` event of `tenant` with
    /// the block's evidence. One atomic load while the map is empty, one probe per prefix
    /// length in use otherwise.
    #[inline]
    pub fn blocked(&self, tenant: u32, ip: IpAddr) -> bool {
        if self.reader.is_empty() {
            return false;
        }
        match self
            .reader
            .check(ip, shield::clock::unix_ms(), Traffic::Stream)
        {
            Check::Blocked(hit) => {
                self.recorder
                    .record(tenant, ip, Action::Blocked, hit.evidence, 0);
                true
            }
            _ => false,
        }
    }
}

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's handles for `front` (made on first use). Must not nest.
#[inline]
pub fn with<R, P: Parts + ?Sized>(front: &P, f: impl FnOnce(&mut Local) -> R) -> R {
    LOCAL.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|l| l.owner != front.id()) {
            *slot = Some(Local::new(front));
        }
        f(slot.as_mut().expect("just set"))
    })
}

/// Drops this thread's handles (a worker thread that is ending).
pub fn clear() {
    let _ = LOCAL.try_with(|cell| cell.borrow_mut().take());
}
