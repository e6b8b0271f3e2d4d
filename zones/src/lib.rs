//! Zones: RFC 1035 master files read into an immutable, query-ready structure.
//!
//! Reading is split by stage, as the data flows: [`scan`] cuts text into entries and
//! tokens, [`reader`] applies the directives (`$ORIGIN`, `$TTL`, `$INCLUDE`, `$GENERATE`)
//! and owner inheritance and yields records, [`rdata`] turns each type's text into wire
//! format, [`build`] compiles records into a [`Zone`] and [`validate`] checks what an
//! authoritative server must refuse; [`present`] prints a zone back as text.
//!
//! Out of scope: sockets, threads, policy. The daemon decides what to do with a zone.

pub mod arith;
pub mod build;
pub mod dnssec;
pub mod error;
pub mod load;
pub mod name;
pub mod node;
pub mod nsec3;
pub mod present;
pub mod rdata;
pub mod reader;
pub mod rrtype;
pub mod scan;
pub mod sign;
pub mod text;
pub mod validate;
pub mod zone;

pub use error::{Diagnostic, Location, ZoneError};
pub use load::{Loaded, load_bytes, load_file, load_opened};
pub use name::Name;
pub use reader::ReadOptions;
pub use zone::{Lookup, NodeId, RRset, Zone, serial_gt};
