/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Map layouts shared by the XDP program (guard.c) and userspace (src/maps.rs).
 *
 * This header is the single definition of every key, value and index that crosses the
 * kernel/userspace boundary. src/maps.rs mirrors it with #[repr(C)] types; build.rs compiles
 * a probe of this header and the Rust side asserts at compile time that sizes and offsets
 * match. The _Static_asserts below pin the sizes for the BPF target as well.
 *
 * Addresses are stored in network byte order. Block expiry times are CLOCK_BOOTTIME
 * nanoseconds (bpf_ktime_get_boot_ns); the answer path's lease and cookie clock are
 * CLOCK_MONOTONIC (bpf_ktime_get_coarse_ns: one cheap read per answer, no clock source read).
 *
 * A block entry holds one expiry per writer slot (dnsd, http-front, rules, operator):
 * the program drops while any slot is live, and each writer sets and clears only its own
 * slot (userspace read-modify-writes under an flock of the pin directory), so two writers of
 * one key never undo each other and a stopped writer's blocks stay until they expire.
 * Each slot has a scope: every packet, or (its bit in dns_only) only UDP to a DNS service
 * address and port (guard_svc, written by dnsd): what dnsd proved over UDP with a cookie
 * never touches another protocol or another address of the node.
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
#define GUARD_MAP_ANSWERS "guard_answers"
#define GUARD_MAP_ANS_ADDR "guard_ans_addr"
#define GUARD_MAP_ANS_SCRATCH "guard_ans_tmp"
#define GUARD_MAP_ANS_RATE "guard_ans_rate"
#define GUARD_MAP_SVC "guard_svc"
#define GUARD_MAP_PROXY "guard_proxy"
#define GUARD_MAP_NEVER "guard_never"

/* Default map sizes; userspace overrides them at load time from its config. */
#define GUARD_DEFAULT_BLOCK_V4_ENTRIES 262144
#define GUARD_DEFAULT_BLOCK_V6_ENTRIES 131072
#define GUARD_DEFAULT_PREFIX_V4_ENTRIES 16384
#define GUARD_DEFAULT_PREFIX_V6_ENTRIES 16384
#define GUARD_DEFAULT_RATE_ENTRIES 65536
#define GUARD_DEFAULT_ALLOW_ENTRIES 16384
#define GUARD_DEFAULT_ANSWER_ENTRIES 65536
#define GUARD_DEFAULT_ANS_ADDR_ENTRIES 65536
#define GUARD_DEFAULT_ANS_RATE_ENTRIES 65536
#define GUARD_DEFAULT_SVC_ENTRIES 16384
#define GUARD_DEFAULT_PROXY_ENTRIES 1024
#define GUARD_DEFAULT_SUSPECT_ENTRIES 65536
#define GUARD_DEFAULT_NEVER_ENTRIES 65536
/* guard_suspect value of a [defence.rrl] exempt prefix (not a suspect: no RRL in XDP). */
#define GUARD_RRL_EXEMPT 1ULL

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
/* The answer fast path (XDP_TX answers count as the verdict GUARD_C_ANSWERED). */
#define GUARD_C_ANSWERED 13           /* answered from guard_answers with XDP_TX */
#define GUARD_C_ANS_PASS_NO_ADDR 14   /* passed: no dnsd answers for this address:port (or suspended) */
#define GUARD_C_ANS_PASS_QUERY 15     /* passed: a query the program does not answer (flags, counts, class, options, TCP...) */
#define GUARD_C_ANS_PASS_MISS 16      /* passed: no answer for this name, type and EDNS variant */
#define GUARD_C_ANS_PASS_SIZE 17      /* passed: the answer does not fit the client's limit (dnsd truncates) */
#define GUARD_C_ANS_PASS_ROOM 18      /* passed: the frame has no room to grow into the answer (driver's buffer) */
#define GUARD_C_ANS_RRL_DROP 19       /* over the answer rate (RRL in XDP): dropped (also a DROP_RATELIMIT verdict) */
#define GUARD_C_ANS_SLIP 20           /* over the answer rate: answered TC=1 instead (one in `slip`) */
#define GUARD_C_ANS_COOKIE_VALID 21   /* a server cookie verified in XDP (exempt from RRL there) */
#define GUARD_C_ANS_COOKIE_INVALID 22 /* a server cookie that failed (answered, rate-limited) */
#define GUARD_C_ANS_PASS_COOKIE 23    /* passed: a cookie the answer cannot carry byte-for-byte */
#define GUARD_C_RATE_COOKIE 24        /* over the per-source rate, passed: our server cookie (a proven source) */
#define GUARD_C_ANS_PASS_FRAME 25     /* passed: a query to an answered address in a frame not answered here (group MAC, VLAN tag, IP options, fragment, martian, bad lengths or checksum) */
#define GUARD_C_ANS_PASS_SUSPECT 26   /* passed: a query to an answered address from one of dnsd's suspects */
#define GUARD_C_ANS_PASS_ROUTE 27     /* passed: the kernel's route to the source does not lead back out this interface to a known neighbour, or the frame was sent to another MAC */
#define GUARD_C_RATE_SLIP 28          /* over the per-source rate without our cookie: answered TC=1 with its question alone (one in `slip`), the rest dropped */
#define GUARD_C_NEVER_BLOCK 29        /* a block found for a source one of the node's daemons never blocks (guard_never): passed */
#define GUARD_C_RATE_NAME 30          /* over the per-source rate without our cookie, passed: its name's share of the source's second bucket had room */
#define GUARD_COUNTERS 31

