/* libmantle-offload.so: the application kernel (Kågström, Paper III) in
 * user space: a program's user code runs on the application CPUs, and
 * every system call it makes is performed by a bootstrap thread of the
 * same process pinned to the bootstrap CPU.
 *
 * Mechanism:
 * - Preloaded (LD_PRELOAD) into a dynamically linked program, it overrides
 *   __libc_start_main and hands the real one a main of its own (Figure
 *   4.6): unless MANTLE_OFFLOAD_NATIVE is set (the paper's NOAPPKERN: the
 *   program's main is called as it is), that main claims an entry of the
 *   shared area (offload.h, Figure 4.3), starts the thread's bootstrap
 *   thread (a raw clone sharing the address space, file table, fs and
 *   signal handlers: a thread of the same process, so it performs each
 *   call with the process's own identity), pins itself to the application
 *   CPUs, and turns on Syscall User Dispatch for itself: every system call
 *   the program makes from outside this library's code raises SIGSYS. This
 *   library's own calls (raw `syscall` instructions in its code) are in
 *   the excluded range and run; the selector byte of each application
 *   thread always blocks.
 * - Site rewriting (site.h, shared with the fast path's stub): after a
 *   forwarded call trapped, its site (glibc's wrappers, read(),
 *   syscall(2)) is rewritten to jump into ok_direct, which forwards the
 *   calls made from it later as the handler does, without a signal; it
 *   declines the numbers it does not forward (the site's `syscall` then
 *   traps). Only while the program has one thread.
 * - The SIGSYS handler writes the call into the thread's entry (number,
 *   arguments, pc, sequence, check word), sets the state to REQUEST, wakes
 *   the bootstrap thread if it sleeps, spins a bounded number of times on
 *   the state, then FUTEX_WAITs on it. The bootstrap thread (spinning a
 *   bounded time, then FUTEX_WAIT) copies the message, validates it,
 *   performs the call, writes the result and the state ANSWER, and wakes
 *   the application thread if it sleeps.
 * - Calls on the calling thread's own kernel state are made by the
 *   application thread itself (placement.h, generated from
 *   src/placement.rs); the signal calls the trap cannot simply forward
 *   (rt_sigreturn, rt_sigprocmask, rt_sigaction) are emulated as the fast
 *   path's stub does, with its code (crates/exec/stub/sigemu.h).
 * - Special cases (paper 4.3.4, 4.4.2): clone/fork/vfork split into a new
 *   pair (Figure 4.5): the bootstrap thread makes the call; the new task
 *   (a new thread, or the fork child's only thread) becomes the new
 *   application thread and starts a bootstrap thread of its own before
 *   resuming the program (the order is the paper's reversed, so that the
 *   kernel's per-task effects of the call -- tid, CLONE_SETTLS,
 *   CLONE_CHILD_CLEARTID, the fork child's pid -- land on the task that
 *   runs the program). exit: the bootstrap thread is told to exit, then
 *   the application thread exits; exit_group and execve are made by the
 *   application thread (both end every bootstrap thread of the process).
 * - Signals (the paper's asynchronous notifications): bootstrap threads
 *   block every signal but SIGSYS, so the kernel delivers the program's
 *   signals to application threads. While an application thread waits
 *   for a forwarded call it waits with the program's signal mask; a
 *   handler that runs then returns through this library's restorer, which
 *   turns the interrupted wait into a "signal N arrived" result. The
 *   application thread then interrupts its bootstrap thread (tgkill
 *   SIGSYS: the call returns EINTR), and the call is made again if the
 *   handler has SA_RESTART and the call restarts (src/placement.rs).
 *
 * Invariants:
 * - In the trap handler and in bootstrap threads: no libc (errno, locks,
 *   TLS of other threads), only raw system calls from this library's code.
 * - A bootstrap thread's TLS base is its application thread's (it is
 *   started by it and follows its ARCH_SET_FS), so a fork child it makes
 *   starts with the program's TLS; a bootstrap thread never uses TLS.
 * - A bootstrap thread is started with CLONE_CHILD_CLEARTID on its entry's
 *   state word: when it is gone, the kernel writes 0 (GONE: the entry is
 *   free) and wakes a waiting application thread, which then ends the
 *   process with a message (never hangs).
 * - Calls from a signal handler that interrupted a forwarded call are
 *   made by the application thread itself (its bootstrap thread is busy).
 *
 * No locks: an entry is claimed by CAS of its state GONE -> CLAIMED.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <linux/futex.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "offload.h"
#include "placement.h"
#include "sigemu.h"
#include "site.h"

#define HIDDEN __attribute__((visibility("hidden")))
#define EXPORT __attribute__((visibility("default")))
#define TLS __thread __attribute__((tls_model("initial-exec")))

#ifndef PR_SET_SYSCALL_USER_DISPATCH
#define PR_SET_SYSCALL_USER_DISPATCH 59
#define PR_SYS_DISPATCH_ON 1
#define SYSCALL_DISPATCH_FILTER_BLOCK 1
#endif
#define SYS_USER_DISPATCH 2
#define SIGSYS_BIT MX_SIGSYS_BIT
#define INTR_MARK 0x10000 /* ok_wait's result when a handler interrupted it: + signo */

/* ---- raw system calls (inlined into this library's code: excluded) ---- */

static inline long rs6(long n, long a, long b, long c, long d, long e, long f)
{
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long ret;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}
#define rs0(n) rs6((n), 0, 0, 0, 0, 0, 0)
#define rs1(n, a) rs6((n), (long)(a), 0, 0, 0, 0, 0)
#define rs2(n, a, b) rs6((n), (long)(a), (long)(b), 0, 0, 0, 0)
#define rs3(n, a, b, c) rs6((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define rs4(n, a, b, c, d) rs6((n), (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)

