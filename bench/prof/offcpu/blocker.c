/*
 * blocker: blocks in known places for known durations, for the off-CPU
 * test (crates/prof/tests/offcpu.rs) and the comparison with bcc's
 * offcputime (bench/prof/offcpu/compare.sh).
 *
 *   main thread:   f() sleeps F ms (nanosleep), then g() reads a pipe that
 *                  the writer fills G ms later;
 *   writer thread: h() sleeps F+G ms (nanosleep), then writes the pipe.
 *
 * Usage: blocker [F_MS G_MS [OUT [LINGER_MS]]] (default 200 300, stdout,
 * 0); LINGER_MS: stay alive that long at the end (a tool that names
 * user frames from /proc/PID/maps when it stops needs the process). It
 * writes,
 * for each thread, its tid and the time it measured around each block
 * (CLOCK_MONOTONIC), in ns: "f TID NS", "g TID NS", "j TID NS" (main
 * waiting in pthread_join for the writer to end), "h TID NS".
 *
 * The system calls are made here with inline `syscall` instructions, not
 * through libc: frame-pointer stack walks lose the caller of a libc
 * wrapper built without frame pointers (its return address is on the
 * stack, not in a frame), and the test wants f, g and h on the stack.
 * Built with -O0 -fno-omit-frame-pointer -g.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int fds[2];
static long f_ms = 200, g_ms = 300;
static long long h_ns;
static pid_t h_tid;

static inline __attribute__((always_inline)) long sys3(long n, long a, long b, long c)
{
	long r;

	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return r;
}

static long long now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void __attribute__((noinline)) sleep_ms(long ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };

	while (sys3(SYS_nanosleep, (long)&t, (long)&t, 0) == -4 /* EINTR */)
		;
}

void __attribute__((noinline)) f(void)
{
	sleep_ms(f_ms);
}

void __attribute__((noinline)) g(void)
{
	char c;

	sys3(SYS_read, fds[0], (long)&c, 1);
}

void __attribute__((noinline)) h(void)
{
	sleep_ms(f_ms + g_ms);
	sys3(SYS_write, fds[1], (long)"x", 1);
}

static void *writer(void *arg)
{
	long long t0;

	(void)arg;
	h_tid = gettid();
	t0 = now_ns();
	h();
	h_ns = now_ns() - t0;
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t w;
	long long t0, fn, gn, jn;
	FILE *out = stdout;

	if (argc >= 3) {
		f_ms = atol(argv[1]);
		g_ms = atol(argv[2]);
	}
	if (argc >= 4 && !(out = fopen(argv[3], "w")))
		return 1;
	if (pipe(fds) || pthread_create(&w, NULL, writer, NULL))
		return 1;
	t0 = now_ns();
	f();
	fn = now_ns() - t0;
	t0 = now_ns();
	g();
	gn = now_ns() - t0;
	/* the writer has written: it ends at once */
	t0 = now_ns();
	pthread_join(w, NULL);
	jn = now_ns() - t0;
	fprintf(out, "f %d %lld\ng %d %lld\nj %d %lld\nh %d %lld\n", gettid(), fn, gettid(), gn,
		gettid(), jn, h_tid, h_ns);
	if (fclose(out))
		return 1;
	if (argc >= 5)
		usleep(atol(argv[4]) * 1000);
	return 0;
}