/* The answer fast path. */
#define GUARD_QNAME_MAX 128   /* longest wire qname answered in XDP (longer ones pass) */
#define GUARD_ANSWER_MAX 1232 /* longest answer tail (after the question) */
/* guard_ans_key.variant */
#define GUARD_V_NO_EDNS 0
#define GUARD_V_EDNS 1
#define GUARD_V_EDNS_DO 2
/* guard_answer.cookie: what dnsd does with a DNS cookie (RFC 7873) in a query for the entry */
#define GUARD_COOKIE_PASS 0   /* nothing known: such queries pass to dnsd */
#define GUARD_COOKIE_IGNORE 1 /* cookies off for the zone: the same answer, no cookie */
#define GUARD_COOKIE_ANSWER 2 /* the answer with a COOKIE option appended to its OPT (last RR) */
/* guard_ans_addr.cookie_keys */
#define GUARD_KEYS_NONE 0     /* no secret: cookie queries of GUARD_COOKIE_ANSWER entries pass */
#define GUARD_KEYS_CURRENT 1  /* the current secret */
#define GUARD_KEYS_BOTH 2     /* the current and the previous secret (both verify) */

/* guard_ans_addr key: a service address (IPv4 as ::ffff:a.b.c.d) and UDP port. */
struct guard_ans_addr_key {
	__u8 addr[16];
	__u16 port; /* host order */
	__u16 pad;
};

/* guard_ans_addr value: which generation of answers is live for the address (the writer flips
 * it after writing a whole new generation), whether answering is on, dnsd's EDNS payload, and
 * the answer rate per source prefix (dnsd's [defence.rrl]: beyond it, queries pass to dnsd). */
struct guard_ans_addr {
	__u8 gen;
	__u8 on;
	__u16 udp_payload;
	__u32 rate;      /* answers per second per source prefix (per CPU); 0: not limited */
	__u8 v4_prefix;  /* source prefix lengths of the rate's buckets */
	__u8 v6_prefix;
	__u8 cookie_keys; /* GUARD_KEYS_*: which of the secrets below are set */
	__u8 reply_to_sender; /* 1: replies go back to the frame's sender, no route look-up
			       * (a point-to-point link); 0: where the kernel's routes send them */
	__u32 slip;       /* over the rate, one reply in `slip` is TC=1 (0: none), as dnsd's RRL */
	__u64 expires_ns; /* CLOCK_MONOTONIC: answering stops after this unless the writer renews
			   * it (a dnsd that died leaves no answers behind for long) */
	__u64 secret[2];  /* RFC 9018 SipHash-2-4 key (k0, k1: the 16 secret bytes, little endian) */
	__u64 previous[2]; /* the previous secret, still accepted */
	__u64 unix_off_ns; /* Unix time minus CLOCK_MONOTONIC, in ns (cookie timestamps) */
};

