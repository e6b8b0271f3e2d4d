//! XDP program and loader that drops blocked sources and rate-limits UDP/53.
