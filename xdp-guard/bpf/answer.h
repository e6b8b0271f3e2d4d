/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The DNS answer fast path of the Palisade XDP guard: for UDP to a DNS service address whose
 * dnsd publishes answers (`guard_ans_addr`, with the live generation), the query is parsed
 * (one question, optional OPT with a cookie, nothing else), its key — with the qname's FNV-1a
 * hash, made as the name is read — looked up in `guard_answers` (dnsd's own reply bytes,
 * compiled by dnsd's pipeline; the value's name compared with the query's before anything is
 * sent), and the frame turned around in place as the reply: sent where the kernel's route to
 * the source leads (out of the interface it came in by, to the neighbour's MAC; else passed),
 * addresses and ports swapped, the
 * DNS message rewritten with the query's id, RD and CD, the cookie verified and a fresh server
 * cookie minted with dnsd's secrets (RFC 9018, SipHash-2-4), the IPv4 header checksum updated
 * from the old one and the UDP checksum made from dnsd's precomputed sum. Replies over the
 * per-prefix answer rate are slipped (TC=1) or dropped as dnsd's RRL would. Anything the path
 * does not answer passes to dnsd, counted by cause.
 *
 * What an answer costs, and why it is shaped so (cargo bench -p xdp-guard -- answers): headers
 * are read and written through packet pointers (a helper call per copy cost more than the
 * edit), each pointer pinned with barrier_var so that the register the verifier saw checked is
 * the one used; one coarse clock read serves the lease, RRL and cookie time; the reply grows at
 * the tail, or where the driver left no tailroom, at the front with the headers moved inside
 * the frame.
 *
 * Included by guard.c after the block check and classification (`classify` hands over a
 * GUARD_CANDIDATE); it uses the maps declared here and guard.h's layouts.
 */
#ifndef PALISADE_GUARD_ANSWER_H
#define PALISADE_GUARD_ANSWER_H

/* The answer fast path: dnsd's replies by (address, port, generation, variant, qtype, qname hash). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, GUARD_DEFAULT_ANSWER_ENTRIES);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct guard_ans_key);
	__type(value, struct guard_answer);
} guard_answers SEC(".maps");

/* guard_ans_addr (service addresses whose dnsd answers in XDP) is declared in guard.c. */

/* Answer-rate buckets by source prefix (IPv4 mapped) and account (guard_answer.rrl_key), per
 * CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, GUARD_DEFAULT_ANS_RATE_ENTRIES);
	__type(key, struct guard_ans_rate_key);
	__type(value, struct guard_ans_bucket);
} guard_ans_rate SEC(".maps");

/* Room for one answer key (too big for the stack beside the rest). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct guard_ans_scratch);
} guard_ans_tmp SEC(".maps");

/* DNS header flag bits (host order). */
#define DNS_QR 0x8000
#define DNS_OPCODE 0x7800
#define DNS_TC 0x0200
#define DNS_RD 0x0100
#define DNS_CD 0x0010
#define DNS_RCODE 0x000f

struct dnshdr {
	__be16 id;
	__be16 flags;
	__be16 qd, an, ns, ar;
};

/* Where a reply goes: the MACs the kernel's route names (`routed`), or the sender's. */
struct guard_route {
	__u8 routed;
	__u8 dmac[ETH_ALEN];
	__u8 smac[ETH_ALEN];
};

#ifndef barrier_var
/* Keeps `v` in one register the compiler cannot rebuild: a packet pointer checked against the
 * frame's end must be the one read through (the verifier tracks the checked register). */
#define barrier_var(v) asm volatile("" : "+r"(v))
#endif

/* Folds a 32-bit one's complement sum to 16 bits. */
static __always_inline __u16 fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)s;
}


/* Parses a UDP payload at `dns` as a query the fast path may answer and fills the key's
 * variant, qtype and qname; 0 when it may answer, or the counter to pass with. */
static __always_inline int parse_query(struct xdp_md *ctx, void *data, void *end, __u32 dns_off,
				       __u32 msg_end, struct guard_ans_key *k, __u8 *qname,
				       struct guard_ans_ctx *a)
{
	struct dnshdr *h = data + dns_off;
	if ((void *)(h + 1) > end)
		return GUARD_C_ANS_PASS_QUERY;
	__u16 flags = bpf_ntohs(h->flags);
	/* A query (QR=0), opcode QUERY, not truncated, rcode 0; one question, nothing in the
	 * answer and authority sections, at most the OPT record in additional. */
	if (flags & (DNS_QR | DNS_OPCODE | DNS_TC | DNS_RCODE))
		return GUARD_C_ANS_PASS_QUERY;
	if (h->qd != bpf_htons(1) || h->an || h->ns || bpf_ntohs(h->ar) > 1)
		return GUARD_C_ANS_PASS_QUERY;
	a->qflags = flags;
	a->dns_off = dns_off;

	/* The qname, lower-cased into `qname` and hashed (FNV-1a) for the key; its bytes summed
	 * as they are (case kept). */
	__u8 *q = (__u8 *)(h + 1);
	__u32 sum = 0;
	__u64 hash = GUARD_FNV_OFFSET;
	__u32 n = 0;          /* bytes of the name so far */
	__u32 next_len = 0;   /* index of the next length byte */
	int done = 0;
	for (int i = 0; i < GUARD_QNAME_MAX; i++) {
		__u8 *b = q + i;
		if ((void *)(b + 1) > end)
			return GUARD_C_ANS_PASS_QUERY;
		__u8 c = *b;
		__u8 lc = c;
		if (i == next_len) {
			if (c == 0) {
				qname[i & (GUARD_QNAME_MAX - 1)] = 0;
				hash = (hash ^ 0) * GUARD_FNV_PRIME;
				n = i + 1;
				done = 1;
				break;
			}
			if (c > 63)
				return GUARD_C_ANS_PASS_QUERY; /* compression or an unknown label type */
			next_len = i + 1 + c;
		} else if (c >= 'A' && c <= 'Z') {
			lc = c + 32;
		}
		qname[i & (GUARD_QNAME_MAX - 1)] = lc;
		hash = (hash ^ lc) * GUARD_FNV_PRIME;
		sum += (i & 1) ? c : ((__u32)c << 8);
	}
	if (!done)
		return GUARD_C_ANS_PASS_QUERY; /* longer than GUARD_QNAME_MAX */
	k->qname_len = n;
	k->name_hash = hash;
	/* qtype and qclass, and the OPT record, read by offset (the verifier loses the bounds of
	 * a packet pointer moved by the name's length). */
	if (n > GUARD_QNAME_MAX)
		return GUARD_C_ANS_PASS_QUERY;
	/* Where the UDP payload ends (a short frame may carry Ethernet padding after it). */
	__u32 total = msg_end;
	__u32 t_off = (dns_off + sizeof(*h) + n) & 0x1ff;
	__u8 *t = data + t_off;
	barrier_var(t); /* one register, checked and read (not rebuilt from data after the check) */
	if ((void *)(t + 4) > end)
		return GUARD_C_ANS_PASS_QUERY;
	if (t[2] != 0 || t[3] != 1)
		return GUARD_C_ANS_PASS_QUERY; /* class IN only */
	k->qtype = ((__u16)t[0] << 8) | t[1];
	/* The question's bytes are at offset 12 (even): a byte at question index j pairs as
	 * high when j is even. */
	if (n & 1) {
		sum += t[0] + ((__u32)t[1] << 8) + t[2] + ((__u32)t[3] << 8);
	} else {
		sum += ((__u32)t[0] << 8) + t[1] + ((__u32)t[2] << 8) + t[3];
	}
	a->qsum = sum;
	a->qend = sizeof(*h) + n + 4;
	__u32 rest = t_off + 4;
	if (!h->ar) {
		if (rest != total)
			return GUARD_C_ANS_PASS_QUERY; /* trailing bytes */
		k->variant = GUARD_V_NO_EDNS;
		a->client = 0;
		return 0;
	}
	/* The OPT record: root owner, type 41, version 0, no extended rcode, only the DO flag;
	 * no options, or one COOKIE option (RFC 7873) of a client cookie with or without an
	 * RFC 9018 server cookie. */
	rest &= 0x1ff;
	__u8 *o = data + rest;
	barrier_var(o);
	if ((void *)(o + 11) > end)
		return GUARD_C_ANS_PASS_QUERY;
	if (o[0] != 0 || o[1] != 0 || o[2] != 41 || o[5] != 0 || o[6] != 0 ||
	    (o[7] & 0x7f) != 0 || o[8] != 0)
		return GUARD_C_ANS_PASS_QUERY;
	__u32 rdlen = ((__u32)o[9] << 8) | o[10];
	if (rest + 11 + rdlen != total)
		return GUARD_C_ANS_PASS_QUERY;
	if (rdlen == 12 || rdlen == 28) {
		/* Copied out of the frame: a client cookie alone (12 bytes of option) or with a
		 * server cookie (28). */
		__u8 c[28] = {};
		if (rdlen == 28) {
			__u8 *p = data + ((rest + 11) & 0x3ff);
			barrier_var(p);
			if ((void *)(p + 28) > end)
				return GUARD_C_ANS_PASS_QUERY;
			__builtin_memcpy(c, p, 28);
		} else {
			__u8 *p = data + ((rest + 11) & 0x3ff);
			barrier_var(p);
			if ((void *)(p + 12) > end)
				return GUARD_C_ANS_PASS_QUERY;
			__builtin_memcpy(c, p, 12);
		}
		if (c[0] != 0 || c[1] != 10 || c[2] != 0 || c[3] != rdlen - 4)
			return GUARD_C_ANS_PASS_QUERY;
		a->cookie = rdlen - 4;
		__builtin_memcpy(&a->cc, c + 4, 8);
		__builtin_memcpy(&a->sc_head, c + 12, 8);
		__builtin_memcpy(&a->sc_hash, c + 20, 8);
	} else if (rdlen) {
		return GUARD_C_ANS_PASS_QUERY;
	}
	a->client = ((__u16)o[3] << 8) | o[4];
	k->variant = (o[7] & 0x80) ? GUARD_V_EDNS_DO : GUARD_V_EDNS;
	return 0;
}

