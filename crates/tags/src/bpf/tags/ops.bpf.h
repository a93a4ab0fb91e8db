/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * tags.bpf.c: operations, the only writers of the tag table and of other
 * threads' state: expiry timers, root's mt_admin (the frozen public maps
 * change only here), apply_op with its policy (who may set what, decided
 * once), the self-operation uprobe, and the op, list and sweep iterators.
 *
 * A piece of tags.bpf.c, not a header: included once, in order, by
 * tags.bpf.c (one object, one skeleton), and it uses what the pieces
 * before it define.
 */

#define CLOCK_MONOTONIC 1

/*
 * A LIVE tag stops travelling at once and becomes DELETING; the next sweep
 * clears it from its holders and frees the bit. The one way out of LIVE:
 * expiry, an owner's self-operation and root's mt_admin all come here.
 */
static __always_inline int retire(struct mt_ctl *c, struct mt_tag *tg, __u32 idx)
{
	__u32 w = (idx / 64) & (MT_WORDS - 1);
	__u64 bit = 1ULL << (idx % 64);

	if (__sync_val_compare_and_swap(&tg->state, MT_ST_LIVE, MT_ST_DELETING) != MT_ST_LIVE)
		return -MT_ENOENT;
	__sync_fetch_and_or(&c->deleting[w], bit);
	__sync_fetch_and_and(&c->live[w], ~bit);
	return 0;
}

/*
 * A tag's time is up: it stops travelling at once (no longer live) and
 * becomes DELETING; the next sweep (any table command, or reading the sweep
 * iterator) clears it from its holders and frees the bit. A timer armed for
 * an earlier generation of the bit does nothing.
 */
static int expire_cb(void *map, __u32 *key, struct mt_expiry *e)
{
	__u32 idx = *key & (MT_TAGS - 1);
	struct mt_tag *tg = bpf_map_lookup_elem(&tags, &idx);
	struct mt_ctl *c = get_ctl();

	if (!tg || !c || tg->generation != e->generation)
		return 0;
	retire(c, tg, idx);
	return 0;
}

/*
 * Privileged, as the README, the CLI and the API define it
 * (mantle_sys::os::privileged): CAP_SYS_ADMIN or CAP_BPF in the task's
 * effective set, and its credentials in the initial user namespace. Never
 * uid 0 (issue 32): a container's root without a user namespace, or
 * `setpriv --reuid=0 --inh-caps=-all --bounding-set=-all`, is uid 0 with
 * no capability; root inside `unshare -Ur` has them all, but only over
 * its own namespace. Plain loads through a read-only cast of the task's
 * credentials (task->cred->cap_effective, cred->user_ns->level: only the
 * initial namespace has level 0), no helper: the self-operation probe is
 * not a hot path, but nothing here needs one.
 */
#define MT_CAP_SYS_ADMIN 21
#define MT_CAP_BPF 39
static __always_inline int task_privileged(struct task_struct *task)
{
	const struct cred *cr = bpf_core_cast(task, struct task_struct)->cred;
	struct user_namespace *ns;
	__u64 caps;

	if (!cr)
		return 0;
	ns = cr->user_ns;
	if (!ns || ns->level != 0)
		return 0;
	caps = cr->cap_effective.val;
	return (caps & ((1ULL << MT_CAP_SYS_ADMIN) | (1ULL << MT_CAP_BPF))) != 0;
}

/*
 * The caller of a syscall program (BPF_PROG_RUN runs it in the caller's
 * context) or the reader of an iterator is privileged. Their pins are
 * root's, but a pin's owner is uid 0, and uid 0 passes the file's
 * permission checks without any capability: a process that is uid 0 with
 * every capability dropped can BPF_OBJ_GET them (Linux >= 6.4), so the
 * programs check for themselves (issue 32).
 */
static __always_inline int caller_privileged(void)
{
	return task_privileged(bpf_get_current_task_btf());
}

/*
 * Arms a tag's expiry timer. A BPF_PROG_RUN (syscall) program because the
 * kernel refuses timers in tracing programs; root runs it (pinned 0600).
 */
