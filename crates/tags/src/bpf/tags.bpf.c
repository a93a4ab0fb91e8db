// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * mantle tags, kernel side: tags that ride Linux IPC (mTags, seeds/000,
 * sections 2-4) built only on hooks an unmodified, locked-down kernel
 * allows: BTF tracepoints, cgroup sock_addr programs, a uprobe and task
 * iterators (no LSM, no fentry, no kprobes: see shared/platform.md).
 *
 * The model, in one paragraph. A thread's tag vector lives in `view`
 * (mmapable array indexed by tid); its TTLs, terminators and class live in
 * task storage. A thread that sends a *request* deposits a snapshot of its
 * passable tags (held, live, TTL > 0) on the channel; the thread that
 * *reads* from the channel takes the deposit and ORs it into its own vector
 * (TTL - 1, terminators and class applied). A deposit is the union of the
 * tagged requests queued on a channel; it is cleared when the reader leaves
 * the channel empty. This is policy-free mechanism: who may set what is
 * decided in apply_op(), once.
 *
 * Where deposits live, and the hooks that fill and empty them (each
 * deposit is made before the reader can take the data, or handed to the
 * channel's last reader at once when it already has: docs/tags.md):
 *   unix sockets  SK_STORAGE of the *receiving* socket, filled in
 *                 tp_btf/sk_data_ready (sender's context, after queueing,
 *                 before the wake-up), taken in tp_btf/sock_recv_length,
 *                 drained when the receive queue is empty.
 *   TCP, one host chan_dep[flow], filled in tp_btf/tcp_sendmsg_locked
 *                 before the data is queued, with its sequence range; taken
 *                 in sock_recv_length once a tagged byte is read.
 *   TCP, hosts    global tags in a TCP option (sockops), parsed into the
 *                 receiving socket's sk_rdep with the segment's range.
 *   UDP, one host chan_dep[dst port]: unconnected sends in cgroup/sendmsg4|6
 *                 (before the datagram exists), connected ones in
 *                 sock_send_length.
 *   pipes, FIFOs, eventfd, POSIX message queues: chan_dep[inode or eventfd
 *                 id] at tp_btf/sys_exit of the write/read (there is no
 *                 pipe, eventfd or mqueue tracepoint).
 *   shared memory chan_dep[object], attached at creation (memfd_create,
 *                 tmpfs open with O_CREAT, shmget) and taken, not used up,
 *                 at every shared mapping (mmap MAP_SHARED, shmat).
 *   signals       delivered at signal_generate, sender to target.
 *   fork/clone    sched_process_fork copies the creator's state (not a hop).
 *
 * Deadlock tags (section 5.3): a send that carries one towards a process
 * that holds it is reported through dl_events; a TCP connect() to such a
 * process's listener is refused with EDEADLK (cgroup/connect4|6).
 *
 * Requests vs replies: on a connected stream/seqpacket socket only the
 * side that called connect() (marked by cgroup/connect4|6|unix) sends
 * requests; datagrams, pipes, FIFOs and signals are always requests. A unix
 * socket that never called connect() and has no address (socketpair, or a
 * client connected before mantle was loaded) sends requests too.
 *
 * Cost when untagged: every send hook starts with one array load of the
 * sender's own vector and returns if it is empty; receivers return after a
 * storage lookup, or, for chan_dep channels, after a per-type count of
 * deposits and a hint bitmap (readers of pipes, eventfd and queues have no
 * count to skip on: they leave a note in chan_reader even before the first
 * deposit). The hooks are attached only while a tag exists (loader);
 * sys_exit can be left out for a whole load.
 *
 * Locking: none. Deposits and vectors change only with atomic OR/AND/XCHG
 * (a deposit's TTLs are written before its bits are published), so
 * concurrent senders, readers and deliveries never lose a bit; at worst two
 * racing senders of one tag keep the smaller of their TTLs.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "tags.h"

#ifndef bpf_core_cast /* libbpf < 1.3 headers */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym __weak;
#define bpf_core_cast(ptr, type)                                               \
	((typeof(type) *)bpf_rdonly_cast((ptr), bpf_core_type_id_kernel(type)))
#endif

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define AF_UNIX 1
#define AF_INET 2
#define AF_INET6 10
#define SOCK_STREAM 1
#define SOCK_DGRAM 2
#define SOCK_SEQPACKET 5
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define S_IFMT 00170000
#define S_IFIFO 0010000
#define S_IFREG 0100000
#define PF_KTHREAD 0x00200000
#define PF_EXITING 0x00000004
#define TCP_LISTEN 10
#define EDEADLK 35
#define BPF_LOCAL_STORAGE_GET_F_CREATE 1

/* ---------------------------------------------------------------- maps */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 32768); /* set to pid_max by the loader */
	__type(key, __u32);
	__type(value, struct mt_view);
} view SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct mt_thread);
} threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mt_ctl);
} ctl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, MT_TAGS);
	__type(key, __u32);
	__type(value, struct mt_tag);
} tags SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mt_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MT_TAGS);
	__type(key, __u32);
	__type(value, struct mt_owner);
} owners SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, MT_LIFELINE_SLOTS);
	__type(key, __u32);
	__type(value, struct mt_reception);
} lifeline SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct mt_deposit);
} sk_dep SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct mt_sock);
} sk_role SEC(".maps");

/* Tags that expire after a set time (seeds/000, section 3's suggestion). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MT_TAGS);
	__type(key, __u32);
	__type(value, struct mt_expiry);
} expiry SEC(".maps");

/* Client TCP sockets: the global tags their segments carry. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct mt_netsnap);
} sk_net SEC(".maps");

/* Receiving TCP sockets: tags that came in TCP options, by sequence range. */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct mt_deposit);
} sk_rdep SEC(".maps");

/* Listening TCP sockets: the process that called listen(). BPF_F_CLONE:
 * the sockets accept() returns inherit it (the deadlock checks' receiver). */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC | BPF_F_CLONE);
	__type(key, int);
	__type(value, __u32);
} sk_owner SEC(".maps");

/* Circular call chains found (struct mt_deadlock), for the guard. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} dl_events SEC(".maps");

/*
 * One bit per hash bucket of channel keys, set when a deposit is made for
 * a key in it and never cleared: a reader whose channel's bit is clear
 * skips the LRU hash lookup (an array load instead of hashing a 24-byte
 * key), which is what every untagged reader of every pipe and TCP socket
 * would otherwise pay once some deposit of that kind exists.
 */
#define MT_HINT_BITS 65536
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MT_HINT_BITS / 64);
	__type(key, __u32);
	__type(value, __u64);
} chan_hint SEC(".maps");

/*
 * The last thread that read a channel for which no deposit existed yet,
 * per hint bucket, with 32 more bits of the key's hash, in one word so that
 * it changes atomically. A sender whose message was taken before its
 * sys_exit hook made the first deposit of that channel (a reader blocked in
 * read() runs as soon as it is woken) finds the reader here; without it
 * that first message's tags were lost (the CI failure of
 * message_queues_and_eventfd on a fresh eventfd).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MT_HINT_BITS);
	__type(key, __u32);
	__type(value, __u64); /* low 32 bits of the key's hash << 32 | tid */
} chan_reader SEC(".maps");

/* LRU: a deposit outlives its pipe or flow only until the space is needed. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct mt_chan_key);
	__type(value, struct mt_deposit);
} chan_dep SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mt_op);
} op SEC(".maps");

/* A zeroed deposit to insert into chan_dep (too large to build on the stack
 * next to a snapshot). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mt_deposit);
} zero_dep SEC(".maps");

/* BTF for the structs only user space decodes, so that the layout test can
 * compare them with their Rust mirrors (BTF keeps no local-variable types). */
struct mt_btf_anchor {
	struct mt_thread_rec rec;
	struct mt_op op;
	struct mt_deadlock dl;
};
const volatile struct mt_btf_anchor mt_btf_anchor SEC(".rodata") = {};

/* 1: load a task's fd array through bpf_rdonly_cast(ptr, 0) (Linux 6.13+);
 * 0: bpf_probe_read_kernel. The loader retries with 0 where 1 is refused;
 * the verifier prunes the branch not taken, so the other never loads. */
const volatile __u32 mt_direct_fd = 1;

extern struct task_struct *bpf_task_from_pid(s32 pid) __ksym;
extern void bpf_task_release(struct task_struct *p) __ksym;

/* ------------------------------------------------------------- helpers */

/* A sender's passable tags at the moment it sent. */
struct snap {
	__u64 vec[MT_WORDS];
	__u8 ttl[MT_TAGS];
	__u64 lamport; /* sender's clock at the send */
	__u32 host;    /* sender's host */
};

static __always_inline struct mt_ctl *get_ctl(void)
{
	__u32 z = 0;
	return bpf_map_lookup_elem(&ctl, &z);
}

/* Bump a per-CPU counter (field of struct mt_stats). */
#define STAT(field)                                                            \
	do {                                                                   \
		__u32 _z = 0;                                                  \
		struct mt_stats *_st = bpf_map_lookup_elem(&stats, &_z);       \
		if (_st)                                                       \
			_st->field++;                                          \
	} while (0)

static __always_inline struct mt_view *view_of(__u32 tid)
{
	return bpf_map_lookup_elem(&view, &tid);
}

static __always_inline int vec_empty(const __u64 *v)
{
	__u64 any = 0;
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++)
		any |= v[w];
	return any == 0;
}

/* Index of the lowest set bit (m != 0); shared with its host unit test. */
#include "ctz64.h"

/*
 * The host of a task: this machine's id in its initial network namespace;
 * other namespaces are hosts of their own (so that namespaces joined by veth
 * pairs behave as separate machines, which is how mantle tests tags across
 * machines on one box).
 */
static __always_inline __u32 host_of_netns(struct mt_ctl *c, __u64 cookie)
{
	if (!cookie || cookie == c->host_netns)
		return c->host_id;
	/* fold the namespace cookie into the machine id (never 0) */
	return (c->host_id ^ (__u32)(cookie * 0x9e3779b97f4a7c15ULL >> 32)) | 1;
}

/*
 * Walked through a read-only (untrusted) cast: a walk from a trusted task
 * pointer makes the verifier search all of vmlinux BTF by name for
 * "<struct>__safe_trusted" at every load, in every explored state; with
 * this inlined after the tag loops that was 15 of 17 s of `tags up`.
 */
