/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * bench/rpc/rpcbench.c: one round trip of SIZE bytes each way between two
 * processes, timed per call (CLOCK_MONOTONIC, vDSO), for bench/rpc/run.py.
 *
 *   rpcbench pipe  [opts]      a client and its forked server over two pipes
 *   rpcbench unix  [opts]      the same over a unix stream socketpair
 *   rpcbench chan-server [opts] / chan-client [opts]
 *                              two guests of `mantle run --system` over a
 *                              mantle channel (mantle_chan_*; guest 0 the server)
 *   rpcbench exec-server [opts] / exec-client [opts]
 *                              the same through the executive (mantle_rpc_call,
 *                              mantle_rpc_reply_receive)
 *
 * opts: -n N timed calls, -w W warm-up calls, -s SIZE bytes each way,
 *       -c CPU (this process), -p CPU (the forked server: pipe, unix),
 *       -S SPIN_NS (chan: mantle_chan_set_spin; -1: the default)
 *
 * The client prints one line:
 *   stats n=N median_ns=.. p99_ns=.. max_ns=.. mean_ns=..
 * CPU -1: not pinned.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <mantle/exec.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long n_calls = 20000, warm = 2000, size = 1, spin = -1;
static int cpu = -1, peer_cpu = -1;
static uint8_t req[MANTLE_RPC_MAX], resp[MANTLE_RPC_MAX];

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void pin(int c)
{
	if (c < 0)
		return;
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(c, &s);
	if (sched_setaffinity(0, sizeof s, &s) != 0) {
		perror("rpcbench: sched_setaffinity");
		exit(1);
	}
}

static void die(const char *what, long r)
{
	fprintf(stderr, "rpcbench: %s: %ld (%s)\n", what, r, strerror(r < 0 ? (int)-r : errno));
	exit(1);
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void report(uint64_t *lat)
{
	double sum = 0;
	for (long i = 0; i < n_calls; i++)
		sum += (double)lat[i];
	qsort(lat, (size_t)n_calls, sizeof *lat, cmp);
	long p99 = (long)((double)n_calls * 0.99);
	if (p99 >= n_calls)
		p99 = n_calls - 1;
	printf("stats n=%ld median_ns=%llu p99_ns=%llu max_ns=%llu mean_ns=%.0f\n", n_calls,
	       (unsigned long long)lat[n_calls / 2], (unsigned long long)lat[p99],
	       (unsigned long long)lat[n_calls - 1], sum / (double)n_calls);
}

/* Times N calls of `one` after W warm-up calls. */
static void timed(void (*one)(void *), void *ctx)
{
	uint64_t *lat = calloc((size_t)n_calls, sizeof *lat);
	if (!lat)
		die("calloc", -ENOMEM);
	for (long i = 0; i < warm; i++)
		one(ctx);
	for (long i = 0; i < n_calls; i++) {
		uint64_t t0 = now_ns();
		one(ctx);
		lat[i] = now_ns() - t0;
	}
	report(lat);
	free(lat);
}

/* ---- pipes and unix sockets: a forked server echoing SIZE bytes ---- */

static int rfd, wfd; /* the client's ends */

static void xfer(int fd, void *b, size_t n, int wr)
{
	size_t k = 0;
	while (k < n) {
		ssize_t r = wr ? write(fd, (char *)b + k, n - k) : read(fd, (char *)b + k, n - k);
		if (r <= 0)
			die(wr ? "write" : "read", r < 0 ? -errno : -EPIPE);
		k += (size_t)r;
	}
}

static void stream_call(void *ctx)
{
	(void)ctx;
	xfer(wfd, req, (size_t)size, 1);
	xfer(rfd, resp, (size_t)size, 0);
}

static void stream_server(int in, int out)
{
	long total = warm + n_calls;
	pin(peer_cpu);
	for (long i = 0; i < total; i++) {
		xfer(in, resp, (size_t)size, 0);
		xfer(out, resp, (size_t)size, 1);
	}
	_exit(0);
}

static int run_stream(int unix_socket)
{
	int a[2], b[2];
	if (unix_socket) {
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, a) != 0)
			die("socketpair", -errno);
		b[0] = a[1];
		b[1] = a[1];
		rfd = wfd = a[0];
	} else {
		if (pipe(a) != 0 || pipe(b) != 0)
			die("pipe", -errno);
		/* client writes a[1], server reads a[0]; server writes b[1] */
		wfd = a[1];
		rfd = b[0];
	}
	pid_t p = fork();
	if (p == 0) {
		if (unix_socket)
			stream_server(a[1], a[1]);
		else
			stream_server(a[0], b[1]);
	}
	pin(cpu);
	timed(stream_call, NULL);
	int st;
	waitpid(p, &st, 0);
	return 0;
}