/* Assembly helpers, all in this library's text (the excluded range):
 * - ok_sigret(rsp): rt_sigreturn of the frame whose ucontext is at rsp.
 * - ok_restorers + 16*N: the restorer of every handler of signal N (ours
 *   and the program's; one entry per signal, since the frame holds the
 *   signal number only for SA_SIGINFO handlers). If the handler
 *   interrupted ok_wait in its window, the wait is made to return
 *   INTR_MARK + N instead of resuming or restarting (kernel rt_sigframe:
 *   the ucontext at rsp, gregs at +40: rax at +144, rip at +168).
 *   Every restorer but SIGSYS's (the trap's own, and the kicks of
 *   bootstrap threads, which share their application thread's TLS) also
 *   records N in this thread's ok_fwd_sig: a forward made from a
 *   rewritten site, waiting with the program's signals deliverable, learns
 *   from it that a handler ran.
 * - ok_wait(w): rt_sigprocmask(SETMASK, w->mask), FUTEX_WAIT(w->uaddr,
 *   w->val, w->ts), rt_sigprocmask(SETMASK, w->after): a signal can be
 *   delivered from ok_wait_a up to the last syscall instruction (ok_wait_b);
 *   the restorer then resumes at ok_wait_c with rax = INTR_MARK + signo
 *   (the mask is still switched back). No stack use inside the window.
 * - ok_bperform(m): the bootstrap thread's call m[0](m[1..6]). A kick
 *   (SIGSYS from its application thread) interrupts it only if it blocks,
 *   as the program's signal would have; one that lands before the call
 *   starts is as a signal handled just before the call: the call runs.
 * - ok_spawn(flags, stack, ctid, fn, arg): a raw clone whose child calls
 *   fn(arg) on `stack`, then exits.
 * - ok_clone_app(flags, stack, ptid, ctid, tls): the program's thread-like
 *   clone, made by a bootstrap thread; the child calls ok_app_child(info)
 *   with info at stack-16, then resumes the program at the pc at stack-8
 *   with rax = 0 and rsp = stack. */
extern char ok_wait_a[] HIDDEN, ok_wait_b[] HIDDEN, ok_wait_c[] HIDDEN, ok_restorer[] HIDDEN,
	ok_restorers[] HIDDEN;
HIDDEN void ok_sigret(uint64_t rsp) __attribute__((noreturn));
struct wait_args {
	const uint64_t *mask;     /* 0: the program's mask, while waiting */
	uint32_t *uaddr;          /* 8 */
	uint64_t val;             /* 16 */
	const struct timespec *ts; /* 24 */
	const uint64_t *after;    /* 32: the mask after (everything blocked) */
};
HIDDEN long ok_wait(const struct wait_args *w);
HIDDEN long ok_bperform(const uint64_t *m);
HIDDEN long ok_spawn(long flags, void *stack, uint32_t *ctid, void (*fn)(void *), void *arg);
HIDDEN long ok_clone_app(long flags, long stack, long ptid, long ctid, long tls);
HIDDEN void ok_app_child(void *info);
__asm__(".text\n"
	".globl ok_sigret, ok_restorer, ok_restorers, ok_wait, ok_wait_a, ok_wait_b, ok_wait_c, ok_bperform\n"
	".globl ok_spawn, ok_clone_app\n"
	".hidden ok_sigret, ok_restorer, ok_restorers, ok_wait, ok_wait_a, ok_wait_b, ok_wait_c, ok_bperform\n"
	".hidden ok_spawn, ok_clone_app\n"
	"ok_sigret:\n"
	"\tmov %rdi,%rsp\n"
	"\tmov $15,%eax\n"
	"\tsyscall\n"
	"\thlt\n"
	".balign 16\n"
	"ok_restorers:\n"
	".set ok_n, 0\n"
	".rept 65\n"
	".balign 16\n"
	"\tmov $ok_n,%edx\n"
	"\tjmp ok_restorer\n"
	".set ok_n, ok_n+1\n"
	".endr\n"
	"ok_restorer:\n"
	"\tcmp $31,%edx\n"
	"\tje 4f\n"
	"\tmov ok_fwd_sig@gottpoff(%rip),%rax\n"
	"\tmov %edx,%fs:(%rax)\n"
	"4:\n"
	"\tmov 168(%rsp),%rcx\n"
	"\tlea ok_wait_a(%rip),%rax\n"
	"\tcmp %rax,%rcx\n"
	"\tjb 1f\n"
	"\tlea ok_wait_b(%rip),%rax\n"
	"\tcmp %rax,%rcx\n"
	"\tja 1f\n"
	"\tlea ok_wait_c(%rip),%rax\n"
	"\tmov %rax,168(%rsp)\n"
	"\tlea 0x10000(%rdx),%rax\n"
	"\tmov %rax,144(%rsp)\n"
	"1:\n"
	"\tmov $15,%eax\n"
	"\tsyscall\n"
	"\thlt\n"
	"ok_wait:\n"
	"\tmov %rdi,%r8\n"
	"\tmov $14,%eax\n"
	"\tmov $2,%edi\n"
	"\tmov 0(%r8),%rsi\n"
	"\txor %edx,%edx\n"
	"\tmov $8,%r10d\n"
	"\tsyscall\n"
	"ok_wait_a:\n"
	"\tmov 8(%r8),%rdi\n"
	"\txor %esi,%esi\n" /* FUTEX_WAIT (shared: the kernel's CLEARTID wake is shared) */
	"\tmov 16(%r8),%rdx\n"
	"\tmov 24(%r8),%r10\n"
	"\tmov $202,%eax\n"
	"\tsyscall\n"
	"ok_wait_c:\n"
	"\tmov %rax,%r9\n"
	"\tmov $14,%eax\n"
	"\tmov $2,%edi\n"
	"\tmov 32(%r8),%rsi\n"
	"\txor %edx,%edx\n"
	"\tmov $8,%r10d\n"
	"ok_wait_b:\n"
	"\tsyscall\n"
	"\tmov %r9,%rax\n"
	"\tret\n"
	"ok_bperform:\n"
	"\tmov %rdi,%r11\n"
	"\tmov 0(%r11),%rax\n"
	"\tmov 8(%r11),%rdi\n"
	"\tmov 16(%r11),%rsi\n"
	"\tmov 24(%r11),%rdx\n"
	"\tmov 32(%r11),%r10\n"
	"\tmov 40(%r11),%r8\n"
	"\tmov 48(%r11),%r9\n"
	"\tsyscall\n"
	"\tret\n"
	"ok_spawn:\n"
	"\tmov %rcx,-8(%rsi)\n"
	"\tmov %r8,-16(%rsi)\n"
	"\tsub $16,%rsi\n"
	"\tmov %rdx,%r10\n"
	"\txor %edx,%edx\n"
	"\txor %r8d,%r8d\n"
	"\tmov $56,%eax\n"
	"\tsyscall\n"
	"\ttest %rax,%rax\n"
	"\tjz 2f\n"
	"\tret\n"
	"2:\n"
	"\tpop %rdi\n"
	"\tpop %rax\n"
	"\txor %ebp,%ebp\n"
	"\tcall *%rax\n"
	"\txor %edi,%edi\n"
	"\tmov $60,%eax\n"
	"\tsyscall\n"
	"\thlt\n"
	"ok_clone_app:\n"
	"\tmov %rcx,%r10\n"
	"\tmov $56,%eax\n"
	"\tsyscall\n"
	"\ttest %rax,%rax\n"
	"\tjz 3f\n"
	"\tret\n"
	"3:\n"
	"\tmov %rsp,%rbx\n"
	"\tmov -16(%rsp),%rdi\n"
	"\tsub $64,%rsp\n"
	"\tand $-16,%rsp\n"
	"\txor %ebp,%ebp\n"
	"\tcall ok_app_child\n"
	"\tmov %rbx,%rsp\n"
	"\txor %eax,%eax\n"
	"\tjmp *-8(%rsp)\n");

