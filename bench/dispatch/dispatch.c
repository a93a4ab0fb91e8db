// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// bench/dispatch/dispatch.c: how should mantle's executive decide which
// guest runs (issue 11, "Dispatch")? This measures the candidate
// mechanisms of the issue on one CPU (the paper's "virtual processor"),
// side by side, with the same guests and the same executive loop:
//
//   prio     the dispatched guest at SCHED_FIFO 1 (below the executive's
//            SCHED_FIFO 99), every other guest at SCHED_IDLE: one
//            sched_setattr for the guest leaving, one for the guest coming
//   nice     the same with the dispatched guest at SCHED_OTHER nice -20
//            instead of SCHED_FIFO 1: it shares the CPU with other normal
//            tasks by weight, but never starves them (no real-time
//            throttling, see below), the others at SCHED_IDLE
//   freeze   every guest in a cgroup v2 of its own; the executive writes
//            "1" to the leaving guest's cgroup.freeze and "0" to the
//            coming guest's (guests at SCHED_OTHER)
//   stop     SIGSTOP to the leaving guest, SIGCONT to the coming one
//            (guests at SCHED_OTHER; visible to their parents through
//            waitpid(WUNTRACED), and to a shell's job control)
//
// Guests: NGUESTS CPU-bound processes that stamp CLOCK_MONOTONIC into
// shared memory in a loop, each in its own slot. The executive (this
// process, SCHED_FIFO 99, pinned with the guests to CPU) does, ROUNDS
// times: sleep until the quantum's end (clock_nanosleep absolute: its
// wake-up lateness is the "preemption at quantum end" figure), switch to
// the next guest by the mechanism (decision time d taken just before the
// first system call), then read, at the next quantum's end, the coming
// guest's first stamp after d: dispatch latency = first stamp - d (the
// time until the chosen guest really runs). A run where the leaving
// guest stamped after the switch completed counts as a leak (it kept
// running: the mechanism did not take the CPU from it).
//
//   dispatch MECH [-c CPU] [-n ROUNDS] [-q QUANTUM_US] [-g NGUESTS] [-o FILE]
//
// Output: a header line, then per round "latency_ns lateness_ns leak"
// (text). Needs root (SCHED_FIFO, SCHED_IDLE changes of other processes,
// cgroups).
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXG 8

struct sched_attr_ {
	uint32_t size, policy;
	uint64_t flags;
	int32_t nice;
	uint32_t prio;
	uint64_t runtime, deadline, period;
};

struct slot {
	volatile uint64_t stamp; // last CLOCK_MONOTONIC ns seen running
	volatile uint64_t first_after; // first stamp >= arm, written by the guest
	volatile uint64_t arm;
	char pad[64 - 24];
};

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void die(const char *w)
{
	fprintf(stderr, "dispatch: %s: %s\n", w, strerror(errno));
	exit(2);
}

static int set_sched(pid_t pid, uint32_t policy, uint32_t prio)
{
	struct sched_attr_ a = {.size = sizeof a, .policy = policy, .prio = prio};
	if (policy == SCHED_OTHER && prio) // nice -20 (prio: 1 = raised)
		a.prio = 0, a.nice = -20;
	return (int)syscall(SYS_sched_setattr, pid, &a, 0);
}

static void write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, s, strlen(s)) != (ssize_t)strlen(s))
		die(path);
	close(fd);
}

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof set, &set) != 0)
		die("sched_setaffinity");
}