static __always_inline __u32 host_of(struct mt_ctl *c, struct task_struct *task)
{
	struct task_struct *tk = bpf_core_cast(task, struct task_struct);
	struct net *net = tk->nsproxy ? tk->nsproxy->net_ns : 0;

	return host_of_netns(c, net ? net->net_cookie : 0);
}

static __always_inline int task_is_system(struct task_struct *task, struct mt_thread *t)
{
	if (t && (t->flags & MT_F_USER_SET))
		return (t->flags & MT_F_SYSTEM) != 0;
	return (task->flags & PF_KTHREAD) || task->tgid == 1;
}

/* Runs the block after the names for each set bit of m (word w), lowest
 * first, with idx (tag bit index) and bit (mask in the word); consumes m. */
#define for_each_bit(m, w, idx, bit, ...)                                      \
	for (int _i = 0; _i < 64 && (m); _i++) {                               \
		__u32 _b = ctz64(m);                                           \
		__u64 bit = 1ULL << _b;                                        \
		__u32 idx = ((w) * 64 + _b) & (MT_TAGS - 1);                   \
		(m) &= (m) - 1;                                                \
		__VA_ARGS__                                                    \
	}

/*
 * Snapshot of the current thread's passable tags (held, live, TTL > 0), with
 * the TTLs of the set bits only. Returns 0, after one array load, when the
 * thread holds nothing.
 */
static __always_inline int take_snapshot(struct snap *s, struct mt_ctl **cp)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct mt_view *v = view_of(tid);
	struct mt_thread *t;
	struct mt_ctl *c;
	__u64 any = 0;

	if (!v || vec_empty(v->vec))
		return 0;
	c = get_ctl();
	if (!c)
		return 0;
	t = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);
	if (!t)
		return 0;
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		__u64 m = v->vec[w] & c->live[w] & ~t->spent[w];

		s->vec[w] = m;
		any |= m;
		for_each_bit(m, w, idx, bit, { s->ttl[idx] = t->ttl[idx]; })
	}
	if (!any)
		return 0;
	s->lamport = ++t->lamport; /* a send is an event of the sender */
	s->host = host_of(c, bpf_get_current_task_btf());
	*cp = c;
	return 1;
}

/* Whether the current thread holds any passable tag (cheap pre-check). */
static __always_inline int self_tagged(void)
{
	struct mt_view *v = view_of((__u32)bpf_get_current_pid_tgid());

	return v && !vec_empty(v->vec);
}

static __always_inline void ll_record(struct mt_ctl *c, __u32 idx, struct task_struct *rx,
				      __u32 tx_tid, __u32 tx_pid, __u32 kind, __u8 ttl,
				      __u64 lamport, __u32 tx_host)
{
	__u32 size, base, slot;
	__u64 n;
	struct mt_reception *r;
	struct mt_tag *tg;

	idx &= MT_TAGS - 1;
	size = c->ll_size[idx & (MT_TAGS - 1)];
	if (!size)
		return;
	base = c->ll_base[idx & (MT_TAGS - 1)];
	n = __sync_fetch_and_add(&c->ll_head[idx & (MT_TAGS - 1)], 1);
	slot = base + (__u32)(n % size);
	r = bpf_map_lookup_elem(&lifeline, &slot);
	if (!r)
		return;
	tg = bpf_map_lookup_elem(&tags, &idx);
	r->seq = 0; /* readers skip a record while it is being written */
	r->ts_ns = bpf_ktime_get_ns();
	r->rx_tid = rx->pid;
	r->rx_pid = rx->tgid;
	r->tx_tid = tx_tid;
	r->tx_pid = tx_pid;
	r->kind = kind;
	r->tag = idx;
	r->ttl = ttl;
	r->generation = tg ? tg->generation : 0;
	bpf_probe_read_kernel_str(r->rx_comm, sizeof(r->rx_comm), rx->comm);
	r->lamport = lamport;
	r->rx_host = host_of(c, rx);
	r->tx_host = tx_host;
	r->seq = n + 1;
}

/*
 * Give `task` the tags of snapshot `s`. hop: decrement TTLs (a message);
 * not for fork, which is inheritance. dep_epoch drops bits freed (and
 * perhaps reused) after the snapshot was taken. In the steady state (the
 * thread already holds the tag with at least this TTL) nothing is written.
 */
static __always_inline void deliver(struct mt_ctl *c, struct task_struct *task, struct snap *s,
				    __u32 dep_epoch, __u32 kind, __u32 tx_tid, __u32 tx_pid, int hop)
{
	__u32 tid = task->pid;
	struct mt_view *v = view_of(tid);
	struct mt_thread *t;
	int sys;

	if (!v) {
		STAT(no_view);
		return;
	}
	t = bpf_task_storage_get(&threads, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!t)
		return;
	sys = task_is_system(task, t);
	STAT(hops);
	/* a reception: max(own, message) + 1 */
	if (s->lamport > t->lamport)
		t->lamport = s->lamport;
	t->lamport++;
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		__u64 m = s->vec[w] & c->live[w];
		__u64 ok = m & ~t->term[w];
		/* Lifeline records: every message is a reception, a shared
		 * mapping only of the tags the thread did not hold (a process
		 * maps one object many times). Branch-free (shm: 1 for
		 * MT_K_SHM, else 0): a test here took mt_sys_exit past the
		 * verifier's limit of 1M instructions (from 0.49M). */
		__u64 shm = ((__u64)(kind ^ MT_K_SHM) - 1) >> 63;
		__u64 rec = c->lifeline[w] & ~(-shm & v->vec[w]);

		ok &= sys ? c->system[w] : ~c->system[w];
		if (ok != m)
			STAT(rejected);
		for_each_bit(ok, w, idx, bit, {
			__u8 nt, cur;
			int held;

			if (c->freed_epoch[idx & (MT_TAGS - 1)] > dep_epoch)
				continue;
			nt = s->ttl[idx & (MT_TAGS - 1)];
			if (hop && nt != MT_TTL_INF && nt > 0)
				nt--;
			cur = t->ttl[idx & (MT_TAGS - 1)];
			held = (v->vec[w] & bit) != 0;
			if (!held || nt > cur) {
				t->ttl[idx & (MT_TAGS - 1)] = nt;
				if (nt == 0)
					__sync_fetch_and_or(&t->spent[w], bit);
				else if (t->spent[w] & bit)
					__sync_fetch_and_and(&t->spent[w], ~bit);
				if (!held)
					__sync_fetch_and_or(&v->vec[w], bit);
				cur = nt;
			}
			if (rec & bit)
				ll_record(c, idx, task, tx_tid, tx_pid, kind, cur, t->lamport, s->host);
		})
	}
}

/*
 * Add snapshot s to deposit d. Lock-free: TTLs first, then the bits are
 * published with one atomic OR per word; concurrent depositors may race on a
 * TTL byte, which only ever loses the larger of two TTLs of one tag.
 */
static __always_inline void deposit(struct mt_deposit *d, struct snap *s, __u32 kind, __u32 epoch,
				    __u64 seq_start, __u64 seq_end)
{
	__u64 id = bpf_get_current_pid_tgid();
	int was_empty = vec_empty(d->vec);

#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		__u64 m = s->vec[w];

		for_each_bit(m, w, idx, bit, {
			if (was_empty || !(d->vec[w] & bit) ||
			    s->ttl[idx & (MT_TAGS - 1)] > d->ttl[idx & (MT_TAGS - 1)])
				d->ttl[idx & (MT_TAGS - 1)] = s->ttl[idx & (MT_TAGS - 1)];
		})
	}
	if (was_empty) {
		d->seq_start = seq_start;
		d->epoch = epoch;
	} else if (epoch < d->epoch) {
		d->epoch = epoch; /* keep the oldest snapshot's: it drops the most */
	}
	if (was_empty || (__s32)((__u32)seq_end - (__u32)d->seq_end) > 0)
		d->seq_end = seq_end;
	if (s->lamport > d->lamport || was_empty)
		d->lamport = s->lamport;
	d->tx_host = s->host;
	d->kind = kind;
	d->tx_tid = (__u32)id;
	d->tx_pid = id >> 32;
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++)
		if ((d->vec[w] & s->vec[w]) != s->vec[w])
			__sync_fetch_and_or(&d->vec[w], s->vec[w]);
}

/*
 * Copy deposit d into s; clear: the channel is empty now, so the deposit
 * ends here (the vector is swapped to 0 atomically: a concurrent deposit
 * either lands before, and is taken, or after, and stays). Returns 0 if d
 * held nothing.
 */
static __always_inline int take(struct mt_deposit *d, struct snap *s, __u32 *epoch, __u32 *tx_tid,
				__u32 *tx_pid, __u32 reader, int clear)
{
	__u64 any = 0;

#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		__u64 m = d->vec[w];

		if (m && clear)
			m = __sync_lock_test_and_set(&d->vec[w], 0);
		s->vec[w] = m;
		any |= m;
		for_each_bit(m, w, idx, bit, { s->ttl[idx & (MT_TAGS - 1)] = d->ttl[idx & (MT_TAGS - 1)]; })
	}
	if (d->last_reader != reader)
		d->last_reader = reader;
	if (!any)
		return 0;
	s->lamport = d->lamport;
	s->host = d->tx_host;
	*epoch = d->epoch;
	*tx_tid = d->tx_tid;
	*tx_pid = d->tx_pid;
	return 1;
}

/* Deliver a deposit whose data was read before the deposit was made. */
static __always_inline void deliver_late(struct mt_ctl *c, struct mt_deposit *d)
{
	struct snap s = {};
	__u32 epoch = 0, tx_tid = 0, tx_pid = 0, reader;
	struct task_struct *rx;

	reader = d->last_reader;
	if (!reader)
		return;
	if (!take(d, &s, &epoch, &tx_tid, &tx_pid, reader, 1))
		return;
	rx = bpf_task_from_pid(reader);
	if (!rx)
		return;
	deliver(c, rx, &s, epoch, d->kind, tx_tid, tx_pid, 1);
	bpf_task_release(rx);
	STAT(late);
}

/* Current thread reads deposit d; clear when the channel is left empty.
 * A global function: the verifier checks it once, not at every caller. */
