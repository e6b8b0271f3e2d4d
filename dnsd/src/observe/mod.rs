//! What dnsd shows of itself: per-worker [`counters`] and the metric [`sources`] over them
//! (shield's registry renders `ctl stats` and `/metrics`), the [`dnstap`] query log, the
//! [`event_sinks`] beyond JSON lines, and the [`hot_sampler`] of answered names the XDP
//! answer publisher reads. Nothing here reaches into the rest of dnsd.

pub mod counters;
pub mod dnstap;
pub mod event_sinks;
pub mod hot_sampler;
pub mod sources;
