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

SEC("tp_btf/signal_generate")
int BPF_PROG(mt_signal, int sig, struct kernel_siginfo *info, struct task_struct *task, int group,
	     int result)
{
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
	deliver(c, task, &s, c->epoch, MT_K_SIGNAL, s.tid, s.pid, 1);
	return 0;
}