/* ---- mantle channel ---- */

static void chan_call(void *ctx)
{
	int64_t r = mantle_chan_call(ctx, req, (size_t)size, resp, sizeof resp, 10000000000LL);
	if (r != size)
		die("mantle_chan_call", r);
}

static int chan_client(void)
{
	mantle_chan *ch;
	pin(cpu);
	int r = mantle_chan_connect(0, &ch);
	if (r)
		die("mantle_chan_connect", r);
	if (spin >= 0)
		mantle_chan_set_spin(ch, (uint64_t)spin);
	timed(chan_call, ch);
	mantle_chan_close(ch);
	return 0;
}

static int chan_server(void)
{
	mantle_chan *ch;
	pin(cpu);
	int r = mantle_chan_accept(&ch);
	if (r)
		die("mantle_chan_accept", r);
	if (spin >= 0)
		mantle_chan_set_spin(ch, (uint64_t)spin);
	int64_t n = mantle_chan_receive(ch, req, sizeof req, -1);
	while (n >= 0)
		n = mantle_chan_reply_receive(ch, req, (size_t)n, req, sizeof req, -1);
	if (n != -EPIPE)
		die("mantle_chan_receive", n);
	mantle_chan_close(ch);
	return 0;
}

/* ---- through the executive ---- */

static void exec_call(void *ctx)
{
	(void)ctx;
	int64_t r = mantle_rpc_call(0, req, (size_t)size, resp, sizeof resp);
	if (r != size)
		die("mantle_rpc_call", r);
}

static int exec_client(void)
{
	pin(cpu);
	timed(exec_call, NULL);
	return 0;
}

static int exec_server(void)
{
	uint32_t tok = 0;
	long total = warm + n_calls;
	pin(cpu);
	/* receive #1; then reply #i and receive #i+1 in one trap; reply #total */
	int64_t n = mantle_rpc_reply_receive(0, req, 0, req, sizeof req, &tok);
	for (long i = 1; i < total && n >= 0; i++)
		n = mantle_rpc_reply_receive(tok, req, (size_t)n, req, sizeof req, &tok);
	if (n < 0)
		die("mantle_rpc_reply_receive", n);
	if (mantle_rpc_reply(tok, req, (size_t)n) != 0)
		die("mantle_rpc_reply", -1);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: rpcbench pipe|unix|chan-server|chan-client|exec-server|exec-client [-n N] [-w W] [-s SIZE] [-c CPU] [-p CPU] [-S SPIN_NS]\n");
		return 2;
	}
	const char *mode = argv[1];
	int o;
	optind = 2;
	while ((o = getopt(argc, argv, "n:w:s:c:p:S:")) != -1) {
		switch (o) {
		case 'n': n_calls = atol(optarg); break;
		case 'w': warm = atol(optarg); break;
		case 's': size = atol(optarg); break;
		case 'c': cpu = atoi(optarg); break;
		case 'p': peer_cpu = atoi(optarg); break;
		case 'S': spin = atol(optarg); break;
		default: return 2;
		}
	}
	if (size < 1 || size > MANTLE_RPC_MAX || n_calls < 1) {
		fprintf(stderr, "rpcbench: size 1..%d, n >= 1\n", MANTLE_RPC_MAX);
		return 2;
	}
	memset(req, 'q', sizeof req);
	setvbuf(stdout, 0, _IOLBF, 0);
	if (!strcmp(mode, "pipe"))
		return run_stream(0);
	if (!strcmp(mode, "unix"))
		return run_stream(1);
	if (!strcmp(mode, "chan-client"))
		return chan_client();
	if (!strcmp(mode, "chan-server"))
		return chan_server();
	if (!strcmp(mode, "exec-client"))
		return exec_client();
	if (!strcmp(mode, "exec-server"))
		return exec_server();
	fprintf(stderr, "rpcbench: unknown mode %s\n", mode);
	return 2;
}