SEC("syscall")
int mt_arm_expiry(struct mt_expire_args *a)
{
	__u32 idx = a->tag & (MT_TAGS - 1);
	struct mt_tag *tg = bpf_map_lookup_elem(&tags, &idx);
	struct mt_expiry *e = bpf_map_lookup_elem(&expiry, &idx);
	struct mt_ctl *c = get_ctl();

	if (!caller_privileged())
		return -MT_EPERM;
	if (a->tag >= MT_TAGS || !tg || !e || !c || tg->state != MT_ST_LIVE)
		return -MT_ENOENT;
	e->generation = tg->generation;
	bpf_timer_init(&e->timer, &expiry, CLOCK_MONOTONIC);
	bpf_timer_set_callback(&e->timer, expire_cb);
	if (bpf_timer_start(&e->timer, (__u64)a->ms * 1000000ULL, 0))
		return -MT_EINVAL;
	return 0;
}

static __always_inline void set_bit_to(__u64 *word, __u64 bit, int on)
{
	if (on)
		__sync_fetch_and_or(word, bit);
	else
		__sync_fetch_and_and(word, ~bit);
}

/* bpf_loop's step: empty one slot of a new lifeline ring (readers skip a
 * record whose seq is 0). */
struct ll_clear {
	__u32 base, end;
};
static int ll_clear_one(__u32 i, struct ll_clear *lc)
{
	__u32 slot = lc->base + i;
	struct mt_reception *r;

	if (slot >= lc->end)
		return 1;
	r = bpf_map_lookup_elem(&lifeline, &slot);
	if (r)
		r->seq = 0;
	return 0;
}

/*
 * The parameters of root's next operation on other threads, into the
 * frozen `op` map that the op iterator reads (issue 32: a writable `op`
 * let a capability-less uid 0 change what a root command was about to do
 * to other threads).
 */
SEC("syscall")
int mt_set_op(struct mt_op *o)
{
	__u32 z = 0;
	struct mt_op *dst = bpf_map_lookup_elem(&op, &z);

	if (!caller_privileged())
		return -MT_EPERM;
	if (!dst)
		return -MT_EINVAL;
	*dst = *o;
	return 0;
}

/*
 * Root's changes of the table (BPF_PROG_RUN; the pin is root-only). `ctl`
 * and `tags` are frozen, so no user space can write them, root's included:
 * this program is the one writer besides the hooks. An entry is filled
 * before its state becomes LIVE and its live bit is set, so the hooks never
 * see a half-written tag.
 */
SEC("syscall")
int mt_admin(struct mt_admin *a)
{
	__u32 idx = a->tag & (MT_TAGS - 1);
	__u32 w = idx / 64;
	__u64 bit = 1ULL << (idx % 64);
	struct mt_tag *tg = bpf_map_lookup_elem(&tags, &idx);
	struct mt_ctl *c = get_ctl();
	__u32 f = a->flags;

	if (!caller_privileged())
		return -MT_EPERM;
	if (!tg || !c || w >= MT_WORDS)
		return -MT_EINVAL;
	switch (a->code) {
	case MT_ADM_DIGEST:
		c->cluster_digest = a->digest;
		return 0;
	case MT_ADM_DELETE:
		if (a->tag >= MT_TAGS)
			return -MT_EINVAL;
		return retire(c, tg, idx);
	case MT_ADM_INSTALL:
		break;
	default:
		return -MT_EINVAL;
	}
	if (a->tag >= MT_TAGS || a->ll_size > MT_LIFELINE_SLOTS ||
	    a->ll_base > MT_LIFELINE_SLOTS - a->ll_size)
		return -MT_EINVAL;
	if ((f & MT_F_GLOBAL) && idx >= MT_GLOBAL_BITS)
		return -MT_EINVAL;
	if (tg->state != MT_ST_FREE)
		return -MT_EEXIST;
	/* The owner, and an empty lifeline ring: `owners` and `lifeline` are
	 * frozen (issue 32), so this program writes them, not user space. */
	{
		struct mt_owner *o = bpf_map_lookup_elem(&owners, &idx);
		struct ll_clear lc = {.base = a->ll_base, .end = a->ll_base + a->ll_size};

		if (!o)
			return -MT_EINVAL;
		o->uid = a->owner_uid;
		o->pid = bpf_get_current_task_btf()->tgid;
		if (a->ll_size)
			bpf_loop(a->ll_size, ll_clear_one, &lc, 0);
	}
	/* masked at each use: the compiler spills idx and the verifier then
	 * forgets its bound */
	c->default_ttl[idx & (MT_TAGS - 1)] = a->default_ttl;
	c->ll_base[idx & (MT_TAGS - 1)] = a->ll_base;
	c->ll_size[idx & (MT_TAGS - 1)] = a->ll_size;
	__sync_fetch_and_and(&c->ll_head[idx & (MT_TAGS - 1)], 0);
	set_bit_to(&c->system[w], bit, f & MT_F_SYSTEM);
	set_bit_to(&c->replies[w], bit, f & MT_F_REPLIES);
	set_bit_to(&c->lifeline[w], bit, a->ll_size != 0);
	set_bit_to(&c->deadlock[w], bit, f & MT_F_DEADLOCK);
	set_bit_to(&c->global[w], bit, f & MT_F_GLOBAL);
	set_bit_to(&c->anyone[w], bit, f & MT_F_ANYONE);
	set_bit_to(&c->per_request[w], bit, f & MT_F_PER_REQUEST);
	__builtin_memcpy(tg->name, a->name, MT_NAME_LEN);
	tg->name[MT_NAME_LEN - 1] = 0;
	tg->flags = f | (a->ll_size ? MT_F_LIFELINE : 0);
	tg->created_ns = a->created_ns;
	tg->generation++;
	/* publish: the state word, then the live bit, after every field */
	if (__sync_val_compare_and_swap(&tg->state, MT_ST_FREE, MT_ST_LIVE) != MT_ST_FREE)
		return -MT_EEXIST;
	__sync_fetch_and_or(&c->live[w], bit);
	return 0;
}

