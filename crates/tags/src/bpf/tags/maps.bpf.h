/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * tags.bpf.c: the maps (their names are the skeleton's and the pins' names,
 * which the loader and the tests use), the BTF anchor of the structs only
 * user space decodes, and the load-time switch mt_direct_fd. First because
 * every other piece reads or writes these.
 *
 * A piece of tags.bpf.c, not a header: included once, in order, by
 * tags.bpf.c (one object, one skeleton), and it uses what the pieces
 * before it define.
 */

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

/* A signal's deposit (issue 32): the union of the snapshots of the tagged
 * signals sent to this thread (for a signal to the whole process: to the
 * thread the kernel queued it on) whose handler has not run yet. Made at
 * signal_generate, taken when a handler starts (signal_deliver). Kernel
 * side only, never pinned. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct mt_deposit);
} sig_dep SEC(".maps");

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
 * The same for sockets' storage deposits (sk_dep: unix; sk_rdep: tags that
 * came in TCP options): one bit per hash bucket of socket addresses, set
 * before a socket's first such entry is made and never cleared. A receive
 * on a socket whose bit is clear skips the storage lookup, a helper call
 * (~33 ns per unix receive by bpf_stats, issue 15): without it, every unix
 * receive of every untagged thread paid that lookup from the first tagged
 * unix message on, machine-wide (the `mt_unix_any` latch alone). Kernel-side
 * only, never pinned; a user who makes many sockets sets bits, which costs
 * lookups, never a wrong answer.
 */
#define MT_SK_HINT_BITS 65536
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MT_SK_HINT_BITS / 64);
	__type(key, __u32);
	__type(value, __u64);
} sk_hint SEC(".maps");

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

/*
 * Deposits of the message fd channels (pipes and FIFOs, eventfd, POSIX
 * message queues), direct-mapped: slot = the key's hint bit, so finding a
 * channel's deposit is one array load and a key compare instead of hashing
 * a 24-byte key in an LRU hash (issue 15: ~40-50 ns a lookup, two a hop).
 * Two channels whose keys share a slot evict each other (the later sender
 * takes the slot; the earlier channel's pending tags are dropped, as the
 * LRU dropped its oldest), and the slot's protocol (fdchan.bpf.h, "The
 * slot protocol") makes sure that tags deposited for one channel are never
 * taken by the reader of another, whatever the timing.
 */
struct mt_fdslot {
	struct mt_chan_key key;
	__u32 gen;   /* claims of this slot so far: readers check it around a take */
	__u32 busy;  /* senders inside (a count), or MT_SLOT_CLAIM while claimed */
	__u64 reader; /* gen << 32 | tid of the last reader that found no deposit */
	struct mt_deposit d;
};
#define MT_SLOT_CLAIM 0x80000000u
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MT_HINT_BITS);
	__type(key, __u32);
	__type(value, struct mt_fdslot);
} fd_dep SEC(".maps");

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

/*
 * The current task without a helper call, for mt_sys_exit (issue 15: a
 * helper call costs ~20 ns here, the empty program ~55). A system call's
 * registers (the tracepoint's `regs`) sit at a fixed place at the top of
 * the task's kernel stack, so their address names the running task. Slot
 * (regs - base) >> 14 (one stack per 16 KiB) remembers the task last seen
 * on that stack; a hit is believed only if that task's ->stack still puts
 * its registers at `regs` (a task that exited has no stack, and one that
 * reuses the stack is the task running on it now). Kernel pointers: this
 * map is never pinned, so only root (by id) can read it.
 */
#define MT_CUR_SLOTS 4096
#define MT_THREAD_SIZE 16384 /* x86-64 without KASAN; otherwise no hit ever validates */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MT_CUR_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} cur_cache SEC(".maps");

/*
 * The reader's fast path (issue 15): per thread, indexed by global tid like
 * `view` (sized to pid_max by the loader), what a reception needs to know
 * to change nothing without the task-storage lookup and the helper for a
 * trusted `current` (~45 ns of a tagged pipe read): the tags the thread
 * holds with an unlimited TTL, as its last delivery left them, and a lower
 * bound of its Lamport clock that fast receptions raise. Kernel-side only,
 * never pinned (root reaches it by id, as cur_cache).
 *   inf:   written by deliver() under `epoch` (= ctl's epoch then: a freed
 *          and reused bit invalidates it); zeroed by every operation on the
 *          thread (set, clear, TTL, terminators, class) and at fork/exit.
 *   clock: the thread's clock is max(threads' lamport, clock); every path
 *          that reads or moves the clock with the task storage at hand folds
 *          it in first (clock_fold), so a send after a fast reception still
 *          carries a larger clock than the message it received.
 */
struct mt_rxfast {
	__u64 inf[MT_WORDS];
	__u64 clock;
	__u32 epoch;
	__u32 pad;
};
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 32768); /* set to pid_max by the loader */
	__type(key, __u32);
	__type(value, struct mt_rxfast);
} rx_fast SEC(".maps");

/* BTF for the structs only user space decodes, so that the layout test can
 * compare them with their Rust mirrors (BTF keeps no local-variable types). */
struct mt_btf_anchor {
	struct mt_thread_rec rec;
	struct mt_op op;
	struct mt_deadlock dl;
};
const volatile struct mt_btf_anchor mt_btf_anchor SEC(".rodata") = {};

/*
 * 0 until some thread of this load holds a tag, then 1 for good (set by
 * mark_held() before the first bit of any view is set). While it is 0 no
 * deposit can exist and no send can be tagged, so the hooks of untagged
 * traffic return after this one load (a global variable: one load from a
 * fixed address, no lookup, no helper). It is set before the holder can
 * send, and its sends reach readers through the channel's own locking,
 * so a reader that checks it after taking data from a tagged send sees 1.
 * Never cleared: a stale 1 only costs the checks it saves.
 */
__u32 mt_held_any;

/*
 * 0 until some TCP socket has been given global tags to carry in its
 * option (mt_tcp_sendmsg), then 1 for good: until then the option
 * callbacks of every connection, and untagged TCP sends, return after this
 * one load instead of an sk_storage lookup (issue 15, Table 4). Set before
 * the socket's carried tags (sk_role's net), and both on the sending
 * thread under the socket lock, before the segments that must carry the
 * option are built.
 */
__u32 mt_net_any;

/*
 * The same for the socket-storage deposits: 0 until the first unix
 * deposit (sk_dep, made by a tagged send) or the first TCP option parsed
 * into a receiving socket (sk_rdep), set before that entry is created.
 * Until then every socket receive finds no entry, so it skips the lookup (a
 * helper call, ~25 ns; issue 15: bystanders, and Table 4's untagged
 * connections). A reader that loads 0 while the first entry is being made
 * behaves as one whose lookup ran just before: the late hand-over covers it.
 * After that, sk_hint decides per socket (above).
 */
__u32 mt_unix_any, mt_rdep_any;

/* 1: load a task's fd array through bpf_rdonly_cast(ptr, 0) (Linux 6.13+);
 * 0: bpf_probe_read_kernel. The loader retries with 0 where 1 is refused;
 * the verifier prunes the branch not taken, so the other never loads. */
const volatile __u32 mt_direct_fd = 1;
