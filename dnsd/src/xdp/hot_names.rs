//! Hot names for the XDP answer fast path: workers sample the names they answer
//! ([`crate::observe::hot_sampler`]) and the publisher counts them ([`HotCounts`]) and picks
//! the hottest every interval, older counts halving.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::config::XdpHot;
use crate::observe::hot_sampler::HotSample;

/// A hot (lower-cased wire qname, qtype) pair.
pub type HotKey = (Box<[u8]>, u16);

/// The most distinct names the hot count table holds between picks.
const HOT_TABLE_MAX: usize = 65_536;

/// The publisher's count of sampled names, and its pick of the hottest.
pub struct HotCounts {
    cfg: XdpHot,
    counts: HashMap<HotKey, u32>,
    last_pick: Instant,
}

impl HotCounts {
    /// An empty count for `cfg`.
    pub fn new(cfg: XdpHot) -> HotCounts {
        HotCounts {
            cfg,
            counts: HashMap::new(),
            last_pick: Instant::now(),
        }
    }

    /// Counts the samples waiting in `rx`; names the table has no room for bump `overflow`.
    pub fn drain(&mut self, rx: &Receiver<HotSample>, overflow: &AtomicU64) {
        while let Ok(s) = rx.try_recv() {
            let key = (Box::from(&s.name[..s.len as usize]), s.qtype);
            if let Some(c) = self.counts.get_mut(&key) {
                *c += 1;
            } else if self.counts.len() < HOT_TABLE_MAX {
                self.counts.insert(key, 1);
            } else {
                overflow.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Every interval: the hottest pairs (at most `names`, each sampled at least
    /// `min_samples` times, earlier intervals counting half as much each); then the counts
    /// decay.
    pub fn pick(&mut self) -> Option<Vec<HotKey>> {
        if self.last_pick.elapsed() < Duration::from_millis(self.cfg.interval_ms) {
            return None;
        }
        self.last_pick = Instant::now();
        let mut hot: Vec<(&HotKey, &u32)> = self
            .counts
            .iter()
            .filter(|(_, c)| **c >= self.cfg.min_samples.max(1))
            .collect();
        hot.sort_unstable_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
        hot.truncate(self.cfg.names as usize);
        let mut picked: Vec<HotKey> = hot.into_iter().map(|(k, _)| k.clone()).collect();
        picked.sort_unstable();
        self.counts.retain(|_, c| {
            *c /= 2;
            *c > 0
        });
        Some(picked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::hot_sampler::HotSampler;
    use std::sync::Arc;

    #[test]
    fn the_hottest_sampled_names_are_picked_and_counts_decay() {
        let overflow = AtomicU64::new(0);
        let cfg = XdpHot {
            names: 2,
            sample: 1,
            interval_ms: 0,
            min_samples: 3,
        };
        let mut counts = HotCounts::new(cfg);
        let (tx, rx) = std::sync::mpsc::sync_channel(64);
        let mut sampler = HotSampler::new(tx, 1, Arc::new(AtomicU64::new(0)));
        let www = b"\x03WWW\x07example\x03com\x00";
        let mail = b"\x04mail\x07example\x03com\x00";
        let ftp = b"\x03ftp\x07example\x03com\x00";
        for _ in 0..10 {
            sampler.answered(www, 1);
        }
        for _ in 0..5 {
            sampler.answered(mail, 28);
        }
        for _ in 0..4 {
            sampler.answered(ftp, 1);
        }
        sampler.answered(b"\x04rare\x07example\x03com\x00", 1);
        counts.drain(&rx, &overflow);
        // The two most sampled (names lower-cased), sorted; the rare one never.
        let picked = counts.pick().unwrap();
        assert_eq!(
            picked,
            vec![
                (Box::from(&b"\x03www\x07example\x03com\x00"[..]), 1),
                (Box::from(&mail[..]), 28)
            ]
        );
        // Counts halve at each pick: without new samples the names cool off.
        assert_eq!(counts.pick().unwrap().len(), 1, "www: 5; mail: 2");
        assert!(counts.pick().unwrap().is_empty());
        // The channel is bounded: samples beyond it are dropped and counted.
        let (tx, _rx) = std::sync::mpsc::sync_channel(2);
        let lost = Arc::new(AtomicU64::new(0));
        let mut full = HotSampler::new(tx, 2, lost.clone());
        for _ in 0..10 {
            full.answered(www, 1);
        }
        assert_eq!(lost.load(Ordering::Relaxed), 3, "5 sampled, 2 fit");
    }
}