__noinline int mt_receive(struct mt_deposit *d, int clear)
{
	struct snap s = {};
	__u32 epoch = 0, tx_tid = 0, tx_pid = 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct mt_ctl *c;

	if (!d || !take(d, &s, &epoch, &tx_tid, &tx_pid, tid, clear))
		return 0;
	c = get_ctl();
	if (!c)
		return 0;
	deliver(c, bpf_get_current_task_btf(), &s, epoch, d->kind, tx_tid, tx_pid, 1);
	return 0;
}

/* ------------------------------------------------- fork, exit, signals */

/* ------------------------------------------------ deadlock (section 5.3) */

/*
 * The deadlock tags of snapshot s, into dl; 0 if none. A deadlock tag marks
 * every thread of a synchronous call chain; a request carrying it towards a
 * thread that already holds it closes a circle, which on Linux can only be
 * caught at the send (the receiver of a deadlocked request never reads it).
 */
static __always_inline int snap_dl(struct mt_ctl *c, struct snap *s, __u64 *dl)
{
	__u64 any = 0;

#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		dl[w] = s->vec[w] & c->deadlock[w];
		any |= dl[w];
	}
	return any != 0;
}

/*
 * Does the receiver hold one of the deadlock tags dl? The receiving thread
 * is known only once it reads, so the candidates are the channel's last
 * reader (rx_tid) and the receiving process's main thread (rx_pid). On a
 * hit, report it (tx: the sender; comm of the current task if tx_comm).
 */
static __always_inline int dl_found(struct mt_ctl *c, const __u64 *dl, __u32 rx_pid, __u32 rx_tid,
				    __u32 kind, int denied, __u64 lamport, __u32 tx_host,
				    __u32 tx_tid, __u32 tx_pid, int tx_comm)
{
	__u32 cand[2] = {rx_tid, rx_pid};

	for (int i = 0; i < 2; i++) {
		__u32 tid = cand[i];
		struct mt_view *v;

		if (!tid || tid == tx_tid)
			continue;
		v = view_of(tid);
		if (!v)
			continue;
#pragma unroll
		for (int w = 0; w < MT_WORDS; w++) {
			__u64 hit = v->vec[w] & dl[w];
			struct mt_deadlock *e;
			struct mt_tag *tg;
			__u32 idx;

			if (!hit)
				continue;
			idx = (w * 64 + ctz64(hit)) & (MT_TAGS - 1);
			e = bpf_ringbuf_reserve(&dl_events, sizeof(*e), 0);
			if (!e)
				return 1;
			tg = bpf_map_lookup_elem(&tags, &idx);
			e->ts_ns = bpf_ktime_get_ns();
			e->lamport = lamport;
			e->tag = idx;
			e->generation = tg ? tg->generation : 0;
			e->tx_tid = tx_tid;
			e->tx_pid = tx_pid;
			e->tx_host = tx_host;
			e->rx_pid = rx_pid ? rx_pid : tid;
			e->rx_tid = tid;
			e->kind = kind;
			e->denied = denied;
			if (tx_comm)
				bpf_get_current_comm(e->tx_comm, sizeof(e->tx_comm));
			else
				__builtin_memset(e->tx_comm, 0, sizeof(e->tx_comm));
			bpf_ringbuf_submit(e, 0);
			return 1;
		}
	}
	return 0;
}

/* A send by the current thread: check its snapshot against the receiver. */
static __always_inline void dl_send(struct mt_ctl *c, struct snap *s, __u32 rx_pid, __u32 rx_tid,
				    __u32 kind)
{
	__u64 dl[MT_WORDS];
	__u64 id;

	if (!snap_dl(c, s, dl))
		return;
	id = bpf_get_current_pid_tgid();
	dl_found(c, dl, rx_pid, rx_tid, kind, 0, s->lamport, s->host, (__u32)id, id >> 32, 1);
}

/*
 * Tags a thread drops when its part of a request ends (sent: it answered
 * the request it serves; else: it read the answer to its own request).
 * Deadlock tags go in both cases (section 5.3: the chain is over for it);
 * per-request tags only when it answers, so a server keeps a request's
 * tag through the calls it makes to serve it, and serves the next request
 * untagged (issue 8: an nginx worker kept the tag of one request and
 * passed it upstream with every later one). Tags the thread holds as their
 * origin (set by a tool or the API) stay.
 */
static __always_inline __u64 answer_mask(struct mt_ctl *c, int w, int sent)
{
	return c->deadlock[w & (MT_WORDS - 1)] | (sent ? c->per_request[w & (MT_WORDS - 1)] : 0);
}

/* Whether the current thread holds a tag it would drop (two array loads
 * and the masks: cheap enough for every send and receive). */
static __always_inline int holds_answerable(int sent)
{
	struct mt_view *v = view_of((__u32)bpf_get_current_pid_tgid());
	struct mt_ctl *c;
	__u64 any = 0;

	if (!v || vec_empty(v->vec) || !(c = get_ctl()))
		return 0;
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++)
		any |= v->vec[w] & answer_mask(c, w, sent);
	return any != 0;
}

static __always_inline void answered(int sent)
{
	struct mt_view *v = view_of((__u32)bpf_get_current_pid_tgid());
	struct mt_ctl *c;
	struct mt_thread *t;

	if (!v || vec_empty(v->vec) || !(c = get_ctl()))
		return;
	t = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		__u64 drop = v->vec[w] & answer_mask(c, w, sent) & ~(t ? t->origin[w] : 0);

		if (drop)
			__sync_fetch_and_and(&v->vec[w], ~drop);
	}
}

/* The pid behind a struct pid (its number in the initial namespace). */
static __always_inline __u32 pid_nr_of(struct pid *p)
{
	return p ? bpf_core_cast(p, struct pid)->numbers[0].nr : 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(mt_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptid = (__u32)bpf_get_current_pid_tgid();
	struct mt_view *pv = view_of(ptid), *cv = view_of(child->pid);
	struct mt_thread *pt, *ct;
	struct mt_ctl *c;

	if (!cv)
		return 0;
	if (!pv) {
#pragma unroll
		for (int w = 0; w < MT_WORDS; w++)
			cv->vec[w] = 0;
		return 0;
	}
	pt = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);
	if (!pt) {
#pragma unroll
		for (int w = 0; w < MT_WORDS; w++)
			cv->vec[w] = 0;
		return 0;
	}
	c = get_ctl();
	if (!c)
		return 0;
	ct = bpf_task_storage_get(&threads, child, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!ct)
		return 0;
	__builtin_memcpy(ct->term, pt->term, sizeof(ct->term));
	__builtin_memcpy(ct->spent, pt->spent, sizeof(ct->spent));
	__builtin_memcpy(ct->ttl, pt->ttl, MT_TAGS);
	ct->flags = pt->flags;
	ct->lamport = ++pt->lamport; /* the fork is an event of the parent */
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		__u64 m = pv->vec[w] & c->live[w];
		cv->vec[w] = m;
		m &= c->lifeline[w];
		for (int i = 0; i < 64 && m; i++) {
			__u32 b = ctz64(m);
			__u32 idx = (w * 64 + b) & (MT_TAGS - 1);
			m &= m - 1;
			ll_record(c, idx, child, ptid, parent->tgid, MT_K_FORK, ct->ttl[idx & (MT_TAGS - 1)],
				  ct->lamport, host_of(c, parent));
		}
	}
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(mt_exit, struct task_struct *task)
{
	struct mt_view *v = view_of(task->pid);

	if (v) {
#pragma unroll
		for (int w = 0; w < MT_WORDS; w++)
			v->vec[w] = 0;
	}
	return 0;
}

#define SEND_SIG_PRIV ((void *)1)
#define TRACE_SIGNAL_IGNORED 1
#define TRACE_SIGNAL_OVERFLOW_FAIL 3

SEC("tp_btf/signal_generate")
int BPF_PROG(mt_signal, int sig, struct kernel_siginfo *info, struct task_struct *task, int group,
	     int result)
{
	struct snap s;
	struct mt_ctl *c;
	__u64 id;

	if (result == TRACE_SIGNAL_IGNORED || result == TRACE_SIGNAL_OVERFLOW_FAIL)
		return 0;
	if (!take_snapshot(&s, &c))
		return 0;
	/* Only signals a thread sends (kill, tgkill, sigqueue) are requests:
	 * kernel-made ones (SIGCHLD, SIGPIPE, faults) carry si_code > 0. */
	if ((unsigned long)info <= (unsigned long)SEND_SIG_PRIV)
		return 0;
	if (BPF_CORE_READ(info, si_code) > 0)
		return 0;
	id = bpf_get_current_pid_tgid();
	if (task->pid == (__u32)id)
		return 0;
	deliver(c, task, &s, c->epoch, MT_K_SIGNAL, (__u32)id, id >> 32, 1);
	return 0;
}

/* ------------------------------------------------------------- sockets */

static __always_inline __u32 unix_kind(struct sock *sk)
{
	__u16 type = sk->sk_type;

	if (type == SOCK_DGRAM)
		return MT_K_UNIX_DGRAM;
	if (type == SOCK_SEQPACKET)
		return MT_K_UNIX_SEQPACKET;
	return MT_K_UNIX_STREAM;
}

/* A reply carries only the tags made to travel with replies (--replies):
 * keep those in s; returns 0 if none is left. */
static __always_inline int replies_only(struct mt_ctl *c, struct snap *s)
{
	__u64 any = 0;

#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		s->vec[w] &= c->replies[w];
		any |= s->vec[w];
	}
	return any != 0;
}

static __always_inline int role_is_client(struct sock *sk)
{
	struct mt_sock *r = bpf_sk_storage_get(&sk_role, sk, 0, 0);

	return r && r->role == MT_ROLE_CLIENT;
}

static __always_inline __u32 fold_addr(struct sock *sk, int remote)
{
	if (sk->__sk_common.skc_family == AF_INET)
		return remote ? sk->__sk_common.skc_daddr : sk->__sk_common.skc_rcv_saddr;
	struct in6_addr a = remote ? sk->__sk_common.skc_v6_daddr : sk->__sk_common.skc_v6_rcv_saddr;
	return a.in6_u.u6_addr32[0] ^ a.in6_u.u6_addr32[1] ^ a.in6_u.u6_addr32[2] ^
	       a.in6_u.u6_addr32[3];
}

