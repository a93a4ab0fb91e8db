/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * tags.bpf.c: sockets on one host: unix sockets (deposits in the receiving
 * socket's storage), UDP and TCP flows through chan_dep, the channel-key
 * helpers (hash, hint bitmap, last reader) that the fd channels share, and
 * the send/receive-length tracepoints where a read takes a deposit and a
 * reply ends a request.
 *
 * A piece of tags.bpf.c, not a header: included once, in order, by
 * tags.bpf.c (one object, one skeleton), and it uses what the pieces
 * before it define.
 */

/* The pid behind a struct pid (its number in the initial namespace). */
static __always_inline __u32 pid_nr_of(struct pid *p)
{
	return p ? bpf_core_cast(p, struct pid)->numbers[0].nr : 0;
}

static __always_inline __u32 unix_kind(struct sock *sk)
{
	__u16 type = sk->sk_type;

	if (type == SOCK_DGRAM)
		return MT_K_UNIX_DGRAM;
	if (type == SOCK_SEQPACKET)
		return MT_K_UNIX_SEQPACKET;
	return MT_K_UNIX_STREAM;
}

/* A reply carries only the tags made to travel with replies (--replies):
 * keep those in s; returns 0 if none is left. */
static __always_inline int replies_only(struct mt_ctl *c, struct snap *s)
{
	__u64 any = 0;

#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		s->vec[w] &= c->replies[w];
		any |= s->vec[w];
	}
	return any != 0;
}

/* Whether the table has a live tag that travels with replies at all. */
static __always_inline int any_reply_tags(struct mt_ctl *c)
{
	__u64 any = 0;

#pragma unroll
	for (int w = 0; w < MT_WORDS; w++)
		any |= c->replies[w] & c->live[w];
	return any != 0;
}

static __always_inline int role_is_client(struct sock *sk)
{
	struct mt_sock *r = bpf_sk_storage_get(&sk_role, sk, 0, 0);

	return r && r->role == MT_ROLE_CLIENT;
}

/* An address of a TCP flow's key: IPv4 as is, IPv6 folded to 32 bits, and
 * a v4-mapped IPv6 address (::ffff:a.b.c.d, an IPv6 socket's connection to
 * an IPv4 peer) as the IPv4 address it maps, which is what the IPv4 socket
 * at the other end has (local_tcp_over_ipv6_and_v4_mapped). */
static __always_inline __u32 fold_addr(struct sock *sk, int remote)
{
	if (sk->__sk_common.skc_family == AF_INET)
		return remote ? sk->__sk_common.skc_daddr : sk->__sk_common.skc_rcv_saddr;
	struct in6_addr a = remote ? sk->__sk_common.skc_v6_daddr : sk->__sk_common.skc_v6_rcv_saddr;
	if (!a.in6_u.u6_addr32[0] && !a.in6_u.u6_addr32[1] &&
	    a.in6_u.u6_addr32[2] == bpf_htonl(0xffff))
		return a.in6_u.u6_addr32[3];
	return a.in6_u.u6_addr32[0] ^ a.in6_u.u6_addr32[1] ^ a.in6_u.u6_addr32[2] ^
	       a.in6_u.u6_addr32[3];
}

/* The host (machine, or network namespace) a socket lives in. */
static __always_inline __u32 host_of_sock(struct mt_ctl *c, struct sock *sk)
{
	struct net *net = sk->__sk_common.skc_net.net;

	return host_of_netns(c, net ? net->net_cookie : 0);
}

/*
 * Key of a TCP flow as its sender sees it (reverse = as its reader sees it),
 * within one host: flows between network namespaces are between hosts, and
 * their tags travel only in TCP options.
 */
static __always_inline void tcp_key(struct mt_ctl *c, struct sock *sk, struct mt_chan_key *k,
				    int reverse)
{
	__u64 la = fold_addr(sk, 0), ra = fold_addr(sk, 1);
	__u64 lp = sk->__sk_common.skc_num, rp = bpf_ntohs(sk->__sk_common.skc_dport);

	if (!reverse) {
		k->a = la << 32 | ra;
		k->b = lp << 16 | rp;
	} else {
		k->a = ra << 32 | la;
		k->b = rp << 16 | lp;
	}
	k->type = MT_K_TCP;
	k->pad = host_of_sock(c, sk);
}