/* The reply's UDP checksum (pseudo header `psum` already summed): UDP header, DNS header,
 * the question (as the query had it) and `body`, the sum of what follows the question (with
 * its pairing already as at its offset). */
static __always_inline __u16 reply_csum(__u32 psum, struct udphdr *udp, struct dnshdr *h,
					const struct guard_ans_ctx *a, __u32 body)
{
	__u32 s = psum;
	s += bpf_ntohs(udp->source) + bpf_ntohs(udp->dest) + bpf_ntohs(udp->len);
	s += bpf_ntohs(h->id) + bpf_ntohs(h->flags) + bpf_ntohs(h->qd) + bpf_ntohs(h->an) +
	     bpf_ntohs(h->ns) + bpf_ntohs(h->ar);
	s += a->qsum;
	s += body;
	__u16 c = ~fold(s);
	return c ? c : 0xffff;
}

/* RRL in XDP: whether the source prefix of `src` (IPv4 mapped) gets one more reply of the
 * account `rrl_key` (guard_answer.rrl_key) — a token bucket of `rate` replies per second
 * holding one second's worth: 1 yes, 2 over the rate but slipped (TC=1), 0 over the rate and
 * dropped. One bucket per account, as dnsd's RRL (and Knot's) keys them: an answer's name and
 * type, a NODATA's name, a referral's zone — a flood forged in a resolver's name for one name
 * never limits its answers for another, and a zone's delegations are one account. */
static __always_inline int answer_allowed(const __u8 *src, int v6, const struct guard_ans_addr *aa,
					  __u64 rrl_key, int charge_only, __u64 now)
{
	if (!aa->rate)
		return 1;
	/* The source's prefix: the 128-bit address masked as two big-endian halves (a byte
	 * loop here multiplies the verifier's states past its limit). */
	__u32 bits = !v6 ? 96 + (aa->v4_prefix > 32 ? 32 : aa->v4_prefix)
			 : (aa->v6_prefix > 128 ? 128 : aa->v6_prefix);
	__u64 hi, lo;
	__builtin_memcpy(&hi, src, 8);
	__builtin_memcpy(&lo, src + 8, 8);
	__u64 mh = bits >= 64 ? ~0ULL : (bits ? ~0ULL << (64 - bits) : 0);
	__u32 b2 = bits > 64 ? bits - 64 : 0;
	__u64 ml = b2 >= 64 ? ~0ULL : (b2 ? ~0ULL << (64 - b2) : 0);
	hi = bpf_cpu_to_be64(bpf_be64_to_cpu(hi) & mh);
	lo = bpf_cpu_to_be64(bpf_be64_to_cpu(lo) & ml);
	struct guard_ans_rate_key k = {};
	__builtin_memcpy(k.addr, &hi, 8);
	__builtin_memcpy(k.addr + 8, &lo, 8);
	k.rrl_key = rrl_key;
	__u64 cap = (__u64)aa->rate * GUARD_TOKEN_UNIT;
	struct guard_ans_bucket *b = bpf_map_lookup_elem(&guard_ans_rate, &k);
	if (!b) {
		struct guard_ans_bucket fresh = { .tokens = cap - GUARD_TOKEN_UNIT, .last_ns = now };
		bpf_map_update_elem(&guard_ans_rate, &k, &fresh, BPF_ANY);
		return 1;
	}
	__u64 tokens;
	if (b->last_ns == 0 || now < b->last_ns || now - b->last_ns >= 1000000000ULL) {
		tokens = cap;
	} else {
		tokens = b->tokens + (now - b->last_ns) * aa->rate;
		if (tokens > cap)
			tokens = cap;
	}
	b->last_ns = now;
	if (tokens < GUARD_TOKEN_UNIT) {
		b->tokens = tokens;
		if (charge_only)
			return 0;
		b->limited++;
		return aa->slip && b->limited % aa->slip == 0 ? 2 : 0;
	}
	b->tokens = tokens - GUARD_TOKEN_UNIT;
	return 1;
}

/* SipHash-2-4, the hash of RFC 9018 server cookies. */
#define ROTL64(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                   \
	do {                                                                                       \
		v0 += v1;                                                                          \
		v1 = ROTL64(v1, 13);                                                               \
		v1 ^= v0;                                                                          \
		v0 = ROTL64(v0, 32);                                                               \
		v2 += v3;                                                                          \
		v3 = ROTL64(v3, 16);                                                               \
		v3 ^= v2;                                                                          \
		v0 += v3;                                                                          \
		v3 = ROTL64(v3, 21);                                                               \
		v3 ^= v0;                                                                          \
		v2 += v1;                                                                          \
		v1 = ROTL64(v1, 17);                                                               \
		v1 ^= v2;                                                                          \
		v2 = ROTL64(v2, 32);                                                               \
	} while (0)

/* What SipHash-2-4 hashes: the key (k0, k1), `n` (2 or 4) little-endian words `m`, then the
 * final block `last` (the message's tail bytes, and its length in the top byte). */
struct sip_in {
	__u64 k0, k1;
	__u64 m[4];
	__u64 n;
	__u64 last;
};

/* SipHash-2-4 of `in` (a global function: verified once, not at every call). */
__attribute__((noinline)) __u64 guard_siphash24(const struct sip_in *in)
{
	if (!in)
		return 0;
	__u64 v0 = in->k0 ^ 0x736f6d6570736575ULL, v1 = in->k1 ^ 0x646f72616e646f6dULL;
	__u64 v2 = in->k0 ^ 0x6c7967656e657261ULL, v3 = in->k1 ^ 0x7465646279746573ULL;
	__u64 n = in->n;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		__u64 w = in->m[i];
		if (i < n) {
			v3 ^= w;
			SIPROUND;
			SIPROUND;
			v0 ^= w;
		}
	}
	__u64 last = in->last;
	v3 ^= last;
	SIPROUND;
	SIPROUND;
	v0 ^= last;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

/* The RFC 9018 hash of client cookie `cc` and server cookie head `head` for the source `src`
 * (IPv4 mapped: its 4 bytes are hashed) under the secret `k`. */
