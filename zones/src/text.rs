//! Small presentation-format readers shared by the directives and the RDATA parsers.

/// Reads a TTL: decimal seconds or BIND units (`1w2d3h4m5s`, any case).
///
/// Any value up to 2^32-1, written either way, is read as it is (a zone loader takes one with
/// the top bit set as 0: [`load_ttl`]); above it is refused.
pub fn parse_ttl(s: &[u8]) -> Result<u32, &'static str> {
    if s.is_empty() {
        return Err("empty TTL");
    }
    if s.iter().all(u8::is_ascii_digit) {
        let v = parse_u64(s).ok_or("TTL out of range (above 4294967295)")?;
        return u32::try_from(v).map_err(|_| "TTL out of range (above 4294967295)");
    }
    let mut total: u64 = 0;
    let mut num: Option<u64> = None;
    for &c in s {
        if c.is_ascii_digit() {
            let n = num.unwrap_or(0) * 10 + (c - b'0') as u64;
            if n > u32::MAX as u64 {
                return Err("TTL out of range");
            }
            num = Some(n);
        } else {
            let mult = match c.to_ascii_lowercase() {
                b'w' => 604_800,
                b'd' => 86_400,
                b'h' => 3_600,
                b'm' => 60,
                b's' => 1,
                _ => return Err("bad TTL: expected digits with units w, d, h, m, s"),
            };
            let n = num.take().ok_or("bad TTL: unit without a number")?;
            total += n * mult;
            if total > u32::MAX as u64 {
                return Err("TTL out of range (above 4294967295)");
            }
        }
    }
    if num.is_some() {
        // BIND refuses "1h30" (a bare number after units).
        return Err("bad TTL: number without a unit after units");
    }
    Ok(total as u32)
}

/// The TTL a zone's record gets for `v` as written: a value with the top bit set (2^31 to
/// 2^32-1) is 0, as RFC 2181 §8 has such TTLs treated and BIND loads them, whether written in
/// seconds or with units.
pub fn load_ttl(v: u32) -> u32 {
    if v > i32::MAX as u32 { 0 } else { v }
}

/// Reads an unsigned decimal that fits in u64 (digits only).
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls() {
        assert_eq!(parse_ttl(b"3600"), Ok(3600));
        assert_eq!(parse_ttl(b"1h30m"), Ok(5400));
        assert_eq!(parse_ttl(b"1W"), Ok(604800));
        assert_eq!(parse_ttl(b"1d2h3m4s"), Ok(93784));
        assert_eq!(parse_ttl(b"2147483647"), Ok(2147483647));
        // The top bit set: read as written, loaded as 0 (RFC 2181 §8), in seconds or with
        // units alike; past 32 bits: refused.
        assert_eq!(parse_ttl(b"2147483648"), Ok(2147483648));
        assert_eq!(parse_ttl(b"4294967295"), Ok(4294967295));
        assert_eq!(parse_ttl(b"4000w"), Ok(2419200000));
        assert_eq!(load_ttl(2419200000), 0);
        assert_eq!(load_ttl(2147483647), 2147483647);
        assert!(parse_ttl(b"4294967296").is_err());
        assert!(parse_ttl(b"7102w").is_err());
        assert!(parse_ttl(b"1h30").is_err());
        assert!(parse_ttl(b"h").is_err());
        assert!(parse_ttl(b"1x").is_err());
        assert!(parse_ttl(b"").is_err());
    }
}
