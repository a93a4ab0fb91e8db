/* bench/multicore/idle.c: blocks in read() on a pipe nobody writes, for
 * the given seconds (an alarm ends it): an idle program. */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static void done(int s) { (void)s; _exit(0); }

int main(int argc, char **argv)
{
	int p[2];
	char c;
	signal(SIGALRM, done);
	alarm(argc > 1 ? atoi(argv[1]) : 3);
	if (pipe(p) != 0)
		return 1;
	return read(p[0], &c, 1) < 0;
}