/* guard_answers key: address, port, generation, EDNS variant, qtype, and the lower-case wire
 * qname as its length and its FNV-1a hash (a short key hashes fast; the name itself is in the
 * value and compared before anything is answered, so two names of one hash never mix). */
struct guard_ans_key {
	__u8 addr[16];
	__u16 port;
	__u8 gen;
	__u8 variant;
	__u16 qtype;
	__u16 qname_len;
	__u64 name_hash;
};

/* FNV-1a, 64 bits, over the lower-case wire qname (what guard_ans_key.name_hash holds). */
#define GUARD_FNV_OFFSET 0xcbf29ce484222325ULL
#define GUARD_FNV_PRIME 0x100000001b3ULL

/* Most header bytes (Ethernet to the end of the question) moved when a reply grows at the
 * front of the frame instead of its end. */
#define GUARD_HEAD_MAX 256

/* Where the program's parser found a packet's layers (offsets from the frame start). */
struct guard_pkt {
	__u32 l3_off;
	__u32 l4_off;
	__u8 v6;
	__u8 odd;        /* never answered in XDP: a VLAN tag, or a group MAC (set by classify) */
	__u8 rrl_exempt; /* the source is in [defence.rrl] exempt: no RRL in XDP (set by l4) */
	__u8 cand;       /* GUARD_CAND_*: what classify settled for a candidate (set by l4) */
};

/* guard_pkt.cand: the per-source rate is met only if the fast path does not answer. */
#define GUARD_CAND_RATE_LATER 1
/* guard_pkt.cand: the address's guard_ans_addr entry was looked up (found or not). */
#define GUARD_CAND_ADDR_SEEN 2
/* guard_pkt.cand: a listed proxy's datagram (its payload a PROXY header, not a query). */
#define GUARD_CAND_PROXIED 4

/* A query the answer fast path parsed: where the answer goes, and its cookie. */
struct guard_ans_ctx {
	__u32 dns_off;   /* offset of the DNS header from the frame start */
	__u32 qend;      /* offset of the end of the question from the DNS header */
	__u32 qsum;      /* one's complement sum of the question bytes (from an even offset) */
	__u16 qflags;    /* the query's flags (host order) */
	__u16 limit;     /* the most dnsd would send this client over UDP */
	__u16 client;    /* EDNS UDP size of the query (0: no EDNS) */
	__u16 cookie;    /* the query's COOKIE option length: 0 (none), 8 (client), 24 (both) */
	__u32 frame_len; /* bytes in the frame as received */
	__u64 cc;        /* the client cookie, as its bytes */
	__u64 sc_head;   /* the server cookie's version, reserved bytes and timestamp */
	__u64 sc_hash;   /* the server cookie's hash */
};

/* guard_ans_tmp value: the query being answered (too big for the stack beside the rest), and
 * room for an OPT record being built. */
struct guard_ans_scratch {
	struct guard_ans_key key;
	__u8 qname[GUARD_QNAME_MAX]; /* the query's lower-case wire qname, zero padded */
	struct guard_ans_ctx a;
	struct guard_pkt pk;
	__u8 src[16];    /* the query's source address (IPv4 mapped) */
	__u8 opt[44];    /* an OPT record and COOKIE option being built (39 bytes) */
};
#define GUARD_ANS_SCRATCH_SIZE (sizeof(struct guard_ans_scratch))

/* guard_answers value: what follows the question in dnsd's reply, and its header. */
struct guard_answer {
	__u16 flags;     /* header flags of the reply except RD and CD (copied from the query) */
	__u16 an, ns, ar; /* section counts (ar with the OPT record) */
	__u16 len;       /* bytes of data */
	__u16 csum;      /* 16-bit one's complement sum of data placed at an even offset */
	__u16 cookie;    /* GUARD_COOKIE_*: how a query with a cookie is answered */
	__u16 reserved;
	__u64 rrl_key;   /* the account RRL charges the reply to, as dnsd's RRL keys it: the
			  * class and its key (the name and type of an answer, the name of a
			  * NODATA, the zone of a referral), hashed by dnsd */
	__u8 qname[GUARD_QNAME_MAX]; /* the lower-case wire qname answered, zero padded */
	__u8 data[GUARD_ANSWER_MAX];
};