/* ---- state ---- */

static struct mx_ok_hdr *area;
static struct mx_ok_entry *entries;
static char *stacks;                        /* two per entry */
static unsigned char stack_half[MX_OK_MAX_PAIRS]; /* which half the entry's bootstrap uses */
/* the sequence a new bootstrap thread starts from: set before it starts
 * (never read from the entry, which the application may already have
 * filled with its first message) */
static uint64_t start_seq[MX_OK_MAX_PAIRS];
static uint64_t app_set[16], boot_set[16], orig_set[16]; /* cpu_set_t, 1024 CPUs */
static uint32_t spin_iters = 4000;
static uint64_t text_lo, text_hi;            /* this library's code: the excluded range */
static volatile char selector = SYSCALL_DISPATCH_FILTER_BLOCK;
static uint32_t pid_cached;
static long fault_exit_after = -1;           /* MANTLE_OFFLOAD_FAULT=boot-exit:N (tests) */
static int boot_prio;                        /* MANTLE_OFFLOAD_BOOT_PRIO: SCHED_FIFO of bootstrap threads */

static TLS struct mx_ok_entry *my_entry;
static TLS uint64_t my_seq;
static TLS uint32_t depth; /* SIGSYS handlers and direct forwards running on this thread */
/* the last program signal whose handler returned on this thread (written
 * by the restorers; read and cleared by a direct forward) */
HIDDEN TLS volatile uint32_t ok_fwd_sig;
/* site rewriting (site.h): on unless MANTLE_OFFLOAD_REWRITE=0; only while
 * the program has one thread (multi: it made a CLONE_VM task) */
static int rewrite_on = 1;
static volatile int multi;
/* a CLONE_VM task shares an application thread's TLS (no CLONE_SETTLS,
 * no CLONE_VFORK: it runs beside it): calls from rewritten sites are then
 * made where they are made, since my_entry may be another task's */
static volatile int shared_tls;

