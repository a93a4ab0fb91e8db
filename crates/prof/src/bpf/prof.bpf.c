// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * mantle prof, the sample path: one perf_event program attached to every
 * sampling perf event (one per CPU, or per CPU for a task and its
 * children). Each run takes pid, tid, cpu, mode (CPL from regs.csx: the
 * 6.x pt_regs has cs in a union with csx and the perf_event context only
 * allows 8-byte loads of regs), the interrupted ip and the thread's tag
 * vector (view[tid], the tags subsystem's map, reused by fd when it is
 * loaded; a private one-entry array otherwise, which yields no tags).
 *
 * Two ways to hand samples over, chosen at load time (rodata use_ring):
 *  - aggregation (default, OProfile-style): counts0/counts1 are hash maps
 *    (mp_key -> samples). `sel` (.bss, written by user space) says which
 *    one takes samples; user space flips it and then drains the other, so
 *    no increment races with a delete.
 *  - ring: every sample is copied to a BPF ring buffer drained by user
 *    space (no wake-up per sample; the reader polls).
 *
 * Call stacks (rodata stacks): bpf_get_stack copies the kernel and the
 * user stack of the sample into a per-CPU scratch buffer; each is hashed
 * (FNV-1a over its frames, 64 bits) and stored once under its hash in
 * stacks0/stacks1 (hash maps allocated on use, flipped with the count
 * maps by `sel`, so user space reads and clears the idle pair); the key
 * carries the two hashes: identical stacks are stored once per drain
 * interval, in the kernel. (A STACK_TRACE map was the first version: it
 * drops a stack whose bucket another holds, which lost 22% of the stacks
 * of a busy system-wide recording with 16 384 buckets.) Where the stack
 * comes from is the event's choice: with PERF_SAMPLE_CALLCHAIN in its
 * sample_type the perf core has walked the stack before this program
 * runs and the helper (bpf_get_stack_pe, kernel/bpf/stackmap.c) only
 * slices it; without, the helper walks it itself (frame pointers for
 * user code, the ORC unwinder for the kernel). bench/prof measures both.
 *
 * The program returns 0: the perf core writes nothing to the event's own
 * ring, so the cost of a sample is this program plus the interrupt.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "prof.h"
#include "stack_key.h"

/* take() reads the interrupted ip and the privilege level from x86-64
 * registers (regs.ip, regs.csx); another architecture needs its own. */
#if !defined(__TARGET_ARCH_x86)
#error "prof.bpf.c: the sample path reads x86-64 registers only (see README.md, Supported architectures)"
#endif

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile __u32 use_ring = 0;
const volatile __u32 timing = 0; /* measure this program's own run time */
const volatile __u32 stacks = 0; /* record call stacks */
__u32 sel = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mt_view);
	__uint(map_flags, BPF_F_MMAPABLE);
} view SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct mp_key);
	__type(value, __u64);
} counts0 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct mp_key);
	__type(value, __u64);
} counts1 SEC(".maps");

/* Stack tables (hash -> frames), one per count map. Allocated on use:
 * only the stacks of one drain interval take memory. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MP_STACKS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct mp_stack);
} stacks0 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MP_STACKS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct mp_stack);
} stacks1 SEC(".maps");

/* bpf_get_stack's output (too large for the 512-byte BPF stack) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mp_stack);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mp_stats);
} stats SEC(".maps");

/* self-timing: run times by MP_HIST_NS buckets (for p99) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MP_HIST_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} cost_hist SEC(".maps");

static __always_inline void bump(void *map, struct mp_key *k, struct mp_stats *s)
{
	__u64 one = 1, *c = bpf_map_lookup_elem(map, k);

	if (c) {
		__sync_fetch_and_add(c, 1);
		return;
	}
	if (bpf_map_update_elem(map, k, &one, BPF_NOEXIST) == 0)
		return;
	/* another CPU inserted the same key first, or the map is full */
	c = bpf_map_lookup_elem(map, k);
	if (c)
		__sync_fetch_and_add(c, 1);
	else
		s->dropped++;
}

static __always_inline void take(struct bpf_perf_event_data *ctx, struct mp_stats *s);

/* The key of one stack (stored in `map` if new), or MP_NO_STACK. An empty
 * stack (a user-mode sample has no kernel stack, a kernel thread no user
 * stack) is not a loss. */
static __always_inline __u64 stack_key(void *ctx, void *map, __u64 flags, struct mp_stats *s)
{
	return mp_stack_key(ctx, &scratch, map, flags, &s->stack_lost);
}

SEC("perf_event")
int mp_sample(struct bpf_perf_event_data *ctx)
{
	__u32 zero = 0;
	struct mp_stats *s = bpf_map_lookup_elem(&stats, &zero);
	__u64 t0 = 0, d, *h;
	__u32 b;

	if (!s)
		return 0;
	if (timing)
		t0 = bpf_ktime_get_ns();
	take(ctx, s);
	if (timing) {
		d = bpf_ktime_get_ns() - t0;
		s->t_n++;
		s->t_sum += d;
		s->t_sumsq += d * d;
		if (d > s->t_max)
			s->t_max = d;
		if (s->t_min == 0 || d < s->t_min)
			s->t_min = d;
		b = d / MP_HIST_NS < MP_HIST_BUCKETS ? d / MP_HIST_NS : MP_HIST_BUCKETS - 1;
		h = bpf_map_lookup_elem(&cost_hist, &b);
		if (h)
			(*h)++;
	}
	return 0;
}

static __always_inline void take(struct bpf_perf_event_data *ctx, struct mp_stats *s)
{
	__u64 pt = bpf_get_current_pid_tgid();
	struct mp_key k = {};
	struct mt_view *v;
	__u32 cur;

	s->samples++;
	k.pid = pt >> 32;
	k.tid = (__u32)pt;
	k.ip = ctx->regs.ip;
	k.mode = (ctx->regs.csx & 3) ? MP_MODE_USER : MP_MODE_KERNEL;
	k.cpu = bpf_get_smp_processor_id();
	/* the cgroup v2 id (the inode of its directory in cgroupfs); user
	 * space names it at drain time, while the cgroup still exists */
	k.cgroup = bpf_get_current_cgroup_id();
	k.kstack = MP_NO_STACK;
	k.ustack = MP_NO_STACK;
	/* one read of sel: the stacks and the count go to the same pair */
	cur = use_ring ? 0 : *(volatile __u32 *)&sel;
	if (stacks && cur) {
		if (k.mode == MP_MODE_KERNEL)
			k.kstack = stack_key(ctx, &stacks1, 0, s);
		k.ustack = stack_key(ctx, &stacks1, BPF_F_USER_STACK, s);
	} else if (stacks) {
		if (k.mode == MP_MODE_KERNEL)
			k.kstack = stack_key(ctx, &stacks0, 0, s);
		k.ustack = stack_key(ctx, &stacks0, BPF_F_USER_STACK, s);
	}
	v = bpf_map_lookup_elem(&view, &k.tid);
	if (v) {
#pragma unroll
		for (int i = 0; i < MT_WORDS; i++)
			k.tags[i] = v->vec[i];
	}
	if (use_ring) {
		if (bpf_ringbuf_output(&ring, &k, sizeof(k), BPF_RB_NO_WAKEUP))
			s->ring_full++;
		return;
	}
	if (cur)
		bump(&counts1, &k, s);
	else
		bump(&counts0, &k, s);
}
