/* A fast-path test guest that corrupts the shared region: a high-water
 * mark far above the capacity (the executive must bound it: it then scans
 * every slot, up to the last), a slot with a
 * state that is no state, two slots claiming tasks outside the guest
 * (init, a tid that does not exist), a request of its own with a call
 * number out of range and one with a wrong sequence number; and it tries
 * to shrink and grow the region through its fd (sealed: EPERM; a shrunk
 * region would kill the executive with SIGBUS on its next access). Then
 * getppid must still be answered (argv: none; the agent answers 55). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../stub/fast.h"

#define CHECK(c)                                                       \
	do {                                                           \
		if (!(c)) {                                            \
			fprintf(stderr, "garbage: line %d: %s\n", __LINE__, #c); \
			return 1;                                      \
		}                                                      \
	} while (0)

static int ask(struct mx_fast_slot *s, uint32_t nr, uint64_t seq)
{
	s->nr = nr;
	s->seq = seq;
	__atomic_store_n(&s->state, MX_ST_REQUEST, __ATOMIC_SEQ_CST);
	for (int i = 0; i < 5000 && __atomic_load_n(&s->state, __ATOMIC_SEQ_CST) == MX_ST_REQUEST; i++)
		usleep(1000);
	return __atomic_load_n(&s->state, __ATOMIC_SEQ_CST) == MX_ST_ANSWER;
}

int main(void)
{
	const char *e = getenv("MANTLE_FAST_FD");
	CHECK(e);
	CHECK(syscall(SYS_getppid) == 55);
	struct mx_fast_hdr *h = mmap(0, 4096, PROT_READ, MAP_SHARED, atoi(e), 0);
	CHECK(h != MAP_FAILED);
	size_t size = h->region_size;
	uint32_t n = h->nslots;
	CHECK(n >= 4);
	char *m = mmap(0, size, PROT_READ | PROT_WRITE, MAP_SHARED, atoi(e), 0);
	CHECK(m != MAP_FAILED);
	struct mx_fast_slot *slots = (void *)(m + MX_FAST_HDR_SIZE), *me = 0;
	uint32_t tid = (uint32_t)syscall(SYS_gettid);
	for (uint32_t i = 0; i < n; i++)
		if (slots[i].tid == tid)
			me = &slots[i];
	CHECK(me);

	((struct mx_fast_hdr *)(void *)m)->hwm = 0xffffffff;
	slots[n - 1].tid = 12345678;
	slots[n - 1].state = 0xdeadbeef;
	slots[n - 2].tid = 1;
	slots[n - 2].nr = SYS_getppid;
	slots[n - 2].seq = 1;
	__atomic_store_n(&slots[n - 2].state, MX_ST_REQUEST, __ATOMIC_SEQ_CST);
	slots[n - 3].tid = 999999999;
	slots[n - 3].nr = SYS_getppid;
	__atomic_store_n(&slots[n - 3].state, MX_ST_REQUEST, __ATOMIC_SEQ_CST);

	/* our own slot: a number out of range, then a skipped sequence number */
	CHECK(ask(me, 5000, me->seq + 1));
	CHECK(me->result == -22);
	__atomic_store_n(&me->state, MX_ST_IDLE, __ATOMIC_SEQ_CST);
	CHECK(ask(me, SYS_getppid, me->seq + 7));
	CHECK(me->result == -22);
	__atomic_store_n(&me->state, MX_ST_IDLE, __ATOMIC_SEQ_CST);

	/* the region's size is sealed, through our fd and through a new open */
	CHECK(ftruncate(atoi(e), 0) == -1 && errno == EPERM);
	CHECK(ftruncate(atoi(e), (off_t)size * 2) == -1 && errno == EPERM);
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", atoi(e));
	int again = open(path, O_RDWR);
	CHECK(again >= 0);
	CHECK(ftruncate(again, 4096) == -1 && errno == EPERM);
	close(again);

	/* the executive is fine, and so is the honest path */
	for (int i = 0; i < 100; i++)
		CHECK(syscall(SYS_getppid) == 55);
	usleep(20000);
	/* the foreign tids were answered EPERM, not served */
	CHECK(slots[n - 2].state == MX_ST_ANSWER && slots[n - 2].result == -1);
	CHECK(slots[n - 3].state == MX_ST_ANSWER && slots[n - 3].result == -1);
	return 0;
}
