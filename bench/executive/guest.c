// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// bench/executive/guest.c: the measured program of the Table 1 benchmark.
// An ordinary, unmodified-looking Linux program: it is what runs under
// strace, ptrace_interpose and `mantle run`, and it times itself.
//
//   guest MODE [-n N] [-w WARMUP] [-c CPU] [-p PEER_CPU] [-o FILE]
//
// Modes (each timed call is bracketed by two clock_gettime(CLOCK_MONOTONIC)
// reads, vDSO, no system call; their own cost is the `null` mode):
//   getppid  one getppid system call per timed op, issued as the literal
//            instruction pair `mov $110,%eax; syscall` (the site shape a
//            binary rewriter recognises), with the op's start timestamp in
//            rdi: getppid ignores its arguments, so an interposer can read
//            it and time the one-way trap (ptrace_interpose does).
//            The returned value is checked against the PPid field of
//            /proc/self/stat (read without getppid): an interposer that
//            performs the call on the guest's behalf must return the
//            guest's parent, not its own. Mismatches are counted.
//   pipe     a 1-byte round trip to a child over a pair of pipes (the
//            paper's "RPC between two processes using UNIX pipes"); the
//            child is pinned to PEER_CPU when -p is given (-p -2: allowed
//            on every CPU, not the guest's inherited pin).
//   ggrpc    a 1-byte round trip to another guest through the executive
//            (the paper's "RPC between two Hijack guests"): an RPC call to
//            server 0 (the first guest of the `mantle run --system` file)
//            that answers with the same byte. Raw syscall() with the numbers
//            of include/mantle/exec.h (what libmantle's mantle_rpc_call
//            does, without linking it).
//   ggrpcd   the server of ggrpc: receives and answers WARMUP + N requests
//            (the same -n and -w as its client), one MANTLE_RPC_REPLY_RECV
//            trap per request (reply to the last, wait for the next), then
//            exits; no output.
//   null     nothing between the two timestamps: the timer's floor.
//   sigsys   as getppid, but the guest first installs a seccomp filter
//            that traps getppid (SECCOMP_RET_TRAP) and a SIGSYS handler
//            that answers with the parent's pid: the in-guest trap alone,
//            the floor under a fast path's trap (no executive round trip).
//   inproc   as getppid, but made out of line: a call through a function
//            pointer to a function that saves the registers a rewritten
//            call site must keep and makes the call: the floor under the
//            fast path with site rewriting (a site's jump to an in-process
//            handler instead of a trap), with nothing observed.
//
// -c CPU pins this process (sched_setaffinity) before anything else.
// WARMUP untimed ops (default N/10) precede the N timed ones (default 20000).
// Output: FILE (or stdout when -o is absent or "-") gets a text header line
//   "guest MODE n=N warmup=W cpu=C peer=P ppid_ok=K ppid_bad=B ret=R"
// followed by N native-endian uint32 values, each one op's ns (saturated at
// 2^32-1). The file is written after the timed loop, so its system calls
// are never timed.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <ucontext.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../include/mantle/exec.h"

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// getppid with a payload in rdi; the instruction pair a rewriter looks for.
static inline long getppid_tagged(uint64_t tag)
{
	long ret;
	__asm__ volatile("mov $110, %%eax\n\tsyscall"
			 : "=a"(ret)
			 : "D"(tag)
			 : "rcx", "r11", "memory");
	return ret;
}

// The in-process handler of `inproc`: what a rewritten site jumps to at
// least does (step over the red zone, keep the caller's flags and
// registers, make the call).
__attribute__((noinline)) static long inproc_getppid(uint64_t tag)
{
	long ret;
	__asm__ volatile("lea -128(%%rsp),%%rsp\n\tpushfq\n\tpush %%rdi\n\tpush %%rsi\n\tpush %%rdx\n\tpush %%r10\n\t"
			 "push %%r8\n\tpush %%r9\n\t"
			 "mov $110, %%eax\n\tsyscall\n\t"
			 "pop %%r9\n\tpop %%r8\n\tpop %%r10\n\tpop %%rdx\n\tpop %%rsi\n\tpop %%rdi\n\tpopfq\n\tlea 128(%%rsp),%%rsp"
			 : "=a"(ret)
			 : "D"(tag)
			 : "rcx", "r11", "memory");
	return ret;
}
static long (*volatile inproc_fn)(uint64_t) = inproc_getppid;

