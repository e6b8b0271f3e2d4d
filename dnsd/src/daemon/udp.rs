//! The UDP side's adapter: the socket fleet's handler runs the query pipeline on each
//! datagram of a batch (its twin for TCP is [`crate::daemon::tcp`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use listener::udp::Handler;
use shield::proxy_proto::ProxyAllow;

use crate::observe::counters::{DropCause, WorkerStats};
use crate::query::process_query::{Outcome, Processor, Transport};

/// One UDP worker's handler: its own query processor.
pub struct UdpHandler {
    /// The worker's processor.
    pub p: Processor,
    /// The proxies whose PROXY v2 headers are believed (`[server] proxy_allow`).
    pub proxy: Arc<ProxyAllow>,
    /// The worker's counters (for datagrams dropped before the processor).
    pub stats: Arc<WorkerStats>,
    /// The fleet's service addresses, by the index the fleet hands each datagram.
    pub local: Arc<[IpAddr]>,
}

impl Handler for UdpHandler {
    #[inline]
    fn begin_batch(&mut self) {
        self.p.refresh();
    }
    #[inline]
    fn handle(&mut self, req: &[u8], src: SocketAddr, local: u32, out: &mut [u8]) -> Option<usize> {
        self.serve(req, src, local, out, false)
    }
    fn oversized(
        &mut self,
        head: &[u8],
        src: SocketAddr,
        local: u32,
        out: &mut [u8],
    ) -> Option<usize> {
        self.serve(head, src, local, out, true)
    }
}

impl UdpHandler {
    /// Runs the pipeline on one datagram (of which only the start came when `oversized`).
    #[inline]
    fn serve(
        &mut self,
        req: &[u8],
        src: SocketAddr,
        local: u32,
        out: &mut [u8],
        oversized: bool,
    ) -> Option<usize> {
        if let Some(&ip) = self.local.get(local as usize) {
            self.p.set_local(ip);
        }
        // A listed proxy's datagram starts with a PROXY v2 header naming the client; anyone
        // else's may not carry one. The answer goes back to the proxy, without a header.
        let (req, client) = match self.proxy.datagram(req, src) {
            // A datagram is a datagram whatever the header says of the client's side (dnsdist
            // sends TCP clients' queries over TCP): its answer must fit UDP, and nothing
            // proves the client's address.
            Ok((payload, client, _carried)) => (payload, client),
            Err(e) => {
                self.stats.dropped(DropCause::proxy(e));
                return None;
            }
        };
        let outcome = if oversized {
            self.p.process_oversized(req, client, Transport::Udp, out)
        } else {
            self.p.process(req, client, Transport::Udp, out)
        };
        match outcome {
            Outcome::Reply(n) => Some(n),
            Outcome::Drop | Outcome::Transfer | Outcome::Refused => None,
        }
    }
}
