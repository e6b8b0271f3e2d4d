// SPDX-License-Identifier: Apache-2.0
/*
 * Palisade XDP guard: drops packets from blocked sources (exact addresses in a hash, prefixes
 * in an LPM trie) and rate-limits UDP to the DNS ports per source with a per-CPU token bucket.
 *
 * Whatever the program does not understand (non-IP, truncated or malformed headers, too many
 * IPv6 extension headers, a second VLAN tag) passes to the kernel stack and is counted as such.
 * The block check runs as soon as the source address is known, before any L4 parsing, so a
 * blocked source costs one hash lookup.
 *
 * A query the answer fast path answers is limited by its RRL (per source prefix and answer,
 * as dnsd's and Knot's RRL) and not charged to the source's bucket, which counts what goes on
 * to dnsd: a flood forged in a resolver's name for one name leaves its other answers alone.
 *
 * Rate-limit buckets are per CPU (no atomics, no shared cache lines): a source whose packets
 * the NIC spreads over N CPUs (RSS hashes the source port too) may get up to N x rate, and
 * with the names' second bucket (guard_rate_name) up to 2N x rate.
 *
 * UDP to a DNS service whose dnsd publishes answers goes on to the answer fast path
 * (answer.h): what it does not answer passes to dnsd.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "guard.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GUARD_DEFAULT_BLOCK_V4_ENTRIES);
	__type(key, struct guard_v4_key);
	__type(value, struct guard_block);
} guard_block_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GUARD_DEFAULT_BLOCK_V6_ENTRIES);
	__type(key, struct guard_v6_key);
	__type(value, struct guard_block);
} guard_block_v6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, GUARD_DEFAULT_PREFIX_V4_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct guard_lpm_v4_key);
	__type(value, struct guard_block);
} guard_pfx_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, GUARD_DEFAULT_PREFIX_V6_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct guard_lpm_v6_key);
	__type(value, struct guard_block);
} guard_pfx_v6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, GUARD_DEFAULT_RATE_ENTRIES);
	__type(key, struct guard_v6_key);
	__type(value, struct guard_bucket);
} guard_rate SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct guard_config);
} guard_config SEC(".maps");

/* The rules file's [global] allow list: exempt from the rate limit, never from a block. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, GUARD_DEFAULT_ALLOW_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct guard_lpm_v4_key);
	__type(value, __u32);
} guard_allow_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, GUARD_DEFAULT_ALLOW_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct guard_lpm_v6_key);
	__type(value, __u32);
} guard_allow_v6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct guard_counters);
} guard_counters SEC(".maps");

/* Service addresses whose dnsd answers in XDP, with the live generation (answer.h; here for
 * l4, which asks whether their answers are under RRL). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GUARD_DEFAULT_ANS_ADDR_ENTRIES);
	__type(key, struct guard_ans_addr_key);
	__type(value, struct guard_ans_addr);
} guard_ans_addr SEC(".maps");

/* dnsd's service addresses (IPv4 mapped) and port: where DNS-only block slots apply. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, GUARD_DEFAULT_SVC_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct guard_lpm_v6_key);
	__type(value, struct guard_svc);
} guard_svc SEC(".maps");

/* dnsd's [server] proxy_allow (IPv4 mapped): senders whose UDP datagrams start with a PROXY
 * v2 header. Their datagrams are judged by the client the header names. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, GUARD_DEFAULT_PROXY_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct guard_lpm_v6_key);
	__type(value, __u32);
} guard_proxy SEC(".maps");

/* dnsd's suspects (IPv4 mapped; value: CLOCK_BOOTTIME ns of the end): sources dnsd answers
 * TC=1 with the question alone, under a budget. Their queries are never answered here (a
 * full answer to a forged source is what the suspect state exists to deny); they pass to
 * dnsd. Empty, the lookup costs a root check. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, GUARD_DEFAULT_SUSPECT_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct guard_lpm_v6_key);
	__type(value, __u64);
} guard_suspect SEC(".maps");

/* What the node's daemons never block (IPv4 mapped; value: a bit per writer slot that listed
 * it): each daemon's own never-block set — its Redis and ClickHouse servers, transfer peers,
 * upstreams, own addresses. A block entry is the node's: one daemon's block of another's
 * primary or origin would cut that daemon off. Looked up only when a block was found. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, GUARD_DEFAULT_NEVER_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct guard_lpm_v6_key);
	__type(value, __u32);
} guard_never SEC(".maps");

/* 802.1Q / 802.1ad tag (not in the uapi headers). */
struct vlan_tag {
	__be16 tci;
	__be16 proto;
};

/* IPv6 fragment header (not in the uapi headers). */
struct ipv6_frag {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off; /* offset in 8-byte units << 3 | M flag */
	__be32 id;
};

/* classify's verdict for UDP to a DNS port that passed the checks: try the answer fast path. */
#define GUARD_CANDIDATE 100
/* try_answer's verdict for a reply over the answer rate that is not slipped: dropped. */
#define GUARD_RRL_DROP 101
/* classify's verdict for UDP of a listed proxy that starts as a PROXY header: judged by
 * guard_proxied. */
