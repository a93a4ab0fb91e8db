/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * mantle prof --off-cpu: the structs shared by the off-CPU path
 * (offcpu.bpf.c) and user space (crates/abi/src/prof.rs, section
 * "Off-CPU"). Plain fixed-width members, no implicit padding; sizes and
 * offsets asserted here and checked against the object's BTF by the
 * `layout` test in crates/prof. The stacks are prof.h's (struct mp_stack,
 * MP_MAX_STACK frames, MP_NO_STACK for none).
 */
#ifndef MANTLE_OFFCPU_SHARED_H
#define MANTLE_OFFCPU_SHARED_H

#include "prof.h"

/* mo_ctl.filter: which blocked threads are recorded */
#define MO_FILTER_ALL 0     /* every thread but the idle tasks (-a) */
#define MO_FILTER_TGIDS 1   /* processes in `targets` (-p, a command), and their children */
#define MO_FILTER_CGROUP 2  /* tasks under the cgroup in `cgroup` (--cgroup) */

/* Sizes of the maps (entries) */
#define MO_COUNTS 65536     /* distinct (thread, kernel stack, user stack) */
#define MO_STARTS 65536     /* threads blocked at one time */
#define MO_STACKS 16384     /* distinct stacks (never freed while recording; preallocated) */
#define MO_TARGETS 65536    /* processes of a -p or command target */

/* Key of `counts`: one thread blocked at one place. */
struct mo_key {
	__u32 pid;              /* tgid */
	__u32 tid;
	__u64 kstack;           /* kernel stack's key in `stacks`, or MP_NO_STACK */
	__u64 ustack;           /* user stack's key, or MP_NO_STACK */
};

/* Value of `counts`: blocked time summed, and how many blocks. */
struct mo_val {
	__u64 ns;
	__u64 blocks;
};

/* Per-CPU counters of the off-CPU path (PERCPU_ARRAY, one entry). */
struct mo_stats {
	__u64 switch_out;       /* a recorded thread blocked (start stored) */
	__u64 switch_in;        /* a recorded thread ran again (time charged) */
	__u64 dropped;          /* counts full: blocked time not recorded */
	__u64 start_lost;       /* starts full: a block not timed */
	__u64 stack_lost;       /* a stack not stored (table full, no memory) */
	__u64 dropped_ns;       /* time of the dropped blocks */
};

/* The one entry of `ctl`, written by user space. */
struct mo_ctl {
	__u64 since_ns;         /* CLOCK_MONOTONIC: blocks that began earlier are not charged */
};

#define MO_STATIC_ASSERT(c, m) _Static_assert(c, m)
#define MO_OFF(s, f, n)                                                        \
	MO_STATIC_ASSERT(__builtin_offsetof(struct s, f) == (n), "offset of " #s "." #f)

MO_STATIC_ASSERT(sizeof(struct mo_key) == 24, "mo_key layout"); /* OffKey */
MO_OFF(mo_key, pid, 0);
MO_OFF(mo_key, tid, 4);
MO_OFF(mo_key, kstack, 8);
MO_OFF(mo_key, ustack, 16);

MO_STATIC_ASSERT(sizeof(struct mo_val) == 16, "mo_val layout"); /* OffVal */
MO_OFF(mo_val, ns, 0);
MO_OFF(mo_val, blocks, 8);

MO_STATIC_ASSERT(sizeof(struct mo_stats) == 48, "mo_stats layout"); /* OffStats */
MO_OFF(mo_stats, switch_out, 0);
MO_OFF(mo_stats, switch_in, 8);
MO_OFF(mo_stats, dropped, 16);
MO_OFF(mo_stats, start_lost, 24);
MO_OFF(mo_stats, stack_lost, 32);
MO_OFF(mo_stats, dropped_ns, 40);

MO_STATIC_ASSERT(sizeof(struct mo_ctl) == 8, "mo_ctl layout"); /* OffCtl */
MO_OFF(mo_ctl, since_ns, 0);

#endif
