//! Benchmark helpers shared by the bench binaries and scripts (see `bench/run`).