/* The host (machine, or network namespace) a socket lives in. */
static __always_inline __u32 host_of_sock(struct mt_ctl *c, struct sock *sk)
{
	struct net *net = sk->__sk_common.skc_net.net;

	return host_of_netns(c, net ? net->net_cookie : 0);
}

/*
 * Key of a TCP flow as its sender sees it (reverse = as its reader sees it),
 * within one host: flows between network namespaces are between hosts, and
 * their tags travel only in TCP options.
 */
static __always_inline void tcp_key(struct mt_ctl *c, struct sock *sk, struct mt_chan_key *k,
				    int reverse)
{
	__u64 la = fold_addr(sk, 0), ra = fold_addr(sk, 1);
	__u64 lp = sk->__sk_common.skc_num, rp = bpf_ntohs(sk->__sk_common.skc_dport);

	if (!reverse) {
		k->a = la << 32 | ra;
		k->b = lp << 16 | rp;
	} else {
		k->a = ra << 32 | la;
		k->b = rp << 16 | lp;
	}
	k->type = MT_K_TCP;
	k->pad = host_of_sock(c, sk);
}

static __always_inline __u64 key_hash(const struct mt_chan_key *k)
{
	return (k->a ^ (k->b << 17) ^ ((__u64)k->type << 40) ^ k->pad) * 0x9e3779b97f4a7c15ULL;
}

static __always_inline __u32 hint_bit(const struct mt_chan_key *k)
{
	return (__u32)(key_hash(k) >> 48); /* 16 bits: MT_HINT_BITS */
}

/*
 * Record the current thread as the reader of k, which has no deposit. The
 * store is an exchange, a full barrier, so that with the sender's atomic
 * deposit followed by its load of this slot (chan_reader_of) one of the
 * two sees the other: the reader re-checks for a deposit after this.
 */
static __always_inline void note_reader(const struct mt_chan_key *k)
{
	__u64 h = key_hash(k);
	__u32 b = (__u32)(h >> 48);
	__u64 v = h << 32 | (__u32)bpf_get_current_pid_tgid();
	__u64 *r = bpf_map_lookup_elem(&chan_reader, &b);

	if (r && *r != v)
		__sync_lock_test_and_set(r, v);
}

/* The thread note_reader recorded for k, or 0. */
static __always_inline __u32 chan_reader_of(const struct mt_chan_key *k)
{
	__u64 h = key_hash(k);
	__u32 b = (__u32)(h >> 48);
	__u64 *r = bpf_map_lookup_elem(&chan_reader, &b);
	__u64 v = r ? *r : 0;

	return v >> 32 == (__u32)h ? (__u32)v : 0;
}

/* The deposit for k if one may exist (hint bit set), else 0. */
static __always_inline struct mt_deposit *chan_find(const struct mt_chan_key *k)
{
	__u32 b = hint_bit(k), w = b / 64;
	__u64 *h = bpf_map_lookup_elem(&chan_hint, &w);

	if (!h || !(*h & (1ULL << (b % 64))))
		return 0;
	return bpf_map_lookup_elem(&chan_dep, k);
}

/* Find or make the chan_dep entry for k; count deposits per type. */
static __always_inline struct mt_deposit *chan_get(struct mt_ctl *c, struct mt_chan_key *k)
{
	struct mt_deposit *d = bpf_map_lookup_elem(&chan_dep, k);
	__u32 z = 0;

	if (d)
		return d;
	struct mt_deposit *zero = bpf_map_lookup_elem(&zero_dep, &z);
	if (!zero)
		return 0;
	bpf_map_update_elem(&chan_dep, k, zero, BPF_NOEXIST);
	d = bpf_map_lookup_elem(&chan_dep, k);
	if (!d) {
		STAT(deposit_fail);
		return 0;
	}
	{
		__u32 b = hint_bit(k), w = b / 64;
		__u64 *h = bpf_map_lookup_elem(&chan_hint, &w);

		if (h && !(*h & (1ULL << (b % 64))))
			__sync_fetch_and_or(h, 1ULL << (b % 64));
	}
	/* pipes, eventfd and queues need no count: their readers always look */
	if (k->type == MT_K_TCP) {
		if (!c->n_tcp_deps)
			__sync_fetch_and_add(&c->n_tcp_deps, 1);
	} else if (k->type == MT_K_UDP) {
		if (!c->n_udp_deps)
			__sync_fetch_and_add(&c->n_udp_deps, 1);
	} else if (k->type == MT_K_SHM || k->type == MT_KEY_SYSV) {
		if (!c->n_obj_deps)
			__sync_fetch_and_add(&c->n_obj_deps, 1);
	}
	return d;
}

/*
 * Unix sockets: a message was queued on receiving socket sk. The kernel
 * calls sk_data_ready in the sender's context, after queueing and before
 * waking the reader: the deposit is on the channel before a blocked reader
 * can take the message (sock_send_length, after the whole send, came too
 * late for a reader on another CPU). The deposit lives on the receiving
 * socket. Other families: TCP and UDP call it from softirq (any task), so
 * they use their own hooks.
 */
SEC("tp_btf/sk_data_ready")
int BPF_PROG(mt_unix_queued, struct sock *sk)
{
	struct snap s = {};
	struct mt_ctl *c;
	struct mt_deposit *d;
	struct unix_sock *u;
	struct sock *tx = 0;
	__u32 kind, rx_pid = 0;

	if (sk->__sk_common.skc_family != AF_UNIX || sk->__sk_common.skc_state == TCP_LISTEN)
		return 0;
	if (!self_tagged() || !take_snapshot(&s, &c))
		return 0;
	kind = unix_kind(sk);
	if (kind != MT_K_UNIX_DGRAM) {
		/* connected: the peer of the receiving socket is the sender's */
		u = bpf_skc_to_unix_sock(sk);
		tx = u ? u->peer : 0;
		if (tx && !role_is_client(tx)) {
			/* Not the connect() side: a reply, unless the socket has
			 * no address (socketpair, or connected before load). */
			struct unix_sock *ut = bpf_core_cast(tx, struct unix_sock);
			if (ut->addr && !replies_only(c, &s)) {
				answered(1); /* it answers: its part of the request ends */
				return 0;
			}
		}
		/* the receiving process: the sender's peer credentials (for the
		 * connect() side, the listener's) */
		if (tx)
			rx_pid = pid_nr_of(bpf_core_cast(tx, struct sock)->sk_peer_pid);
	}
	d = bpf_sk_storage_get(&sk_dep, sk, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!d) {
		STAT(deposit_fail);
		return 0;
	}
	if (kind != MT_K_UNIX_DGRAM)
		dl_send(c, &s, rx_pid, d->last_reader, kind);
	deposit(d, &s, kind, c->epoch, 0, 0);
	/* A reader spinning on another CPU took it between the queueing and
	 * this hook: hand the tags to it now. */
	if (sk->sk_receive_queue.qlen == 0)
		deliver_late(c, d);
	return 0;
}

