/* bench/multicore/handoff.c: the floor under an offloaded call, measured
 * side by side with it: a round trip between two threads of one process
 * on two CPUs, the hand-off the application kernel makes per call.
 *
 *   handoff MODE CLIENT_CPU SERVER_CPU [N]
 *
 * The client writes a request word and waits for the answer; the server
 * waits for the request, (with `getpid` modes) makes a getpid, and
 * answers. Modes:
 *   spin         both sides spin on the shared word (pause loop)
 *   spin-getpid  the same, the server makes a getpid per request
 *   futex        both sides sleep in FUTEX_WAIT, woken by FUTEX_WAKE
 * Prints nanoseconds per round trip (N of them after 2000 unmeasured). */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile uint32_t word; /* odd: request, even: answer */
static int mode;               /* 0 spin, 1 spin-getpid, 2 futex */
static long total;
static int server_cpu;

static void pin(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	if (sched_setaffinity(0, sizeof s, &s) != 0) {
		perror("sched_setaffinity");
		exit(2);
	}
}

static void wait_for(uint32_t v)
{
	if (mode == 2) {
		while (__atomic_load_n(&word, __ATOMIC_ACQUIRE) != v)
			syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, v - 1, 0, 0, 0);
	} else {
		while (__atomic_load_n(&word, __ATOMIC_ACQUIRE) != v)
			__builtin_ia32_pause();
	}
}

static void post(uint32_t v)
{
	__atomic_store_n(&word, v, __ATOMIC_RELEASE);
	if (mode == 2)
		syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
}

static void *server(void *arg)
{
	(void)arg;
	pin(server_cpu);
	for (long i = 0; i < total; i++) {
		wait_for((uint32_t)(2 * i + 1));
		if (mode == 1)
			syscall(SYS_getpid);
		post((uint32_t)(2 * i + 2));
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: handoff spin|spin-getpid|futex CLIENT_CPU SERVER_CPU [N]\n");
		return 2;
	}
	mode = !strcmp(argv[1], "spin") ? 0 : !strcmp(argv[1], "spin-getpid") ? 1
					    : !strcmp(argv[1], "futex")     ? 2
									    : -1;
	if (mode < 0) {
		fprintf(stderr, "handoff: unknown mode %s\n", argv[1]);
		return 2;
	}
	pin(atoi(argv[2]));
	server_cpu = atoi(argv[3]);
	long n = argc > 4 ? atol(argv[4]) : 100000, warm = 2000;
	total = warm + n;
	pthread_t t;
	pthread_create(&t, 0, server, 0);
	struct timespec a, b;
	for (long i = 0; i < total; i++) {
		if (i == warm)
			clock_gettime(CLOCK_MONOTONIC, &a);
		post((uint32_t)(2 * i + 1));
		wait_for((uint32_t)(2 * i + 2));
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	pthread_join(t, 0);
	printf("%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
	return 0;
}
