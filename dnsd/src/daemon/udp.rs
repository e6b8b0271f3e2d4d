//! The UDP side's adapter: the socket fleet's handler runs the query pipeline on each
//! datagram of a batch (its twin for TCP is [`crate::daemon::tcp`]).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use listener::udp::Handler;

use crate::query::process_query::{Outcome, Processor, Transport};

/// One UDP worker's handler: its own query processor.
pub struct UdpHandler {
    /// The worker's processor.
    pub p: Processor,
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
        if let Some(&ip) = self.local.get(local as usize) {
            self.p.set_local(ip);
        }
        match self.p.process(req, src, Transport::Udp, out) {
            Outcome::Reply(n) => Some(n),
            Outcome::Drop | Outcome::Transfer | Outcome::Refused => None,
        }
    }
}
