/* The application kernel's shared area (application thread <-> bootstrap
 * thread of the same process): the one C definition. Rust mirror:
 * crates/abi/src/offload.rs (same offsets, checked by const asserts there
 * and _Static_asserts here). The layout is that of Kågström's Figure 4.3
 * (apkern_comm_entry_t): a flag the bootstrap thread watches, a message
 * kind, the program counter, and a union whose system-call member holds
 * the number, six arguments and the result. Page-fault messages have no
 * place here: the kernel serves page faults on whichever CPU takes them.
 *
 * Area = one private anonymous mapping per process (a fork copies it; the
 * child frees the entries of threads it does not have):
 *
 *   0                 4096                   4096 + MX_OK_MAX_PAIRS*128
 *   +-----------------+----------------------+
 *   | mx_ok_hdr       | mx_ok_entry[pairs]   |
 *   +-----------------+----------------------+
 *
 * Every byte is ordinary memory of the application: the bootstrap thread
 * copies a request out, validates the copy (state, kind, number, sequence,
 * check word), and refuses what does not validate. */
#ifndef MANTLE_OFFLOAD_H
#define MANTLE_OFFLOAD_H
#include <stdint.h>

#define MX_OK_MAGIC 0x4b4f584d /* "MXOK" */
#define MX_OK_VERSION 1
#define MX_OK_HDR_SIZE 4096
#define MX_OK_ENTRY_SIZE 128
#define MX_OK_MAX_PAIRS 1024
#define MX_OK_STACK_SIZE 65536 /* per bootstrap thread; two per entry */
#define MX_OK_NR_MAX 512

/* entry.bootstrap_has_msg: the futex word both threads wait on. 0 is
 * written by the kernel when the entry's bootstrap thread exits
 * (CLONE_CHILD_CLEARTID), which also wakes a waiting application thread. */
enum mx_ok_state {
	MX_OK_GONE = 0,    /* free: no bootstrap thread */
	MX_OK_CLAIMED = 1, /* claimed for a new pair; its bootstrap thread is starting */
	MX_OK_IDLE = 2,    /* no message */
	MX_OK_REQUEST = 3, /* application: a message is written; waits */
	MX_OK_ANSWER = 4,  /* bootstrap: syscall.ret written; stays until the next request */
	MX_OK_REFUSED = 5, /* bootstrap: the message did not validate; ret = -EINVAL */
	MX_OK_STATE_MAX = 6,
};

/* entry.nr: the message kind (the paper's apkern_comm_nr_t) */
enum mx_ok_kind {
	MX_OK_SYSCALL = 1, /* perform syscall.nr(arg...) */
	MX_OK_CLONE = 2,   /* clone/fork/vfork: split into a new pair (Figure 4.5) */
	MX_OK_EXIT = 3,    /* the application thread exits: so does its bootstrap thread */
	MX_OK_KIND_MAX = 4,
};

struct mx_ok_hdr {
	uint32_t magic;      /* 0 */
	uint32_t version;    /* 4 */
	uint32_t npairs;     /* 8 */
	uint32_t entry_size; /* 12 */
	uint32_t boot_cpu;   /* 16 */
	uint32_t spin;       /* 20: spin iterations before FUTEX_WAIT (both sides) */
	uint32_t refused;    /* 24: requests refused by a bootstrap thread (atomic add) */
	uint32_t pairs_made; /* 28: pairs created in this process (atomic add) */
	uint32_t traps;      /* 32: calls that entered the trap (atomic add); rewritten sites' do not */
	uint32_t sites;      /* 36: sites rewritten (site.h) */
};

struct mx_ok_syscall {
	uint64_t nr;      /* 0 */
	uint64_t arg[6];  /* 8 */
	int64_t ret;      /* 56: bootstrap: value or -errno */
};

struct mx_ok_entry {
	uint32_t bootstrap_has_msg; /* 0: enum mx_ok_state, futex word */
	uint32_t nr;                /* 4: enum mx_ok_kind */
	uint64_t pc;                /* 8: application: address after its syscall insn */
	struct mx_ok_syscall syscall; /* 16 */
	uint64_t seq;               /* 80: application: +1 per message */
	uint64_t check;             /* 88: application: mx_ok_check() of the message */
	uint64_t uc;                /* 96: application: its ucontext (a fork child resumes from it) */
	uint64_t intr_seq;          /* 104: application: interrupt the call of this seq */
	uint32_t app_tid;           /* 112 */
	uint32_t boot_tid;          /* 116 */
	uint32_t boot_sleeping;     /* 120: bootstrap is (about to be) in FUTEX_WAIT */
	uint32_t app_sleeping;      /* 124: application is (about to be) in FUTEX_WAIT */
};

_Static_assert(sizeof(struct mx_ok_hdr) == 40, "mx_ok_hdr");
_Static_assert(__builtin_offsetof(struct mx_ok_hdr, traps) == 32, "traps");
_Static_assert(sizeof(struct mx_ok_syscall) == 64, "mx_ok_syscall");
_Static_assert(sizeof(struct mx_ok_entry) == MX_OK_ENTRY_SIZE, "mx_ok_entry");
_Static_assert(__builtin_offsetof(struct mx_ok_entry, pc) == 8, "pc");
_Static_assert(__builtin_offsetof(struct mx_ok_entry, syscall) == 16, "syscall");
_Static_assert(__builtin_offsetof(struct mx_ok_entry, syscall.ret) == 72, "ret");
_Static_assert(__builtin_offsetof(struct mx_ok_entry, seq) == 80, "seq");
_Static_assert(__builtin_offsetof(struct mx_ok_entry, check) == 88, "check");
_Static_assert(__builtin_offsetof(struct mx_ok_entry, uc) == 96, "uc");
_Static_assert(__builtin_offsetof(struct mx_ok_entry, intr_seq) == 104, "intr_seq");
_Static_assert(__builtin_offsetof(struct mx_ok_entry, app_tid) == 112, "app_tid");
_Static_assert(__builtin_offsetof(struct mx_ok_entry, boot_sleeping) == 120, "boot_sleeping");
_Static_assert(__builtin_offsetof(struct mx_ok_entry, app_sleeping) == 124, "app_sleeping");

/* The check word of a message (FNV-1a over its fields, 64-bit): catches a
 * message written by anything but the application thread's trap handler
 * (Rust: mantle_abi::offload::check). */
static inline uint64_t mx_ok_check(uint32_t kind, uint64_t pc, const struct mx_ok_syscall *s,
				   uint64_t seq, uint64_t uc)
{
	uint64_t w[10] = {kind, pc, s->nr, s->arg[0], s->arg[1], s->arg[2],
			  s->arg[3], s->arg[4], s->arg[5], seq};
	uint64_t h = 0xcbf29ce484222325ull;
	for (int i = 0; i < 10; i++) {
		h ^= w[i];
		h *= 0x100000001b3ull;
	}
	h ^= uc;
	h *= 0x100000001b3ull;
	return h;
}

#endif
