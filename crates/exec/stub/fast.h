/* The fast path's shared region (executive <-> guest stub): the one C
 * definition. Rust mirror: crates/abi/src/exec.rs (same offsets, checked by
 * const asserts there and _Static_asserts here).
 *
 * Region = one memfd, mapped MAP_SHARED by the executive and by every guest
 * process that loaded the stub:
 *
 *   0                  4096               4096 + S*128 (page-rounded = P)   P + S*4096
 *   +------------------+------------------+-------------------------+--------------------+
 *   | mx_fast_hdr      | mx_fast_slot[S]  | path buffers, 4096 each | mx_fast_count[1024] |
 *   +------------------+------------------+-------------------------+--------------------+
 *
 * The counters (one per call number) are the stub's own observation: a
 * call whose bit is set in `counted` is counted by the stub that makes it
 * (calls, errors, and TSC ticks from trap to result of a sample of them), with no hand-off
 * to the executive; the executive reads them at the end as claims
 * (numbers a guest may have written anything into).
 *
 * S (nslots) is the capacity, thousands by default: the memfd is sparse,
 * so only the pages of slots ever claimed (below the high-water mark
 * `hwm`) and of path buffers ever written are memory.
 *
 * Everything here is writable by the guest: the executive treats every
 * byte as a claim (it copies a slot out, validates the copy, bounds `hwm`
 * by its own capacity, keeps its own state in its own memory). */
#ifndef MANTLE_FAST_H
#define MANTLE_FAST_H
#include <stdint.h>

#define MX_FAST_MAGIC 0x5046584d /* "MXFP" */
#define MX_FAST_VERSION 3
#define MX_FAST_HDR_SIZE 4096
#define MX_FAST_SLOT_SIZE 128
#define MX_FAST_PATH_SIZE 4096
#define MX_FAST_MAX_SLOTS 65536
#define MX_FAST_NR_MAX 1024
#define MX_FAST_WANT_WORDS 16 /* MX_FAST_NR_MAX / 64 */

/* slot states (the futex word of a slot) */
enum mx_fast_state {
	MX_ST_FREE = 0,    /* no owner */
	MX_ST_IDLE = 1,    /* owned (tid), no call in flight */
	MX_ST_REQUEST = 2, /* guest: a call is in nr/args/ip/seq; waits */
	MX_ST_ANSWER = 3,  /* executive: result/flags written */
	MX_ST_DONE = 4,    /* guest: continued call performed, report written */
	MX_ST_MAX = 5,
};

/* header flags (mx_fast_hdr.hdr_flags, written by the executive) */
#define MX_HDR_REWRITE 1   /* rewrite `mov $nr,%eax; syscall` sites into jumps */
#define MX_HDR_FAIL_OPEN 2 /* executive gone: make calls unsupervised, do not die */

/* answer flags (mx_fast_slot.flags, written by the executive) */
#define MX_ANS_CONTINUE 1 /* perform nr/args (possibly changed) yourself and report */
#define MX_ANS_UNTIL 2    /* return result once the TSC reaches args[0] (spin until then) */

struct mx_fast_hdr {
	uint32_t magic;         /* 0 */
	uint32_t version;       /* 4 */
	uint32_t nslots;        /* 8 */
	uint32_t slot_size;     /* 12 */
	uint64_t region_size;   /* 16 */
	uint32_t exec_pid;      /* 24: the guest kills itself if it is gone */
	uint32_t spin;          /* 28: guest spin iterations before FUTEX_WAIT */
	uint32_t doorbell;      /* 32: futex word the executive sleeps on */
	uint32_t exec_sleeping; /* 36: executive threads (about to be) in FUTEX_WAIT */
	uint32_t overflow;      /* 40: guest calls that found no slot */
	uint32_t hdr_flags;     /* 44: MX_HDR_* */
	uint64_t paths_off;     /* 48: offset of the path buffers */
	uint64_t tramp;         /* 56: fixed address of the stub's syscall page */
	uint64_t wanted[MX_FAST_WANT_WORDS]; /* 64: bitmap of trapped calls */
	uint32_t hwm;           /* 192: slots [0, hwm) were ever claimed (guest: +1 by CAS) */
	uint32_t frees;         /* 196: +1 per slot released or reclaimed */
	uint32_t exec_gone;     /* 200: a guest found the executive dead (FAIL_OPEN) */
	uint32_t reserved;      /* 204 */
	uint64_t counted[MX_FAST_WANT_WORDS]; /* 208: bitmap of calls the stub counts itself */
};