/* Connected UDP requests, and the end of a TCP participant's part of a call chain. */
SEC("tp_btf/sock_send_length")
int BPF_PROG(mt_sock_send, struct sock *sk, int ret, int flags)
{
	struct snap s = {};
	struct mt_ctl *c;
	struct mt_deposit *d;
	__u16 family;

	if (ret <= 0)
		return 0;
	family = sk->__sk_common.skc_family;
	if (family != AF_INET && family != AF_INET6)
		return 0;
	if (sk->sk_protocol == IPPROTO_TCP) {
		/* requests deposit in tcp_sendmsg_locked, before the data can
		 * be read; a reply ends the sender's part of a call chain */
		if (holds_answerable(1) && !role_is_client(sk))
			answered(1);
		return 0;
	}
	if (!take_snapshot(&s, &c))
		return 0;
	if (sk->sk_protocol == IPPROTO_UDP) {
		struct mt_chan_key k = {};
		__u32 port = bpf_ntohs(sk->__sk_common.skc_dport);

		if (!port)
			return 0; /* unconnected: deposited by cgroup/sendmsg4/6 */
		k.a = port;
		k.type = MT_K_UDP;
		k.pad = host_of_sock(c, sk);
		d = chan_get(c, &k);
		if (d)
			deposit(d, &s, MT_K_UDP, c->epoch, 0, 0);
	}
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(mt_sock_recv, struct sock *sk, int ret, int flags)
{
	struct mt_ctl *c;
	struct mt_chan_key k = {};
	struct mt_deposit *d;
	__u16 family;

	if (ret <= 0)
		return 0;
	family = sk->__sk_common.skc_family;
	if (family == AF_UNIX) {
		/* data on the connect() side of a connection: a reply (the
		 * socket-storage lookup only for threads in a call chain) */
		if (holds_answerable(0) && sk->sk_type != SOCK_DGRAM && role_is_client(sk))
			answered(0);
		d = bpf_sk_storage_get(&sk_dep, sk, 0, 0);
		if (!d)
			return 0;
		if (vec_empty(d->vec)) {
			if (d->last_reader != (__u32)bpf_get_current_pid_tgid())
				d->last_reader = (__u32)bpf_get_current_pid_tgid();
			return 0;
		}
		/* everything queued is read: the deposit ends here */
		mt_receive(d, sk->sk_receive_queue.qlen == 0);
		return 0;
	}
	if (family != AF_INET && family != AF_INET6)
		return 0;
	c = get_ctl();
	if (!c)
		return 0;
	if (sk->sk_protocol == IPPROTO_TCP) {
		struct tcp_sock *tp = bpf_core_cast(sk, struct tcp_sock);
		__u32 copied, start, end;

		if (holds_answerable(0) && role_is_client(sk))
			answered(0); /* data on the connect() side: a reply */

		/* Tags that came from another host in TCP options (only while
		 * a cluster table is loaded can there be any). */
		d = c->global[0] ? bpf_sk_storage_get(&sk_rdep, sk, 0, 0) : 0;
		if (d && !vec_empty(d->vec)) {
			copied = tp->copied_seq;
			if ((__s32)(copied - (__u32)d->seq_start) > 0)
				mt_receive(d, (__s32)(copied - (__u32)d->seq_end) >= 0);
		}
		if (!c->n_tcp_deps)
			return 0;
		tcp_key(c, sk, &k, 1);
		d = chan_find(&k);
		if (!d || vec_empty(d->vec))
			return 0;
		copied = tp->copied_seq;
		start = d->seq_start;
		end = d->seq_end;
		/* read any tagged byte: deliver; read them all: done */
		if ((__s32)(copied - start) <= 0)
			return 0;
		mt_receive(d, (__s32)(copied - end) >= 0);
		return 0;
	}
	if (sk->sk_protocol == IPPROTO_UDP) {
		struct udp_sock *up = bpf_core_cast(sk, struct udp_sock);
		int empty;

		if (!c->n_udp_deps)
			return 0;
		k.a = sk->__sk_common.skc_num;
		k.type = MT_K_UDP;
		k.pad = host_of_sock(c, sk);
		d = chan_find(&k);
		if (!d || vec_empty(d->vec))
			return 0;
		empty = sk->sk_receive_queue.qlen == 0 && up->reader_queue.qlen == 0;
		mt_receive(d, empty);
	}
	return 0;
}

/* ------------------------- pipes, FIFOs, eventfd, message queues, shm */

/*
 * All of these are seen at the exit of the system call that used them
 * (there is no tracepoint inside pipe_read, eventfd_write, mq_timedsend or
 * do_mmap, and no kprobes here: ../shared/platform.md). sys_exit is
 * attached only while a tag exists; each case is a global function, so the
 * verifier checks it once rather than once per path of the dispatcher.
 */
#define NR_read 0
#define NR_write 1
#define NR_open 2
#define NR_mmap 9
#define NR_readv 19
#define NR_writev 20
#define NR_shmget 29
#define NR_shmat 30
#define NR_creat 85
#define NR_mq_timedsend 242
#define NR_mq_timedreceive 243
#define NR_openat 257
#define NR_memfd_create 319
#define NR_openat2 437

#define TMPFS_MAGIC 0x01021994  /* /dev/shm (shm_open) */
#define MQUEUE_MAGIC 0x19800202 /* POSIX message queues */
#define MT_FMODE_CREATED 0x100000 /* f_mode: this open created the file */
#define MT_MAP_SHARED 0x01      /* also set in MAP_SHARED_VALIDATE */
#define MT_IPC_CREAT 01000

/*
 * The file behind fd of the current task, or 0. One load for the fd array
 * (an array of pointers, which BTF cannot walk: a read-only cast, or a
 * helper call in compat mode); the rest are direct loads through a
 * read-only cast.
 */
static __always_inline struct file *fd_file(int fd)
{
	struct task_struct *task = bpf_core_cast(bpf_get_current_task_btf(), struct task_struct);
	struct fdtable *fdt = task->files->fdt;
	struct file *f = 0;

	if (!fdt || fd < 0 || fd >= fdt->max_fds)
		return 0;
	if (mt_direct_fd) {
		/* A read-only cast to void makes the fd array loadable directly
		 * (an exception-table load, no helper call: ~60 ns saved). */
		struct file **fds = bpf_rdonly_cast(fdt->fd, 0);
		f = fds[fd & 0xffffff];
	} else {
		bpf_probe_read_kernel(&f, sizeof(f), &fdt->fd[fd]);
	}
	return f ? bpf_core_cast(f, struct file) : 0;
}

/* "[eventfd]": the name of every eventfd's anonymous-inode file. */
static __always_inline int is_eventfd(struct file *f)
{
	const char *n = bpf_rdonly_cast(f->f_path.dentry->d_name.name, 0);
	/* little-endian "[eventfd" */
	return n && *(const __u64 *)n == 0x6466746e6576655bULL && n[8] == ']' && n[9] == 0;
}

/*
 * A message channel behind file f: pipe/FIFO, eventfd or POSIX message
 * queue. Fills the chan_dep key and returns the kind (0: none of these).
 */
static __always_inline __u32 chan_of(struct file *f, struct mt_chan_key *k)
{
	struct inode *ino = f->f_inode;
	__u32 fmt;

	if (!ino)
		return 0;
	k->pad = 0;
	fmt = ino->i_mode & S_IFMT;
	if (fmt == S_IFIFO) {
		k->a = ino->i_sb->s_dev;
		k->b = ino->i_ino;
		k->type = MT_K_PIPE;
		return MT_K_PIPE;
	}
	/* queue inodes are regular files, eventfd's anonymous inode has no
	 * type bits: sockets, devices and the rest stop here, cheaply */
	if (fmt != S_IFREG && fmt != 0)
		return 0;
	if (fmt == S_IFREG && ino->i_sb->s_magic == MQUEUE_MAGIC) {
		k->a = ino->i_sb->s_dev;
		k->b = ino->i_ino;
		k->type = MT_K_MQ;
		return MT_K_MQ;
	}
	if (fmt == 0 && is_eventfd(f)) {
		k->a = bpf_core_cast(f->private_data, struct eventfd_ctx)->id;
		k->b = 0;
		k->type = MT_K_EVENTFD;
		return MT_K_EVENTFD;
	}
	return 0;
}

/* Whether the channel is empty now: everything sent has been read. */
static __always_inline int chan_drained(struct file *f, __u32 kind)
{
	struct inode *ino = f->f_inode;

	if (kind == MT_K_PIPE) {
		struct pipe_inode_info *p = bpf_core_cast(ino->i_pipe, struct pipe_inode_info);
		return p->head == p->tail;
	}
	if (kind == MT_K_EVENTFD)
		return bpf_core_cast(f->private_data, struct eventfd_ctx)->count == 0;
	/* the queue's bookkeeping around its inode */
	struct mqueue_inode_info *mq = bpf_core_cast(
		(void *)ino - bpf_core_field_offset(struct mqueue_inode_info, vfs_inode),
		struct mqueue_inode_info);
	return mq->attr.mq_curmsgs == 0;
}

/* The message channel behind fd and its key, if it is one the system call
 * serves (mq_only: mq_timedsend/receive, else read/write); else 0. */
static __always_inline struct file *msg_chan(int fd, int mq_only, struct mt_chan_key *k, __u32 *kind)
{
	struct file *f = fd_file(fd);

	if (!f)
		return 0;
	*kind = chan_of(f, k);
	if (!*kind || (mq_only != (*kind == MT_K_MQ)))
		return 0;
	return f;
}

/*
 * A request sent on fd (write/writev, mq_timedsend): deposit the sender's
 * tags on the channel; if the reader already took the message (it ran
 * between the send and this hook), hand the tags to that reader now.
 */
__noinline int mt_on_send(int fd, int mq_only)
{
	struct mt_chan_key k;
	struct snap s = {};
	struct mt_deposit *d;
	struct mt_ctl *c;
	struct file *f;
	__u32 kind;

	if (!self_tagged())
		return 0;
	f = msg_chan(fd, mq_only, &k, &kind);
	if (!f)
		return 0;
	if (!take_snapshot(&s, &c))
		return 0;
	d = chan_get(c, &k);
	if (!d)
		return 0;
	if (!d->last_reader)
		d->last_reader = chan_reader_of(&k);
	dl_send(c, &s, 0, d->last_reader, kind);
	deposit(d, &s, kind, c->epoch, 0, 0);
	if (chan_drained(f, kind)) {
		/* after the deposit: a reader that found none noted itself */
		if (!d->last_reader)
			d->last_reader = chan_reader_of(&k);
		deliver_late(c, d);
	}
	return 0;
}

/* A message received from fd (read/readv, mq_timedreceive). */
__noinline int mt_on_recv(int fd, int mq_only)
{
	struct mt_chan_key k;
	struct mt_deposit *d;
	struct mt_ctl *c = get_ctl();
	struct file *f;
	__u32 kind;

	if (!c)
		return 0;
	f = msg_chan(fd, mq_only, &k, &kind);
	if (!f)
		return 0;
	d = chan_find(&k);
	if (!d) {
		/* the sender's hook may not have run yet: leave a note, then
		 * look again (see note_reader) */
		note_reader(&k);
		d = chan_find(&k);
		if (!d)
			return 0;
	}
	if (vec_empty(d->vec)) {
		__u32 tid = (__u32)bpf_get_current_pid_tgid();

		/* as in note_reader: publish, then look again, so that a
		 * sender depositing now either sees this reader or is seen */
		if (d->last_reader == tid)
			return 0;
		__sync_lock_test_and_set(&d->last_reader, tid);
		if (vec_empty(d->vec))
			return 0;
	}
	mt_receive(d, chan_drained(f, kind));
	return 0;
}

/* Key of a shared-memory object: its inode (memfd, /dev/shm, a file), or
 * a SysV segment's id in the caller's IPC namespace. */
static __always_inline void shm_key(struct mt_chan_key *k, struct file *f, long sysv_id)
{
	if (f) {
		struct inode *ino = f->f_inode;

		k->a = ino ? ino->i_sb->s_dev : 0;
		k->b = ino ? ino->i_ino : 0;
		k->type = MT_K_SHM;
	} else {
		struct task_struct *t = bpf_core_cast(bpf_get_current_task_btf(), struct task_struct);

		k->a = (__u64)sysv_id;
		k->b = t->nsproxy && t->nsproxy->ipc_ns ? t->nsproxy->ipc_ns->ns.inum : 0;
		k->type = MT_KEY_SYSV;
	}
	k->pad = 0;
}

/*
 * A shared-memory object was created by a tagged thread (memfd_create,
 * shm_open, shmget with IPC_CREAT): the object takes the creator's tags
 * (paper, section 4), once. A shared mapping of an object that has tags
 * gives them to the mapping thread. Nothing else attaches tags to an
 * object: an object created untagged never acquires them from whoever maps
 * it, and writes into shared memory are not requests (issue 8: one tagged
 * query tagged a whole PostgreSQL instance through the segment its
 * untagged postmaster had made). fd < 0: SysV id in sysv_id. created: 1 at
 * creation, 0 at a mapping.
 */
__noinline int mt_on_shm(int fd, long sysv_id, int created)
{
	struct mt_chan_key k;
	struct snap s = {};
	struct mt_deposit *d;
	struct mt_ctl *c;
	struct file *f = 0;

	if (fd >= 0) {
		f = fd_file(fd);
		/* Only regular files are shared memory between processes (memfd,
		 * tmpfs, files). Every BPF map and perf ring sits on one anonymous
		 * inode (no file type) and /dev/zero is a character device: keyed
		 * by inode, each would be one false channel between all their
		 * users (issue 8). */
		if (!f || !f->f_inode || (f->f_inode->i_mode & S_IFMT) != S_IFREG)
			return 0;
	}
	shm_key(&k, f, sysv_id);
	if (created) {
		if (!take_snapshot(&s, &c))
			return 0;
		d = chan_get(c, &k);
		if (d)
			deposit(d, &s, MT_K_SHM, c->epoch, 0, 0);
		return 0;
	}
	c = get_ctl();
	if (!c || !c->n_obj_deps)
		return 0;
	d = chan_find(&k);
	if (!d || vec_empty(d->vec) || d->tx_tid == (__u32)bpf_get_current_pid_tgid())
		return 0;
	mt_receive(d, 0);
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(mt_sys_exit, struct pt_regs *regs, long ret)
{
	long nr;

	if (ret < 0)
		return 0;
	nr = regs->orig_ax;
	switch (nr) {
	case NR_write:
	case NR_writev:
		return ret ? mt_on_send((int)regs->di, 0) : 0;
	case NR_read:
	case NR_readv:
		return ret ? mt_on_recv((int)regs->di, 0) : 0;
	case NR_mq_timedsend:
		return mt_on_send((int)regs->di, 1);
	case NR_mq_timedreceive:
		return mt_on_recv((int)regs->di, 1);
	case NR_memfd_create:
		return self_tagged() ? mt_on_shm((int)ret, 0, 1) : 0;
	case NR_open:
	case NR_openat:
	case NR_openat2:
	case NR_creat: {
		/* shm_open: a file that this call created on a tmpfs */
		struct file *f;

		if (!self_tagged() || !(f = fd_file((int)ret)))
			return 0;
		if (!(f->f_mode & MT_FMODE_CREATED) || !f->f_inode ||
		    f->f_inode->i_sb->s_magic != TMPFS_MAGIC)
			return 0;
		return mt_on_shm((int)ret, 0, 1);
	}
	case NR_shmget:
		return (regs->dx & MT_IPC_CREAT) && self_tagged() ? mt_on_shm(-1, ret, 1) : 0;
	case NR_mmap:
		return (regs->r10 & MT_MAP_SHARED) && (int)regs->r8 >= 0 ?
			       mt_on_shm((int)regs->r8, 0, 0) : 0;
	case NR_shmat:
		return mt_on_shm(-1, (long)regs->di, 0);
	}
	return 0;
}

/* ------------------------------------------------- tags across hosts */

/*
 * A TCP send, before its data is queued (the tracepoint fires at the top of
 * each round of tcp_sendmsg_locked's copy loop): the request's tags are
 * deposited for the flow on this host with the sequence range the message
 * will take, so a reader can never take the bytes before the tags are there;
 * and, for the sockops program, the global tags are kept on the socket to go
 * into every data segment's header (tags across hosts).
 */
SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(mt_tcp_sendmsg, struct sock *sk, struct msghdr *msg, struct sk_buff *skb, int size_goal)
{
	struct snap s = {};
	struct mt_ctl *c = 0;
	struct mt_netsnap *ns;
	__u64 g = 0;

	if (self_tagged() && take_snapshot(&s, &c) && (role_is_client(sk) || replies_only(c, &s))) {
		struct tcp_sock *tp = bpf_core_cast(sk, struct tcp_sock);
		struct mt_chan_key k;
		struct mt_deposit *d;
		__u32 start = tp->write_seq;
		__u32 left = bpf_core_cast(msg, struct msghdr)->msg_iter.count;

		tcp_key(c, sk, &k, 0);
		d = chan_get(c, &k);
		if (d) {
			struct mt_sock *r = bpf_sk_storage_get(&sk_role, sk, 0, 0);

			dl_send(c, &s, r ? r->peer_pid : 0, d->last_reader, MT_K_TCP);
			deposit(d, &s, MT_K_TCP, c->epoch, start, start + left);
		}
		g = s.vec[0] & c->global[0] & ((1ULL << MT_GLOBAL_BITS) - 1);
	} else {
		c = get_ctl();
	}
	if (!c || !c->global[0])
		return 0;
	if (!g) {
		/* an untagged send: stop carrying what an earlier one left */
		ns = bpf_sk_storage_get(&sk_net, sk, 0, 0);
		if (ns && ns->vec)
			ns->vec = 0;
		return 0;
	}
	ns = bpf_sk_storage_get(&sk_net, sk, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!ns)
		return 0;
	__u64 m = g;
	for_each_bit(m, 0, idx, bit, { ns->ttl[idx & (MT_GLOBAL_BITS - 1)] = s.ttl[idx]; })
	ns->lamport = (__u32)s.lamport;
	ns->host = s.host;
	ns->pid = bpf_get_current_pid_tgid() >> 32;
	ns->vec = g;
	return 0;
}

static __always_inline int opt_build(struct mt_netsnap *ns, struct mt_tcpopt *o, __u32 digest)
{
	__u64 m = ns->vec;
	int n = 0;

	o->kind = MT_OPT_KIND;
	o->magic = bpf_htons(MT_OPT_MAGIC);
	o->digest = bpf_htons((__u16)digest);
	o->vec = bpf_htons(ns->vec);
	o->host = bpf_htonl(ns->host);
	o->lamport = bpf_htonl(ns->lamport);
	o->pid = bpf_htonl(ns->pid);
	for (int i = 0; i < MT_OPT_MAX_TTLS && m; i++) {
		__u32 b = ctz64(m);

		m &= m - 1;
		o->ttl[i] = ns->ttl[b & (MT_GLOBAL_BITS - 1)];
		n++;
	}
	o->len = MT_OPT_FIXED + n;
	return o->len;
}

/*
 * Both sides of every TCP connection made while global tags exist: enable
 * the header-option callbacks (only then: sockets pay per segment), write
 * the option on data segments of senders that hold global tags, and parse it
 * on arrival into the receiving socket's deposit, with the segment's
 * sequence range, so that sock_recv_length delivers exactly as for local TCP.
 */
SEC("sockops")
int mt_sockops(struct bpf_sock_ops *skops)
{
	struct mt_ctl *c = get_ctl();
	struct mt_netsnap *ns;
	struct mt_tcpopt o = {};

	if (!c)
		return 1;
	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		if (c->global[0])
			bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
							 BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG |
							 BPF_SOCK_OPS_PARSE_UNKNOWN_HDR_OPT_CB_FLAG);
		return 1;
	case BPF_SOCK_OPS_HDR_OPT_LEN_CB:
	case BPF_SOCK_OPS_WRITE_HDR_OPT_CB: {
		struct bpf_sock *sk = skops->sk;
		int len;

		if (!sk)
			return 1;
		ns = bpf_sk_storage_get(&sk_net, sk, 0, 0);
		if (!ns || !ns->vec)
			return 1;
		len = opt_build(ns, &o, c->cluster_digest);
		if (skops->op == BPF_SOCK_OPS_HDR_OPT_LEN_CB) {
			if (bpf_reserve_hdr_opt(skops, len, 0))
				STAT(opt_nospace);
			return 1;
		}
		if (len > sizeof(o))
			return 1;
		if (bpf_store_hdr_opt(skops, &o, len & 0x3f, 0) == 0)
			STAT(opt_written);
		else
			STAT(opt_nospace);
		return 1;
	}
	case BPF_SOCK_OPS_PARSE_HDR_OPT_CB: {
		struct bpf_sock *sk = skops->sk;
		struct mt_deposit *d;
		struct snap s = {};
		struct tcphdr *th;
		__u32 seq, doff, payload;
		__u16 vec;
		int ret;

		o.kind = MT_OPT_KIND;
		o.len = 4; /* search key: kind, then the 2-byte ExID */
		o.magic = bpf_htons(MT_OPT_MAGIC);
		ret = bpf_load_hdr_opt(skops, &o, sizeof(o), 0);
		if (ret < MT_OPT_FIXED || !sk)
			return 1;
		if (bpf_ntohs(o.digest) != (__u16)c->cluster_digest) {
			STAT(opt_mismatch);
			return 1;
		}
		/* from this very host: the local mechanism delivers it */
		if (bpf_ntohl(o.host) == host_of_netns(c, bpf_get_netns_cookie(skops)))
			return 1;
		th = skops->skb_data;
		if ((void *)(th + 1) > skops->skb_data_end)
			return 1;
		seq = bpf_ntohl(th->seq);
		doff = th->doff * 4;
		if (skops->skb_len <= doff)
			return 1; /* no payload */
		payload = skops->skb_len - doff;
		vec = bpf_ntohs(o.vec);
		s.vec[0] = vec & c->global[0];
		__u64 m = s.vec[0];
		int i = 0;
		for_each_bit(m, 0, idx, bit, {
			s.ttl[idx] = i < MT_OPT_MAX_TTLS && i < ret - MT_OPT_FIXED ? o.ttl[i & (MT_OPT_MAX_TTLS - 1)] : 1;
			i++;
		})
		s.lamport = bpf_ntohl(o.lamport);
		s.host = bpf_ntohl(o.host);
		if (s.vec[0] & c->deadlock[0]) {
			/* A chain's request from another host, to a socket whose
			 * owner holds the chain's tag: the circle closes here. */
			__u64 dl[MT_WORDS] = {s.vec[0] & c->deadlock[0]};
			__u32 *own = bpf_sk_storage_get(&sk_owner, sk, 0, 0);

			if (own)
				dl_found(c, dl, *own, 0, MT_K_TCP, 0, s.lamport, s.host, 0,
					 bpf_ntohl(o.pid), 0);
		}
		d = bpf_sk_storage_get(&sk_rdep, sk, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!d)
			return 1;
		deposit(d, &s, MT_K_TCP, c->epoch, seq, seq + payload);
		d->tx_tid = 0;
		d->tx_pid = bpf_ntohl(o.pid);
		STAT(opt_parsed);
		return 1;
	}
	}
	return 1;
}