#define MT_RTF_LOCAL 0x80000000 /* uapi ipv6_route.h */

/*
 * Whether TCP socket sk's route ends on this host: a local address of its
 * own network namespace (loopback, or any address the namespace has: the
 * route's type, not its device, so a VRF's local routes should count too;
 * untested). Only such a flow has a
 * reader that can take a local deposit: the reader of a flow to another
 * namespace or machine keys the flow with its own host (tcp_key) and gets
 * the global tags from the TCP option, so a deposit for it would be made
 * on every send and never taken (issue 15, Table 4: ~70 ns a send, and a
 * hash lookup on every receive of every TCP socket). No cached route
 * (dropped after a route change, until the next transmission): local, as
 * every flow was before.
 */
static __always_inline int route_is_local(struct sock *sk)
{
	struct dst_entry *dst = bpf_core_cast(sk, struct sock)->sk_dst_cache;
	__u16 family;

	if (!dst)
		return 1;
	family = dst->ops ? dst->ops->family : 0;
	if (family == AF_INET)
		return bpf_core_cast(dst, struct rtable)->rt_type == RTN_LOCAL;
	if (family == AF_INET6)
		return (bpf_core_cast(dst, struct rt6_info)->rt6i_flags & MT_RTF_LOCAL) != 0;
	return 1;
}

static __always_inline __u64 key_hash(const struct mt_chan_key *k)
{
	return (k->a ^ (k->b << 17) ^ ((__u64)k->type << 40) ^ k->pad) * 0x9e3779b97f4a7c15ULL;
}

static __always_inline __u32 hint_bit(const struct mt_chan_key *k)
{
	return (__u32)(key_hash(k) >> 48); /* 16 bits: MT_HINT_BITS */
}

/*
 * Record the current thread as the reader of k, which has no deposit. The
 * store is an exchange, a full barrier, so that with the sender's atomic
 * deposit followed by its load of this slot (chan_reader_of) one of the
 * two sees the other: the reader re-checks for a deposit after this.
 * Returns whether it stored: a note that was this thread's already was
 * there before any sender now depositing read it, so no re-check is due.
 */
/* k's slot of chan_reader, and k's hash in *h. */
static __always_inline __u64 *reader_slot(const struct mt_chan_key *k, __u64 *h)
{
	__u32 b;

	*h = key_hash(k);
	b = (__u32)(*h >> 48);
	return bpf_map_lookup_elem(&chan_reader, &b);
}

static __always_inline int note_reader(const struct mt_chan_key *k, __u32 tid)
{
	__u64 h, *r = reader_slot(k, &h);
	__u64 v = h << 32 | tid;

	if (!r || *r == v)
		return 0;
	__sync_lock_test_and_set(r, v);
	return 1;
}

/* The thread note_reader recorded for k, or 0. */
static __always_inline __u32 chan_reader_of(const struct mt_chan_key *k)
{
	__u64 h, *r = reader_slot(k, &h);
	__u64 v = r ? *r : 0;

	return v >> 32 == (__u32)h ? (__u32)v : 0;
}

/*
 * sk's word of sk_hint and its bit in *bit: 16 bits of a multiplicative
 * hash of the socket's address. The verifier refuses arithmetic on a
 * pointer but lets a privileged program subtract two (a plain number), so
 * the hash is of the address's distance from the map's first word: the
 * same number for the same socket in every program of this load (sk: a
 * `struct sock` or the sockops `bpf_sock` view of it, one address).
 */
static __always_inline __u64 *sk_hint_word(const void *sk, __u64 *bit, __u64 mult)
{
	__u32 z = 0, b, w;
	__u64 *base = bpf_map_lookup_elem(&sk_hint, &z);
	long d;

	if (!base)
		return 0;
	d = (long)sk - (long)base;
	barrier_var(d);
	b = (__u32)(((__u64)d * mult) >> 48);
	w = b / 64;
	*bit = 1ULL << (b % 64);
	return bpf_map_lookup_elem(&sk_hint, &w);
}

/* Two bits per socket, by two hashes (the `which` of the functions
 * below), so that neither kind of socket makes the other's hooks look up
 * storage it does not have:
 *   MT_HINT_DEP  it may have a socket-storage deposit (sk_dep, sk_rdep):
 *                receives look; set before the first deposit entry.
 *   MT_HINT_NET  it may carry global tags (sk_role's net): sends and the
 *                option callbacks look; set before net is first written
 *                (a socket's sends and option callbacks run under its
 *                lock). */
