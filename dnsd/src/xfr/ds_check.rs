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
    if r.id != id || !r.echoes(apex, t::DS) {
        return Err("an answer to another question".into());
    }
    if r.flags & hf::AA == 0 {
        // A referral, or a resolver's copy: only the parent's own servers are asked.
        return Err("an answer that is not authoritative".into());
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

    /// How the fake parent answers.
    #[derive(Clone, Copy, Debug)]
    enum Answer {
        Good,
        NotAuthoritative,
        OtherId,
        OtherQuestion,
        InAuthority,
    }

    /// A parent server on loopback that answers each DS query once, as `how` says, with a DS
    /// of `dnskey` at `apex`.
    async fn parent(how: Answer, apex: &'static [u8], dnskey: [u8; 8]) -> SocketAddr {
        let s = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let at = s.local_addr().unwrap();
        tokio::spawn(async move {
            let mut q = [0u8; 512];
            let (n, from) = s.recv_from(&mut q).await.unwrap();
            let mut m = q[..n].to_vec();
            m[2] |= 0x80; // QR
            if !matches!(how, Answer::NotAuthoritative) {
                m[2] |= 0x04; // AA
            }
            if matches!(how, Answer::OtherId) {
                m[0] ^= 0xff;
            }
            if matches!(how, Answer::OtherQuestion) {
                // The question's type: DNSKEY, not DS.
                let qt = 12 + apex.len();
                m[qt..qt + 2].copy_from_slice(&48u16.to_be_bytes());
            }
            let count = if matches!(how, Answer::InAuthority) {
                8
            } else {
                6
            };
            m[count + 1] = 1;
            let d = zones::dnssec::ds_digest(apex, &dnskey, 2).unwrap();
            let mut rd = vec![0x12, 0x34, 13, 2];
            rd.extend_from_slice(&d);
            m.extend_from_slice(&[0xC0, 12, 0, 43, 0, 1, 0, 0, 0, 60]);
            m.extend_from_slice(&(rd.len() as u16).to_be_bytes());
            m.extend_from_slice(&rd);
            s.send_to(&m, from).await.unwrap();
        });
        at
    }

    #[tokio::test]
    async fn only_an_authoritative_answer_to_the_question_asked_counts() {
        let apex: &'static [u8] = b"\x07example\x03com\x00";
        let dnskey = [1u8, 1, 3, 13, 9, 9, 9, 9];
        let ask = |how| async move {
            parent_holds(parent(how, apex, dnskey).await, apex, 0x1234, &dnskey).await
        };
        assert_eq!(ask(Answer::Good).await, Ok(true));
        assert_eq!(
            ask(Answer::InAuthority).await,
            Ok(false),
            "a DS beside the answer"
        );
        for how in [
            Answer::NotAuthoritative,
            Answer::OtherId,
            Answer::OtherQuestion,
        ] {
            assert!(ask(how).await.is_err(), "{how:?}");
        }
    }

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
