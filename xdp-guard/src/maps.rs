//! The Rust mirror of `bpf/guard.h`: map names, keys, values and counter indexes.
//!
//! Every type here is `#[repr(C)]` and matches its C struct field for field. build.rs compiles
//! a probe of the header and emits `const` assertions on sizes, alignments, offsets and
//! constants (included at the bottom of this file), so a layout drift fails the build.
//! Addresses are in network byte order; expiry is CLOCK_BOOTTIME nanoseconds, one per writer
//! slot ([`BlockValue`]).

use std::net::{Ipv4Addr, Ipv6Addr};

/// Name of the HASH of blocked IPv4 addresses (also its file name under the pin directory).
pub const MAP_BLOCK_V4: &str = "guard_block_v4";
/// Name of the HASH of blocked IPv6 addresses.
pub const MAP_BLOCK_V6: &str = "guard_block_v6";
/// Name of the LPM_TRIE of blocked IPv4 prefixes.
pub const MAP_PREFIX_V4: &str = "guard_pfx_v4";
/// Name of the LPM_TRIE of blocked IPv6 prefixes.
pub const MAP_PREFIX_V6: &str = "guard_pfx_v6";
/// Name of the per-CPU LRU hash of per-source token buckets.
pub const MAP_RATE: &str = "guard_rate";
/// Name of the one-element ARRAY holding [`GuardConfig`].
pub const MAP_CONFIG: &str = "guard_config";
/// Name of the one-element PERCPU_ARRAY holding [`RawCounters`].
pub const MAP_COUNTERS: &str = "guard_counters";
/// Name of the LPM_TRIE of IPv4 prefixes exempt from the rate limit (`[global] allow`).
pub const MAP_ALLOW_V4: &str = "guard_allow_v4";
/// Name of the LPM_TRIE of IPv6 prefixes exempt from the rate limit.
pub const MAP_ALLOW_V6: &str = "guard_allow_v6";
/// Name of the HASH of dnsd's answers for the fast path ([`AnsKey`] → [`Answer`]).
pub const MAP_ANSWERS: &str = "guard_answers";
/// Name of the HASH of service addresses answered in XDP ([`AnsAddrKey`] → [`AnsAddr`]).
pub const MAP_ANS_ADDR: &str = "guard_ans_addr";
/// Name of the per-CPU scratch ARRAY the program builds an answer key in.
pub const MAP_ANS_SCRATCH: &str = "guard_ans_tmp";
/// Name of the per-CPU LRU hash of answer-rate buckets by source prefix.
pub const MAP_ANS_RATE: &str = "guard_ans_rate";
/// Name of the LPM_TRIE of dnsd's service addresses and port ([`LpmV6Key`] → [`SvcValue`]):
/// where DNS-only block slots apply.
pub const MAP_SVC: &str = "guard_svc";
/// Name of the LPM_TRIE of the proxies (`[server] proxy_allow`, IPv4 mapped) whose UDP
/// datagrams carry a PROXY v2 header: blocks and the rate limit apply to the client it names.
pub const MAP_PROXY: &str = "guard_proxy";
/// Name of the LPM_TRIE of dnsd's suspects (IPv4 mapped; value: CLOCK_BOOTTIME ns of the
/// end): their queries are never answered in XDP.
pub const MAP_SUSPECT: &str = "guard_suspect";
/// Name of the LPM_TRIE of what the node's daemons never block (IPv4 mapped; value: a bit
/// per writer slot that listed it): a block found for such a source is passed.
pub const MAP_NEVER: &str = "guard_never";
/// Every map of the program, in a fixed order.
pub const ALL_MAPS: [&str; 17] = [
    MAP_BLOCK_V4,
    MAP_BLOCK_V6,
    MAP_PREFIX_V4,
    MAP_PREFIX_V6,
    MAP_RATE,
    MAP_CONFIG,
    MAP_COUNTERS,
    MAP_ALLOW_V4,
    MAP_ALLOW_V6,
    MAP_ANSWERS,
    MAP_ANS_ADDR,
    MAP_ANS_SCRATCH,
    MAP_ANS_RATE,
    MAP_SVC,
    MAP_PROXY,
    MAP_SUSPECT,
    MAP_NEVER,
];

