/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Map layouts shared by the XDP program (guard.c) and userspace (src/maps.rs).
 *
 * This header is the single definition of every key, value and index that crosses the
 * kernel/userspace boundary. src/maps.rs mirrors it with #[repr(C)] types; build.rs compiles
 * a probe of this header and the Rust side asserts at compile time that sizes and offsets
 * match. The _Static_asserts below pin the sizes for the BPF target as well.
 *
 * Addresses are stored in network byte order. Expiry times are CLOCK_BOOTTIME nanoseconds
 * (bpf_ktime_get_boot_ns).
 *
 * A block entry holds one expiry per writer slot (dnsd, http-front, rules, operator):
 * the program drops while any slot is live, and each writer sets and clears only its own
 * slot (userspace read-modify-writes under an flock of the pin directory), so two writers of
 * one key never undo each other and a stopped writer's blocks stay until they expire.
 */
#ifndef PALISADE_GUARD_H
#define PALISADE_GUARD_H

#include <linux/types.h>

/* Map names: also the file names under the pin directory (at most 15 characters). */
#define GUARD_MAP_BLOCK_V4 "guard_block_v4"
#define GUARD_MAP_BLOCK_V6 "guard_block_v6"
#define GUARD_MAP_PREFIX_V4 "guard_pfx_v4"
#define GUARD_MAP_PREFIX_V6 "guard_pfx_v6"
#define GUARD_MAP_RATE "guard_rate"
#define GUARD_MAP_CONFIG "guard_config"
#define GUARD_MAP_COUNTERS "guard_counters"
#define GUARD_MAP_ALLOW_V4 "guard_allow_v4"
#define GUARD_MAP_ALLOW_V6 "guard_allow_v6"

/* Default map sizes; userspace overrides them at load time from its config. */
#define GUARD_DEFAULT_BLOCK_V4_ENTRIES 262144
#define GUARD_DEFAULT_BLOCK_V6_ENTRIES 131072
#define GUARD_DEFAULT_PREFIX_V4_ENTRIES 16384
#define GUARD_DEFAULT_PREFIX_V6_ENTRIES 16384
#define GUARD_DEFAULT_RATE_ENTRIES 65536
#define GUARD_DEFAULT_ALLOW_ENTRIES 16384

/* One packet's worth of tokens in a rate-limit bucket ("nano-packets"). */
#define GUARD_TOKEN_UNIT 1000000000ULL

/* guard_config.flags */
#define GUARD_F_RATELIMIT 1U

/* How many IPv6 extension headers the program walks before giving up (passes). */
#define GUARD_MAX_EXT_HEADERS 6

/* Indexes into guard_counters.count. Verdicts 0..GUARD_VERDICTS-1: each packet counts once. */
#define GUARD_C_PASS 0                /* IP packet, allowed */
#define GUARD_C_PASS_NOT_IP 1         /* not IPv4/IPv6 (ARP, LLDP, ...) */
#define GUARD_C_PASS_NOT_UNDERSTOOD 2 /* truncated/malformed/too deep: passed unexamined */
#define GUARD_C_DROP_BLOCKED_ADDR 3   /* source in guard_block_v4/v6 */
#define GUARD_C_DROP_BLOCKED_PREFIX 4 /* source in guard_pfx_v4/v6 */
#define GUARD_C_DROP_RATELIMIT 5      /* UDP to a DNS port above the per-source rate */
#define GUARD_VERDICTS 6
/* Events, not verdicts. */
#define GUARD_C_BLOCK_EXPIRED 6       /* a block entry with every slot expired was seen */
#define GUARD_C_RATE_NEW_SOURCE 7     /* a rate-limit bucket was created */
#define GUARD_C_RATE_EXEMPT 8         /* UDP to a DNS port from an allowed source: not limited */
#define GUARD_C_DROP_SLOT 9           /* + slot: a drop, by the first live writer slot */
#define GUARD_COUNTERS 13

/* guard_block_v4 key: one IPv4 address. */
struct guard_v4_key {
	__be32 addr;
};

/* guard_block_v6 and guard_rate key: one IPv6 address (IPv4 as ::ffff:a.b.c.d in guard_rate). */
struct guard_v6_key {
	__u8 addr[16];
};

/* guard_pfx_v4 key (LPM_TRIE): prefix length in bits, then the address. */
struct guard_lpm_v4_key {
	__u32 prefixlen;
	__be32 addr;
};

/* guard_pfx_v6 key (LPM_TRIE). */
struct guard_lpm_v6_key {
	__u32 prefixlen;
	__u8 addr[16];
};

/* Writer slots of a block entry. */
#define GUARD_SLOT_DNSD 0
#define GUARD_SLOT_HTTP_FRONT 1
#define GUARD_SLOT_RULES 2    /* the rules file's global lists */
#define GUARD_SLOT_OPERATOR 3 /* the operator's own blocks (xdp-guard block) */
#define GUARD_SLOTS 4

/* A slot that is empty (this writer holds no block on the key). */
#define GUARD_SLOT_EMPTY 0ULL
/* A slot whose block never ends. */
#define GUARD_NEVER 0xffffffffffffffffULL

/* Value of every block map: one expiry per writer slot (CLOCK_BOOTTIME ns, GUARD_NEVER, or
 * GUARD_SLOT_EMPTY). The entry is live while any slot is later than now; expired slots are
 * cleared, and empty entries deleted, by userspace sweeps (never by the program, which
 * cannot read-modify-write under the writers' lock). */
struct guard_block {
	__u64 expires_ns[GUARD_SLOTS];
};

/* guard_rate value (per-CPU LRU hash): a token bucket. */
struct guard_bucket {
	__u64 tokens;  /* in GUARD_TOKEN_UNIT per packet */
	__u64 last_ns; /* bpf_ktime_get_ns of the last packet; 0 = fresh (full bucket) */
};

/* guard_config value (ARRAY, one element). */
struct guard_config {
	__u64 rate_pps;     /* tokens added per second, in packets */
	__u64 cap_units;    /* burst * GUARD_TOKEN_UNIT */
	__u64 fill_ns;      /* time to refill an empty bucket: cap_units / rate_pps, in ns */
	__u32 flags;        /* GUARD_F_* */
	__u32 reserved;
	__u8 dns_ports[8192]; /* bitmap by destination port (host order): bit set = rate-limited */
};

/* guard_counters value (PERCPU_ARRAY, one element). */
struct guard_counters {
	__u64 count[GUARD_COUNTERS];
};

_Static_assert(sizeof(struct guard_v4_key) == 4, "guard_v4_key");
_Static_assert(sizeof(struct guard_v6_key) == 16, "guard_v6_key");
_Static_assert(sizeof(struct guard_lpm_v4_key) == 8, "guard_lpm_v4_key");
_Static_assert(sizeof(struct guard_lpm_v6_key) == 20, "guard_lpm_v6_key");
_Static_assert(sizeof(struct guard_block) == 8 * GUARD_SLOTS, "guard_block");
_Static_assert(sizeof(struct guard_bucket) == 16, "guard_bucket");
_Static_assert(sizeof(struct guard_config) == 32 + 8192, "guard_config");
_Static_assert(sizeof(struct guard_counters) == 8 * GUARD_COUNTERS, "guard_counters");

#endif /* PALISADE_GUARD_H */