static __always_inline __u64 cookie_hash(const __u64 *k, __u64 cc, __u64 head, const __u8 *src,
					 int v6)
{
	struct sip_in in = { .k0 = k[0], .k1 = k[1], .m = { cc, head, 0, 0 } };
	if (v6) {
		__builtin_memcpy(&in.m[2], src, 8);
		__builtin_memcpy(&in.m[3], src + 8, 8);
		in.n = 4;
		in.last = 32ULL << 56;
	} else {
		__u32 ip4;
		__builtin_memcpy(&ip4, src + 12, 4);
		in.n = 2;
		in.last = (__u64)ip4 | (20ULL << 56);
	}
	return guard_siphash24(&in);
}

/* Whether the query's server cookie is one we (or the previous secret) made for this client
 * and is fresh: at most an hour old and five minutes ahead (RFC 9018 §4.3). */
static __always_inline int cookie_valid(const struct guard_ans_addr *aa,
					const struct guard_ans_ctx *a, const __u8 *src, int v6,
					__u32 now_s)
{
	__u8 h[8];
	__builtin_memcpy(h, &a->sc_head, 8);
	if (h[0] != 1)
		return 0;
	__u32 ts = ((__u32)h[4] << 24) | ((__u32)h[5] << 16) | ((__u32)h[6] << 8) | h[7];
	if (now_s - ts > 3600 && ts - now_s > 300)
		return 0;
	if (cookie_hash(aa->secret, a->cc, a->sc_head, src, v6) == a->sc_hash)
		return 1;
	return aa->cookie_keys == GUARD_KEYS_BOTH &&
	       cookie_hash(aa->previous, a->cc, a->sc_head, src, v6) == a->sc_hash;
}

/* The COOKIE option dnsd answers with: the client cookie and a fresh server cookie. */
static __always_inline void make_cookie(const struct guard_ans_addr *aa,
					const struct guard_ans_ctx *a, const __u8 *src, int v6,
					__u32 now_s, __u8 *out)
{
	__u8 head[8] = { 1, 0, 0, 0, now_s >> 24, now_s >> 16, now_s >> 8, now_s };
	__u64 hv;
	__builtin_memcpy(&hv, head, 8);
	__u64 hash = cookie_hash(aa->secret, a->cc, hv, src, v6);
	out[0] = 0;
	out[1] = 10;
	out[2] = 0;
	out[3] = 24;
	__builtin_memcpy(out + 4, &a->cc, 8);
	__builtin_memcpy(out + 12, head, 8);
	__builtin_memcpy(out + 20, &hash, 8);
}

/* The one's complement sum of the `n` bytes `b` placed at offset `off` of the DNS message. */
static __always_inline __u32 sum_at(const __u8 *b, int n, __u32 off)
{
	/* The bytes at even and odd indexes summed apart, paired by the offset's parity once (a
	 * branch per byte would multiply the verifier's states). */
	__u32 even = 0, odd = 0;
#pragma unroll
	for (int i = 0; i < n; i++) {
		if (i & 1)
			odd += b[i];
		else
			even += b[i];
	}
	return (off & 1) ? even + (odd << 8) : (even << 8) + odd;
}

/* Sums `n` 16-bit words at `p` (bounds checked by the caller). */
static __always_inline __u32 sum_words(const __u16 *p, int n)
{
	__u32 s = 0;
#pragma unroll
	for (int i = 0; i < n; i++)
		s += bpf_ntohs(p[i]);
	return s;
}

/* Turns the frame around as the reply whose DNS message (`dns_len` bytes from `dns_off`) is in
 * place but for its header: MACs, addresses and ports swapped, lengths, the IPv4 and UDP
 * checksums, the header's flags and counts. The headers are edited where they are, through
 * packet pointers taken after the frame changed size (those taken before are void). */
static __always_inline int finish_reply(struct xdp_md *ctx, const struct guard_pkt *pk,
					__u32 dns_off,
					__u32 dns_len, __u16 flags, __u16 an, __u16 ns, __u16 ar,
					const struct guard_ans_ctx *a, __u32 body,
					const struct guard_route *rt)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 l3 = pk->l3_off & 0xff, l4o = pk->l4_off & 0xff;
	dns_off &= 0x1ff;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return XDP_DROP;
	if (rt->routed) {
		__builtin_memcpy(eth->h_dest, rt->dmac, ETH_ALEN);
		__builtin_memcpy(eth->h_source, rt->smac, ETH_ALEN);
	} else {
		__u8 mac[ETH_ALEN];
		__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
		__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
		__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
	}

	__u16 udp_len = sizeof(struct udphdr) + dns_len;
	/* The pseudo header's sum: the addresses' sum does not change when they swap. */
	__u32 psum = udp_len + IPPROTO_UDP;
	if (pk->v6) {
		struct ipv6hdr *ip6 = data + l3;
		barrier_var(ip6);
		if ((void *)(ip6 + 1) > end)
			return XDP_DROP;
		struct in6_addr t = ip6->saddr;
		ip6->saddr = ip6->daddr;
		ip6->daddr = t;
		ip6->payload_len = bpf_htons(udp_len);
		ip6->hop_limit = 64;
		psum += sum_words((const __u16 *)&t, 8) + sum_words((const __u16 *)&ip6->saddr, 8);
	} else {
		struct iphdr *ip = data + l3;
		barrier_var(ip);
		if ((void *)(ip + 1) > end)
			return XDP_DROP;
		__be32 t = ip->saddr;
		ip->saddr = ip->daddr;
		ip->daddr = t;
		psum += sum_words((const __u16 *)&ip->saddr, 4);
		/* The header checksum updated from the old one (RFC 1624, eqn. 3): of its words
		 * only the total length and the TTL's change (options, if any, stay as they are). */
		__u16 tot = (l4o - l3) + udp_len;
		__u16 old_ttl = ((__u16)ip->ttl << 8) | ip->protocol;
		__u16 new_ttl = (64 << 8) | ip->protocol;
		__u32 s = (__u16)~bpf_ntohs(ip->check);
		s += (__u16)~bpf_ntohs(ip->tot_len) + tot;
		s += (__u16)~old_ttl + new_ttl;
		ip->tot_len = bpf_htons(tot);
		ip->ttl = 64;
		ip->check = bpf_htons(~fold(s));
	}
	struct udphdr *u = data + l4o;
	barrier_var(u);
	if ((void *)(u + 1) > end)
		return XDP_DROP;
	struct dnshdr *h = data + dns_off;
	barrier_var(h);
	if ((void *)(h + 1) > end)
		return XDP_DROP;
	__be16 port = u->source;
	u->source = u->dest;
	u->dest = port;
	u->len = bpf_htons(udp_len);
	h->flags = bpf_htons(flags);
	h->an = bpf_htons(an);
	h->ns = bpf_htons(ns);
	h->ar = bpf_htons(ar);
	u->check = 0;
	u->check = bpf_htons(reply_csum(psum, u, h, a, body));
	return XDP_TX;
}

/* Finds where the kernel would send a reply of `udp_len` bytes of UDP to the query's source:
 * its route (the source's own neighbour, or the router towards it) out of the interface the
 * query came in on, that neighbour's MAC, and the frame addressed to this interface's own
 * MAC. A forged source is then answered to its owner, never to the frame's sender: an
 * on-link host that forges a victim's address gets no server cookie minted for it, a frame
 * flooded to us for another host's MAC is not answered in that host's name, and a source the
 * kernel would not answer (one of our own addresses, a subnet broadcast, no route, a
 * neighbour not yet resolved, a reply over the route's MTU) passes to dnsd and the kernel.
 * 0 with `rt` filled, or GUARD_C_ANS_PASS_ROUTE. */
