//! The sampler of answered names: each worker samples the names it answers from zones whose
//! hottest names the XDP fast path may answer ([`HotSampler`]: no lock, no allocation; a full
//! channel drops the sample, counted) for the answer publisher
//! ([`crate::xdp::hot_names`]) to count.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;

use xdp_guard::maps::QNAME_MAX;

/// One sampled answer: the lower-cased wire qname and the type.
#[derive(Clone, Copy)]
pub struct HotSample {
    /// The query type.
    pub qtype: u16,
    /// Length of the name in `name`.
    pub len: u8,
    /// The lower-cased wire name, zero-padded.
    pub name: [u8; QNAME_MAX],
}

/// A worker's sampler of the names it answers (one answer in `every`), feeding the publisher
/// without a lock or an allocation.
pub struct HotSampler {
    tx: SyncSender<HotSample>,
    every: u32,
    n: u32,
    dropped: Arc<AtomicU64>,
}

impl HotSampler {
    /// A sampler of one answer in `every` into `tx`; lost samples bump `dropped`.
    pub fn new(tx: SyncSender<HotSample>, every: u32, dropped: Arc<AtomicU64>) -> HotSampler {
        HotSampler {
            tx,
            every: every.max(1),
            n: 0,
            dropped,
        }
    }

    /// Another sampler into the same channel (one per worker).
    pub fn clone_for_worker(&self) -> HotSampler {
        HotSampler {
            tx: self.tx.clone(),
            every: self.every,
            n: 0,
            dropped: self.dropped.clone(),
        }
    }

    /// Counts an answer to `qname`/`qtype` from a zone whose hottest names XDP may answer;
    /// samples one in `every`.
    #[inline]
    pub fn answered(&mut self, qname: &[u8], qtype: u16) {
        self.n += 1;
        if self.n < self.every {
            return;
        }
        self.n = 0;
        if qname.len() > QNAME_MAX {
            return;
        }
        let mut s = HotSample {
            qtype,
            len: qname.len() as u8,
            name: [0; QNAME_MAX],
        };
        // Length bytes are below 64: lower-casing leaves them as they are.
        for (d, c) in s.name.iter_mut().zip(qname) {
            *d = c.to_ascii_lowercase();
        }
        if self.tx.try_send(s).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}
