//! The parent side of a KSK rollover (see `crate::signing::submission`): whether a parent
//! server holds a DS of the new key, asked as the transfer client asks SOAs (UDP, then TCP
//! when truncated or lost).

use std::net::SocketAddr;
use std::time::Duration;

use zones::rrtype::t;

use super::wire::{self, RrBuf};
use crate::query::wire::{hf, opcode, rcode};

/// Whether `server` holds a DS at `apex` (wire, lower case) for the key `dnskey` (tag
/// `tag`): asked over UDP, then over TCP when the answer is truncated or lost.
pub async fn parent_holds(
    server: SocketAddr,
    apex: &[u8],
    tag: u16,
    dnskey: &[u8],
) -> Result<bool, String> {
    let limit = Duration::from_secs(5);
    let id: u16 = rand::random();
    let q = wire::build_query(id, opcode::QUERY, apex, t::DS, None, false, None);
    let udp = crate::xfr::client::udp_exchange(server, None, &q, limit).await;
    let resp = match udp {
        Ok(r) if r.len() >= 4 && u16::from_be_bytes([r[2], r[3]]) & hf::TC == 0 => r,
        _ => {
            let mut c = crate::xfr::client::TcpClient::connect(server, None, limit)
                .await
                .map_err(|e| e.to_string())?;
            c.send(&q).await.map_err(|e| e.to_string())?;
            let mut buf = Vec::new();
            c.recv(&mut buf).await.map_err(|e| e.to_string())?;
            buf
        }
    };
    let mut held = false;
    let mut b = RrBuf::default();
    let r = wire::read_response(&resp, &mut b, &mut |rr| {
        if rr.rtype == t::DS && rr.owner.eq_ignore_ascii_case(apex) {
            held |= ds_names_key(rr.rdata, apex, tag, dnskey);
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    if r.id != id {
        return Err("an answer with another ID".into());
    }
    match r.rcode {
        rcode::NOERROR => Ok(held),
        rcode::NXDOMAIN => Ok(false),
        x => Err(format!("rcode {x}")),
    }
}

/// Whether the DS RDATA `rd` names the key `dnskey` (tag `tag`) of `apex`.
fn ds_names_key(rd: &[u8], apex: &[u8], tag: u16, dnskey: &[u8]) -> bool {
    if rd.len() < 5 || u16::from_be_bytes([rd[0], rd[1]]) != tag || dnskey.len() < 4 {
        return false;
    }
    // The DS's algorithm is the key's (the DNSKEY RDATA's fourth byte).
    rd[2] == dnskey[3]
        && zones::dnssec::ds_digest(apex, dnskey, rd[3]).is_some_and(|d| d == rd[4..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ds_names_its_key_by_tag_algorithm_and_digest() {
        let apex = b"\x07example\x03com\x00";
        let dnskey = [1u8, 1, 3, 13, 9, 9, 9, 9];
        let d = zones::dnssec::ds_digest(apex, &dnskey, 2).unwrap();
        let mut rd = vec![0x12, 0x34, 13, 2];
        rd.extend_from_slice(&d);
        assert!(ds_names_key(&rd, apex, 0x1234, &dnskey));
        assert!(!ds_names_key(&rd, apex, 0x1235, &dnskey), "another tag");
        assert!(
            !ds_names_key(&rd, b"\x03org\x00", 0x1234, &dnskey),
            "another owner"
        );
        let mut other = rd.clone();
        other[2] = 8;
        assert!(
            !ds_names_key(&other, apex, 0x1234, &dnskey),
            "another algorithm"
        );
        let mut bad = rd.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(!ds_names_key(&bad, apex, 0x1234, &dnskey), "another digest");
        assert!(!ds_names_key(&rd[..4], apex, 0x1234, &dnskey), "cut short");
    }
}