/// Default capacity of the IPv4 address hash.
pub const DEFAULT_BLOCK_V4_ENTRIES: u32 = 262_144;
/// Default capacity of the IPv6 address hash.
pub const DEFAULT_BLOCK_V6_ENTRIES: u32 = 131_072;
/// Default capacity of the IPv4 prefix trie.
pub const DEFAULT_PREFIX_V4_ENTRIES: u32 = 16_384;
/// Default capacity of the IPv6 prefix trie.
pub const DEFAULT_PREFIX_V6_ENTRIES: u32 = 16_384;
/// Default capacity of the rate-limit LRU (sources tracked per CPU).
pub const DEFAULT_RATE_ENTRIES: u32 = 65_536;
/// Default capacity of each allow-list trie.
pub const DEFAULT_ALLOW_ENTRIES: u32 = 16_384;

/// Default capacity of the answer map (entries; each holds up to [`ANSWER_MAX`] bytes).
pub const DEFAULT_ANSWER_ENTRIES: u32 = 65_536;
/// Default capacity of the answered-address map.
pub const DEFAULT_ANS_ADDR_ENTRIES: u32 = 65_536;
/// Default capacity of the answer-rate buckets (source prefixes tracked per CPU).
pub const DEFAULT_ANS_RATE_ENTRIES: u32 = 65_536;
/// Longest wire qname answered in XDP.
pub const QNAME_MAX: usize = 128;
/// Longest answer (the reply after its question) kept for XDP.
pub const ANSWER_MAX: usize = 1232;
/// Most header bytes moved when a reply grows at the front of its frame.
pub const HEAD_MAX: usize = 256;
/// Bytes of the per-CPU scratch value (`struct guard_ans_scratch`).
pub const ANS_SCRATCH_SIZE: usize = size_of::<AnsKey>() + QNAME_MAX + 48 + 12 + 16 + 44;
/// [`AnsKey::variant`]: a query without EDNS.
pub const V_NO_EDNS: u8 = 0;
/// [`AnsKey::variant`]: EDNS, DO clear.
pub const V_EDNS: u8 = 1;
/// [`AnsKey::variant`]: EDNS with DO.
pub const V_EDNS_DO: u8 = 2;

/// One packet's worth of tokens in a bucket ("nano-packets").
pub const TOKEN_UNIT: u64 = 1_000_000_000;

/// Writer slot of dnsd.
pub const SLOT_DNSD: usize = 0;
/// Writer slot of http-front.
pub const SLOT_HTTP_FRONT: usize = 1;
/// Writer slot of the rules file's global lists (written by the daemon that loads them).
pub const SLOT_RULES: usize = 2;
/// Writer slot of the operator's own blocks (`xdp-guard block`): never lifted by a resync.
pub const SLOT_OPERATOR: usize = 3;
/// Writer slots per block entry.
pub const SLOTS: usize = 4;
/// A slot value: this writer holds no block on the key.
pub const SLOT_EMPTY: u64 = 0;
/// A slot value: this writer's block never ends.
pub const NEVER: u64 = u64::MAX;
/// Names of the writer slots, by index.
pub const SLOT_NAMES: [&str; SLOTS] = ["dnsd", "http-front", "rules", "operator"];
/// [`GuardConfig::flags`] bit: rate limiting is on.
pub const F_RATELIMIT: u32 = 1;
/// IPv6 extension headers walked before the program gives up and passes.
pub const MAX_EXT_HEADERS: u32 = 6;