#define MT_HINT_DEP 0x9e3779b97f4a7c15ULL
#define MT_HINT_NET 0xc2b2ae3d27d4eb4fULL

static __always_inline int sk_hinted(const void *sk, __u64 which)
{
	__u64 bit, *h = sk_hint_word(sk, &bit, which);

	return h && (*h & bit);
}

/* A locked OR (a full barrier), so a hook that finds what the bit stands
 * for finds the bit. */
static __always_inline void sk_hint_set(const void *sk, __u64 which)
{
	__u64 bit, *h = sk_hint_word(sk, &bit, which);

	if (h && !(*h & bit))
		__sync_fetch_and_or(h, bit);
}

/* Whether a deposit may exist for k: its hint bit (one array load). */
static __always_inline int chan_hinted(const struct mt_chan_key *k)
{
	__u32 b = hint_bit(k), w = b / 64;
	__u64 *h = bpf_map_lookup_elem(&chan_hint, &w);

	return h && (*h & (1ULL << (b % 64)));
}

/* Before k's first deposit: a locked OR (a full barrier), so a reader that
 * finds the deposit finds the bit. */
static __always_inline void chan_hint_set(const struct mt_chan_key *k)
{
	__u32 b = hint_bit(k), w = b / 64;
	__u64 *h = bpf_map_lookup_elem(&chan_hint, &w);

	if (h && !(*h & (1ULL << (b % 64))))
		__sync_fetch_and_or(h, 1ULL << (b % 64));
}

/* The deposit for k if one may exist (hint bit set), else 0. */
static __always_inline struct mt_deposit *chan_find(const struct mt_chan_key *k)
{
	if (!chan_hinted(k))
		return 0;
	return bpf_map_lookup_elem(&chan_dep, k);
}

/* Find or make the chan_dep entry for k; count deposits per type. */
static __always_inline struct mt_deposit *chan_get(struct mt_ctl *c, struct mt_chan_key *k)
{
	struct mt_deposit *d = bpf_map_lookup_elem(&chan_dep, k);
	__u32 z = 0;

	if (d)
		return d;
	struct mt_deposit *zero = bpf_map_lookup_elem(&zero_dep, &z);
	if (!zero)
		return 0;
	bpf_map_update_elem(&chan_dep, k, zero, BPF_NOEXIST);
	d = bpf_map_lookup_elem(&chan_dep, k);
	if (!d) {
		STAT(deposit_fail);
		return 0;
	}
	chan_hint_set(k);
	/* pipes, eventfd and queues need no count: their readers always look */
	if (k->type == MT_K_TCP) {
		if (!c->n_tcp_deps)
			__sync_fetch_and_add(&c->n_tcp_deps, 1);
	} else if (k->type == MT_K_UDP) {
		if (!c->n_udp_deps)
			__sync_fetch_and_add(&c->n_udp_deps, 1);
	} else if (k->type == MT_K_SHM || k->type == MT_KEY_SYSV) {
		if (!c->n_obj_deps)
			__sync_fetch_and_add(&c->n_obj_deps, 1);
	}
	return d;
}

/*
 * Unix sockets: a message was queued on receiving socket sk. The kernel
 * calls sk_data_ready in the sender's context, after queueing and before
 * waking the reader: the deposit is on the channel before a blocked reader
 * can take the message (sock_send_length, after the whole send, came too
 * late for a reader on another CPU). The deposit lives on the receiving
 * socket. Other families: TCP and UDP call it from softirq (any task), so
 * they use their own hooks.
 */
