/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * tags.bpf.c: core delivery, the mechanism every channel shares: a sender's
 * snapshot of its passable tags, the deposit on a channel, its take by the
 * reader, the delivery into the reader's vector (TTL, terminators, class)
 * with its lifeline record, and the late delivery to a reader that read
 * before the deposit was made. Channel pieces only find the deposit; what
 * a deposit does to the reader's tags is decided here.
 *
 * A piece of tags.bpf.c, not a header: included once, in order, by
 * tags.bpf.c (one object, one skeleton), and it uses what the pieces
 * before it define.
 */

extern struct task_struct *bpf_task_from_pid(s32 pid) __ksym;
extern void bpf_task_release(struct task_struct *p) __ksym;

/* A sender's passable tags at the moment it sent. */
struct snap {
	__u64 vec[MT_WORDS];
	__u8 ttl[MT_TAGS];
	__u64 lamport; /* sender's clock at the send */
	__u32 host;    /* sender's host */
	__u32 tid, pid; /* sender (0 when it is not the current task: sockops) */
};

/*
 * The current task, and its tid without a second helper call. On the hot
 * paths every call costs: a helper or a BPF-to-BPF call returns through
 * the kernel's return thunk (SRSO "Safe RET" on the CI machines' AMD CPUs),
 * ~10-15 ns each by bpf_stats (docs/tags.md, "Cost"), so a hook fetches
 * the task once and reads pid/tgid from it with plain loads.
 */
static __always_inline struct task_struct *cur_task(void)
{
	return bpf_get_current_task_btf();
}

/* A global function's argument the verifier takes as a trusted, non-NULL
 * kernel pointer (Linux 6.8+; libbpf's bpf_helpers.h has it from 1.4). */
#ifndef __arg_trusted
#define __arg_trusted __attribute__((btf_decl_tag("arg:trusted")))
#endif
/* ... and as an untrusted one, read through read-only loads (2025
 * kernels: docs/kernel.md). */
#ifndef __arg_untrusted
#define __arg_untrusted __attribute__((btf_decl_tag("arg:untrusted")))
#endif

static __always_inline __u32 tid_of(struct task_struct *task)
{
	return bpf_core_cast(task, struct task_struct)->pid;
}

static __always_inline struct mt_ctl *get_ctl(void)
{
	__u32 z = 0;
	return bpf_map_lookup_elem(&ctl, &z);
}

/* Bump a per-CPU counter (field of struct mt_stats). */
#define STAT(field)                                                            \
	do {                                                                   \
		__u32 _z = 0;                                                  \
		struct mt_stats *_st = bpf_map_lookup_elem(&stats, &_z);       \
		if (_st)                                                       \
			_st->field++;                                          \
	} while (0)

static __always_inline struct mt_view *view_of(__u32 tid)
{
	return bpf_map_lookup_elem(&view, &tid);
}

static __always_inline struct mt_rxfast *rxf_of(__u32 tid)
{
	return bpf_map_lookup_elem(&rx_fast, &tid);
}

/* The fast receptions' clock into the thread's own (see rx_fast). */
static __always_inline void clock_fold(struct mt_thread *t, struct mt_rxfast *f)
{
	if (f && f->clock > t->lamport)
		t->lamport = f->clock;
}

/* After a slow path moved t's clock: the fast paths continue from it. */
static __always_inline void clock_sync(struct mt_thread *t, struct mt_rxfast *f)
{
	if (f)
		f->clock = t->lamport;
}

/* Forget what the fast path knew of a thread: an operation changed it (t:
 * its clock is folded into t first), or the tid begins or ends a thread
 * (t == 0: the clock goes too). */
static __always_inline void rxf_reset(struct mt_rxfast *f, struct mt_thread *t)
{
	if (!f)
		return;
	if (t) {
		clock_fold(t, f);
		clock_sync(t, f);
	} else {
		f->clock = 0;
	}
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++)
		f->inf[w] = 0;
}

