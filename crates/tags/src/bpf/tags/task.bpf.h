/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * tags.bpf.c: fork, exit and signals, the task tracepoints: a child
 * inherits its creator's state at fork (not a hop; deadlock tags only from
 * their origin), an exiting thread's
 * vector is cleared, and a signal a thread sends is a request delivered
 * straight to its target (no channel, so no deposit).
 *
 * A piece of tags.bpf.c, not a header: included once, in order, by
 * tags.bpf.c (one object, one skeleton), and it uses what the pieces
 * before it define.
 */

SEC("tp_btf/sched_process_fork")
int BPF_PROG(mt_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptid = (__u32)bpf_get_current_pid_tgid();
	struct mt_view *pv = view_of(ptid), *cv = view_of(child->pid);
	struct mt_rxfast *pf, *cf;
	struct mt_thread *pt, *ct;
	struct mt_ctl *c;
	__u64 now = 0; /* one time for the fork's records */

	if (!cv)
		return 0;
	if (!pv) {
#pragma unroll
		for (int w = 0; w < MT_WORDS; w++)
			cv->vec[w] = 0;
		return 0;
	}
	pt = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);
	if (!pt) {
#pragma unroll
		for (int w = 0; w < MT_WORDS; w++)
			cv->vec[w] = 0;
		return 0;
	}
	c = get_ctl();
	if (!c)
		return 0;
	ct = bpf_task_storage_get(&threads, child, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!ct)
		return 0;
	pf = rxf_of(ptid);
	clock_fold(pt, pf);
	__builtin_memcpy(ct->term, pt->term, sizeof(ct->term));
	__builtin_memcpy(ct->spent, pt->spent, sizeof(ct->spent));
	__builtin_memcpy(ct->ttl, pt->ttl, MT_TAGS);
	ct->flags = pt->flags;
	/* `tag class system --children user`: the processes a system thread
	 * forks are user threads, and hold none of its system tags (issue 32:
	 * a server's workers stay reachable; new threads of its own stay
	 * system threads). */
	if ((pt->flags & MT_F_CHILDREN_USER) && child->pid == child->tgid)
		ct->flags = MT_F_USER_SET;
	ct->lamport = ++pt->lamport; /* the fork is an event of the parent */
	clock_sync(pt, pf);
	/* the child's fast-path state is the parent's (same TTLs, same clock) */
	cf = rxf_of(child->pid);
	if (cf) {
		int ok = pf && pf->epoch == c->epoch;

#pragma unroll
		for (int w = 0; w < MT_WORDS; w++)
			cf->inf[w] = ok ? pf->inf[w] : 0;
		cf->epoch = c->epoch;
		clock_sync(ct, cf);
	}
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		/* A deadlock tag the parent received in a call chain is its
		 * part of that call, which the child never answers: it would
		 * outlive the call (issue 32). Only the chain's origin passes
		 * it on (new threads of a guarded process). */
		__u64 m = pv->vec[w] & c->live[w] & ~(c->deadlock[w] & ~pt->origin[w]);

		/* nor a per-request tag held for a signal's handler: the
		 * child never returns from it (issue 32: a server that forks
		 * in a handler gave every new worker the tag for good) */
		m &= ~(pt->sig[w] & ~pt->origin[w]);
		if (!(ct->flags & MT_F_SYSTEM) && (pt->flags & MT_F_SYSTEM))
			m &= ~c->system[w];
		if (m)
			mark_held();
		cv->vec[w] = m;
		m &= c->lifeline[w];
		for (int i = 0; i < 64 && m; i++) {
			__u32 b = ctz64(m);
			__u32 idx = (w * 64 + b) & (MT_TAGS - 1);
			m &= m - 1;
			ll_record(c, idx, child, ptid, parent->tgid, MT_K_FORK, ct->ttl[idx & (MT_TAGS - 1)],
				  ct->lamport, host_of(c, parent), &now);
		}
	}
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(mt_exit, struct task_struct *task)
{
	struct mt_view *v = view_of(task->pid);

	rxf_reset(rxf_of(task->pid), 0);
	if (v) {
#pragma unroll
		for (int w = 0; w < MT_WORDS; w++)
			v->vec[w] = 0;
	}
	return 0;
}

#define SEND_SIG_PRIV ((void *)1)
#define TRACE_SIGNAL_IGNORED 1
#define TRACE_SIGNAL_OVERFLOW_FAIL 3

/*
 * A signal a thread sends is a request (issue 32: with a request scope).
 * Its tags go with the signal, not to its target at once: a signal whose
 * target runs a handler for it deposits the sender's snapshot on the
 * target thread (sig_dep), and the handler's start takes it (mt_sigdeliver
 * below), so the thread that runs the handler receives them, when it runs
 * it. Per-request tags are held only while that handler runs (deliver(),
 * mt_sigreturn). A signal that runs no handler (its default action, or
 * blocked and taken with signalfd or sigwait; ignored ones are dropped by
 * the kernel before this point) is delivered at once, as before, but
 * without per-request tags: nothing would end their request. Without the
 * sys_exit hook (--no-fd-channels) the handler's return is not seen, so
 * every signal takes that second path.
 */
