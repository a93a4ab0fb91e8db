// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * bench/tags/micro.c: micro-benchmarks for the cost of mantle tags on
 * ordinary Linux IPC (the shape of the paper's Table 3, seeds/000 sec. 7).
 *
 * Plain POSIX code that knows nothing about mantle: it is what an
 * unmodified program does. The one exception is the case `selfread`, which
 * exists only when built with -DWITH_MANTLE (linked with libmantle.so) and
 * times mantle_tags_self().
 *
 *   micro CASE ITERS        run CASE: a warm-up of ITERS/5, then ITERS timed
 *                           operations in 5 equal segments; prints
 *                           "CASE <median> <min> <max>" on stdout: ns per op
 *                           of the median, fastest and slowest segment
 *   micro time CMD ARGS...  fork+exec CMD, wait, print its wall time in ns
 *                           (the timer for whole programs: a tag held by
 *                           this process is inherited by CMD)
 *   micro list              the cases this binary has
 *
 * Cases (one "op" each):
 *   unix_pingpong  1-byte request + 1-byte reply over a connected unix
 *                  stream socket; this process is the connect() side (the
 *                  client, whose sends are requests), a forked child accepts
 *   pipe_pingpong  1-byte request + 1-byte reply over two pipes, two processes
 *   getpid         syscall(SYS_getpid) (the raw syscall: no libc caching)
 *   fork_exit      fork, child _exit(0), parent waitpid
 *   signal_rt      kill(child, SIGUSR1), child answers kill(parent, SIGUSR1);
 *                  both wait with sigwaitinfo (signals blocked): a round trip
 *   devnull_write  write 1 byte to /dev/null
 *   pipe_read      write 1 byte into a pipe and read it back, one process
 *   eventfd_pingpong  eventfd_write + the peer's eventfd_read, and back over a
 *                  second eventfd (the paper's pulse), two processes
 *   mq_pingpong    1-byte mq_send + the peer's mq_receive, and back over a
 *                  second POSIX message queue, two processes
 *   shm_map        mmap(MAP_SHARED) + munmap of one page of a memfd that this
 *                  process created (a tagged creator attaches its tags; each
 *                  mapping takes them again), one process
 *   tcp_lo         1-byte request + 1-byte reply over a TCP connection on
 *                  loopback (TCP_NODELAY), this process the client, a forked
 *                  child the server (Table 4's path within one host)
 *   tcp_veth       the same between two network namespaces over a veth pair
 *                  (Table 4: two hosts): the server child enters the
 *                  namespace $MICRO_NS_SERVER and listens on $MICRO_ADDR_SERVER,
 *                  this process enters $MICRO_NS_CLIENT (both /run/netns
 *                  paths; bench/tags/run.sh makes them) and connects
 *   selfread       mantle_tags_self() (WITH_MANTLE builds only)
 *
 * Pinning is the driver's business (taskset); the peer process of a
 * two-process case is forked before the clock starts and inherits the CPU
 * mask, so both ends run where the driver put this process.
 * Exit status: 0 ok, 1 error (with a message on stderr), 2 usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mqueue.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef WITH_MANTLE
#include <mantle/tags.h>
#endif

static void die(const char *what)
{
	fprintf(stderr, "micro: %s: %s\n", what, strerror(errno));
	exit(1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void xwrite(int fd, const void *b, size_t n)
{
	ssize_t r;
	do
		r = write(fd, b, n);
	while (r < 0 && errno == EINTR);
	if (r != (ssize_t)n)
		die("write");
}

static void xread(int fd, void *b, size_t n)
{
	ssize_t r;
	do
		r = read(fd, b, n);
	while (r < 0 && errno == EINTR);
	if (r != (ssize_t)n) {
		if (r == 0)
			errno = EPIPE;
		die("read");
	}
}

static void reap(pid_t pid)
{
	int st;
	if (waitpid(pid, &st, 0) != pid)
		die("waitpid");
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "micro: peer process failed (status %#x)\n", st);
		exit(1);
	}
}

/*
 * The clock: a case calls tick(i) at the top of iteration i and clk_stop()
 * after its loop. The n timed ops (after `warm` untimed ones) are split in
 * SEGS equal segments; the result is the median segment's ns per op, so a
 * burst of interference in one segment (this VM has them) does not move it.
 */
#define SEGS 5
static struct {
	long next, seglen;
	int k;
	uint64_t t[SEGS + 1];
} clk;

static void clk_start(long warm, long n)
{
	clk.seglen = n / SEGS;
	clk.next = warm;
	clk.k = 0;
}

static inline void tick(long i)
{
	if (__builtin_expect(i == clk.next, 0)) {
		clk.t[clk.k++] = now_ns();
		clk.next = clk.k < SEGS ? clk.next + clk.seglen : -1;
	}
}

static uint64_t clk_stop(void)
{
	clk.t[SEGS] = now_ns();
	return clk.t[SEGS] - clk.t[0];
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Median, min and max over the segments of ns per op. */
static void clk_result(double *med, double *lo, double *hi)
{
	double d[SEGS];
	for (int k = 0; k < SEGS; k++)
		d[k] = (double)(clk.t[k + 1] - clk.t[k]) / (double)clk.seglen;
	qsort(d, SEGS, sizeof(d[0]), cmp_d);
	*med = d[SEGS / 2];
	*lo = d[0];
	*hi = d[SEGS - 1];
}

/* Each case runs `warm` untimed then `n` timed ops (n a multiple of SEGS). */
typedef uint64_t (*case_fn)(long warm, long n);

/* ------------------------------------------------------- ping-pongs */

/* Echo 1-byte messages from rfd to wfd until EOF. */
static void echo_loop(int rfd, int wfd)
{
	char c;
	for (;;) {
		ssize_t r = read(rfd, &c, 1);
		if (r == 0)
			_exit(0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			_exit(1);
		}
		if (write(wfd, &c, 1) != 1)
			_exit(1);
	}
}

static uint64_t pingpong(int wfd, int rfd, long warm, long n)
{
	char c = 'x';
	for (long i = 0; i < warm + n; i++) {
		tick(i);
		xwrite(wfd, &c, 1);
		xread(rfd, &c, 1);
	}
	return clk_stop();
}

static uint64_t case_unix_pingpong(long warm, long n)
{
	struct sockaddr_un a;
	socklen_t alen;
	int ls, cs;
	pid_t pid;
	uint64_t ns;

	/* An abstract address: nothing to clean up in the file system. */
	memset(&a, 0, sizeof(a));
	a.sun_family = AF_UNIX;
	int len = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "mantle-bench-%d", getpid());
	alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
	ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ls < 0 || bind(ls, (struct sockaddr *)&a, alen) < 0 || listen(ls, 1) < 0)
		die("unix listen");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		int s = accept(ls, NULL, NULL);
		if (s < 0)
			_exit(1);
		close(ls);
		echo_loop(s, s);
	}
	close(ls);
	cs = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (cs < 0 || connect(cs, (struct sockaddr *)&a, alen) < 0)
		die("unix connect");
	ns = pingpong(cs, cs, warm, n);
	close(cs);
	reap(pid);
	return ns;
}

/* Enter the network namespace named by environment variable `var` (a
 * /run/netns path), if it is set. */
static void enter_netns(const char *var)
{
	const char *path = getenv(var);
	int fd;

	if (!path || !*path)
		return;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET) < 0)
		die(var);
	close(fd);
}