/* Some thread is about to hold a tag (see mt_held_any). */
static __always_inline void mark_held(void)
{
	if (!mt_held_any)
		mt_held_any = 1;
}

static __always_inline int vec_empty(const __u64 *v)
{
	__u64 any = 0;
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++)
		any |= v[w];
	return any == 0;
}

/* Index of the lowest set bit (m != 0); shared with its host unit test. */
#include "ctz64.h"

/*
 * The host of a task: this machine's id in its initial network namespace;
 * other namespaces are hosts of their own (so that namespaces joined by veth
 * pairs behave as separate machines, which is how mantle tests tags across
 * machines on one box).
 */
static __always_inline __u32 host_of_netns(struct mt_ctl *c, __u64 cookie)
{
	if (!cookie || cookie == c->host_netns)
		return c->host_id;
	/* fold the namespace cookie into the machine id (never 0) */
	return (c->host_id ^ (__u32)(cookie * 0x9e3779b97f4a7c15ULL >> 32)) | 1;
}

/*
 * Walked through a read-only (untrusted) cast: a walk from a trusted task
 * pointer makes the verifier search all of vmlinux BTF by name for
 * "<struct>__safe_trusted" at every load, in every explored state; with
 * this inlined after the tag loops that was 15 of 17 s of `tags up`.
 */
static __always_inline __u32 host_of(struct mt_ctl *c, struct task_struct *task)
{
	struct task_struct *tk = bpf_core_cast(task, struct task_struct);
	struct net *net = tk->nsproxy ? tk->nsproxy->net_ns : 0;

	return host_of_netns(c, net ? net->net_cookie : 0);
}

static __always_inline int task_is_system(struct task_struct *task, struct mt_thread *t)
{
	if (t && (t->flags & MT_F_USER_SET))
		return (t->flags & MT_F_SYSTEM) != 0;
	return (task->flags & PF_KTHREAD) || task->tgid == 1;
}

/* Runs the block after the names for each set bit of m (word w), lowest
 * first, with idx (tag bit index) and bit (mask in the word); consumes m. */
#define for_each_bit(m, w, idx, bit, ...)                                      \
	for (int _i = 0; _i < 64 && (m); _i++) {                               \
		__u32 _b = ctz64(m);                                           \
		__u64 bit = 1ULL << _b;                                        \
		__u32 idx = ((w) * 64 + _b) & (MT_TAGS - 1);                   \
		(m) &= (m) - 1;                                                \
		__VA_ARGS__                                                    \
	}

/*
 * Snapshot of the current thread's passable tags (held, live, TTL > 0), with
 * the TTLs of the set bits only. Returns 0, after one array load, when the
 * thread holds nothing.
 */
static __always_inline int take_snapshot_of(struct task_struct *task, struct snap *s,
					    struct mt_ctl **cp)
{
	struct task_struct *tk = bpf_core_cast(task, struct task_struct);
	__u32 tid = tk->pid;
	struct mt_view *v = view_of(tid);
	struct mt_rxfast *f;
	struct mt_thread *t;
	struct mt_ctl *c;
	__u64 any = 0;

	if (!v || vec_empty(v->vec))
		return 0;
	c = get_ctl();
	if (!c)
		return 0;
	t = bpf_task_storage_get(&threads, task, 0, 0);
	if (!t)
		return 0;
	f = rxf_of(tid);
	clock_fold(t, f);
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		__u64 m = v->vec[w] & c->live[w] & ~t->spent[w];

		s->vec[w] = m;
		any |= m;
		for_each_bit(m, w, idx, bit, { s->ttl[idx] = t->ttl[idx]; })
	}
	if (!any)
		return 0;
	s->lamport = ++t->lamport; /* a send is an event of the sender */
	clock_sync(t, f);
	s->host = host_of(c, task);
	s->tid = tid;
	s->pid = tk->tgid;
	*cp = c;
	return 1;
}

