/* Offload test program: threads, fork, signals, an interrupted blocking
 * call. Deterministic output (compared with a native run). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t got_usr1, got_alrm;
static void on_usr1(int s) { (void)s; got_usr1++; }
static void on_alrm(int s) { (void)s; got_alrm++; }

static void *worker(void *arg)
{
	long n = (long)arg, sum = 0;
	char path[64];
	snprintf(path, sizeof path, "/proc/self/task/%d/stat", gettid());
	FILE *f = fopen(path, "r"); /* a thread's own file: made by its pair */
	if (f)
		fclose(f);
	for (long i = 0; i <= n * 1000; i++)
		sum += i;
	return (void *)sum;
}

int main(void)
{
	setvbuf(stdout, 0, _IONBF, 0);
	pthread_t t[4];
	for (long i = 0; i < 4; i++)
		pthread_create(&t[i], 0, worker, (void *)(i + 1));
	for (int i = 0; i < 4; i++) {
		void *r;
		pthread_join(t[i], &r);
		printf("thread %d sum %ld\n", i, (long)r);
	}
	/* fork: the child has a pair of its own, its own pid */
	int pfd[2];
	if (pipe(pfd) != 0)
		return 1;
	pid_t c = fork();
	if (c == 0) {
		char b[64];
		int n = snprintf(b, sizeof b, "child pid ok %d\n", getpid() != getppid());
		write(pfd[1], b, n);
		_exit(7);
	}
	char b[64] = {0};
	read(pfd[0], b, sizeof b - 1);
	int st;
	waitpid(c, &st, 0);
	printf("%sfork exit %d\n", b, WEXITSTATUS(st));
	/* a thread in the child of a fork */
	c = fork();
	if (c == 0) {
		pthread_t x;
		void *r;
		pthread_create(&x, 0, worker, (void *)3L);
		pthread_join(x, &r);
		printf("thread in child sum %ld\n", (long)r);
		exit(0);
	}
	waitpid(c, &st, 0);
	/* signals: a handler runs; raise and kill reach this thread */
	signal(SIGUSR1, on_usr1);
	raise(SIGUSR1);
	kill(getpid(), SIGUSR1);
	printf("usr1 %d\n", (int)got_usr1);
	/* a blocking read interrupted by an alarm (no SA_RESTART): EINTR */
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alrm;
	sigaction(SIGALRM, &sa, 0);
	int q[2];
	pipe(q);
	alarm(1);
	char x;
	ssize_t r = read(q[0], &x, 1);
	printf("read %zd errno %s alrm %d\n", r, r < 0 ? strerror(errno) : "-", (int)got_alrm);
	/* with SA_RESTART the read goes on: a child writes after the alarm */
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, 0);
	c = fork();
	if (c == 0) {
		usleep(1500000);
		write(q[1], "z", 1);
		_exit(0);
	}
	alarm(1);
	r = read(q[0], &x, 1);
	printf("restarted read %zd %c alrm %d\n", r, r == 1 ? x : '?', (int)got_alrm);
	waitpid(c, &st, 0);
	/* sigsuspend, sigprocmask */
	sigset_t m, old;
	sigemptyset(&m);
	sigaddset(&m, SIGUSR1);
	sigprocmask(SIG_BLOCK, &m, &old);
	kill(getpid(), SIGUSR1);
	printf("blocked usr1 %d\n", (int)got_usr1);
	sigsuspend(&old);
	printf("after sigsuspend usr1 %d\n", (int)got_usr1);
	return 3;
}