/* TCP ping-pong: server in a forked child listening on addr, this process
 * the client; with netns, in $MICRO_NS_SERVER and $MICRO_NS_CLIENT. */
static uint64_t tcp_pingpong(const char *addr, int netns, long warm, long n)
{
	struct sockaddr_in a;
	int ready[2], ls, cs, one = 1;
	socklen_t alen = sizeof(a);
	pid_t pid;
	uint64_t ns;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	if (inet_pton(AF_INET, addr, &a.sin_addr) != 1) {
		fprintf(stderr, "micro: bad address %s\n", addr);
		exit(2);
	}
	if (pipe2(ready, O_CLOEXEC) < 0)
		die("pipe");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		int s;

		close(ready[0]);
		/* A client that fails to connect exits; without this its server
		 * waited in accept() for ever, holding every fd it inherited
		 * (the driver's `flock` of the shared bench lock among them). */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() == 1)
			_exit(1);
		if (netns)
			enter_netns("MICRO_NS_SERVER");
		ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(ls, 1) < 0 ||
		    getsockname(ls, (struct sockaddr *)&a, &alen) < 0)
			_exit(1);
		/* the port the kernel chose, to the client */
		if (write(ready[1], &a.sin_port, sizeof(a.sin_port)) != sizeof(a.sin_port))
			_exit(1);
		s = accept(ls, NULL, NULL);
		if (s < 0)
			_exit(1);
		close(ls);
		setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		echo_loop(s, s);
	}
	close(ready[1]);
	/* read, not xread: a pipe from our own child (no tag to take) */
	if (read(ready[0], &a.sin_port, sizeof(a.sin_port)) != sizeof(a.sin_port)) {
		fprintf(stderr, "micro: the TCP server did not start\n");
		exit(1);
	}
	close(ready[0]);
	if (netns)
		enter_netns("MICRO_NS_CLIENT");
	cs = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (cs < 0 || connect(cs, (struct sockaddr *)&a, sizeof(a)) < 0)
		die("tcp connect");
	setsockopt(cs, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	ns = pingpong(cs, cs, warm, n);
	close(cs);
	reap(pid);
	return ns;
}

