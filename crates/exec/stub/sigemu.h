/* Signal calls emulated in a SIGSYS handler under Syscall User Dispatch,
 * shared by the fast path's stub (stub.c) and the application kernel's
 * library (crates/offload/lib/offload.c): both trap every call of the
 * program into a handler that runs with every signal blocked, and both
 * own SIGSYS.
 *
 * - rt_sigprocmask works on the interrupted context's mask (the handler's
 *   own is all-blocked and is replaced by it at sigreturn). SIGSYS is
 *   never blocked: a dispatched call with SIGSYS blocked kills the
 *   process (nor SIGKILL, SIGSTOP, as the kernel would refuse).
 * - rt_sigaction on SIGSYS changes nothing and reports the default (the
 *   library's handler stays); any other handler is installed with SIGSYS
 *   removed from its mask (its own calls trap) and, if it has a restorer,
 *   the includer's restorer instead (one in the excluded range: glibc's
 *   __restore_rt would trap on its rt_sigreturn).
 *
 * No libc: system calls go through the includer's `sc`. */
#ifndef MANTLE_SIGEMU_H
#define MANTLE_SIGEMU_H
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/syscall.h>

#define MX_SA_RESTORER 0x04000000
#define MX_SIGSYS_BIT (1ull << (SIGSYS - 1))

/* struct kernel_sigaction for rt_sigaction on x86-64 */
struct mx_ksigaction {
	void *handler;
	unsigned long flags;
	uint64_t restorer;
	uint64_t mask;
};

typedef long (*mx_sigemu_sc)(long nr, long a, long b, long c, long d, long e, long f);

/* rt_sigprocmask(a[0] how, a[1] set, a[2] oldset, a[3] size) on *mask. */
static inline long mx_emu_sigprocmask(uint64_t *mask, const uint64_t a[6])
{
	uint64_t old = *mask, set = 0;
	if (a[3] != 8)
		return -EINVAL;
	if (a[1])
		set = *(const uint64_t *)(uintptr_t)a[1];
	if (a[2])
		*(uint64_t *)(uintptr_t)a[2] = old;
	if (a[1]) {
		if (a[0] == SIG_BLOCK)
			*mask = old | set;
		else if (a[0] == SIG_UNBLOCK)
			*mask = old & ~set;
		else if (a[0] == SIG_SETMASK)
			*mask = set;
		else
			return -EINVAL;
		*mask &= ~(MX_SIGSYS_BIT | (1ull << (SIGKILL - 1)) | (1ull << (SIGSTOP - 1)));
	}
	return 0;
}

/* rt_sigaction(a[0] sig, a[1] act, a[2] oldact, a[3] size); restorer: the
 * one a handler with SA_RESTORER returns through (0: keep the program's). */
static inline long mx_emu_sigaction(const uint64_t a[6], uint64_t restorer, mx_sigemu_sc sc)
{
	if (a[0] == SIGSYS) { /* ours: not changed; reported as default */
		if (a[2])
			for (int i = 0; i < 4; i++)
				((volatile uint64_t *)(uintptr_t)a[2])[i] = 0;
		return 0;
	}
	if (!a[1] || a[3] != 8)
		return sc(SYS_rt_sigaction, (long)a[0], (long)a[1], (long)a[2], (long)a[3], 0, 0);
	struct mx_ksigaction k = *(const struct mx_ksigaction *)(uintptr_t)a[1];
	k.mask &= ~MX_SIGSYS_BIT;
	if ((k.flags & MX_SA_RESTORER) && restorer)
		k.restorer = restorer;
	return sc(SYS_rt_sigaction, (long)a[0], (long)&k, (long)a[2], 8, 0, 0);
}

#endif
