//! The NSEC3 chain of a zone signed with NSEC3: hashed owner names in hash order.

/// NSEC3 records of a zone, kept apart from the ordinary tree (RFC 5155 §7.1).
#[derive(Debug, Default)]
pub struct Nsec3Chain {}

impl Nsec3Chain {
    /// Bytes held.
    pub fn memory_bytes(&self) -> usize {
        0
    }
}