static uint64_t case_tcp_lo(long warm, long n)
{
	return tcp_pingpong("127.0.0.1", 0, warm, n);
}

static uint64_t case_tcp_veth(long warm, long n)
{
	const char *addr = getenv("MICRO_ADDR_SERVER");

	if (!addr || !getenv("MICRO_NS_SERVER") || !getenv("MICRO_NS_CLIENT")) {
		fprintf(stderr, "micro: tcp_veth needs MICRO_NS_SERVER, MICRO_NS_CLIENT and MICRO_ADDR_SERVER\n");
		exit(2);
	}
	return tcp_pingpong(addr, 1, warm, n);
}

static uint64_t case_pipe_pingpong(long warm, long n)
{
	int req[2], rep[2];
	pid_t pid;
	uint64_t ns;

	if (pipe2(req, O_CLOEXEC) < 0 || pipe2(rep, O_CLOEXEC) < 0)
		die("pipe");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		close(req[1]);
		close(rep[0]);
		echo_loop(req[0], rep[1]);
	}
	close(req[0]);
	close(rep[1]);
	ns = pingpong(req[1], rep[0], warm, n);
	close(req[1]);
	close(rep[0]);
	reap(pid);
	return ns;
}

/* ------------------------------------------------------- syscalls */

static uint64_t case_getpid(long warm, long n)
{
	for (long i = 0; i < warm + n; i++) {
		tick(i);
		if (syscall(SYS_getpid) < 0)
			die("getpid");
	}
	return clk_stop();
}

static uint64_t case_fork_exit(long warm, long n)
{
	for (long i = 0; i < warm + n; i++) {
		tick(i);
		pid_t pid = fork();
		if (pid < 0)
			die("fork");
		if (pid == 0)
			_exit(0);
		reap(pid);
	}
	return clk_stop();
}