/*
 * The calling thread's uid owns tag idx (mt_owner, root-only map). A tag
 * owned by uid 0 is root's: only a privileged caller (who needs no
 * ownership) has root's rights over it, never a process that is uid 0
 * without capabilities (issue 32).
 */
static __always_inline int is_owner(__u32 idx)
{
	struct mt_owner *o = bpf_map_lookup_elem(&owners, &idx);
	__u32 uid = (__u32)bpf_get_current_uid_gid();

	return o && uid != 0 && o->uid == uid;
}

/*
 * A TTL a thread sets on itself is at most the tag's own TTL unless the
 * caller is root or the tag's owner (mTags section 9: only the owner
 * changes a tag's features), so "travels two hops at most" holds against
 * every other user. root: the caller is privileged (task_privileged).
 */
static __always_inline __u8 ttl_cap(struct mt_ctl *c, __u32 idx, __u32 ttl, int root)
{
	__u8 max = c->default_ttl[idx & (MT_TAGS - 1)];

	if (root || max == MT_TTL_INF || ttl <= max || is_owner(idx))
		return ttl;
	return max;
}

/*
 * Apply one operation to `task`. The caller has decided who may do what:
 * `root` ops may touch any thread and change classes; self ops (the uprobe)
 * only touch the calling thread. Returns 0 or a negative MT_E* error.
 */
