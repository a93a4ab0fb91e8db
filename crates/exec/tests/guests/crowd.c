/* A fast-path test guest with many threads or processes alive at once,
 * each making calls an agent may want (openat, getppid, read, close):
 *
 *   crowd threads N M PATH   N threads, all started before any begins
 *                            (a barrier), each opens PATH, reads a byte and
 *                            closes it M times, then waits until all are
 *                            done (so all are alive, with their slots, at
 *                            once); prints "threads N failed F"
 *   crowd forks N PATH       N children, all alive at once (each blocks
 *                            reading a pipe until every one is forked),
 *                            each opens PATH once and exits 0 if that
 *                            worked; prints "forks N ok K"
 *
 * Exit status 0 only if every call and every child succeeded. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *path;
static long rounds;
static pthread_barrier_t start, end;

static int one_open(void)
{
	char c;
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return 1;
	int bad = read(fd, &c, 1) != 1;
	return close(fd) != 0 || bad;
}

static void *worker(void *arg)
{
	long failed = 0;
	(void)arg;
	pthread_barrier_wait(&start);
	for (long i = 0; i < rounds; i++) {
		failed += one_open();
		if (syscall(SYS_getppid) < 0)
			failed++;
	}
	pthread_barrier_wait(&end);
	return (void *)failed;
}

static int threads(int n)
{
	pthread_t *t = calloc((size_t)n, sizeof *t);
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, 64 * 1024);
	pthread_barrier_init(&start, 0, (unsigned)n);
	pthread_barrier_init(&end, 0, (unsigned)n);
	for (int i = 0; i < n; i++) {
		int e = pthread_create(&t[i], &a, worker, 0);
		if (e) {
			fprintf(stderr, "crowd: thread %d: %s\n", i, strerror(e));
			return 3;
		}
	}
	long failed = 0;
	for (int i = 0; i < n; i++) {
		void *r;
		pthread_join(t[i], &r);
		failed += (long)r;
	}
	printf("threads %d failed %ld\n", n, failed);
	return failed != 0;
}

static int forks(int n)
{
	int p[2];
	if (pipe(p))
		return 3;
	for (int i = 0; i < n; i++) {
		pid_t c = fork();
		if (c < 0) {
			fprintf(stderr, "crowd: fork %d: %s\n", i, strerror(errno));
			return 3;
		}
		if (c == 0) {
			char b;
			close(p[1]);
			/* alive until the parent has forked every child */
			while (read(p[0], &b, 1) < 0 && errno == EINTR)
				;
			_exit(one_open());
		}
	}
	close(p[1]);
	int ok = 0, st;
	pid_t w;
	while ((w = wait(&st)) > 0 || (w < 0 && errno == EINTR))
		if (w > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
			ok++;
	printf("forks %d ok %d\n", n, ok);
	return ok != n;
}

int main(int argc, char **argv)
{
	if (argc >= 5 && !strcmp(argv[1], "threads")) {
		path = argv[4];
		rounds = atol(argv[3]);
		return threads(atoi(argv[2]));
	}
	if (argc >= 4 && !strcmp(argv[1], "forks")) {
		path = argv[3];
		return forks(atoi(argv[2]));
	}
	fprintf(stderr, "usage: crowd threads N M PATH | crowd forks N PATH\n");
	return 2;
}