/* guard_block_v4 key: one IPv4 address. */
struct guard_v4_key {
	__be32 addr;
};

/* guard_block_v6 and guard_rate key: one IPv6 address (IPv4 as ::ffff:a.b.c.d in guard_rate). */
struct guard_v6_key {
	__u8 addr[16];
};

/* guard_ans_rate key: a source prefix (IPv4 mapped, masked) and the account of the reply
 * (guard_answer.rrl_key), as dnsd's RRL keys it. */
struct guard_ans_rate_key {
	__u8 addr[16];
	__u64 rrl_key;
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
 * cannot read-modify-write under the writers' lock). A slot whose bit is set in dns_only
 * drops only UDP to a DNS service address (guard_svc) and port. */
struct guard_block {
	__u64 expires_ns[GUARD_SLOTS];
	__u32 dns_only; /* bit i: slot i stops only UDP to the DNS service */
	__u32 prefixlen; /* in a prefix trie, the entry's own length; 0 in the address maps */
};

/* How many nested prefixes a source's trie lookup walks: an entry that does not stop the
 * packet (DNS-only, or expired and not yet swept) never hides a covering one. */
#define GUARD_NEST_MAX 4

/* guard_svc value: the UDP port of the DNS service on the addresses of the key's prefix
 * (key: struct guard_lpm_v6_key, IPv4 as ::ffff:a.b.c.d with prefixlen + 96). */
struct guard_svc {
	__u16 port; /* host order */
	__u16 reserved; /* GUARD_SVC_SLIP_SET | the slip of queries over their source's rate (0:
			 * none); without the flag (an older writer), 2 */
};
#define GUARD_SVC_SLIP_SET 0x8000

/* guard_rate value (per-CPU LRU hash): a token bucket. */
struct guard_bucket {
	__u64 tokens;  /* in GUARD_TOKEN_UNIT per packet */
	__u64 last_ns; /* bpf_ktime_get_ns of the last packet; 0 = fresh (full bucket) */
};

/* guard_ans_rate value (per-CPU LRU hash): a token bucket and the replies it limited. */
struct guard_ans_bucket {
	__u64 tokens;
	__u64 last_ns;
	__u64 limited;
};

/* guard_config value (ARRAY, one element). */
struct guard_config {
	__u64 rate_pps;     /* tokens added per second, in packets */
	__u64 cap_units;    /* burst * GUARD_TOKEN_UNIT */
	__u64 fill_ns;      /* time to refill an empty bucket: cap_units / rate_pps, in ns */
	__u32 flags;        /* GUARD_F_* */
	__u32 suspects;     /* non-zero while guard_suspect holds entries (else not looked up) */
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
_Static_assert(sizeof(struct guard_block) == 8 * GUARD_SLOTS + 8, "guard_block");
_Static_assert(sizeof(struct guard_svc) == 4, "guard_svc");
_Static_assert(sizeof(struct guard_bucket) == 16, "guard_bucket");
_Static_assert(sizeof(struct guard_ans_bucket) == 24, "guard_ans_bucket");
_Static_assert(sizeof(struct guard_config) == 32 + 8192, "guard_config");
_Static_assert(sizeof(struct guard_counters) == 8 * GUARD_COUNTERS, "guard_counters");
_Static_assert(sizeof(struct guard_ans_addr_key) == 20, "guard_ans_addr_key");
_Static_assert(sizeof(struct guard_ans_addr) == 64, "guard_ans_addr");
_Static_assert(sizeof(struct guard_ans_key) == 32, "guard_ans_key");
_Static_assert(sizeof(struct guard_ans_rate_key) == 24, "guard_ans_rate_key");
_Static_assert(sizeof(struct guard_answer) == 24 + GUARD_QNAME_MAX + GUARD_ANSWER_MAX,
	       "guard_answer");
_Static_assert(sizeof(struct guard_ans_scratch) ==
		       32 + GUARD_QNAME_MAX + 48 + 12 + 16 + 44,
	       "guard_ans_scratch");

#endif /* PALISADE_GUARD_H */