static __always_inline int route_reply(struct xdp_md *ctx, const struct guard_pkt *pk,
				       __u32 udp_len, struct guard_route *rt)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 l3 = pk->l3_off & 0xff, l4o = pk->l4_off & 0xff;
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return GUARD_C_ANS_PASS_ROUTE;
	struct udphdr *u = data + l4o;
	barrier_var(u);
	if ((void *)(u + 1) > end)
		return GUARD_C_ANS_PASS_ROUTE;
	struct bpf_fib_lookup f = {};
	f.l4_protocol = IPPROTO_UDP;
	f.sport = u->dest;
	f.dport = u->source;
	f.tot_len = (l4o - l3) + udp_len;
	/* As the kernel routes what a local socket sends: from the loopback device, any way
	 * out, policy rules and all (the helper wants forwarding on the device it is given,
	 * and on lo that forwards nothing from outside: dnsd turns it on). */
	f.ifindex = 1;
	if (pk->v6) {
		struct ipv6hdr *ip6 = data + l3;
		barrier_var(ip6);
		if ((void *)(ip6 + 1) > end)
			return GUARD_C_ANS_PASS_ROUTE;
		f.family = 10; /* AF_INET6 */
		__builtin_memcpy(f.ipv6_src, &ip6->daddr, 16);
		__builtin_memcpy(f.ipv6_dst, &ip6->saddr, 16);
	} else {
		struct iphdr *ip = data + l3;
		barrier_var(ip);
		if ((void *)(ip + 1) > end)
			return GUARD_C_ANS_PASS_ROUTE;
		f.family = 2; /* AF_INET */
		/* tos 0: as dnsd's socket sends its replies. */
		f.ipv4_src = ip->daddr;
		f.ipv4_dst = ip->saddr;
	}
	long r = bpf_fib_lookup(ctx, &f, sizeof(f), 0);
	/* XDP_TX leaves by the interface the query came in on: a reply routed another way is
	 * the kernel's to send. */
	if (r != BPF_FIB_LKUP_RET_SUCCESS || f.ifindex != ctx->ingress_ifindex)
		return GUARD_C_ANS_PASS_ROUTE;
	__u8 *to = eth->h_dest;
	if (to[0] != f.smac[0] || to[1] != f.smac[1] || to[2] != f.smac[2] ||
	    to[3] != f.smac[3] || to[4] != f.smac[4] || to[5] != f.smac[5])
		return GUARD_C_ANS_PASS_ROUTE;
	rt->routed = 1;
	__builtin_memcpy(rt->dmac, f.dmac, ETH_ALEN);
	__builtin_memcpy(rt->smac, f.smac, ETH_ALEN);
	return 0;
}

/* Makes the DNS message at `dns_off` of the `frame_len`-byte frame `dns_len` bytes long (its
 * first `qend` bytes kept): the tail moved, or, when the driver left no tailroom (a virtual
 * NIC's tight buffer), the front, with the headers and the question moved there inside the
 * frame. 0, or the verdict to return. */
static __always_inline int fit(struct xdp_md *ctx, __u32 frame_len, __u32 dns_off, __u32 qend,
			       __u32 dns_len, struct guard_counters *cnt)
{
	int delta = (int)dns_len - (int)(frame_len - dns_off);
	if (delta == 0 || !bpf_xdp_adjust_tail(ctx, delta))
		return 0;
	__u32 hl = dns_off + qend;
	if (delta < 0 || delta > 2047 || hl >= GUARD_HEAD_MAX || hl < 16) {
		cnt->count[GUARD_C_ANS_PASS_ROOM]++;
		return XDP_PASS;
	}
	if (bpf_xdp_adjust_head(ctx, -delta)) {
		cnt->count[GUARD_C_ANS_PASS_ROOM]++;
		return XDP_PASS;
	}
	/* The first `hl` bytes (headers and question) now start `delta` bytes in: moved to the
	 * front in 8-byte words, lowest first (the source lies above the destination, so an
	 * overlap is read before it is written), and the last word, read before any write, put
	 * at hl - 8 (the words need not divide hl). */
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 d = delta & 0x7ff;
	__u32 h = hl & 0xff;
	__u32 last_at = (hl - 8) & 0xff; /* hl >= 16: no wrap */
	barrier_var(last_at);
	__u8 *from_last = data + d + last_at;
	barrier_var(from_last);
	if ((void *)(from_last + 8) > end)
		return XDP_DROP;
	__u64 last;
	__builtin_memcpy(&last, from_last, 8);
	__u32 words = (h - 1) / 8;
	for (__u32 i = 0; i < GUARD_HEAD_MAX / 8; i++) {
		if (i >= words)
			break;
		__u8 *from = data + d + i * 8;
		__u8 *to = data + i * 8;
		barrier_var(from);
		barrier_var(to);
		if ((void *)(from + 8) > end || (void *)(to + 8) > end)
			return XDP_DROP;
		__builtin_memcpy(to, from, 8);
	}
	__u8 *to_last = data + last_at;
	barrier_var(to_last);
	if ((void *)(to_last + 8) > end)
		return XDP_DROP;
	__builtin_memcpy(to_last, &last, 8);
	return 0;
}

/* The source address of the packet at `pk` into `src` (IPv4 mapped) and the service address
 * and port it was sent to into `ak`; 0, or -1 for a frame shorter than its headers. */
static __always_inline int packet_ends(void *data, void *end, const struct guard_pkt *pk,
				       __u8 *src, struct guard_ans_addr_key *ak)
{
	__u32 l3 = pk->l3_off & 0xff, l4o = pk->l4_off & 0xff;
	struct udphdr *udp = data + l4o;
	if ((void *)(udp + 1) > end)
		return -1;
	ak->port = bpf_ntohs(udp->dest);
	__builtin_memset(src, 0, 16);
	if (pk->v6) {
		struct ipv6hdr *ip6 = data + l3;
		if ((void *)(ip6 + 1) > end)
			return -1;
		__builtin_memcpy(ak->addr, &ip6->daddr, 16);
		__builtin_memcpy(src, &ip6->saddr, 16);
	} else {
		struct iphdr *ip = data + l3;
		if ((void *)(ip + 1) > end)
			return -1;
		ak->addr[10] = 0xff;
		ak->addr[11] = 0xff;
		__builtin_memcpy(&ak->addr[12], &ip->daddr, 4);
		src[10] = 0xff;
		src[11] = 0xff;
		__builtin_memcpy(&src[12], &ip->saddr, 4);
	}
	return 0;
}

/* Where the 24 bytes of a COOKIE option with a server cookie start (from the UDP header) in
 * the UDP datagram of `ulen` bytes at `l4o`: its question walked (labels, no compression),
 * then its OPT record — the message's last, and whole — and its options in turn (8 at most),
 * whatever else they are (ECS, padding, NSID, in any order). 0 when there is none, or the
 * message is not of that shape. `b`: 11 bytes of scratch. */
static __always_inline __u32 cookie_offset(struct xdp_md *ctx, __u32 l4o, __u32 ulen, __u8 *b)
{
	__u32 pos = 8 + 12; /* the UDP header, the DNS header */
	int ended = 0;
	for (int i = 0; i < 128; i++) {
		__u8 len;
		if (bpf_xdp_load_bytes(ctx, l4o + pos, &len, 1))
			return 0;
		pos += 1;
		if (len == 0) {
			ended = 1;
			break;
		}
		if (len > 63)
			return 0;
		pos += len;
		/* With the root's zero octet still to come: 255 octets at most. */
		if (pos >= 8 + 12 + 255)
			return 0;
	}
	if (!ended)
		return 0;
	pos += 4; /* type, class */
	/* The OPT record: root owner, type 41, version 0, its data to the datagram's end. */
	if (bpf_xdp_load_bytes(ctx, l4o + pos, b, 11))
		return 0;
	if (b[0] || b[1] || b[2] != 41 || b[6])
		return 0;
	__u32 rdlen = (__u32)b[9] << 8 | b[10];
	pos += 11;
	if (pos + rdlen != ulen)
		return 0;
	for (int i = 0; i < 8; i++) {
		if (pos + 4 > ulen)
			return 0;
		if (bpf_xdp_load_bytes(ctx, l4o + pos, b, 4))
			return 0;
		__u32 code = (__u32)b[0] << 8 | b[1];
		__u32 olen = (__u32)b[2] << 8 | b[3];
		if (code == 10)
			return olen == 24 && pos + 4 + 24 <= ulen ? pos + 4 : 0;
		pos += 4 + olen;
	}
	return 0;
}

/* A UDP query over its source's rate: 1 when it carries a server cookie dnsd (or its previous
 * secret) made for its source — the source read our replies, so the address is its own, and
 * forged packets that spent its bucket must not silence it — and its proven bucket (the same
 * rate, kept apart) has room. One question, and last an OPT record with a COOKIE option of a
 * server cookie: read from the message's last 39 bytes in the shape a resolver usually sends
 * (the only option), else found among the others (ECS, padding: cookie_offset). Checked only
 * for queries already over the rate, with the secrets dnsd gave the service address. A global
 * function: verified once, apart from the many ways here. */