/* ------------------------------------------- cgroup connect / sendmsg */

static __always_inline int mark_client(struct bpf_sock_addr *ctx)
{
	struct bpf_sock *sk = ctx->sk;
	struct mt_sock *r;

	if (!sk)
		return 1;
	r = bpf_sk_storage_get(&sk_role, sk, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (r)
		r->role = MT_ROLE_CLIENT;
	return 1;
}

/*
 * A TCP connect on this host: remember who listens at the other end (for
 * the deadlock check of later sends), and refuse the connection with
 * EDEADLK if the caller's call chain already holds that process: the one
 * deny point Linux offers without BPF LSM (../shared/platform.md).
 */
static __always_inline int tcp_connect(struct bpf_sock_addr *ctx, int v6)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct bpf_sock_tuple t = {};
	struct mt_view *v = view_of(tid);
	struct bpf_sock *sk = ctx->sk, *l;
	struct mt_ctl *c;
	struct mt_sock *r;
	__u64 dl[MT_WORDS];
	__u64 any = 0;
	__u32 owner = 0, *own;

	mark_client(ctx);
	if (!v || vec_empty(v->vec) || !sk)
		return 1;
	c = get_ctl();
	if (!c)
		return 1;
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		dl[w] = v->vec[w] & c->deadlock[w] & c->live[w];
		any |= dl[w];
	}
	if (!any)
		return 1;
	if (v6) {
		t.ipv6.daddr[0] = ctx->user_ip6[0];
		t.ipv6.daddr[1] = ctx->user_ip6[1];
		t.ipv6.daddr[2] = ctx->user_ip6[2];
		t.ipv6.daddr[3] = ctx->user_ip6[3];
		t.ipv6.dport = (__u16)ctx->user_port;
		l = bpf_sk_lookup_tcp(ctx, &t, sizeof(t.ipv6), BPF_F_CURRENT_NETNS, 0);
	} else {
		t.ipv4.daddr = ctx->user_ip4;
		t.ipv4.dport = (__u16)ctx->user_port;
		l = bpf_sk_lookup_tcp(ctx, &t, sizeof(t.ipv4), BPF_F_CURRENT_NETNS, 0);
	}
	if (!l)
		return 1;
	own = bpf_sk_storage_get(&sk_owner, l, 0, 0);
	if (own)
		owner = *own;
	bpf_sk_release(l);
	r = bpf_sk_storage_get(&sk_role, sk, 0, 0);
	if (r)
		r->peer_pid = owner;
	if (owner && dl_found(c, dl, owner, 0, MT_K_TCP, 1, 0, c->host_id, tid,
			      bpf_get_current_pid_tgid() >> 32, 1)) {
		bpf_set_retval(-EDEADLK);
		return 0;
	}
	return 1;
}