/*
 * The same snapshot without the task storage (rx_fast), when every
 * passable tag the thread holds has an unlimited TTL (so none is spent and
 * each TTL is MT_TTL_INF): the view, the fast clock and ctl only. tk may be
 * an untrusted pointer (read-only loads). 0: take the slow path.
 */
static __always_inline int take_snapshot_fast(struct task_struct *tk, struct snap *s,
					      struct mt_ctl **cp)
{
	struct task_struct *t = bpf_core_cast(tk, struct task_struct);
	__u32 tid = t->pid;
	struct mt_view *v = view_of(tid);
	struct mt_rxfast *f = rxf_of(tid);
	struct mt_ctl *c = get_ctl();
	__u64 any = 0;

	if (!v || !f || !c || f->epoch != c->epoch)
		return 0;
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		__u64 m = v->vec[w] & c->live[w];

		if (m & ~f->inf[w])
			return 0;
		s->vec[w] = m;
		any |= m;
		for_each_bit(m, w, idx, bit, { s->ttl[idx] = MT_TTL_INF; })
	}
	if (!any)
		return 0;
	s->lamport = ++f->clock; /* f->clock >= the thread's own (clock_sync) */
	s->host = host_of(c, t);
	s->tid = tid;
	s->pid = t->tgid;
	*cp = c;
	return 1;
}

/* Whether task holds tags: one array load. */
static __always_inline int task_tagged(struct task_struct *task)
{
	struct mt_view *v = view_of(tid_of(task));

	return v && !vec_empty(v->vec);
}

/* The snapshot of task (trusted: the slow path reads its task storage),
 * the fast one where it can be made. */
static __always_inline int take_snapshot_task(struct task_struct *task, struct snap *s,
					      struct mt_ctl **cp)
{
	return take_snapshot_fast(task, s, cp) || take_snapshot_of(task, s, cp);
}

/* The current thread's snapshot, with one helper call (for `current`) and
 * the task storage only if the fast snapshot cannot be made. */
static __always_inline int take_snapshot(struct snap *s, struct mt_ctl **cp)
{
	struct task_struct *task = cur_task();

	if (!task_tagged(task))
		return 0; /* most threads: nothing more to look at */
	return take_snapshot_task(task, s, cp);
}


/*
 * Append one record to tag idx's lifeline ring. *now is the event's time:
 * 0 until its first record reads the clock, so that every record of one
 * reception (several lifeline tags in one message) carries the same time
 * and the clock is read once: bpf_ktime_get_ns measured ~65 ns a call on
 * the CI machines, two thirds of a record (docs/tags.md, "Fifth session";
 * likely its returns through the SRSO thunk and the indirect call to the
 * clocksource).
 */
static __always_inline void ll_record(struct mt_ctl *c, __u32 idx, struct task_struct *rx,
				      __u32 tx_tid, __u32 tx_pid, __u32 kind, __u8 ttl,
				      __u64 lamport, __u32 tx_host, __u64 *now)
{
	__u32 size, base, slot;
	__u64 n;
	struct mt_reception *r;
	struct mt_tag *tg;

	idx &= MT_TAGS - 1;
	size = c->ll_size[idx & (MT_TAGS - 1)];
	if (!size)
		return;
	base = c->ll_base[idx & (MT_TAGS - 1)];
	n = __sync_fetch_and_add(&c->ll_head[idx & (MT_TAGS - 1)], 1);
	slot = base + (__u32)(n % size);
	r = bpf_map_lookup_elem(&lifeline, &slot);
	if (!r)
		return;
	tg = bpf_map_lookup_elem(&tags, &idx);
	r->seq = 0; /* readers skip a record while it is being written */
	if (!*now)
		*now = bpf_ktime_get_ns();
	r->ts_ns = *now;
	r->rx_tid = rx->pid;
	r->rx_pid = rx->tgid;
	r->tx_tid = tx_tid;
	r->tx_pid = tx_pid;
	r->kind = kind;
	r->tag = idx;
	r->ttl = ttl;
	r->generation = tg ? tg->generation : 0;
	/* plain loads, not bpf_probe_read_kernel_str (a helper call, ~20 ns
	 * here, issue 15): comm is 16 bytes the kernel keeps NUL-padded
	 * (__set_task_comm pads), and a rename racing with this copy tears it
	 * exactly as the helper's copy would */
	__builtin_memcpy(r->rx_comm, bpf_core_cast(rx, struct task_struct)->comm, sizeof(r->rx_comm));
	r->lamport = lamport;
	r->rx_host = host_of(c, rx);
	r->tx_host = tx_host;
	r->seq = n + 1;
}