SEC("tp_btf/signal_generate")
int BPF_PROG(mt_signal, int sig, struct kernel_siginfo *info, struct task_struct *task, int group,
	     int result)
{
	struct task_struct *tk;
	struct sighand_struct *sh;
	struct mt_deposit *d;
	unsigned long h = 0;
	struct snap s;
	struct mt_ctl *c;

	if (!mt_held_any || result == TRACE_SIGNAL_IGNORED || result == TRACE_SIGNAL_OVERFLOW_FAIL)
		return 0;
	/* Only signals a thread sends (kill, tgkill, sigqueue) are requests:
	 * kernel-made ones (SIGCHLD, SIGPIPE, faults) carry si_code > 0. A
	 * plain load through a read-only cast, not BPF_CORE_READ (a helper
	 * call), and before the snapshot (issue 15). */
	if ((unsigned long)info <= (unsigned long)SEND_SIG_PRIV)
		return 0;
	if (bpf_core_cast(info, struct kernel_siginfo)->si_code > 0)
		return 0;
	if (!take_snapshot(&s, &c))
		return 0;
	/* the sender is the current thread: the snapshot has its ids */
	if (task->pid == s.tid)
		return 0;
	/* the target's handler for sig (SIG_DFL 0, SIG_IGN 1, else a handler) */
	tk = bpf_core_cast(task, struct task_struct);
	sh = tk->sighand;
	/* a variable index into a read-only cast is refused: one helper
	 * read (signals are not a hot path) */
	if (sh && sig > 0 && sig <= 64)
		bpf_probe_read_kernel(&h, sizeof(h),
				      (void *)((unsigned long)sh +
					       bpf_core_field_offset(struct sighand_struct, action) +
					       (unsigned long)((sig - 1) & 63) *
						       bpf_core_type_size(struct k_sigaction) +
					       bpf_core_field_offset(struct k_sigaction, sa.sa_handler)));
	if (h > 1 && !(c->opts & MT_OPT_NO_FD_CHANNELS)) {
		/* deadlock tags never ride a signal (deliver drops them too) */
#pragma unroll
		for (int w = 0; w < MT_WORDS; w++)
			s.vec[w] &= ~c->deadlock[w];
		if (vec_empty(s.vec))
			return 0;
		d = bpf_task_storage_get(&sig_dep, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (d)
			deposit(d, &s, MT_K_SIGNAL, c->epoch, 0, 0);
		return 0;
	}
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++)
		s.vec[w] &= ~c->per_request[w];
	deliver(c, task, &s, c->epoch, MT_K_SIGNAL, s.tid, s.pid, 1);
	return 0;
}

/*
 * A handler is about to run on the current thread (get_signal, before its
 * frame is built): it receives the tags of the signals deposited on it
 * (or, for a signal sent to the whole process and taken by another thread,
 * on the thread it was queued on: the group leader for kill()). Every
 * handler that starts while per-request tags are held for a signal counts
 * one level (sig_depth), so that nested handlers return first.
 */
SEC("tp_btf/signal_deliver")
int BPF_PROG(mt_sigdeliver, int sig, struct kernel_siginfo *info, struct k_sigaction *ka)
{
	struct task_struct *task;
	struct mt_deposit *d;
	struct mt_thread *t;
	struct mt_rxfast *f;
	struct mt_view *v;
	struct mt_ctl *c;

	if (!mt_held_any || !ka)
		return 0;
	if ((unsigned long)bpf_core_cast(ka, struct k_sigaction)->sa.sa_handler <= 1)
		return 0; /* default action or ignored: no handler runs */
	task = bpf_get_current_task_btf();
	d = bpf_task_storage_get(&sig_dep, task, 0, 0);
	if ((!d || vec_empty(d->vec)) && task->pid != task->tgid)
		d = bpf_task_storage_get(&sig_dep, task->group_leader, 0, 0);
	c = get_ctl();
	if (!c)
		return 0;
	v = view_of(task->pid);
	if (v && d && !vec_empty(d->vec)) {
		__u64 before[MT_WORDS];

#pragma unroll
		for (int w = 0; w < MT_WORDS; w++)
			before[w] = v->vec[w];
		/* take and deliver through the global function the channels
		 * share (checked once by the verifier: an inline deliver()
		 * here made `tags up` ~40% slower) */
		mt_receive_in(d, 0, 0, 1, task);
		/* The per-request tags this signal made the thread hold are
		 * held for its handler only: kept in t->sig, out of the fast
		 * path's unlimited set (here, not in deliver(): mt_sys_exit,
		 * which inlines deliver, is at the verifier's limit). */
		t = bpf_task_storage_get(&threads, task, 0, 0);
		f = rxf_of(task->pid);
		if (t) {
#pragma unroll
			for (int w = 0; w < MT_WORDS; w++) {
				__u64 n = v->vec[w] & ~before[w] & c->per_request[w];

				t->sig[w] |= n;
				if (f)
					f->inf[w] &= ~n;
			}
		}
	}
	t = bpf_task_storage_get(&threads, task, 0, 0);
	if (t && (t->sig_depth || !vec_empty(t->sig)))
		t->sig_depth++;
	return 0;
}

/*
 * The current thread returned from a signal handler (rt_sigreturn, seen at
 * sys_exit: restoring the frame sets orig_ax to -1). When the outermost
 * handler since per-request tags came by a signal returns, they go, but
 * those it holds as their origin. A global function: mt_sys_exit is
 * near the verifier's limit, and this runs once per handler.
 */
__noinline int mt_sigreturn(struct task_struct *tk __arg_untrusted)
{
	struct mt_view *v;
	struct mt_thread *t;

	if (!tk)
		return 0;
	v = view_of(tk->pid);
	if (!v || vec_empty(v->vec))
		return 0;
	t = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);
	if (!t || !t->sig_depth)
		return 0;
	if (--t->sig_depth)
		return 0;
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		__u64 drop = t->sig[w] & ~t->origin[w];

		t->sig[w] = 0;
		if (drop) {
			__sync_fetch_and_and(&v->vec[w], ~drop);
			__sync_fetch_and_and(&t->spent[w], ~drop);
		}
	}
	return 0;
}