SEC("cgroup/connect4")
int mt_connect4(struct bpf_sock_addr *ctx)
{
	return tcp_connect(ctx, 0);
}

SEC("cgroup/connect6")
int mt_connect6(struct bpf_sock_addr *ctx)
{
	return tcp_connect(ctx, 1);
}

/* listen(): the socket's owner, inherited by the sockets it accepts. */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(mt_listen, struct sock *sk, int oldstate, int newstate)
{
	__u32 *own;

	if (newstate != TCP_LISTEN)
		return 0;
	own = bpf_sk_storage_get(&sk_owner, sk, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (own)
		*own = bpf_get_current_pid_tgid() >> 32;
	return 0;
}

SEC("cgroup/connect_unix")
int mt_connect_unix(struct bpf_sock_addr *ctx)
{
	return mark_client(ctx);
}

/*
 * Unconnected UDP (sendto with an address): deposit the sender's tags for
 * the destination port before the datagram exists, so a reader spinning on
 * another CPU cannot take it first. (Connected UDP sockets have no such
 * hook: their deposit is made after the send, in sock_send_length.)
 */
static __always_inline int note_udp_dst(struct bpf_sock_addr *ctx)
{
	struct mt_chan_key k = {};
	struct snap s = {};
	struct mt_deposit *d;
	struct mt_ctl *c;

	if (ctx->protocol != IPPROTO_UDP || !self_tagged() || !take_snapshot(&s, &c))
		return 1;
	k.a = bpf_ntohs((__u16)ctx->user_port);
	k.type = MT_K_UDP;
	k.pad = host_of_netns(c, bpf_get_netns_cookie(ctx));
	d = chan_get(c, &k);
	if (d)
		deposit(d, &s, MT_K_UDP, c->epoch, 0, 0);
	return 1;
}

SEC("cgroup/sendmsg4")
int mt_sendmsg4(struct bpf_sock_addr *ctx)
{
	return note_udp_dst(ctx);
}

SEC("cgroup/sendmsg6")
int mt_sendmsg6(struct bpf_sock_addr *ctx)
{
	return note_udp_dst(ctx);
}

/* ------------------------------------------------------------ operations */

#define CLOCK_MONOTONIC 1

/*
 * A LIVE tag stops travelling at once and becomes DELETING; the next sweep
 * clears it from its holders and frees the bit. The one way out of LIVE:
 * expiry, an owner's self-operation and root's mt_admin all come here.
 */
static __always_inline int retire(struct mt_ctl *c, struct mt_tag *tg, __u32 idx)
{
	__u32 w = (idx / 64) & (MT_WORDS - 1);
	__u64 bit = 1ULL << (idx % 64);

	if (__sync_val_compare_and_swap(&tg->state, MT_ST_LIVE, MT_ST_DELETING) != MT_ST_LIVE)
		return -MT_ENOENT;
	__sync_fetch_and_or(&c->deleting[w], bit);
	__sync_fetch_and_and(&c->live[w], ~bit);
	return 0;
}

/*
 * A tag's time is up: it stops travelling at once (no longer live) and
 * becomes DELETING; the next sweep (any table command, or reading the sweep
 * iterator) clears it from its holders and frees the bit. A timer armed for
 * an earlier generation of the bit does nothing.
 */
static int expire_cb(void *map, __u32 *key, struct mt_expiry *e)
{
	__u32 idx = *key & (MT_TAGS - 1);
	struct mt_tag *tg = bpf_map_lookup_elem(&tags, &idx);
	struct mt_ctl *c = get_ctl();

	if (!tg || !c || tg->generation != e->generation)
		return 0;
	retire(c, tg, idx);
	return 0;
}

/*
 * Arms a tag's expiry timer. A BPF_PROG_RUN (syscall) program because the
 * kernel refuses timers in tracing programs; root runs it (pinned 0600).
 */
SEC("syscall")
int mt_arm_expiry(struct mt_expire_args *a)
{
	__u32 idx = a->tag & (MT_TAGS - 1);
	struct mt_tag *tg = bpf_map_lookup_elem(&tags, &idx);
	struct mt_expiry *e = bpf_map_lookup_elem(&expiry, &idx);
	struct mt_ctl *c = get_ctl();

	if (a->tag >= MT_TAGS || !tg || !e || !c || tg->state != MT_ST_LIVE)
		return -MT_ENOENT;
	e->generation = tg->generation;
	bpf_timer_init(&e->timer, &expiry, CLOCK_MONOTONIC);
	bpf_timer_set_callback(&e->timer, expire_cb);
	if (bpf_timer_start(&e->timer, (__u64)a->ms * 1000000ULL, 0))
		return -MT_EINVAL;
	return 0;
}

static __always_inline void set_bit_to(__u64 *word, __u64 bit, int on)
{
	if (on)
		__sync_fetch_and_or(word, bit);
	else
		__sync_fetch_and_and(word, ~bit);
}

/*
 * Root's changes of the table (BPF_PROG_RUN; the pin is root-only). `ctl`
 * and `tags` are frozen, so no user space can write them, root's included:
 * this program is the one writer besides the hooks. An entry is filled
 * before its state becomes LIVE and its live bit is set, so the hooks never
 * see a half-written tag.
 */
SEC("syscall")
int mt_admin(struct mt_admin *a)
{
	__u32 idx = a->tag & (MT_TAGS - 1);
	__u32 w = idx / 64;
	__u64 bit = 1ULL << (idx % 64);
	struct mt_tag *tg = bpf_map_lookup_elem(&tags, &idx);
	struct mt_ctl *c = get_ctl();
	__u32 f = a->flags;

	if (!tg || !c || w >= MT_WORDS)
		return -MT_EINVAL;
	switch (a->code) {
	case MT_ADM_DIGEST:
		c->cluster_digest = a->digest;
		return 0;
	case MT_ADM_DELETE:
		if (a->tag >= MT_TAGS)
			return -MT_EINVAL;
		return retire(c, tg, idx);
	case MT_ADM_INSTALL:
		break;
	default:
		return -MT_EINVAL;
	}
	if (a->tag >= MT_TAGS || a->ll_size > MT_LIFELINE_SLOTS ||
	    a->ll_base > MT_LIFELINE_SLOTS - a->ll_size)
		return -MT_EINVAL;
	if ((f & MT_F_GLOBAL) && idx >= MT_GLOBAL_BITS)
		return -MT_EINVAL;
	if (tg->state != MT_ST_FREE)
		return -MT_EEXIST;
	/* masked at each use: the compiler spills idx and the verifier then
	 * forgets its bound */
	c->default_ttl[idx & (MT_TAGS - 1)] = a->default_ttl;
	c->ll_base[idx & (MT_TAGS - 1)] = a->ll_base;
	c->ll_size[idx & (MT_TAGS - 1)] = a->ll_size;
	__sync_fetch_and_and(&c->ll_head[idx & (MT_TAGS - 1)], 0);
	set_bit_to(&c->system[w], bit, f & MT_F_SYSTEM);
	set_bit_to(&c->replies[w], bit, f & MT_F_REPLIES);
	set_bit_to(&c->lifeline[w], bit, a->ll_size != 0);
	set_bit_to(&c->deadlock[w], bit, f & MT_F_DEADLOCK);
	set_bit_to(&c->global[w], bit, f & MT_F_GLOBAL);
	set_bit_to(&c->anyone[w], bit, f & MT_F_ANYONE);
	set_bit_to(&c->per_request[w], bit, f & MT_F_PER_REQUEST);
	__builtin_memcpy(tg->name, a->name, MT_NAME_LEN);
	tg->name[MT_NAME_LEN - 1] = 0;
	tg->flags = f | (a->ll_size ? MT_F_LIFELINE : 0);
	tg->created_ns = a->created_ns;
	tg->generation++;
	/* publish: the state word, then the live bit, after every field */
	if (__sync_val_compare_and_swap(&tg->state, MT_ST_FREE, MT_ST_LIVE) != MT_ST_FREE)
		return -MT_EEXIST;
	__sync_fetch_and_or(&c->live[w], bit);
	return 0;
}

/* The calling thread's uid owns tag idx (mt_owner, root-only map). */
static __always_inline int is_owner(__u32 idx)
{
	struct mt_owner *o = bpf_map_lookup_elem(&owners, &idx);

	return o && o->uid == (__u32)bpf_get_current_uid_gid();
}

/*
 * A TTL a thread sets on itself is at most the tag's own TTL unless the
 * caller is root or the tag's owner (mTags section 9: only the owner
 * changes a tag's features), so "travels two hops at most" holds against
 * every other user.
 */
static __always_inline __u8 ttl_cap(struct mt_ctl *c, __u32 idx, __u32 ttl, int root)
{
	__u8 max = c->default_ttl[idx & (MT_TAGS - 1)];

	if (root || max == MT_TTL_INF || ttl <= max || is_owner(idx))
		return ttl;
	return max;
}

/*
 * Apply one operation to `task`. The caller has decided who may do what:
 * `root` ops may touch any thread and change classes; self ops (the uprobe)
 * only touch the calling thread. Returns 0 or a negative MT_E* error.
 */
static __always_inline int apply_op(struct mt_ctl *c, struct task_struct *task, __u32 code,
				    __u32 tag, __u32 arg, int root)
{
	__u32 idx = tag & (MT_TAGS - 1);
	__u32 w = idx / 64;
	__u64 bit = 1ULL << (idx % 64);
	struct mt_view *v;
	struct mt_thread *t;
	__u64 id = bpf_get_current_pid_tgid();

	if (code == MT_OP_PING)
		return 0;
	if (tag >= MT_TAGS && code != MT_OP_CLASS)
		return -MT_EINVAL;
	v = view_of(task->pid);
	if (!v)
		return -MT_EINVAL;
	t = bpf_task_storage_get(&threads, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!t)
		return -MT_EINVAL;
	if (w >= MT_WORDS)
		return -MT_EINVAL;
	switch (code) {
	case MT_OP_SET: {
		__u8 ttl;

		if (!(c->live[w] & bit))
			return -MT_ENOENT;
		if (t->term[w] & bit)
			return -MT_ETERM;
		if (!!(c->system[w] & bit) != task_is_system(task, t))
			return -MT_ECLASS;
		if (!root && !(c->anyone[w] & bit) && !is_owner(idx))
			return -MT_EPERM;
		ttl = arg ? (arg > MT_TTL_INF ? MT_TTL_INF : arg) : c->default_ttl[idx & (MT_TAGS - 1)];
		if (arg == 0 && ttl == 0)
			ttl = MT_TTL_INF;
		ttl = ttl_cap(c, idx, ttl, root);
		t->ttl[idx & (MT_TAGS - 1)] = ttl;
		if (ttl == 0)
			__sync_fetch_and_or(&t->spent[w], bit);
		else
			__sync_fetch_and_and(&t->spent[w], ~bit);
		__sync_fetch_and_or(&v->vec[w], bit);
		t->origin[w] |= bit;
		t->lamport++;
		if (c->lifeline[w] & bit)
			ll_record(c, idx, task, (__u32)id, id >> 32, MT_K_SET, ttl, t->lamport,
				  host_of(c, bpf_get_current_task_btf()));
		return 0;
	}
	case MT_OP_CLEAR:
		t->origin[w] &= ~bit;
		__sync_fetch_and_and(&v->vec[w], ~bit);
		__sync_fetch_and_and(&t->spent[w], ~bit);
		t->ttl[idx & (MT_TAGS - 1)] = 0;
		return 0;
	case MT_OP_TERM:
		__sync_fetch_and_or(&t->term[w], bit);
		__sync_fetch_and_and(&v->vec[w], ~bit);
		__sync_fetch_and_and(&t->spent[w], ~bit);
		t->ttl[idx & (MT_TAGS - 1)] = 0;
		return 0;
	case MT_OP_UNTERM:
		__sync_fetch_and_and(&t->term[w], ~bit);
		return 0;
	case MT_OP_TTL:
		if (!(v->vec[w] & bit))
			return -MT_ENOENT;
		if (arg > MT_TTL_INF)
			return -MT_EINVAL;
		arg = ttl_cap(c, idx, arg, root);
		t->ttl[idx & (MT_TAGS - 1)] = arg;
		if (arg == 0)
			__sync_fetch_and_or(&t->spent[w], bit);
		else
			__sync_fetch_and_and(&t->spent[w], ~bit);
		return 0;
	case MT_OP_CLASS:
		if (!root)
			return -MT_EPERM;
		t->flags = MT_F_USER_SET | (arg ? MT_F_SYSTEM : 0);
		return 0;
	case MT_OP_DELETE: {
		struct mt_tag *tg = bpf_map_lookup_elem(&tags, &idx);
		struct mt_owner *o = bpf_map_lookup_elem(&owners, &idx);
		__u32 uid = (__u32)bpf_get_current_uid_gid();

		if (!tg || !o)
			return -MT_EINVAL;
		if (!root && uid != o->uid)
			return -MT_EPERM;
		return retire(c, tg, idx);
	}
	}
	return -MT_EINVAL;
}

/*
 * The trusted path for unprivileged threads: a uprobe on libmantle's
 * mantle_tag_ctl(op, tag, arg, seq). It runs in the caller's context, so it
 * can only ever change the caller's own state; the answer goes to the
 * caller's view entry (op_err, then op_seq), which it reads back.
 */
SEC("uprobe")
int BPF_KPROBE(mt_ctl_self, __u32 code, __u32 tag, __u32 arg, __u32 seq)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct mt_view *v = view_of(task->pid);
	struct mt_ctl *c = get_ctl();
	int root = (__u32)bpf_get_current_uid_gid() == 0;
	int err;

	if (!v || !c)
		return 0;
	err = apply_op(c, task, code, tag, arg, root);
	v->op_err = err;
	__sync_fetch_and_add(&v->op_seq, 0); /* order: err before seq */
	v->op_seq = seq;
	return 0;
}