#define GUARD_PROXIED 102
/* classify's verdicts for UDP that passed the checks but is not tried on the fast path: a frame
 * the kernel may not take as sent (UNANSWERABLE), or a source of dnsd's suspects (SUSPECT).
 * Passed, and counted when its address and port are answered here. */
#define GUARD_UNANSWERABLE 103
#define GUARD_SUSPECT 104


/* What a block lookup found. */
#define GUARD_LIVE_NONE 0
#define GUARD_LIVE_ALL 1 /* a slot that stops every packet: drop now */
#define GUARD_LIVE_DNS 2 /* only slots that stop UDP to the DNS service: decided at L4 */

/* A source that only DNS-only slots block: the verdict and slot to drop with, if the packet
 * turns out to be UDP to a DNS service address. */
struct guard_dns_block {
	int verdict; /* GUARD_C_DROP_BLOCKED_ADDR / _PREFIX, or 0 */
	int slot;
	int all_slot; /* the writer slot of a block of every packet found (counted once dropped) */
	int all_mask; /* every writer slot of that entry live for every packet */
	int never; /* a block passed for a never-block source: its queries go to the daemons */
};

/* Looks at an entry: a live slot of scope "all" drops (counted by its writer slot); failing
 * that, a live DNS-only slot is noted in `dns` (when none is yet); an entry whose slots have
 * all passed is counted and left for the userspace sweep. */
static __always_inline int found_live(const struct guard_block *b, struct guard_counters *cnt,
				      struct guard_dns_block *dns, int verdict)
{
	if (!b)
		return GUARD_LIVE_NONE;
	__u64 now = bpf_ktime_get_boot_ns();
	int dns_slot = -1;
	int all_slot = -1;
	int all_mask = 0;
#pragma unroll
	for (int i = 0; i < GUARD_SLOTS; i++) {
		if (b->expires_ns[i] > now) {
			if (!(b->dns_only & (1U << i))) {
				if (all_slot < 0)
					all_slot = i;
				all_mask |= 1 << i;
			} else if (dns_slot < 0) {
				dns_slot = i;
			}
		}
	}
	if (all_slot >= 0) {
		dns->all_slot = all_slot;
		dns->all_mask = all_mask;
		return GUARD_LIVE_ALL;
	}
	if (dns_slot >= 0) {
		if (!dns->verdict) {
			dns->verdict = verdict;
			dns->slot = dns_slot;
		}
		return GUARD_LIVE_DNS;
	}
	cnt->count[GUARD_C_BLOCK_EXPIRED]++;
	return GUARD_LIVE_NONE;
}

/* True when a daemon of the node never blocks `addr` (IPv4 mapped). */
static __always_inline int never_blocked(const __u8 *addr)
{
	struct guard_lpm_v6_key k = { .prefixlen = 128 };
	__builtin_memcpy(k.addr, addr, 16);
	return bpf_map_lookup_elem(&guard_never, &k) != 0;
}

static __always_inline int blocked_v4(__be32 saddr, struct guard_counters *cnt,
				      struct guard_dns_block *dns)
{
	struct guard_v4_key k = { .addr = saddr };
	if (found_live(bpf_map_lookup_elem(&guard_block_v4, &k), cnt, dns,
		       GUARD_C_DROP_BLOCKED_ADDR) == GUARD_LIVE_ALL)
		return GUARD_C_DROP_BLOCKED_ADDR;
	struct guard_lpm_v4_key lk = { .prefixlen = 32, .addr = saddr };
#pragma unroll
	for (int i = 0; i < GUARD_NEST_MAX; i++) {
		const struct guard_block *b = bpf_map_lookup_elem(&guard_pfx_v4, &lk);
		if (!b)
			break;
		if (found_live(b, cnt, dns, GUARD_C_DROP_BLOCKED_PREFIX) == GUARD_LIVE_ALL)
			return GUARD_C_DROP_BLOCKED_PREFIX;
		/* Not stopped here: the covering prefix, if any, still may. */
		__u32 len = b->prefixlen;
		if (len == 0 || len > 32)
			break;
		lk.prefixlen = len - 1;
	}
	return GUARD_C_PASS;
}

static __always_inline int blocked_v6(const struct in6_addr *saddr, struct guard_counters *cnt,
				      struct guard_dns_block *dns)
{
	struct guard_v6_key k;
	__builtin_memcpy(k.addr, saddr, 16);
	if (found_live(bpf_map_lookup_elem(&guard_block_v6, &k), cnt, dns,
		       GUARD_C_DROP_BLOCKED_ADDR) == GUARD_LIVE_ALL)
		return GUARD_C_DROP_BLOCKED_ADDR;
	struct guard_lpm_v6_key lk = { .prefixlen = 128 };
	__builtin_memcpy(lk.addr, saddr, 16);
#pragma unroll
	for (int i = 0; i < GUARD_NEST_MAX; i++) {
		const struct guard_block *b = bpf_map_lookup_elem(&guard_pfx_v6, &lk);
		if (!b)
			break;
		if (found_live(b, cnt, dns, GUARD_C_DROP_BLOCKED_PREFIX) == GUARD_LIVE_ALL)
			return GUARD_C_DROP_BLOCKED_PREFIX;
		__u32 len = b->prefixlen;
		if (len == 0 || len > 128)
			break;
		lk.prefixlen = len - 1;
	}
	return GUARD_C_PASS;
}