/// Counter index: IP packet, allowed.
pub const C_PASS: usize = 0;
/// Counter index: not IPv4/IPv6, passed.
pub const C_PASS_NOT_IP: usize = 1;
/// Counter index: truncated, malformed or too deep to parse, passed.
pub const C_PASS_NOT_UNDERSTOOD: usize = 2;
/// Counter index: dropped, source address in a block hash.
pub const C_DROP_BLOCKED_ADDR: usize = 3;
/// Counter index: dropped, source inside a blocked prefix.
pub const C_DROP_BLOCKED_PREFIX: usize = 4;
/// Counter index: dropped, UDP to a DNS port above the source's rate.
pub const C_DROP_RATELIMIT: usize = 5;
/// Number of verdict counters (each packet counts in exactly one of them).
pub const VERDICTS: usize = 6;
/// Counter index (event): a block entry with every slot expired was seen (left for the sweep).
pub const C_BLOCK_EXPIRED: usize = 6;
/// Counter index (event): a rate-limit bucket was created for a new source.
pub const C_RATE_NEW_SOURCE: usize = 7;
/// Counter index (event): UDP to a DNS port from an allowed source, not rate-limited.
pub const C_RATE_EXEMPT: usize = 8;
/// Counter index (event) of the first of [`SLOTS`]: a drop, by the first live writer slot.
pub const C_DROP_SLOT: usize = 9;
/// Counter index: answered in XDP (XDP_TX).
pub const C_ANSWERED: usize = 13;
/// Counter index: passed, no answers registered (or answering suspended) for the address.
pub const C_ANS_PASS_NO_ADDR: usize = 14;
/// Counter index: passed, a query the program does not answer (flags, counts, class, options).
pub const C_ANS_PASS_QUERY: usize = 15;
/// Counter index: passed, no answer for the name, type and EDNS variant.
pub const C_ANS_PASS_MISS: usize = 16;
/// Counter index: passed, the answer does not fit the client's limit.
pub const C_ANS_PASS_SIZE: usize = 17;
/// Counter index: passed, the frame had no room to grow into the answer.
pub const C_ANS_PASS_ROOM: usize = 18;
/// Counter index: over the answer rate (RRL in XDP), dropped.
pub const C_ANS_RRL_DROP: usize = 19;
/// Counter index: over the answer rate, answered TC=1 (slipped).
pub const C_ANS_SLIP: usize = 20;
/// Counter index: a server cookie verified in XDP (the query skips RRL there).
pub const C_ANS_COOKIE_VALID: usize = 21;
/// Counter index: a server cookie that failed verification (answered, rate-limited).
pub const C_ANS_COOKIE_INVALID: usize = 22;
/// Counter index: passed, a query with a cookie that the answer cannot carry byte-for-byte.
pub const C_ANS_PASS_COOKIE: usize = 23;
/// Over the per-source rate, passed: the query carried a valid server cookie (a proven source).
pub const C_RATE_COOKIE: usize = 24;
/// Counter index: passed, a query to an answered address in a frame the fast path does not
/// answer from (group MAC, VLAN tag, IP options or fragment, martian address, bad lengths or
/// header checksum, source port 0, a zero UDP checksum over IPv6).
pub const C_ANS_PASS_FRAME: usize = 25;
/// Counter index: passed, a query to an answered address from one of dnsd's suspects.
pub const C_ANS_PASS_SUSPECT: usize = 26;
/// Counter index: passed, the kernel's route to the source does not lead back out of the
/// interface to a resolved neighbour (or the frame was sent to another MAC).
pub const C_ANS_PASS_ROUTE: usize = 27;
/// Counter index: over the per-source rate without a server cookie, answered TC=1 with the
/// question alone (one in `slip`): the source comes back over TCP.
pub const C_RATE_SLIP: usize = 28;
/// Counter index: a block found for a source one of the node's daemons never blocks: passed.
pub const C_NEVER_BLOCK: usize = 29;
/// Counter index: over the per-source rate without a server cookie, passed: the query's name
/// had room in its share of the source's second bucket.
pub const C_RATE_NAME: usize = 30;
/// Number of counter slots.
pub const COUNTERS: usize = 31;

/// [`Answer::cookie`]: nothing known, queries with a cookie pass to dnsd.
pub const COOKIE_PASS: u16 = 0;
/// [`Answer::cookie`]: cookies are off for the zone, the same answer without one.
pub const COOKIE_IGNORE: u16 = 1;
/// [`Answer::cookie`]: the answer with a COOKIE option appended to its OPT record (the last).
pub const COOKIE_ANSWER: u16 = 2;
/// [`AnsAddr::cookie_keys`]: no secret (cookie queries of [`COOKIE_ANSWER`] entries pass).
pub const KEYS_NONE: u8 = 0;
/// [`AnsAddr::cookie_keys`]: the current secret is set.
pub const KEYS_CURRENT: u8 = 1;
/// [`AnsAddr::cookie_keys`]: the current and the previous secret are set.
pub const KEYS_BOTH: u8 = 2;

