/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * actor: an ordinary program that does IPC on command, for the tags
 * integration tests (crates/cli/tests/tags.rs). It knows nothing of mantle:
 * the tests tag its threads from the outside and read their tags with
 * `mantle tag get|threads`.
 *
 *   actor [--ctl FIFO] [WORKERS]
 *
 * Commands come one per line on stdin (or from the FIFO); the main thread
 * only dispatches them, it never does IPC, so it stays untagged unless a
 * signal is sent to the process. Each worker thread runs its commands in
 * order, blocking where the command blocks (recv, accept, ...), which gives
 * the tests well-defined points to inspect tags at.
 *
 *   command:  SEQ WORKER VERB ARGS...
 *   report:   SEQ ok RESULT...   |   SEQ err MESSAGE
 *
 * Reports go to stdout, which the tests point at a regular file, never a
 * pipe: a tagged actor writing to a pipe the test reads would tag the test.
 * The first report is "ready PID MAIN_TID W0_TID W1_TID ...".
 *
 * Sockets, pipes and FIFOs are kept in a table of names given by the test.
 * Verbs (NAME: a table name, TEXT: one word; "->" what the report carries):
 *   listen_unix NAME PATH stream|seqpacket    connect_unix NAME PATH stream|seqpacket
 *   listen_tcp NAME -> port                   connect_tcp NAME PORT
 *   listen_tcp6 NAME -> port (on ::1)         connect_tcp6 NAME PORT ADDR6
 *   (connect_tcp6 to ::ffff:127.0.0.1 reaches a listen_tcp listener from an
 *   IPv6 socket: a v4-mapped connection, whose route is IPv4's)
 *   accept NAME LISTENER                      dgram_unix NAME [PATH]
 *   udp NAME [bind] -> port                   connect_udp NAME PORT
 *   sendto_unix NAME PATH TEXT                sendto_udp NAME PORT TEXT
 *   send NAME TEXT (write(2) of TEXT\n)       recv NAME -> first word read
 *   spin_recv NAME: busy-polls with non-blocking reads, reports "SEQ busy"
 *                   when it starts, then the first word read
 *   close NAME        adopt NAME FD (an inherited fd)
 *   open_fifo NAME PATH r|w                   pin CPU (this worker thread)
 *   kill PID SIG      tgkill PID TID SIG      sigcount SIG -> n
 *   wait_sig SIG N (bounded: 10 s) -> n       tid -> this worker's tid
 *   fork_child NAME -> pid (the child blocks until `release NAME`, then exits)
 *   release NAME      waitpid PID -> status
 *   spawn REPORT PROG ARGS... -> pid (fork+exec, its stdout to REPORT)
 * Shared memory, message queues, eventfd (the paper's section 4 channels):
 *   memfd NAME -> fd number                   shm_open NAME PATH (creates it)
 *   open_rw NAME PATH                         map NAME shared|shared-ro|private
 *   shmget NAME -> id (SysV, IPC_PRIVATE)     shmat ID
 *   eventfd NAME -> fd number                 efd_write NAME N
 *   efd_read NAME [spin] -> counter           mq_open NAME PATH (creates it)
 *   mq_send NAME TEXT                         mq_recv NAME [spin] -> text
 *   pipe R W -> read fd, write fd             getfd NAME PID FD (pidfd_getfd)
 * ("spin": busy-poll like spin_recv instead of blocking.)
 *   exit
 * Signals: SIGUSR1 and SIGCHLD are counted by a handler that only the main
 * thread runs (workers block them); SIGUSR2 is ignored.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mqueue.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXW 8
#define QLEN 64
#define LINE 1024
#define NFDS 256

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void report(const char *fmt, ...)
{
	char buf[LINE + 64];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof(buf) - 2)
		n = sizeof(buf) - 2;
	buf[n++] = '\n';
	pthread_mutex_lock(&out_lock);
	if (write(1, buf, n) < 0) {
		/* nothing to do: the test will time out and show stderr */
	}
	pthread_mutex_unlock(&out_lock);
}

static pid_t gettid_(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/* ------------------------------------------------------------ fd table */

static pthread_mutex_t fd_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	char name[32];
	int fd;
} fds[NFDS];

/* Names fd; fails (-1) only when the table is full. */
static int fd_put(const char *name, int fd)
{
	int ok = -1;

	pthread_mutex_lock(&fd_lock);
	for (int i = 0; i < NFDS && ok < 0; i++) {
		if (!fds[i].name[0] || !strcmp(fds[i].name, name)) {
			snprintf(fds[i].name, sizeof(fds[i].name), "%s", name);
			fds[i].fd = fd;
			ok = 0;
		}
	}
	pthread_mutex_unlock(&fd_lock);
	return ok;
}

/* The fd named name, or -1 (and the calls on it fail with EBADF). */
static int fd_get(const char *name)
{
	int fd = -1;

	pthread_mutex_lock(&fd_lock);
	for (int i = 0; i < NFDS; i++)
		if (fds[i].name[0] && !strcmp(fds[i].name, name))
			fd = fds[i].fd;
	pthread_mutex_unlock(&fd_lock);
	return fd;
}

/* ------------------------------------------------------------- signals */

static volatile sig_atomic_t n_usr1, n_chld;

static void on_signal(int sig)
{
	if (sig == SIGUSR1)
		n_usr1++;
	else if (sig == SIGCHLD)
		n_chld++;
}

static int sig_of(const char *s)
{
	if (!strcmp(s, "USR1"))
		return SIGUSR1;
	if (!strcmp(s, "USR2"))
		return SIGUSR2;
	if (!strcmp(s, "CHLD"))
		return SIGCHLD;
	return atoi(s);
}

static int count_of(int sig)
{
	return sig == SIGUSR1 ? n_usr1 : sig == SIGCHLD ? n_chld : -1;
}

/* ------------------------------------------------------------ commands */

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		report(__VA_ARGS__);                                                               \
		return;                                                                            \
	} while (0)
