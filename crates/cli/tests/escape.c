/* A hostile guest: every trick it knows to make a call the executive
 * enforces (--deny open, --redirect) anyway. Each mode prints one line
 * per try: "TRY ok CONTENT" when the file was opened and read (its first
 * line), "TRY errno N" when the call failed. The test (escapes.rs in
 * exec.rs) decides what each line must say.
 *
 *   escape open FILE          every call of the open family, by libc and raw
 *   escape unlink FILE DIR    every call of the unlink family, and getppid
 *   escape sudoff FILE        turn Syscall User Dispatch off, then unlinkat
 *                             FILE and getppid
 *   escape selector FILE      write ALLOW into the stub's selector, then the same
 *   escape tramp FILE         the same through the stub's own syscall code
 *   escape exec PROG ARGS...  exec PROG with an empty environment
 *   escape uring              io_uring_setup
 *   escape race FILE ALT N    open N times while a thread flips the path
 *                             buffer between FILE and ALT; count the reads
 *                             of "NEW", of "OLD", and the rest
 *   escape dirs DIR           DIR/x by .., a relative path, a dirfd,
 *                             /proc/self/root, a symlink into DIR
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define TRAMP 0x1000000000UL /* the stub's page (crates/exec/src/fast.rs) */

static void report_fd(const char *try, long fd)
{
	char buf[256] = { 0 };
	if (fd < 0) {
		printf("%s errno %ld\n", try, -fd);
		return;
	}
	long n = read((int)fd, buf, sizeof buf - 1);
	close((int)fd);
	if (n < 0)
		n = 0;
	buf[n] = 0;
	char *nl = strchr(buf, '\n');
	if (nl)
		*nl = 0;
	printf("%s ok %s\n", try, buf);
}

static long neg(long r)
{
	return r < 0 ? -errno : r;
}

static void open_family(const char *f)
{
	report_fd("open", neg(syscall(SYS_open, f, O_RDONLY)));
	report_fd("openat", neg(syscall(SYS_openat, AT_FDCWD, f, O_RDONLY)));
	struct open_how how = { .flags = O_RDONLY };
	report_fd("openat2", neg(syscall(SYS_openat2, AT_FDCWD, f, &how, sizeof how)));
	/* creat of a new name beside nothing: must be refused, not made */
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.creat-%d", f, getpid());
	long c = neg(syscall(SYS_creat, tmp, 0600));
	if (c >= 0) {
		close((int)c);
		unlink(tmp);
		printf("creat ok made\n");
	} else {
		printf("creat errno %ld\n", -c);
	}
	struct {
		struct file_handle h;
		unsigned char b[128];
	} fh = { .h.handle_bytes = 128 };
	int mnt;
	if (syscall(SYS_name_to_handle_at, AT_FDCWD, f, &fh.h, &mnt, 0) == 0)
		printf("name_to_handle_at ok\n");
	else
		printf("name_to_handle_at errno %d\n", errno);
	report_fd("open_by_handle_at", neg(syscall(SYS_open_by_handle_at, AT_FDCWD, &fh.h, O_RDONLY)));
	report_fd("fopen", neg((long)open(f, O_RDONLY)));
}

static void result(const char *try, long r)
{
	if (r < 0)
		printf("%s errno %ld\n", try, -r);
	else
		printf("%s ok\n", try);
}

/* unlinkat(FILE) and getppid, raw, after a trick */
static void after_trick(const char *try, const char *f)
{
	char t[64];
	snprintf(t, sizeof t, "%s-unlinkat", try);
	result(t, neg(syscall(SYS_unlinkat, AT_FDCWD, f, 0)));
	snprintf(t, sizeof t, "%s-getppid", try);
	result(t, neg(syscall(SYS_getppid)));
}