/* one call number's counters (MX_FAST_NR_MAX of them, after the path
 * buffers), added to by every guest process with atomic adds */
struct mx_fast_count {
	uint64_t calls;  /* 0: calls made (counted on entry: exit and exec count too) */
	uint64_t errors; /* 8: results in -4095..-1 */
	uint64_t ticks;  /* 16: TSC ticks from the trap to the result, summed over the timed calls
			  * (calls made by the stub itself, never forwarded ones) */
	uint64_t timed;  /* 24: calls timed (one in MX_FAST_TIME_EVERY per thread) */
};
#define MX_FAST_COUNT_SIZE 32
#define MX_FAST_TIME_EVERY 8

struct mx_fast_slot {
	uint32_t state;         /* 0: enum mx_fast_state, futex word */
	uint32_t tid;           /* 4: owner, claimed by CAS 0 -> tid */
	uint64_t seq;           /* 8: guest: +1 per request */
	uint32_t nr;            /* 16: guest; executive may change it (CONTINUE) */
	uint32_t flags;         /* 20: executive: MX_ANS_* */
	uint64_t args[6];       /* 24: guest; executive may change them */
	uint64_t ip;            /* 72: guest: address after the syscall insn */
	int64_t result;         /* 80: executive: value or -errno */
	uint64_t report_seq;    /* 88: guest: seq of the continued call reported */
	int64_t report_result;  /* 96: guest: its result */
	uint64_t base;          /* 104: guest: address of the region in the guest */
	uint64_t t_trap;        /* 112: guest TSC when the request was posted */
	uint32_t waiting;       /* 120: guest is (about to be) in FUTEX_WAIT */
	uint32_t gen;           /* 124: guest: +1 at each claim (a new owner) */
};

/* `state` and `tid` are one 8-byte word (state in the low half): a change
 * of owner is one CAS of both, so no claim, release or answer can land on
 * a slot that changed hands in between. */
#define MX_PAIR(state, tid) ((uint64_t)(uint32_t)(state) | (uint64_t)(uint32_t)(tid) << 32)

_Static_assert(sizeof(struct mx_fast_hdr) == 336, "mx_fast_hdr");
_Static_assert(__builtin_offsetof(struct mx_fast_hdr, counted) == 208, "counted");
_Static_assert(sizeof(struct mx_fast_count) == MX_FAST_COUNT_SIZE, "mx_fast_count");
_Static_assert(__builtin_offsetof(struct mx_fast_hdr, hwm) == 192, "hwm");
_Static_assert(__builtin_offsetof(struct mx_fast_hdr, exec_gone) == 200, "exec_gone");
_Static_assert(__builtin_offsetof(struct mx_fast_hdr, doorbell) == 32, "doorbell");
_Static_assert(__builtin_offsetof(struct mx_fast_hdr, paths_off) == 48, "paths_off");
_Static_assert(__builtin_offsetof(struct mx_fast_hdr, wanted) == 64, "wanted");
_Static_assert(sizeof(struct mx_fast_slot) == MX_FAST_SLOT_SIZE, "mx_fast_slot");
_Static_assert(__builtin_offsetof(struct mx_fast_slot, args) == 24, "args");
_Static_assert(__builtin_offsetof(struct mx_fast_slot, ip) == 72, "ip");
_Static_assert(__builtin_offsetof(struct mx_fast_slot, report_seq) == 88, "report_seq");
_Static_assert(__builtin_offsetof(struct mx_fast_slot, base) == 104, "base");
_Static_assert(__builtin_offsetof(struct mx_fast_slot, waiting) == 120, "waiting");
_Static_assert(__builtin_offsetof(struct mx_fast_slot, gen) == 124, "gen");

#endif