#define NEED(n)                                                                                    \
	do {                                                                                       \
		if (argc < (n))                                                                    \
			FAIL("%s err usage: %s needs %d argument(s)", seq, verb, (n) - 1);         \
	} while (0)
#define SYSFAIL(what) FAIL("%s err %s: %s", seq, what, strerror(errno))
/* Keep fd in the table under name. */
#define KEEP(name, fd)                                                                             \
	do {                                                                                       \
		if (fd_put((name), (fd)) < 0)                                                      \
			FAIL("%s err fd table full", seq);                                         \
	} while (0)

static int sock_type(const char *s)
{
	return s && !strcmp(s, "seqpacket") ? SOCK_SEQPACKET : SOCK_STREAM;
}

static socklen_t unix_addr(struct sockaddr_un *a, const char *path)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	snprintf(a->sun_path, sizeof(a->sun_path), "%s", path);
	return sizeof(*a);
}

static void loopback(struct sockaddr_in *a, int port)
{
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_port = htons(port);
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

/* The port of a bound IPv4 or IPv6 socket (at the same offset in both). */
static int local_port(int fd)
{
	struct sockaddr_storage a;
	socklen_t l = sizeof(a);

	if (getsockname(fd, (struct sockaddr *)&a, &l) < 0)
		return -1;
	return ntohs(((struct sockaddr_in *)&a)->sin_port);
}

/* One non-blocking attempt at a read: read(2) or mq_receive(3). */
typedef ssize_t (*read_op)(int fd, char *buf, size_t n);

static ssize_t op_read(int fd, char *buf, size_t n)
{
	return read(fd, buf, n);
}

static ssize_t op_mq(int fd, char *buf, size_t n)
{
	return mq_receive((mqd_t)fd, buf, n, 0);
}

/*
 * Read fd with op, blocking, or busy-polling with O_NONBLOCK for 10 s at
 * most after reporting "SEQ busy" (a reader that takes the data before the
 * sender's hook has run). Returns op's result, errno set on failure.
 */
static ssize_t read_with(const char *seq, int fd, read_op op, char *buf, size_t n, int spin)
{
	struct timespec t0, t;
	ssize_t r;
	int fl, e;

	if (!spin)
		return op(fd, buf, n);
	fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -1;
	report("%s busy", seq);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		r = op(fd, buf, n);
		if (r >= 0 || (errno != EAGAIN && errno != EINTR))
			break;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 10)
			break;
	}
	e = errno;
	fcntl(fd, F_SETFL, fl);
	errno = e;
	return r;
}

