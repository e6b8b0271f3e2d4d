//! End-to-end test helpers: finding binaries, corpora, and reference servers.
