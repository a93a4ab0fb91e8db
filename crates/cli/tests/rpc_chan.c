/* Guests for crates/cli/tests/rpc_chan.rs: channels between guests
 * (mantle_chan_*), honest and hostile. Each mode prints one line of
 * results the test checks. Hostile modes use the raw calls and the mapped
 * memory directly (what a guest that does not use libmantle can do). */
#define _GNU_SOURCE
#include <errno.h>
#include <mantle/exec.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000LL

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void fill(uint8_t *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(seed * 31 + i * 7);
}

/* the honest server's answer: each byte + 1, same length */
static void answer_of(const uint8_t *q, size_t n, uint8_t *a)
{
	for (size_t i = 0; i < n; i++)
		a[i] = q[i] + 1;
}

/* Serves channels one after another until `chans` ended: the first with a
 * 4096-byte buffer, the next with a 100-byte one. */
static int server(int chans)
{
	static uint8_t q[MANTLE_CHAN_MAX], a[MANTLE_CHAN_MAX];
	long served = 0, room_refused = 0;
	int ends[8] = {0};
	for (int c = 0; c < chans && c < 8; c++) {
		mantle_chan *ch;
		int r = mantle_chan_accept(&ch);
		if (r) {
			printf("accept %d\n", r);
			return 1;
		}
		size_t cap = c == 0 ? sizeof q : 100;
		for (;;) {
			int64_t n = mantle_chan_receive(ch, q, cap, -1);
			if (n < 0) {
				ends[c] = (int)-n;
				break;
			}
			answer_of(q, (size_t)n, a);
			r = mantle_chan_reply(ch, a, (size_t)n);
			if (r == -EMSGSIZE) { /* larger than the client's room */
				room_refused++;
				r = mantle_chan_reply(ch, a, 0);
			}
			if (r) {
				ends[c] = -r;
				break;
			}
			served++;
		}
		mantle_chan_close(ch);
	}
	printf("server served %ld roomrefused %ld ends %d %d\n", served, room_refused, ends[0],
	       ends[1]);
	return 0;
}

static int check_call(mantle_chan *ch, size_t len, unsigned seed, long *bad)
{
	static uint8_t q[MANTLE_CHAN_MAX], a[MANTLE_CHAN_MAX], want[MANTLE_CHAN_MAX];
	fill(q, len, seed);
	memset(a, 0xee, sizeof a);
	int64_t n = mantle_chan_call(ch, q, len, a, sizeof a, 5000 * MS);
	if (n < 0)
		return (int)n;
	answer_of(q, len, want);
	if ((size_t)n != len || memcmp(a, want, len) != 0)
		(*bad)++;
	return 0;
}

static int client(long rounds)
{
	mantle_chan *ch;
	int r = mantle_chan_connect(0, &ch);
	if (r) {
		printf("connect %d\n", r);
		return 1;
	}
	long ok = 0, bad = 0;
	/* every size up to the limit, then many more of mixed sizes */
	for (size_t len = 0; len <= MANTLE_CHAN_MAX; len++) {
		if ((r = check_call(ch, len, (unsigned)len, &bad)) != 0) {
			printf("call %zu: %d\n", len, r);
			return 1;
		}
		ok++;
	}
	for (long i = 0; i < rounds; i++) {
		size_t len = (size_t)((i * 2654435761u) % (MANTLE_CHAN_MAX + 1));
		if ((r = check_call(ch, len, (unsigned)i, &bad)) != 0) {
			printf("call %ld: %d\n", i, r);
			return 1;
		}
		ok++;
	}
	/* too large: refused here, the channel still works */
	static uint8_t big[MANTLE_CHAN_MAX + 1], a[64];
	int64_t over = mantle_chan_call(ch, big, sizeof big, a, sizeof a, 1000 * MS);
	int64_t huge = mantle_chan_call(ch, big, (size_t)1 << 30, a, sizeof a, 1000 * MS);
	/* a reply larger than our room: the server is refused and answers 0 bytes */
	int64_t small = mantle_chan_call(ch, "0123456789", 10, a, 4, 1000 * MS);
	if ((r = check_call(ch, 33, 1, &bad)) != 0)
		printf("after: %d\n", r);
	mantle_chan_close(ch);
	/* a second channel, to a server with 100 bytes of room */
	if ((r = mantle_chan_connect(0, &ch)) != 0) {
		printf("connect2 %d\n", r);
		return 1;
	}
	int r1 = check_call(ch, 50, 2, &bad);
	int64_t toolong = mantle_chan_call(ch, big, 200, a, sizeof a, 1000 * MS);
	int r2 = check_call(ch, 100, 3, &bad);
	mantle_chan_close(ch);
	printf("client ok %ld bad %ld over %lld huge %lld small %lld toolong %lld r1 %d r2 %d\n", ok,
	       bad, (long long)over, (long long)huge, (long long)small, (long long)toolong, r1,
	       r2);
	return 0;
}

