// Exceptions thrown through 10 instrumented levels (issue 35): levels
// with destructors (cleanups: the unwinder stops, runs them and resumes),
// a level that catches and rethrows, a catch in the middle, and a
// function that returns normally after catching (its own frame and its
// callers' stay instrumented). The counted functions are extern "C", so
// the test finds them by name; each counts its calls.
#include "count.h"
#include <stdlib.h>

COUNTER(level); COUNTER(guard_hit); COUNTER(rethrower); COUNTER(catcher); COUNTER(main);

volatile int dtors;
extern "C" __attribute__((noinline)) void guard_hit(volatile int *p)
{
	CNT(guard_hit);
	++*p;
}

struct Guard {
	volatile int *p;
	__attribute__((noinline)) ~Guard() { guard_hit(p); }
};

extern "C" __attribute__((noinline)) long level(int n, int throw_at)
{
	CNT(level);
	Guard g{&dtors};
	if (n == throw_at)
		throw n;
	if (n == 10)
		return n;
	long r = level(n + 1, throw_at);
	return r + n;
}

extern "C" __attribute__((noinline)) long rethrower(int throw_at)
{
	CNT(rethrower);
	try {
		return level(1, throw_at);
	} catch (int e) {
		if (e % 2)
			throw;
		return -e;
	}
}

extern "C" __attribute__((noinline)) long catcher(int throw_at)
{
	CNT(catcher);
	try {
		return rethrower(throw_at);
	} catch (int e) {
		return 1000 + e;
	}
}

int main(int argc, char **argv)
{
	CNT(main);
	int iters = argc > 1 ? atoi(argv[1]) : 100;
	long s = 0;
	for (int i = 0; i < iters; i++)
		s += catcher(i % 12); // 0 and 11: no throw
	printf("%ld %d\n", s, dtors);
	REPORT(level); REPORT(guard_hit); REPORT(rethrower); REPORT(catcher); REPORT(main);
	return 0;
}
