/* bench/multicore/getpid.c: N getpid system calls (raw: glibc does not
 * cache getpid), after a warm-up; prints nanoseconds per call. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;
	for (int i = 0; i < 2000; i++)
		syscall(SYS_getpid);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		syscall(SYS_getpid);
	clock_gettime(CLOCK_MONOTONIC, &b);
	double ns = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n;
	printf("%.1f\n", ns);
	return 0;
}