static void run(char *line)
{
	char *words[32];
	char **argv = words;
	int argc = 0;
	char *save = 0, *tok;
	const char *seq, *verb;

	for (tok = strtok_r(line, " \t\r\n", &save); tok && argc < 31;
	     tok = strtok_r(0, " \t\r\n", &save))
		words[argc++] = tok;
	words[argc] = 0;
	if (argc < 3)
		return;
	seq = words[0];
	verb = words[2];
	argv = words + 2; /* argv[0] is the verb now */
	argc -= 2;

	if (!strcmp(verb, "tid")) {
		report("%s ok %d", seq, gettid_());
	} else if (!strcmp(verb, "listen_unix")) {
		struct sockaddr_un a;
		int fd;

		NEED(3);
		fd = socket(AF_UNIX, sock_type(argv[3]), 0);
		if (fd < 0)
			SYSFAIL("socket");
		unlink(argv[2]);
		if (bind(fd, (struct sockaddr *)&a, unix_addr(&a, argv[2])) < 0)
			SYSFAIL("bind");
		if (listen(fd, 16) < 0)
			SYSFAIL("listen");
		KEEP(argv[1], fd);
		report("%s ok", seq);
	} else if (!strcmp(verb, "listen_tcp") || !strcmp(verb, "listen_tcp6") ||
		   !strcmp(verb, "connect_tcp") || !strcmp(verb, "connect_tcp6")) {
		/* one body for both families and both ends: the address is
		 * loopback (127.0.0.1, ::1) but for connect_tcp6's ADDR6 */
		int v6 = verb[strlen(verb) - 1] == '6', listening = verb[0] == 'l';
		struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
		struct sockaddr_in a4;
		struct sockaddr *a = v6 ? (struct sockaddr *)&a6 : (struct sockaddr *)&a4;
		socklen_t alen = v6 ? sizeof(a6) : sizeof(a4);
		int fd, one = 1, port = 0;

		NEED(listening ? 2 : v6 ? 4 : 3);
		if (!listening)
			port = atoi(argv[2]);
		loopback(&a4, port);
		a6.sin6_port = htons(port);
		if (!listening && v6 && inet_pton(AF_INET6, argv[3], &a6.sin6_addr) != 1)
			FAIL("%s err bad IPv6 address %s", seq, argv[3]);
		fd = socket(a->sa_family, SOCK_STREAM, 0);
		if (fd < 0)
			SYSFAIL("socket");
		if (listening) {
			setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
			if (bind(fd, a, alen) < 0)
				SYSFAIL("bind");
			if (listen(fd, 16) < 0)
				SYSFAIL("listen");
		} else if (connect(fd, a, alen) < 0) {
			SYSFAIL("connect");
		}
		KEEP(argv[1], fd);
		report("%s ok %d", seq, local_port(fd));
	} else if (!strcmp(verb, "accept")) {
		int fd;

		NEED(3);
		fd = accept(fd_get(argv[2]), 0, 0);
		if (fd < 0)
			SYSFAIL("accept");
		KEEP(argv[1], fd);
		report("%s ok", seq);
	} else if (!strcmp(verb, "connect_unix")) {
		struct sockaddr_un a;
		int fd;

		NEED(3);
		fd = socket(AF_UNIX, sock_type(argv[3]), 0);
		if (fd < 0)
			SYSFAIL("socket");
		if (connect(fd, (struct sockaddr *)&a, unix_addr(&a, argv[2])) < 0)
			SYSFAIL("connect");
		KEEP(argv[1], fd);
		report("%s ok", seq);
	} else if (!strcmp(verb, "dgram_unix")) {
		struct sockaddr_un a;
		int fd;

		NEED(2);
		fd = socket(AF_UNIX, SOCK_DGRAM, 0);
		if (fd < 0)
			SYSFAIL("socket");
		if (argc > 2) {
			unlink(argv[2]);
			if (bind(fd, (struct sockaddr *)&a, unix_addr(&a, argv[2])) < 0)
				SYSFAIL("bind");
		}
		KEEP(argv[1], fd);
		report("%s ok", seq);
	} else if (!strcmp(verb, "udp")) {
		struct sockaddr_in a;
		int fd;

		NEED(2);
		fd = socket(AF_INET, SOCK_DGRAM, 0);
		if (fd < 0)
			SYSFAIL("socket");
		if (argc > 2 && !strcmp(argv[2], "bind")) {
			loopback(&a, 0);
			if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
				SYSFAIL("bind");
		}
		KEEP(argv[1], fd);
		report("%s ok %d", seq, local_port(fd));
	} else if (!strcmp(verb, "connect_udp")) {
		struct sockaddr_in a;
		int fd;

		NEED(3);
		fd = socket(AF_INET, SOCK_DGRAM, 0);
		if (fd < 0)
			SYSFAIL("socket");
		loopback(&a, atoi(argv[2]));
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
			SYSFAIL("connect");
		KEEP(argv[1], fd);
		report("%s ok %d", seq, local_port(fd));
	} else if (!strcmp(verb, "sendto_unix")) {
		struct sockaddr_un a;
		char buf[256];
		int n;

		NEED(4);
		n = snprintf(buf, sizeof(buf), "%s\n", argv[3]);
		if (sendto(fd_get(argv[1]), buf, n, 0, (struct sockaddr *)&a,
			   unix_addr(&a, argv[2])) < 0)
			SYSFAIL("sendto");
		report("%s ok %d", seq, n);
	} else if (!strcmp(verb, "sendto_udp")) {
		struct sockaddr_in a;
		char buf[256];
		int n;

		NEED(4);
		n = snprintf(buf, sizeof(buf), "%s\n", argv[3]);
		loopback(&a, atoi(argv[2]));
		if (sendto(fd_get(argv[1]), buf, n, 0, (struct sockaddr *)&a, sizeof(a)) < 0)
			SYSFAIL("sendto");
		report("%s ok %d", seq, n);
	} else if (!strcmp(verb, "send")) {
		char buf[256];
		int n;

		NEED(3);
		n = snprintf(buf, sizeof(buf), "%s\n", argv[2]);
		if (write(fd_get(argv[1]), buf, n) != n)
			SYSFAIL("write");
		report("%s ok %d", seq, n);
	} else if (!strcmp(verb, "recv")) {
		char buf[4096];
		ssize_t n;

		NEED(2);
		n = read(fd_get(argv[1]), buf, sizeof(buf) - 1);
		if (n < 0)
			SYSFAIL("read");
		buf[n] = 0;
		buf[strcspn(buf, " \t\r\n")] = 0;
		report("%s ok %s", seq, n ? buf : "EOF");
	} else if (!strcmp(verb, "spin_recv")) {
		char buf[4096];
		ssize_t n;

		NEED(2);
		n = read_with(seq, fd_get(argv[1]), op_read, buf, sizeof(buf) - 1, 1);
		if (n < 0)
			SYSFAIL("read");
		buf[n] = 0;
		buf[strcspn(buf, " \t\r\n")] = 0;
		report("%s ok %s", seq, n ? buf : "EOF");
	} else if (!strcmp(verb, "pin")) {
		cpu_set_t set;

		NEED(2);
		CPU_ZERO(&set);
		CPU_SET(atoi(argv[1]), &set);
		if (sched_setaffinity(0, sizeof(set), &set) < 0)
			SYSFAIL("sched_setaffinity");
		report("%s ok", seq);
	} else if (!strcmp(verb, "close")) {
		NEED(2);
		close(fd_get(argv[1]));
		report("%s ok", seq);
	} else if (!strcmp(verb, "adopt")) {
		NEED(3);
		KEEP(argv[1], atoi(argv[2]));
		report("%s ok", seq);
	} else if (!strcmp(verb, "open_fifo")) {
		int fd;

		NEED(4);
		fd = open(argv[2], argv[3][0] == 'w' ? O_WRONLY : O_RDONLY);
		if (fd < 0)
			SYSFAIL("open");
		KEEP(argv[1], fd);
		report("%s ok", seq);
	} else if (!strcmp(verb, "memfd")) {
		int fd;

		NEED(2);
		fd = memfd_create(argv[1], 0);
		if (fd < 0 || ftruncate(fd, 4096) < 0)
			SYSFAIL("memfd_create");
		KEEP(argv[1], fd);
		report("%s ok %d", seq, fd);
	} else if (!strcmp(verb, "shm_open")) {
		int fd;

		NEED(3);
		fd = shm_open(argv[2], O_RDWR | O_CREAT | O_EXCL, 0600);
		if (fd < 0 || ftruncate(fd, 4096) < 0)
			SYSFAIL("shm_open");
		KEEP(argv[1], fd);
		report("%s ok", seq);
	} else if (!strcmp(verb, "open_rw")) {
		int fd;

		NEED(3);
		fd = open(argv[2], O_RDWR);
		if (fd < 0)
			SYSFAIL("open");
		KEEP(argv[1], fd);
		report("%s ok", seq);
	} else if (!strcmp(verb, "map")) {
		void *p;

		NEED(3);
		p = mmap(0, 4096, PROT_READ | (strcmp(argv[2], "shared-ro") ? PROT_WRITE : 0),
			 strncmp(argv[2], "shared", 6) ? MAP_PRIVATE : MAP_SHARED, fd_get(argv[1]), 0);
		if (p == MAP_FAILED)
			SYSFAIL("mmap");
		report("%s ok", seq);
	} else if (!strcmp(verb, "shmget")) {
		int id;

		NEED(2);
		id = shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
		if (id < 0)
			SYSFAIL("shmget");
		report("%s ok %d", seq, id);
	} else if (!strcmp(verb, "shmat")) {
		void *p;

		NEED(2);
		p = shmat(atoi(argv[1]), 0, 0);
		if (p == (void *)-1)
			SYSFAIL("shmat");
		report("%s ok", seq);
	} else if (!strcmp(verb, "eventfd")) {
		int fd;

		NEED(2);
		fd = eventfd(0, 0);
		if (fd < 0)
			SYSFAIL("eventfd");
		KEEP(argv[1], fd);
		report("%s ok %d", seq, fd);
	} else if (!strcmp(verb, "pipe")) {
		int p[2];

		NEED(3);
		if (pipe(p) < 0)
			SYSFAIL("pipe");
		KEEP(argv[1], p[0]);
		KEEP(argv[2], p[1]);
		report("%s ok %d %d", seq, p[0], p[1]);
	} else if (!strcmp(verb, "getfd")) {
		int pfd, fd;

		NEED(4);
		pfd = (int)syscall(SYS_pidfd_open, atoi(argv[2]), 0);
		if (pfd < 0)
			SYSFAIL("pidfd_open");
		fd = (int)syscall(SYS_pidfd_getfd, pfd, atoi(argv[3]), 0);
		close(pfd);
		if (fd < 0)
			SYSFAIL("pidfd_getfd");
		KEEP(argv[1], fd);
		report("%s ok", seq);
	} else if (!strcmp(verb, "efd_write")) {
		NEED(3);
		if (eventfd_write(fd_get(argv[1]), strtoull(argv[2], 0, 10)) < 0)
			SYSFAIL("eventfd_write");
		report("%s ok", seq);
	} else if (!strcmp(verb, "efd_read")) {
		eventfd_t v;

		NEED(2);
		if (read_with(seq, fd_get(argv[1]), op_read, (char *)&v, sizeof(v),
			      argc > 2 && !strcmp(argv[2], "spin")) != sizeof(v))
			SYSFAIL("eventfd read");
		report("%s ok %llu", seq, (unsigned long long)v);
	} else if (!strcmp(verb, "mq_open")) {
		struct mq_attr at = {.mq_maxmsg = 8, .mq_msgsize = 256};
		mqd_t q;

		NEED(3);
		q = mq_open(argv[2], O_RDWR | O_CREAT, 0600, &at);
		if (q == (mqd_t)-1)
			SYSFAIL("mq_open");
		KEEP(argv[1], (int)q);
		report("%s ok", seq);
	} else if (!strcmp(verb, "mq_send")) {
		NEED(3);
		if (mq_send((mqd_t)fd_get(argv[1]), argv[2], strlen(argv[2]), 0) < 0)
			SYSFAIL("mq_send");
		report("%s ok", seq);
	} else if (!strcmp(verb, "mq_recv")) {
		char buf[257]; /* mq_receive needs room for mq_msgsize (256) */
		ssize_t n;

		NEED(2);
		n = read_with(seq, fd_get(argv[1]), op_mq, buf, sizeof(buf) - 1,
			      argc > 2 && !strcmp(argv[2], "spin"));
		if (n < 0)
			SYSFAIL("mq_receive");
		buf[n] = 0;
		report("%s ok %s", seq, buf);
	} else if (!strcmp(verb, "kill")) {
		NEED(3);
		if (kill(atoi(argv[1]), sig_of(argv[2])) < 0)
			SYSFAIL("kill");
		report("%s ok", seq);
	} else if (!strcmp(verb, "tgkill")) {
		NEED(4);
		if (syscall(SYS_tgkill, atoi(argv[1]), atoi(argv[2]), sig_of(argv[3])) < 0)
			SYSFAIL("tgkill");
		report("%s ok", seq);
	} else if (!strcmp(verb, "sigcount")) {
		NEED(2);
		report("%s ok %d", seq, count_of(sig_of(argv[1])));
	} else if (!strcmp(verb, "wait_sig")) {
		int sig, want;
		struct timespec ts = {0, 1000000};

		NEED(3);
		sig = sig_of(argv[1]);
		want = atoi(argv[2]);
		for (int i = 0; i < 10000 && count_of(sig) < want; i++)
			nanosleep(&ts, 0);
		if (count_of(sig) < want)
			FAIL("%s err timeout: %d signal(s) %d, want %d", seq, count_of(sig), sig, want);
		report("%s ok %d", seq, count_of(sig));
	} else if (!strcmp(verb, "fork_child")) {
		int p[2];
		pid_t pid;
		char c;

		NEED(2);
		if (pipe2(p, O_CLOEXEC) < 0)
			SYSFAIL("pipe");
		pid = fork();
		if (pid < 0)
			SYSFAIL("fork");
		if (pid == 0) {
			close(p[1]);
			while (read(p[0], &c, 1) > 0) {
			}
			_exit(0);
		}
		close(p[0]);
		KEEP(argv[1], p[1]);
		report("%s ok %d", seq, pid);
	} else if (!strcmp(verb, "release")) {
		NEED(2);
		close(fd_get(argv[1]));
		report("%s ok", seq);
	} else if (!strcmp(verb, "waitpid")) {
		int st = 0;

		NEED(2);
		if (waitpid(atoi(argv[1]), &st, 0) < 0)
			SYSFAIL("waitpid");
		report("%s ok %d", seq, st);
	} else if (!strcmp(verb, "spawn")) {
		pid_t pid;
		int fd;

		NEED(3);
		fd = open(argv[1], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd < 0)
			SYSFAIL("open report");
		pid = fork();
		if (pid < 0)
			SYSFAIL("fork");
		if (pid == 0) {
			sigset_t none;

			sigemptyset(&none);
			sigprocmask(SIG_SETMASK, &none, 0);
			dup2(fd, 1);
			execv(argv[2], &argv[2]);
			_exit(127);
		}
		close(fd);
		report("%s ok %d", seq, pid);
	} else if (!strcmp(verb, "exit")) {
		report("%s ok", seq);
		_exit(0);
	} else {
		report("%s err unknown verb %s", seq, verb);
	}
}