/* True when `b` holds a live operator block of every packet. */
static __always_inline int operator_live(const struct guard_block *b, __u64 now)
{
	return b && b->expires_ns[GUARD_SLOT_OPERATOR] > now &&
	       !(b->dns_only & (1U << GUARD_SLOT_OPERATOR));
}

/* Whether an operator's block (xdp-guard block) covers the IPv4 source in any entry: the
 * address's, or a prefix around it (past the one a daemon's block was found in). */
static __always_inline int operator_v4(__be32 saddr)
{
	__u64 now = bpf_ktime_get_boot_ns();
	struct guard_v4_key k = { .addr = saddr };
	if (operator_live(bpf_map_lookup_elem(&guard_block_v4, &k), now))
		return 1;
	struct guard_lpm_v4_key lk = { .prefixlen = 32, .addr = saddr };
#pragma unroll
	for (int i = 0; i < GUARD_NEST_MAX; i++) {
		const struct guard_block *b = bpf_map_lookup_elem(&guard_pfx_v4, &lk);
		if (!b)
			break;
		if (operator_live(b, now))
			return 1;
		__u32 len = b->prefixlen;
		if (len == 0 || len > 32)
			break;
		lk.prefixlen = len - 1;
	}
	return 0;
}

static __always_inline int operator_v6(const struct in6_addr *saddr)
{
	__u64 now = bpf_ktime_get_boot_ns();
	struct guard_v6_key k;
	__builtin_memcpy(k.addr, saddr, 16);
	if (operator_live(bpf_map_lookup_elem(&guard_block_v6, &k), now))
		return 1;
	struct guard_lpm_v6_key lk = { .prefixlen = 128 };
	__builtin_memcpy(lk.addr, saddr, 16);
#pragma unroll
	for (int i = 0; i < GUARD_NEST_MAX; i++) {
		const struct guard_block *b = bpf_map_lookup_elem(&guard_pfx_v6, &lk);
		if (!b)
			break;
		if (operator_live(b, now))
			return 1;
		__u32 len = b->prefixlen;
		if (len == 0 || len > 128)
			break;
		lk.prefixlen = len - 1;
	}
	return 0;
}

/* A block found for `addr` (IPv4 mapped): passed when a daemon of the node never blocks it
 * and no operator's block covers it (`op`: looked up only then) — the DNS-only verdict noted
 * before it restored — else `v`, a drop counted by its slot. */
static __always_inline int never_or(int v, const __u8 *addr, int had, struct guard_counters *cnt,
				    struct guard_dns_block *dns, const void *src, int v6)
{
	/* The operator's own block (xdp-guard block) holds: it was meant. */
	if (!(dns->all_mask & (1 << GUARD_SLOT_OPERATOR)) && never_blocked(addr) &&
	    !(v6 ? operator_v6(src) : operator_v4(*(const __be32 *)src))) {
		cnt->count[GUARD_C_NEVER_BLOCK]++;
		dns->verdict = had;
		dns->never = 1;
		return GUARD_C_PASS;
	}
	int s = dns->all_slot;
	if (v != GUARD_C_PASS && s >= 0 && s < GUARD_SLOTS)
		cnt->count[GUARD_C_DROP_SLOT + s]++;
	return v;
}

/* The block verdict for an IPv4 source: a drop, a DNS-only block noted in `dns`, or a pass —
 * always a pass for a source the node's daemons never block. */
static __always_inline int check_v4(__be32 saddr, struct guard_counters *cnt,
				    struct guard_dns_block *dns)
{
	int had = dns->verdict;
	int v = blocked_v4(saddr, cnt, dns);
	if (v == GUARD_C_PASS && dns->verdict == had)
		return v;
	__u8 a[16] = {};
	a[10] = 0xff;
	a[11] = 0xff;
	__builtin_memcpy(&a[12], &saddr, 4);
	return never_or(v, a, had, cnt, dns, &saddr, 0);
}

static __always_inline int check_v6(const struct in6_addr *saddr, struct guard_counters *cnt,
				    struct guard_dns_block *dns)
{
	int had = dns->verdict;
	int v = blocked_v6(saddr, cnt, dns);
	if (v == GUARD_C_PASS && dns->verdict == had)
		return v;
	return never_or(v, (const __u8 *)saddr, had, cnt, dns, saddr, 1);
}

/* A DNS-only block applies to UDP to port `dport` of `dst` (IPv4 mapped) when dnsd serves
 * there: the drop verdict (counted by its slot), else pass. */
static __always_inline int dns_block(const struct guard_dns_block *dns, const __u8 *dst,
				     __be16 dport, struct guard_counters *cnt)
{
	struct guard_lpm_v6_key k = { .prefixlen = 128 };
	__builtin_memcpy(k.addr, dst, 16);
	struct guard_svc *svc = bpf_map_lookup_elem(&guard_svc, &k);
	if (!svc || svc->port != bpf_ntohs(dport))
		return GUARD_C_PASS;
	int s = dns->slot;
	if (s >= 0 && s < GUARD_SLOTS)
		cnt->count[GUARD_C_DROP_SLOT + s]++;
	return dns->verdict;
}