/*
 * Give `task` the tags of snapshot `s`. hop: decrement TTLs (a message);
 * not for fork, which is inheritance. dep_epoch drops bits freed (and
 * perhaps reused) after the snapshot was taken. In the steady state (the
 * thread already holds the tag with at least this TTL) nothing is written.
 */
static __always_inline void deliver(struct mt_ctl *c, struct task_struct *task, struct snap *s,
				    __u32 dep_epoch, __u32 kind, __u32 tx_tid, __u32 tx_pid, int hop)
{
	__u32 tid = task->pid;
	struct mt_view *v = view_of(tid);
	struct mt_rxfast *f = rxf_of(tid);
	struct mt_thread *t;
	__u64 now = 0;
	int sys;
	/* A deadlock tag marks a synchronous call chain: it rides only
	 * channels where an answer ends the call (connected stream sockets;
	 * the senders strip it from the others' deposits too). A datagram, a
	 * pipe, a queue, an eventfd, shared memory or a signal has no answer,
	 * so a receiver would hold the chain's tag with no end and be taken
	 * for a participant (issue 32: a logger fed by a chain's service was
	 * refused a connect to the chain's origin). All ones: keep; else the
	 * deadlock bits go. */
	__u64 call = -(__u64)(kind == MT_K_UNIX_STREAM || kind == MT_K_UNIX_SEQPACKET ||
			      kind == MT_K_TCP);

	if (!v) {
		STAT(no_view);
		return;
	}
	t = bpf_task_storage_get(&threads, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!t)
		return;
	sys = task_is_system(task, t);
	STAT(hops);
	clock_fold(t, f);
	if (f && f->epoch != c->epoch) {
		rxf_reset(f, t);
		f->epoch = c->epoch;
	}
	/* a reception: max(own, message) + 1 */
	if (s->lamport > t->lamport)
		t->lamport = s->lamport;
	t->lamport++;
	clock_sync(t, f);
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		__u64 m = s->vec[w] & c->live[w] & (call | ~c->deadlock[w]);
		__u64 ok = m & ~t->term[w];
		/* Lifeline records: every message is a reception, a shared
		 * mapping only of the tags the thread did not hold (a process
		 * maps one object many times). Branch-free (shm: 1 for
		 * MT_K_SHM, else 0): a test here took mt_sys_exit past the
		 * verifier's limit of 1M instructions (from 0.49M). */
		__u64 shm = ((__u64)(kind ^ MT_K_SHM) - 1) >> 63;
		__u64 rec = c->lifeline[w] & ~(-shm & v->vec[w]);

		__u64 seen = 0, inf = 0;

		ok &= sys ? c->system[w] : ~c->system[w];
		if (ok != m)
			STAT(rejected);
		for_each_bit(ok, w, idx, bit, {
			__u8 nt, cur;
			int held;

			if (c->freed_epoch[idx & (MT_TAGS - 1)] > dep_epoch)
				continue;
			seen |= bit;
			nt = s->ttl[idx & (MT_TAGS - 1)];
			if (hop && nt != MT_TTL_INF && nt > 0)
				nt--;
			cur = t->ttl[idx & (MT_TAGS - 1)];
			held = (v->vec[w] & bit) != 0;
			if (!held || nt > cur) {
				t->ttl[idx & (MT_TAGS - 1)] = nt;
				if (nt == 0)
					__sync_fetch_and_or(&t->spent[w], bit);
				else if (t->spent[w] & bit)
					__sync_fetch_and_and(&t->spent[w], ~bit);
				if (!held) {
					mark_held();
					__sync_fetch_and_or(&v->vec[w], bit);
				}
				cur = nt;
			}
			if (cur == MT_TTL_INF)
				inf |= bit;
			if (rec & bit)
				ll_record(c, idx, task, tx_tid, tx_pid, kind, cur, t->lamport, s->host,
					  &now);
		})
		if (f)
			f->inf[w] = (f->inf[w] & ~seen) | inf;
	}
}

