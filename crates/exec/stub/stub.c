/* libmantle-stub.so: the guest half of mantle's fast interposition path.
 *
 * What: preloaded (LD_PRELOAD) into a dynamically linked guest, it sends
 * the system calls the executive wants through a per-thread slot of
 * memory shared with the executive, and waits for the answer.
 *
 * Mechanism:
 * - The constructor maps the region from the fd in MANTLE_FAST_FD (kept
 *   open, without close-on-exec, so that an exec'd image that loads the
 *   stub again maps the same region; if a program closed it, it asks the
 *   executive's door again: the unix socket MANTLE_FAST_DOOR, which hands
 *   the fd to processes of the guest tree only), copies the stub's
 *   raw-syscall code
 *   into a page at the executive's fixed address (hdr->tramp), installs
 *   the SIGSYS handler (raw rt_sigaction, with a restorer in that page)
 *   and turns on Syscall User Dispatch with that page as the excluded
 *   range and a selector that always blocks: every system call of the
 *   guest made anywhere else raises SIGSYS.
 * - The SIGSYS handler: a call whose bit is set in the header's `wanted`
 *   bitmap is forwarded through the thread's slot (claimed at its first
 *   trap: a free slot below the high-water mark `hwm` by CAS of
 *   (FREE, 0) -> (IDLE, tid), else a new one by raising `hwm`; released at
 *   the thread's or process's exit; if none can be had, the call is made
 *   directly and counted in `overflow`): the call is written, the state set to REQUEST,
 *   the executive's doorbell rung (FUTEX_WAKE only if it sleeps); the
 *   handler spins `spin` iterations, then FUTEX_WAITs on the slot's state.
 *   The answer is a value (put in rax) or CONTINUE: the handler makes the
 *   (possibly changed) call itself and reports the result (state DONE),
 *   so the executive's `after` hooks see real results. Any other call is
 *   made directly, from the excluded page.
 * - Calls that cannot simply be made inside a signal handler are
 *   emulated: rt_sigreturn (done on the interrupted frame), rt_sigprocmask
 *   (applied to the interrupted context's mask, never blocking SIGSYS: a
 *   SUD signal that is blocked kills), rt_sigaction on SIGSYS (ignored),
 *   clone with a new stack (the child starts on its stack at the caller's
 *   return address, with the caller's signal mask), clone3 (ENOSYS: glibc
 *   falls back to clone), vfork (made as fork). Children re-arm dispatch.
 * - exec clears dispatch; the new image's stub arms it again. An exec'd
 *   image without the stub (static, or LD_PRELOAD dropped) runs
 *   unsupervised (docs/exec-fast.md).
 *
 * Invariants:
 * - In the handler: no libc, only raw system calls through the excluded
 *   page; all signals are blocked while it runs (sa_mask), so a slot has
 *   at most one call in flight.
 * - The executive gone (exec_pid does not exist) while a call waits: the
 *   guest kills itself (fail closed: never silently unsupervised), unless
 *   the executive said MX_HDR_FAIL_OPEN: then every guest makes its calls
 *   itself from then on (`exec_gone`).
 * - A guest call never fails for want of a slot: without one it is made
 *   directly, unobserved (enforcement does not rest on this path).
 * - Cooperative: the guest can write anything in the region or jump into
 *   the excluded page; the executive validates every slot, and security
 *   decisions belong on the protected path.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <linux/futex.h>
#include <linux/sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "fast.h"
#include "sigemu.h"
#include "site.h"

#define HIDDEN __attribute__((visibility("hidden")))

#ifndef PR_SET_SYSCALL_USER_DISPATCH
#define PR_SET_SYSCALL_USER_DISPATCH 59
#define PR_SYS_DISPATCH_ON 1
#define SYSCALL_DISPATCH_FILTER_BLOCK 1
#endif
#define SYS_USER_DISPATCH 2

/* The excluded page's code, position-independent, copied to hdr->tramp:
 *   +0   sc6(nr, a..f): a raw system call
 *   +T_RESTORER  restorer: rt_sigreturn (our SIGSYS handler returns here)
 *   +T_SIGRET    sigret(rsp): rt_sigreturn of the frame at rsp
 *   +T_CLONE     clone(flags, stack, ptid, ctid, tls, ip): the child arms
 *                dispatch, sets the mask stored at stack-16, jumps to ip
 *                (stored at stack-8) with rax = 0 and rsp = stack
 *   +T_DATA      data: [0] the page's address, [1] the selector's address */
