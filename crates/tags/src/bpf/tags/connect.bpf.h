/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * tags.bpf.c: the cgroup sock_addr hooks: connect() marks the side that
 * sends requests, a TCP connect towards a process whose call chain holds a
 * deadlock tag is refused with EDEADLK (the one deny point Linux offers
 * without BPF LSM), listeners are remembered, and unconnected UDP sends
 * leave their deposit before the datagram exists.
 *
 * A piece of tags.bpf.c, not a header: included once, in order, by
 * tags.bpf.c (one object, one skeleton), and it uses what the pieces
 * before it define.
 */

static __always_inline int mark_client(struct bpf_sock_addr *ctx)
{
	struct bpf_sock *sk = ctx->sk;
	struct mt_sock *r;

	if (!sk)
		return 1;
	r = bpf_sk_storage_get(&sk_role, sk, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (r)
		r->role = MT_ROLE_CLIENT;
	return 1;
}

/*
 * A TCP connect on this host: remember who listens at the other end (for
 * the deadlock check of later sends), and refuse the connection with
 * EDEADLK if the caller's call chain already holds that process: the one
 * deny point Linux offers without BPF LSM (../shared/platform.md).
 */
static __always_inline int tcp_connect(struct bpf_sock_addr *ctx, int v6)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct bpf_sock_tuple t = {};
	struct mt_view *v = view_of(tid);
	struct bpf_sock *sk = ctx->sk, *l;
	struct mt_ctl *c;
	struct mt_sock *r;
	__u64 dl[MT_WORDS];
	__u64 any = 0;
	__u32 owner = 0, *own;

	mark_client(ctx);
	if (!v || vec_empty(v->vec) || !sk)
		return 1;
	c = get_ctl();
	if (!c)
		return 1;
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		dl[w] = v->vec[w] & c->deadlock[w] & c->live[w];
		any |= dl[w];
	}
	if (!any)
		return 1;
	if (v6) {
		t.ipv6.daddr[0] = ctx->user_ip6[0];
		t.ipv6.daddr[1] = ctx->user_ip6[1];
		t.ipv6.daddr[2] = ctx->user_ip6[2];
		t.ipv6.daddr[3] = ctx->user_ip6[3];
		t.ipv6.dport = (__u16)ctx->user_port;
		l = bpf_sk_lookup_tcp(ctx, &t, sizeof(t.ipv6), BPF_F_CURRENT_NETNS, 0);
	} else {
		t.ipv4.daddr = ctx->user_ip4;
		t.ipv4.dport = (__u16)ctx->user_port;
		l = bpf_sk_lookup_tcp(ctx, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
	}
	if (!l)
		return 1;
	own = bpf_sk_storage_get(&sk_owner, l, 0, 0);
	if (own)
		owner = *own;
	bpf_sk_release(l);
	r = bpf_sk_storage_get(&sk_role, sk, 0, 0);
	if (r)
		r->peer_pid = owner;
	if (owner && dl_found(c, dl, owner, 0, MT_K_TCP, 1, 0, c->host_id, tid,
			      bpf_get_current_pid_tgid() >> 32, 1)) {
		bpf_set_retval(-EDEADLK);
		return 0;
	}
	return 1;
}

SEC("cgroup/connect4")
int mt_connect4(struct bpf_sock_addr *ctx)
{
	return tcp_connect(ctx, 0);
}

SEC("cgroup/connect6")
int mt_connect6(struct bpf_sock_addr *ctx)
{
	return tcp_connect(ctx, 1);
}

/* listen(): the socket's owner, inherited by the sockets it accepts. */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(mt_listen, struct sock *sk, int oldstate, int newstate)
{
	__u32 *own;

	if (newstate != TCP_LISTEN)
		return 0;
	own = bpf_sk_storage_get(&sk_owner, sk, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (own)
		*own = bpf_get_current_pid_tgid() >> 32;
	return 0;
}

SEC("cgroup/connect_unix")
int mt_connect_unix(struct bpf_sock_addr *ctx)
{
	return mark_client(ctx);
}

/*
 * Unconnected UDP (sendto with an address): deposit the sender's tags for
 * the destination port before the datagram exists, so a reader spinning on
 * another CPU cannot take it first. (Connected UDP sockets have no such
 * hook: their deposit is made after the send, in sock_send_length.)
 */
static __always_inline int note_udp_dst(struct bpf_sock_addr *ctx)
{
	struct mt_chan_key k = {};
	struct snap s = {};
	struct mt_deposit *d;
	struct mt_ctl *c;

	if (ctx->protocol != IPPROTO_UDP || !take_snapshot(&s, &c))
		return 1;
	k.a = bpf_ntohs((__u16)ctx->user_port);
	k.type = MT_K_UDP;
	k.pad = host_of_netns(c, bpf_get_netns_cookie(ctx));
	d = chan_get(c, &k);
	if (d)
		deposit(d, &s, MT_K_UDP, c->epoch, 0, 0);
	return 1;
}

SEC("cgroup/sendmsg4")
int mt_sendmsg4(struct bpf_sock_addr *ctx)
{
	return note_udp_dst(ctx);
}

SEC("cgroup/sendmsg6")
int mt_sendmsg6(struct bpf_sock_addr *ctx)
{
	return note_udp_dst(ctx);
}
