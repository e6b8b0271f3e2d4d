//! Background tasks around the block map: closing the open connections of every source whose block stops HTTP (whoever put it there; never a suspect nor a DNS-only block), and expiring old entries.

use std::sync::Arc;
use std::time::Duration;

use shield::block::{Change, Delivery, Traffic};

use crate::conn_registry::CloseCause;
use crate::front::Front;

/// Most changes taken from the feed at once.
const POLL_MAX: usize = 4096;
/// Most expired entries removed per tick.
const EXPIRE_BUDGET: usize = 65_536;

/// Follows the block map's change feed and asks the connections of each newly blocked source
/// or prefix to close (HTTP/2: GOAWAY; HTTP/1.1: at once when idle, else after the response).
pub async fn close_blocked(front: Arc<Front>) {
    let mut sub = front.blocks.subscribe("http-front-connections");
    loop {
        sub.changed().await;
        while let Some(d) = sub.poll(POLL_MAX) {
            let now = shield::clock::unix_ms();
            let mut closed = 0;
            match d {
                Delivery::Changes(changes) => {
                    for ch in changes {
                        if let Change::Upsert(e) = ch
                            && !e.is_expired(now)
                            && e.stops(Traffic::Stream)
                        {
                            closed += front.registry.close_net(e.net, CloseCause::Blocked);
                        }
                    }
                }
                Delivery::Resync(entries) => {
                    for e in entries {
                        if !e.is_expired(now) && e.stops(Traffic::Stream) {
                            closed += front.registry.close_net(e.net, CloseCause::Blocked);
                        }
                    }
                }
            }
            if closed > 0 {
                tracing::debug!(closed, "closing connections of blocked sources");
            }
        }
    }
}

/// Removes expired block entries every second (bounded work per tick, never a scan).
pub async fn expire(front: Arc<Front>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        front.blocks.expire(shield::clock::unix_ms(), EXPIRE_BUDGET);
    }
}
