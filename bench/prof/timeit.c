/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* timeit OUT CMD...: runs CMD, writes its wall time in ns to OUT, exits
 * with its status. The benchmark measures the workload itself, not the
 * profiler's start-up or the writing of its session. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

int main(int argc, char **argv)
{
	struct timespec a, b;
	int st;
	pid_t p;
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
	waitpid(p, &st, 0);
	clock_gettime(CLOCK_MONOTONIC, &b);
	f = fopen(argv[1], "w");
	if (f) {
		fprintf(f, "%lld\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
		fclose(f);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