/* ------------------------------------------------------------- workers */

static struct worker {
	pthread_t th;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	char q[QLEN][LINE];
	unsigned head, tail;
	volatile pid_t tid;
} workers[MAXW];

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	char line[LINE];

	w->tid = gettid_();
	for (;;) {
		pthread_mutex_lock(&w->lock);
		while (w->head == w->tail)
			pthread_cond_wait(&w->cond, &w->lock);
		memcpy(line, w->q[w->tail % QLEN], LINE);
		w->tail++;
		pthread_mutex_unlock(&w->lock);
		run(line);
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *ctl = 0;
	int nw = 1, in = 0;
	struct sigaction sa;
	sigset_t blocked;
	char buf[LINE * 4];
	size_t have = 0;
	char ready[256];
	int off;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--ctl") && i + 1 < argc)
			ctl = argv[++i];
		else
			nw = atoi(argv[i]);
	}
	if (nw < 1 || nw > MAXW)
		nw = 1;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, 0);
	sigaction(SIGCHLD, &sa, 0);
	signal(SIGUSR2, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);

	/* Workers block the counted signals: only the main thread runs the
	 * handler, so "who handles it" is well defined. */
	sigemptyset(&blocked);
	sigaddset(&blocked, SIGUSR1);
	sigaddset(&blocked, SIGCHLD);
	pthread_sigmask(SIG_BLOCK, &blocked, 0);
	for (int i = 0; i < nw; i++) {
		pthread_mutex_init(&workers[i].lock, 0);
		pthread_cond_init(&workers[i].cond, 0);
		pthread_create(&workers[i].th, 0, worker_main, &workers[i]);
	}
	pthread_sigmask(SIG_UNBLOCK, &blocked, 0);
	for (int i = 0; i < nw; i++)
		while (!workers[i].tid)
			sched_yield();

	off = snprintf(ready, sizeof(ready), "ready %d %d", getpid(), gettid_());
	for (int i = 0; i < nw; i++)
		off += snprintf(ready + off, sizeof(ready) - off, " %d", workers[i].tid);
	report("%s", ready);

	if (ctl) {
		in = open(ctl, O_RDONLY);
		if (in < 0) {
			perror("open --ctl");
			return 1;
		}
	}
	for (;;) {
		ssize_t n = read(in, buf + have, sizeof(buf) - 1 - have);
		char *nl;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		have += n;
		buf[have] = 0;
		while ((nl = memchr(buf, '\n', have))) {
			char line[LINE];
			size_t len = nl - buf;
			unsigned wi = 0;
			struct worker *w;

			if (len >= LINE)
				len = LINE - 1;
			memcpy(line, buf, len);
			line[len] = 0;
			memmove(buf, nl + 1, have - (nl + 1 - buf));
			have -= nl + 1 - buf;
			if (sscanf(line, "%*s %u", &wi) != 1 || wi >= (unsigned)nw) {
				report("%.*s err bad worker", (int)strcspn(line, " "), line);
				continue;
			}
			w = &workers[wi];
			pthread_mutex_lock(&w->lock);
			if (w->head - w->tail < QLEN) {
				memcpy(w->q[w->head % QLEN], line, len + 1);
				w->head++;
				pthread_cond_signal(&w->cond);
			}
			pthread_mutex_unlock(&w->lock);
		}
	}
	/* stdin closed: the test is gone or done */
	_exit(0);
}
