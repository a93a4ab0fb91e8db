/* libmantle-stub.so: the guest half of mantle's fast interposition path.
 *
 * What: preloaded (LD_PRELOAD) into a dynamically linked guest, it sends
 * the system calls the executive wants through a per-thread slot of
 * memory shared with the executive, and waits for the answer.
 *
 * Mechanism:
 * - The constructor maps the region from the fd in MANTLE_FAST_FD (kept
 *   open, without close-on-exec, so that an exec'd image that loads the
 *   stub again maps the same region), installs a SIGSYS handler and a
 *   seccomp filter: calls whose number is set in the header's `wanted`
 *   bitmap return SECCOMP_RET_TRAP (a SIGSYS), every other call, and every
 *   call made from the stub's own syscall instruction (its address is in
 *   the filter), is allowed. seccomp filters are inherited by threads and
 *   children and kept across exec, so no thread escapes.
 * - The SIGSYS handler claims a slot for its thread (CAS of tid 0 -> tid;
 *   a slot whose owner is dead is taken over), writes the call, sets the
 *   state to REQUEST, rings the executive's doorbell (FUTEX_WAKE only if
 *   it sleeps), spins `spin` iterations, then FUTEX_WAITs on the slot's
 *   state. The answer is a value (put in rax) or CONTINUE: the stub makes
 *   the (possibly changed) call itself from the exempt instruction and
 *   reports the result (state DONE), so the executive's `after` hooks see
 *   real results.
 *
 * Invariants:
 * - In the handler: no libc, only raw system calls through mx_sc6 (the
 *   exempt instruction); all signals are blocked while it runs (sa_mask),
 *   so a slot has at most one call in flight.
 * - clone, clone3, fork, vfork and rt_sigreturn are never trapped (a
 *   thread created inside the handler would return onto the handler's
 *   stack; rt_sigreturn is how the handler returns).
 * - The executive gone (exec_pid does not exist) while a call waits: the
 *   guest kills itself (fail closed: never silently unsupervised).
 * - Cooperative: the guest can write anything in the region or jump to the
 *   exempt instruction; the executive validates every slot, and security
 *   decisions belong on the protected path.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "fast.h"

#define HIDDEN __attribute__((visibility("hidden")))

/* mx_sc_tmpl(nr, a0..a5): a raw system call, position-independent code.
 * It is not called where it lies: the constructor copies it to the fixed
 * page hdr->tramp (the same address in every image of the guest, so the
 * filter installed by the first image still exempts it after exec), and
 * mx_sc6 calls that copy. The filter allows calls whose instruction
 * pointer is the address after its `syscall`. */
extern char mx_sc_tmpl[] HIDDEN, mx_sc_tmpl_ret[] HIDDEN, mx_sc_tmpl_end[] HIDDEN;
typedef long (*sc6_fn)(long, long, long, long, long, long, long);
static sc6_fn mx_sc6;
__asm__(".text\n"
	".globl mx_sc_tmpl\n"
	".hidden mx_sc_tmpl\n"
	"mx_sc_tmpl:\n"
	"\tmov %rdi,%rax\n"
	"\tmov %rsi,%rdi\n"
	"\tmov %rdx,%rsi\n"
	"\tmov %rcx,%rdx\n"
	"\tmov %r8,%r10\n"
	"\tmov %r9,%r8\n"
	"\tmov 8(%rsp),%r9\n"
	"\tsyscall\n"
	".globl mx_sc_tmpl_ret\n"
	".hidden mx_sc_tmpl_ret\n"
	"mx_sc_tmpl_ret:\n"
	"\tret\n"
	".globl mx_sc_tmpl_end\n"
	".hidden mx_sc_tmpl_end\n"
	"mx_sc_tmpl_end:\n");

#define sc0(n) mx_sc6((n), 0, 0, 0, 0, 0, 0)
#define sc1(n, a) mx_sc6((n), (long)(a), 0, 0, 0, 0, 0)
#define sc2(n, a, b) mx_sc6((n), (long)(a), (long)(b), 0, 0, 0, 0)
#define sc4(n, a, b, c, d) mx_sc6((n), (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)

static struct mx_fast_hdr *hdr;
static struct mx_fast_slot *slots;
static uint32_t nslots;

