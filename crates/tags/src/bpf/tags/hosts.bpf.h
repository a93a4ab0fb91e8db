/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * tags.bpf.c: tags across hosts: the TCP send hook that deposits a
 * request's tags for its flow (with the sequence range of its bytes) and
 * keeps the global tags on the socket, and the sockops program that writes
 * them into a TCP header option and parses them on the receiving host.
 *
 * A piece of tags.bpf.c, not a header: included once, in order, by
 * tags.bpf.c (one object, one skeleton), and it uses what the pieces
 * before it define.
 */

/*
 * A TCP send, before its data is queued (the tracepoint fires at the top of
 * each round of tcp_sendmsg_locked's copy loop): the request's tags are
 * deposited for the flow on this host with the sequence range the message
 * will take, so a reader can never take the bytes before the tags are there;
 * and, for the sockops program, the global tags are kept on the socket to go
 * into every data segment's header (tags across hosts).
 */
SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(mt_tcp_sendmsg, struct sock *sk, struct msghdr *msg, struct sk_buff *skb, int size_goal)
{
	struct snap s = {};
	struct mt_ctl *c = 0;
	struct task_struct *task;
	struct mt_netsnap *ns;
	struct mt_sock *r = 0;
	__u64 g = 0;

	if (mt_held_any && task_tagged(task = cur_task())) {
		/* one socket-storage lookup for the role, the peer and what
		 * the socket carries (issue 15: it was made three times per
		 * tagged send) */
		r = bpf_sk_storage_get(&sk_role, sk, 0, 0);
		int client = r && r->role == MT_ROLE_CLIENT;

		/* a reply carries only the tags made to travel with replies:
		 * with none in the table, no snapshot (a tagged server's
		 * every reply) */
		c = get_ctl();
		if (c && (client || any_reply_tags(c)) && take_snapshot_task(task, &s, &c) &&
		    (client || replies_only(c, &s))) {
			struct tcp_sock *tp = bpf_core_cast(sk, struct tcp_sock);
			struct mt_chan_key k;
			struct mt_deposit *d;
			__u32 start = tp->write_seq;
			__u32 left = bpf_core_cast(msg, struct msghdr)->msg_iter.count;

			/* a flow that leaves the host: only the option carries
			 * (global) tags, see route_is_local */
			if (route_is_local(sk)) {
				tcp_key(c, sk, &k, 0);
				d = chan_get(c, &k);
				if (d) {
					dl_send(c, &s, r ? r->peer_pid : 0, d->last_reader, MT_K_TCP);
					deposit(d, &s, MT_K_TCP, c->epoch, start, start + left);
				}
			}
			g = s.vec[0] & c->global[0] & ((1ULL << MT_GLOBAL_BITS) - 1);
		}
	} else {
		c = get_ctl();
	}
	if (!c || !c->global[0])
		return 0;
	if (!g) {
		/* an untagged send: stop carrying what an earlier one left (no
		 * socket has carried global tags yet, or not this one: nothing
		 * to stop, and no sk_storage lookup, ~25 ns a send, issue 15) */
		if (!mt_net_any || !sk_hinted(sk, MT_HINT_NET))
			return 0;
		if (!r)
			r = bpf_sk_storage_get(&sk_role, sk, 0, 0);
		if (r && r->net.vec)
			r->net.vec = 0;
		return 0;
	}
	if (!mt_net_any)
		mt_net_any = 1; /* before the socket has anything to write */
	sk_hint_set(sk, MT_HINT_NET);
	if (!r) /* a server's socket carrying replies' tags */
		r = bpf_sk_storage_get(&sk_role, sk, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!r)
		return 0;
	ns = &r->net;
	__u64 m = g;
	for_each_bit(m, 0, idx, bit, { ns->ttl[idx & (MT_GLOBAL_BITS - 1)] = s.ttl[idx]; })
	ns->lamport = (__u32)s.lamport;
	ns->host = s.host;
	ns->pid = s.pid; /* the sender's process, from the snapshot: no helper */
	ns->vec = g;
	return 0;
}

