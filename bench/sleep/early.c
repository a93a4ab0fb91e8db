// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// bench/sleep/early.c: checks that no sleep returns before its time. It
// makes COUNT sleeps of about REQ_NS each and, after every one that
// returns 0, reads the same clock again and compares:
//
//   abs  clock_nanosleep(CLOCK, TIMER_ABSTIME, now + REQ_NS): the clock
//        read after the return must be >= the requested absolute time
//   rel  clock_nanosleep(CLOCK, 0, REQ_NS) (nanosleep for CLOCK "nano"):
//        the clock read after the return minus the clock read before the
//        call must be >= REQ_NS
//
// The requested time varies by up to +25% of REQ_NS (so that it does not
// stay in phase with the timer tick). A sleep interrupted by a signal
// (EINTR) is not early; none is expected here (no handler is installed).
// Prints one line: "sleeps N early E worst_early_ns W eintr I min_late_ns L
// median_late_ns M" and exits 1 if any sleep was early or failed, 0
// otherwise. A plain Linux program: it runs as is and as a guest.
//
//   early abs|rel realtime|monotonic|boottime|tai|nano REQ_NS COUNT
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef CLOCK_TAI
#define CLOCK_TAI 11
#endif

static int64_t ns_of(const struct timespec *t)
{
	return (int64_t)t->tv_sec * 1000000000ll + t->tv_nsec;
}

static struct timespec ts_of(int64_t ns)
{
	struct timespec t = {.tv_sec = (time_t)(ns / 1000000000ll), .tv_nsec = (long)(ns % 1000000000ll)};
	return t;
}

static int cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: early abs|rel realtime|monotonic|boottime|tai|nano REQ_NS COUNT\n");
		return 2;
	}
	int abs = !strcmp(argv[1], "abs");
	if (!abs && strcmp(argv[1], "rel"))
		return 2;
	clockid_t clock;
	int nano = 0;
	if (!strcmp(argv[2], "realtime"))
		clock = CLOCK_REALTIME;
	else if (!strcmp(argv[2], "monotonic"))
		clock = CLOCK_MONOTONIC;
	else if (!strcmp(argv[2], "boottime"))
		clock = CLOCK_BOOTTIME;
	else if (!strcmp(argv[2], "tai"))
		clock = CLOCK_TAI;
	else if (!strcmp(argv[2], "nano") && !abs)
		clock = CLOCK_MONOTONIC, nano = 1;
	else
		return 2;
	int64_t req = atoll(argv[3]);
	long n = atol(argv[4]);
	if (req < 1 || n < 1)
		return 2;
	int64_t *late = calloc((size_t)n, sizeof *late);
	if (!late)
		return 2;
	long early = 0, eintr = 0, done = 0;
	int64_t worst = 0;
	uint64_t x = 88172645463325252ull ^ (uint64_t)getpid();
	for (long i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift: the variation */
		int64_t want = req + (int64_t)(x % (uint64_t)(req / 4 + 1));
		struct timespec t0, t1, r;
		clock_gettime(clock, &t0);
		int64_t until = abs ? ns_of(&t0) + want : want;
		r = ts_of(until);
		int e;
		if (nano)
			e = nanosleep(&r, 0) == 0 ? 0 : errno;
		else
			e = clock_nanosleep(clock, abs ? TIMER_ABSTIME : 0, &r, 0);
		clock_gettime(clock, &t1);
		if (e == EINTR) {
			eintr++;
			continue;
		}
		if (e != 0) {
			fprintf(stderr, "early: sleep %ld: %s\n", i, strerror(e));
			return 1;
		}
		int64_t got = abs ? ns_of(&t1) - until : ns_of(&t1) - ns_of(&t0) - want;
		if (got < 0) {
			early++;
			if (-got > worst)
				worst = -got;
			if (early <= 10)
				fprintf(stderr, "early: sleep %ld of %lld ns (%s %s) returned %lld ns early\n", i,
					(long long)want, argv[1], argv[2], (long long)-got);
		}
		late[done++] = got;
	}
	qsort(late, (size_t)done, sizeof *late, cmp);
	printf("sleeps %ld early %ld worst_early_ns %lld eintr %ld min_late_ns %lld median_late_ns %lld\n", done,
	       early, (long long)worst, eintr, done ? (long long)late[0] : 0ll,
	       done ? (long long)late[done / 2] : 0ll);
	return early ? 1 : 0;
}
