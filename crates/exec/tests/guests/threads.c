/* A fast-path test guest: argv[2] threads each call getppid argv[3] times
 * and check the answer argv[1]; the main thread calls it once more. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

static long want, n;
static void *run(void *arg)
{
	(void)arg;
	for (long i = 0; i < n; i++)
		if (syscall(SYS_getppid) != want)
			return (void *)1;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4)
		return 2;
	want = atol(argv[1]);
	int k = atoi(argv[2]);
	n = atol(argv[3]);
	pthread_t t[64];
	if (k > 64)
		return 2;
	for (int i = 0; i < k; i++)
		if (pthread_create(&t[i], 0, run, 0))
			return 3;
	int bad = 0;
	for (int i = 0; i < k; i++) {
		void *r;
		pthread_join(t[i], &r);
		bad |= r != 0;
	}
	if (syscall(SYS_getppid) != want)
		bad = 1;
	if (bad)
		fprintf(stderr, "a thread saw a wrong getppid\n");
	return bad;
}
