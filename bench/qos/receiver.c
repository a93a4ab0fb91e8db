// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// bench/qos/receiver.c: one task of Hijack's Figures 8-10. Binds
// 127.0.0.1:PORT, receives 16-byte packets (serial, send time) with
// recvfrom(fd, buf, len, 0, NULL, NULL), spends WORK_US of CPU on each
// (the task's processing: without it one CPU takes every stream and there
// is no overload to share; CPU time of the thread, not wall time: a task
// preempted in its work would otherwise find the work done when it
// resumes, and the overload would melt under priorities), and at T0 + END seconds writes one line per
// second of the run: "sec delivered dropped mean_jitter_ns max_jitter_ns",
// where dropped counts serial gaps and jitter is |inter-arrival -
// inter-send| of consecutive packets received (the paper's definition).
// A SIGALRM set for T0 + END + 1 s ends it even if no packet comes.
//
//   receiver T0_NS END_S PORT WORK_US [OUT_FILE]   (default: stdout)
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAXSEC 120

static uint64_t t0;
static int out_fd = 1;
static int secs;
static uint64_t delivered[MAXSEC], dropped[MAXSEC], jsum[MAXSEC], jmax[MAXSEC], jn[MAXSEC];

static uint64_t clock_ns(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static uint64_t now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

static void report(void)
{
	char line[128];
	for (int s = 0; s < secs; s++) {
		int n = snprintf(line, sizeof line, "%d %llu %llu %llu %llu\n", s,
				 (unsigned long long)delivered[s], (unsigned long long)dropped[s],
				 (unsigned long long)(jn[s] ? jsum[s] / jn[s] : 0), (unsigned long long)jmax[s]);
		(void)!write(out_fd, line, (size_t)n);
	}
}

static void on_alarm(int sig)
{
	(void)sig;
	report();
	_exit(0);
}

int main(int argc, char **argv)
{
	if (argc < 5)
		return fprintf(stderr, "usage: receiver T0_NS END_S PORT WORK_US\n"), 2;
	t0 = strtoull(argv[1], 0, 10);
	double end_s = atof(argv[2]);
	int port = atoi(argv[3]);
	uint64_t work = (uint64_t)(atof(argv[4]) * 1000);
	secs = (int)end_s;
	if (secs < 1 || secs > MAXSEC)
		return 2;
	uint64_t end = t0 + (uint64_t)(end_s * 1e9);
	if (argc > 5 && (out_fd = open(argv[5], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
		return perror(argv[5]), 1;
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0)
		return perror("bind"), 1;
	signal(SIGALRM, on_alarm);
	uint64_t now = now_ns();
	alarm((unsigned)((end > now ? (end - now) / 1000000000ull : 0) + 2));
	uint64_t last_serial = 0, last_send = 0, last_recv = 0;
	int have = 0;
	for (;;) {
		uint64_t pkt[2];
		ssize_t r = recvfrom(fd, pkt, sizeof pkt, 0, NULL, NULL);
		uint64_t t = now_ns();
		if (t >= end)
			break;
		if (r != sizeof pkt || t < t0)
			continue;
		int s = (int)((t - t0) / 1000000000ull);
		delivered[s]++;
		if (have) {
			if (pkt[0] > last_serial + 1)
				dropped[s] += pkt[0] - last_serial - 1;
			int64_t ia = (int64_t)(t - last_recv), is = (int64_t)(pkt[1] - last_send);
			uint64_t j = (uint64_t)(ia > is ? ia - is : is - ia);
			jsum[s] += j, jn[s]++;
			if (j > jmax[s])
				jmax[s] = j;
		} else if (pkt[0] > 0) {
			dropped[s] += pkt[0]; // what came before the first one we saw
		}
		have = 1, last_serial = pkt[0], last_send = pkt[1], last_recv = t;
		uint64_t w0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		while (clock_ns(CLOCK_THREAD_CPUTIME_ID) - w0 < work)
			;
	}
	report();
	return 0;
}
