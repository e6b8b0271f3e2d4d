//! DNS arithmetic both the signer and the checks use: key tags (RFC 4034 Appendix B) and
//! differences of wrapping 32-bit times (RFC 4034 §3.1.5).

/// The key tag of DNSKEY RDATA (RFC 4034 Appendix B).
pub fn key_tag(dnskey: &[u8]) -> u16 {
    if dnskey.len() >= 4 && dnskey[3] == 1 {
        // Algorithm 1 (RSA/MD5): the 16 bits before the last octet of the modulus.
        let n = dnskey.len();
        return if n >= 3 {
            u16::from_be_bytes([dnskey[n - 3], dnskey[n - 2]])
        } else {
            0
        };
    }
    let mut ac: u32 = 0;
    for (i, &b) in dnskey.iter().enumerate() {
        ac += if i & 1 == 1 {
            b as u32
        } else {
            (b as u32) << 8
        };
    }
    ac += (ac >> 16) & 0xFFFF;
    (ac & 0xFFFF) as u16
}

/// Seconds from `a` to `b` in serial arithmetic (RFC 4034 §3.1.5 times wrap).
pub fn secs_between(a: u32, b: u32) -> i64 {
    b.wrapping_sub(a) as i32 as i64
}
