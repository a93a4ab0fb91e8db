// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// bench/sleep/alarm.c: the measured program of Hijack's Figure 5. It asks
// for SIGALRM every PERIOD_US microseconds with setitimer(ITIMER_REAL)
// (old value not asked for), stamps CLOCK_MONOTONIC in the handler, waits
// in pause(), and writes the COUNT inter-arrival times in ns, one per line,
// after WARMUP (default 3) signals. A plain Linux program: it runs as is,
// under chrt, and as a guest of `mantle run --timers`.
//
//   alarm PERIOD_US COUNT [WARMUP]
//
// `alarm once SECONDS` asks alarm(SECONDS) instead, waits for the signal
// in pause() and writes the time it took in ns, and what alarm returned.
//
//   alarm once SECONDS
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t *stamps;
static volatile long got, want;

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void on_alarm(int sig)
{
	(void)sig;
	if (got < want)
		stamps[got++] = now_ns();
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "once")) {
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_alarm;
		sigaction(SIGALRM, &sa, 0);
		want = 1;
		stamps = calloc(1, sizeof *stamps);
		uint64_t t0 = now_ns();
		unsigned r = alarm((unsigned)atoi(argv[2]));
		while (!got)
			pause();
		printf("%llu %u\n", (unsigned long long)(stamps[0] - t0), r);
		return 0;
	}
	if (argc < 3) {
		fprintf(stderr, "usage: alarm PERIOD_US COUNT [WARMUP]\n");
		return 2;
	}
	long period = atol(argv[1]), n = atol(argv[2]), warm = argc > 3 ? atol(argv[3]) : 3;
	if (period < 1 || n < 1 || warm < 0)
		return 2;
	want = warm + n + 1;
	stamps = calloc((size_t)want, sizeof *stamps);
	if (!stamps)
		return 2;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, 0);
	struct itimerval it = {.it_interval = {period / 1000000, period % 1000000},
			       .it_value = {period / 1000000, period % 1000000}};
	if (setitimer(ITIMER_REAL, &it, 0) != 0) {
		perror("setitimer");
		return 1;
	}
	while (got < want)
		pause();
	struct itimerval off = {0};
	setitimer(ITIMER_REAL, &off, 0);
	for (long i = warm + 1; i < want; i++)
		printf("%llu\n", (unsigned long long)(stamps[i] - stamps[i - 1]));
	return 0;
}
