// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// bench/sleep/early.c: checks that no sleep returns before its time. It
// makes COUNT sleeps of about REQ_NS each and, after every one that
// returns 0, reads the same clock again and compares:
//
//   abs  clock_nanosleep(CLOCK, TIMER_ABSTIME, now + REQ_NS): the clock
//        read after the return must be >= the requested absolute time
//   rel  clock_nanosleep(CLOCK, 0, REQ_NS) (the nanosleep system call for
//        CLOCK "nano", on CLOCK_MONOTONIC):
//        the clock read after the return minus the clock read before the
//        call must be >= REQ_NS
//
// The requested time varies by up to +25% of REQ_NS (so that it does not
// stay in phase with the timer tick). A sleep interrupted by a signal
// (EINTR) is not early; none is expected here (no handler is installed).
// THREADS threads (default 1) share the COUNT sleeps, so that several
// sleeps are held at once. Prints one line: "sleeps N early E
// worst_early_ns W eintr I min_late_ns L median_late_ns M" and exits 1 if
// any sleep was early or failed, 0 otherwise. A plain Linux program: it runs as is and as a guest.
//
// `early clocks` tries clock_nanosleep on every clock id (0..15, a CPU
// clock of this process, advanced by a spinning thread, and of this
// thread, -1) relative and absolute
// (1 us ahead, on that clock where it can be read) and prints one line
// per try: the id, the flags, what it returned, and "early" if it
// returned 0 before its time. Its output as a guest must be the same as
// native (the executive holds some, the kernel does the rest).
//
//   early abs|rel realtime|monotonic|boottime|tai|nano REQ_NS COUNT [THREADS]
//   early clocks
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
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

static volatile int stop;

/* the process's CPU clock advances only while one of its threads runs */
static void *spin(void *a)
{
	(void)a;
	while (!stop)
		;
	return 0;
}

static int clocks(void)
{
	pthread_t spinner;
	if (pthread_create(&spinner, 0, spin, 0))
		return 2;
	clockid_t ids[20];
	int n = 0, bad = 0;
	for (int c = 0; c < 16; c++)
		ids[n++] = c;
	clock_getcpuclockid(getpid(), &ids[n++]);
	pthread_getcpuclockid(pthread_self(), &ids[n++]);
	ids[n++] = -1;
	for (int k = 0; k < n; k++) {
		for (int abs = 0; abs < 2; abs++) {
			struct timespec now, t1, r = {0, 1000};
			int readable = clock_gettime(ids[k], &now) == 0;
			if (abs)
				r = readable ? ts_of(ns_of(&now) + 1000) : (struct timespec){0, 0};
			int e = clock_nanosleep(ids[k], abs ? TIMER_ABSTIME : 0, &r, 0);
			int early = 0;
			if (e == 0 && readable && clock_gettime(ids[k], &t1) == 0)
				early = abs ? ns_of(&t1) < ns_of(&r) : ns_of(&t1) - ns_of(&now) < 1000;
			bad |= early;
			/* the CPU clocks' ids depend on the pid: named */
			const char *name = k == 16 ? "process-cpu" : k == 17 ? "thread-cpu" : 0;
			if (name)
				printf("clock %s", name);
			else
				printf("clock %d", (int)ids[k]);
			printf(" %s: %s%s\n",
			       abs ? "abs" : "rel", e ? strerror(e) : "0", early ? " early" : "");
		}
	}
	stop = 1;
	pthread_join(spinner, 0);
	return bad;
}

/* one thread's share of the sleeps */
struct run {
	int abs, nano;
	clockid_t clock;
	int64_t req;
	long n, early, eintr, done, failed;
	int64_t worst, *late;
	uint64_t seed;
	const char *how;
};

static void *sleeps(void *a)
{
	struct run *w = a;
	uint64_t x = w->seed;
	for (long i = 0; i < w->n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift: the variation */
		int64_t want = w->req + (int64_t)(x % (uint64_t)(w->req / 4 + 1));
		struct timespec t0, t1, r;
		clock_gettime(w->clock, &t0);
		int64_t until = w->abs ? ns_of(&t0) + want : want;
		r = ts_of(until);
		int e;
		if (w->nano) /* the nanosleep call itself (glibc's makes clock_nanosleep) */
			e = syscall(SYS_nanosleep, &r, 0) == 0 ? 0 : errno;
		else
			e = clock_nanosleep(w->clock, w->abs ? TIMER_ABSTIME : 0, &r, 0);
		clock_gettime(w->clock, &t1);
		if (e == EINTR) {
			w->eintr++;
			continue;
		}
		if (e != 0) {
			fprintf(stderr, "early: sleep %ld: %s\n", i, strerror(e));
			w->failed++;
			return 0;
		}
		int64_t got = w->abs ? ns_of(&t1) - until : ns_of(&t1) - ns_of(&t0) - want;
		if (got < 0) {
			w->early++;
			if (-got > w->worst)
				w->worst = -got;
			if (w->early <= 10)
				fprintf(stderr, "early: sleep %ld of %lld ns (%s) returned %lld ns early\n", i,
					(long long)want, w->how, (long long)-got);
		}
		w->late[w->done++] = got;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "clocks"))
		return clocks();
	if (argc < 5) {
		fprintf(stderr, "usage: early abs|rel realtime|monotonic|boottime|tai|nano REQ_NS COUNT [THREADS]\n");
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
	long n = atol(argv[4]), nt = argc > 5 ? atol(argv[5]) : 1;
	if (req < 1 || n < 1 || nt < 1 || nt > 64)
		return 2;
	int64_t *late = calloc((size_t)n, sizeof *late);
	struct run *w = calloc((size_t)nt, sizeof *w);
	pthread_t *th = calloc((size_t)nt, sizeof *th);
	if (!late || !w || !th)
		return 2;
	char how[64];
	snprintf(how, sizeof how, "%s %s", argv[1], argv[2]);
	for (long k = 0, off = 0; k < nt; k++) {
		w[k] = (struct run){.abs = abs, .nano = nano, .clock = clock, .req = req,
				    .n = n / nt + (k < n % nt), .late = late + off, .how = how,
				    .seed = 88172645463325252ull ^ ((uint64_t)getpid() << 8) ^ (uint64_t)k};
		off += w[k].n;
		if (k && pthread_create(&th[k], 0, sleeps, &w[k]))
			return 2;
	}
	sleeps(&w[0]);
	long early = 0, eintr = 0, done = 0, failed = 0;
	int64_t worst = 0;
	for (long k = 0; k < nt; k++) {
		if (k)
			pthread_join(th[k], 0);
		/* each thread's results, moved together */
		memmove(late + done, w[k].late, (size_t)w[k].done * sizeof *late);
		early += w[k].early, eintr += w[k].eintr, done += w[k].done, failed += w[k].failed;
		if (w[k].worst > worst)
			worst = w[k].worst;
	}
	qsort(late, (size_t)done, sizeof *late, cmp);
	printf("sleeps %ld early %ld worst_early_ns %lld eintr %ld min_late_ns %lld median_late_ns %lld\n", done,
	       early, (long long)worst, eintr, done ? (long long)late[0] : 0ll,
	       done ? (long long)late[done / 2] : 0ll);
	return early || failed ? 1 : 0;
}