/* True when the source is in the [global] allow list (exempt from the rate limit). */
static __always_inline int allowed(const struct guard_v6_key *src)
{
	const __u8 *a = src->addr;
	if (a[0] == 0 && a[1] == 0 && a[2] == 0 && a[3] == 0 && a[4] == 0 && a[5] == 0 &&
	    a[6] == 0 && a[7] == 0 && a[8] == 0 && a[9] == 0 && a[10] == 0xff && a[11] == 0xff) {
		struct guard_lpm_v4_key k = { .prefixlen = 32 };
		__builtin_memcpy(&k.addr, &a[12], 4);
		return bpf_map_lookup_elem(&guard_allow_v4, &k) != 0;
	}
	struct guard_lpm_v6_key k = { .prefixlen = 128 };
	__builtin_memcpy(k.addr, a, 16);
	return bpf_map_lookup_elem(&guard_allow_v6, &k) != 0;
}

/* Whether the bucket `b` (of `cap` units, refilled at `rate` packets a second: full after
 * `fill_ns`) holds `cost` units at `now`: taken when `take`, else only looked at; the refill
 * is stored either way. */
static __always_inline int bucket_take(struct guard_bucket *b, __u64 cap, __u64 rate,
				       __u64 fill_ns, __u64 now, __u64 cost, int take)
{
	__u64 tokens;
	__u64 elapsed = now - b->last_ns;
	/* last_ns == 0: the element was created on another CPU; this CPU's slot is fresh. */
	if (b->last_ns == 0 || now < b->last_ns || elapsed >= fill_ns) {
		tokens = cap;
	} else {
		tokens = b->tokens + elapsed * rate;
		if (tokens > cap)
			tokens = cap;
	}
	b->last_ns = now;
	if (tokens < cost) {
		b->tokens = tokens;
		return 0;
	}
	b->tokens = take ? tokens - cost : tokens;
	return 1;
}

/* The rate buckets' key of the source `addr` (IPv4 mapped): an IPv4 source as it is, an IPv6
 * source's /64 — one host cannot leave its network, while per address it could spread over
 * 2^64 buckets. True for an IPv4 source. */
static __always_inline int source_key(const __u8 *addr, struct guard_v6_key *key)
{
	__u64 hi, lo;
	__builtin_memcpy(&hi, addr, 8);
	__builtin_memcpy(&lo, addr + 8, 8);
	int v4 = hi == 0 && (bpf_be64_to_cpu(lo) >> 32) == 0xffff;
	if (!v4)
		lo = 0;
	__builtin_memcpy(key->addr, &hi, 8);
	__builtin_memcpy(key->addr + 8, &lo, 8);
	return v4;
}

/* Token bucket per source (an IPv6 source's /64) for UDP to a DNS port. `src` is the IPv6 (or
 * v4-mapped) source; `proven`: the bucket of its queries that carried our server cookie, apart
 * from the one forged packets in its name can spend (as dnsd keeps them apart). */
static __always_inline int rate_limit(struct guard_v6_key *src, __be16 dport,
				      struct guard_counters *cnt, int proven)
{
	__u32 zero = 0;
	struct guard_config *cfg = bpf_map_lookup_elem(&guard_config, &zero);
	if (!cfg || !(cfg->flags & GUARD_F_RATELIMIT))
		return GUARD_C_PASS;
	__u16 port = bpf_ntohs(dport);
	if (!(cfg->dns_ports[(port >> 3) & 8191] & (1 << (port & 7))))
		return GUARD_C_PASS;
	if (allowed(src)) {
		cnt->count[GUARD_C_RATE_EXEMPT]++;
		return GUARD_C_PASS;
	}

	struct guard_v6_key key;
	source_key(src->addr, &key);
	/* Byte 9 is zero in every key above (an IPv4 source's is ::ffff:a.b.c.d, an IPv6 one's
	 * low 64 bits are zero): 1 there keys the proven bucket. */
	if (proven)
		key.addr[9] = 1;

	__u64 now = bpf_ktime_get_ns();
	struct guard_bucket *b = bpf_map_lookup_elem(&guard_rate, &key);
	if (!b) {
		if (cfg->cap_units < GUARD_TOKEN_UNIT)
			return GUARD_C_DROP_RATELIMIT;
		struct guard_bucket fresh = {
			.tokens = cfg->cap_units - GUARD_TOKEN_UNIT,
			.last_ns = now,
		};
		bpf_map_update_elem(&guard_rate, &key, &fresh, BPF_ANY);
		cnt->count[GUARD_C_RATE_NEW_SOURCE]++;
		return GUARD_C_PASS;
	}
	return bucket_take(b, cfg->cap_units, cfg->rate_pps, cfg->fill_ns, now, GUARD_TOKEN_UNIT, 1)
		       ? GUARD_C_PASS
		       : GUARD_C_DROP_RATELIMIT;
}


/* The per-source rate of a candidate the fast path did not answer (it goes on to dnsd):
 * GUARD_C_PASS or GUARD_C_DROP_RATELIMIT. A global function: the rate's lookups once more
 * inlined in the main program would double its verification. */