/*
 * The lifeline records of a reception that changes no tag (deliver_fast,
 * rx_inline): every live lifeline tag of m not freed since the deposit's
 * snapshot (dep_epoch), TTL unlimited, one clock (clk) and one time.
 */
static __always_inline void ll_record_held(struct mt_ctl *c, const __u64 *m,
					   struct task_struct *rx, __u32 dep_epoch, __u32 tx_tid,
					   __u32 tx_pid, __u32 kind, __u64 clk, __u32 host)
{
	__u64 now = 0;

#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		__u64 r = m[w] & c->live[w] & c->lifeline[w];

		for_each_bit(r, w, idx, bit, {
			if (c->freed_epoch[idx & (MT_TAGS - 1)] > dep_epoch)
				continue;
			ll_record(c, idx, rx, tx_tid, tx_pid, kind, MT_TTL_INF, clk, host, &now);
		})
	}
}

/*
 * The reader's fast path (rx_fast): a reception that would change no tag
 * or TTL (every tag of the deposit is held already with an unlimited TTL)
 * only moves the fast clock, and records the lifeline tags among them as
 * deliver() would (TTL unlimited, the reception's clock): no task storage
 * and no helper call; rx (the receiving task, read-only) names the record's
 * receiver. Returns 0 when deliver() must run.
 */
static __always_inline int deliver_fast(struct mt_ctl *c, struct snap *s, struct task_struct *rx,
					__u32 tid, __u32 dep_epoch, __u32 kind, __u32 tx_tid,
					__u32 tx_pid)
{
	struct mt_view *v = view_of(tid);
	struct mt_rxfast *f = rxf_of(tid);
	__u64 rec = 0;

	if (!v || !f || f->epoch != c->epoch)
		return 0;
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		__u64 m = s->vec[w] & c->live[w];

		if (m & ~(v->vec[w] & f->inf[w]))
			return 0;
		rec |= m & c->lifeline[w];
	}
	if (s->lamport > f->clock)
		f->clock = s->lamport;
	/* a shared mapping records only tags the thread did not hold (deliver) */
	if (rec && kind != MT_K_SHM) /* a recorded reception is an event */
		ll_record_held(c, s->vec, rx, dep_epoch, tx_tid, tx_pid, kind, ++f->clock, s->host);
	STAT(hops);
	return 1;
}

/*
 * Add snapshot s to deposit d. Lock-free: TTLs first, then the bits are
 * published with one atomic OR per word; concurrent depositors may race on a
 * TTL byte, which only ever loses the larger of two TTLs of one tag.
 */