#define TLS __thread __attribute__((tls_model("initial-exec")))
static TLS struct mx_fast_slot *my_slot;
static TLS uint32_t my_tid;

static inline uint64_t rdtsc(void)
{
	uint32_t lo, hi;
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return ((uint64_t)hi << 32) | lo;
}

static inline uint32_t ld32(uint32_t *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static inline void st32(uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }

static void die(void)
{
	sc2(SYS_kill, sc0(SYS_getpid), SIGKILL);
	sc1(SYS_exit_group, 127);
}

/* The calling thread's slot, claimed at its first trap. A cached slot is
 * re-checked against the tid (a vfork child shares the parent's TLS). */
static struct mx_fast_slot *claim(uint32_t tid)
{
	uint32_t i;
	for (i = 0; i < nslots; i++)
		if (ld32(&slots[i].tid) == tid)
			goto got;
	for (i = 0; i < nslots; i++) {
		uint32_t zero = 0;
		if (__atomic_compare_exchange_n(&slots[i].tid, &zero, tid, 0, __ATOMIC_SEQ_CST,
						__ATOMIC_SEQ_CST))
			goto got;
	}
	/* full: take over the slot of a thread that no longer exists */
	for (i = 0; i < nslots; i++) {
		uint32_t old = ld32(&slots[i].tid);
		if (old && sc2(SYS_kill, old, 0) == -ESRCH &&
		    __atomic_compare_exchange_n(&slots[i].tid, &old, tid, 0, __ATOMIC_SEQ_CST,
						__ATOMIC_SEQ_CST))
			goto got;
	}
	return 0;
got:
	slots[i].base = (uint64_t)(uintptr_t)hdr;
	if (ld32(&slots[i].state) == MX_ST_FREE)
		st32(&slots[i].state, MX_ST_IDLE);
	my_slot = &slots[i];
	my_tid = tid;
	return my_slot;
}

static long forward(struct mx_fast_slot *s, uint32_t tid, uint32_t nr, const uint64_t a[6],
		    uint64_t ip)
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
	if (ld32(&hdr->exec_sleeping))
		sc4(SYS_futex, &hdr->doorbell, FUTEX_WAKE, 1, 0);

	uint32_t spin = ld32(&hdr->spin), n = 0;
	while ((st = ld32(&s->state)) == MX_ST_REQUEST && n < spin) {
		__builtin_ia32_pause();
		n++;
	}
	while (st == MX_ST_REQUEST) {
		struct timespec ts = {1, 0};
		st32(&s->waiting, 1);
		long r = sc4(SYS_futex, &s->state, FUTEX_WAIT, MX_ST_REQUEST, &ts);
		st32(&s->waiting, 0);
		st = ld32(&s->state);
		if (r == -ETIMEDOUT && st == MX_ST_REQUEST &&
		    sc2(SYS_kill, ld32(&hdr->exec_pid), 0) == -ESRCH)
			die();
	}
	s->spins = n;
	if (st != MX_ST_ANSWER || ld32(&s->tid) != tid)
		return -EIO; /* the region was corrupted under us */
	if (!(s->flags & MX_ANS_CONTINUE)) {
		long r = s->result;
		st32(&s->state, MX_ST_IDLE);
		return r;
	}
	long r = mx_sc6(s->nr, s->args[0], s->args[1], s->args[2], s->args[3], s->args[4],
			s->args[5]);
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
		sc4(SYS_futex, &hdr->doorbell, FUTEX_WAKE, 1, 0);
	}
	return r;
}

static void on_sigsys(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t *uc = ucv;
	greg_t *g = uc->uc_mcontext.gregs;
	(void)sig;
	if (si->si_code != 1 /* SYS_SECCOMP */)
		return;
	uint32_t nr = (uint32_t)si->si_syscall;
	uint64_t a[6] = {g[REG_RDI], g[REG_RSI], g[REG_RDX], g[REG_R10], g[REG_R8], g[REG_R9]};
	uint32_t tid = (uint32_t)sc0(SYS_gettid);
	struct mx_fast_slot *s = my_slot;
	if (!s || my_tid != tid || ld32(&s->tid) != tid)
		s = claim(tid);
	long r;
	if (!s) {
		__atomic_fetch_add(&hdr->overflow, 1, __ATOMIC_SEQ_CST);
		r = -EAGAIN;
	} else {
		r = forward(s, tid, nr, a, (uint64_t)(uintptr_t)si->si_call_addr);
	}
	g[REG_RAX] = r;
}

