//! The floor for UDP benchmarks: the same socket fleet as dnsd (epoll, recvmmsg, sendmmsg)
//! answering each datagram with itself, QR bit set, and no DNS work at all.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use clap::Parser;
use listener::udp::{Handler, UdpFleet, UdpOptions};

/// Echo server for benchmark floors.
#[derive(Parser)]
struct Args {
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    addr: std::net::IpAddr,
    /// Port.
    #[arg(long, default_value_t = 5399)]
    port: u16,
}

struct Echo;

impl Handler for Echo {
    fn handle(
        &mut self,
        req: &[u8],
        _src: std::net::SocketAddr,
        _local: u32,
        out: &mut [u8],
    ) -> Option<usize> {
        let n = req.len().min(out.len());
        out[..n].copy_from_slice(&req[..n]);
        if n > 2 {
            out[2] |= 0x80;
        }
        Some(n)
    }
}

fn main() {
    let a = Args::parse();
    let fleet = UdpFleet::bind(&[a.addr], a.port, &UdpOptions::default()).expect("bind");
    let stop = Arc::new(AtomicBool::new(false));
    let (handles, _w) = fleet.run(1, |_| Echo, stop).expect("run");
    for h in handles {
        let _ = h.join();
    }
}