SEC("tp_btf/sk_data_ready")
int BPF_PROG(mt_unix_queued, struct sock *sk)
{
	struct snap s = {};
	struct mt_ctl *c;
	struct mt_deposit *d;
	struct unix_sock *u;
	struct sock *tx = 0;
	struct task_struct *task;
	__u32 kind, rx_pid = 0;
	int reply = 0, call = 1;

	if (!mt_held_any || sk->__sk_common.skc_family != AF_UNIX ||
	    sk->__sk_common.skc_state == TCP_LISTEN)
		return 0;
	/* An untagged sender (most of them) has nothing to deposit and no
	 * part of a call chain to end: one helper call and one load, before
	 * any socket lookup. */
	task = cur_task();
	if (!task_tagged(task))
		return 0;
	c = get_ctl();
	if (!c)
		return 0;
	kind = unix_kind(sk);
	if (kind != MT_K_UNIX_DGRAM) {
		/* connected: the peer of the receiving socket is the sender's,
		 * read through a read-only cast (loads only) */
		struct sock *peer = bpf_core_cast(sk, struct unix_sock)->peer;

		/* Not the connect() side: a reply, unless the socket has no
		 * address (socketpair, an unbound client, or connected before
		 * load). The address first: it is a load, the role a
		 * socket-storage lookup, which wants the socket as the verifier
		 * trusts it (the helper cast: only for a possible reply, ~20 ns
		 * off every request from an unbound client, issue 15). */
		if (peer && bpf_core_cast(peer, struct unix_sock)->addr) {
			u = bpf_skc_to_unix_sock(sk);
			tx = u ? u->peer : 0;
			if (tx && !role_is_client(tx))
				reply = 1;
		}
		/* the receiving process: the sender's peer credentials (for the
		 * connect() side, the listener's) */
		if (peer)
			rx_pid = pid_nr_of(bpf_core_cast(peer, struct sock)->sk_peer_pid);
	}
	/* A reply carries only the tags made to travel with replies. Without
	 * any (the common case) it needs no snapshot, and the sender's part
	 * of a call chain ends here, which costs nothing either unless the
	 * table has deadlock or per-request tags (holds_answerable): a tagged
	 * reply hop used to make five helper calls for nothing (issue 15). */
	if (reply && !any_reply_tags(c)) {
		if (holds_answerable(1))
			answered(1);
		return 0;
	}
	if (!take_snapshot_task(task, &s, &c))
		return 0;
	if (reply && !replies_only(c, &s)) {
		if (holds_answerable(1))
			answered(1); /* it answers: its part of the request ends */
		return 0;
	}
	/* A deadlock tag rides only a call that an answer ends: a request
	 * into a socket accepted from a listener (it has the listener's
	 * address), whose answer ends the server's part (answered). A
	 * datagram, or a socketpair (no connect() side, no answer known),
	 * would leave the receiver in the chain for good (issue 32). One
	 * plain load, and an AND per word of the snapshot. */
	if (kind == MT_K_UNIX_DGRAM || !bpf_core_cast(sk, struct unix_sock)->addr) {
		__u64 left = 0;

#pragma unroll
		for (int w = 0; w < MT_WORDS; w++) {
			s.vec[w] &= ~c->deadlock[w];
			left |= s.vec[w];
		}
		if (!left)
			return 0;
		call = 0;
	}
	if (!mt_unix_any)
		mt_unix_any = 1;
	sk_hint_set(sk, MT_HINT_DEP);
	d = bpf_sk_storage_get(&sk_dep, sk, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!d) {
		STAT(deposit_fail);
		return 0;
	}
	if (call)
		dl_send(c, &s, rx_pid, d->last_reader, kind);
	deposit(d, &s, kind, c->epoch, 0, 0);
	/* A reader spinning on another CPU took it between the queueing and
	 * this hook: hand the tags to it now. */
	if (sk->sk_receive_queue.qlen == 0)
		deliver_late(c, d, d->last_reader);
	return 0;
}