/// Key of the IPv4 address hash.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct V4Key {
    /// The address, network byte order in memory.
    pub addr: u32,
}

/// Key of the IPv6 address hash and of the rate-limit map (IPv4 as `::ffff:a.b.c.d`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct V6Key {
    /// The address bytes.
    pub addr: [u8; 16],
}

/// Key of the IPv4 prefix trie.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LpmV4Key {
    /// Prefix length in bits.
    pub prefixlen: u32,
    /// The network address, network byte order in memory.
    pub addr: u32,
}

/// Key of the IPv6 prefix trie.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LpmV6Key {
    /// Prefix length in bits.
    pub prefixlen: u32,
    /// The network address bytes.
    pub addr: [u8; 16],
}

/// Value of every block map: one expiry per writer slot, and each slot's scope.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BlockValue {
    /// Per slot: CLOCK_BOOTTIME ns at which that writer's block ends, [`NEVER`], or
    /// [`SLOT_EMPTY`].
    pub expires_ns: [u64; SLOTS],
    /// Bit `i`: slot `i` stops only UDP to the DNS service (a [`MAP_SVC`] address and port).
    pub dns_only: u32,
    /// In a prefix trie: the entry's own prefix length (the program looks past an entry that
    /// does not stop the packet to the prefix that covers it); zero in the address maps.
    pub prefixlen: u32,
}

/// Value of the service-address trie: dnsd's UDP port there.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SvcValue {
    /// Host order.
    pub port: u16,
    /// [`SVC_SLIP_SET`] and the slip of queries over their source's rate (one in it answered
    /// TC=1; 0 none); without the flag (an older writer), 2.
    pub reserved: u16,
}

/// [`SvcValue::reserved`]: the low byte is the slip.
pub const SVC_SLIP_SET: u16 = 0x8000;

/// Default capacity of the service-address trie.
pub const DEFAULT_SVC_ENTRIES: u32 = 16_384;

/// Capacity of the proxy trie.
pub const DEFAULT_PROXY_ENTRIES: u32 = 1_024;

/// Capacity of the suspects' trie (past it, a suspect's queries may be answered in XDP:
/// counted by the mirror).
pub const DEFAULT_SUSPECT_ENTRIES: u32 = 65_536;

/// Capacity of the never-block trie (every daemon's own never-block set: a node with a /18 of
/// service addresses lists each as its own).
pub const DEFAULT_NEVER_ENTRIES: u32 = 65_536;

/// The suspects' trie value of a `[defence.rrl] exempt` prefix: no RRL in XDP for it
/// (`GUARD_RRL_EXEMPT`; an expiry long past, so never a suspect).
pub const RRL_EXEMPT: u64 = 1;

impl BlockValue {
    /// The stored slot value of an expiry in the API's terms (0 = never).
    pub fn stored(expires_ns: u64) -> u64 {
        if expires_ns == 0 { NEVER } else { expires_ns }
    }

    /// Slot `i` in the API's terms: `None` when empty, `Some(0)` for never, else the expiry.
    pub fn slot(&self, i: usize) -> Option<u64> {
        match self.expires_ns[i] {
            SLOT_EMPTY => None,
            NEVER => Some(0),
            e => Some(e),
        }
    }

    /// The same value with slot `i` set to `expires_ns` (0 = never) or emptied (`None`),
    /// of scope DNS only when `dns_only`.
    pub fn with_slot(mut self, i: usize, expires_ns: Option<u64>, dns_only: bool) -> Self {
        self.expires_ns[i] = expires_ns.map_or(SLOT_EMPTY, Self::stored);
        if dns_only && expires_ns.is_some() {
            self.dns_only |= 1 << i;
        } else {
            self.dns_only &= !(1 << i);
        }
        self
    }

