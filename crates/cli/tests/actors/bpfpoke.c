/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * bpfpoke: tries to open pinned BPF maps for writing and to write them,
 * the way any unprivileged program could (bpf(2) directly, no libbpf).
 *
 *   bpfpoke PIN...
 *   bpfpoke --map-ids PROG_PIN...   (root: the ids of the programs' maps)
 *   bpfpoke --open-only PIN...      (only get_rw and get_ro: writes nothing,
 *                                    so root may run it on live maps)
 *   bpfpoke --force-update PIN...   (as bpfpoke PIN..., and the update is
 *                                    tried even when key 0 has no value:
 *                                    zeros, BPF_ANY; a frozen map refuses
 *                                    it with EPERM before looking at either)
 *   bpfpoke --run SIZE PROG_PIN...  (BPF_PROG_RUN of a pinned syscall program
 *                                    on SIZE zero bytes: "PIN get=E run=E
 *                                    retval=R")
 *   bpfpoke --iter LINK_PIN...      (reads a pinned iterator: "PIN get=E
 *                                    create=E bytes=N")
 *
 * A PIN of the form "id:N" is map id N instead, opened with
 * BPF_MAP_GET_FD_BY_ID: how a map that is never pinned could be reached.
 *
 * Per pin, one line:
 *   "PIN get_rw=E get_ro=E repin=E update=E mmap_rw=E mmap_ro=E"
 * where E is 0 on success, an errno number on failure, or "-" when the
 * step was not possible. When only a read-only fd can be had, it is pinned
 * again into a bpffs directory this user may write (BPFPOKE_DIR, default
 * /sys/fs/bpf) and that new pin, which belongs to this user, is opened
 * read-write (repin): Linux >= 6.4 lets any user do both, so a read-only
 * pin alone protects nothing (issue 8). The update writes back the value just read from
 * key 0 (so even a successful write changes nothing); it is tried only
 * when that lookup worked. Mappings are tried only on array maps.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/bpf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static long sys_bpf(int cmd, union bpf_attr *attr)
{
	return syscall(SYS_bpf, cmd, attr, sizeof(*attr));
}

static int obj_pin(int fd, const char *path)
{
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.pathname = (uint64_t)(uintptr_t)path;
	a.bpf_fd = fd;
	return (int)sys_bpf(BPF_OBJ_PIN, &a);
}

static int obj_get(const char *path, unsigned flags)
{
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.pathname = (uint64_t)(uintptr_t)path;
	a.file_flags = flags;
	return (int)sys_bpf(BPF_OBJ_GET, &a);
}

/* A map by pin path, or by id for "id:N". */
static int map_open(const char *what, unsigned flags)
{
	union bpf_attr a;

	if (strncmp(what, "id:", 3))
		return obj_get(what, flags);
	memset(&a, 0, sizeof(a));
	a.map_id = (uint32_t)strtoul(what + 3, 0, 10);
	a.open_flags = flags;
	return (int)sys_bpf(BPF_MAP_GET_FD_BY_ID, &a);
}

/* --map-ids: one line per program pin, "PIN ID ID ...". */
static int map_ids(int argc, char **argv)
{
	for (int i = 2; i < argc; i++) {
		static uint32_t ids[256];
		struct bpf_prog_info info;
		union bpf_attr a;
		int fd = obj_get(argv[i], 0);

		memset(&info, 0, sizeof(info));
		info.nr_map_ids = 256;
		info.map_ids = (uint64_t)(uintptr_t)ids;
		memset(&a, 0, sizeof(a));
		a.info.bpf_fd = fd;
		a.info.info_len = sizeof(info);
		a.info.info = (uint64_t)(uintptr_t)&info;
		if (fd < 0 || sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &a) != 0) {
			fprintf(stderr, "bpfpoke: %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		printf("%s", argv[i]);
		for (uint32_t j = 0; j < info.nr_map_ids && j < 256; j++)
			printf(" %u", ids[j]);
		printf("\n");
		close(fd);
	}
	return 0;
}

/* --run SIZE PIN...: run each pinned syscall program once. */
static int run_progs(int argc, char **argv)
{
	static char ctx[4096];
	unsigned size = (unsigned)strtoul(argv[2], 0, 10);

	for (int i = 3; i < argc; i++) {
		union bpf_attr a;
		int fd = obj_get(argv[i], 0), run = -1, err_get = fd < 0 ? errno : 0;

		memset(&a, 0, sizeof(a));
		memset(ctx, 0, sizeof(ctx));
		if (fd >= 0) {
			a.test.prog_fd = fd;
			a.test.ctx_in = (uint64_t)(uintptr_t)ctx;
			a.test.ctx_size_in = size < sizeof(ctx) ? size : sizeof(ctx);
			run = sys_bpf(BPF_PROG_TEST_RUN, &a) ? errno : 0;
			close(fd);
		}
		printf("%s get=%d run=%d retval=%d\n", argv[i], err_get, run, (int)a.test.retval);
	}
	return 0;
}

/* --iter PIN...: how many bytes each pinned iterator gives this caller. */
static int read_iters(int argc, char **argv)
{
	static char buf[1 << 16];

	for (int i = 2; i < argc; i++) {
		union bpf_attr a;
		int fd = obj_get(argv[i], 0), it = -1, err_get = fd < 0 ? errno : 0, err_it = -1;
		long n, total = 0;

		if (fd >= 0) {
			memset(&a, 0, sizeof(a));
			a.iter_create.link_fd = fd;
			it = (int)sys_bpf(BPF_ITER_CREATE, &a);
			err_it = it < 0 ? errno : 0;
			while (it >= 0 && (n = read(it, buf, sizeof(buf))) > 0)
				total += n;
			if (it >= 0)
				close(it);
			close(fd);
		}
		printf("%s get=%d create=%d bytes=%ld\n", argv[i], err_get, err_it, total);
	}
	return 0;
}

int main(int argc, char **argv)
{
	static char key[4096], val[1 << 16];

	int open_only = argc > 1 && !strcmp(argv[1], "--open-only");
	int force = argc > 1 && !strcmp(argv[1], "--force-update");

	if (argc > 1 && !strcmp(argv[1], "--map-ids"))
		return map_ids(argc, argv);
	if (argc > 2 && !strcmp(argv[1], "--run"))
		return run_progs(argc, argv);
	if (argc > 1 && !strcmp(argv[1], "--iter"))
		return read_iters(argc, argv);
	for (int i = 1 + open_only + force; i < argc; i++) {
		char upd[16] = "-", mrw[16] = "-", mro[16] = "-", rep[16] = "-";
		int rw = map_open(argv[i], 0);
		int erw = rw < 0 ? errno : 0;
		int ro = map_open(argv[i], BPF_F_RDONLY);
		int ero = ro < 0 ? errno : 0;
		int fd;

		if (open_only) {
			printf("%s get_rw=%d get_ro=%d\n", argv[i], erw, ero);
			if (rw >= 0)
				close(rw);
			if (ro >= 0)
				close(ro);
			continue;
		}
		if (rw < 0 && ro >= 0) {
			const char *dir = getenv("BPFPOKE_DIR") ? getenv("BPFPOKE_DIR") : "/sys/fs/bpf";
			char path[512];

			snprintf(path, sizeof(path), "%s/bpfpoke-%d-%d", dir, (int)getpid(), i);
			if (obj_pin(ro, path) == 0) {
				rw = obj_get(path, 0);
				snprintf(rep, sizeof(rep), "%d", rw < 0 ? errno : 0);
				unlink(path);
			} else {
				snprintf(rep, sizeof(rep), "p%d", errno);
			}
		}
		fd = rw >= 0 ? rw : ro;

		if (fd >= 0) {
			struct bpf_map_info info;
			union bpf_attr a;

			memset(&info, 0, sizeof(info));
			memset(&a, 0, sizeof(a));
			a.info.bpf_fd = fd;
			a.info.info_len = sizeof(info);
			a.info.info = (uint64_t)(uintptr_t)&info;
			if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &a) == 0 && info.value_size <= sizeof(val)) {
				memset(&a, 0, sizeof(a));
				a.map_fd = fd;
				a.key = (uint64_t)(uintptr_t)key;
				a.value = (uint64_t)(uintptr_t)val;
				int found = rw >= 0 && sys_bpf(BPF_MAP_LOOKUP_ELEM, &a) == 0;

				if (!found && rw >= 0 && force) {
					memset(key, 0, sizeof(key));
					memset(val, 0, sizeof(val));
				}
				if (found || (rw >= 0 && force)) {
					a.flags = BPF_ANY;
					snprintf(upd, sizeof(upd), "%d",
						 sys_bpf(BPF_MAP_UPDATE_ELEM, &a) == 0 ? 0 : errno);
				}
				if (info.type == BPF_MAP_TYPE_ARRAY) {
					size_t len = ((size_t)((info.value_size + 7) & ~7u) *
							      info.max_entries +
						      4095) & ~(size_t)4095;
					void *p = mmap(0, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

					snprintf(mrw, sizeof(mrw), "%d", p == MAP_FAILED ? errno : 0);
					if (p != MAP_FAILED)
						munmap(p, len);
					p = mmap(0, len, PROT_READ, MAP_SHARED, fd, 0);
					snprintf(mro, sizeof(mro), "%d", p == MAP_FAILED ? errno : 0);
					if (p != MAP_FAILED)
						munmap(p, len);
				}
			}
		}
		printf("%s get_rw=%d get_ro=%d repin=%s update=%s mmap_rw=%s mmap_ro=%s\n", argv[i],
		       erw, ero, rep, upd, mrw, mro);
		if (rw >= 0)
			close(rw);
		if (ro >= 0)
			close(ro);
	}
	return 0;
}
