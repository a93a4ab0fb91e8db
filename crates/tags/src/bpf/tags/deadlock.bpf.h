/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * tags.bpf.c: deadlock tags (paper, section 5.3) and the end of a
 * request: a send that carries a deadlock tag towards a thread that holds
 * it is reported through dl_events, and the tags a thread drops when it
 * answers or is answered (deadlock and per-request tags). Used by the
 * channel pieces after it.
 *
 * A piece of tags.bpf.c, not a header: included once, in order, by
 * tags.bpf.c (one object, one skeleton), and it uses what the pieces
 * before it define.
 */

/*
 * The deadlock tags of snapshot s, into dl; 0 if none. A deadlock tag marks
 * every thread of a synchronous call chain; a request carrying it towards a
 * thread that already holds it closes a circle, which on Linux can only be
 * caught at the send (the receiver of a deadlocked request never reads it).
 */
static __always_inline int snap_dl(struct mt_ctl *c, struct snap *s, __u64 *dl)
{
	__u64 any = 0;

#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		dl[w] = s->vec[w] & c->deadlock[w];
		any |= dl[w];
	}
	return any != 0;
}

/*
 * Does the receiver hold one of the deadlock tags dl? The receiving thread
 * is known only once it reads, so the candidates are the channel's last
 * reader (rx_tid) and the receiving process's main thread (rx_pid). On a
 * hit, report it (tx: the sender; comm of the current task if tx_comm).
 */
static __always_inline int dl_found(struct mt_ctl *c, const __u64 *dl, __u32 rx_pid, __u32 rx_tid,
				    __u32 kind, int denied, __u64 lamport, __u32 tx_host,
				    __u32 tx_tid, __u32 tx_pid, int tx_comm)
{
	__u32 cand[2] = {rx_tid, rx_pid};

	for (int i = 0; i < 2; i++) {
		__u32 tid = cand[i];
		struct mt_view *v;

		if (!tid || tid == tx_tid)
			continue;
		v = view_of(tid);
		if (!v)
			continue;
#pragma unroll
		for (int w = 0; w < MT_WORDS; w++) {
			__u64 hit = v->vec[w] & dl[w];
			struct mt_deadlock *e;
			struct mt_tag *tg;
			__u32 idx;

			if (!hit)
				continue;
			idx = (w * 64 + ctz64(hit)) & (MT_TAGS - 1);
			e = bpf_ringbuf_reserve(&dl_events, sizeof(*e), 0);
			if (!e)
				return 1;
			tg = bpf_map_lookup_elem(&tags, &idx);
			e->ts_ns = bpf_ktime_get_ns();
			e->lamport = lamport;
			e->tag = idx;
			e->generation = tg ? tg->generation : 0;
			e->tx_tid = tx_tid;
			e->tx_pid = tx_pid;
			e->tx_host = tx_host;
			e->rx_pid = rx_pid ? rx_pid : tid;
			e->rx_tid = tid;
			e->kind = kind;
			e->denied = denied;
			if (tx_comm)
				bpf_get_current_comm(e->tx_comm, sizeof(e->tx_comm));
			else
				__builtin_memset(e->tx_comm, 0, sizeof(e->tx_comm));
			bpf_ringbuf_submit(e, 0);
			return 1;
		}
	}
	return 0;
}

/* A send by the current thread: check its snapshot against the receiver. */
static __always_inline void dl_send(struct mt_ctl *c, struct snap *s, __u32 rx_pid, __u32 rx_tid,
				    __u32 kind)
{
	__u64 dl[MT_WORDS];
	__u64 id;

	if (!snap_dl(c, s, dl))
		return;
	id = bpf_get_current_pid_tgid();
	dl_found(c, dl, rx_pid, rx_tid, kind, 0, s->lamport, s->host, (__u32)id, id >> 32, 1);
}

/*
 * Tags a thread drops when its part of a request ends (sent: it answered
 * the request it serves; else: it read the answer to its own request).
 * Deadlock tags go in both cases (section 5.3: the chain is over for it);
 * per-request tags only when it answers, so a server keeps a request's
 * tag through the calls it makes to serve it, and serves the next request
 * untagged (issue 8: an nginx worker kept the tag of one request and
 * passed it upstream with every later one). Tags the thread holds as their
 * origin (set by a tool or the API) stay.
 */
static __always_inline __u64 answer_mask(struct mt_ctl *c, int w, int sent)
{
	return c->deadlock[w & (MT_WORDS - 1)] | (sent ? c->per_request[w & (MT_WORDS - 1)] : 0);
}

/* Whether the current thread holds a tag it would drop (two array loads
 * and the masks: cheap enough for every send and receive). The table
 * first: while it has no deadlock or per-request tag (the common case),
 * no helper call for the thread (issue 15: ~20 ns a socket send or
 * receive). */
static __always_inline int holds_answerable(int sent)
{
	struct mt_ctl *c = get_ctl();
	struct mt_view *v;
	__u64 any = 0;

	if (!c)
		return 0;
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++)
		any |= answer_mask(c, w, sent);
	if (!any)
		return 0;
	v = view_of((__u32)bpf_get_current_pid_tgid());
	if (!v)
		return 0;
	any = 0;
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++)
		any |= v->vec[w] & answer_mask(c, w, sent);
	return any != 0;
}

static __always_inline void answered(int sent)
{
	struct mt_view *v = view_of((__u32)bpf_get_current_pid_tgid());
	struct mt_ctl *c;
	struct mt_thread *t;

	if (!v || vec_empty(v->vec) || !(c = get_ctl()))
		return;
	t = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		__u64 drop = v->vec[w] & answer_mask(c, w, sent) & ~(t ? t->origin[w] : 0);

		if (drop)
			__sync_fetch_and_and(&v->vec[w], ~drop);
	}
}
