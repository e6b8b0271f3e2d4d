//! The block map as a pipeline module: at `on_accept` (TCP) and `before_parse` (every
//! message), a blocked source costs one lookup and nothing else — no parsing, no answer.
//! Which entries apply depends on the transport ([`Traffic`]): over UDP every proven entry
//! blocks; over TCP only those of scope `all` (a block proven by a DNS cookie stops UDP
//! alone). An unproven entry never blocks: the source is marked a suspect ([`Env::suspect`])
//! and the query goes on, so that the suspects module (or the random-subdomain defence)
//! truncates it — unless a valid cookie proves the source. Hits are counted by who decided
//! (local, operator, peer) and recorded as `blocked` events with the entry's evidence (under
//! `[events] connection_tenant`: nothing of the query is known yet).

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use shield::block::{BlockReader, Check, Origin, Traffic};
use shield::events::Action;

use super::{Shared, reason};
use crate::observe::counters::DropCause;
use crate::query::module::{Env, QueryModule, Step, Transport};

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
    fn check(&mut self, env: &mut Env, src: IpAddr, traffic: Traffic) -> Step {
        env.suspect = None;
        env.suspect_tenants = shield::block::TenantSet::default();
        // One atomic load when the map is empty.
        if self.reader.is_empty() {
            return Step::Continue;
        }
        match self.reader.check(src, env.now_ms, traffic) {
            Check::Clear => Step::Continue,
            Check::Suspect(hit) => {
                env.suspect = Some(hit.scope);
                env.suspect_tenants = hit.tenants;
                Step::Continue
            }
            Check::Blocked(hit) => {
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
                    hit.evidence,
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
        self.check(env, src, Traffic::Stream)
    }

    #[inline]
    fn before_parse(&mut self, env: &mut Env, src: IpAddr, transport: Transport) -> Step {
        let traffic = match transport {
            Transport::Udp => Traffic::DnsUdp,
            Transport::Tcp => Traffic::Stream,
        };
        self.check(env, src, traffic)
    }
}
