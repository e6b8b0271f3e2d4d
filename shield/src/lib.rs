//! Shared policy core: block map, rule engine, rate limiters, event aggregator.
