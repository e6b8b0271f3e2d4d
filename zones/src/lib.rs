//! RFC 1035 master files and the compiled, query-ready zone.
