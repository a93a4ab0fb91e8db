// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// bench/dispatch/duty.c: a periodic spinner, competing load for the
// dispatch loop (loop-sched.sh): spins BUSY_US of every PERIOD_US (an
// absolute-time sleep between bursts) until killed. Run under chrt -f N
// it is other real-time work on the guests' CPU.
//
//   duty BUSY_US PERIOD_US
#include <stdlib.h>
#include <time.h>

static long long ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	long long busy = atoll(argv[1]) * 1000, period = atoll(argv[2]) * 1000;
	if (busy <= 0 || period <= busy)
		return 2;
	long long next = ns();
	for (;;) {
		while (ns() < next + busy)
			;
		next += period;
		struct timespec t = { next / 1000000000LL, next % 1000000000LL };
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, 0);
	}
}
