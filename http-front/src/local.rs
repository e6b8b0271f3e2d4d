//! Per-thread handles of the shared policy core: a block-map reader, an event recorder, cached rules and an access-log sender — so the request path takes no shared lock.

use std::cell::RefCell;
use std::net::IpAddr;
use std::sync::mpsc::SyncSender;

use shield::block::BlockReader;
use shield::events::{Action, Recorder};
use shield::rules::LocalRules;

use crate::access_log::AccessRecord;
use crate::front::Front;

/// One thread's handles for one [`Front`].
pub struct Local {
    owner: u64,
    /// Block-map lookups.
    pub reader: BlockReader,
    /// Event recording into this thread's aggregator shard.
    pub recorder: Recorder,
    /// The current rules, refreshed after a reload with one relaxed load.
    pub rules: LocalRules,
    /// Access-log queue, when access logs are on.
    pub access: Option<SyncSender<AccessRecord>>,
    /// Passed requests seen by this thread (sampling).
    pub sample_tick: u64,
}

impl Local {
    fn new(front: &Front) -> Local {
        Local {
            owner: front.id(),
            reader: front.blocks.reader(),
            recorder: front.events.recorder(),
            rules: front.rules.local(),
            access: front.access_log_sender(),
            sample_tick: 0,
        }
    }

    /// True when `ip` is blocked now: one atomic load while the map is empty, one probe per prefix length in use otherwise.
    #[inline]
    pub fn is_blocked(&self, ip: IpAddr) -> bool {
        !self.reader.is_empty() && self.reader.is_blocked(ip, shield::clock::unix_ms())
    }

    /// Records a blocked request or connection.
    #[inline]
    pub fn record_blocked(&self, tenant: u32, ip: IpAddr) {
        self.recorder.record(tenant, ip, Action::Blocked, 0);
    }
}

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's handles for `front` (made on first use). Must not nest.
#[inline]
pub fn with<R>(front: &Front, f: impl FnOnce(&mut Local) -> R) -> R {
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