    /// True when slot `i` stops only UDP to the DNS service.
    pub fn is_dns_only(&self, i: usize) -> bool {
        self.dns_only & (1 << i) != 0
    }

    /// True when no writer holds the key.
    pub fn is_empty(&self) -> bool {
        self.expires_ns.iter().all(|&e| e == SLOT_EMPTY)
    }

    /// True when every packet is dropped at `now_ns` (a slot of scope "all" ends later), as
    /// the program decides.
    pub fn is_live(&self, now_ns: u64) -> bool {
        (0..SLOTS).any(|i| self.expires_ns[i] > now_ns && !self.is_dns_only(i))
    }

    /// True when UDP to the DNS service is dropped at `now_ns` (any slot ends later).
    pub fn is_live_for_dns(&self, now_ns: u64) -> bool {
        self.expires_ns.iter().any(|&e| e > now_ns)
    }

    /// The latest end over the slots in the API's terms (0 = never; `None` when empty).
    pub fn expiry(&self) -> Option<u64> {
        let mut out = None;
        for e in self.expires_ns {
            match e {
                SLOT_EMPTY => {}
                NEVER => return Some(0),
                e => out = Some(out.map_or(e, |o: u64| o.max(e))),
            }
        }
        out
    }

    /// The same value with every slot that ended at or before `now_ns` emptied.
    pub fn without_expired(mut self, now_ns: u64) -> Self {
        for i in 0..SLOTS {
            let e = self.expires_ns[i];
            if e != NEVER && e <= now_ns {
                self.expires_ns[i] = SLOT_EMPTY;
                self.dns_only &= !(1 << i);
            }
        }
        self
    }
}

/// Value of the rate-limit map: one token bucket (per CPU).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bucket {
    /// Tokens, [`TOKEN_UNIT`] per packet.
    pub tokens: u64,
    /// Monotonic ns of the last packet; 0 = fresh bucket.
    pub last_ns: u64,
}

/// Value of the config map.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuardConfig {
    /// Tokens added per second, in packets.
    pub rate_pps: u64,
    /// Bucket capacity: burst × [`TOKEN_UNIT`].
    pub cap_units: u64,
    /// Time to refill an empty bucket, in ns.
    pub fill_ns: u64,
    /// `F_*` bits.
    pub flags: u32,
    /// Non-zero while the suspects' trie holds entries (the program looks it up only then);
    /// kept by [`crate::GuardMaps::set_config`], written by the mirror.
    pub suspects: u32,
    /// Bitmap of rate-limited destination ports (bit `p & 7` of byte `p >> 3`).
    pub dns_ports: [u8; 8192],
}

impl Default for GuardConfig {
    fn default() -> Self {
        Self {
            rate_pps: 0,
            cap_units: 0,
            fill_ns: 0,
            flags: 0,
            suspects: 0,
            dns_ports: [0; 8192],
        }
    }
}

impl GuardConfig {
    /// Builds the kernel config for `rate` packets/s per source with `burst`, on `ports`.
    ///
    /// A rate of 0 or no ports turns rate limiting off.
    pub fn new(rate: u64, burst: u64, ports: &[u16]) -> Self {
        let mut c = Self::default();
        for &p in ports {
            c.dns_ports[usize::from(p >> 3)] |= 1 << (p & 7);
        }
        if rate > 0 && !ports.is_empty() {
            c.flags |= F_RATELIMIT;
            c.rate_pps = rate;
            c.cap_units = burst.saturating_mul(TOKEN_UNIT);
            c.fill_ns = c.cap_units.div_ceil(rate);
        }
        c
    }

    /// Whether `port` is rate-limited.
    pub fn is_dns_port(&self, port: u16) -> bool {
        self.dns_ports[usize::from(port >> 3)] & (1 << (port & 7)) != 0
    }
}

/// Value of the counters map (one per CPU).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawCounters {
    /// Indexed by the `C_*` constants.
    pub count: [u64; COUNTERS],
}

