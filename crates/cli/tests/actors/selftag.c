/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * selftag: a program linked with libmantle that changes its OWN tags
 * through the C API (include/mantle/tags.h), meant to run unprivileged.
 * Same command protocol as actor.c, one worker that is the main thread:
 *
 *   command:  SEQ 0 VERB ARGS...     report:  SEQ ok RESULT | SEQ err MSG
 *
 * Verbs: set TAG TTL | clear TAG | terminate TAG | holds TAG -> the
 * function's return value (0/1 or a negative errno); self -> the first
 * word of mantle_tags_self() in hex; send FD TEXT -> write(2) TEXT\n to an
 * inherited fd; uid -> getuid(); dl_begin TAG | dl_end TAG -> the return
 * value of mantle_deadlock_begin/end; delete TAG -> mantle_tag_delete's;
 * class_system: the raw self-operation that marks the caller a system
 * thread (its effect is read by the test); exit.
 * First report: "ready PID TID TID".
 */
#define _GNU_SOURCE
#include <mantle/tags.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void report(const char *fmt, const char *seq, long v)
{
	char buf[256];
	int n = snprintf(buf, sizeof(buf), fmt, seq, v);

	if (write(1, buf, n) != n) {
		/* the test times out */
	}
}

int main(void)
{
	char line[512];
	long tid = syscall(SYS_gettid);
	char hello[64];
	int n;

	n = snprintf(hello, sizeof(hello), "ready %d %ld %ld\n", getpid(), tid, tid);
	if (write(1, hello, n) != n)
		return 1;
	while (fgets(line, sizeof(line), stdin)) {
		char *argv[8] = {0};
		int argc = 0;
		char *save = 0;

		for (char *t = strtok_r(line, " \t\r\n", &save); t && argc < 7;
		     t = strtok_r(0, " \t\r\n", &save))
			argv[argc++] = t;
		if (argc < 3)
			continue;
		const char *seq = argv[0], *verb = argv[2], *a = argv[3], *b = argv[4];

		if (!strcmp(verb, "set") && a)
			report("%s ok %ld\n", seq, mantle_tag_set(a, b ? atoi(b) : 0));
		else if (!strcmp(verb, "clear") && a)
			report("%s ok %ld\n", seq, mantle_tag_clear(a, 0));
		else if (!strcmp(verb, "terminate") && a)
			report("%s ok %ld\n", seq, mantle_tag_terminate(a, 0));
		else if (!strcmp(verb, "dl_begin") && a)
			report("%s ok %ld\n", seq, mantle_deadlock_begin(a, 0));
		else if (!strcmp(verb, "dl_end") && a)
			report("%s ok %ld\n", seq, mantle_deadlock_end(a, 0));
		else if (!strcmp(verb, "delete") && a)
			report("%s ok %ld\n", seq, mantle_tag_delete(a));
		else if (!strcmp(verb, "class_system")) {
			/* the raw self-operation (MT_OP_CLASS, arg 1): what a
			 * program could call without the library's checks; the
			 * tests read the thread's class as root */
			mantle_tag_ctl(6, 0, 1, 0x5eed);
			report("%s ok %ld\n", seq, 0);
		} else if (!strcmp(verb, "holds") && a)
			report("%s ok %ld\n", seq, mantle_tag_holds(a));
		else if (!strcmp(verb, "self"))
			report("%s ok %lx\n", seq, (long)mantle_tags_self());
		else if (!strcmp(verb, "uid"))
			report("%s ok %ld\n", seq, (long)getuid());
		else if (!strcmp(verb, "send") && a && b) {
			char msg[128];
			int m = snprintf(msg, sizeof(msg), "%s\n", b);

			report(write(atoi(a), msg, m) == m ? "%s ok %ld\n" : "%s err write %ld\n", seq,
			       m);
		} else if (!strcmp(verb, "exit")) {
			report("%s ok %ld\n", seq, 0);
			return 0;
		} else
			report("%s err bad command %ld\n", seq, argc);
	}
	return 0;
}