static inline uint32_t ld32(const uint32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void st32(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

static size_t slen(const char *s)
{
	size_t n = 0;
	while (s[n])
		n++;
	return n;
}

static void say(const char *a, const char *b)
{
	static const char p[] = "mantle-offload: ";
	rs3(SYS_write, 2, p, sizeof p - 1);
	rs3(SYS_write, 2, a, slen(a));
	if (b)
		rs3(SYS_write, 2, b, slen(b));
	rs3(SYS_write, 2, "\n", 1);
}

static void __attribute__((noreturn)) fail(const char *a, const char *b)
{
	say(a, b);
	for (;;)
		rs1(SYS_exit_group, 127);
}

static long arm(void)
{
	return rs6(SYS_prctl, PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, (long)text_lo,
		   (long)(text_hi - text_lo), (long)&selector, 0);
}

static void wake(uint32_t *w)
{
	rs6(SYS_futex, (long)w, FUTEX_WAKE, 1, 0, 0, 0);
}

/* ---- the bootstrap thread ---- */

static struct mx_ok_entry *claim(void)
{
	for (uint32_t i = 0; i < MX_OK_MAX_PAIRS; i++) {
		uint32_t z = MX_OK_GONE;
		if (ld32(&entries[i].bootstrap_has_msg) == MX_OK_GONE &&
		    __atomic_compare_exchange_n(&entries[i].bootstrap_has_msg, &z, MX_OK_CLAIMED, 0,
						__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
			return &entries[i];
	}
	return 0;
}

static void boot_loop(void *arg);

/* Starts the bootstrap thread of entry p (a thread of the calling
 * process, sharing everything a thread shares); its stack is the half of
 * the entry's pair of stacks it is not using now (a fork child still runs
 * on the other). */
static long start_bootstrap(struct mx_ok_entry *p)
{
	uint32_t i = (uint32_t)(p - entries);
	stack_half[i] ^= 1;
	start_seq[i] = my_seq;
	char *top = stacks + ((size_t)i * 2 + stack_half[i] + 1) * MX_OK_STACK_SIZE;
	long r = ok_spawn(CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
				  CLONE_SYSVSEM | CLONE_CHILD_CLEARTID,
			  top, &p->bootstrap_has_msg, boot_loop, p);
	if (r > 0)
		__atomic_fetch_add(&area->pairs_made, 1, __ATOMIC_RELAXED);
	return r;
}

/* The new application thread of a split call: pin, own the entry, start
 * its bootstrap thread, trap. */
static void become_app(struct mx_ok_entry *p, uint64_t seq)
{
	rs3(SYS_sched_setaffinity, 0, sizeof app_set, app_set);
	my_entry = p;
	my_seq = seq;
	depth = 0;
	p->seq = seq;
	p->intr_seq = 0;
	p->app_tid = (uint32_t)rs0(SYS_gettid);
	p->app_sleeping = 0;
	if (start_bootstrap(p) < 0)
		fail("cannot start a bootstrap thread", 0);
	if (arm() != 0)
		fail("cannot turn on Syscall User Dispatch", 0);
}

struct child_info {
	struct mx_ok_entry *p; /* the new pair's entry, or 0: run unpaired */
	uint64_t mask;         /* the program's mask at the call */
	uint32_t taken;        /* the child copied this (it lives on the parent's stack) */
};

/* A thread-like clone's child, on the program's new stack, before it
 * resumes the program (ok_clone_app). */
HIDDEN void ok_app_child(void *v)
{
	struct child_info c = *(struct child_info *)v, *ci = &c;
	__atomic_store_n(&((struct child_info *)v)->taken, 1, __ATOMIC_RELEASE);
	wake(&((struct child_info *)v)->taken);
	if (ci->p) {
		become_app(ci->p, 0);
	} else {
		/* a CLONE_VM process (posix_spawn, vfork-like) or a thread
		 * without its own TLS: not paired; it runs where the program
		 * was allowed to run */
		rs3(SYS_sched_setaffinity, 0, sizeof orig_set, orig_set);
	}
	rs4(SYS_rt_sigprocmask, SIG_SETMASK, &ci->mask, 0, 8);
}

/* The fork child (a copy of the bootstrap thread, on its stack): it
 * becomes the child's application thread and resumes the program from
 * the parent's trap frame with rax = 0. */
static void __attribute__((noreturn)) fork_child(struct mx_ok_entry *p, uint64_t uc, uint64_t stack,
						 uint64_t seq)
{
	pid_cached = (uint32_t)rs0(SYS_getpid);
	for (uint32_t i = 0; i < MX_OK_MAX_PAIRS; i++)
		if (&entries[i] != p)
			entries[i].bootstrap_has_msg = MX_OK_GONE;
	p->bootstrap_has_msg = MX_OK_CLAIMED;
	/* the kernel does not carry the parent thread's rseq registration
	 * over (the parent was the bootstrap thread): register glibc's area */
	extern __attribute__((weak)) ptrdiff_t __rseq_offset;
	extern __attribute__((weak)) unsigned int __rseq_size;
	if (&__rseq_offset && &__rseq_size && __rseq_size) {
		uint64_t fs;
		__asm__ volatile("mov %%fs:0,%0" : "=r"(fs));
		rs4(SYS_rseq, fs + __rseq_offset, __rseq_size < 32 ? 32 : __rseq_size, 0, 0x53053053);
	}
	become_app(p, seq);
	ucontext_t *u = (ucontext_t *)(uintptr_t)uc;
	u->uc_mcontext.gregs[REG_RAX] = 0;
	if (stack)
		u->uc_mcontext.gregs[REG_RSP] = (greg_t)stack;
	ok_sigret(uc);
}

/* The split call (Figure 4.5), made by the bootstrap thread. */
static long boot_clone(struct mx_ok_entry *p, const struct mx_ok_syscall *m, uint64_t uc,
		       uint64_t seq)
{
	uint64_t flags = m->arg[0], stack = m->arg[1];
	long r;
	if (m->nr == SYS_fork || m->nr == SYS_vfork) {
		flags = SIGCHLD;
		stack = 0;
	}
	if (m->nr == SYS_clone && stack && (flags & CLONE_VM)) {
		/* a thread, or a process sharing memory (posix_spawn) */
		struct child_info ci = {0, 0, 0};
		ucontext_t *u = (ucontext_t *)(uintptr_t)uc;
		ci.mask = *(uint64_t *)&u->uc_sigmask & ~SIGSYS_BIT;
		if ((flags & CLONE_THREAD) && (flags & CLONE_SETTLS)) {
			ci.p = claim();
			if (!ci.p)
				return -EAGAIN;
		} else if (!(flags & CLONE_VFORK)) {
			shared_tls = 1;
		}
		uint64_t *sp = (uint64_t *)(uintptr_t)stack;
		sp[-1] = p->pc;
		sp[-2] = (uint64_t)(uintptr_t)&ci;
		/* ci lives on this stack until the child has copied it */
		r = ok_clone_app((long)flags, (long)stack, (long)m->arg[2], (long)m->arg[3],
				 (long)m->arg[4]);
		if (r < 0) {
			if (ci.p)
				st32(&ci.p->bootstrap_has_msg, MX_OK_GONE);
			return r;
		}
		/* bounded by the child's life: it copies ci first thing */
		/* blocking, not spinning: the child may need this CPU (it
		 * starts with this thread's affinity) */
		while (!__atomic_load_n(&ci.taken, __ATOMIC_ACQUIRE)) {
			struct timespec ts = {0, 10000000};
			rs4(SYS_futex, &ci.taken, FUTEX_WAIT, 0, &ts);
			if (!__atomic_load_n(&ci.taken, __ATOMIC_ACQUIRE) &&
			    rs3(SYS_tgkill, (flags & CLONE_THREAD) ? pid_cached : r, r, 0) == -ESRCH)
				break;
		}
		return r;
	}
	/* fork-like: the child is a copy of this thread */
	r = rs6(SYS_clone, (long)(flags & ~(uint64_t)(CLONE_VM | CLONE_VFORK)), 0, (long)m->arg[2],
		(long)m->arg[3], (long)m->arg[4], 0);
	if (r == 0)
		fork_child(p, uc, m->nr == SYS_clone ? stack : 0, seq);
	return r;
}

static int valid(const struct mx_ok_entry *c, uint64_t last)
{
	if (c->check != mx_ok_check(c->nr, c->pc, &c->syscall, c->seq, c->uc) || c->seq <= last)
		return 0;
	switch (c->nr) {
	case MX_OK_SYSCALL:
		return c->syscall.nr < MX_OK_NR_MAX && ok_boot_may[c->syscall.nr];
	case MX_OK_CLONE:
		return (c->syscall.nr == SYS_clone || c->syscall.nr == SYS_fork ||
			c->syscall.nr == SYS_vfork) &&
		       c->uc && !(c->uc & 7);
	case MX_OK_EXIT:
		return 1;
	}
	return 0;
}

static void boot_loop(void *arg)
{
	struct mx_ok_entry *p = arg;
	uint64_t mask = ~SIGSYS_BIT;
	rs4(SYS_rt_sigprocmask, SIG_SETMASK, &mask, 0, 8);
	rs3(SYS_sched_setaffinity, 0, sizeof boot_set, boot_set);
	if (boot_prio > 0) {
		/* privileged only; without it the thread stays SCHED_OTHER */
		struct sched_param sp = {.sched_priority = boot_prio};
		/* children (new application threads, fork children) start at
		 * SCHED_OTHER again */
		rs3(SYS_sched_setscheduler, 0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp);
	}
	p->boot_tid = (uint32_t)rs0(SYS_gettid);
	uint64_t last = start_seq[p - entries];
	long served = 0;
	uint32_t z = MX_OK_CLAIMED;
	__atomic_compare_exchange_n(&p->bootstrap_has_msg, &z, MX_OK_IDLE, 0, __ATOMIC_SEQ_CST,
				    __ATOMIC_SEQ_CST);
	for (;;) {
		uint32_t st, n = 0;
		while (((st = ld32(&p->bootstrap_has_msg)) == MX_OK_IDLE || st == MX_OK_ANSWER ||
			st == MX_OK_REFUSED || st == MX_OK_CLAIMED) &&
		       n < spin_iters) {
			__builtin_ia32_pause();
			n++;
		}
		if (st == MX_OK_IDLE || st == MX_OK_ANSWER || st == MX_OK_REFUSED ||
		    st == MX_OK_CLAIMED) {
			st32(&p->boot_sleeping, 1);
			__atomic_thread_fence(__ATOMIC_SEQ_CST);
			if (ld32(&p->bootstrap_has_msg) == st)
				rs4(SYS_futex, &p->bootstrap_has_msg, FUTEX_WAIT, st, 0);
			st32(&p->boot_sleeping, 0);
			continue;
		}
		struct mx_ok_entry c;
		__builtin_memcpy(&c, p, sizeof c);
		if (st != MX_OK_REQUEST || !valid(&c, last)) {
			/* written by something other than the trap handler */
			__atomic_fetch_add(&area->refused, 1, __ATOMIC_RELAXED);
			p->syscall.ret = -EINVAL;
			st32(&p->bootstrap_has_msg, MX_OK_REFUSED);
			__atomic_thread_fence(__ATOMIC_SEQ_CST);
			if (ld32(&p->app_sleeping))
				wake(&p->bootstrap_has_msg);
			continue;
		}
		last = c.seq;
		if (c.nr == MX_OK_EXIT || (fault_exit_after >= 0 && served++ >= fault_exit_after))
			for (;;)
				rs1(SYS_exit, 0);
		long r;
		if (c.nr == MX_OK_CLONE) {
			r = boot_clone(p, &c.syscall, c.uc, c.seq);
		} else {
			uint64_t m[7] = {c.syscall.nr, c.syscall.arg[0], c.syscall.arg[1],
					 c.syscall.arg[2], c.syscall.arg[3], c.syscall.arg[4],
					 c.syscall.arg[5]};
			do
				r = ok_bperform(m);
			while (r == -EINTR && __atomic_load_n(&p->intr_seq, __ATOMIC_ACQUIRE) != c.seq);
		}
		p->syscall.ret = r;
		st32(&p->bootstrap_has_msg, MX_OK_ANSWER);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (ld32(&p->app_sleeping))
			wake(&p->bootstrap_has_msg);
	}
}

/* ---- the application thread's trap ---- */

static void __attribute__((noreturn)) boot_gone(struct mx_ok_entry *p)
{
	(void)p;
	fail("the bootstrap thread is gone: ending the process (status 127)", 0);
}

/* Sends a message and waits for its answer; returns the result, and in
 * *sig the last signal whose handler interrupted the wait (0: none).
 * uc: the trap's context (the program's mask is there; every signal is
 * blocked now), or null for a call from a rewritten site (direct: the
 * program's mask is the thread's own, so its signals may be delivered at
 * any point here: the restorers record them in ok_fwd_sig). */
static long send(struct mx_ok_entry *p, uint32_t kind, uint64_t nr, const uint64_t a[6],
		 uint64_t pc, ucontext_t *uc, int *sig)
{
	uint64_t seq = ++my_seq;
	p->nr = kind;
	p->pc = pc;
	p->syscall.nr = nr;
	for (int i = 0; i < 6; i++)
		p->syscall.arg[i] = a[i];
	p->seq = seq;
	p->uc = (uint64_t)(uintptr_t)uc;
	p->check = mx_ok_check(kind, pc, &p->syscall, seq, p->uc);
	if (!uc)
		ok_fwd_sig = 0;
	st32(&p->bootstrap_has_msg, MX_OK_REQUEST);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (ld32(&p->boot_sleeping))
		wake(&p->bootstrap_has_msg);
	if (kind == MX_OK_EXIT)
		return 0;
	uint32_t st, n = 0;
	while ((st = ld32(&p->bootstrap_has_msg)) == MX_OK_REQUEST && n < spin_iters) {
		if (!uc && ok_fwd_sig)
			break;
		__builtin_ia32_pause();
		n++;
	}
	uint64_t m, all = ~0ull, old = 0;
	int blocked = 0;
	if (uc) {
		m = *(uint64_t *)&uc->uc_sigmask & ~SIGSYS_BIT;
	} else {
		/* from here on as in the trap: every signal blocked but in
		 * ok_wait's window, where the program's mask is restored */
		if (st == MX_OK_REQUEST)
			blocked = rs4(SYS_rt_sigprocmask, SIG_BLOCK, &all, &old, 8) == 0;
		m = old & ~SIGSYS_BIT;
	}
	while (st == MX_OK_REQUEST) {
		uint32_t fs = uc ? 0 : ok_fwd_sig;
		if (fs) {
			/* a handler ran while the call was in flight */
			ok_fwd_sig = 0;
			*sig = (int)fs;
			__atomic_store_n(&p->intr_seq, seq, __ATOMIC_SEQ_CST);
			rs3(SYS_tgkill, pid_cached, ld32(&p->boot_tid), SIGSYS);
		}
		struct timespec ts = {1, 0};
		st32(&p->app_sleeping, 1);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		struct wait_args w = {&m, &p->bootstrap_has_msg, MX_OK_REQUEST, &ts, &all};
		long r = ok_wait(&w);
		st32(&p->app_sleeping, 0);
		st = ld32(&p->bootstrap_has_msg);
		if (r > INTR_MARK && r < INTR_MARK + 65 && st == MX_OK_REQUEST) {
			/* a handler ran: interrupt the call */
			*sig = (int)(r - INTR_MARK);
			if (!uc)
				ok_fwd_sig = 0;
			__atomic_store_n(&p->intr_seq, seq, __ATOMIC_SEQ_CST);
			rs3(SYS_tgkill, pid_cached, ld32(&p->boot_tid), SIGSYS);
		} else if (r == -ETIMEDOUT && st == MX_OK_REQUEST &&
			   rs3(SYS_tgkill, pid_cached, ld32(&p->boot_tid), 0) == -ESRCH) {
			boot_gone(p);
		}
	}
	if (blocked)
		rs4(SYS_rt_sigprocmask, SIG_SETMASK, &old, 0, 8);
	if (st == MX_OK_GONE)
		boot_gone(p);
	if (st != MX_OK_ANSWER && st != MX_OK_REFUSED)
		return -EIO; /* the entry was corrupted under us */
	/* the state stays ANSWER (no message, for the bootstrap thread):
	 * writing IDLE back would move the line once more per call */
	return p->syscall.ret;
}

/* A forwarded call: sent, and made again after an interrupting handler
 * with SA_RESTART if the call restarts. */
static long forward(struct mx_ok_entry *p, uint32_t nr, const uint64_t a[6], uint64_t pc,
		    ucontext_t *uc)
{
	for (;;) {
		int sig = 0;
		long r = send(p, MX_OK_SYSCALL, nr, a, pc, uc, &sig);
		if (r != -EINTR || !sig || nr >= MX_OK_NR_MAX || !ok_restartable[nr])
			return r;
		struct mx_ksigaction k;
		if (rs4(SYS_rt_sigaction, sig, 0, &k, 8) != 0 || !(k.flags & SA_RESTART))
			return r;
	}
}

/* Made by the application thread itself, as the fast path's stub makes a
 * call in its handler: blocking calls with the program's signal mask. */
static long local(ucontext_t *uc, uint32_t nr, const uint64_t a[6])
{
	uint64_t *um = (uint64_t *)&uc->uc_sigmask;
	switch (nr) {
	case SYS_rt_sigprocmask:
		return mx_emu_sigprocmask(um, a);
	case SYS_rt_sigaction:
		/* the program's handlers return through our restorer (in the
		 * excluded range; it also marks waits) */
		return mx_emu_sigaction(
			a, a[0] >= 1 && a[0] <= 64 ? (uint64_t)(uintptr_t)(ok_restorers + 16 * a[0]) : 0,
			rs6);
	case SYS_clone3:
		return -ENOSYS; /* glibc falls back to clone */
	}
	uint64_t m = *um & ~SIGSYS_BIT, all = ~0ull;
	rs4(SYS_rt_sigprocmask, SIG_SETMASK, &m, 0, 8);
	long r = rs6(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
	rs4(SYS_rt_sigprocmask, SIG_SETMASK, &all, 0, 8);
	return r;
}

static long handle(uint32_t nr, const uint64_t a[6], uint64_t pc, ucontext_t *uc)
{
	struct mx_ok_entry *p = my_entry;
	if (nr == SYS_exit_group)
		for (;;)
			rs1(SYS_exit_group, a[0]);
	/* another task may run the program's code beside this one: no more
	 * rewriting (a vfork-like child runs while its parent waits) */
	if (nr == SYS_clone && (a[0] & CLONE_VM) &&
	    ((a[0] & CLONE_THREAD) || !(a[0] & CLONE_VFORK)))
		multi = 1;
	if (!p || depth > 1 || nr >= MX_OK_NR_MAX) {
		/* a new thread would start inside this handler: refused (a
		 * fork made here runs unpaired: dispatch is off in a child) */
		if (nr == SYS_clone && a[1] != 0)
			return -EAGAIN;
		return local(uc, nr, a);
	}
	switch (ok_place[nr]) {
	case OK_FORWARD:
		return forward(p, nr, a, pc, uc);
	case OK_LOCAL:
		return local(uc, nr, a);
	case OK_BOTH: {
		long r = forward(p, nr, a, pc, uc);
		if (r >= 0)
			local(uc, nr, a);
		return r;
	}
	case OK_SELF_ARG0:
		if (a[0] == 0 || a[0] == p->app_tid)
			return local(uc, nr, a);
		return forward(p, nr, a, pc, uc);
	case OK_SELF_PRIO:
		if (a[0] == PRIO_PROCESS && (a[1] == 0 || a[1] == p->app_tid))
			return local(uc, nr, a);
		return forward(p, nr, a, pc, uc);
	}
	/* OK_SPECIAL */
	switch (nr) {
	case SYS_gettid:
		return p->app_tid;
	case SYS_exit: {
		int sig = 0;
		send(p, MX_OK_EXIT, nr, a, pc, uc, &sig);
		my_entry = 0;
		for (;;)
			rs1(SYS_exit, a[0]);
	}
	case SYS_execve:
	case SYS_execveat: {
		/* the new image starts where the program was allowed to run
		 * (its own copy of this library pins it again) */
		rs3(SYS_sched_setaffinity, 0, sizeof orig_set, orig_set);
		long r = local(uc, nr, a);
		rs3(SYS_sched_setaffinity, 0, sizeof app_set, app_set);
		return r;
	}
	case SYS_clone:
	case SYS_fork:
	case SYS_vfork: {
		int sig = 0;
		return send(p, MX_OK_CLONE, nr, a, pc, uc, &sig);
	}
	}
	return local(uc, nr, a);
}

/* The entry of a rewritten site (site.h), on the application thread,
 * outside any signal handler: a call the bootstrap thread makes is
 * forwarded as from the trap, without the signal; any other is declined
 * (the site's own `syscall` traps, and the handler sees it whole). */
HIDDEN struct mx_site_ret ok_direct(long nr, long a0, long a1, long a2, long a3, long a4, long a5)
{
	struct mx_site_ret out = {0, 0};
	struct mx_ok_entry *p = my_entry;
	if ((unsigned long)nr >= MX_OK_NR_MAX || ok_place[nr] != OK_FORWARD) {
		out.punt = 1;
		return out;
	}
	if (!p || depth || shared_tls) {
		/* unpaired, or in a handler that interrupted a forward (the
		 * bootstrap thread is busy): made here, with this mask */
		out.ret = rs6(nr, a0, a1, a2, a3, a4, a5);
		return out;
	}
	uint64_t a[6] = {a0, a1, a2, a3, a4, a5};
	depth++;
	out.ret = forward(p, (uint32_t)nr, a, 0, 0);
	depth--;
	return out;
}

static void on_sigsys(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t *uc = ucv;
	greg_t *g = uc->uc_mcontext.gregs;
	(void)sig;
	if (si->si_code != SYS_USER_DISPATCH)
		return; /* a kick of a bootstrap thread (its blocking call returns EINTR), or stray */
	uint32_t nr = (uint32_t)si->si_syscall;
	if (nr == SYS_rt_sigreturn)
		ok_sigret((uint64_t)g[REG_RSP]); /* the program's own restorer */
	uint64_t a[6] = {g[REG_RDI], g[REG_RSI], g[REG_RDX], g[REG_R10], g[REG_R8], g[REG_R9]};
	uint64_t pc = (uint64_t)(uintptr_t)si->si_call_addr;
	__atomic_fetch_add(&area->traps, 1, __ATOMIC_RELAXED);
	depth++;
	long r = handle(nr, a, pc, uc);
	depth--;
	g[REG_RAX] = r;
	/* later calls from this site skip the trap: glibc's wrappers, its
	 * read() and syscall(2) (whose other numbers the entry declines) */
	if (rewrite_on && !multi && nr < MX_OK_NR_MAX && ok_place[nr] == OK_FORWARD)
		if (mx_site_rewrite(pc, nr, MX_SITE_IMM | MX_SITE_READ | MX_SITE_SYSCALL2, ok_direct,
				    rs6))
			__atomic_fetch_add(&area->sites, 1, __ATOMIC_RELAXED);
}

/* ---- start-up ---- */

static int find_text(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	uint64_t me = (uint64_t)(uintptr_t)data;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
			continue;
		uint64_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
		if (me >= lo && me < hi) {
			text_lo = lo;
			text_hi = hi;
			return 1;
		}
	}
	return 0;
}

static int parse_cpus(const char *s, uint64_t *set)
{
	memset(set, 0, 128);
	while (*s) {
		char *e;
		long a = strtol(s, &e, 10), b = a;
		if (e == s || a < 0 || a >= 1024)
			return -1;
		if (*e == '-') {
			s = e + 1;
			b = strtol(s, &e, 10);
			if (e == s || b < a || b >= 1024)
				return -1;
		}
		for (long c = a; c <= b; c++)
			set[c / 64] |= 1ull << (c % 64);
		s = e;
		if (*s == ',')
			s++;
		else if (*s)
			return -1;
	}
	return 0;
}

static void setup(void)
{
	/* MANTLE_OFFLOAD="BOOT:APPS" (CPU numbers; APPS a list like 1,3-5) */
	const char *cfg = getenv("MANTLE_OFFLOAD");
	if (!cfg || !*cfg)
		return;
	char *colon;
	long boot = strtol(cfg, &colon, 10);
	if (colon == cfg || *colon != ':' || boot < 0 || boot >= 1024 ||
	    parse_cpus(colon + 1, app_set) != 0)
		fail("MANTLE_OFFLOAD is not BOOT:APPS (CPU numbers): ", cfg);
	memset(boot_set, 0, sizeof boot_set);
	boot_set[boot / 64] |= 1ull << (boot % 64);
	const char *sp = getenv("MANTLE_OFFLOAD_SPIN");
	if (sp && *sp)
		spin_iters = (uint32_t)strtoul(sp, 0, 10);
	else if (app_set[boot / 64] >> (boot % 64) & 1)
		/* the program may run on the bootstrap CPU: a thread spinning
		 * there only keeps the other side from running */
		spin_iters = 0;
	const char *bp = getenv("MANTLE_OFFLOAD_BOOT_PRIO");
	if (bp && *bp)
		boot_prio = (int)strtol(bp, 0, 10);
	const char *rw = getenv("MANTLE_OFFLOAD_REWRITE");
	if (rw && strcmp(rw, "0") == 0)
		rewrite_on = 0;
	const char *f = getenv("MANTLE_OFFLOAD_FAULT");
	if (f && strncmp(f, "boot-exit:", 10) == 0)
		fault_exit_after = strtol(f + 10, 0, 10);
	if (sched_getaffinity(0, sizeof orig_set, (cpu_set_t *)orig_set) != 0)
		fail("cannot read the CPU affinity", 0);
	dl_iterate_phdr(find_text, (void *)(uintptr_t)find_text);
	if (!text_lo)
		fail("cannot find this library's code", 0);
	void *m = mmap(0, MX_OK_HDR_SIZE + MX_OK_MAX_PAIRS * MX_OK_ENTRY_SIZE,
		       PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *s = mmap(0, (size_t)MX_OK_MAX_PAIRS * 2 * MX_OK_STACK_SIZE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED || s == MAP_FAILED)
		fail("cannot map the shared area", 0);
	area = m;
	entries = (struct mx_ok_entry *)((char *)m + MX_OK_HDR_SIZE);
	stacks = s;
	area->magic = MX_OK_MAGIC;
	area->version = MX_OK_VERSION;
	area->npairs = MX_OK_MAX_PAIRS;
	area->entry_size = MX_OK_ENTRY_SIZE;
	area->boot_cpu = (uint32_t)boot;
	area->spin = spin_iters;
	pid_cached = (uint32_t)getpid();

	struct mx_ksigaction ka = {
		.handler = (void *)on_sigsys,
		.flags = SA_SIGINFO | MX_SA_RESTORER,
		.restorer = (uint64_t)(uintptr_t)(ok_restorers + 16 * SIGSYS),
		.mask = ~0ull,
	};
	if (rs4(SYS_rt_sigaction, SIGSYS, &ka, 0, 8) != 0)
		fail("cannot install the SIGSYS handler", 0);
	uint64_t unblock = SIGSYS_BIT;
	rs4(SYS_rt_sigprocmask, SIG_UNBLOCK, &unblock, 0, 8);
	struct mx_ok_entry *p = claim();
	if (!p)
		fail("no free entry", 0);
	p->seq = 0;
	become_app(p, 0);
}

/* The shared area, for tools and tests (null when not offloaded). */
EXPORT void *mantle_offload_area(void)
{
	return area;
}

typedef int (*main_fn)(int, char **, char **);
static main_fn real_main;

static int offload_main(int argc, char **argv, char **envp)
{
	const char *native = getenv("MANTLE_OFFLOAD_NATIVE");
	if (!native || !*native || strcmp(native, "0") == 0)
		setup();
	return real_main(argc, argv, envp);
}

typedef int (*start_fn)(main_fn, int, char **, void (*)(void), void (*)(void), void (*)(void),
			void *);

EXPORT int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void),
			     void (*fini)(void), void (*rtld_fini)(void), void *stack_end)
{
	start_fn real = (start_fn)dlsym(RTLD_NEXT, "__libc_start_main");
	if (!real)
		fail("no __libc_start_main to call (not glibc?)", 0);
	real_main = main;
	return real(offload_main, argc, argv, init, fini, rtld_fini, stack_end);
}