/* ---- hostile sides, by hand ---- */

struct raw {
	uint8_t *data;
	const uint32_t *ctl;
	int dfd, cfd;
};

static int raw_open(uint64_t op, uint64_t arg, struct raw *w)
{
	long r = syscall(MANTLE_SYS_EXEC, op, arg, 0, 0, 0, 0);
	if (r < 0)
		return -errno;
	w->dfd = (int)(r & 0xffffffff);
	w->cfd = (int)(r >> 32);
	w->data = mmap(0, MANTLE_CHAN_DATA_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, w->dfd, 0);
	w->ctl = mmap(0, MANTLE_CHAN_CTL_SIZE, PROT_READ, MAP_SHARED, w->cfd, 0);
	if (w->data == MAP_FAILED || w->ctl == MAP_FAILED)
		return -EFAULT;
	return 0;
}

static _Atomic uint32_t *field(struct raw *w, int off, int f)
{
	return (_Atomic uint32_t *)(w->data + off + f);
}

#define SEQ 0
#define LEN 4
#define WAITING 8
#define ARG 16

static void wake(_Atomic uint32_t *w)
{
	syscall(SYS_futex, w, 1 /* FUTEX_WAKE */, 1 << 30, 0, 0, 0);
}

/* Waits for the client's next request number (by polling: this side
 * never sleeps, as a hostile guest need not). */
static uint32_t next_req(struct raw *w, uint32_t last)
{
	uint32_t v;
	while ((v = atomic_load(field(w, MANTLE_CHAN_CLIENT_OFF, SEQ))) == last)
		usleep(100);
	return v;
}

static void evil_answer(struct raw *w, uint32_t seq, uint32_t len, uint32_t status)
{
	atomic_store(field(w, MANTLE_CHAN_SERVER_OFF, LEN), len);
	atomic_store(field(w, MANTLE_CHAN_SERVER_OFF, ARG), status);
	atomic_store(field(w, MANTLE_CHAN_SERVER_OFF, SEQ), seq);
	wake(field(w, MANTLE_CHAN_SERVER_OFF, SEQ));
}

/* A server that breaks every rule, then dies in the middle of a call. */
static int evil_server(void)
{
	struct raw w;
	int r = raw_open(MANTLE_RPC_ACCEPT, 0, &w);
	if (r) {
		printf("evil accept %d\n", r);
		return 1;
	}
	/* what it may not do: resize the data, write the ctl page */
	int trunc = ftruncate(w.dfd, 0) == 0 ? 0 : errno;
	void *wctl = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, w.cfd, 0);
	int mapw = wctl == MAP_FAILED ? errno : 0;
	int prot = mprotect((void *)w.ctl, 4096, PROT_READ | PROT_WRITE) == 0 ? 0 : errno;
	int wr = pwrite(w.cfd, "x", 1, 8) == 1 ? 0 : errno;
	char path[64];
	snprintf(path, sizeof path, "/proc/self/fd/%d", w.cfd);
	FILE *f = fopen(path, "r+");
	int reopen = f && fwrite("x", 1, 1, f) == 1 && fflush(f) == 0 ? 0 : errno;
	printf("evil cannot: truncate %d mapwrite %d mprotect %d write %d reopen %d\n", trunc, mapw,
	       prot, wr, reopen);
	fflush(stdout);
	uint32_t s = 0;
	s = next_req(&w, s);
	evil_answer(&w, s, 0xffffffffu, 0); /* a length beyond everything */
	s = next_req(&w, s);
	evil_answer(&w, s, 3, 999999); /* a status that is no errno */
	s = next_req(&w, s);
	evil_answer(&w, s, 1000, 0); /* more than the client's room (16) */
	s = next_req(&w, s);
	/* garbage everywhere but the answer word: the client times out */
	memset(w.data + MANTLE_CHAN_SERVER_OFF + 4, 0xff, 60);
	memset(w.data + MANTLE_CHAN_RESP_OFF, 0xab, MANTLE_CHAN_MAX);
	atomic_store(field(&w, MANTLE_CHAN_SERVER_OFF, SEQ), s + 12345);
	wake(field(&w, MANTLE_CHAN_SERVER_OFF, SEQ));
	usleep(300000);
	/* late, a proper answer; then the next request too */
	memcpy(w.data + MANTLE_CHAN_RESP_OFF, "late", 4);
	evil_answer(&w, s, 4, 0);
	s = next_req(&w, s);
	memcpy(w.data + MANTLE_CHAN_RESP_OFF, "fine", 4);
	evil_answer(&w, s, 4, 0);
	/* the last request: die while the client waits */
	s = next_req(&w, s);
	kill(getpid(), SIGKILL);
	return 0;
}

