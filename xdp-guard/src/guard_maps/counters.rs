//! The config and counter family: the rate limit's config and the program's packet
//! counters (per CPU, summed).

use super::*;
use crate::Error;
use crate::maps::{
    ALL_MAPS, C_BLOCK_EXPIRED, C_DROP_BLOCKED_ADDR, C_DROP_BLOCKED_PREFIX, C_DROP_RATELIMIT,
    C_DROP_SLOT, C_PASS, C_PASS_NOT_IP, C_PASS_NOT_UNDERSTOOD, C_RATE_EXEMPT, C_RATE_NEW_SOURCE,
    COUNTERS, GuardConfig, Plain, RawCounters,
};
use crate::sys;

/// Packet counters summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// IP packets allowed.
    pub pass: u64,
    /// Non-IP frames passed.
    pub pass_not_ip: u64,
    /// Truncated, malformed or too-deep packets passed unexamined.
    pub pass_not_understood: u64,
    /// Dropped: source address blocked.
    pub drop_blocked_addr: u64,
    /// Dropped: source inside a blocked prefix.
    pub drop_blocked_prefix: u64,
    /// Dropped: UDP to a DNS port above the source's rate.
    pub drop_ratelimit: u64,
    /// Block entries found with every slot expired (passed; the sweep removes them).
    pub block_expired: u64,
    /// Rate-limit buckets created.
    pub rate_new_source: u64,
    /// UDP to a DNS port from an allowed source (`[global] allow`): not rate-limited.
    pub rate_exempt: u64,
    /// Over the per-source rate, passed: a valid server cookie proved the source (forged
    /// packets that spent its bucket do not silence it).
    pub rate_cookie: u64,
    /// Drops of blocked sources by the first live writer slot (dnsd, http-front, rules,
    /// operator).
    pub drop_by_slot: [u64; crate::maps::SLOTS],
    /// Queries answered in XDP (XDP_TX).
    pub answered: u64,
    /// Passed to dnsd by the fast path: no answers for the address, a query it does not
    /// answer, no answer for the name, an answer too big for the client, no room in the
    /// frame to grow into the answer.
    pub ans_pass: [u64; 5],
    /// Over the answer rate (RRL in XDP): dropped, and slipped (answered TC=1).
    pub ans_rrl: [u64; 2],
    /// Server cookies verified in XDP: valid, invalid; and queries with a cookie passed
    /// because their answer cannot carry one byte-for-byte.
    pub ans_cookie: [u64; 3],
    /// Passed to dnsd untried: a frame the fast path does not answer from (one the kernel
    /// may not take as sent), and a query from one of dnsd's suspects.
    pub ans_pass_untried: [u64; 2],
    /// Passed to dnsd: the kernel's route to the source does not lead back out of the
    /// interface to a resolved neighbour, or the frame was sent to another MAC.
    pub ans_pass_route: u64,
    /// Over the per-source rate without a server cookie: answered TC=1 (one in `slip`).
    pub rate_slip: u64,
    /// Blocks found for a source one of the node's daemons never blocks: passed.
    pub never_block: u64,
    /// Over the per-source rate without a server cookie, passed: the query's name had room
    /// in its share of the source's second bucket (a flood of other names did not spend it).
    pub rate_name: u64,
}

