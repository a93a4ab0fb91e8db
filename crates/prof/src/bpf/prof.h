/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * mantle prof: the structs shared by the sample path (prof.bpf.c) and user
 * space (crates/prof/src/abi.rs). Plain fixed-width members, no implicit
 * padding; sizes asserted here and offsets checked against the object's BTF
 * by the `layout` test in crates/prof.
 *
 * The tag vector width comes from the tags header (MT_TAGS / MT_WORDS), so
 * a build with -DMT_TAGS=128 widens both halves of both subsystems.
 */
#ifndef MANTLE_PROF_SHARED_H
#define MANTLE_PROF_SHARED_H

#include "tags.h"

/* mp_key.mode */
#define MP_MODE_USER 0
#define MP_MODE_KERNEL 1

/* Deepest stack kept per sample (frames), the kernel's default
 * perf_event_max_stack; the value size of the stack maps. */
#define MP_MAX_STACK 127
/* Self-timing histogram (map cost_hist, per-CPU u64 per bucket): bucket
 * i counts runs of [i, i+1) * MP_HIST_NS ns; the last one everything
 * longer. 32 ns steps up to 16 us: percentiles to 32 ns. */
#define MP_HIST_NS 32
#define MP_HIST_BUCKETS 512

/* mp_key.kstack / ustack when the sample has no such stack */
#define MP_NO_STACK 0
/* Stack table size (entries allocated on use, freed every drain) */
#define MP_STACKS 131072

/* A stack as stored (stacks0/stacks1 value; also the per-CPU scratch
 * bpf_get_stack writes into): frames leaf first, zero after the last. */
struct mp_stack {
	__u64 ips[MP_MAX_STACK];
};

/*
 * One sample as the sample path sees it. In aggregation mode it is the key
 * of the count maps (value: __u64 samples); in ring mode it is the record
 * pushed to the ring buffer (one per sample).
 */
struct mp_key {
	__u32 pid;              /* tgid; 0 for the idle task */
	__u32 tid;
	__u64 ip;               /* interrupted instruction pointer */
	__u32 cpu;
	__u32 mode;             /* MP_MODE_USER / MP_MODE_KERNEL */
	__u64 kstack;           /* kernel stack's key in stacks<sel>, or MP_NO_STACK */
	__u64 ustack;           /* user stack's key in stacks<sel>, or MP_NO_STACK */
	__u64 tags[MT_WORDS];   /* the thread's tag vector (view[tid]) */
	__u64 cgroup;           /* cgroup v2 id of the task (bpf_get_current_cgroup_id) */
};

/* Per-CPU counters of the sample path (PERCPU_ARRAY, one entry). */
struct mp_stats {
	__u64 samples;          /* program runs */
	__u64 dropped;          /* count map full: sample not recorded */
	__u64 ring_full;        /* ring buffer full: sample not recorded */
	/* self-timing (rodata `timing`): ns from entry to return, per run */
	__u64 t_n, t_sum, t_sumsq, t_min, t_max;
	__u64 stack_lost;       /* a stack not stored (table full, no memory) */
};

/*
 * Layout asserts: size and every member's offset of the structs mirrored in
 * crates/prof/src/abi.rs (whose byte decoders use these offsets too), so
 * that a change here the Rust side does not make fails this compile. The
 * `layout` test checks the Rust mirrors against the object's BTF.
 * __builtin_offsetof: BPF builds have no <stddef.h>.
 */
#define MP_STATIC_ASSERT(c, m) _Static_assert(c, m)
#define MP_OFF(s, f, n)                                                        \
	MP_STATIC_ASSERT(__builtin_offsetof(struct s, f) == (n), "offset of " #s "." #f)

MP_STATIC_ASSERT(sizeof(struct mp_key) == 48 + 8 * MT_WORDS, "mp_key layout"); /* Key */
MP_OFF(mp_key, pid, 0);
MP_OFF(mp_key, tid, 4);
MP_OFF(mp_key, ip, 8);
MP_OFF(mp_key, cpu, 16);
MP_OFF(mp_key, mode, 20);
MP_OFF(mp_key, kstack, 24);
MP_OFF(mp_key, ustack, 32);
MP_OFF(mp_key, tags, 40);
MP_OFF(mp_key, cgroup, 40 + 8 * MT_WORDS);

MP_STATIC_ASSERT(sizeof(struct mp_stack) == 8 * MP_MAX_STACK, "mp_stack layout"); /* Stack */

MP_STATIC_ASSERT(sizeof(struct mp_stats) == 72, "mp_stats layout"); /* Stats */
MP_OFF(mp_stats, samples, 0);
MP_OFF(mp_stats, dropped, 8);
MP_OFF(mp_stats, ring_full, 16);
MP_OFF(mp_stats, t_n, 24);
MP_OFF(mp_stats, t_sum, 32);
MP_OFF(mp_stats, t_sumsq, 40);
MP_OFF(mp_stats, t_min, 48);
MP_OFF(mp_stats, t_max, 56);
MP_OFF(mp_stats, stack_lost, 64);

#endif