static __always_inline void deposit(struct mt_deposit *d, struct snap *s, __u32 kind, __u32 epoch,
				    __u64 seq_start, __u64 seq_end)
{
	int was_empty = vec_empty(d->vec);

#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		__u64 m = s->vec[w];

		for_each_bit(m, w, idx, bit, {
			if (was_empty || !(d->vec[w] & bit) ||
			    s->ttl[idx & (MT_TAGS - 1)] > d->ttl[idx & (MT_TAGS - 1)])
				d->ttl[idx & (MT_TAGS - 1)] = s->ttl[idx & (MT_TAGS - 1)];
		})
	}
	if (was_empty) {
		d->seq_start = seq_start;
		d->epoch = epoch;
	} else if (epoch < d->epoch) {
		d->epoch = epoch; /* keep the oldest snapshot's: it drops the most */
	}
	if (was_empty || (__s32)((__u32)seq_end - (__u32)d->seq_end) > 0)
		d->seq_end = seq_end;
	if (s->lamport > d->lamport || was_empty)
		d->lamport = s->lamport;
	d->tx_host = s->host;
	d->kind = kind;
	d->tx_tid = s->tid;
	d->tx_pid = s->pid;
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++)
		if ((d->vec[w] & s->vec[w]) != s->vec[w])
			__sync_fetch_and_or(&d->vec[w], s->vec[w]);
}

/*
 * Copy deposit d into s; clear: the channel is empty now, so the deposit
 * ends here (the vector is swapped to 0 atomically: a concurrent deposit
 * either lands before, and is taken, or after, and stays). Returns 0 if d
 * held nothing.
 */
static __always_inline int take(struct mt_deposit *d, struct snap *s, __u32 *epoch, __u32 *tx_tid,
				__u32 *tx_pid, __u32 reader, int clear)
{
	__u64 any = 0;

#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		__u64 m = d->vec[w];

		if (m && clear)
			m = __sync_lock_test_and_set(&d->vec[w], 0);
		s->vec[w] = m;
		any |= m;
		for_each_bit(m, w, idx, bit, { s->ttl[idx & (MT_TAGS - 1)] = d->ttl[idx & (MT_TAGS - 1)]; })
	}
	if (d->last_reader != reader)
		d->last_reader = reader;
	if (!any)
		return 0;
	s->lamport = d->lamport;
	s->host = d->tx_host;
	*epoch = d->epoch;
	*tx_tid = d->tx_tid;
	*tx_pid = d->tx_pid;
	return 1;
}

/* Deliver a deposit whose data was read (by thread `reader`, 0: unknown)
 * before the deposit was made. */
static __always_inline void deliver_late(struct mt_ctl *c, struct mt_deposit *d, __u32 reader)
{
	struct snap s = {};
	__u32 epoch = 0, tx_tid = 0, tx_pid = 0;
	struct task_struct *rx;

	if (!reader)
		return;
	if (!take(d, &s, &epoch, &tx_tid, &tx_pid, reader, 1))
		return;
	rx = bpf_task_from_pid(reader);
	if (!rx)
		return;
	deliver(c, rx, &s, epoch, d->kind, tx_tid, tx_pid, 1);
	bpf_task_release(rx);
	STAT(late);
}

static __always_inline int key_eq(const struct mt_chan_key *x, const struct mt_chan_key *k)
{
	return x->a == k->a && x->b == k->b && x->type == k->type && x->pad == k->pad;
}

/* Current thread reads deposit d; clear when the channel is left empty.
 * sl (else 0): d is the deposit of fd slot sl (maps.bpf.h, fd_dep), found
 * for channel k under the slot's gen g; bits taken while the slot changed
 * hands (gen moved on, or another key) are dropped, never delivered.
 * gc: g << 1 | clear (a global function takes five arguments at most).
 * rx: the current task, read only through read-only loads (cur_of_regs
 * finds it without a helper): its tid and a lifeline record's receiver,
 * without a helper call on the fast path (deliver_fast).
 * A global function: the verifier checks it once, not at every caller
 * (deliver is large: a second copy took mt_sys_exit past 1M instructions). */
