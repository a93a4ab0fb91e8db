// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// bench/executive/ptrace_interpose.c: the paper's comparison for Table 1,
// "interposition using POSIX ptrace": a minimal tracer that runs a command
// under PTRACE_SYSCALL and, at every system-call stop, fetches the
// registers with PTRACE_GETREGS to identify the call (both stops: entry
// and exit), then lets it continue. Nothing else: no decoding, no output
// on the path. It is the cheapest honest ptrace interposer, the floor of
// what a ptrace-based executive (UML's, gVisor's ptrace platform) pays.
//
//   ptrace_interpose [-o ONEWAY_FILE] -- COMMAND [ARGS...]
//
// Children, threads and exec of the command stay traced (TRACEFORK,
// TRACEVFORK, TRACECLONE, TRACEEXEC); the tracer exits with the command's
// exit status (128+signal when killed), and kills the tracees if it dies
// (PTRACE_O_EXITKILL).
//
// One-way trap (-o): the guest (guest.c, mode getppid) puts its
// CLOCK_MONOTONIC start time of each call in rdi, which getppid ignores;
// at the getppid entry stop the tracer reads its own clock right after
// waitpid returns, and now - rdi is the time from the guest's "I am about
// to trap" to "the tracer runs with the call in hand". Those per-call ns
// (uint32, after a text header line "ptrace_interpose oneway n=N") are
// written to ONEWAY_FILE when the command has exited.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint32_t *oneway;
static size_t n_oneway, cap_oneway;

static inline uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void record(uint64_t d)
{
	if (n_oneway == cap_oneway) {
		size_t cap = cap_oneway ? cap_oneway * 2 : 1 << 16;
		uint32_t *p = realloc(oneway, cap * sizeof *p);
		if (!p)
			return; // drop samples rather than disturb the guest
		oneway = p;
		cap_oneway = cap;
	}
	oneway[n_oneway++] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

// Tracees whose start-up SIGSTOP has been seen: a new tracee's first
// SIGSTOP is that stop, which must be swallowed, not delivered.
#define MAXT 1024
static pid_t known[MAXT];
static int n_known;

static int is_known(pid_t t)
{
	for (int i = 0; i < n_known; i++)
		if (known[i] == t)
			return 1;
	return 0;
}

static void add_known(pid_t t)
{
	if (n_known < MAXT && !is_known(t))
		known[n_known++] = t;
}

static void forget(pid_t t)
{
	for (int i = 0; i < n_known; i++)
		if (known[i] == t) {
			known[i] = known[--n_known];
			return;
		}
}

int main(int argc, char **argv)
{
	const char *oneway_file = NULL;
	int opt;
	while ((opt = getopt(argc, argv, "+o:")) != -1) {
		if (opt == 'o')
			oneway_file = optarg;
		else
			return 2;
	}
	if (optind >= argc) {
		fprintf(stderr, "usage: ptrace_interpose [-o ONEWAY_FILE] -- COMMAND [ARGS...]\n");
		return 2;
	}
	char **cmd = argv + optind;

	pid_t child = fork();
	if (child < 0) {
		perror("ptrace_interpose: fork");
		return 2;
	}
	if (child == 0) {
		if (ptrace(PTRACE_TRACEME, 0, 0, 0) != 0) {
			perror("ptrace_interpose: PTRACE_TRACEME");
			_exit(126);
		}
		raise(SIGSTOP);
		execvp(cmd[0], cmd);
		fprintf(stderr, "ptrace_interpose: exec %s: %s\n", cmd[0], strerror(errno));
		_exit(127);
	}

	int st;
	if (waitpid(child, &st, 0) != child || !WIFSTOPPED(st)) {
		fprintf(stderr, "ptrace_interpose: the child did not stop\n");
		return 2;
	}
	long opts = PTRACE_O_TRACESYSGOOD | PTRACE_O_EXITKILL | PTRACE_O_TRACEFORK |
		    PTRACE_O_TRACEVFORK | PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXEC;
	if (ptrace(PTRACE_SETOPTIONS, child, 0, opts) != 0) {
		perror("ptrace_interpose: PTRACE_SETOPTIONS");
		return 2;
	}
	add_known(child);
	ptrace(PTRACE_SYSCALL, child, 0, 0);

	int exit_code = 0;
	unsigned long n_getppid = 0;
	for (;;) {
		pid_t t = waitpid(-1, &st, __WALL);
		if (t < 0) {
			if (errno == EINTR)
				continue;
			break; // ECHILD: every tracee is gone
		}
		uint64_t woke = now_ns();
		if (WIFEXITED(st) || WIFSIGNALED(st)) {
			if (t == child)
				exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
			forget(t);
			continue;
		}
		if (!WIFSTOPPED(st))
			continue;
		int sig = WSTOPSIG(st);
		int inject = 0;
		if (sig == (SIGTRAP | 0x80)) {
			// A system-call stop, entry or exit: identify the call.
			struct user_regs_struct regs;
			if (ptrace(PTRACE_GETREGS, t, 0, &regs) == 0 &&
			    regs.orig_rax == SYS_getppid &&
			    (long)regs.rax == -ENOSYS) { // entry
				n_getppid++;
				uint64_t t0 = regs.rdi;
				if (oneway_file && t0 && t0 <= woke && woke - t0 < 10000000000ull)
					record(woke - t0);
			}
		} else if (sig == SIGTRAP && (st >> 16) != 0) {
			// A ptrace event (fork, clone, exec): nothing to deliver.
		} else if (sig == SIGSTOP && !is_known(t)) {
			// A new tracee's start-up stop (it may come before or
			// after its parent's fork/clone event): swallow it.
			add_known(t);
		} else {
			inject = sig; // a real signal for the tracee
		}
		ptrace(PTRACE_SYSCALL, t, 0, (void *)(long)inject);
	}

	if (oneway_file) {
		FILE *f = fopen(oneway_file, "w");
		if (!f) {
			perror(oneway_file);
			return 2;
		}
		fprintf(f, "ptrace_interpose oneway n=%zu getppid=%lu\n", n_oneway, n_getppid);
		fwrite(oneway, sizeof *oneway, n_oneway, f);
		if (fclose(f) != 0) {
			perror(oneway_file);
			return 2;
		}
	}
	return exit_code;
}