extern char mx_tmpl[] HIDDEN, mx_tmpl_restorer[] HIDDEN, mx_tmpl_sigret[] HIDDEN,
	mx_tmpl_clone[] HIDDEN, mx_tmpl_end[] HIDDEN;
#define T_DATA 2048
__asm__(".text\n"
	".globl mx_tmpl, mx_tmpl_restorer, mx_tmpl_sigret, mx_tmpl_clone, mx_tmpl_end\n"
	".hidden mx_tmpl, mx_tmpl_restorer, mx_tmpl_sigret, mx_tmpl_clone, mx_tmpl_end\n"
	"mx_tmpl:\n"
	"\tmov %rdi,%rax\n"
	"\tmov %rsi,%rdi\n"
	"\tmov %rdx,%rsi\n"
	"\tmov %rcx,%rdx\n"
	"\tmov %r8,%r10\n"
	"\tmov %r9,%r8\n"
	"\tmov 8(%rsp),%r9\n"
	"\tsyscall\n"
	"\tret\n"
	"mx_tmpl_restorer:\n"
	"\tmov $15,%eax\n"
	"\tsyscall\n"
	"\thlt\n"
	"mx_tmpl_sigret:\n"
	"\tmov %rdi,%rsp\n"
	"\tmov $15,%eax\n"
	"\tsyscall\n"
	"\thlt\n"
	"mx_tmpl_clone:\n"
	"\tmov %r9,-8(%rsi)\n"
	"\tmov %rcx,%r10\n"
	"\tmov $56,%eax\n"
	"\tsyscall\n"
	"\ttest %rax,%rax\n"
	"\tjz 1f\n"
	"\tret\n"
	"1:\n"
	"\tmov $157,%eax\n" /* prctl(PR_SET_SYSCALL_USER_DISPATCH, ON, page, 4096, sel) */
	"\tmov $59,%edi\n"
	"\tmov $1,%esi\n"
	"\tmov mx_tmpl+2048(%rip),%rdx\n"
	"\tmov $4096,%r10d\n"
	"\tmov mx_tmpl+2056(%rip),%r8\n"
	"\tsyscall\n"
	"\tmov $14,%eax\n" /* rt_sigprocmask(SIG_SETMASK, rsp-16, 0, 8) */
	"\tmov $2,%edi\n"
	"\tlea -16(%rsp),%rsi\n"
	"\txor %edx,%edx\n"
	"\tmov $8,%r10d\n"
	"\tsyscall\n"
	"\txor %eax,%eax\n"
	"\tjmp *-8(%rsp)\n"
	"mx_tmpl_end:\n");

typedef long (*sc6_fn)(long, long, long, long, long, long, long);
static sc6_fn mx_sc6;
static void (*mx_sigret)(uint64_t rsp);
static long (*mx_clone)(long, long, long, long, long, long);
static uint64_t mx_restorer;

#define sc0(n) mx_sc6((n), 0, 0, 0, 0, 0, 0)
#define sc1(n, a) mx_sc6((n), (long)(a), 0, 0, 0, 0, 0)
#define sc2(n, a, b) mx_sc6((n), (long)(a), (long)(b), 0, 0, 0, 0)
#define sc4(n, a, b, c, d) mx_sc6((n), (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)
#define sc5(n, a, b, c, d, e) mx_sc6((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)

/* the selector: always BLOCK (the stub's own calls are in the excluded page) */
static volatile char mx_selector = SYSCALL_DISPATCH_FILTER_BLOCK;

static struct mx_fast_hdr *hdr;
static struct mx_fast_slot *slots;
static uint32_t nslots;
static struct mx_fast_count *counts;

#define TLS __thread __attribute__((tls_model("initial-exec")))
static TLS struct mx_fast_slot *my_slot;
static TLS uint32_t my_tid;
/* forwards in flight on this thread (a signal handler that runs during a
 * call the stub makes may trap again: it gets a slot of its own) */
static TLS uint32_t busy;
/* this thread (my_tid) found no slot when hdr->frees was miss_frees: it
 * tries again only once a slot was freed since */
static TLS uint32_t missed, miss_frees;
/* counted calls of this thread so far (which of them are timed) */
static TLS uint32_t time_nth;
/* set once the process has made a thread: sites are rewritten only while
 * it has one (another thread could be executing the bytes being written) */
