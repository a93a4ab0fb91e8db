// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// bench/qos/sender.c: the UDP streams of Hijack's Figures 8-10. One
// process sends every stream (so the senders do not compete for their
// CPU): stream k goes to 127.0.0.1:PORT+k at RATE_k packets/s from
// START_k seconds after T0 until T0 + END seconds. Each packet is 16
// bytes: a serial number and the CLOCK_MONOTONIC send time in ns (both
// uint64). Pacing: busy-waits to each packet's planned time (late packets
// are sent at once, never skipped, so a stream's serials have no gaps at
// the source).
//
//   sender T0_NS END_S PORT RATE0:START0 [RATE1:START1 ...]
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAXS 8

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc < 5 || argc - 4 > MAXS) {
		fprintf(stderr, "usage: sender T0_NS END_S PORT RATE:START...\n");
		return 2;
	}
	uint64_t t0 = strtoull(argv[1], 0, 10), end = t0 + (uint64_t)(atof(argv[2]) * 1e9);
	int port = atoi(argv[3]), n = argc - 4;
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0)
		return perror("socket"), 1;
	struct sockaddr_in to[MAXS];
	uint64_t next[MAXS], gap[MAXS], serial[MAXS];
	for (int k = 0; k < n; k++) {
		double rate = atof(argv[4 + k]);
		char *c = strchr(argv[4 + k], ':');
		double start = c ? atof(c + 1) : 0;
		if (rate <= 0)
			return 2;
		memset(&to[k], 0, sizeof to[k]);
		to[k].sin_family = AF_INET;
		to[k].sin_port = htons((uint16_t)(port + k));
		to[k].sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		gap[k] = (uint64_t)(1e9 / rate);
		next[k] = t0 + (uint64_t)(start * 1e9);
		serial[k] = 0;
	}
	for (;;) {
		int k = 0;
		for (int j = 1; j < n; j++)
			if (next[j] < next[k])
				k = j;
		if (next[k] >= end)
			break;
		while (now_ns() < next[k])
			;
		uint64_t pkt[2] = {serial[k]++, now_ns()};
		(void)sendto(fd, pkt, sizeof pkt, 0, (struct sockaddr *)&to[k], sizeof to[k]);
		next[k] += gap[k];
	}
	return 0;
}
