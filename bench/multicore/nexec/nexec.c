// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// bench/multicore/nexec's guest (Paper II, section 3.4): loops CALLS
// times over ITERS iterations of user work, then one system call the
// executive interposes (getppid, made raw so that no libc cache answers
// it). The user work is a fixed number of iterations, not a time, so that
// a guest sharing its CPU does the same work however it is scheduled.
//
//   nexec ITERS CALLS        the loop; prints "START_NS END_NS" (its
//                            CLOCK_MONOTONIC first and last instants)
//   nexec --calibrate ITERS  prints the ns one iteration takes here
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

static void work(uint64_t iters)
{
	uint64_t x = sink + 1;
	for (uint64_t i = 0; i < iters; i++)
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	sink = x;
}

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--calibrate") == 0) {
		uint64_t n = strtoull(argv[2], NULL, 10);
		uint64_t best = UINT64_MAX;
		for (int r = 0; r < 20; r++) { // the fastest of 20: least disturbed
			uint64_t t0 = now_ns();
			work(n);
			uint64_t d = now_ns() - t0;
			if (d < best)
				best = d;
		}
		printf("%.6f\n", (double)best / (double)n);
		return 0;
	}
	if (argc != 3) {
		fprintf(stderr, "usage: nexec ITERS CALLS | nexec --calibrate ITERS\n");
		return 2;
	}
	uint64_t iters = strtoull(argv[1], NULL, 10);
	uint64_t calls = strtoull(argv[2], NULL, 10);
	uint64_t t0 = now_ns();
	for (uint64_t c = 0; c < calls; c++) {
		work(iters);
		syscall(SYS_getppid);
	}
	uint64_t t1 = now_ns();
	printf("%llu %llu\n", (unsigned long long)t0, (unsigned long long)t1);
	return 0;
}
