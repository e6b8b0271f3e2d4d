//! The block map as a pipeline module: at `on_accept` (TCP) and `before_parse` (every
//! message), a blocked source costs one lookup and nothing else — no parsing, no answer.
//! Hits are counted by who decided (local, operator, peer) and recorded as `blocked`
//! events (under `[events] connection_tenant`: nothing of the query is known yet).

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use shield::block::{BlockReader, Origin};
use shield::events::Action;

use super::{Shared, reason};
use crate::query_module::{Env, QueryModule, Step};
use crate::stats::DropCause;

/// A worker's block-map check.
pub struct BlockCheck {
    reader: BlockReader,
    shared: Arc<Shared>,
}

impl BlockCheck {
    /// A check reading `shared`'s block map.
    pub fn new(shared: &Arc<Shared>) -> BlockCheck {
        BlockCheck {
            reader: shared.blocks.reader(),
            shared: Arc::clone(shared),
        }
    }

    #[inline]
    fn check(&mut self, env: &mut Env, src: IpAddr) -> Step {
        // One atomic load when the map is empty.
        if self.reader.is_empty() {
            return Step::Continue;
        }
        match self.reader.lookup(src, env.now_ms) {
            None => Step::Continue,
            Some(hit) => {
                let i = match hit.origin {
                    Origin::Local => 0,
                    Origin::Operator => 1,
                    Origin::Peer => 2,
                };
                self.shared.blocked[i].fetch_add(1, Ordering::Relaxed);
                env.recorder.record(
                    self.shared.connection_tenant,
                    src,
                    Action::Blocked,
                    reason::BLOCKED,
                );
                Step::Drop(DropCause::Blocked)
            }
        }
    }
}

impl QueryModule for BlockCheck {
    #[inline]
    fn on_accept(&mut self, env: &mut Env, src: IpAddr) -> Step {
        self.check(env, src)
    }

    #[inline]
    fn before_parse(&mut self, env: &mut Env, src: IpAddr) -> Step {
        self.check(env, src)
    }
}
