//! The NSEC3 records of a zone, kept apart from the ordinary tree (RFC 5155 §7.1), and the
//! hashing that finds them.
//!
//! Their owners are hashed names directly below the apex; in canonical order they are in
//! hash order (base32hex keeps the order of the bytes it encodes), so the chain is searched
//! by binary search over the decoded hashes. At load, every name of the zone is hashed
//! once: each node knows the NSEC3 that matches it and the one that covers its wildcard
//! (`*.name`), so a query only hashes the one name that depends on it (the next closer
//! name), into a stack buffer.

use sha1::Digest as _;

use crate::node::{NONE, Node};

/// Length of a SHA-1 NSEC3 hash (algorithm 1, the only one defined).
pub const HASH_LEN: usize = 20;

/// The hashing parameters of the chain (from NSEC3PARAM, else from the first NSEC3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nsec3Params {
    /// Hash algorithm (1 = SHA-1).
    pub alg: u8,
    /// Flags of NSEC3PARAM (must be 0).
    pub flags: u8,
    /// Additional iterations.
    pub iterations: u16,
    /// Salt.
    pub salt: Vec<u8>,
}

impl Nsec3Params {
    /// Reads NSEC3PARAM or NSEC3 RDATA (they start the same way).
    pub fn from_rdata(rd: &[u8]) -> Option<Nsec3Params> {
        if rd.len() < 5 {
            return None;
        }
        let salt_len = rd[4] as usize;
        let salt = rd.get(5..5 + salt_len)?.to_vec();
        Some(Nsec3Params {
            alg: rd[0],
            flags: rd[1],
            iterations: u16::from_be_bytes([rd[2], rd[3]]),
            salt,
        })
    }

    /// The NSEC3 hash of a lower-case wire name (RFC 5155 §5).
    pub fn hash(&self, name_lower: &[u8]) -> [u8; HASH_LEN] {
        let mut h = sha1::Sha1::new();
        h.update(name_lower);
        h.update(&self.salt);
        let mut out: [u8; HASH_LEN] = h.finalize().into();
        for _ in 0..self.iterations {
            let mut h = sha1::Sha1::new();
            h.update(out);
            h.update(&self.salt);
            out = h.finalize().into();
        }
        out
    }
}

/// NSEC3 owners and their RRsets (NSEC3 and its RRSIG), in hash order.
#[derive(Debug, Default)]
pub struct Nsec3Chain {
    pub(crate) nodes: Vec<Node>,
    /// Decoded owner hashes, `HASH_LEN` bytes each, in chain order.
    pub(crate) hashes: Vec<[u8; HASH_LEN]>,
    /// Hashing parameters, when the chain can be used.
    pub(crate) params: Option<Nsec3Params>,
    /// Per tree node: the chain entry matching its hash (`NONE` when absent: opt-out).
    pub(crate) node_match: Vec<u32>,
    /// Per tree node: the chain entry covering (or matching) the hash of `*.name`.
    pub(crate) wildcard_cover: Vec<u32>,
    /// The entries of the chain the parameters name, in hash order, when the zone holds
    /// others too (a chain being replaced: RFC 5155 §10.4); `None`: every entry is of it.
    pub(crate) active: Option<Vec<u32>>,
}

impl Nsec3Chain {
    /// Number of NSEC3 owners.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The hashing parameters, when known.
    pub fn params(&self) -> Option<&Nsec3Params> {
        self.params.as_ref()
    }

    /// The entry of the answering chain whose hash equals `h`.
    pub fn find_match(&self, h: &[u8; HASH_LEN]) -> Option<usize> {
        match &self.active {
            None => self.hashes.binary_search(h).ok(),
            Some(a) => {
                let j = a
                    .binary_search_by(|&i| self.hashes[i as usize].cmp(h))
                    .ok()?;
                Some(a[j] as usize)
            }
        }
    }

    /// The entry of the answering chain that covers `h`: the last one whose hash is below
    /// it, wrapping around to the last entry (whose "next" is the first). Equal hashes match
    /// instead of cover.
    pub fn find_cover(&self, h: &[u8; HASH_LEN]) -> Option<usize> {
        match &self.active {
            None => {
                let last = self.hashes.len().checked_sub(1)?;
                match self.hashes.binary_search(h) {
                    Ok(i) => Some(i),
                    Err(0) => Some(last),
                    Err(i) => Some(i - 1),
                }
            }
            Some(a) => {
                let last = a.len().checked_sub(1)?;
                let j = match a.binary_search_by(|&i| self.hashes[i as usize].cmp(h)) {
                    Ok(j) => j,
                    Err(0) => last,
                    Err(j) => j - 1,
                };
                Some(a[j] as usize)
            }
        }
    }