static __always_inline int apply_op(struct mt_ctl *c, struct task_struct *task, __u32 code,
				    __u32 tag, __u32 arg, int root)
{
	__u32 idx = tag & (MT_TAGS - 1);
	__u32 w = idx / 64;
	__u64 bit = 1ULL << (idx % 64);
	struct mt_view *v;
	struct mt_thread *t;
	__u64 id = bpf_get_current_pid_tgid();

	if (code == MT_OP_PING)
		return 0;
	if (tag >= MT_TAGS && code != MT_OP_CLASS)
		return -MT_EINVAL;
	v = view_of(task->pid);
	if (!v)
		return -MT_EINVAL;
	t = bpf_task_storage_get(&threads, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!t)
		return -MT_EINVAL;
	/* whatever this changes, the reader's fast path must not assume it */
	rxf_reset(rxf_of(task->pid), t);
	if (w >= MT_WORDS)
		return -MT_EINVAL;
	switch (code) {
	case MT_OP_SET: {
		__u64 now = 0;
		__u8 ttl;

		if (!(c->live[w] & bit))
			return -MT_ENOENT;
		if (t->term[w] & bit)
			return -MT_ETERM;
		if (!!(c->system[w] & bit) != task_is_system(task, t))
			return -MT_ECLASS;
		if (!root && !(c->anyone[w] & bit) && !is_owner(idx))
			return -MT_EPERM;
		ttl = arg ? (arg > MT_TTL_INF ? MT_TTL_INF : arg) : c->default_ttl[idx & (MT_TAGS - 1)];
		if (arg == 0 && ttl == 0)
			ttl = MT_TTL_INF;
		ttl = ttl_cap(c, idx, ttl, root);
		t->ttl[idx & (MT_TAGS - 1)] = ttl;
		if (ttl == 0)
			__sync_fetch_and_or(&t->spent[w], bit);
		else
			__sync_fetch_and_and(&t->spent[w], ~bit);
		mark_held();
		__sync_fetch_and_or(&v->vec[w], bit);
		t->origin[w] |= bit;
		t->lamport++;
		{
			/* the reset above left inf empty: this one tag, if unlimited */
			struct mt_rxfast *f = rxf_of(task->pid);

			clock_sync(t, f);
			if (f && ttl == MT_TTL_INF) {
				f->epoch = c->epoch;
				f->inf[w] |= bit;
			}
		}
		if (c->lifeline[w] & bit)
			ll_record(c, idx, task, (__u32)id, id >> 32, MT_K_SET, ttl, t->lamport,
				  host_of(c, bpf_get_current_task_btf()), &now);
		return 0;
	}
	case MT_OP_CLEAR:
		t->origin[w] &= ~bit;
		__sync_fetch_and_and(&v->vec[w], ~bit);
		__sync_fetch_and_and(&t->spent[w], ~bit);
		t->ttl[idx & (MT_TAGS - 1)] = 0;
		return 0;
	case MT_OP_TERM:
		__sync_fetch_and_or(&t->term[w], bit);
		__sync_fetch_and_and(&v->vec[w], ~bit);
		__sync_fetch_and_and(&t->spent[w], ~bit);
		t->ttl[idx & (MT_TAGS - 1)] = 0;
		return 0;
	case MT_OP_UNTERM:
		__sync_fetch_and_and(&t->term[w], ~bit);
		return 0;
	case MT_OP_TTL:
		if (!(v->vec[w] & bit))
			return -MT_ENOENT;
		if (arg > MT_TTL_INF)
			return -MT_EINVAL;
		arg = ttl_cap(c, idx, arg, root);
		t->ttl[idx & (MT_TAGS - 1)] = arg;
		if (arg == 0)
			__sync_fetch_and_or(&t->spent[w], bit);
		else
			__sync_fetch_and_and(&t->spent[w], ~bit);
		return 0;
	case MT_OP_CLASS:
		if (!root)
			return -MT_EPERM;
		t->flags = MT_F_USER_SET | ((arg & MT_CLASS_SYSTEM) ? MT_F_SYSTEM : 0) |
			   ((arg & MT_CLASS_CHILDREN_USER) ? MT_F_CHILDREN_USER : 0);
		return 0;
	case MT_OP_DELETE: {
		struct mt_tag *tg = bpf_map_lookup_elem(&tags, &idx);
		struct mt_owner *o = bpf_map_lookup_elem(&owners, &idx);

		if (!tg || !o)
			return -MT_EINVAL;
		if (!root && !is_owner(idx))
			return -MT_EPERM;
		return retire(c, tg, idx);
	}
	}
	return -MT_EINVAL;
}

/*
 * The trusted path for unprivileged threads: a uprobe on libmantle's
 * mantle_tag_ctl(op, tag, arg, seq). It runs in the caller's context, so it
 * can only ever change the caller's own state; the answer goes to the
 * caller's view entry (op_err, then op_seq), which it reads back.
 */
SEC("uprobe")
int BPF_KPROBE(mt_ctl_self, __u32 code, __u32 tag, __u32 arg, __u32 seq)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct mt_view *v = view_of(task->pid);
	struct mt_ctl *c = get_ctl();
	int root = task_privileged(task);
	int err;

	if (!v || !c)
		return 0;
	err = apply_op(c, task, code, tag, arg, root);
	v->op_err = err;
	__sync_fetch_and_add(&v->op_seq, 0); /* order: err before seq */
	v->op_seq = seq;
	return 0;
}