/* Connected UDP requests, and the end of a TCP participant's part of a call chain. */
SEC("tp_btf/sock_send_length")
int BPF_PROG(mt_sock_send, struct sock *sk, int ret, int flags)
{
	struct snap s = {};
	struct mt_ctl *c;
	struct mt_deposit *d;
	__u16 family;

	if (ret <= 0 || !mt_held_any)
		return 0;
	family = sk->__sk_common.skc_family;
	if (family != AF_INET && family != AF_INET6)
		return 0;
	if (sk->sk_protocol == IPPROTO_TCP) {
		/* requests deposit in tcp_sendmsg_locked, before the data can
		 * be read; a reply ends the sender's part of a call chain */
		if (holds_answerable(1) && !role_is_client(sk))
			answered(1);
		return 0;
	}
	if (!take_snapshot(&s, &c))
		return 0;
	if (sk->sk_protocol == IPPROTO_UDP) {
		struct mt_chan_key k = {};
		__u32 port = bpf_ntohs(sk->__sk_common.skc_dport);

		if (!port)
			return 0; /* unconnected: deposited by cgroup/sendmsg4/6 */
		k.a = port;
		k.type = MT_K_UDP;
		k.pad = host_of_sock(c, sk);
		d = chan_get(c, &k);
		if (d)
			deposit(d, &s, MT_K_UDP, c->epoch, 0, 0);
	}
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(mt_sock_recv, struct sock *sk, int ret, int flags)
{
	struct mt_ctl *c;
	struct mt_chan_key k = {};
	struct mt_deposit *d;
	__u16 family;
	__u32 tid;
	int clear;

	if (ret <= 0)
		return 0;
	family = sk->__sk_common.skc_family;
	if (family == AF_UNIX) {
		if (!mt_held_any)
			return 0;
		/* data on the connect() side of a connection: a reply (the
		 * socket-storage lookup only for threads in a call chain) */
		if (holds_answerable(0) && sk->sk_type != SOCK_DGRAM && role_is_client(sk))
			answered(0);
		if (!mt_unix_any || !sk_hinted(sk, MT_HINT_DEP))
			return 0;
		d = bpf_sk_storage_get(&sk_dep, sk, 0, 0);
		if (!d)
			return 0;
		tid = (__u32)bpf_get_current_pid_tgid();
		if (vec_empty(d->vec)) {
			/* publish, then look again (as on_recv does): a sender
			 * depositing now either sees this reader in its late
			 * hand-over or is seen here */
			if (d->last_reader == tid)
				return 0;
			__sync_lock_test_and_set(&d->last_reader, tid);
			if (vec_empty(d->vec))
				return 0;
		}
		/* everything queued is read: the deposit ends here; a
		 * reception that changes nothing but the clock, inline */
		clear = sk->sk_receive_queue.qlen == 0;
		if (!rx_inline(d, 0, 0, 0, tid, clear, 0))
			mt_receive(d, clear);
		return 0;
	}
	if (family != AF_INET && family != AF_INET6)
		return 0;
	c = get_ctl();
	if (!c)
		return 0;
	if (sk->sk_protocol == IPPROTO_TCP) {
		struct tcp_sock *tp = bpf_core_cast(sk, struct tcp_sock);
		__u32 copied, start, end;

		if (holds_answerable(0) && role_is_client(sk))
			answered(0); /* data on the connect() side: a reply */

		/* Tags that came from another host in TCP options (only while
		 * a cluster table is loaded can there be any). */
		d = c->global[0] && mt_rdep_any && sk_hinted(sk, MT_HINT_DEP) ?
			    bpf_sk_storage_get(&sk_rdep, sk, 0, 0) :
			    0;
		if (d && !vec_empty(d->vec)) {
			copied = tp->copied_seq;
			if ((__s32)(copied - (__u32)d->seq_start) > 0) {
				/* the common reception inline, as for unix */
				clear = (__s32)(copied - (__u32)d->seq_end) >= 0;
				tid = (__u32)bpf_get_current_pid_tgid();
				if (!rx_inline(d, 0, 0, 0, tid, clear, 0))
					mt_receive(d, clear);
			}
		}
		if (!c->n_tcp_deps)
			return 0;
		tcp_key(c, sk, &k, 1);
		/* a flow whose sender never deposited (chan_get sets the bit
		 * before the data is queued): no hash lookup */
		if (!chan_hinted(&k))
			return 0;
		d = chan_find(&k);
		if (!d || vec_empty(d->vec))
			return 0;
		copied = tp->copied_seq;
		start = d->seq_start;
		end = d->seq_end;
		/* read any tagged byte: deliver; read them all: done */
		if ((__s32)(copied - start) <= 0)
			return 0;
		mt_receive(d, (__s32)(copied - end) >= 0);
		return 0;
	}
	if (sk->sk_protocol == IPPROTO_UDP) {
		struct udp_sock *up = bpf_core_cast(sk, struct udp_sock);
		int empty;

		if (!c->n_udp_deps)
			return 0;
		k.a = sk->__sk_common.skc_num;
		k.type = MT_K_UDP;
		k.pad = host_of_sock(c, sk);
		d = chan_find(&k);
		if (!d || vec_empty(d->vec))
			return 0;
		empty = sk->sk_receive_queue.qlen == 0 && up->reader_queue.qlen == 0;
		mt_receive(d, empty);
	}
	return 0;
}
