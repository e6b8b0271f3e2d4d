//! dnsd: the Palisade authoritative DNS daemon.
fn main() {}
