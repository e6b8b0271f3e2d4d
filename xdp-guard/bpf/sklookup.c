// SPDX-License-Identifier: Apache-2.0
/*
 * Palisade TCP steering (sk_lookup): hands connections to a daemon's service addresses to the
 * listening socket that daemon registered, whatever address that socket is bound to — so a
 * daemon serving thousands of addresses needs neither a socket per address nor the wildcard
 * socket, and another listener on the same port at another address (a local resolver on
 * 127.0.0.53:53, a management address) keeps its connections.
 *
 * guard_sk_addrs: (service address, IPv4 as ::ffff:a.b.c.d; TCP port) -> socket key.
 * guard_sk_socks: socket key -> the registered listening socket.
 * Anything not registered, or whose socket is gone, takes the kernel's regular lookup.
 */
#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define AF_INET 2

struct sk_addr_key {
	__u8 addr[16];
	__u16 port; /* host order */
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct sk_addr_key);
	__type(value, __u64);
} guard_sk_addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u64);
} guard_sk_socks SEC(".maps");

SEC("sk_lookup")
int palisade_sk_lookup(struct bpf_sk_lookup *ctx)
{
	if (ctx->protocol != IPPROTO_TCP)
		return SK_PASS;
	struct sk_addr_key k = { .port = (__u16)ctx->local_port };
	if (ctx->family == AF_INET) {
		__u32 a = ctx->local_ip4;
		k.addr[10] = 0xff;
		k.addr[11] = 0xff;
		__builtin_memcpy(&k.addr[12], &a, 4);
	} else {
		__u32 a0 = ctx->local_ip6[0], a1 = ctx->local_ip6[1];
		__u32 a2 = ctx->local_ip6[2], a3 = ctx->local_ip6[3];
		__builtin_memcpy(&k.addr[0], &a0, 4);
		__builtin_memcpy(&k.addr[4], &a1, 4);
		__builtin_memcpy(&k.addr[8], &a2, 4);
		__builtin_memcpy(&k.addr[12], &a3, 4);
	}
	__u64 *id = bpf_map_lookup_elem(&guard_sk_addrs, &k);
	if (!id)
		return SK_PASS;
	__u64 key = *id;
	struct bpf_sock *sk = bpf_map_lookup_elem(&guard_sk_socks, &key);
	if (!sk)
		return SK_PASS;
	/* A failure (a socket of the other family, say) leaves the regular lookup to run. */
	bpf_sk_assign(ctx, sk, 0);
	bpf_sk_release(sk);
	return SK_PASS;
}