impl V4Key {
    /// The key of `ip`.
    pub fn new(ip: Ipv4Addr) -> Self {
        Self {
            addr: u32::from_ne_bytes(ip.octets()),
        }
    }

    /// The address of this key.
    pub fn ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.addr.to_ne_bytes())
    }
}

impl V6Key {
    /// The key of `ip`.
    pub fn new(ip: Ipv6Addr) -> Self {
        Self { addr: ip.octets() }
    }

    /// The address of this key.
    pub fn ip(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.addr)
    }
}

/// Plain old data: any bit pattern is valid and there is no padding, so values can cross the
/// syscall boundary as bytes.
///
/// # Safety
/// Implement only for `#[repr(C)]` types without padding whose every bit pattern is valid.
pub(crate) unsafe trait Plain: Copy + 'static {
    /// The value's bytes.
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: Plain types have no padding (all bytes initialised).
        unsafe { std::slice::from_raw_parts((self as *const Self).cast(), size_of::<Self>()) }
    }

    /// Reads a value from the start of `b`, which must hold at least `size_of::<Self>()` bytes.
    fn read_from(b: &[u8]) -> Self {
        assert!(b.len() >= size_of::<Self>());
        // SAFETY: length checked; any bit pattern is valid; read_unaligned needs no alignment.
        unsafe { std::ptr::read_unaligned(b.as_ptr().cast()) }
    }
}

// SAFETY: each is #[repr(C)] of integers/byte arrays with no padding (sizes asserted below).
unsafe impl Plain for V4Key {}
// SAFETY: as above.
unsafe impl Plain for V6Key {}
// SAFETY: as above.
unsafe impl Plain for LpmV4Key {}
// SAFETY: as above.
unsafe impl Plain for LpmV6Key {}
// SAFETY: as above.
unsafe impl Plain for BlockValue {}
// SAFETY: as above.
unsafe impl Plain for SvcValue {}
// SAFETY: as above.
unsafe impl Plain for Bucket {}
// SAFETY: as above.
unsafe impl Plain for GuardConfig {}
// SAFETY: as above.
unsafe impl Plain for RawCounters {}
// SAFETY: as above.
unsafe impl Plain for AnsAddrKey {}
// SAFETY: as above.
unsafe impl Plain for AnsAddr {}
// SAFETY: as above.
unsafe impl Plain for AnsKey {}
// SAFETY: as above.
unsafe impl Plain for Answer {}
// SAFETY: integer.
unsafe impl Plain for u32 {}

// No padding anywhere: the sum of the fields is the size.
const _: () = assert!(size_of::<LpmV6Key>() == 4 + 16);
const _: () = assert!(size_of::<GuardConfig>() == 8 * 3 + 4 * 2 + 8192);
const _: () = assert!(size_of::<AnsAddrKey>() == 16 + 2 + 2);
const _: () = assert!(size_of::<AnsAddr>() == 64);
const _: () = assert!(size_of::<AnsKey>() == 16 + 2 + 1 + 1 + 2 + 2 + 8);
const _: () = assert!(size_of::<Answer>() == 24 + QNAME_MAX + ANSWER_MAX);

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

macro_rules! field_size {
    ($t:ty, $f:ident) => {
        // SAFETY: every mirrored type is plain data for which all-zero is valid.
        size_of_val(&unsafe { core::mem::zeroed::<$t>() }.$f)
    };
}

/// Key of the answered-address map: a service address (IPv4 as `::ffff:a.b.c.d`) and port.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AnsAddrKey {
    /// The address bytes.
    pub addr: [u8; 16],
    /// The UDP port (host order).
    pub port: u16,
    /// Zero.
    pub pad: u16,
}