static uint64_t case_signal_rt(long warm, long n)
{
	sigset_t set;
	pid_t parent = getpid(), pid;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGUSR2);
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
		die("sigprocmask");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		/* SIGUSR1: answer; SIGUSR2: done. Blocked since before fork. */
		for (;;) {
			int sig = sigwaitinfo(&set, NULL);
			if (sig == SIGUSR2)
				_exit(0);
			if (sig == SIGUSR1 && kill(parent, SIGUSR1) < 0)
				_exit(1);
		}
	}
	sigdelset(&set, SIGUSR2);
	for (long i = 0; i < warm + n; i++) {
		tick(i);
		if (kill(pid, SIGUSR1) < 0)
			die("kill");
		int sig;
		do
			sig = sigwaitinfo(&set, NULL);
		while (sig < 0 && errno == EINTR);
		if (sig != SIGUSR1)
			die("sigwaitinfo");
	}
	uint64_t ns = clk_stop();
	kill(pid, SIGUSR2);
	reap(pid);
	return ns;
}

static uint64_t case_devnull_write(long warm, long n)
{
	int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	char c = 'x';

	if (fd < 0)
		die("open /dev/null");
	for (long i = 0; i < warm + n; i++) {
		tick(i);
		xwrite(fd, &c, 1);
	}
	uint64_t ns = clk_stop();
	close(fd);
	return ns;
}

static uint64_t case_pipe_read(long warm, long n)
{
	int p[2];
	char c = 'x';

	if (pipe2(p, O_CLOEXEC) < 0)
		die("pipe");
	for (long i = 0; i < warm + n; i++) {
		tick(i);
		xwrite(p[1], &c, 1);
		xread(p[0], &c, 1);
	}
	uint64_t ns = clk_stop();
	close(p[0]);
	close(p[1]);
	return ns;
}

/* ---------------------------------------- eventfd, mq, shared memory */

static uint64_t case_eventfd_pingpong(long warm, long n)
{
	int req = eventfd(0, EFD_CLOEXEC), rep = eventfd(0, EFD_CLOEXEC);
	eventfd_t v;
	pid_t pid;
	uint64_t ns;

	if (req < 0 || rep < 0)
		die("eventfd");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		for (long i = 0; i < warm + n; i++)
			if (eventfd_read(req, &v) < 0 || eventfd_write(rep, 1) < 0)
				_exit(1);
		_exit(0);
	}
	for (long i = 0; i < warm + n; i++) {
		tick(i);
		if (eventfd_write(req, 1) < 0 || eventfd_read(rep, &v) < 0)
			die("eventfd ping-pong");
	}
	ns = clk_stop();
	reap(pid);
	close(req);
	close(rep);
	return ns;
}

static mqd_t mq_make(const char *what)
{
	struct mq_attr at = {.mq_maxmsg = 4, .mq_msgsize = 1};
	char name[64];
	mqd_t q;

	snprintf(name, sizeof(name), "/mantle-bench-%s-%d", what, getpid());
	q = mq_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600, &at);
	if (q == (mqd_t)-1)
		die("mq_open");
	mq_unlink(name); /* both ends hold it open; nothing left behind */
	return q;
}

static uint64_t case_mq_pingpong(long warm, long n)
{
	mqd_t req = mq_make("req"), rep = mq_make("rep");
	char c = 'x';
	pid_t pid;
	uint64_t ns;

	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		for (long i = 0; i < warm + n; i++)
			if (mq_receive(req, &c, 1, NULL) != 1 || mq_send(rep, &c, 1, 0) < 0)
				_exit(1);
		_exit(0);
	}
	for (long i = 0; i < warm + n; i++) {
		tick(i);
		if (mq_send(req, &c, 1, 0) < 0 || mq_receive(rep, &c, 1, NULL) != 1)
			die("mq ping-pong");
	}
	ns = clk_stop();
	reap(pid);
	mq_close(req);
	mq_close(rep);
	return ns;
}