static void *flipper(void *arg)
{
	char **a = arg;
	char *buf = a[0];
	size_t n = strlen(a[1]) + 1, m = strlen(a[2]) + 1;
	for (;;) {
		memcpy(buf, a[1], n);
		memcpy(buf, a[2], m);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		return 2;
	const char *m = argv[1], *f = argc > 2 ? argv[2] : "";
	if (!strcmp(m, "open")) {
		open_family(f);
	} else if (!strcmp(m, "unlink") && argc > 3) {
		result("unlink", neg(syscall(SYS_unlink, f)));
		result("unlinkat", neg(syscall(SYS_unlinkat, AT_FDCWD, f, 0)));
		result("rmdir", neg(syscall(SYS_rmdir, argv[3])));
		result("unlinkat-dir", neg(syscall(SYS_unlinkat, AT_FDCWD, argv[3], AT_REMOVEDIR)));
		result("libc-unlink", neg(unlink(f)));
		result("getppid", neg(syscall(SYS_getppid)));
	} else if (!strcmp(m, "sudoff")) {
		/* PR_SET_SYSCALL_USER_DISPATCH = 59, PR_SYS_DISPATCH_OFF = 0 */
		result("prctl", neg(syscall(SYS_prctl, 59, 0, 0, 0, 0)));
		after_trick("sudoff", f);
	} else if (!strcmp(m, "selector")) {
		char *sel = *(char **)(TRAMP + 2048 + 8);
		*sel = 0; /* SYSCALL_DISPATCH_FILTER_ALLOW */
		after_trick("selector", f);
	} else if (!strcmp(m, "tramp")) {
		long (*sc6)(long, long, long, long, long, long, long) = (void *)TRAMP;
		result("tramp-unlinkat", sc6(SYS_unlinkat, AT_FDCWD, (long)f, 0, 0, 0, 0));
		result("tramp-getppid", sc6(SYS_getppid, 0, 0, 0, 0, 0, 0));
	} else if (!strcmp(m, "exec")) {
		char *env[] = { NULL };
		execve(argv[2], argv + 2, env);
		printf("exec errno %d\n", errno);
	} else if (!strcmp(m, "uring")) {
		unsigned char params[120] = { 0 };
		long r = syscall(425 /* io_uring_setup */, 4, params);
		if (r >= 0)
			printf("io_uring_setup ok\n");
		else
			printf("io_uring_setup errno %d\n", errno);
	} else if (!strcmp(m, "race") && argc > 4) {
		static char buf[4096];
		char *a[3] = { buf, argv[2], argv[3] };
		strcpy(buf, argv[2]);
		pthread_t t;
		pthread_create(&t, NULL, flipper, a);
		/* the flipper's copies tear: a torn path fails or names
		 * something else, and counts as neither */
		long n = atol(argv[4]), news = 0, olds = 0, other = 0;
		for (long i = 0; i < n; i++) {
			int fd = open(buf, O_RDONLY);
			char b[256] = { 0 };
			long k = fd < 0 ? -1 : read(fd, b, sizeof b - 1);
			if (fd >= 0)
				close(fd);
			if (k == 4 && !memcmp(b, "NEW\n", 4))
				news++;
			else if (k == 4 && !memcmp(b, "OLD\n", 4))
				olds++;
			else
				other++;
		}
		printf("race NEW %ld OLD %ld other %ld\n", news, olds, other);
	} else if (!strcmp(m, "dirs")) {
		char p[4096];
		snprintf(p, sizeof p, "%s/../%s/x", f, strrchr(f, '/') + 1);
		report_fd("dotdot", neg(open(p, O_RDONLY)));
		snprintf(p, sizeof p, "/proc/self/root%s/x", f);
		report_fd("procroot", neg(open(p, O_RDONLY)));
		int d = open(f, O_RDONLY | O_DIRECTORY);
		report_fd("dirfd", neg(openat(d, "x", O_RDONLY)));
		snprintf(p, sizeof p, "/tmp/escape-link-%d", getpid());
		unlink(p);
		if (symlink(f, p) == 0) {
			char q[4200];
			snprintf(q, sizeof q, "%s/x", p);
			report_fd("symlink", neg(open(q, O_RDONLY)));
			unlink(p);
		} else {
			printf("symlink errno %d\n", errno);
		}
		if (chdir(f) == 0)
			report_fd("relative", neg(open("x", O_RDONLY)));
		else
			printf("relative errno %d\n", errno);
		char cwd[4096] = "";
		printf("getcwd %s\n", getcwd(cwd, sizeof cwd) ? cwd : "errno");
	} else {
		return 2;
	}
	return 0;
}