/// Value of the answered-address map: the live generation and whether answering is on.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AnsAddr {
    /// The generation of [`AnsKey::gen_`] that is live.
    pub gen_: u8,
    /// 1: answer; 0: pass everything to dnsd (suspended during a reload).
    pub on: u8,
    /// dnsd's EDNS UDP payload (what it advertises and the most it sends).
    pub udp_payload: u16,
    /// Answers per second per source prefix from XDP (per CPU); 0: not limited.
    pub rate: u32,
    /// Source prefix length of the IPv4 buckets.
    pub v4_prefix: u8,
    /// Source prefix length of the IPv6 buckets.
    pub v6_prefix: u8,
    /// Which cookie secrets are set ([`KEYS_NONE`], [`KEYS_CURRENT`], [`KEYS_BOTH`]).
    pub cookie_keys: u8,
    /// 1: replies go back to the frame's sender, no route look-up (a point-to-point link);
    /// 0: where the kernel's route to the source sends them (else the query passes).
    pub reply_to_sender: u8,
    /// Over the rate, one reply in `slip` is TC=1 (0: none).
    pub slip: u32,
    /// CLOCK_MONOTONIC ns after which the program stops answering here unless renewed.
    pub expires_ns: u64,
    /// The RFC 9018 SipHash-2-4 key: the secret's 16 bytes as two little-endian words.
    pub secret: [u64; 2],
    /// The previous secret, still accepted.
    pub previous: [u64; 2],
    /// Unix time minus CLOCK_MONOTONIC, in ns (the cookies' timestamps).
    pub unix_off_ns: u64,
}

/// Key of the answer map: the name as its length and hash ([`AnsKey::for_name`]); the name
/// itself is [`Answer::qname`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AnsKey {
    /// Service address (IPv4 as `::ffff:a.b.c.d`).
    pub addr: [u8; 16],
    /// Service UDP port (host order).
    pub port: u16,
    /// Generation (see [`AnsAddr::gen_`]).
    pub gen_: u8,
    /// [`V_NO_EDNS`], [`V_EDNS`] or [`V_EDNS_DO`].
    pub variant: u8,
    /// Query type.
    pub qtype: u16,
    /// Bytes of the wire qname (with the root label).
    pub qname_len: u16,
    /// [`name_hash`] of the lower-case wire qname.
    pub name_hash: u64,
}

impl AnsKey {
    /// The key of `qname` (lower-case wire form, at most [`QNAME_MAX`] bytes) for `qtype` and
    /// `variant`; address, port and generation zero (set by the writer).
    pub fn for_name(variant: u8, qtype: u16, qname: &[u8]) -> AnsKey {
        AnsKey {
            addr: [0; 16],
            port: 0,
            gen_: 0,
            variant,
            qtype,
            qname_len: qname.len() as u16,
            name_hash: name_hash(qname),
        }
    }
}

/// FNV-1a (64 bits) of a lower-case wire qname: what the program hashes as it reads the query.
pub fn name_hash(qname: &[u8]) -> u64 {
    qname.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// `qname` zero padded to [`QNAME_MAX`] bytes, as [`Answer::qname`] holds it (`None` when
/// longer).
pub fn padded_name(qname: &[u8]) -> Option<[u8; QNAME_MAX]> {
    let mut out = [0u8; QNAME_MAX];
    out.get_mut(..qname.len())?.copy_from_slice(qname);
    Some(out)
}

/// Value of the answer map: the reply after its question, and its header.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Header flags of the reply except RD and CD.
    pub flags: u16,
    /// Answer count.
    pub an: u16,
    /// Authority count.
    pub ns: u16,
    /// Additional count (with OPT).
    pub ar: u16,
    /// Bytes of `data` used.
    pub len: u16,
    /// One's complement sum of `data` at an even offset.
    pub csum: u16,
    /// How a query with a cookie is answered ([`COOKIE_PASS`], [`COOKIE_IGNORE`],
    /// [`COOKIE_ANSWER`]).
    pub cookie: u16,
    /// Zero.
    pub reserved: u16,
    /// The account RRL in XDP charges the reply to (dnsd's RRL class and key, hashed): one
    /// bucket per source prefix and account.
    pub rrl_key: u64,
    /// The lower-case wire qname answered, zero padded ([`padded_name`]).
    pub qname: [u8; QNAME_MAX],
    /// The reply's bytes after the question.
    pub data: [u8; ANSWER_MAX],
}

/// The assertions generated by build.rs from `bpf/guard.h` (a mismatch fails the build).
#[allow(clippy::unnecessary_cast)]
mod layout_check {
    use super::*;

