/*
 * The known-call-structure program of bench/prof and of the profiler's
 * stack tests: main -> a -> b and main -> c -> b, every function spinning
 * a known number of iterations of the same loop, so the truth is:
 *
 *   self:      a 10%   b (from a) 40%   c 20%   b (from c) 30%
 *   inclusive: main 100%   a 50%   c 50%   b 70%
 *
 * (plus the few instructions of the calls themselves). Built with
 * -O1 -fno-omit-frame-pointer -fno-inline so that every frame is there.
 *
 * Usage: callgraph [ROUNDS]   (default 2000; one round ~ 1 ms here)
 * With -DWITH_LIB it also calls lib_work() of striplib.c (a stripped
 * library) for 1/5 of each round, after the rest.
 */
#include <stdlib.h>

#define UNIT 300000 /* iterations per tenth of a round */

__attribute__((noinline)) static void spin(long n)
{
	volatile long x = 0;

	for (long i = 0; i < n; i++)
		x += i;
}

__attribute__((noinline)) void b(long tenths)
{
	spin(tenths * UNIT);
}

__attribute__((noinline)) void a(void)
{
	spin(1 * UNIT);
	b(4);
}

__attribute__((noinline)) void c(void)
{
	spin(2 * UNIT);
	b(3);
}

#ifdef WITH_LIB
void lib_work(long n);
#endif

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 2000;

	for (long r = 0; r < rounds; r++) {
		a();
		c();
#ifdef WITH_LIB
		lib_work(2 * UNIT);
#endif
	}
	return 0;
}
