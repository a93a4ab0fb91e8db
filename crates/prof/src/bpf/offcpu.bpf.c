// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * mantle prof --off-cpu: the time threads spend blocked, and where.
 *
 * One BTF tracepoint program on sched_switch, run by the CPU switching,
 * with `prev` still current:
 *  - switch-out: a thread that leaves the CPU blocked (not preempted:
 *    `preempt` false and a state other than TASK_RUNNING) and that the
 *    target filter takes has its kernel and user stacks stored (the
 *    same FNV-1a-keyed table as the sample path's, prof.bpf.c) and the
 *    time and the two stack keys put in `starts` under its tid;
 *  - switch-in: when `next` has a start, the time since is charged to
 *    (tgid, tid, kernel stack, user stack) in `counts` (ns and blocks,
 *    atomic adds), and the start removed.
 * So the stack is the one at the block and the time is the time until
 * the thread runs again (blocked, then runnable waiting for a CPU), as
 * bcc's offcputime counts it. Aggregated in the kernel: user space reads
 * `counts` without deleting (the totals only grow), so memory is bounded
 * by the maps' sizes whatever the recording's length; what does not fit
 * is counted (mo_stats), never silently lost.
 *
 * Target filter (rodata `filter`): every thread (-a); the processes in
 * `targets` and the processes they fork (sched_process_fork program:
 * -p, a command); or the tasks under the cgroup in `cgroup` (--cgroup,
 * bpf_current_task_under_cgroup on prev, which is current). Blocks that
 * began before ctl.since_ns are not charged (a command's wait at its
 * start gate, before exec).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "offcpu.h"
#include "stack_key.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile __u32 filter = MO_FILTER_ALL;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MO_COUNTS);
	__type(key, struct mo_key);
	__type(value, struct mo_val);
} counts SEC(".maps");

/* tid -> when and where it blocked */
struct mo_start {
	__u64 ts;
	__u64 kstack;
	__u64 ustack;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MO_STARTS);
	__type(key, __u32);
	__type(value, struct mo_start);
} starts SEC(".maps");

/* Preallocated (MO_STACKS × 1 KiB, as bcc's offcputime's 16384-entry
 * stack map): allocating on use, as the sample path's table does, failed
 * for the first stacks of a recording in sched_switch (no memory at hand
 * with the run queue locked), which lost the stacks of the first blocks. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MO_STACKS);
	__type(key, __u64);
	__type(value, struct mp_stack);
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mp_stack);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MO_TARGETS);
	__type(key, __u32);
	__type(value, __u8);
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} cgroup SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mo_ctl);
} ctl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mo_stats);
} stats SEC(".maps");

/* The key of the current task's stack (stored in `stacks` if new), or
 * MP_NO_STACK (a kernel thread has no user stack: not a loss). */
static __always_inline __u64 stack_key(void *ctx, __u64 flags, struct mo_stats *s)
{
	return mp_stack_key(ctx, &scratch, &stacks, flags, &s->stack_lost);
}

static __always_inline bool wanted(struct task_struct *t)
{
	__u32 tgid = t->tgid;

	if (t->pid == 0)
		return false; /* an idle task */
	if (filter == MO_FILTER_TGIDS)
		return bpf_map_lookup_elem(&targets, &tgid) != 0;
	if (filter == MO_FILTER_CGROUP)
		return bpf_current_task_under_cgroup(&cgroup, 0) == 1;
	return true;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(mo_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u32 zero = 0, tid;
	struct mo_stats *s = bpf_map_lookup_elem(&stats, &zero);
	struct mo_start *b, st;
	struct mo_ctl *c;
	__u64 now = bpf_ktime_get_ns();

	if (!s)
		return 0;
	/* prev blocked (runnable when preempted or yielding: not off-CPU;
	 * an exiting thread never runs again: no start) */
	if (!preempt && prev_state != 0 && !(prev_state & 0x80 /* TASK_DEAD */) && wanted(prev)) {
		st.ts = now;
		/* from this program's own frame: the tracepoint's
		 * dispatch frames above __schedule are left out in user
		 * space (their number varies: model::offcpu::from_switch) */
		st.kstack = stack_key(ctx, 0, s);
		st.ustack = stack_key(ctx, BPF_F_USER_STACK, s);
		tid = prev->pid;
		if (bpf_map_update_elem(&starts, &tid, &st, BPF_ANY))
			s->start_lost++;
		else
			s->switch_out++;
	}
	tid = next->pid;
	b = bpf_map_lookup_elem(&starts, &tid);
	if (!b)
		return 0;
	c = bpf_map_lookup_elem(&ctl, &zero);
	if (!c || b->ts >= c->since_ns) {
		struct mo_key k = {
			.pid = next->tgid,
			.tid = tid,
			.kstack = b->kstack,
			.ustack = b->ustack,
		};
		__u64 d = now - b->ts;
		struct mo_val one = { .ns = d, .blocks = 1 }, *v;

		s->switch_in++;
		v = bpf_map_lookup_elem(&counts, &k);
		if (v) {
			__sync_fetch_and_add(&v->ns, d);
			__sync_fetch_and_add(&v->blocks, 1);
		} else if (bpf_map_update_elem(&counts, &k, &one, BPF_NOEXIST)) {
			/* another CPU inserted it first, or the map is full */
			v = bpf_map_lookup_elem(&counts, &k);
			if (v) {
				__sync_fetch_and_add(&v->ns, d);
				__sync_fetch_and_add(&v->blocks, 1);
			} else {
				s->dropped++;
				s->dropped_ns += d;
			}
		}
	}
	bpf_map_delete_elem(&starts, &tid);
	return 0;
}

/* -p and a command: a process a target forks is a target. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(mo_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	__u8 one = 1;

	if (filter != MO_FILTER_TGIDS || ptgid == ctgid)
		return 0;
	if (bpf_map_lookup_elem(&targets, &ptgid))
		bpf_map_update_elem(&targets, &ctgid, &one, BPF_ANY);
	return 0;
}