static void die(const char *what)
{
	fprintf(stderr, "guest: %s: %s\n", what, strerror(errno));
	exit(2);
}

// pin(-2): every online CPU (undo an inherited pin: the "free" condition).
static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	if (cpu == -2) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		for (long c = 0; c < n && c < CPU_SETSIZE; c++)
			CPU_SET(c, &set);
	} else {
		CPU_SET(cpu, &set);
	}
	if (sched_setaffinity(0, sizeof set, &set) != 0)
		die("sched_setaffinity");
}

// PPid from /proc/self/stat, without a getppid system call.
static long proc_ppid(void)
{
	char buf[512];
	int fd = open("/proc/self/stat", O_RDONLY);
	if (fd < 0)
		die("open /proc/self/stat");
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		die("read /proc/self/stat");
	buf[n] = 0;
	// pid (comm) state ppid ...; comm may hold spaces and ')'.
	char *p = strrchr(buf, ')');
	if (!p)
		return -1;
	char st;
	long ppid;
	if (sscanf(p + 1, " %c %ld", &st, &ppid) != 2)
		return -1;
	return ppid;
}

static volatile long sigsys_answer;

static void on_sigsys(int sig, siginfo_t *si, void *ctx)
{
	(void)sig;
	ucontext_t *uc = ctx;
	if (si->si_syscall == SYS_getppid)
		uc->uc_mcontext.gregs[REG_RAX] = sigsys_answer;
	else
		uc->uc_mcontext.gregs[REG_RAX] = -ENOSYS;
}

// Trap getppid in this process: SECCOMP_RET_TRAP, answered by on_sigsys.
static void trap_getppid(long answer)
{
	sigsys_answer = answer;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_sigsys;
	sa.sa_flags = SA_SIGINFO;
	if (sigaction(SIGSYS, &sa, NULL) != 0)
		die("sigaction SIGSYS");
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getppid, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		die("PR_SET_NO_NEW_PRIVS");
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
		die("seccomp");
}