static volatile int multi;

static inline uint64_t rdtsc(void)
{
	uint32_t lo, hi;
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return ((uint64_t)hi << 32) | lo;
}

static inline uint32_t ld32(uint32_t *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static inline void st32(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }

/* a slot's (state, tid) word (MX_PAIR): changes of owner are one CAS */
static inline uint64_t *pairp(struct mx_fast_slot *s) { return (uint64_t *)(void *)s; }
static inline uint64_t ldpair(struct mx_fast_slot *s) { return __atomic_load_n(pairp(s), __ATOMIC_SEQ_CST); }
static inline int caspair(struct mx_fast_slot *s, uint64_t old, uint64_t new)
{
	return __atomic_compare_exchange_n(pairp(s), &old, new, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/* slots [0, hwm) have been claimed at some time (never above nslots: the
 * guest may have written anything into the header) */
static inline uint32_t high_water(void)
{
	uint32_t hw = ld32(&hdr->hwm);
	return hw < nslots ? hw : nslots;
}

static void die(void)
{
	sc2(SYS_kill, sc0(SYS_getpid), SIGKILL);
	sc1(SYS_exit_group, 127);
}

static long arm(void)
{
	return sc5(SYS_prctl, PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, hdr->tramp, 4096,
		   &mx_selector);
}

/* The calling thread's slot, claimed at its first trap. A cached slot is
 * re-checked against the tid (a vfork-like child shares the parent's TLS).
 * `except`: the slot of a call in flight on this thread (a signal handler
 * traps again): another one, not cached. Growth: a slot this tid holds
 * already (the same thread in a new image: exec keeps the tid), else a
 * free one below the high-water mark, else a new one above it; 0 if the
 * region is full. */
static struct mx_fast_slot *claim(uint32_t tid, struct mx_fast_slot *except)
{
	uint32_t hw = high_water(), i;
	for (i = 0; i < hw; i++) {
		struct mx_fast_slot *s = &slots[i];
		if (s == except || ld32(&s->tid) != tid)
			continue;
		uint64_t p = ldpair(s);
		uint32_t st = (uint32_t)p;
		if (except) {
			/* an earlier nested call's slot, idle again */
			if ((p >> 32) == tid && (st == MX_ST_IDLE || st == MX_ST_DONE))
				return s;
		} else if ((p >> 32) == tid && caspair(s, p, MX_PAIR(MX_ST_IDLE, tid))) {
			/* what was in flight there belongs to an image that is gone */
			goto got;
		}
	}
	for (i = 0; i < hw; i++)
		if (ldpair(&slots[i]) == MX_PAIR(MX_ST_FREE, 0) &&
		    caspair(&slots[i], MX_PAIR(MX_ST_FREE, 0), MX_PAIR(MX_ST_IDLE, tid)))
			goto got;
	while ((hw = ld32(&hdr->hwm)) < nslots) {
		if (!__atomic_compare_exchange_n(&hdr->hwm, &hw, hw + 1, 0, __ATOMIC_SEQ_CST,
						 __ATOMIC_SEQ_CST))
			continue;
		i = hw;
		if (caspair(&slots[i], MX_PAIR(MX_ST_FREE, 0), MX_PAIR(MX_ST_IDLE, tid)))
			goto got;
		/* not free above the mark: written by a confused guest; next */
	}
	return 0;
got:
	/* a new owner, even of the same tid: the executive starts afresh */
	__atomic_fetch_add(&slots[i].gen, 1, __ATOMIC_SEQ_CST);
	slots[i].base = (uint64_t)(uintptr_t)hdr;
	if (except)
		return &slots[i]; /* a nested call's slot: not cached */
	my_slot = &slots[i];
	my_tid = tid;
	return my_slot;
}

/* At the exit of a thread (exit) or of its process (exit_group): every
 * slot the thread holds goes back to FREE, so that the next thread takes
 * it instead of raising the high-water mark. Slots of threads that die
 * otherwise (killed, or ended by another thread's exit_group or exec) are
 * reclaimed by the executive once their tid is gone. */
static void release_all(uint32_t tid)
{
	uint32_t hw = high_water();
	for (uint32_t i = 0; i < hw; i++) {
		uint64_t p = ldpair(&slots[i]);
		if ((p >> 32) == tid && caspair(&slots[i], p, MX_PAIR(MX_ST_FREE, 0)))
			__atomic_fetch_add(&hdr->frees, 1, __ATOMIC_SEQ_CST);
	}
	my_slot = 0;
}

static inline int exiting(uint32_t nr)
{
	return nr == SYS_exit || nr == SYS_exit_group;
}


/* Calls that never sleep until an event (a signal, a peer, a timer): they
 * finish on their own (at most after disk I/O, which no signal but a fatal
 * one interrupts anyway), so making them with every signal blocked (the
 * handler's mask) changes nothing the guest can see, and saves two
 * rt_sigprocmask per call. Anything not listed takes the guest's mask. */
static int never_waits(uint32_t nr, const uint64_t a[6])
{
	switch (nr) {
	case SYS_getpid: case SYS_getppid: case SYS_gettid: case SYS_getuid: case SYS_geteuid:
	case SYS_getgid: case SYS_getegid: case SYS_getpgrp: case SYS_getpgid: case SYS_getsid:
	case SYS_getresuid: case SYS_getresgid: case SYS_getgroups: case SYS_getcwd:
	case SYS_uname: case SYS_sysinfo: case SYS_time: case SYS_gettimeofday:
	case SYS_clock_gettime: case SYS_clock_getres: case SYS_getrusage: case SYS_getrlimit:
	case SYS_prlimit64: case SYS_umask: case SYS_getpriority:
	case SYS_fstat: case SYS_stat: case SYS_lstat: case SYS_newfstatat: case SYS_statx:
	case SYS_statfs: case SYS_fstatfs: case SYS_lseek: case SYS_getdents64:
	case SYS_access: case SYS_faccessat: case SYS_faccessat2: case SYS_readlink:
	case SYS_readlinkat: case SYS_getxattr: case SYS_lgetxattr: case SYS_fgetxattr:
	case SYS_listxattr: case SYS_llistxattr: case SYS_flistxattr: case SYS_chdir:
	case SYS_fchdir: case SYS_close: case SYS_dup: case SYS_dup2: case SYS_dup3:
	case SYS_brk: case SYS_mmap: case SYS_munmap: case SYS_mprotect: case SYS_madvise:
	case SYS_mremap: case SYS_arch_prctl: case SYS_set_tid_address: case SYS_set_robust_list:
	case SYS_rseq: case SYS_sched_yield: case SYS_sched_getaffinity:
		return 1;
	case SYS_fcntl: /* all but the waiting locks */
		return a[1] != F_SETLKW && a[1] != F_OFD_SETLKW;
	case SYS_openat: /* a FIFO's open waits for its peer; a directory's cannot */
		return (a[2] & O_DIRECTORY) != 0;
	}
	return 0;
}

/* Makes a call the guest made (or the executive changed) from inside the
 * handler; g is the interrupted context. */
static long perform(greg_t *g, ucontext_t *uc, uint32_t nr, const uint64_t a[6])
{
	long r;
	if (!uc) /* from a rewritten site: never an emulated call */
		return mx_sc6(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	switch (nr) {
	case SYS_rt_sigprocmask:
		return mx_emu_sigprocmask((uint64_t *)&uc->uc_sigmask, a);
	case SYS_rt_sigaction:
		/* a guest handler returns through the excluded page's restorer */
		return mx_emu_sigaction(a, mx_restorer, mx_sc6);
	case SYS_execve:
	case SYS_execveat: {
		/* the new image starts with the interrupted context's mask, not
		 * the handler's (everything blocked) */
		uint64_t m = *(uint64_t *)&uc->uc_sigmask & ~(1ull << (SIGSYS - 1)), all = ~0ull;
		sc4(SYS_rt_sigprocmask, SIG_SETMASK, &m, 0, 8);
		r = mx_sc6(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
		sc4(SYS_rt_sigprocmask, SIG_SETMASK, &all, 0, 8);
		return r;
	}
	case SYS_clone3:
		return -ENOSYS;
	case SYS_vfork:
		nr = SYS_fork;
		/* fallthrough */
	case SYS_fork:
		r = sc0(nr);
		if (r == 0) {
			arm();
			my_slot = 0;
			missed = 0;
		}
		return r;
	case SYS_clone:
		if (a[1] == 0) {
			/* no new stack: fork-like (a vfork-like clone is made as fork) */
			r = sc5(SYS_clone, a[0] & ~(uint64_t)(CLONE_VM | CLONE_VFORK), 0, a[2], a[3],
				a[4]);
			if (r == 0) {
				arm();
				my_slot = 0;
				missed = 0;
			}
			return r;
		}
		if (a[0] & CLONE_THREAD)
			multi = 1;
		((uint64_t *)(uintptr_t)a[1])[-2] =
			*(uint64_t *)&uc->uc_sigmask & ~(1ull << (SIGSYS - 1));
		return mx_clone(a[0], a[1], a[2], a[3], a[4], g[REG_RIP]);
	}
	/* a call that cannot wait for an event is made as it is: the mask
	 * matters only to a call that a signal may interrupt */
	if (never_waits(nr, a))
		return mx_sc6(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	/* with the interrupted context's mask, so that a blocking call can be
	 * interrupted by the guest's signals as it would be without the stub */
	uint64_t m = *(uint64_t *)&uc->uc_sigmask & ~(1ull << (SIGSYS - 1)), all = ~0ull;
	sc4(SYS_rt_sigprocmask, SIG_SETMASK, &m, 0, 8);
	r = mx_sc6(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	sc4(SYS_rt_sigprocmask, SIG_SETMASK, &all, 0, 8);
	return r;
}

static long forward(struct mx_fast_slot *s, uint32_t tid, uint32_t nr, const uint64_t a[6],
		    uint64_t ip, greg_t *g, ucontext_t *uc)
{
	uint32_t st;
	uint64_t seq;
	s->nr = nr;
	s->flags = 0;
	for (int i = 0; i < 6; i++)
		s->args[i] = a[i];
	s->ip = ip;
	seq = s->seq + 1;
	s->seq = seq;
	s->t_trap = rdtsc();
	st32(&s->state, MX_ST_REQUEST);
	__atomic_fetch_add(&hdr->doorbell, 1, __ATOMIC_SEQ_CST);
	/* exec_sleeping counts the executive's sleeping threads (one per
	 * CPU it serves from): wake them all, the one this slot's home among
	 * them (the others find nothing and sleep again) */
	if (ld32(&hdr->exec_sleeping))
		sc4(SYS_futex, &hdr->doorbell, FUTEX_WAKE, 0x7fffffff, 0);

	uint32_t spin = ld32(&hdr->spin), n = 0;
	while ((st = ld32(&s->state)) == MX_ST_REQUEST && n < spin) {
		__builtin_ia32_pause();
		n++;
	}
	while (st == MX_ST_REQUEST) {
		struct timespec ts = {1, 0};
		/* the wait takes the interrupted context's mask: a signal the
		 * guest did not block is delivered now (a fatal one ends it now,
		 * not when a held call is answered; a handler that returns
		 * resumes the wait, its own calls trap into another slot) */
		uint64_t m = uc ? *(uint64_t *)&uc->uc_sigmask & ~(1ull << (SIGSYS - 1)) : 0,
			 all = ~0ull;
		st32(&s->waiting, 1);
		if (uc)
			sc4(SYS_rt_sigprocmask, SIG_SETMASK, &m, 0, 8);
		long r = sc4(SYS_futex, &s->state, FUTEX_WAIT, MX_ST_REQUEST, &ts);
		if (uc)
			sc4(SYS_rt_sigprocmask, SIG_SETMASK, &all, 0, 8);
		st32(&s->waiting, 0);
		st = ld32(&s->state);
		if (r == -ETIMEDOUT && st == MX_ST_REQUEST &&
		    sc2(SYS_kill, ld32(&hdr->exec_pid), 0) == -ESRCH) {
			if (!(ld32(&hdr->hdr_flags) & MX_HDR_FAIL_OPEN))
				die();
			/* --fail-open: unsupervised from now on, every guest */
			st32(&hdr->exec_gone, 1);
			if (exiting(nr))
				release_all(tid);
			return perform(g, uc, nr, a);
		}
	}
	if (st != MX_ST_ANSWER || ld32(&s->tid) != tid)
		return -EIO; /* the region was corrupted under us */
	if (!(s->flags & MX_ANS_CONTINUE)) {
		long r = s->result;
		uint32_t fl = s->flags;
		uint64_t until = s->args[0];
		st32(&s->state, MX_ST_IDLE);
		/* the last stretch of a sleep, below the timer's granularity: the
		 * executive answered early and sleeps; bounded (2^34 ticks, some
		 * seconds) against a deadline corrupted in the region */
		if (fl & MX_ANS_UNTIL) {
			uint64_t t = rdtsc();
			if (until > t && until - t < (1ull << 34))
				while ((int64_t)(until - rdtsc()) > 0)
					__builtin_ia32_pause();
		}
		return r;
	}
	uint64_t b[6];
	for (int i = 0; i < 6; i++)
		b[i] = s->args[i];
	uint32_t cnr = s->nr;
	if (exiting(cnr)) {
		/* never returns: the slots go back now (the executive sees the
		 * continued call end unseen) */
		release_all(tid);
		return perform(g, uc, cnr, b);
	}
	long r = perform(g, uc, cnr, b);
	if (sc0(SYS_gettid) != tid) {
		/* a child of a continued fork-like call: not ours to report */
		my_slot = 0;
		return r;
	}
	s->report_result = r;
	__atomic_store_n(&s->report_seq, seq, __ATOMIC_SEQ_CST);
	st32(&s->state, MX_ST_DONE);
	if (ld32(&hdr->exec_sleeping)) {
		__atomic_fetch_add(&hdr->doorbell, 1, __ATOMIC_SEQ_CST);
		sc4(SYS_futex, &hdr->doorbell, FUTEX_WAKE, 0x7fffffff, 0);
	}
	return r;
}


/* Site rewriting (MX_HDR_REWRITE, after gVisor's systrap; site.h, shared
 * with the application kernel's library): a trapped call from a glibc
 * wrapper (`mov $nr,%eax; syscall`) has its site rewritten to call
 * mx_direct outside any signal handler. Only while the process has one
 * thread, and never for the calls the handler emulates (the entry never
 * declines a call). */
static int emulated(uint32_t nr)
{
	switch (nr) {
	case SYS_rt_sigreturn: case SYS_rt_sigprocmask: case SYS_rt_sigaction:
	case SYS_clone: case SYS_clone3: case SYS_fork: case SYS_vfork:
	case SYS_execve: case SYS_execveat:
		return 1;
	}
	return 0;
}

static long dispatch(uint32_t nr, const uint64_t a[6], uint64_t ip, greg_t *g, ucontext_t *uc);

/* called by a rewritten site's stub, outside any signal handler */
HIDDEN struct mx_site_ret mx_direct(long nr, long a0, long a1, long a2, long a3, long a4, long a5)
{
	uint64_t a[6] = {a0, a1, a2, a3, a4, a5};
	struct mx_site_ret r = {dispatch((uint32_t)nr, a, 0, 0, 0), 0};
	return r;
}

static void try_rewrite(uint64_t ip, uint32_t nr)
{
	if (multi || emulated(nr))
		return;
	mx_site_rewrite(ip, nr, MX_SITE_IMM, mx_direct, mx_sc6);
}

static void on_sigsys(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t *uc = ucv;
	greg_t *g = uc->uc_mcontext.gregs;
	(void)sig;
	if (si->si_code != SYS_USER_DISPATCH)
		return;
	uint32_t nr = (uint32_t)si->si_syscall;
	if (nr == SYS_rt_sigreturn)
		mx_sigret((uint64_t)g[REG_RSP]); /* does not return */
	uint64_t a[6] = {g[REG_RDI], g[REG_RSI], g[REG_RDX], g[REG_R10], g[REG_R8], g[REG_R9]};
	long r = dispatch(nr, a, (uint64_t)(uintptr_t)si->si_call_addr, g, uc);
	if (hdr->hdr_flags & MX_HDR_REWRITE)
		try_rewrite((uint64_t)(uintptr_t)si->si_call_addr, nr);
	g[REG_RAX] = r;
}

static long dispatch1(uint32_t nr, const uint64_t a[6], uint64_t ip, greg_t *g, ucontext_t *uc);

/* One call: counted if `counted` says so (in the region's counters, no
 * hand-off), forwarded if wanted, else made here. g/uc: the interrupted
 * context (null from a rewritten site). */
static long dispatch(uint32_t nr, const uint64_t a[6], uint64_t ip, greg_t *g, ucontext_t *uc)
{
	if (!counts || nr >= MX_FAST_NR_MAX || !(hdr->counted[nr / 64] >> (nr % 64) & 1))
		return dispatch1(nr, a, ip, g, uc);
	struct mx_fast_count *c = &counts[nr];
	/* on entry: a call that does not return (exit, exec) is counted too */
	__atomic_fetch_add(&c->calls, 1, __ATOMIC_RELAXED);
	/* time is that of the calls made here (a forwarded call's time is the
	 * executive's business: a held sleep is not kernel time), sampled:
	 * one call in MX_FAST_TIME_EVERY of each thread (its first included),
	 * since a TSC read costs ~30 ns in a VM, more than the rest of the
	 * counting; the executive scales ticks/timed by calls */
	int timed = !(hdr->wanted[nr / 64] >> (nr % 64) & 1) &&
		    (time_nth++ % MX_FAST_TIME_EVERY) == 0;
	uint64_t t0 = timed ? rdtsc() : 0;
	long r = dispatch1(nr, a, ip, g, uc);
	if (timed) {
		__atomic_fetch_add(&c->ticks, rdtsc() - t0, __ATOMIC_RELAXED);
		__atomic_fetch_add(&c->timed, 1, __ATOMIC_RELAXED);
	}
	if (r < 0 && r >= -4095)
		__atomic_fetch_add(&c->errors, 1, __ATOMIC_RELAXED);
	return r;
}

static long dispatch1(uint32_t nr, const uint64_t a[6], uint64_t ip, greg_t *g, ucontext_t *uc)
{
	long r;
	if (nr >= MX_FAST_NR_MAX || !(hdr->wanted[nr / 64] >> (nr % 64) & 1) ||
	    ld32(&hdr->exec_gone)) {
		/* a slot of this tid from an earlier image too (exec keeps it) */
		if (exiting(nr) && high_water())
			release_all((uint32_t)sc0(SYS_gettid));
		return perform(g, uc, nr, a);
	}
	uint32_t tid = (uint32_t)sc0(SYS_gettid);
	struct mx_fast_slot *s = my_slot;
	if (!s || my_tid != tid || ld32(&s->tid) != tid) {
		uint32_t f = ld32(&hdr->frees);
		busy = 0; /* a new thread or process: nothing in flight */
		s = 0;
		if (!missed || my_tid != tid || miss_frees != f) {
			s = claim(tid, 0);
			missed = !s;
			if (!s) {
				my_slot = 0;
				my_tid = tid;
				miss_frees = f;
			}
		}
	}
	if (s && busy)
		s = claim(tid, s);
	if (!s) {
		/* no slot to be had: made unobserved rather than failed */
		__atomic_fetch_add(&hdr->overflow, 1, __ATOMIC_SEQ_CST);
		if (exiting(nr))
			release_all(tid);
		return perform(g, uc, nr, a);
	}
	busy++;
	r = forward(s, tid, nr, a, ip, g, uc);
	busy--;
	return r;
}

static void fail(const char *msg)
{
	static const char p[] = "mantle-stub: ";
	(void)!write(2, p, sizeof p - 1);
	(void)!write(2, msg, strlen(msg));
	(void)!write(2, "\n", 1);
	_exit(127);
}

/* The region's fd from the executive's door (src/fast/door.rs): connect,
 * receive one fd by SCM_RIGHTS (inheritable: the next exec passes it on).
 * A name starting with '@' is an abstract socket (the door's: nothing in
 * the filesystem). -1 if refused (not a process of the guest tree) or
 * anything fails. */
static int region_from_door(const char *name)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	size_t n = name ? strlen(name) : 0;
	socklen_t len = sizeof a;
	if (n == 0 || n >= sizeof a.sun_path)
		return -1;
	if (name[0] == '@') {
		/* a NUL, then the name without a terminating NUL */
		memcpy(a.sun_path + 1, name + 1, n - 1);
		len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	} else {
		memcpy(a.sun_path, name, n + 1);
	}
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	int fd = -1;
	if (connect(s, (struct sockaddr *)&a, len) == 0) {
		char byte;
		struct iovec io = {.iov_base = &byte, .iov_len = 1};
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(sizeof(int))];
		} u;
		struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = u.b,
				   .msg_controllen = sizeof u.b};
		ssize_t n;
		do
			n = recvmsg(s, &m, 0);
		while (n < 0 && errno == EINTR);
		struct cmsghdr *c = n == 1 ? CMSG_FIRSTHDR(&m) : 0;
		if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(&fd, CMSG_DATA(c), sizeof fd);
	}
	close(s);
	return fd;
}

/* The region's size and slot count if fd holds a region of this version. */
static int region_size_of(int fd, uint64_t *size, uint32_t *n)
{
	struct mx_fast_hdr *h = mmap(0, MX_FAST_HDR_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		return -1;
	*size = h->region_size;
	*n = h->nslots;
	int ok = h->magic == MX_FAST_MAGIC && h->version == MX_FAST_VERSION && *n != 0 &&
		 *n <= MX_FAST_MAX_SLOTS && h->slot_size == MX_FAST_SLOT_SIZE &&
		 *size >= MX_FAST_HDR_SIZE + (uint64_t)*n * MX_FAST_SLOT_SIZE && *size <= (1u << 30);
	munmap(h, MX_FAST_HDR_SIZE);
	return ok ? 0 : -1;
}

__attribute__((constructor)) static void mx_stub_init(void)
{
	const char *e = getenv("MANTLE_FAST_FD");
	if (!e || !*e)
		return;
	char *end;
	long fd = strtol(e, &end, 10);
	if (*end || fd < 0 || fd > 1 << 30)
		fail("MANTLE_FAST_FD is not a file descriptor");
	uint64_t size;
	uint32_t n;
	if (region_size_of((int)fd, &size, &n) != 0) {
		/* the fd was closed (python's subprocess closes every fd) or its
		 * number reused: ask the executive's door for it again, and say
		 * where it now is for the next exec */
		fd = region_from_door(getenv("MANTLE_FAST_DOOR"));
		if (fd < 0 || region_size_of((int)fd, &size, &n) != 0)
			fail("cannot map the fast-path region (MANTLE_FAST_FD, MANTLE_FAST_DOOR)");
		char buf[16];
		snprintf(buf, sizeof buf, "%ld", fd);
		setenv("MANTLE_FAST_FD", buf, 1);
	}
	void *m = mmap(0, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		fail("cannot map the fast-path region");
	hdr = m;
	slots = (struct mx_fast_slot *)((char *)m + MX_FAST_HDR_SIZE);
	nslots = n;
	/* the counters after the path buffers (fast.h), if the region has them */
	uint64_t coff = (((uint64_t)MX_FAST_HDR_SIZE + (uint64_t)n * MX_FAST_SLOT_SIZE + 4095) & ~4095ull) +
			(uint64_t)n * MX_FAST_PATH_SIZE;
	if (coff + (uint64_t)MX_FAST_NR_MAX * MX_FAST_COUNT_SIZE <= size)
		counts = (struct mx_fast_count *)((char *)m + coff);

	/* the excluded page, at the executive's fixed address */
	uint64_t t = hdr->tramp;
	char *tp = mmap((void *)(uintptr_t)t, 4096, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (tp == MAP_FAILED || (uint64_t)(uintptr_t)tp != t || (t & 4095))
		fail("cannot map the syscall page at its fixed address");
	_Static_assert(T_DATA == 2048, "the asm's data offsets");
	if (mx_tmpl_end - mx_tmpl > T_DATA)
		fail("the syscall page's code is too long");
	memcpy(tp, mx_tmpl, (size_t)(mx_tmpl_end - mx_tmpl));
	((uint64_t *)(tp + T_DATA))[0] = t;
	((uint64_t *)(tp + T_DATA))[1] = (uint64_t)(uintptr_t)&mx_selector;
	if (mprotect(tp, 4096, PROT_READ | PROT_EXEC) != 0)
		fail("cannot make the syscall page executable");
	mx_sc6 = (sc6_fn)(void *)tp;
	mx_sigret = (void (*)(uint64_t))(void *)(tp + (mx_tmpl_sigret - mx_tmpl));
	mx_clone = (long (*)(long, long, long, long, long, long))(void *)(tp + (mx_tmpl_clone - mx_tmpl));
	mx_restorer = t + (uint64_t)(mx_tmpl_restorer - mx_tmpl);

	struct mx_ksigaction ka = {
		.handler = (void *)on_sigsys,
		.flags = SA_SIGINFO | MX_SA_RESTORER,
		.restorer = mx_restorer,
		.mask = ~0ull,
	};
	if (sc4(SYS_rt_sigaction, SIGSYS, &ka, 0, 8) != 0)
		fail("cannot install the SIGSYS handler");
	/* SIGSYS must never be blocked: a dispatched call with it blocked kills */
	uint64_t unblock = 1ull << (SIGSYS - 1);
	sc4(SYS_rt_sigprocmask, SIG_UNBLOCK, &unblock, 0, 8);
	if (arm() != 0)
		fail("cannot turn on Syscall User Dispatch (Linux 5.11+)");
}