static __always_inline void emit(struct seq_file *seq, struct task_struct *task, int err)
{
	struct mt_thread_rec rec = {};
	struct mt_view *v = view_of(task->pid);
	struct mt_thread *t = bpf_task_storage_get(&threads, task, 0, 0);

	rec.tid = task->pid;
	rec.pid = task->tgid;
	rec.err = err;
	if (v)
		__builtin_memcpy(rec.vec, v->vec, sizeof(rec.vec));
	if (t) {
		__builtin_memcpy(rec.term, t->term, sizeof(rec.term));
		__builtin_memcpy(rec.ttl, t->ttl, MT_TAGS);
		rec.flags = t->flags;
	}
	if (!t || !(t->flags & MT_F_USER_SET))
		rec.flags = task_is_system(task, t) ? MT_F_SYSTEM : 0;
	bpf_probe_read_kernel_str(rec.comm, sizeof(rec.comm), task->comm);
	bpf_seq_write(seq, &rec, sizeof(rec));
}

/* Tool operation on other threads (root: the pinned link is root-only). */
SEC("iter/task")
int mt_op_iter(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	__u32 z = 0;
	struct mt_op *o = bpf_map_lookup_elem(&op, &z);
	struct mt_ctl *c = get_ctl();

	if (!task || !o || !c)
		return 0;
	/* the reader runs this: only a privileged one (caller_privileged) */
	if (!caller_privileged())
		return 0;
	if (o->tid ? task->pid != o->tid : task->tgid != o->pid)
		return 0;
	/* An exiting thread (a zombie too) had its slot cleared for the last
	 * time by mt_exit: a tag set now would outlive it. Not listed, so
	 * `--tid` of one is "no such thread", and `--pid` takes the live ones. */
	if (task->flags & PF_EXITING)
		return 0;
	emit(ctx->meta->seq, task, apply_op(c, task, o->code, o->tag, o->arg, 1));
	return 0;
}

/* Every thread that holds a tag, a terminator or an explicit class. */
SEC("iter/task")
int mt_list_iter(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct mt_view *v;
	struct mt_thread *t;

	if (!task || !caller_privileged())
		return 0;
	v = view_of(task->pid);
	t = bpf_task_storage_get(&threads, task, 0, 0);
	if ((v && !vec_empty(v->vec)) || (t && (!vec_empty(t->term) || (t->flags & MT_F_USER_SET))))
		emit(ctx->meta->seq, task, 0);
	return 0;
}

/*
 * Deletion sweep: clear the bits of DELETING tags from every thread, then
 * (at the end of the walk) free them. World-readable pin: reading it is
 * harmless and lets a tag's unprivileged owner finish a deletion.
 */
SEC("iter/task")
int mt_sweep_iter(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct mt_ctl *c = get_ctl();

	if (!c)
		return 0;
	if (task) {
		struct mt_view *v = view_of(task->pid);
		struct mt_thread *t = bpf_task_storage_get(&threads, task, 0, 0);

#pragma unroll
		for (int w = 0; w < MT_WORDS; w++) {
			__u64 dead = c->deleting[w];

			if (!dead)
				continue;
			if (v && (v->vec[w] & dead))
				__sync_fetch_and_and(&v->vec[w], ~dead);
			if (t) {
				if (t->term[w] & dead)
					__sync_fetch_and_and(&t->term[w], ~dead);
				if (t->spent[w] & dead)
					__sync_fetch_and_and(&t->spent[w], ~dead);
			}
		}
		return 0;
	}
	/* end of the walk: every holder is clean, free the bits */
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		__u64 m = c->deleting[w];

		for (int i = 0; i < 64 && m; i++) {
			__u32 b = ctz64(m);
			__u32 idx = (w * 64 + b) & (MT_TAGS - 1);
			__u64 bit = 1ULL << b;
			struct mt_tag *tg = bpf_map_lookup_elem(&tags, &idx);

			m &= m - 1;
			if (!tg)
				continue;
			if (__sync_val_compare_and_swap(&tg->state, MT_ST_DELETING, MT_ST_FREE) ==
			    MT_ST_DELETING) {
				__u32 e = __sync_fetch_and_add(&c->epoch, 1) + 1;

				c->freed_epoch[idx & (MT_TAGS - 1)] = e;
				c->ll_size[idx & (MT_TAGS - 1)] = 0;
				__sync_fetch_and_and(&c->system[w], ~bit);
				__sync_fetch_and_and(&c->lifeline[w], ~bit);
				__sync_fetch_and_and(&c->deadlock[w], ~bit);
			}
			__sync_fetch_and_and(&c->deleting[w], ~bit);
		}
	}
	return 0;
}