    include!(concat!(env!("OUT_DIR"), "/layout_check.rs"));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generated assertions exist and cover every mirrored struct and constant.
    #[test]
    fn layout_checks_cover_every_type() {
        let generated = include_str!(concat!(env!("OUT_DIR"), "/layout_check.rs"));
        for name in [
            "V4Key",
            "V6Key",
            "LpmV4Key",
            "LpmV6Key",
            "BlockValue",
            "Bucket",
            "SLOTS",
            "NEVER",
            "GuardConfig",
            "RawCounters",
            "COUNTERS",
            "MAP_COUNTERS",
        ] {
            assert!(
                generated.contains(&format!("<{name}>()")) || generated.contains(name),
                "{name} is not checked"
            );
        }
        assert!(generated.matches("offset_of!").count() >= 14);
    }

    #[test]
    fn keys_round_trip() {
        let ip = Ipv4Addr::new(192, 0, 2, 7);
        assert_eq!(V4Key::new(ip).ip(), ip);
        assert_eq!(V4Key::new(ip).as_bytes(), &[192, 0, 2, 7]);
        let ip6: Ipv6Addr = "2001:db8::7".parse().unwrap();
        assert_eq!(V6Key::new(ip6).ip(), ip6);
        let k = LpmV4Key {
            prefixlen: 24,
            addr: V4Key::new(ip).addr,
        };
        assert_eq!(LpmV4Key::read_from(k.as_bytes()), k);
    }

    #[test]
    fn block_values_hold_one_expiry_per_writer() {
        let v = BlockValue::default()
            .with_slot(SLOT_DNSD, Some(100), false)
            .with_slot(SLOT_HTTP_FRONT, Some(0), false);
        assert_eq!(v.expires_ns, [100, NEVER, SLOT_EMPTY, SLOT_EMPTY]);
        assert_eq!(
            (v.slot(SLOT_DNSD), v.slot(SLOT_HTTP_FRONT)),
            (Some(100), Some(0))
        );
        assert_eq!(v.slot(SLOT_RULES), None);
        assert_eq!(v.expiry(), Some(0), "never wins");
        assert!(v.is_live(u64::MAX - 1));
        let v = v
            .with_slot(SLOT_HTTP_FRONT, None, false)
            .with_slot(SLOT_OPERATOR, Some(50), false);
        assert_eq!(v.expiry(), Some(100));
        assert!(v.is_live(99) && !v.is_live(100));
        let v = v.without_expired(60);
        assert_eq!(v.expires_ns, [100, SLOT_EMPTY, SLOT_EMPTY, SLOT_EMPTY]);
        assert!(v.without_expired(100).is_empty());
        assert_eq!(BlockValue::default().expiry(), None);
        // A DNS-only slot drops UDP to the DNS service only; its bit goes with the slot.
        let v = BlockValue::default().with_slot(SLOT_DNSD, Some(100), true);
        assert!(v.is_dns_only(SLOT_DNSD));
        assert!(!v.is_live(50) && v.is_live_for_dns(50));
        let v = v.with_slot(SLOT_OPERATOR, Some(80), false);
        assert!(v.is_live(50) && !v.is_live(90) && v.is_live_for_dns(90));
        assert_eq!(v.without_expired(100).dns_only, 0);
        assert_eq!(v.with_slot(SLOT_DNSD, None, true).dns_only, 0);
    }

    #[test]
    fn config_port_bitmap_and_bucket_math() {
        let c = GuardConfig::new(10, 5, &[53, 5353, 0, 65535]);
        assert!(c.is_dns_port(53) && c.is_dns_port(5353) && c.is_dns_port(0));
        assert!(c.is_dns_port(65535));
        assert!(!c.is_dns_port(54) && !c.is_dns_port(52));
        assert_eq!(c.flags, F_RATELIMIT);
        assert_eq!(c.cap_units, 5 * TOKEN_UNIT);
        assert_eq!(c.fill_ns, 500_000_000);
        assert_eq!(GuardConfig::new(0, 5, &[53]).flags, 0);
        assert_eq!(GuardConfig::new(10, 5, &[]).flags, 0);
    }
}
