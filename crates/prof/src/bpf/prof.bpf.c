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
 * The program returns 0: the perf core writes nothing to the event's own
 * ring, so the cost of a sample is this program plus the interrupt.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "prof.h"

/* take() reads the interrupted ip and the privilege level from x86-64
 * registers (regs.ip, regs.csx); another architecture needs its own. */
#if !defined(__TARGET_ARCH_x86)
#error "prof.bpf.c: the sample path reads x86-64 registers only (see README.md, Supported architectures)"
#endif

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile __u32 use_ring = 0;
const volatile __u32 timing = 0; /* measure this program's own run time */
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

SEC("perf_event")
int mp_sample(struct bpf_perf_event_data *ctx)
{
	__u32 zero = 0;
	struct mp_stats *s = bpf_map_lookup_elem(&stats, &zero);
	__u64 t0 = 0, d;

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
	}
	return 0;
}

static __always_inline void take(struct bpf_perf_event_data *ctx, struct mp_stats *s)
{
	__u64 pt = bpf_get_current_pid_tgid();
	struct mp_key k = {};
	struct mt_view *v;

	s->samples++;
	k.pid = pt >> 32;
	k.tid = (__u32)pt;
	k.ip = ctx->regs.ip;
	k.mode = (ctx->regs.csx & 3) ? MP_MODE_USER : MP_MODE_KERNEL;
	k.cpu = bpf_get_smp_processor_id();
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
	if (sel)
		bump(&counts1, &k, s);
	else
		bump(&counts0, &k, s);
}
