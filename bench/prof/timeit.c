/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* timeit OUT CMD...: runs CMD, writes "WALL_NS CPU_NS" to OUT (CPU: user +
 * system time of CMD and its waited-for children), exits with its status.
 * The benchmark measures the workload itself, not the profiler's start-up
 * or the writing of its session. With CONFIG_IRQ_TIME_ACCOUNTING off (our
 * kernels), the sampling interrupts are charged to the interrupted task, so
 * the CPU time includes the profiler's in-kernel cost while being much less
 * sensitive than wall time to other load on the machine. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <sys/resource.h>

int main(int argc, char **argv)
{
	struct timespec a, b;
	int st;
	pid_t p;
	struct rusage ru;
	FILE *f;

	if (argc < 3) {
		fprintf(stderr, "usage: timeit OUT CMD...\n");
		return 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &a);
	p = fork();
	if (p == 0) {
		execvp(argv[2], argv + 2);
		_exit(127);
	}
	wait4(p, &st, 0, &ru);
	clock_gettime(CLOCK_MONOTONIC, &b);
	f = fopen(argv[1], "w");
	if (f) {
		fprintf(f, "%lld %lld\n",
			(long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec),
			(long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
				(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL);
		fclose(f);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
