//! The socket fleet: one UDP socket per address, a wildcard TCP listener, batched I/O.