__noinline int mt_receive_in(struct mt_deposit *d, struct mt_fdslot *sl, struct mt_chan_key *k,
			     __u64 gc, struct task_struct *rx __arg_untrusted)
{
	struct snap s = {};
	__u32 epoch = 0, tx_tid = 0, tx_pid = 0, kind, g = (__u32)(gc >> 1), tid;
	struct mt_ctl *c;

	if (!d || !rx)
		return 0;
	if (sl && (!k || !key_eq(&sl->key, k)))
		return 0;
	tid = rx->pid;
	kind = d->kind;
	if (!take(d, &s, &epoch, &tx_tid, &tx_pid, tid, gc & 1))
		return 0;
	if (sl && (sl->gen != g || !key_eq(&sl->key, k)))
		return 0;
	c = get_ctl();
	if (!c)
		return 0;
	if (deliver_fast(c, &s, rx, tid, epoch, kind, tx_tid, tx_pid))
		return 0;
	deliver(c, cur_task(), &s, epoch, kind, tx_tid, tx_pid, 1);
	return 0;
}

/*
 * The common tagged reception, inline: one that changes nothing but the
 * reader's clock and records lifelines (deliver_fast's case: every live
 * tag of the deposit is held already with an unlimited TTL). The
 * global call into mt_receive_in costs ~10 ns of program time and ~25 ns
 * of wall clock per read on the CI machines (issue 15, sixth session: one
 * more call on this path measured so, bench/tags/RESULTS.md); this path
 * makes none. The deposit is taken word by word with a compare-and-swap
 * against the value checked, so what is taken is exactly what was found
 * to change nothing; a word that a sender changed meanwhile stays, and
 * mt_receive_in (which takes what is left) delivers it. Bits taken while
 * the slot changed hands (gen) are dropped, as mt_receive_in drops them.
 * sl, k and g as for mt_receive_in (sl 0: a socket's deposit, no slot).
 * Lifeline tags are recorded here as deliver_fast records them, for the
 * receiving task rx (read-only; 0: the current task, fetched with the
 * helper only when there is a record to make).
 * Returns 1 when the reception is done, 0 when mt_receive_in must run.
 */
static __always_inline int rx_inline(struct mt_deposit *d, struct mt_fdslot *sl,
				     const struct mt_chan_key *k, __u32 g, __u32 tid, int clear,
				     struct task_struct *rx)
{
	struct mt_ctl *c = get_ctl();
	struct mt_view *v = view_of(tid);
	struct mt_rxfast *f = rxf_of(tid);
	__u64 m[MT_WORDS], rec = 0;
	int done = 1;

	if (!c || !v || !f || f->epoch != c->epoch)
		return 0;
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		__u64 live = (m[w] = d->vec[w]) & c->live[w];

		if (live & ~(v->vec[w] & f->inf[w]))
			return 0;
		rec |= live & c->lifeline[w];
	}
	if (rec && !rx)
		rx = cur_task(); /* a helper call, only for a record */
	/* m becomes what this reception takes: a word another sender
	 * changed, and every word after it, stay for mt_receive_in */
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		if (!clear || !m[w])
			continue;
		if (!done || __sync_val_compare_and_swap(&d->vec[w], m[w], 0) != m[w]) {
			done = 0;
			m[w] = 0;
		}
	}
	if (d->last_reader != tid)
		d->last_reader = tid;
	if (sl && (!k || sl->gen != g || !key_eq(&sl->key, k)))
		return done; /* taken while the slot changed hands: dropped */
	if (d->lamport > f->clock)
		f->clock = d->lamport;
	if (rec) /* deliver_fast's records: one event */
		ll_record_held(c, m, rx, d->epoch, d->tx_tid, d->tx_pid, d->kind, ++f->clock,
			       d->tx_host);
	if (done)
		STAT(hops); /* else mt_receive_in counts it */
	return done;
}

/* Any deposit but an fd slot's. */
#define mt_receive(d, clear) mt_receive_in((d), 0, 0, (clear) ? 1 : 0, cur_task())
