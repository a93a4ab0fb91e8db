/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The tag-attribution workload: a server that forks a worker per
 * connection on a unix socket; a client asks for UNITS units of work and
 * waits for the answer. Run one client under `mantle tag run T` and one
 * without: `mantle prof report --by-tag` should split the workers' time in
 * the proportion of the units each client asked for.
 *
 *   tagsrv serve SOCK            (forks into the background, prints nothing)
 *   tagsrv call SOCK UNITS
 *   tagsrv stop SOCK
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

__attribute__((noinline)) static unsigned long unit_of_work(unsigned long x)
{
	/* about 1 ms of arithmetic */
	for (int i = 0; i < 400000; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

static int sock_at(const char *path, int listen_)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int s = socket(AF_UNIX, SOCK_STREAM, 0);

	strncpy(a.sun_path, path, sizeof(a.sun_path) - 1);
	if (listen_) {
		unlink(path);
		if (bind(s, (void *)&a, sizeof(a)) || listen(s, 16))
			return -1;
	} else if (connect(s, (void *)&a, sizeof(a))) {
		return -1;
	}
	return s;
}

static void serve_one(int c)
{
	long units;
	unsigned long r = 1;
	char buf[64] = {0};

	if (read(c, buf, sizeof(buf) - 1) <= 0)
		_exit(0);
	if (!strncmp(buf, "stop", 4)) {
		kill(getppid(), SIGTERM);
		_exit(0);
	}
	units = atol(buf);
	for (long i = 0; i < units; i++)
		r = unit_of_work(r);
	dprintf(c, "%lu\n", r);
	_exit(0);
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	if (!strcmp(argv[1], "serve")) {
		int s = sock_at(argv[2], 1);
		if (s < 0) {
			perror("bind");
			return 1;
		}
		signal(SIGCHLD, SIG_IGN);
		if (fork())
			return 0; /* the parent returns once listening */
		setsid();
		for (;;) {
			int c = accept(s, NULL, NULL);
			if (c < 0)
				continue;
			if (fork() == 0)
				serve_one(c);
			close(c);
		}
	}
	int s = sock_at(argv[2], 0);
	char buf[64];
	if (s < 0) {
		perror("connect");
		return 1;
	}
	if (!strcmp(argv[1], "stop")) {
		write(s, "stop", 4);
		return 0;
	}
	dprintf(s, "%s\n", argc > 3 ? argv[3] : "1");
	if (read(s, buf, sizeof(buf)) <= 0)
		return 1;
	return 0;
}
