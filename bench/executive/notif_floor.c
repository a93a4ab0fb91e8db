// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// bench/executive/notif_floor.c: a reference row for Table 1, NOT mantle:
// the least a seccomp-user-notification supervisor can do per interposed
// getppid, i.e. the floor under mantle's protected path on this machine.
//
//   notif_floor [-s] [-v] -- COMMAND [ARGS...]
//
// Between fork and exec the child sets no_new_privs and installs a filter
// whose only non-ALLOW action is SECCOMP_RET_USER_NOTIF for getppid, with
// SECCOMP_FILTER_FLAG_NEW_LISTENER; the listener goes to the parent over a
// socketpair (SCM_RIGHTS). The parent loops: poll, NOTIF_RECV, NOTIF_SEND.
// No decoding, no allocation, no output on the path.
//   default  answer with SECCOMP_USER_NOTIF_FLAG_CONTINUE: the kernel runs
//            the guest's own getppid (the "continue" decision)
//   -v       answer with a value: the guest's parent, which is this
//            process (a "performed on the guest's behalf" decision whose
//            performing is free; the guest checks the value)
//   -s       set SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP on the listener (6.6+):
//            the supervisor is woken on the guest's CPU
// ENOENT from RECV or SEND (the notification vanished) is normal and
// ignored. Exits with the command's status (128+signal when killed).
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#endif
#ifndef SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
#define SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (1UL << 0)
#endif

static int install_filter(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getppid, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		return -1;
	return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
			    SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
}

static int send_fd(int sock, int fd)
{
	char c = 0;
	struct iovec iov = {.iov_base = &c, .iov_len = 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	memset(&u, 0, sizeof u);
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			   .msg_controllen = sizeof u.buf};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof fd);
	return sendmsg(sock, &m, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
	char c;
	struct iovec iov = {.iov_base = &c, .iov_len = 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			   .msg_controllen = sizeof u.buf};
	if (recvmsg(sock, &m, 0) != 1)
		return -1;
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	if (!cm || cm->cmsg_type != SCM_RIGHTS)
		return -1;
	int fd;
	memcpy(&fd, CMSG_DATA(cm), sizeof fd);
	return fd;
}

int main(int argc, char **argv)
{
	int sync_wake = 0, value = 0, opt;
	while ((opt = getopt(argc, argv, "+sv")) != -1) {
		if (opt == 's')
			sync_wake = 1;
		else if (opt == 'v')
			value = 1;
		else
			return 2;
	}
	if (optind >= argc) {
		fprintf(stderr, "usage: notif_floor [-s] [-v] -- COMMAND [ARGS...]\n");
		return 2;
	}
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0) {
		perror("notif_floor: socketpair");
		return 2;
	}
	pid_t child = fork();
	if (child < 0) {
		perror("notif_floor: fork");
		return 2;
	}
	if (child == 0) {
		int l = install_filter();
		if (l < 0) {
			fprintf(stderr, "notif_floor: seccomp: %s\n", strerror(errno));
			_exit(126);
		}
		if (send_fd(sp[1], l) != 0)
			_exit(126);
		close(l);
		char go;
		if (read(sp[1], &go, 1) != 1) // the supervisor is ready
			_exit(126);
		execvp(argv[optind], argv + optind);
		fprintf(stderr, "notif_floor: exec %s: %s\n", argv[optind], strerror(errno));
		_exit(127);
	}
	int lfd = recv_fd(sp[0]);
	if (lfd < 0) {
		fprintf(stderr, "notif_floor: no listener from the child\n");
		return 2;
	}
	if (sync_wake && ioctl(lfd, SECCOMP_IOCTL_NOTIF_SET_FLAGS,
			       (unsigned long)SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP) != 0) {
		fprintf(stderr, "notif_floor: error: SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: %s\n",
			strerror(errno));
		kill(child, SIGKILL);
		return 2;
	}
	if (write(sp[0], "g", 1) != 1)
		return 2;
	close(sp[0]);
	close(sp[1]);

	struct seccomp_notif_sizes sz;
	if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sz) != 0) {
		perror("notif_floor: SECCOMP_GET_NOTIF_SIZES");
		return 2;
	}
	struct seccomp_notif *req = calloc(1, sz.seccomp_notif > sizeof *req ? sz.seccomp_notif : sizeof *req);
	struct seccomp_notif_resp *resp =
		calloc(1, sz.seccomp_notif_resp > sizeof *resp ? sz.seccomp_notif_resp : sizeof *resp);
	if (!req || !resp)
		return 2;
	long me = getpid();
	size_t req_size = sz.seccomp_notif > sizeof *req ? sz.seccomp_notif : sizeof *req;
	for (;;) {
		// RECV does not return when the last guest task is gone: poll
		// first (POLLHUP then). One extra system call per call, which a
		// real supervisor (epoll over several listeners) pays too.
		struct pollfd pfd = {.fd = lfd, .events = POLLIN};
		if (poll(&pfd, 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (!(pfd.revents & POLLIN))
			break; // POLLHUP: no task uses the filter any more
		memset(req, 0, req_size);
		if (ioctl(lfd, SECCOMP_IOCTL_NOTIF_RECV, req) != 0) {
			if (errno == EINTR || errno == ENOENT)
				continue; // vanished (killed, or interrupted): normal
			break;
		}
		resp->id = req->id;
		resp->error = 0;
		if (value) {
			resp->val = me;
			resp->flags = 0;
		} else {
			resp->val = 0;
			resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
		}
		if (ioctl(lfd, SECCOMP_IOCTL_NOTIF_SEND, resp) != 0 && errno != ENOENT && errno != EINTR)
			break;
	}
	int st;
	while (waitpid(child, &st, 0) < 0)
		if (errno != EINTR)
			return 2;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