__attribute__((noinline)) int guard_rate_cookie(struct xdp_md *ctx, const struct guard_pkt *pk)
{
	__u32 zero = 0;
	/* Past 255 bytes of headers (IPv6 extension headers), or a proxy's datagram: not looked
	 * at. */
	if (!ctx || !pk || pk->l4_off > 0xff || (pk->cand & GUARD_CAND_PROXIED))
		return 0;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 l4o = pk->l4_off & 0xff;
	struct udphdr *udp = data + l4o;
	if ((void *)(udp + 1) > end)
		return 0;
	__u32 ulen = bpf_ntohs(udp->len);
	/* A header, the root's question at least, the OPT record and its COOKIE option. */
	if (ulen < sizeof(struct udphdr) + 12 + 5 + 39 || ulen > 4096)
		return 0;
	struct guard_ans_scratch *scr = bpf_map_lookup_elem(&guard_ans_tmp, &zero);
	if (!scr)
		return 0;
	/* A query (QR=0, opcode 0), one question, nothing but the OPT in the other sections: a
	 * flood without EDNS stops here. */
	__u8 *b = scr->opt;
	if (bpf_xdp_load_bytes(ctx, l4o + sizeof(struct udphdr), b, 12))
		return 0;
	if ((b[2] & 0xf8) || b[4] || b[5] != 1 || b[6] || b[7] || b[8] || b[9] || b[10] ||
	    b[11] != 1)
		return 0;
	/* The usual shape, in one load: root owner, type 41, version 0, rdlen 28, option 10
	 * (COOKIE) of 24 bytes, last; else the message walked for it (bounded). */
	if (bpf_xdp_load_bytes(ctx, l4o + ulen - 39, b, 39))
		return 0;
	if (b[0] || b[1] || b[2] != 41 || b[6] || b[9] || b[10] != 28 || b[11] || b[12] != 10 ||
	    b[13] || b[14] != 24) {
		__u32 coff = cookie_offset(ctx, l4o, ulen, b);
		if (!coff || bpf_xdp_load_bytes(ctx, l4o + coff, b + 15, 24))
			return 0;
	}
	struct guard_ans_ctx *a = &scr->a;
	__builtin_memcpy(&a->cc, b + 15, 8);
	__builtin_memcpy(&a->sc_head, b + 23, 8);
	__builtin_memcpy(&a->sc_hash, b + 31, 8);
	struct guard_counters *cnt = bpf_map_lookup_elem(&guard_counters, &zero);
	if (!cnt)
		return 0;
	struct guard_ans_addr_key ak = {};
	__u8 *src = scr->src;
	if (packet_ends(data, end, pk, src, &ak))
		return 0;
	struct guard_ans_addr *aa = bpf_map_lookup_elem(&guard_ans_addr, &ak);
	if (!aa || aa->cookie_keys == GUARD_KEYS_NONE)
		return 0;
	/* IPv6 sources that are mapped IPv4 addresses hash as IPv4 in dnsd: not here. */
	if (pk->v6 && !src[0] && !src[1] && !src[8] && src[10] == 0xff && src[11] == 0xff)
		return 0;
	__u32 now_s = (bpf_ktime_get_coarse_ns() + aa->unix_off_ns) / 1000000000ULL;
	if (!cookie_valid(aa, a, src, pk->v6, now_s))
		return 0;
	/* Proven, and limited all the same: at the same rate, in a bucket of its own. */
	struct guard_v6_key key;
	__builtin_memcpy(key.addr, src, 16);
	if (rate_limit(&key, udp->dest, cnt, 1) != GUARD_C_PASS)
		return 0;
	cnt->count[GUARD_C_RATE_COOKIE]++;
	return 1;
}

/* A name's share of a source's second bucket (guard_rate_name): a quarter of its rate and
 * burst, so that a flood of one name leaves three quarters to the source's other names. */
#define GUARD_NAME_SHARE 4

/* Whether a query over its source's rate, without our cookie, is passed all the same: the
 * source has a second bucket at the same rate and burst (key byte 9 = 2), drawn on per name —
 * each name and type (lower-case wire qname and qtype, FNV-1a; key byte 9 = 3) at most a
 * quarter of it. A flood
 * forged in a resolver's name for a few names spends their shares, not its queries for the
 * others (as RRL keys by name); one of many names spends the second bucket as it spent the
 * first, and the source is held to twice the rate. One question of at most GUARD_QNAME_MAX
 * bytes of name, else not passed. A global function: verified once. */
__attribute__((noinline)) int guard_rate_name(struct xdp_md *ctx, const struct guard_pkt *pk)
{
	__u32 zero = 0;
	if (!ctx || !pk || pk->l4_off > 0xff || pk->l3_off > 0xff ||
	    (pk->cand & GUARD_CAND_PROXIED))
		return 0;
	const struct guard_config *cfg = bpf_map_lookup_elem(&guard_config, &zero);
	struct guard_counters *cnt = bpf_map_lookup_elem(&guard_counters, &zero);
	struct guard_ans_scratch *scr = bpf_map_lookup_elem(&guard_ans_tmp, &zero);
	if (!cfg || !cnt || !scr || cfg->cap_units < GUARD_TOKEN_UNIT || !cfg->rate_pps)
		return 0;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 l4o = pk->l4_off & 0xff;
	struct udphdr *udp = data + l4o;
	if ((void *)(udp + 1) > end)
		return 0;
	__u32 ulen = bpf_ntohs(udp->len);
	if (ulen < sizeof(struct udphdr) + 12 + 5 || ulen > 4096)
		return 0;
	/* A query (QR=0, opcode QUERY) of one question, nothing in the answer and authority
	 * sections: what a slip would answer (slip_question), nothing else. */
	__u8 *b = (__u8 *)scr;
	if (bpf_xdp_load_bytes(ctx, l4o + sizeof(struct udphdr), b, 12))
		return 0;
	if ((b[2] & 0xf8) || b[4] || b[5] != 1 || b[6] || b[7] || b[8] || b[9])
		return 0;
	__u32 n = ulen - sizeof(struct udphdr) - 12;
	if (n > GUARD_QNAME_MAX)
		n = GUARD_QNAME_MAX;
	barrier_var(n);
	n &= 0xff;
	if (n < 1 || bpf_xdp_load_bytes(ctx, l4o + sizeof(struct udphdr) + 12, b, n))
		return 0;
	/* The name's end, label by label (as slip_question walks it: a loop the verifier
	 * bounds cheaply); then the name and its type loaded again over zeroes and hashed as a
	 * fixed window, lower-cased (a length byte, at most 63, is never a capital letter): a
	 * loop that depends on the name's length would be verified again for each length. */
	__u32 end_i = 0;
	for (int k = 0; k < GUARD_QNAME_MAX / 2 + 1; k++) {
		if (end_i >= GUARD_QNAME_MAX || end_i >= n)
			return 0;
		/* Masked in a register the compiler cannot see through (it dropped the mask it
		 * knew redundant, and indexed with an unbounded copy). */
		__u32 j = end_i;
		barrier_var(j);
		__u8 l = b[j & (GUARD_QNAME_MAX - 1)];
		if (l == 0)
			break;
		if (l > 63)
			return 0;
		end_i += l + 1;
	}
	if (end_i >= GUARD_QNAME_MAX)
		return 0;
	/* Its type, read apart (not lower-cased with the name: types 65 and 97 are others). */
	__u8 qt[2];
	if (bpf_xdp_load_bytes(ctx, l4o + sizeof(struct udphdr) + 12 + end_i + 1, qt, 2))
		return 0;
	__u32 len = end_i + 1;
	barrier_var(len);
	len &= 0xff; /* on the register passed to the load, whatever copy the check uses */
	__builtin_memset(b, 0, GUARD_QNAME_MAX + 8);
	if (len < 1 || len > GUARD_QNAME_MAX ||
	    bpf_xdp_load_bytes(ctx, l4o + sizeof(struct udphdr) + 12, b, len))
		return 0;
	__u64 hash = GUARD_FNV_OFFSET;
	for (int i = 0; i < GUARD_QNAME_MAX; i++) {
		__u8 c = b[i];
		if (c >= 'A' && c <= 'Z')
			c += 32;
		hash = (hash ^ c) * GUARD_FNV_PRIME;
	}
	hash = (hash ^ qt[0]) * GUARD_FNV_PRIME;
	hash = (hash ^ qt[1]) * GUARD_FNV_PRIME;

	/* The keys: the source's as rate_limit makes it (an IPv6 source's /64), byte 9 marking
	 * the second bucket (2) and the name's share (3, the hash over the half the source's key
	 * leaves zero). */
	__u8 *src = scr->src;
	struct guard_ans_addr_key ak = {};
	if (packet_ends(data, end, pk, src, &ak))
		return 0;
	struct guard_v6_key second, share;
	int v4 = source_key(src, &second);
	share = second;
	/* The hash over the half of the key the source leaves zero. */
	__builtin_memcpy(v4 ? share.addr : share.addr + 8, &hash, 8);
	second.addr[9] = 2;
	share.addr[9] = 3;

	__u64 now = bpf_ktime_get_ns();
	/* A name's share: the second bucket's size and rate, each packet costing four of its
	 * tokens (a quarter, exactly, whatever the rate) — or the whole burst where it holds
	 * fewer than four. */
	__u64 cap = cfg->cap_units, rate = cfg->rate_pps, fill = cfg->fill_ns;
	__u64 cost = GUARD_NAME_SHARE * GUARD_TOKEN_UNIT;
	if (cost > cap)
		cost = cap;
	/* A name whose share is spent costs the second bucket nothing. */
	struct guard_bucket *nb = bpf_map_lookup_elem(&guard_rate, &share);
	if (nb && !bucket_take(nb, cap, rate, fill, now, cost, 0))
		return 0;
	struct guard_bucket *sb = bpf_map_lookup_elem(&guard_rate, &second);
	if (sb) {
		if (!bucket_take(sb, cap, rate, fill, now, GUARD_TOKEN_UNIT, 1))
			return 0;
	} else {
		struct guard_bucket fresh = { .tokens = cap - GUARD_TOKEN_UNIT, .last_ns = now };
		bpf_map_update_elem(&guard_rate, &second, &fresh, BPF_ANY);
	}
	if (nb) {
		bucket_take(nb, cap, rate, fill, now, cost, 1);
	} else {
		struct guard_bucket fresh = { .tokens = cap - cost, .last_ns = now };
		bpf_map_update_elem(&guard_rate, &share, &fresh, BPF_ANY);
	}
	cnt->count[GUARD_C_RATE_NAME]++;
	return 1;
}

