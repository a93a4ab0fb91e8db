/* A round-trip timer guest: calls getppid (or the call numbered argv[2])
 * argv[1] times (after 1000
 * unmeasured calls), timing each with CLOCK_MONOTONIC (vDSO, no system
 * call), and prints "n=N mean=.. median=.. p99=.. max=.. ppid=.." in ns. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int cmp(const void *a, const void *b)
{
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}

/* through libc's wrappers (`mov $nr,%eax; syscall`: a site the stub can
 * rewrite), not syscall(2) */
static long call(long nr)
{
	if (nr == SYS_getppid)
		return getppid();
	if (nr == SYS_getpid)
		return getpid();
	return syscall(nr);
}

static long now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000L + t.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000, r = 0;
	long nr = argc > 2 ? atol(argv[2]) : SYS_getppid;
	long *d = malloc(sizeof *d * (size_t)n);
	if (!d || n < 1)
		return 2;
	for (int i = 0; i < 1000; i++)
		r = call(nr);
	double sum = 0;
	for (long i = 0; i < n; i++) {
		long t0 = now();
		r = call(nr);
		d[i] = now() - t0;
		sum += (double)d[i];
	}
	qsort(d, (size_t)n, sizeof *d, cmp);
	printf("n=%ld mean=%.0f median=%ld p99=%ld max=%ld ppid=%ld\n", n, sum / (double)n,
	       d[n / 2], d[n * 99 / 100], d[n - 1], r);
	return 0;
}
