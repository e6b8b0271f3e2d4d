//! The NSEC3 records of a zone, kept apart from the ordinary tree (RFC 5155 §7.1).
//!
//! Their owners are hashed names directly below the apex; in canonical order they are in
//! hash order (base32hex keeps the order of the bytes it encodes).

use crate::zone::Node;

/// NSEC3 owners and their RRsets (NSEC3 and its RRSIG), in hash order.
#[derive(Debug, Default)]
pub struct Nsec3Chain {
    pub(crate) nodes: Vec<Node>,
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

    /// Bytes held.
    pub fn memory_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node>()
    }
}