/* Whether the UDP source port `port` (network order) is one no DNS client sends from: 0, or a
 * service that answers any datagram (echo 7, daytime 13, qotd 17, chargen 19, time 37) — as
 * dnsd's reflector_port. */
static __always_inline int reflector_port(__be16 port)
{
	__u16 p = bpf_ntohs(port);
	return p == 0 || p == 7 || p == 13 || p == 17 || p == 19 || p == 37;
}

/* Whether the frame of `pk` may be answered as the kernel would take it: no VLAN tag or group
 * MAC, no IPv4 options or fragment, a header checksum the kernel takes, a source to answer
 * (v4_answerable, v6_answerable), UDP directly after the IPv6 header, the IP length the
 * datagram's, a source port neither 0 nor a service that answers any datagram, and over IPv6
 * a checksum. (classify works this out for a candidate of the answer path; a query over the
 * rate leaves it before, and so few are slipped that it is worked out again here.) */
static __always_inline int slip_frame(void *data, void *end, const struct guard_pkt *pk)
{
	if (pk->odd)
		return 0;
	__u32 l3 = pk->l3_off & 0xff, l4o = pk->l4_off & 0xff;
	struct udphdr *udp = data + l4o;
	if ((void *)(udp + 1) > end)
		return 0;
	__u32 l4_len;
	if (pk->v6) {
		struct ipv6hdr *ip6 = data + l3;
		if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_UDP ||
		    l4o != l3 + sizeof(*ip6) || !v6_answerable(ip6) || !udp->check)
			return 0;
		l4_len = bpf_ntohs(ip6->payload_len);
	} else {
		struct iphdr *ip = data + l3;
		if ((void *)(ip + 1) > end || ip->ihl != 5 || (ip->frag_off & bpf_htons(0x3fff)) ||
		    !v4_answerable(ip))
			return 0;
		l4_len = bpf_ntohs(ip->tot_len) - sizeof(*ip);
	}
	return bpf_ntohs(udp->len) == l4_len && !reflector_port(udp->source);
}

/* For a slip: the query's flags, the end of its question and the question's sum into `a`,
 * the question read into `scr` (over its key and qname: 160 bytes); 0, or -1 for a message
 * that is no plain query of one question of at most GUARD_QNAME_MAX bytes of name. Lighter
 * than parse_query (no lower case, no hash): the program's whole verification is bounded. */
static __always_inline int slip_question(struct xdp_md *ctx, __u32 dns_off, __u32 msg_len,
					 struct guard_ans_scratch *scr, struct guard_ans_ctx *a)
{
	__u8 *b = (__u8 *)scr;
	if (msg_len < 12 + 1 + 4 || msg_len > 4096)
		return -1;
	if (bpf_xdp_load_bytes(ctx, dns_off, b, 12))
		return -1;
	/* QR=0, opcode QUERY, one question, no answer or authority records. */
	if ((b[2] & 0xf8) || b[4] || b[5] != 1 || b[6] || b[7] || b[8] || b[9])
		return -1;
	a->qflags = ((__u16)b[2] << 8) | b[3];
	__u32 n = msg_len - 12;
	if (n > GUARD_QNAME_MAX + 4)
		n = GUARD_QNAME_MAX + 4;
	n &= 0xff;
	if (n < 5 || bpf_xdp_load_bytes(ctx, dns_off + 12, b, n))
		return -1;
	__u32 i = 0;
	for (int k = 0; k < GUARD_QNAME_MAX / 2 + 1; k++) {
		if (i >= GUARD_QNAME_MAX)
			return -1;
		__u8 l = b[i & 0xff];
		if (l == 0)
			break;
		if (l > 63)
			return -1;
		i += l + 1;
	}
	if (i >= GUARD_QNAME_MAX)
		return -1;
	__u32 qlen = i + 1 + 4;
	if (qlen > n)
		return -1;
	/* Its sum is guard_slip_send's: the paths out of the loop above are many, and each
	 * would verify all that follows. */
	a->qend = 12 + qlen;
	return 0;
}

/* guard_rate_slip's reply to the query parsed into `scr`: its question alone with TC=1, sent
 * where the kernel's route to the source leads (or back to the sender where the answered
 * address says so); XDP_TX, or XDP_DROP. A global function: verified apart from the parser. */