static int victim_client(void)
{
	mantle_chan *ch;
	int r = mantle_chan_connect(0, &ch);
	if (r) {
		printf("connect %d\n", r);
		return 1;
	}
	char a[16];
	int64_t e1 = mantle_chan_call(ch, "a", 1, a, sizeof a, 2000 * MS);
	int64_t e2 = mantle_chan_call(ch, "b", 1, a, sizeof a, 2000 * MS);
	int64_t e3 = mantle_chan_call(ch, "c", 1, a, sizeof a, 2000 * MS);
	int64_t e4 = mantle_chan_call(ch, "d", 1, a, sizeof a, 100 * MS);
	/* the next call first takes the late answer, then gets its own */
	memset(a, 0, sizeof a);
	int64_t e5 = mantle_chan_call(ch, "e", 1, a, sizeof a, 3000 * MS);
	int fine = e5 == 4 && memcmp(a, "fine", 4) == 0;
	double t0 = now();
	int64_t e6 = mantle_chan_call(ch, "f", 1, a, sizeof a, -1);
	double waited = now() - t0;
	int64_t e7 = mantle_chan_call(ch, "g", 1, a, sizeof a, -1);
	mantle_chan_close(ch);
	printf("victim %lld %lld %lld %lld %lld fine %d dead %lld after %.3f s then %lld\n",
	       (long long)e1, (long long)e2, (long long)e3, (long long)e4, (long long)e5, fine,
	       (long long)e6, waited, (long long)e7);
	return 0;
}

/* A client that writes garbage, then dies while the server waits. */
static int evil_client(void)
{
	struct raw w;
	int r = raw_open(MANTLE_RPC_CONNECT, 0, &w);
	if (r) {
		printf("evil connect %d\n", r);
		return 1;
	}
	_Atomic uint32_t *srv = field(&w, MANTLE_CHAN_SERVER_OFF, SEQ);
	uint32_t answered[3];
	/* 1: a length beyond everything; 2: a huge room and 4 bytes; 3: a seq
	 * that jumps */
	uint32_t seqs[3] = {1, 2, 0x7ffffff0u};
	uint32_t lens[3] = {0xffffffffu, 4, 5};
	uint32_t rooms[3] = {0, 0xffffffffu, 0xffffffffu};
	for (int i = 0; i < 3; i++) {
		memcpy(w.data + MANTLE_CHAN_REQ_OFF, "ABCDE", 5);
		atomic_store(field(&w, MANTLE_CHAN_CLIENT_OFF, LEN), lens[i]);
		atomic_store(field(&w, MANTLE_CHAN_CLIENT_OFF, ARG), rooms[i]);
		atomic_store(field(&w, MANTLE_CHAN_CLIENT_OFF, SEQ), seqs[i]);
		wake(field(&w, MANTLE_CHAN_CLIENT_OFF, SEQ));
		double t0 = now();
		while (atomic_load(srv) != seqs[i] && now() - t0 < 5)
			usleep(100);
		answered[i] = atomic_load(field(&w, MANTLE_CHAN_SERVER_OFF, ARG)) << 16 |
			      atomic_load(field(&w, MANTLE_CHAN_SERVER_OFF, LEN));
	}
	printf("evilc answers %u %u %u\n", answered[0], answered[1], answered[2]);
	fflush(stdout);
	usleep(200000); /* the server now waits in receive, without a timeout */
	kill(getpid(), SIGKILL);
	return 0;
}