/* The option's length for vector vec: MT_OPT_FIXED and a TTL byte for
 * each of its first MT_OPT_MAX_TTLS set bits. A HDR_OPT_LEN call (twice
 * per segment sent) needs only this, not the option (opt_build). */
static __always_inline int opt_len(__u64 vec)
{
	int n = 0;

	for (int i = 0; i < MT_OPT_MAX_TTLS && vec; i++) {
		vec &= vec - 1;
		n++;
	}
	return MT_OPT_FIXED + n;
}

static __always_inline int opt_build(struct mt_netsnap *ns, struct mt_tcpopt *o, __u32 digest)
{
	__u64 m = ns->vec;

	o->kind = MT_OPT_KIND;
	o->magic = bpf_htons(MT_OPT_MAGIC);
	o->digest = bpf_htons((__u16)digest);
	o->vec = bpf_htons(ns->vec);
	o->host = bpf_htonl(ns->host);
	o->lamport = bpf_htonl(ns->lamport);
	o->pid = bpf_htonl(ns->pid);
	for (int i = 0; i < MT_OPT_MAX_TTLS && m; i++) {
		__u32 b = ctz64(m);

		m &= m - 1;
		o->ttl[i] = ns->ttl[b & (MT_GLOBAL_BITS - 1)];
	}
	o->len = opt_len(ns->vec); /* the TTL bytes just written */
	return o->len;
}

/*
 * TCP connections made while global tags exist: enable the header-option
 * callbacks, write the option on data segments of senders that hold global
 * tags, and parse it on arrival into the receiving socket's deposit, with
 * the segment's sequence range, so that sock_recv_length delivers exactly
 * as for local TCP.
 *
 * Which callbacks, on which side (issue 15, Table 4):
 * - PARSE_UNKNOWN_HDR_OPT on both sides: the kernel calls it only for a
 *   segment that has an option it does not know (bpf_skops_parse_hdr tests
 *   rx_opt.saw_unknown first), so untagged traffic never enters it.
 * - WRITE_HDR_OPT (a HDR_OPT_LEN call for every segment sent, and one at
 *   every tcp_current_mss) on the connect() side only, which is where
 *   requests come from; on the accepting side only if a global tag travels
 *   with replies. It must be on from the start on every client connection:
 *   the kernel sets a socket's callback flags only from sockops callbacks
 *   that hold the socket lock (and bpf_setsockopt(TCP_BPF_SOCK_OPS_CB_FLAGS)
 *   only from sockops, sock_addr, tcp iterators and tcp_congestion_ops), and
 *   none of them runs when an established connection sends unless these
 *   flags are on already; the timestamping callback that does run in
 *   tcp_sendmsg (BPF_SOCK_OPS_TSTAMP_SENDMSG_CB, 6.14+) is refused both
 *   (is_locked_tcp_sock_ops). Turned on only when a thread with a global tag
 *   connects, a pooled connection opened untagged would never carry the
 *   tags of the tagged threads that use it later.
 * - The HDR_OPT_LEN/WRITE calls of connections that carry nothing return
 *   after one load (mt_net_any) until some socket has carried a global tag.
 */