__attribute__((noinline)) int guard_slip_send(struct xdp_md *ctx, struct guard_ans_scratch *scr)
{
	__u32 zero = 0;
	struct guard_counters *cnt = bpf_map_lookup_elem(&guard_counters, &zero);
	if (!ctx || !scr || !cnt)
		return XDP_DROP;
	const struct guard_ans_ctx *a = &scr->a;
	const struct guard_pkt *pk = &scr->pk;
	if (pk->l4_off > 0xff || pk->l3_off > 0xff)
		return XDP_DROP;
	struct guard_ans_addr_key ak = {};
	__u8 src[16];
	if (packet_ends((void *)(long)ctx->data, (void *)(long)ctx->data_end, pk, src, &ak))
		return XDP_DROP;
	const struct guard_ans_addr *aa = bpf_map_lookup_elem(&guard_ans_addr, &ak);
	int to_sender = aa && aa->reply_to_sender;
	__u32 dns_off = (pk->l4_off & 0xff) + sizeof(struct udphdr);
	__u32 frame_len = a->frame_len & 0xffff;
	__u32 qend = a->qend;
	if (qend < 12 + 5 || qend > 12 + GUARD_QNAME_MAX + 4)
		return XDP_DROP;
	/* The question's sum, from a copy zero past its end (the scratch's key and qname, 160
	 * bytes): one pass without a branch. */
	__u32 qlen = qend - 12;
	__u8 *b = (__u8 *)scr;
	__builtin_memset(b, 0, GUARD_QNAME_MAX + 32);
	qlen &= 0xff;
	if (qlen < 5 || bpf_xdp_load_bytes(ctx, dns_off + 12, b, qlen))
		return XDP_DROP;
	__u32 sum = 0;
	for (__u32 k = 0; k < (GUARD_QNAME_MAX + 4) / 2; k++)
		sum += ((__u32)b[(2 * k) & 0xff] << 8) | b[(2 * k + 1) & 0xff];
	scr->a.qsum = sum;
	struct guard_route rt = {};
	if (!to_sender && route_reply(ctx, pk, 8 + qend, &rt))
		return XDP_DROP;
	/* The reply is the query cut after its question: the tail only shrinks. */
	int delta = (int)qend - (int)(frame_len - dns_off);
	if (delta > 0 || (delta < 0 && bpf_xdp_adjust_tail(ctx, delta)))
		return XDP_DROP;
	__u16 flags = DNS_QR | DNS_TC | (a->qflags & (DNS_RD | DNS_CD));
	return finish_reply(ctx, pk, dns_off, qend, flags, 0, 0, 0, a, 0, &rt);
}

/* A UDP query over its source's rate, without our cookie, in a frame the kernel takes as
 * sent: XDP_TX with the query turned into its TC=1 reply (the question alone, no OPT: never
 * more bytes than came) for one in `slip` of them (the answered address's RRL slip, else 2),
 * sent where the kernel's route to the source leads — else XDP_DROP. A global function. */
__attribute__((noinline)) int guard_rate_slip(struct xdp_md *ctx, const struct guard_pkt *pk)
{
	__u32 zero = 0;
	if (!ctx || !pk || pk->l4_off > 0xff || pk->l3_off > 0xff)
		return XDP_DROP;
	struct guard_counters *cnt = bpf_map_lookup_elem(&guard_counters, &zero);
	struct guard_ans_scratch *scr = bpf_map_lookup_elem(&guard_ans_tmp, &zero);
	if (!cnt || !scr)
		return XDP_DROP;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (!slip_frame(data, end, pk))
		return XDP_DROP;
	struct guard_ans_addr_key ak = {};
	__u8 *src = scr->src;
	if (packet_ends(data, end, pk, src, &ak))
		return XDP_DROP;
	/* Only to a DNS service address and port of ours: an address dnsd wrote for the fast
	 * path (its RRL's slip; answering or not: an entry only for the cookie secrets, or one
	 * suspended during a reload, is ours all the same), else one of dnsd's service addresses
	 * (guard_svc, with its slip) — never a destination we do not own, a broadcast, or another
	 * daemon's port. */
	const struct guard_ans_addr *aa = bpf_map_lookup_elem(&guard_ans_addr, &ak);
	__u32 slip;
	if (aa) {
		slip = aa->slip;
	} else {
		struct guard_lpm_v6_key sk = { .prefixlen = 128 };
		__builtin_memcpy(sk.addr, ak.addr, 16);
		const struct guard_svc *svc = bpf_map_lookup_elem(&guard_svc, &sk);
		if (!svc || svc->port != ak.port)
			return XDP_DROP;
		slip = (svc->reserved & GUARD_SVC_SLIP_SET) ? (svc->reserved & 0xff) : 2;
	}
	/* One in `slip` of this CPU's over-rate queries: those dropped and slipped so far. */
	__u64 seen = cnt->count[GUARD_C_DROP_RATELIMIT] + cnt->count[GUARD_C_RATE_SLIP];
	if (slip == 0 || slip > 64 || seen % slip != 0)
		return XDP_DROP;
	__u32 l4o = pk->l4_off & 0xff;
	struct udphdr *udp = data + l4o;
	if ((void *)(udp + 1) > end)
		return XDP_DROP;
	__u32 frame_len = (long)end - (long)data;
	__u32 dns_off = l4o + sizeof(struct udphdr);
	__u32 msg_end = l4o + bpf_ntohs(udp->len);
	if (bpf_ntohs(udp->len) < sizeof(struct udphdr) + sizeof(struct dnshdr) || msg_end > frame_len)
		return XDP_DROP;
	struct guard_ans_ctx *a = &scr->a;
	__builtin_memset(a, 0, sizeof(*a));
	if (slip_question(ctx, dns_off, msg_end - dns_off, scr, a))
		return XDP_DROP;
	scr->pk = *pk;
	a->frame_len = frame_len;
	return guard_slip_send(ctx, scr);
}

/* Sends dnsd's answer `v` (found for the query parsed into `scr`) to the client at `aa`'s
 * address, or its RRL slip, or passes: XDP_TX, XDP_PASS, XDP_DROP or GUARD_RRL_DROP; `now` is
 * CLOCK_MONOTONIC (coarse). A global function: verified once, apart from the parser's many
 * ways here. */