static __always_inline void emit(struct seq_file *seq, struct task_struct *task, int err)
{
	struct mt_thread_rec rec = {};
	struct mt_view *v = view_of(task->pid);
	struct mt_thread *t = bpf_task_storage_get(&threads, task, 0, 0);

	rec.tid = task->pid;
	rec.pid = task->tgid;
	rec.err = err;
	if (v)
		__builtin_memcpy(rec.vec, v->vec, sizeof(rec.vec));
	if (t) {
		__builtin_memcpy(rec.term, t->term, sizeof(rec.term));
		__builtin_memcpy(rec.ttl, t->ttl, MT_TAGS);
		rec.flags = t->flags;
	}
	if (!t || !(t->flags & MT_F_USER_SET))
		rec.flags = task_is_system(task, t) ? MT_F_SYSTEM : 0;
	bpf_probe_read_kernel_str(rec.comm, sizeof(rec.comm), task->comm);
	bpf_seq_write(seq, &rec, sizeof(rec));
}

/* Tool operation on other threads (root: the pinned link is root-only). */
SEC("iter/task")
int mt_op_iter(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	__u32 z = 0;
	struct mt_op *o = bpf_map_lookup_elem(&op, &z);
	struct mt_ctl *c = get_ctl();

	if (!task || !o || !c)
		return 0;
	if (o->tid ? task->pid != o->tid : task->tgid != o->pid)
		return 0;
	/* An exiting thread (a zombie too) had its slot cleared for the last
	 * time by mt_exit: a tag set now would outlive it. Not listed, so
	 * `--tid` of one is "no such thread", and `--pid` takes the live ones. */
	if (task->flags & PF_EXITING)
		return 0;
	emit(ctx->meta->seq, task, apply_op(c, task, o->code, o->tag, o->arg, 1));
	return 0;
}

/* Every thread that holds a tag, a terminator or an explicit class. */
SEC("iter/task")
int mt_list_iter(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct mt_view *v;
	struct mt_thread *t;

	if (!task)
		return 0;
	v = view_of(task->pid);
	t = bpf_task_storage_get(&threads, task, 0, 0);
	if ((v && !vec_empty(v->vec)) || (t && (!vec_empty(t->term) || (t->flags & MT_F_USER_SET))))
		emit(ctx->meta->seq, task, 0);
	return 0;
}

/*
 * Deletion sweep: clear the bits of DELETING tags from every thread, then
 * (at the end of the walk) free them. World-readable pin: reading it is
 * harmless and lets a tag's unprivileged owner finish a deletion.
 */
SEC("iter/task")
int mt_sweep_iter(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct mt_ctl *c = get_ctl();

	if (!c)
		return 0;
	if (task) {
		struct mt_view *v = view_of(task->pid);
		struct mt_thread *t = bpf_task_storage_get(&threads, task, 0, 0);

#pragma unroll
		for (int w = 0; w < MT_WORDS; w++) {
			__u64 dead = c->deleting[w];

			if (!dead)
				continue;
			if (v && (v->vec[w] & dead))
				__sync_fetch_and_and(&v->vec[w], ~dead);
			if (t) {
				if (t->term[w] & dead)
					__sync_fetch_and_and(&t->term[w], ~dead);
				if (t->spent[w] & dead)
					__sync_fetch_and_and(&t->spent[w], ~dead);
			}
		}
		return 0;
	}
	/* end of the walk: every holder is clean, free the bits */
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		__u64 m = c->deleting[w];

		for (int i = 0; i < 64 && m; i++) {
			__u32 b = ctz64(m);
			__u32 idx = (w * 64 + b) & (MT_TAGS - 1);
			__u64 bit = 1ULL << b;
			struct mt_tag *tg = bpf_map_lookup_elem(&tags, &idx);

			m &= m - 1;
			if (!tg)
				continue;
			if (__sync_val_compare_and_swap(&tg->state, MT_ST_DELETING, MT_ST_FREE) ==
			    MT_ST_DELETING) {
				__u32 e = __sync_fetch_and_add(&c->epoch, 1) + 1;

				c->freed_epoch[idx & (MT_TAGS - 1)] = e;
				c->ll_size[idx & (MT_TAGS - 1)] = 0;
				__sync_fetch_and_and(&c->system[w], ~bit);
				__sync_fetch_and_and(&c->lifeline[w], ~bit);
				__sync_fetch_and_and(&c->deadlock[w], ~bit);
			}
			__sync_fetch_and_and(&c->deleting[w], ~bit);
		}
	}
	return 0;
}