    /// True when entry `i` belongs to the answering chain.
    pub fn is_active(&self, i: usize) -> bool {
        self.active
            .as_ref()
            .is_none_or(|a| a.binary_search(&(i as u32)).is_ok())
    }

    /// The entry matching tree node `id`, if the chain has one (not under opt-out).
    #[inline]
    pub fn node_match(&self, id: u32) -> Option<usize> {
        self.node_match
            .get(id as usize)
            .copied()
            .filter(|&i| i != NONE)
            .map(|i| i as usize)
    }

    /// The entry covering `*.name` of tree node `id`.
    #[inline]
    pub fn wildcard_cover(&self, id: u32) -> Option<usize> {
        self.wildcard_cover
            .get(id as usize)
            .copied()
            .filter(|&i| i != NONE)
            .map(|i| i as usize)
    }

    /// Bytes held.
    pub fn memory_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node>()
            + self.hashes.capacity() * HASH_LEN
            + (self.node_match.capacity() + self.wildcard_cover.capacity()) * 4
            + self.active.as_ref().map_or(0, |a| a.capacity() * 4)
    }
}

/// Decodes a base32hex label (RFC 4648 §7, no padding, either case) into `out`; the number
/// of bytes, or `None` when it is not base32hex.
pub fn base32hex_decode(label: &[u8], out: &mut [u8]) -> Option<usize> {
    let mut acc: u64 = 0;
    let mut bits = 0u32;
    let mut n = 0usize;
    for &c in label {
        let v = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'v' => c - b'a' + 10,
            b'A'..=b'V' => c - b'A' + 10,
            _ => return None,
        } as u64;
        acc = (acc << 5) | v;
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            *out.get_mut(n)? = (acc >> bits) as u8;
            n += 1;
            acc &= (1 << bits) - 1;
        }
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc5155_appendix_a_hashes() {
        // RFC 5155 Appendix A: salt aabbccdd, 12 iterations.
        let p = Nsec3Params {
            alg: 1,
            flags: 0,
            iterations: 12,
            salt: vec![0xaa, 0xbb, 0xcc, 0xdd],
        };
        let cases = [
            ("example.", "0p9mhaveqvm6t7vbl5lop2u3t2rp3tom"),
            ("a.example.", "35mthgpgcu1qg68fab165klnsnk3dpvl"),
            ("ai.example.", "gjeqe526plbf1g8mklp59enfd789njgi"),
            ("ns1.example.", "2t7b4g4vsa5smi47k61mv5bv1a22bojr"),
            ("*.w.example.", "r53bq7cc2uvmubfu5ocmm6pers9tk9en"),
        ];
        for (name, want) in cases {
            let n = crate::Name::parse(name, None).unwrap();
            let h = p.hash(n.as_wire());
            let mut d = [0u8; 32];
            let len = base32hex_decode(want.as_bytes(), &mut d).unwrap();
            assert_eq!(&h[..], &d[..len], "{name}");
        }
    }

    #[test]
    fn cover_and_match() {
        let c = Nsec3Chain {
            hashes: vec![[10u8; 20], [20u8; 20], [30u8; 20]],
            ..Default::default()
        };
        assert_eq!(c.find_match(&[20u8; 20]), Some(1));
        assert_eq!(c.find_match(&[21u8; 20]), None);
        assert_eq!(c.find_cover(&[25u8; 20]), Some(1));
        assert_eq!(c.find_cover(&[5u8; 20]), Some(2), "wraps to the last");
        assert_eq!(c.find_cover(&[35u8; 20]), Some(2));
        assert_eq!(base32hex_decode(b"xyz", &mut [0u8; 8]), None);
        // Entries 1 and 3 of another chain: only 0, 2 and 4 match and cover.
        let c = Nsec3Chain {
            hashes: vec![[10u8; 20], [15u8; 20], [20u8; 20], [25u8; 20], [30u8; 20]],
            active: Some(vec![0, 2, 4]),
            ..Default::default()
        };
        assert_eq!(c.find_match(&[15u8; 20]), None);
        assert_eq!(c.find_match(&[20u8; 20]), Some(2));
        assert_eq!(c.find_cover(&[15u8; 20]), Some(0));
        assert_eq!(c.find_cover(&[26u8; 20]), Some(2));
        assert_eq!(c.find_cover(&[5u8; 20]), Some(4), "wraps to the last");
        assert!(c.is_active(2) && !c.is_active(3));
        let none = Nsec3Chain {
            hashes: vec![[10u8; 20]],
            active: Some(vec![]),
            ..Default::default()
        };
        assert_eq!(
            (none.find_match(&[10u8; 20]), none.find_cover(&[9u8; 20])),
            (None, None)
        );
    }
}