__attribute__((noinline)) int send_answer(struct xdp_md *ctx, struct guard_ans_scratch *scr,
					  const struct guard_ans_addr *aa,
					  const struct guard_answer *v, __u64 now)
{
	__u32 zero = 0;
	struct guard_counters *cnt = bpf_map_lookup_elem(&guard_counters, &zero);
	if (!ctx || !scr || !aa || !v || !cnt)
		return XDP_PASS;
	const struct guard_ans_ctx *a = &scr->a;
	const struct guard_pkt *pk = &scr->pk;
	const __u8 *src = scr->src;
	int v6 = pk->v6;
	__u8 variant = scr->key.variant;
	__u32 dns_off = (pk->l4_off & 0xff) + sizeof(struct udphdr);
	__u32 frame_len = a->frame_len & 0xffff;
	/* A cookie: answered as dnsd would (the COOKIE option appended to the answer's OPT),
	 * ignored where dnsd ignores it, else passed. */
	__u32 extra = 0;
	if (a->cookie && v->cookie != GUARD_COOKIE_IGNORE) {
		/* IPv6 sources that are mapped IPv4 addresses hash as IPv4 in dnsd: left to it. */
		int mapped = v6 && !src[0] && !src[1] && !src[8] && src[10] == 0xff &&
			     src[11] == 0xff;
		if (v->cookie != GUARD_COOKIE_ANSWER || aa->cookie_keys == GUARD_KEYS_NONE ||
		    mapped) {
			answer_allowed(src, v6, aa, v->rrl_key, 1, now);
			cnt->count[GUARD_C_ANS_PASS_COOKIE]++;
			return XDP_PASS;
		}
		extra = 28;
	}
	/* The most dnsd sends this client (response::size_limit). */
	__u32 limit = 512;
	if (variant != GUARD_V_NO_EDNS) {
		__u32 ours = aa->udp_payload < 512 ? 512 : aa->udp_payload;
		limit = a->client < ours ? a->client : ours;
	}
	__u32 len = v->len;
	__u32 qend = a->qend;
	if (len == 0 || (extra && len < 11) || len > GUARD_ANSWER_MAX ||
	    qend > 12 + GUARD_QNAME_MAX + 4 || qend + len + extra > limit) {
		answer_allowed(src, v6, aa, v->rrl_key, 1, now);
		cnt->count[GUARD_C_ANS_PASS_SIZE]++;
		return XDP_PASS;
	}
	/* Where the reply goes, before anything is counted or charged: a query whose reply the
	 * kernel's routes do not send back out this interface to a known neighbour passes (the
	 * answer's length bounds the slip's too, for the route's MTU). */
	struct guard_route rt = {};
	if (!aa->reply_to_sender && route_reply(ctx, pk, 8 + qend + len + extra, &rt)) {
		cnt->count[GUARD_C_ANS_PASS_ROUTE]++;
		return XDP_PASS;
	}
	/* A valid server cookie proves the source address: no rate limit, as in dnsd; nor for a
	 * source of [defence.rrl] exempt. */
	int exempt = pk->rrl_exempt;
	int proven = 0;
	__u32 now_s = 0;
	if (extra) {
		now_s = (now + aa->unix_off_ns) / 1000000000ULL;
		if (a->cookie == 24) {
			proven = cookie_valid(aa, a, src, v6, now_s);
			cnt->count[proven ? GUARD_C_ANS_COOKIE_VALID : GUARD_C_ANS_COOKIE_INVALID]++;
		}
	}
	exempt |= proven;
	int allowed = exempt ? 1 : answer_allowed(src, v6, aa, v->rrl_key, 0, now);
	if (allowed == 0) {
		cnt->count[GUARD_C_ANS_RRL_DROP]++;
		return GUARD_RRL_DROP;
	}
	__u8 *o = scr->opt;
	if (allowed == 2) {
		/* Slipped as dnsd's RRL slips (response::slip): the question and our OPT, with
		 * TC=1 — or, to a client that sent a cookie, BADCOOKIE with a fresh one. */
		cnt->count[GUARD_C_ANS_SLIP]++;
		__builtin_memset(o, 0, sizeof(scr->opt));
		__u32 olen = 0;
		__u16 flags = DNS_QR | (a->qflags & (DNS_RD | DNS_CD));
		if (variant != GUARD_V_NO_EDNS) {
			o[2] = 41;
			o[3] = aa->udp_payload >> 8;
			o[4] = aa->udp_payload & 0xff;
			o[7] = variant == GUARD_V_EDNS_DO ? 0x80 : 0;
			olen = 11;
			if (extra) {
				o[5] = 1; /* BADCOOKIE (23): its upper bits */
				o[10] = 28;
				make_cookie(aa, a, src, v6, now_s, o + 11);
				olen = 39;
			}
		}
		flags |= extra ? 7 : DNS_TC;
		__u32 dlen = qend + olen;
		int r = fit(ctx, frame_len, dns_off, qend, dlen, cnt);
		if (r)
			return r;
		if (olen == 11 && bpf_xdp_store_bytes(ctx, dns_off + qend, o, 11))
			return XDP_DROP;
		if (olen == 39 && bpf_xdp_store_bytes(ctx, dns_off + qend, o, 39))
			return XDP_DROP;
		return finish_reply(ctx, pk, dns_off, dlen, flags, 0, 0, olen != 0, a,
				    sum_at(o, 39, qend), &rt);
	}
	__u32 dns_len = qend + len + extra;
	int r = fit(ctx, frame_len, dns_off, qend, dns_len, cnt);
	if (r)
		return r;
	if (bpf_xdp_store_bytes(ctx, dns_off + qend, (void *)v->data, len)) {
		/* Cannot happen once the tail grew; the frame is no query any more: drop. */
		return XDP_DROP;
	}

	__u32 body = v->csum;
	/* The answer starts right after the question: at an odd offset its bytes pair the other
	 * way round, which swaps the bytes of its sum. */
	if (qend & 1)
		body = ((body >> 8) | (body << 8)) & 0xffff;
	if (extra) {
		/* The OPT record is the answer's last (rdlen 0, checked when dnsd compiled it):
		 * its rdlen becomes 28, and the COOKIE option follows. */
		o[0] = 0;
		o[1] = 28;
		make_cookie(aa, a, src, v6, now_s, o + 2);
		if (bpf_xdp_store_bytes(ctx, dns_off + qend + len - 2, o, 30))
			return XDP_DROP;
		body += sum_at(o, 30, qend + len - 2);
	}
	return finish_reply(ctx, pk, dns_off, dns_len, v->flags | (a->qflags & (DNS_RD | DNS_CD)),
			    v->an, v->ns, v->ar, a, body, &rt);
}

/* Counts `reason` for a UDP packet the fast path passed untried when its destination is an
 * address and port answered here (a query dnsd will answer instead): other UDP is not the
 * fast path's to count. */
static __always_inline void count_unanswered(struct xdp_md *ctx, const struct guard_pkt *pk,
					     struct guard_counters *cnt, __u32 reason)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct guard_ans_addr_key ak = {};
	__u8 src[16];
	if (pk->l3_off > 0xff || pk->l4_off > 0xff || packet_ends(data, end, pk, src, &ak))
		return;
	const struct guard_ans_addr *aa = bpf_map_lookup_elem(&guard_ans_addr, &ak);
	if (aa && aa->on && reason < GUARD_COUNTERS)
		cnt->count[reason]++;
}

/* Whether the names `a` and `b` (both zero padded to GUARD_QNAME_MAX) are equal: a hash match
 * is no name match, as the key holds only the name's hash. */
static __always_inline int same_name(const __u8 *a, const __u8 *b)
{
	const __u64 *x = (const __u64 *)a, *y = (const __u64 *)b;
	__u64 diff = 0;
#pragma unroll
	for (int i = 0; i < GUARD_QNAME_MAX / 8; i++)
		diff |= x[i] ^ y[i];
	return diff == 0;
}

/* The answer fast path for a candidate (`known`: its address's entry, if classify looked it
 * up): XDP_TX with dnsd's reply written in place, or XDP_PASS with the reason counted (or
 * send_answer's other verdicts). */
static __always_inline int try_answer(struct xdp_md *ctx, const struct guard_pkt *pk,
				      struct guard_counters *cnt, const struct guard_ans_addr *known)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u32 l4o = pk->l4_off & 0xff;
	struct udphdr *udp = data + l4o;
	if ((void *)(udp + 1) > end)
		return XDP_PASS;
	/* A forged source no client sends from: left to dnsd, which drops it. */
	if (reflector_port(udp->source)) {
		cnt->count[GUARD_C_ANS_PASS_QUERY]++;
		return XDP_PASS;
	}

	__u32 zero = 0;
	struct guard_ans_scratch *scr = bpf_map_lookup_elem(&guard_ans_tmp, &zero);
	if (!scr)
		return XDP_PASS;
	struct guard_ans_addr_key ak = {};
	__u8 *src = scr->src;
	if (packet_ends(data, end, pk, src, &ak))
		return XDP_PASS;
	/* `known`: classify's look-up of the same address and port, when it made one. */
	const struct guard_ans_addr *aa = (pk->cand & GUARD_CAND_ADDR_SEEN)
						  ? known
						  : bpf_map_lookup_elem(&guard_ans_addr, &ak);
	/* The one clock read of an answer (lease, RRL buckets, cookie timestamps): coarse, as
	 * none of them needs more than milliseconds. */
	__u64 now = bpf_ktime_get_coarse_ns();
	if (!aa || !aa->on || aa->expires_ns < now) {
		cnt->count[GUARD_C_ANS_PASS_NO_ADDR]++;
		return XDP_PASS;
	}

	struct guard_ans_key *k = &scr->key;
	__builtin_memset(k, 0, sizeof(*k));
	__builtin_memset(scr->qname, 0, sizeof(scr->qname));
	struct guard_ans_ctx *a = &scr->a;
	__builtin_memset(a, 0, sizeof(*a));
	scr->pk = *pk;
	__u32 dns_off = l4o + sizeof(struct udphdr);
	__u32 frame_len = (long)end - (long)data;
	a->frame_len = frame_len;
	__u32 msg_end = l4o + bpf_ntohs(udp->len);
	if (bpf_ntohs(udp->len) < sizeof(struct udphdr) + sizeof(struct dnshdr) || msg_end > frame_len) {
		cnt->count[GUARD_C_ANS_PASS_QUERY]++;
		return XDP_PASS;
	}
	int r = parse_query(ctx, data, end, dns_off, msg_end, k, scr->qname, a);
	if (r) {
		cnt->count[GUARD_C_ANS_PASS_QUERY]++;
		return XDP_PASS;
	}
	__builtin_memcpy(k->addr, ak.addr, 16);
	k->port = ak.port;
	k->gen = aa->gen;
	struct guard_answer *v = bpf_map_lookup_elem(&guard_answers, k);
	if (!v || !same_name(scr->qname, v->qname)) {
		/* dnsd answers it, under its own RRL: charged to no RRL account of ours (a forged
		 * flood of names we do not answer here never limits the answers we do); it meets
		 * the source's rate after (guard_rate_later). */
		cnt->count[GUARD_C_ANS_PASS_MISS]++;
		return XDP_PASS;
	}
	return send_answer(ctx, scr, aa, v, now);
}

#endif /* PALISADE_GUARD_ANSWER_H */
