//! End-to-end test helpers: finding binaries, corpora, reference servers and network namespaces.

pub mod netns;
