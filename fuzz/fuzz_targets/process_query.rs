//! `Processor::process`, the whole query pipeline, end to end on a small zone set: any bytes
//! from any source over UDP or TCP, with defences and transfers on or off. It never panics,
//! and every reply is a well-formed response (hickory-proto parses it) that echoes the ID,
//! has QR set and fits the transport's size limit; a zone transfer it starts streams only
//! well-formed messages.
//!
//! Input: one selector byte (processor, transport, source), then the message.
#![no_main]

use std::cell::RefCell;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use dnsd::query::process_query::{Outcome, Transport};
use dnsd::query::wire::{Query, parse_query};
use libfuzzer_sys::fuzz_target;
use palisade_fuzz::fixture::{Processors, processors};

thread_local! {
    static P: RefCell<(Processors, tokio::runtime::Runtime)> = RefCell::new((
        processors(),
        tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap(),
    ));
    static OUT: RefCell<Vec<u8>> = RefCell::new(vec![0u8; 65535]);
}

fn check_reply(req: &[u8], reply: &[u8], transport: Transport) {
    assert!(reply.len() >= 12, "reply shorter than a header");
    assert_eq!(&reply[..2], &req[..2], "ID not echoed");
    assert!(reply[2] & 0x80 != 0, "QR not set");
    if transport == Transport::Udp {
        let mut q = Query::default();
        let limit = match parse_query(req, &mut q) {
            Ok(()) => q.edns.map_or(512, |e| e.udp_size.min(1232).max(512)) as usize,
            Err(_) => 1232,
        };
        assert!(
            reply.len() <= limit,
            "UDP reply of {} > {limit}",
            reply.len()
        );
    }
    if let Err(e) = palisade_fuzz::check_framing(reply) {
        panic!("badly framed reply ({e}): {reply:02x?}");
    }
    if let Err(e) = hickory_proto::op::Message::from_vec(reply) {
        panic!("malformed reply ({e}): {reply:02x?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, req)) = data.split_first() else {
        return;
    };
    if req.len() > 16 * 1024 {
        return; // TCP refuses longer queries; UDP buffers are 4096.
    }
    let transport = if sel & 1 == 0 {
        Transport::Udp
    } else {
        Transport::Tcp
    };
    if transport == Transport::Udp && req.len() > 4096 {
        return;
    }
    let ip = match (sel >> 2) & 3 {
        0 => IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)),
        1 => IpAddr::V4(Ipv4Addr::new(198, 51, 100, sel)),
        2 => IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, sel as u16)),
        _ => IpAddr::V6(Ipv6Addr::LOCALHOST),
    };
    let src = SocketAddr::new(ip, 5353);
    P.with(|p| {
        let (ps, rt) = &mut *p.borrow_mut();
        let proc = if sel & 2 == 0 {
            &mut ps.bare
        } else {
            &mut ps.full
        };
        proc.refresh();
        OUT.with(|o| {
            let out = &mut *o.borrow_mut();
            let out: &mut [u8] = if transport == Transport::Udp {
                &mut out[..4096]
            } else {
                out
            };
            match proc.process(req, src, transport, out) {
                Outcome::Reply(n) => {
                    assert!(n <= out.len());
                    check_reply(req, &out[..n], transport);
                }
                Outcome::Drop | Outcome::Refused => {}
                Outcome::Transfer => {
                    assert_eq!(transport, Transport::Tcp, "a transfer over UDP");
                    let job = proc
                        .take_transfer()
                        .expect("Outcome::Transfer without a job");
                    let (tx, mut rx) =
                        tokio::sync::mpsc::channel::<dnsd::query::handoff::Outgoing>(1 << 16);
                    rt.block_on(job.run(tx));
                    while let Ok(m) = rx.try_recv() {
                        let m = m.msg;
                        let n = u16::from_be_bytes([m[0], m[1]]) as usize;
                        assert_eq!(n + 2, m.len(), "transfer frame length");
                        check_reply(req, &m[2..], Transport::Tcp);
                    }
                }
            }
        });
    });
});
