/* Offload test program: the program writes messages into its own shared
 * area, as a corrupting or malicious program could, and its bootstrap
 * thread must refuse each one; the program then goes on normally. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "offload.h"

static volatile int t1_tid, release;

static void *t1(void *arg)
{
	(void)arg;
	t1_tid = gettid();
	while (!release) /* no system calls while the main thread forges */
		__builtin_ia32_pause();
	printf("t1 goes on: %d\n", getpid() > 0);
	return 0;
}

static int forge(struct mx_ok_entry *e, uint32_t state, uint32_t kind, uint64_t nr, uint64_t seq,
		 int good_check)
{
	e->nr = kind;
	e->pc = 0;
	e->syscall.nr = nr;
	for (int i = 0; i < 6; i++)
		e->syscall.arg[i] = 0;
	e->seq = seq;
	e->uc = 0;
	e->check = good_check ? mx_ok_check(kind, 0, &e->syscall, seq, 0) : 12345;
	__atomic_store_n(&e->bootstrap_has_msg, state, __ATOMIC_SEQ_CST);
	syscall(SYS_futex, &e->bootstrap_has_msg, FUTEX_WAKE, 1, 0, 0, 0);
	for (int i = 0; i < 5000; i++) {
		if (__atomic_load_n(&e->bootstrap_has_msg, __ATOMIC_SEQ_CST) == MX_OK_REFUSED)
			return 1;
		usleep(1000);
	}
	return 0;
}

int main(void)
{
	setvbuf(stdout, 0, _IONBF, 0);
	void *(*area_fn)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "mantle_offload_area");
	struct mx_ok_hdr *h = area_fn ? area_fn() : 0;
	if (!h) {
		printf("not offloaded\n");
		return 2;
	}
	pthread_t t;
	pthread_create(&t, 0, t1, 0);
	while (!t1_tid)
		usleep(1000);
	struct mx_ok_entry *e = 0, *all = (struct mx_ok_entry *)((char *)h + MX_OK_HDR_SIZE);
	for (uint32_t i = 0; i < h->npairs && !e; i++)
		if (all[i].app_tid == (uint32_t)t1_tid && all[i].bootstrap_has_msg != MX_OK_GONE)
			e = &all[i];
	if (!e) {
		printf("no entry for t1\n");
		return 2;
	}
	/* no message in flight: IDLE, or the last ANSWER */
	for (uint32_t st; (st = __atomic_load_n(&e->bootstrap_has_msg, __ATOMIC_SEQ_CST)) != MX_OK_IDLE &&
			  st != MX_OK_ANSWER;)
		usleep(1000);
	uint64_t s = e->seq;
	printf("bad check refused: %d\n", forge(e, MX_OK_REQUEST, MX_OK_SYSCALL, SYS_getpid, s + 1, 0));
	printf("exit refused: %d\n", forge(e, MX_OK_REQUEST, MX_OK_SYSCALL, SYS_exit, s + 1, 1));
	printf("number out of range refused: %d\n", forge(e, MX_OK_REQUEST, MX_OK_SYSCALL, 100000, s + 1, 1));
	printf("replay refused: %d\n", forge(e, MX_OK_REQUEST, MX_OK_SYSCALL, SYS_getpid, s, 1));
	printf("unknown kind refused: %d\n", forge(e, MX_OK_REQUEST, 77, SYS_getpid, s + 1, 1));
	printf("unknown state refused: %d\n", forge(e, 77, MX_OK_SYSCALL, SYS_getpid, s + 1, 1));
	printf("refused in all: %u\n", __atomic_load_n(&h->refused, __ATOMIC_SEQ_CST));
	__atomic_store_n(&e->bootstrap_has_msg, MX_OK_IDLE, __ATOMIC_SEQ_CST);
	release = 1;
	pthread_join(t, 0);
	printf("main goes on\n");
	return 0;
}
