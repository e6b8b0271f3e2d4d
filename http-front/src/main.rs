//! http-front: the Palisade WAF reverse proxy.
fn main() {}
