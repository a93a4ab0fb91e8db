/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * stage: one stage of a shell pipeline for the tags tests, like `cat` but
 * telling the test where it is. Knows nothing of mantle.
 *
 *   stage ID REPORT
 *
 * Appends "ID start PID" to the regular file REPORT, then copies stdin to
 * stdout, appending "ID wrote N" after each write, and "ID eof" at the end.
 * It blocks in read(2) until data comes: the test inspects tags there.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void note(int fd, const char *fmt, const char *id, long v)
{
	char buf[128];
	int n = snprintf(buf, sizeof(buf), fmt, id, v);

	if (write(fd, buf, n) != n) {
		/* the test times out and shows what it has */
	}
}

int main(int argc, char **argv)
{
	char buf[4096];
	ssize_t n;
	int rep;

	if (argc != 3) {
		fprintf(stderr, "usage: stage ID REPORT\n");
		return 2;
	}
	rep = open(argv[2], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (rep < 0) {
		perror("open report");
		return 1;
	}
	note(rep, "%s start %ld\n", argv[1], (long)getpid());
	while ((n = read(0, buf, sizeof(buf))) > 0) {
		if (write(1, buf, n) != n) {
			perror("write");
			return 1;
		}
		note(rep, "%s wrote %ld\n", argv[1], (long)n);
	}
	note(rep, "%s eof %ld\n", argv[1], 0);
	return 0;
}