SEC("sockops")
int mt_sockops(struct bpf_sock_ops *skops)
{
	struct mt_ctl *c = get_ctl();
	struct mt_netsnap *ns;
	struct mt_sock *r;
	struct mt_tcpopt o = {};

	if (!c)
		return 1;
	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		if (c->global[0]) {
			int fl = skops->bpf_sock_ops_cb_flags | BPF_SOCK_OPS_PARSE_UNKNOWN_HDR_OPT_CB_FLAG;

			if (skops->op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB || (c->global[0] & c->replies[0]))
				fl |= BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG;
			bpf_sock_ops_cb_flags_set(skops, fl);
		}
		return 1;
	case BPF_SOCK_OPS_HDR_OPT_LEN_CB:
	case BPF_SOCK_OPS_WRITE_HDR_OPT_CB: {
		struct bpf_sock *sk = skops->sk;
		int len;

		if (!mt_net_any || !sk || !sk_hinted(sk, MT_HINT_NET))
			return 1;
		r = bpf_sk_storage_get(&sk_role, sk, 0, 0);
		if (!r || !r->net.vec)
			return 1;
		ns = &r->net;
		if (skops->op == BPF_SOCK_OPS_HDR_OPT_LEN_CB) {
			if (bpf_reserve_hdr_opt(skops, opt_len(ns->vec), 0))
				STAT(opt_nospace);
			return 1;
		}
		len = opt_build(ns, &o, c->cluster_digest);
		if (len > sizeof(o))
			return 1;
		if (bpf_store_hdr_opt(skops, &o, len & 0x3f, 0) == 0)
			STAT(opt_written);
		else
			STAT(opt_nospace);
		return 1;
	}
	case BPF_SOCK_OPS_PARSE_HDR_OPT_CB: {
		struct bpf_sock *sk = skops->sk;
		struct mt_deposit *d;
		struct snap s = {};
		struct tcphdr *th;
		__u32 seq, doff, payload;
		__u16 vec;
		int ret;

		o.kind = MT_OPT_KIND;
		o.len = 4; /* search key: kind, then the 2-byte ExID */
		o.magic = bpf_htons(MT_OPT_MAGIC);
		ret = bpf_load_hdr_opt(skops, &o, sizeof(o), 0);
		if (ret < MT_OPT_FIXED || !sk)
			return 1;
		if (bpf_ntohs(o.digest) != (__u16)c->cluster_digest) {
			STAT(opt_mismatch);
			return 1;
		}
		/* from this very host: the local mechanism delivers it */
		if (bpf_ntohl(o.host) == host_of_netns(c, bpf_get_netns_cookie(skops)))
			return 1;
		th = skops->skb_data;
		if ((void *)(th + 1) > skops->skb_data_end)
			return 1;
		seq = bpf_ntohl(th->seq);
		doff = th->doff * 4;
		if (skops->skb_len <= doff)
			return 1; /* no payload */
		payload = skops->skb_len - doff;
		vec = bpf_ntohs(o.vec);
		s.vec[0] = vec & c->global[0];
		__u64 m = s.vec[0];
		int i = 0;
		for_each_bit(m, 0, idx, bit, {
			s.ttl[idx] = i < MT_OPT_MAX_TTLS && i < ret - MT_OPT_FIXED ? o.ttl[i & (MT_OPT_MAX_TTLS - 1)] : 1;
			i++;
		})
		s.lamport = bpf_ntohl(o.lamport);
		s.host = bpf_ntohl(o.host);
		if (s.vec[0] & c->deadlock[0]) {
			/* A chain's request from another host, to a socket whose
			 * owner holds the chain's tag: the circle closes here. */
			__u64 dl[MT_WORDS] = {s.vec[0] & c->deadlock[0]};
			__u32 *own = bpf_sk_storage_get(&sk_owner, sk, 0, 0);

			if (own)
				dl_found(c, dl, *own, 0, MT_K_TCP, 0, s.lamport, s.host, 0,
					 bpf_ntohl(o.pid), 0);
		}
		if (!mt_rdep_any)
			mt_rdep_any = 1;
		sk_hint_set(sk, MT_HINT_DEP);
		d = bpf_sk_storage_get(&sk_rdep, sk, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!d)
			return 1;
		mark_held(); /* its reader will hold these */
		deposit(d, &s, MT_K_TCP, c->epoch, seq, seq + payload);
		d->tx_tid = 0;
		d->tx_pid = bpf_ntohl(o.pid);
		STAT(opt_parsed);
		return 1;
	}
	}
	return 1;
}