static void guest(struct slot *s)
{
	for (;;) {
		uint64_t t = now_ns();
		s->stamp = t;
		if (s->arm && !s->first_after && t >= s->arm)
			s->first_after = t;
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: dispatch prio|nice|freeze|stop [-c CPU] [-n ROUNDS] [-q QUANTUM_US] [-g NGUESTS] [-o FILE]\n");
		return 2;
	}
	const char *mech = argv[1];
	int cpu = 0, rounds = 2000, q_us = 1000, ng = 2, opt;
	const char *out = NULL;
	optind = 2;
	while ((opt = getopt(argc, argv, "c:n:q:g:o:")) != -1) {
		switch (opt) {
		case 'c': cpu = atoi(optarg); break;
		case 'n': rounds = atoi(optarg); break;
		case 'q': q_us = atoi(optarg); break;
		case 'g': ng = atoi(optarg); break;
		case 'o': out = optarg; break;
		default: return 2;
		}
	}
	if (ng < 2 || ng > MAXG || rounds < 1 || q_us < 50)
		return 2;
	int m = !strcmp(mech, "prio") ? 0 : !strcmp(mech, "freeze") ? 1 : !strcmp(mech, "stop") ? 2
		: !strcmp(mech, "nice") ? 3 : -1;
	if (m < 0)
		return 2;
	pin(cpu);
	struct slot *slots = mmap(0, sizeof(struct slot) * MAXG, PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (slots == MAP_FAILED)
		die("mmap");
	memset(slots, 0, sizeof(struct slot) * MAXG);

	char cg[MAXG][128];
	const char *root = getenv("CGROUP2");
	if (!root)
		root = "/sys/fs/cgroup/unified";
	pid_t pids[MAXG];
	if (set_sched(0, SCHED_FIFO, 99) != 0)
		die("SCHED_FIFO 99 for the executive");
	for (int i = 0; i < ng; i++) {
		if (m == 1) {
			snprintf(cg[i], sizeof cg[i], "%s/mantle-dispatch.%d.%d", root, getpid(), i);
			if (mkdir(cg[i], 0700) != 0)
				die(cg[i]);
		}
		pids[i] = fork();
		if (pids[i] < 0)
			die("fork");
		if (pids[i] == 0) {
			set_sched(0, SCHED_OTHER, 0);
			guest(&slots[i]);
		}
		if (m == 1) {
			char p[160], v[32];
			snprintf(p, sizeof p, "%s/cgroup.procs", cg[i]);
			snprintf(v, sizeof v, "%d", pids[i]);
			write_file(p, v);
		}
	}
	// every guest but 0 parked
	for (int i = 0; i < ng; i++) {
		int run = i == 0;
		if (m == 0 || m == 3)
			set_sched(pids[i], run ? (m ? SCHED_OTHER : SCHED_FIFO) : SCHED_IDLE, run ? 1 : 0);
		else if (m == 1) {
			char p[160];
			snprintf(p, sizeof p, "%s/cgroup.freeze", cg[i]);
			write_file(p, run ? "0" : "1");
		} else
			kill(pids[i], run ? SIGCONT : SIGSTOP);
	}
	uint64_t *lat = calloc((size_t)rounds, 8), *late = calloc((size_t)rounds, 8);
	int *leak = calloc((size_t)rounds, sizeof(int));
	int cur = 0;
	uint64_t q = (uint64_t)q_us * 1000, next = now_ns() + q;
	int freeze_fd[MAXG];
	if (m == 1)
		for (int i = 0; i < ng; i++) {
			char p[160];
			snprintf(p, sizeof p, "%s/cgroup.freeze", cg[i]);
			freeze_fd[i] = open(p, O_WRONLY | O_CLOEXEC);
			if (freeze_fd[i] < 0)
				die(p);
		}
	for (int r = -10; r < rounds; r++) {
		struct timespec ts = {.tv_sec = (time_t)(next / 1000000000ull),
				      .tv_nsec = (long)(next % 1000000000ull)};
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, 0) == EINTR)
			;
		uint64_t woke = now_ns();
		int nx = (cur + 1) % ng;
		// the last round's result: the coming guest's first stamp after d
		slots[nx].first_after = 0;
		uint64_t d = now_ns();
		slots[nx].arm = d;
		if (m == 0 || m == 3) {
			set_sched(pids[cur], SCHED_IDLE, 0);
			set_sched(pids[nx], m ? SCHED_OTHER : SCHED_FIFO, 1);
		} else if (m == 1) {
			if (write(freeze_fd[cur], "1", 1) != 1 || write(freeze_fd[nx], "0", 1) != 1)
				die("cgroup.freeze");
		} else {
			kill(pids[cur], SIGSTOP);
			kill(pids[nx], SIGCONT);
		}
		uint64_t done = now_ns();
		next += q;
		// sleep to the next quantum's end, then read what happened
		struct timespec ts2 = {.tv_sec = (time_t)(next / 1000000000ull),
				       .tv_nsec = (long)(next % 1000000000ull)};
		(void)ts2;
		int leaving = cur;
		cur = nx;
		if (r >= 0) {
			late[r] = woke - (next - q);
			// wait (sleeping) for the coming guest's first stamp; at most a quantum
			uint64_t until = next;
			struct timespec nap = {0, 20000};
			while (!slots[nx].first_after && now_ns() < until)
				nanosleep(&nap, 0);
			lat[r] = slots[nx].first_after ? slots[nx].first_after - d : UINT64_MAX;
			leak[r] = slots[leaving].stamp > done + 20000; // ran 20 us after the switch
		}
	}
	for (int i = 0; i < ng; i++) {
		kill(pids[i], SIGKILL);
		if (m == 2)
			kill(pids[i], SIGCONT);
		waitpid(pids[i], 0, 0);
		if (m == 1)
			rmdir(cg[i]);
	}
	FILE *f = out ? fopen(out, "w") : stdout;
	if (!f)
		die(out);
	fprintf(f, "# dispatch %s cpu=%d rounds=%d quantum_us=%d guests=%d\n", mech, cpu, rounds, q_us, ng);
	for (int r = 0; r < rounds; r++)
		fprintf(f, "%llu %llu %d\n", (unsigned long long)lat[r], (unsigned long long)late[r], leak[r]);
	if (f != stdout)
		fclose(f);
	return 0;
}