static uint64_t case_shm_map(long warm, long n)
{
	int fd = memfd_create("mantle-bench", MFD_CLOEXEC);

	if (fd < 0 || ftruncate(fd, 4096) < 0)
		die("memfd");
	for (long i = 0; i < warm + n; i++) {
		tick(i);
		void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED || munmap(p, 4096) < 0)
			die("mmap");
	}
	uint64_t ns = clk_stop();
	close(fd);
	return ns;
}

#ifdef WITH_MANTLE
static uint64_t case_selfread(long warm, long n)
{
	volatile uint64_t sink = 0;
	uint64_t acc = 0;

	/* Map the tables up front; -ENODEV (not loaded) is a valid condition:
	 * the call then returns 0, and that path is what gets timed. */
	(void)mantle_tags_open();
	for (long i = 0; i < warm + n; i++) {
		tick(i);
		acc |= mantle_tags_self();
	}
	uint64_t ns = clk_stop();
	sink = acc;
	(void)sink;
	/* Tell the driver what was read: a tagged run must see its tag. */
	fprintf(stderr, "selfread: vector %#llx\n", (unsigned long long)acc);
	return ns;
}
#endif

/* ------------------------------------------------------- timer */

static int time_cmd(char **argv)
{
	uint64_t t0 = now_ns();
	pid_t pid = fork();
	int st;

	if (pid < 0)
		die("fork");
	if (pid == 0) {
		execvp(argv[0], argv);
		fprintf(stderr, "micro: exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	if (waitpid(pid, &st, 0) != pid)
		die("waitpid");
	uint64_t ns = now_ns() - t0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "micro: %s failed (status %#x)\n", argv[0], st);
		return 1;
	}
	printf("time %llu\n", (unsigned long long)ns);
	return 0;
}

static const struct {
	const char *name;
	case_fn fn;
} cases[] = {
	{ "unix_pingpong", case_unix_pingpong },
	{ "pipe_pingpong", case_pipe_pingpong },
	{ "getpid", case_getpid },
	{ "fork_exit", case_fork_exit },
	{ "signal_rt", case_signal_rt },
	{ "devnull_write", case_devnull_write },
	{ "pipe_read", case_pipe_read },
	{ "eventfd_pingpong", case_eventfd_pingpong },
	{ "mq_pingpong", case_mq_pingpong },
	{ "shm_map", case_shm_map },
	{ "tcp_lo", case_tcp_lo },
	{ "tcp_veth", case_tcp_veth },
#ifdef WITH_MANTLE
	{ "selfread", case_selfread },
#endif
};

int main(int argc, char **argv)
{
	size_t ncases = sizeof(cases) / sizeof(cases[0]);

	if (argc >= 3 && strcmp(argv[1], "time") == 0)
		return time_cmd(argv + 2);
	if (argc == 2 && strcmp(argv[1], "list") == 0) {
		for (size_t i = 0; i < ncases; i++)
			printf("%s\n", cases[i].name);
		return 0;
	}
	if (argc != 3) {
		fprintf(stderr, "usage: micro CASE ITERS | micro time CMD... | micro list\n");
		return 2;
	}
	long n = strtol(argv[2], NULL, 10);
	if (n <= 0) {
		fprintf(stderr, "micro: bad iteration count %s\n", argv[2]);
		return 2;
	}
	for (size_t i = 0; i < ncases; i++) {
		if (strcmp(argv[1], cases[i].name) != 0)
			continue;
		double med, lo, hi;

		n -= n % SEGS;
		if (n < SEGS)
			n = SEGS;
		clk_start(n / 5, n);
		/* Nothing is printed until the clock has stopped. */
		(void)cases[i].fn(n / 5, n);
		clk_result(&med, &lo, &hi);
		printf("%s %.2f %.2f %.2f\n", cases[i].name, med, lo, hi);
		return 0;
	}
	fprintf(stderr, "micro: unknown case %s (micro list)\n", argv[1]);
	return 2;
}