__attribute__((noinline)) int guard_rate_later(struct xdp_md *ctx, const struct guard_pkt *pk)
{
	__u32 zero = 0;
	struct guard_counters *cnt = bpf_map_lookup_elem(&guard_counters, &zero);
	if (!ctx || !pk || !cnt)
		return GUARD_C_PASS;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct guard_v6_key src = {};
	void *l3 = data + (pk->l3_off & 0xff);
	if (pk->v6) {
		struct ipv6hdr *ip6 = l3;
		if ((void *)(ip6 + 1) > end)
			return GUARD_C_PASS;
		__builtin_memcpy(src.addr, &ip6->saddr, 16);
	} else {
		struct iphdr *ip = l3;
		if ((void *)(ip + 1) > end)
			return GUARD_C_PASS;
		src.addr[10] = 0xff;
		src.addr[11] = 0xff;
		__builtin_memcpy(&src.addr[12], &ip->saddr, 4);
	}
	struct udphdr *udp = data + (pk->l4_off & 0x1ff);
	if ((void *)(udp + 1) > end)
		return GUARD_C_PASS;
	return rate_limit(&src, udp->dest, cnt, 0);
}

/* A datagram of a listed proxy (see guard_proxy): the block check, a DNS-only block and the
 * rate limit apply to the client its PROXY v2 header names, never to the proxy. A LOCAL
 * header, another family, or a short or malformed header passes: dnsd drops and counts what
 * it cannot take. Never a candidate for the answer fast path (the answer would lack the
 * proxy's framing, and the query sits after the header). */
static __always_inline int proxied_udp(struct udphdr *udp, void *end, const struct guard_v6_key *dst,
				       struct guard_counters *cnt)
{
	const __u8 *h = (const __u8 *)(udp + 1);
	if ((void *)(h + 16) > end)
		return GUARD_C_PASS;
	/* "\r\n\r\n\0\r\nQUIT\n", version 2, command PROXY. */
	if (h[0] != 0x0D || h[1] != 0x0A || h[2] != 0x0D || h[3] != 0x0A || h[4] != 0x00 ||
	    h[5] != 0x0D || h[6] != 0x0A || h[7] != 0x51 || h[8] != 0x55 || h[9] != 0x49 ||
	    h[10] != 0x54 || h[11] != 0x0A || h[12] != 0x21)
		return GUARD_C_PASS;
	__u8 fam = h[13] >> 4;
	struct guard_v6_key client = {};
	struct guard_dns_block dns = { 0, -1, -1, 0, 0 };
	int v;
	if (fam == 1) {
		if ((void *)(h + 16 + 12) > end)
			return GUARD_C_PASS;
		__be32 a;
		__builtin_memcpy(&a, h + 16, 4);
		v = check_v4(a, cnt, &dns);
		client.addr[10] = 0xff;
		client.addr[11] = 0xff;
		__builtin_memcpy(&client.addr[12], &a, 4);
	} else if (fam == 2) {
		if ((void *)(h + 16 + 36) > end)
			return GUARD_C_PASS;
		struct in6_addr a;
		__builtin_memcpy(&a, h + 16, 16);
		v = check_v6(&a, cnt, &dns);
		__builtin_memcpy(client.addr, &a, 16);
	} else {
		return GUARD_C_PASS;
	}
	if (v != GUARD_C_PASS)
		return v;
	if (dns.verdict) {
		v = dns_block(&dns, dst->addr, udp->dest, cnt);
		if (v != GUARD_C_PASS)
			return v;
	}
	return rate_limit(&client, udp->dest, cnt, 0);
}

/* A listed proxy's datagram at `pk` (see proxied_udp). A global function: verified once, apart
 * from the many ways to reach it (the block lookups it inlines would double the program). */
__attribute__((noinline)) int guard_proxied(struct xdp_md *ctx, const struct guard_pkt *pk)
{
	__u32 zero = 0;
	struct guard_counters *cnt = bpf_map_lookup_elem(&guard_counters, &zero);
	if (!ctx || !pk || !cnt)
		return GUARD_C_PASS;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct guard_v6_key dst = {};
	void *l3 = data + (pk->l3_off & 0xff);
	if (pk->v6) {
		struct ipv6hdr *ip6 = l3;
		if ((void *)(ip6 + 1) > end)
			return GUARD_C_PASS;
		__builtin_memcpy(dst.addr, &ip6->daddr, 16);
	} else {
		struct iphdr *ip = l3;
		if ((void *)(ip + 1) > end)
			return GUARD_C_PASS;
		dst.addr[10] = 0xff;
		dst.addr[11] = 0xff;
		__builtin_memcpy(&dst.addr[12], &ip->daddr, 4);
	}
	struct udphdr *udp = data + (pk->l4_off & 0x1ff);
	if ((void *)(udp + 1) > end)
		return GUARD_C_PASS;
	return proxied_udp(udp, end, &dst, cnt);
}

/* True when the source is a listed proxy (guard_proxy). */
static __always_inline int is_proxy(const struct guard_v6_key *src)
{
	struct guard_lpm_v6_key k = { .prefixlen = 128 };
	__builtin_memcpy(k.addr, src->addr, 16);
	return bpf_map_lookup_elem(&guard_proxy, &k) != 0;
}

/* True while `src` (IPv4 mapped) is one of dnsd's suspects; a source of `[defence.rrl]
 * exempt` (the trie's GUARD_RRL_EXEMPT entries) is marked in `pk` instead. */
