/* The runtime's defaults (issue 35): what an instrumented program costs
 * and records with no hook set, how its trace ends at the limit, and how
 * deep instrumented calls may nest.
 *   defaults depth      prints the runtime's open frames inside a call
 *   defaults loop N     calls leaf N times
 *   defaults deep N     recursion N deep on this thread
 *   defaults tdeep N    recursion N deep on a thread with a 1 GiB stack */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint32_t mantle_instr_depth(void) __attribute__((weak));
volatile long sink;

__attribute__((noinline)) int leaf(int x)
{
	sink += x;
	return x + 1;
}

__attribute__((noinline)) unsigned depth_here(void)
{
	return mantle_instr_depth ? mantle_instr_depth() : 0;
}

/* Not a tail call, so every level keeps its frame. */
__attribute__((noinline)) long deep(long n)
{
	if (n == 0)
		return 0;
	long r = deep(n - 1);
	sink += r;
	return r + 1;
}

static void *tdeep(void *arg)
{
	long n = (long)arg;
	return (void *)deep(n);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	long n = argc > 2 ? atol(argv[2]) : 0;
	if (!strcmp(argv[1], "depth")) {
		printf("depth %u\n", depth_here());
	} else if (!strcmp(argv[1], "loop")) {
		for (long i = 0; i < n; i++)
			leaf((int)i);
		printf("loop %ld\n", n);
	} else if (!strcmp(argv[1], "deep")) {
		printf("deep %ld\n", deep(n));
	} else if (!strcmp(argv[1], "tdeep")) {
		pthread_attr_t a;
		pthread_t t;
		void *r;
		pthread_attr_init(&a);
		if (pthread_attr_setstacksize(&a, (size_t)1 << 30))
			return 3;
		if (pthread_create(&t, &a, tdeep, (void *)n))
			return 3;
		pthread_join(t, &r);
		printf("deep %ld\n", (long)r);
	} else {
		return 2;
	}
	return 0;
}
