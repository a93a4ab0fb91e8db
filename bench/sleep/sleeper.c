// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// bench/sleep/sleeper.c: the measured program of Hijack's Figure 6 (and a
// plain Linux program: it runs as is, under chrt, and as a guest of
// `mantle run --sleep`). It asks nanosleep(REQ_NS) COUNT times and writes
// each sleep's jitter, actual - requested in ns (CLOCK_MONOTONIC around
// the call), one per line, to stdout. WARMUP (default 3) sleeps first are
// not written.
//
//   sleeper REQ_NS COUNT [WARMUP]
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: sleeper REQ_NS COUNT [WARMUP]\n");
		return 2;
	}
	long long req = atoll(argv[1]);
	long n = atol(argv[2]), warm = argc > 3 ? atol(argv[3]) : 3;
	if (req < 0 || n < 1 || warm < 0)
		return 2;
	struct timespec r = {.tv_sec = (time_t)(req / 1000000000), .tv_nsec = (long)(req % 1000000000)};
	for (long i = -warm; i < n; i++) {
		uint64_t t0 = now_ns();
		if (nanosleep(&r, 0) != 0) {
			perror("nanosleep");
			return 1;
		}
		int64_t j = (int64_t)(now_ns() - t0) - req;
		if (i >= 0)
			printf("%lld\n", (long long)j);
	}
	return 0;
}
