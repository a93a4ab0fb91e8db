/* Offload test program: signals while a call from a rewritten site is in
 * flight (single-threaded, so that sites are rewritten): a blocking read
 * interrupted (EINTR without SA_RESTART, made again with it), a handler
 * that makes calls of its own meanwhile, a signal sent by the program to
 * itself. Deterministic output (compared with a native run). */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t got;
static int out_fd;

static void on_sig(int s)
{
	got++;
	/* calls of a handler that interrupted a forwarded call */
	char m[32];
	int n = snprintf(m, sizeof m, "handler %d pid ok %d\n", s, getpid() > 0);
	write(out_fd, m, (size_t)n);
}

int main(void)
{
	setvbuf(stdout, 0, _IONBF, 0);
	out_fd = 1;
	int q[2];
	if (pipe(q) != 0)
		return 1;
	char x;
	/* warm: the read and write sites trap once and are rewritten */
	for (int i = 0; i < 3; i++) {
		write(q[1], "w", 1);
		read(q[0], &x, 1);
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_sig;
	sigaction(SIGALRM, &sa, 0);
	sigaction(SIGUSR1, &sa, 0);
	for (int round = 0; round < 2; round++) {
		/* no SA_RESTART: the blocked read fails with EINTR */
		alarm(1);
		ssize_t r = read(q[0], &x, 1);
		printf("read %zd errno %s got %d\n", r, r < 0 ? strerror(errno) : "-", (int)got);
	}
	/* SA_RESTART: the read goes on until a child writes */
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, 0);
	pid_t c = fork();
	if (c == 0) {
		usleep(1500000);
		write(q[1], "z", 1);
		_exit(0);
	}
	alarm(1);
	ssize_t r = read(q[0], &x, 1);
	printf("restarted read %zd %c got %d\n", r, r == 1 ? x : '?', (int)got);
	int st;
	waitpid(c, &st, 0);
	/* a signal the program sends itself, between calls */
	kill(getpid(), SIGUSR1);
	printf("usr1 got %d\n", (int)got);
	return 5;
}