static void full_write(int fd, const void *b, size_t n)
{
	const char *p = b;
	while (n > 0) {
		ssize_t k = write(fd, p, n);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			die("write");
		}
		p += k;
		n -= (size_t)k;
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: guest getppid|sigsys|inproc|pipe|ggrpc|ggrpcd|null [-n N] [-w WARMUP] [-c CPU] [-p PEER_CPU] [-o FILE]\n");
		return 2;
	}
	const char *mode = argv[1];
	long n = 20000, warm = -1;
	int cpu = -1, peer = -1;
	const char *out = NULL;
	int opt;
	optind = 2;
	while ((opt = getopt(argc, argv, "n:w:c:p:o:")) != -1) {
		switch (opt) {
		case 'n': n = atol(optarg); break;
		case 'w': warm = atol(optarg); break;
		case 'c': cpu = atoi(optarg); break;
		case 'p': peer = atoi(optarg); break;
		case 'o': out = optarg; break;
		default: return 2;
		}
	}
	if (n <= 0)
		n = 1;
	if (warm < 0)
		warm = n / 10;
	if (cpu >= 0)
		pin(cpu);
	uint32_t *ns = calloc((size_t)n, sizeof *ns);
	if (!ns)
		die("calloc");
	// Touch the array now so no page fault lands in a timed op.
	memset(ns, 1, (size_t)n * sizeof *ns);

	long ok = 0, bad = 0, lastret = 0;
	int sigsys = strcmp(mode, "sigsys") == 0, inproc = strcmp(mode, "inproc") == 0;
	if (strcmp(mode, "getppid") == 0 || sigsys || inproc) {
		long want = proc_ppid();
		if (sigsys)
			trap_getppid(want);
		for (long i = 0; i < warm; i++)
			lastret = inproc ? inproc_fn(now_ns()) : getppid_tagged(now_ns());
		for (long i = 0; i < n; i++) {
			uint64_t t0 = now_ns();
			long r = inproc ? inproc_fn(t0) : getppid_tagged(t0);
			uint64_t t1 = now_ns();
			uint64_t d = t1 - t0;
			ns[i] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
			if (r == want)
				ok++;
			else
				bad++, lastret = r;
		}
		if (!bad)
			lastret = want;
	} else if (strcmp(mode, "null") == 0) {
		for (long i = 0; i < warm; i++)
			(void)now_ns();
		for (long i = 0; i < n; i++) {
			uint64_t t0 = now_ns();
			uint64_t t1 = now_ns();
			ns[i] = (uint32_t)(t1 - t0);
		}
	} else if (strcmp(mode, "pipe") == 0) {
		int to[2], from[2];
		if (pipe(to) || pipe(from))
			die("pipe");
		pid_t child = fork();
		if (child < 0)
			die("fork");
		if (child == 0) {
			if (peer >= 0 || peer == -2)
				pin(peer);
			close(to[1]);
			close(from[0]);
			char c;
			for (;;) {
				ssize_t k = read(to[0], &c, 1);
				if (k == 1) {
					if (write(from[1], &c, 1) != 1)
						_exit(3);
				} else if (k == 0 || errno != EINTR) {
					_exit(0);
				}
			}
		}
		close(to[0]);
		close(from[1]);
		char c = 'x';
		for (long i = -warm; i < n; i++) {
			uint64_t t0 = now_ns();
			if (write(to[1], &c, 1) != 1)
				die("pipe write");
			if (read(from[0], &c, 1) != 1)
				die("pipe read");
			uint64_t t1 = now_ns();
			if (i >= 0) {
				uint64_t d = t1 - t0;
				ns[i] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
			}
		}
		close(to[1]);
		close(from[0]);
		int st;
		waitpid(child, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "guest: pipe peer failed (status %#x)\n", st);
			return 2;
		}
	} else if (strcmp(mode, "ggrpc") == 0) {
		char c = 'x', r = 0;
		for (long i = -warm; i < n; i++) {
			uint64_t t0 = now_ns();
			long k = syscall(MANTLE_SYS_EXEC, MANTLE_RPC_CALL, 0L, &c, 1L, &r, 1L);
			uint64_t t1 = now_ns();
			if (k != 1 || r != c) {
				fprintf(stderr, "guest: ggrpc call %ld: %ld (errno %d)\n", i, k,
					k < 0 ? errno : 0);
				return 2;
			}
			c = (char)(c == 'x' ? 'y' : 'x');
			if (i >= 0) {
				uint64_t d = t1 - t0;
				ns[i] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
			}
		}
	} else if (strcmp(mode, "ggrpcd") == 0) {
		// one trap per request: reply to the last, receive the next
		char c = 0;
		long tok = 0;
		for (long i = -warm; i < n; i++) {
			long k = syscall(MANTLE_SYS_EXEC, MANTLE_RPC_REPLY_RECV, tok, &c,
					 tok ? 1L : 0L, &c, 1L);
			if (k < 0) {
				fprintf(stderr, "guest: ggrpcd reply/receive: errno %d\n", errno);
				return 2;
			}
			tok = k >> MANTLE_RPC_LEN_BITS;
		}
		if (syscall(MANTLE_SYS_EXEC, MANTLE_RPC_REPLY, tok, &c, 1L) != 0) {
			fprintf(stderr, "guest: ggrpcd reply: errno %d\n", errno);
			return 2;
		}
		return 0;
	} else {
		fprintf(stderr, "guest: unknown mode %s\n", mode);
		return 2;
	}

	int fd = 1;
	if (out && strcmp(out, "-") != 0) {
		fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0)
			die(out);
	}
	char hdr[256];
	int hl = snprintf(hdr, sizeof hdr,
			  "guest %s n=%ld warmup=%ld cpu=%d peer=%d ppid_ok=%ld ppid_bad=%ld ret=%ld\n",
			  mode, n, warm, cpu, peer, ok, bad, lastret);
	full_write(fd, hdr, (size_t)hl);
	full_write(fd, ns, (size_t)n * sizeof *ns);
	if (fd != 1 && close(fd) != 0)
		die("close");
	return 0;
}