static __always_inline int suspect(const struct guard_v6_key *src, struct guard_pkt *pk)
{
	__u32 zero = 0;
	const struct guard_config *cfg = bpf_map_lookup_elem(&guard_config, &zero);
	if (!cfg || !cfg->suspects)
		return 0;
	struct guard_lpm_v6_key k = { .prefixlen = 128 };
	__builtin_memcpy(k.addr, src->addr, 16);
	const __u64 *until = bpf_map_lookup_elem(&guard_suspect, &k);
	if (!until)
		return 0;
	if (*until == GUARD_RRL_EXEMPT) {
		pk->rrl_exempt = 1;
		return 0;
	}
	return *until > bpf_ktime_get_boot_ns();
}

/* Where dnsd answers in XDP at `dst` (IPv4 mapped) and `dport`: its guard_ans_addr entry,
 * or NULL. */
static __always_inline const struct guard_ans_addr *ans_addr(const struct guard_v6_key *dst,
							      __be16 dport)
{
	struct guard_ans_addr_key k = {};
	__builtin_memcpy(k.addr, dst->addr, 16);
	k.port = bpf_ntohs(dport);
	return bpf_map_lookup_elem(&guard_ans_addr, &k);
}

/* L4 after an IP header: UDP to a DNS service of a source with a DNS-only block is dropped;
 * UDP to a DNS port is rate-limited (a candidate for the answer fast path whose address
 * answers under RRL after the fast path: guard_rate_later), TCP is checked for sanity. */
static __always_inline int l4(void *l4p, void *end, __u8 proto, struct guard_v6_key *src,
			      const struct guard_v6_key *dst, const struct guard_dns_block *dns,
			      struct guard_counters *cnt, struct guard_pkt *pk, int answerable,
			      __u32 l4_len, const struct guard_ans_addr **aap)
{
	if (proto == IPPROTO_UDP) {
		struct udphdr *udp = l4p;
		if ((void *)(udp + 1) > end)
			return GUARD_C_PASS_NOT_UNDERSTOOD;
		/* Answered only as the kernel would take it: the IP header's length is the UDP
		 * datagram's, a source port to answer to, and over IPv6 a checksum (zero is
		 * illegal there, RFC 8200 §8.1). */
		if (bpf_ntohs(udp->len) != l4_len || !udp->source || (pk->v6 && !udp->check))
			answerable = 0;
		/* Only a datagram that starts as a PROXY header costs the proxy lookup (a DNS
		 * query with the id 0x0D0A, one in 65,536, costs it for nothing). */
		const __u8 *pl = (const __u8 *)(udp + 1);
		if ((void *)(pl + 2) <= end && pl[0] == 0x0D && pl[1] == 0x0A && is_proxy(src))
			return GUARD_PROXIED;
		if (dns->verdict) {
			int d = dns_block(dns, dst->addr, udp->dest, cnt);
			if (d != GUARD_C_PASS)
				return d;
		}
		/* Passed past a block (a forced block of a never-block source, which dnsd holds):
		 * never answered here, where the names XDP holds were answered and the others
		 * refused by dnsd. */
		int cand = answerable && !dns->never;
		int sus = cand && suspect(src, pk);
		/* A candidate whose answers here are under the answer RRL (on for the address,
		 * the source not exempt from it) meets the per-source rate after the fast path
		 * (guard_rate_later): what is answered here is limited per source and account,
		 * as dnsd's and Knot's RRL limit it, so a flood forged in a resolver's name for
		 * one name never spends the bucket of its queries for the others; what goes on
		 * to dnsd is charged to the source's bucket. Without that RRL the rate comes
		 * first, and bounds what one address gets. */
		if (cand && !sus && !pk->rrl_exempt) {
			/* Looked up once: try_answer takes it from here. */
			const struct guard_ans_addr *aa = ans_addr(dst, udp->dest);
			*aap = aa;
			pk->cand = GUARD_CAND_ADDR_SEEN;
			if (aa && aa->on && aa->rate) {
				pk->cand |= GUARD_CAND_RATE_LATER;
				return GUARD_CANDIDATE;
			}
		}
		int v = rate_limit(src, udp->dest, cnt, 0);
		if (v != GUARD_C_PASS)
			return v;
		if (!cand)
			return dns->never ? GUARD_C_PASS : GUARD_UNANSWERABLE;
		return sus ? GUARD_SUSPECT : GUARD_CANDIDATE;
	}
	if (proto == IPPROTO_TCP) {
		struct tcphdr *tcp = l4p;
		if ((void *)(tcp + 1) > end || tcp->doff < 5)
			return GUARD_C_PASS_NOT_UNDERSTOOD;
		return GUARD_C_PASS;
	}
	return GUARD_C_PASS;
}

/* An IPv4 header the kernel would take and a source to answer: a valid header checksum (the
 * kernel drops a wrong one), a unicast source that is neither "this network", loopback,
 * multicast, reserved nor broadcast, nor the destination itself (a reply would reach the
 * whole segment, or loop). */
