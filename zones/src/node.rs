//! A name of a compiled zone: its node (place in the tree, flags, where its RRsets are), the
//! leaf both the zone and its NSEC3 chain build on.

/// Index of a node in a zone.
pub type NodeId = u32;
/// No node.
pub const NONE: NodeId = u32::MAX;

/// Node flags.
pub mod flags {
    /// The zone apex.
    pub const APEX: u16 = 1;
    /// A zone cut: NS at a name other than the apex.
    pub const DELEG: u16 = 2;
    /// Below a zone cut or a DNAME: not authoritative (glue or occluded data).
    pub const OCCLUDED: u16 = 4;
    /// Holds a DNAME.
    pub const DNAME: u16 = 8;
    /// Holds a CNAME.
    pub const CNAME: u16 = 16;
    /// The first label is `*`.
    pub const WILDCARD: u16 = 32;
    /// Holds no RRset: an empty non-terminal.
    pub const EMPTY: u16 = 64;
    /// Holds a DS RRset.
    pub const HAS_DS: u16 = 128;
    /// Has a `*` child (a wildcard directly below).
    pub const HAS_WILDCARD: u16 = 256;
}

/// A name in the zone with its RRsets.
#[derive(Debug, Clone, Copy)]
pub struct Node {
    pub(crate) name_off: u32,
    pub(crate) parent: NodeId,
    pub(crate) rrset_start: u32,
    pub(crate) rrset_count: u16,
    pub(crate) flags: u16,
    pub(crate) name_len: u8,
    pub(crate) labels: u8,
}

impl Node {
    /// The node's flags (see [`flags`]).
    pub fn flags(&self) -> u16 {
        self.flags
    }
    /// True when the flag `f` is set.
    pub fn has(&self, f: u16) -> bool {
        self.flags & f != 0
    }
    /// The parent node (`NONE` for the apex).
    pub fn parent(&self) -> NodeId {
        self.parent
    }
    /// Number of labels of the node's name.
    pub fn labels(&self) -> usize {
        self.labels as usize
    }
}