/* A classic BPF program: allow the stub's instruction, trap wanted calls. */
static int install_filter(void)
{
	static struct sock_filter f[8 + 2 * MX_FAST_NR_MAX + 1];
	unsigned n = 0;
	uint64_t ret = hdr->tramp + (uint64_t)(mx_sc_tmpl_ret - mx_sc_tmpl);
#define S(code, k) (f[n++] = (struct sock_filter)BPF_STMT((code), (k)))
#define J(code, k, jt, jf) (f[n++] = (struct sock_filter)BPF_JUMP((code), (k), (jt), (jf)))
	S(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
	J(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
	S(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	S(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, instruction_pointer) + 4);
	J(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)(ret >> 32), 0, 3);
	S(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, instruction_pointer));
	J(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)ret, 0, 1);
	S(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	S(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
	for (uint32_t nr = 0; nr < MX_FAST_NR_MAX; nr++) {
		if (!(hdr->wanted[nr / 64] >> (nr % 64) & 1))
			continue;
		switch (nr) {
		case SYS_clone: case SYS_clone3: case SYS_fork: case SYS_vfork:
		case SYS_rt_sigreturn:
			continue;
		}
		J(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1);
		S(BPF_RET | BPF_K, SECCOMP_RET_TRAP);
	}
	S(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
#undef S
#undef J
	struct sock_fprog prog = {.len = (unsigned short)n, .filter = f};
	if (sc2(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1) != 0)
		return -1;
	return mx_sc6(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC,
		      (long)&prog, 0, 0, 0) == 0 ? 0 : -1;
}

static void fail(const char *msg)
{
	static const char p[] = "mantle-stub: ";
	(void)!write(2, p, sizeof p - 1);
	(void)!write(2, msg, strlen(msg));
	(void)!write(2, "\n", 1);
	_exit(127);
}

__attribute__((constructor)) static void mx_stub_init(void)
{
	const char *e = getenv("MANTLE_FAST_FD");
	if (!e || !*e)
		return;
	char *end;
	long fd = strtol(e, &end, 10);
	if (*end || fd < 0)
		fail("MANTLE_FAST_FD is not a file descriptor");
	struct mx_fast_hdr *h = mmap(0, MX_FAST_HDR_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		fail("cannot map MANTLE_FAST_FD");
	uint64_t size = h->region_size;
	uint32_t n = h->nslots;
	if (h->magic != MX_FAST_MAGIC || h->version != MX_FAST_VERSION || n == 0 ||
	    n > MX_FAST_MAX_SLOTS || h->slot_size != MX_FAST_SLOT_SIZE ||
	    size < MX_FAST_HDR_SIZE + (uint64_t)n * MX_FAST_SLOT_SIZE || size > (1u << 30))
		fail("MANTLE_FAST_FD is not a fast-path region of this version");
	munmap(h, MX_FAST_HDR_SIZE);
	void *m = mmap(0, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		fail("cannot map the fast-path region");
	hdr = m;
	/* the exempt syscall page, at the executive's fixed address */
	uint64_t t = hdr->tramp;
	void *tp = mmap((void *)(uintptr_t)t, 4096, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (tp == MAP_FAILED || (uint64_t)(uintptr_t)tp != t || (t & 4095))
		fail("cannot map the syscall page at its fixed address");
	memcpy(tp, mx_sc_tmpl, (size_t)(mx_sc_tmpl_end - mx_sc_tmpl));
	if (mprotect(tp, 4096, PROT_READ | PROT_EXEC) != 0)
		fail("cannot make the syscall page executable");
	mx_sc6 = (sc6_fn)tp;
	slots = (struct mx_fast_slot *)((char *)m + MX_FAST_HDR_SIZE);
	nslots = n;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_sigsys;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigfillset(&sa.sa_mask);
	if (sigaction(SIGSYS, &sa, 0) != 0)
		fail("cannot install the SIGSYS handler");
	if (install_filter() != 0)
		fail("cannot install the seccomp filter");
}
