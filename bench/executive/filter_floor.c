/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* bench/executive/filter_floor.c: the floor of any seccomp filter on a
 * program: a one-instruction allow-all filter, then exec. cc -O2 -o
 * filter_floor filter_floor.c; filter_floor find /usr -type f. */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <stddef.h>
#include <unistd.h>
#include <stdio.h>
/* installs a one-instruction allow-all seccomp filter, then execs argv[1..] */
int main(int argc, char **argv) {
	struct sock_filter f[] = { BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
	struct sock_fprog p = { 1, f };
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &p)) { perror("seccomp"); return 1; }
	execvp(argv[1], argv + 1); perror("exec"); return 127;
}