impl Counters {
    /// Every counter with its metric-friendly name.
    pub fn named(&self) -> [(&'static str, u64); COUNTERS] {
        [
            ("pass", self.pass),
            ("pass_not_ip", self.pass_not_ip),
            ("pass_not_understood", self.pass_not_understood),
            ("drop_blocked_addr", self.drop_blocked_addr),
            ("drop_blocked_prefix", self.drop_blocked_prefix),
            ("drop_ratelimit", self.drop_ratelimit),
            ("block_expired", self.block_expired),
            ("rate_new_source", self.rate_new_source),
            ("rate_exempt", self.rate_exempt),
            ("drop_by_dnsd", self.drop_by_slot[0]),
            ("drop_by_http_front", self.drop_by_slot[1]),
            ("drop_by_rules", self.drop_by_slot[2]),
            ("drop_by_operator", self.drop_by_slot[3]),
            ("answered", self.answered),
            ("answer_pass_no_address", self.ans_pass[0]),
            ("answer_pass_query", self.ans_pass[1]),
            ("answer_pass_miss", self.ans_pass[2]),
            ("answer_pass_size", self.ans_pass[3]),
            ("answer_pass_room", self.ans_pass[4]),
            ("answer_rrl_drop", self.ans_rrl[0]),
            ("answer_rrl_slip", self.ans_rrl[1]),
            ("answer_cookie_valid", self.ans_cookie[0]),
            ("answer_cookie_invalid", self.ans_cookie[1]),
            ("answer_pass_cookie", self.ans_cookie[2]),
            ("rate_cookie", self.rate_cookie),
            ("answer_pass_frame", self.ans_pass_untried[0]),
            ("answer_pass_suspect", self.ans_pass_untried[1]),
            ("answer_pass_route", self.ans_pass_route),
            ("rate_slip", self.rate_slip),
            ("never_block", self.never_block),
            ("rate_name", self.rate_name),
        ]
    }

    /// Packets seen (the sum of the verdicts).
    pub fn packets(&self) -> u64 {
        self.pass
            + self.pass_not_ip
            + self.pass_not_understood
            + self.dropped()
            + self.answered
            + self.rate_slip
    }

    /// Packets dropped.
    pub fn dropped(&self) -> u64 {
        self.drop_blocked_addr + self.drop_blocked_prefix + self.drop_ratelimit
    }

    fn from_raw(c: &[u64; COUNTERS]) -> Self {
        Self {
            pass: c[C_PASS],
            pass_not_ip: c[C_PASS_NOT_IP],
            pass_not_understood: c[C_PASS_NOT_UNDERSTOOD],
            drop_blocked_addr: c[C_DROP_BLOCKED_ADDR],
            drop_blocked_prefix: c[C_DROP_BLOCKED_PREFIX],
            drop_ratelimit: c[C_DROP_RATELIMIT],
            block_expired: c[C_BLOCK_EXPIRED],
            rate_new_source: c[C_RATE_NEW_SOURCE],
            rate_exempt: c[C_RATE_EXEMPT],
            rate_cookie: c[crate::maps::C_RATE_COOKIE],
            drop_by_slot: std::array::from_fn(|i| c[C_DROP_SLOT + i]),
            answered: c[crate::maps::C_ANSWERED],
            ans_pass: std::array::from_fn(|i| c[crate::maps::C_ANS_PASS_NO_ADDR + i]),
            ans_rrl: [c[crate::maps::C_ANS_RRL_DROP], c[crate::maps::C_ANS_SLIP]],
            ans_cookie: [
                c[crate::maps::C_ANS_COOKIE_VALID],
                c[crate::maps::C_ANS_COOKIE_INVALID],
                c[crate::maps::C_ANS_PASS_COOKIE],
            ],
            ans_pass_untried: [
                c[crate::maps::C_ANS_PASS_FRAME],
                c[crate::maps::C_ANS_PASS_SUSPECT],
            ],
            ans_pass_route: c[crate::maps::C_ANS_PASS_ROUTE],
            rate_slip: c[crate::maps::C_RATE_SLIP],
            never_block: c[crate::maps::C_NEVER_BLOCK],
            rate_name: c[crate::maps::C_RATE_NAME],
        }
    }
}

impl GuardMaps {
    /// Writes the rate-limit configuration the program reads for every UDP packet.
    pub fn set_config(&self, cfg: &GuardConfig) -> Result<(), Error> {
        // Whether the suspects' trie holds entries is the mirror's to say: kept.
        let mut cfg = *cfg;
        cfg.suspects = self.config().map_or(0, |c| c.suspects);
        sys::update(self.fd(5), 0u32.as_bytes(), cfg.as_bytes(), sys::BPF_ANY)
            .map_err(|source| syscall_err("update", ALL_MAPS[5], source))
    }

    /// Says whether the suspects' trie holds entries (the program looks it up only then).
    pub(crate) fn set_suspects_present(&self, present: bool) -> Result<(), Error> {
        let mut cfg = self.config()?;
        if (cfg.suspects != 0) == present {
            return Ok(());
        }
        cfg.suspects = u32::from(present);
        sys::update(self.fd(5), 0u32.as_bytes(), cfg.as_bytes(), sys::BPF_ANY)
            .map_err(|source| syscall_err("update", ALL_MAPS[5], source))
    }

    /// Reads the rate-limit configuration.
    pub fn config(&self) -> Result<GuardConfig, Error> {
        let mut buf = vec![0u8; size_of::<GuardConfig>()];
        sys::lookup(self.fd(5), 0u32.as_bytes(), &mut buf)
            .map_err(|source| syscall_err("lookup", ALL_MAPS[5], source))?;
        Ok(GuardConfig::read_from(&buf))
    }

    /// The packet counters, summed over CPUs.
    pub fn counters(&self) -> Result<Counters, Error> {
        let stride = size_of::<RawCounters>().next_multiple_of(8);
        let mut buf = vec![0u8; stride * self.inner.ncpus];
        sys::lookup(self.fd(6), 0u32.as_bytes(), &mut buf)
            .map_err(|source| syscall_err("lookup", ALL_MAPS[6], source))?;
        let mut sum = [0u64; COUNTERS];
        for cpu in buf.chunks_exact(stride) {
            let c = RawCounters::read_from(cpu);
            for (s, v) in sum.iter_mut().zip(c.count) {
                *s = s.wrapping_add(v);
            }
        }
        Ok(Counters::from_raw(&sum))
    }

    /// Sets every counter back to zero.
    pub fn reset_counters(&self) -> Result<(), Error> {
        let stride = size_of::<RawCounters>().next_multiple_of(8);
        let buf = vec![0u8; stride * self.inner.ncpus];
        sys::update(self.fd(6), 0u32.as_bytes(), &buf, sys::BPF_ANY)
            .map_err(|source| syscall_err("update", ALL_MAPS[6], source))
    }
}