/* The server of evil_client: answers each request with its bytes + 1;
 * prints what it received, and how its wait ended. */
static int victim_server(void)
{
	mantle_chan *ch;
	int r = mantle_chan_accept(&ch);
	if (r) {
		printf("accept %d\n", r);
		return 1;
	}
	uint8_t q[MANTLE_CHAN_MAX], a[MANTLE_CHAN_MAX];
	long got = 0;
	int64_t n;
	size_t lens[4] = {0};
	while ((n = mantle_chan_receive(ch, q, sizeof q, -1)) >= 0) {
		if (got < 4)
			lens[got] = (size_t)n;
		got++;
		answer_of(q, (size_t)n, a);
		mantle_chan_reply(ch, a, MANTLE_CHAN_MAX); /* all the room it claimed */
	}
	printf("vserver got %ld lens %zu %zu end %lld\n", got, lens[0], lens[1], (long long)n);
	mantle_chan_close(ch);
	return 0;
}

/* A guest that may not call guest 0. */
static int intruder(void)
{
	mantle_chan *ch;
	char a[8];
	int c = mantle_chan_connect(0, &ch);
	long raw = syscall(MANTLE_SYS_EXEC, MANTLE_RPC_CONNECT, 0, 0, 0, 0, 0);
	int raw_err = raw < 0 ? errno : 0;
	int64_t old = mantle_rpc_call(0, "x", 1, a, sizeof a);
	printf("intruder connect %d raw %d old %lld\n", c, raw_err, (long long)old);
	return 0;
}

/* A server for one allowed client, then it ends. */
static int one_server(void)
{
	mantle_chan *ch;
	int r = mantle_chan_accept(&ch);
	if (r) {
		printf("accept %d\n", r);
		return 1;
	}
	uint8_t q[64], a[64];
	int64_t n = mantle_chan_receive(ch, q, sizeof q, 10000 * MS);
	if (n >= 0) {
		answer_of(q, (size_t)n, a);
		mantle_chan_reply(ch, a, (size_t)n);
	}
	n = mantle_chan_receive(ch, q, sizeof q, 10000 * MS);
	printf("one served, then %lld\n", (long long)n);
	mantle_chan_close(ch);
	return 0;
}

static int one_client(void)
{
	mantle_chan *ch;
	int r = mantle_chan_connect(0, &ch);
	if (r) {
		printf("allowed connect %d\n", r);
		return 1;
	}
	uint8_t a[8];
	int64_t n = mantle_chan_call(ch, "abc", 3, a, sizeof a, 5000 * MS);
	printf("allowed %lld %.3s\n", (long long)n, (char *)a);
	mantle_chan_close(ch);
	return 0;
}

int main(int argc, char **argv)
{
	const char *m = argc > 1 ? argv[1] : "";
	setvbuf(stdout, 0, _IOLBF, 0);
	if (!strcmp(m, "outside")) {
		mantle_chan *ch;
		printf("outside %d %d\n", mantle_chan_connect(0, &ch), mantle_chan_accept(&ch));
		return 0;
	}
	if (!strcmp(m, "server"))
		return server(argc > 2 ? atoi(argv[2]) : 2);
	if (!strcmp(m, "client"))
		return client(argc > 2 ? atol(argv[2]) : 1000);
	if (!strcmp(m, "evil-server"))
		return evil_server();
	if (!strcmp(m, "victim-client"))
		return victim_client();
	if (!strcmp(m, "evil-client"))
		return evil_client();
	if (!strcmp(m, "victim-server"))
		return victim_server();
	if (!strcmp(m, "intruder"))
		return intruder();
	if (!strcmp(m, "one-server"))
		return one_server();
	if (!strcmp(m, "one-client"))
		return one_client();
	return 2;
}