static __always_inline int v4_answerable(const struct iphdr *ip)
{
	__u8 a = ((const __u8 *)&ip->saddr)[0];
	if (a == 0 || a == 127 || a >= 224 || ip->saddr == ip->daddr)
		return 0;
	const __u16 *w = (const __u16 *)ip;
	__u32 s = 0;
#pragma unroll
	for (int i = 0; i < 10; i++)
		s += w[i];
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return s == 0xffff;
}

/* A source to answer over IPv6: not multicast, unspecified, loopback, IPv4-compatible or
 * IPv4-mapped (nor such a destination: the kernel takes no mapped address off the wire, and
 * the IPv4 service's answers are keyed so), nor the destination itself. */
static __always_inline int v6_answerable(const struct ipv6hdr *ip6)
{
	const __u32 *s = (const __u32 *)&ip6->saddr;
	const __u32 *d = (const __u32 *)&ip6->daddr;
	if (((const __u8 *)s)[0] == 0xff)
		return 0;
	if (!s[0] && !s[1] && (!s[2] || s[2] == bpf_htonl(0xffff)))
		return 0;
	if (!d[0] && !d[1] && (!d[2] || d[2] == bpf_htonl(0xffff)))
		return 0;
	return s[0] != d[0] || s[1] != d[1] || s[2] != d[2] || s[3] != d[3];
}

static __always_inline int handle_v4(void *data, void *p, void *end, struct guard_counters *cnt,
				     struct guard_pkt *pk, const struct guard_ans_addr **aap)
{
	struct iphdr *ip = p;
	if ((void *)(ip + 1) > end || ip->version != 4 || ip->ihl < 5)
		return GUARD_C_PASS_NOT_UNDERSTOOD;
	__u32 hlen = ip->ihl * 4;
	if (p + hlen > end)
		return GUARD_C_PASS_NOT_UNDERSTOOD;

	struct guard_dns_block dns = { 0, -1, -1, 0, 0 };
	int v = check_v4(ip->saddr, cnt, &dns);
	if (v != GUARD_C_PASS)
		return v;
	/* Non-first fragments carry no L4 header: nothing more to look at. */
	if (ip->frag_off & bpf_htons(0x1fff))
		return GUARD_C_PASS;
	if (ip->protocol != IPPROTO_UDP && ip->protocol != IPPROTO_TCP)
		return GUARD_C_PASS;

	struct guard_v6_key src = {};
	src.addr[10] = 0xff;
	src.addr[11] = 0xff;
	__builtin_memcpy(&src.addr[12], &ip->saddr, 4);
	struct guard_v6_key dst = {};
	dst.addr[10] = 0xff;
	dst.addr[11] = 0xff;
	__builtin_memcpy(&dst.addr[12], &ip->daddr, 4);
	pk->l3_off = p - data;
	pk->l4_off = p + hlen - data;
	pk->v6 = 0;
	/* Answered in XDP: no IP options, not a fragment (neither MF nor an offset), a frame
	 * and header the kernel would take. */
	int answerable = hlen == 20 && !(ip->frag_off & bpf_htons(0x3fff)) && !pk->odd &&
			 v4_answerable(ip);
	__u32 tot = bpf_ntohs(ip->tot_len);
	__u32 l4_len = tot > hlen ? tot - hlen : 0;
	return l4(p + hlen, end, ip->protocol, &src, &dst, &dns, cnt, pk, answerable, l4_len, aap);
}

static __always_inline int handle_v6(void *data, void *p, void *end, struct guard_counters *cnt,
				     struct guard_pkt *pk, const struct guard_ans_addr **aap)
{
	struct ipv6hdr *ip6 = p;
	if ((void *)(ip6 + 1) > end || ip6->version != 6)
		return GUARD_C_PASS_NOT_UNDERSTOOD;

	struct guard_dns_block dns = { 0, -1, -1, 0, 0 };
	int v = check_v6(&ip6->saddr, cnt, &dns);
	if (v != GUARD_C_PASS)
		return v;

	__u8 nh = ip6->nexthdr;
	void *cur = p + sizeof(*ip6);
#pragma unroll
	for (int i = 0; i < GUARD_MAX_EXT_HEADERS; i++) {
		if (nh == IPPROTO_HOPOPTS || nh == IPPROTO_ROUTING || nh == IPPROTO_DSTOPTS) {
			struct ipv6_opt_hdr *h = cur;
			if ((void *)(h + 1) > end)
				return GUARD_C_PASS_NOT_UNDERSTOOD;
			nh = h->nexthdr;
			cur += ((__u32)h->hdrlen + 1) * 8;
		} else if (nh == IPPROTO_FRAGMENT) {
			struct ipv6_frag *f = cur;
			if ((void *)(f + 1) > end)
				return GUARD_C_PASS_NOT_UNDERSTOOD;
			/* Non-first fragment: no L4 header follows. */
			if (f->frag_off & bpf_htons(0xfff8))
				return GUARD_C_PASS;
			nh = f->nexthdr;
			cur += sizeof(*f);
		} else {
			break;
		}
	}
	if (nh == IPPROTO_HOPOPTS || nh == IPPROTO_ROUTING || nh == IPPROTO_DSTOPTS ||
	    nh == IPPROTO_FRAGMENT)
		return GUARD_C_PASS_NOT_UNDERSTOOD;
	if (nh != IPPROTO_UDP && nh != IPPROTO_TCP)
		return GUARD_C_PASS;

