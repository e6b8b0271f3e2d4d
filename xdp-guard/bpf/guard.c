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
 * Rate-limit buckets are per CPU (no atomics, no shared cache lines): a source whose packets
 * the NIC spreads over N CPUs (RSS hashes the source port too) may get up to N x rate.
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

/* The first writer slot of `b` that ends after now (GUARD_NEVER always does), or -1. */
static __always_inline int live_slot(const struct guard_block *b)
{
	__u64 now = bpf_ktime_get_boot_ns();
#pragma unroll
	for (int i = 0; i < GUARD_SLOTS; i++) {
		if (b->expires_ns[i] > now)
			return i;
	}
	return -1;
}

/* A live entry drops (counted by its writer slot); one whose slots have all passed is
 * counted and left for the userspace sweep. */
static __always_inline int found_live(const struct guard_block *b, struct guard_counters *cnt)
{
	if (!b)
		return 0;
	int s = live_slot(b);
	if (s >= 0 && s < GUARD_SLOTS) {
		cnt->count[GUARD_C_DROP_SLOT + s]++;
		return 1;
	}
	cnt->count[GUARD_C_BLOCK_EXPIRED]++;
	return 0;
}

static __always_inline int check_v4(__be32 saddr, struct guard_counters *cnt)
{
	struct guard_v4_key k = { .addr = saddr };
	if (found_live(bpf_map_lookup_elem(&guard_block_v4, &k), cnt))
		return GUARD_C_DROP_BLOCKED_ADDR;
	struct guard_lpm_v4_key lk = { .prefixlen = 32, .addr = saddr };
	if (found_live(bpf_map_lookup_elem(&guard_pfx_v4, &lk), cnt))
		return GUARD_C_DROP_BLOCKED_PREFIX;
	return GUARD_C_PASS;
}

static __always_inline int check_v6(const struct in6_addr *saddr, struct guard_counters *cnt)
{
	struct guard_v6_key k;
	__builtin_memcpy(k.addr, saddr, 16);
	if (found_live(bpf_map_lookup_elem(&guard_block_v6, &k), cnt))
		return GUARD_C_DROP_BLOCKED_ADDR;
	struct guard_lpm_v6_key lk = { .prefixlen = 128 };
	__builtin_memcpy(lk.addr, saddr, 16);
	if (found_live(bpf_map_lookup_elem(&guard_pfx_v6, &lk), cnt))
		return GUARD_C_DROP_BLOCKED_PREFIX;
	return GUARD_C_PASS;
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

/* Token bucket per source for UDP to a DNS port. `src` is the IPv6 (or v4-mapped) source. */
static __always_inline int rate_limit(struct guard_v6_key *src, __be16 dport,
				      struct guard_counters *cnt)
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

	__u64 now = bpf_ktime_get_ns();
	struct guard_bucket *b = bpf_map_lookup_elem(&guard_rate, src);
	if (!b) {
		if (cfg->cap_units < GUARD_TOKEN_UNIT)
			return GUARD_C_DROP_RATELIMIT;
		struct guard_bucket fresh = {
			.tokens = cfg->cap_units - GUARD_TOKEN_UNIT,
			.last_ns = now,
		};
		bpf_map_update_elem(&guard_rate, src, &fresh, BPF_ANY);
		cnt->count[GUARD_C_RATE_NEW_SOURCE]++;
		return GUARD_C_PASS;
	}
	__u64 tokens;
	__u64 elapsed = now - b->last_ns;
	/* last_ns == 0: the element was created on another CPU; this CPU's slot is fresh. */
	if (b->last_ns == 0 || now < b->last_ns || elapsed >= cfg->fill_ns) {
		tokens = cfg->cap_units;
	} else {
		tokens = b->tokens + elapsed * cfg->rate_pps;
		if (tokens > cfg->cap_units)
			tokens = cfg->cap_units;
	}
	b->last_ns = now;
	if (tokens < GUARD_TOKEN_UNIT) {
		b->tokens = tokens;
		return GUARD_C_DROP_RATELIMIT;
	}
	b->tokens = tokens - GUARD_TOKEN_UNIT;
	return GUARD_C_PASS;
}

/* L4 after an IP header: UDP to a DNS port is rate-limited, TCP is checked for sanity. */
static __always_inline int l4(void *l4p, void *end, __u8 proto, struct guard_v6_key *src,
			      struct guard_counters *cnt)
{
	if (proto == IPPROTO_UDP) {
		struct udphdr *udp = l4p;
		if ((void *)(udp + 1) > end)
			return GUARD_C_PASS_NOT_UNDERSTOOD;
		return rate_limit(src, udp->dest, cnt);
	}
	if (proto == IPPROTO_TCP) {
		struct tcphdr *tcp = l4p;
		if ((void *)(tcp + 1) > end || tcp->doff < 5)
			return GUARD_C_PASS_NOT_UNDERSTOOD;
		return GUARD_C_PASS;
	}
	return GUARD_C_PASS;
}

static __always_inline int handle_v4(void *p, void *end, struct guard_counters *cnt)
{
	struct iphdr *ip = p;
	if ((void *)(ip + 1) > end || ip->version != 4 || ip->ihl < 5)
		return GUARD_C_PASS_NOT_UNDERSTOOD;
	__u32 hlen = ip->ihl * 4;
	if (p + hlen > end)
		return GUARD_C_PASS_NOT_UNDERSTOOD;

	int v = check_v4(ip->saddr, cnt);
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
	return l4(p + hlen, end, ip->protocol, &src, cnt);
}

static __always_inline int handle_v6(void *p, void *end, struct guard_counters *cnt)
{
	struct ipv6hdr *ip6 = p;
	if ((void *)(ip6 + 1) > end || ip6->version != 6)
		return GUARD_C_PASS_NOT_UNDERSTOOD;

	int v = check_v6(&ip6->saddr, cnt);
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
	return l4(cur, end, nh, &src, cnt);
}

static __always_inline int classify(struct xdp_md *ctx, struct guard_counters *cnt)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return GUARD_C_PASS_NOT_UNDERSTOOD;

	__be16 proto = eth->h_proto;
	void *p = eth + 1;
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
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
		return handle_v4(p, end, cnt);
	if (proto == bpf_htons(ETH_P_IPV6))
		return handle_v6(p, end, cnt);
	return GUARD_C_PASS_NOT_IP;
}

SEC("xdp")
int palisade_guard(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct guard_counters *cnt = bpf_map_lookup_elem(&guard_counters, &zero);
	if (!cnt)
		return XDP_PASS;
	int v = classify(ctx, cnt);
	if (v < 0 || v >= GUARD_VERDICTS)
		v = GUARD_C_PASS_NOT_UNDERSTOOD;
	cnt->count[v]++;
	return (v == GUARD_C_DROP_BLOCKED_ADDR || v == GUARD_C_DROP_BLOCKED_PREFIX ||
		v == GUARD_C_DROP_RATELIMIT)
		       ? XDP_DROP
		       : XDP_PASS;
}
