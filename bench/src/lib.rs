//! Benchmark helpers shared by the bench binaries.