	struct guard_v6_key src;
	__builtin_memcpy(src.addr, &ip6->saddr, 16);
	struct guard_v6_key dst;
	__builtin_memcpy(dst.addr, &ip6->daddr, 16);
	pk->l3_off = p - data;
	pk->l4_off = cur - data;
	pk->v6 = 1;
	/* Answered in XDP: no extension headers, addresses the kernel would take. */
	int answerable = cur == p + sizeof(*ip6) && !pk->odd && v6_answerable(ip6);
	return l4(cur, end, nh, &src, &dst, &dns, cnt, pk, answerable,
		  bpf_ntohs(ip6->payload_len), aap);
}

static __always_inline int classify(struct xdp_md *ctx, struct guard_counters *cnt,
				    struct guard_pkt *pk, const struct guard_ans_addr **aap)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return GUARD_C_PASS_NOT_UNDERSTOOD;

	__be16 proto = eth->h_proto;
	void *p = eth + 1;
	/* A group destination (broadcast, multicast) or source MAC: checked and passed, never
	 * answered here (the reply would go to every host of the segment). */
	if ((eth->h_dest[0] | eth->h_source[0]) & 1)
		pk->odd = 1;
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		/* Tagged: the kernel takes it only for a VLAN it has; never answered here. */
		pk->odd = 1;
		struct vlan_tag *tag = p;
		if ((void *)(tag + 1) > end)
			return GUARD_C_PASS_NOT_UNDERSTOOD;
		proto = tag->proto;
		p = tag + 1;
		/* A second tag (QinQ) is not looked into. */
		if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD))
			return GUARD_C_PASS_NOT_UNDERSTOOD;
	}
	if (proto == bpf_htons(ETH_P_IP))
		return handle_v4(data, p, end, cnt, pk, aap);
	if (proto == bpf_htons(ETH_P_IPV6))
		return handle_v6(data, p, end, cnt, pk, aap);
	return GUARD_C_PASS_NOT_IP;
}


/* The DNS answer fast path (try_answer and what it needs). */
#include "answer.h"

SEC("xdp")
int palisade_guard(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct guard_counters *cnt = bpf_map_lookup_elem(&guard_counters, &zero);
	if (!cnt)
		return XDP_PASS;
	struct guard_pkt pk = {};
	/* The answer address entry classify found for a candidate (else looked up there). */
	const struct guard_ans_addr *aa = 0;
	int v = classify(ctx, cnt, &pk, &aa);
	if (v == GUARD_PROXIED) {
		pk.cand = GUARD_CAND_PROXIED;
		v = guard_proxied(ctx, &pk);
	}
	if (v == GUARD_CANDIDATE) {
		int act = try_answer(ctx, &pk, cnt, aa);
		if (act == GUARD_RRL_DROP) {
			cnt->count[GUARD_C_DROP_RATELIMIT]++;
			return XDP_DROP;
		}
		if (act == XDP_TX) {
			cnt->count[GUARD_C_ANSWERED]++;
			return XDP_TX;
		}
		if (act == XDP_DROP)
			return XDP_DROP;
		/* Not answered here: on to dnsd, under the source's rate (if not met before). */
		v = (pk.cand & GUARD_CAND_RATE_LATER) ? guard_rate_later(ctx, &pk) : GUARD_C_PASS;
	}
	/* Forged packets in a source's name spend its bucket: its own queries that carry our
	 * server cookie (it read our replies) still go to dnsd, which exempts them too, and so do
	 * those of a name whose share of its second bucket has room (a flood of one name spends
	 * that name's share); else one in `slip` is answered TC=1 (its question alone: never
	 * more bytes than came) for the resolver to come back over TCP, which no bucket limits
	 * — as RRL slips. A listed proxy's datagram (its payload a PROXY header, not the query)
	 * is never looked into for a cookie or a name. */
	if (v == GUARD_C_DROP_RATELIMIT) {
		if (guard_rate_cookie(ctx, &pk) || guard_rate_name(ctx, &pk)) {
			v = GUARD_C_PASS;
		} else if (guard_rate_slip(ctx, &pk) == XDP_TX) {
			cnt->count[GUARD_C_RATE_SLIP]++;
			return XDP_TX;
		}
	}
	if (v == GUARD_UNANSWERABLE || v == GUARD_SUSPECT) {
		count_unanswered(ctx, &pk, cnt,
				 v == GUARD_SUSPECT ? GUARD_C_ANS_PASS_SUSPECT : GUARD_C_ANS_PASS_FRAME);
		v = GUARD_C_PASS;
	}
	__u32 i = (__u32)v;
	if (i >= GUARD_VERDICTS)
		i = GUARD_C_PASS_NOT_UNDERSTOOD;
	/* Bounded once more on the register used as the index (the compiler may index with
	 * a copy the check above did not bound). */
	barrier_var(i);
	if (i >= GUARD_VERDICTS)
		return XDP_PASS;
	v = (int)i;
	cnt->count[i]++;
	return (v == GUARD_C_DROP_BLOCKED_ADDR || v == GUARD_C_DROP_BLOCKED_PREFIX ||
		v == GUARD_C_DROP_RATELIMIT)
		       ? XDP_DROP
		       : XDP_PASS;
}
