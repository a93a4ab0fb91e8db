/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * mantle tags: the structs shared by the kernel side (tags.bpf.c) and user
 * space (crates/tags, crates/api, include/mantle/tags.h).
 *
 * Rules: plain fixed-width members only (no pointers, no bool), explicit
 * padding, sizes asserted on both sides (static asserts below, and
 * `layout` tests in crates/tags). Widen the tag vector by building with
 * -DMT_TAGS=128 (a multiple of 64) on both sides.
 */
#ifndef MANTLE_TAGS_SHARED_H
#define MANTLE_TAGS_SHARED_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#ifndef MT_TAGS
#define MT_TAGS 64 /* bits in a tag vector: a multiple of 64 */
#endif
#define MT_WORDS (MT_TAGS / 64)
#define MT_NAME_LEN 32       /* including the terminating NUL */
#define MT_TTL_INF 255       /* a TTL that is never decremented */
#define MT_LIFELINE_SLOTS 65536 /* reception records shared by all tags */
#define MT_COMM_LEN 16
/* Bits 0..MT_GLOBAL_BITS-1 are global tags: named by a cluster-wide table
 * every machine loads, the only ones that travel between machines. The rest
 * are local: allocated on demand, never leaving the machine. */
#define MT_GLOBAL_BITS 16

/* The TCP header option that carries global tags (RFC 6994 experimental
 * option with an ExID). */
#define MT_OPT_KIND 253
#define MT_OPT_MAGIC 0x6d54 /* "mT" */
#define MT_OPT_MAX_TTLS 8   /* TTL bytes carried: the first 8 set bits */
#define MT_OPT_FIXED 20     /* option bytes before the TTLs */

/* Which IPC carried a reception (struct mt_reception.kind). */
enum mt_kind {
	MT_K_NONE = 0,
	MT_K_SET = 1,        /* set by a tool or the API, not a hop */
	MT_K_FORK = 2,       /* inherited at fork/clone, not a hop */
	MT_K_SIGNAL = 3,
	MT_K_PIPE = 4,       /* pipes and FIFOs */
	MT_K_UNIX_STREAM = 5,
	MT_K_UNIX_DGRAM = 6,
	MT_K_UNIX_SEQPACKET = 7,
	MT_K_TCP = 8,
	MT_K_UDP = 9,
	MT_K_SHM = 10,       /* shared memory: memfd, shm_open, SysV, shared file mapping */
	MT_K_MQ = 11,        /* POSIX message queues */
	MT_K_EVENTFD = 12,   /* eventfd: a pulse (asynchronous notification) */
	MT_K_MAX = 13,
};
#define MT_KEY_SYSV 32 /* chan_dep key type of a SysV segment (kind MT_K_SHM) */

/* Tag table entry states (struct mt_tag.state). */
enum mt_state {
	MT_ST_FREE = 0,
	MT_ST_LIVE = 1,
	MT_ST_DELETING = 2, /* no longer passed on; holders are being swept */
};

/* struct mt_tag.flags and struct mt_thread.flags */
#define MT_F_SYSTEM 0x1   /* tag: a system tag; thread: a system thread */
#define MT_F_LIFELINE 0x2 /* tag: receptions are recorded */
#define MT_F_USER_SET 0x4 /* thread: class was set explicitly (not default) */
#define MT_F_GLOBAL 0x8   /* tag: from the cluster table; crosses machines */
#define MT_F_REPLIES 0x10 /* tag: travels with replies too (paper, section 10) */
#define MT_F_DEADLOCK 0x20 /* tag: marks a synchronous call chain (paper, section 5.3) */
#define MT_F_ANYONE 0x40   /* tag: any user may set it on itself (else owner and root) */
#define MT_F_PER_REQUEST 0x80 /* tag: receivers hold it only until they answer */
#define MT_F_CHILDREN_USER 0x100 /* thread: the processes it forks are user threads
                                  * (`tag class system --children user`) */

/*
 * Per-thread view: BPF_F_MMAPABLE array indexed by the thread's global tid.
 * The tag vector lives here (and nowhere else) so that a thread reads its
 * own tags with one load from a read-only mapping, no system call. Every
 * writer (BPF hooks, the op programs) updates vec with atomic OR/AND.
 * op_seq/op_err answer the calling thread's last self-operation.
 */
struct mt_view {
	__u64 vec[MT_WORDS];
	__u32 op_seq;
	__s32 op_err;
};

/* Per-thread private state: BPF_MAP_TYPE_TASK_STORAGE. */
struct mt_thread {
	__u64 term[MT_WORDS];   /* terminator mask: tags this thread rejects */
	__u64 spent[MT_WORDS];  /* held tags whose TTL is 0: held, not passed */
	__u8 ttl[MT_TAGS];      /* TTL per held tag (MT_TTL_INF: unlimited) */
	__u32 flags;            /* MT_F_SYSTEM, MT_F_USER_SET */
	__u32 pad;
	__u64 lamport;          /* Lamport clock: +1 per tagged send, max+1 per reception */
	__u64 origin[MT_WORDS]; /* tags set on this thread by a tool or the API (not received):
	                         * a deadlock tag's origin keeps it when answered */
	__u64 sig[MT_WORDS];    /* per-request tags held only because a signal brought them:
	                         * dropped when that signal's handler returns (issue 32) */
	__u32 sig_depth;        /* signal handlers running on this thread since the first of them
	                         * brought sig (nested ones included); 0: sig is empty */
	__u32 pad2;
};

/*
 * Global control block: a 1-entry mmapable array, readable by every user
 * (names of private fields are not here). BPF reads it on every hop.
 */
struct mt_ctl {
	__u64 live[MT_WORDS];      /* tags in state LIVE */
	__u64 system[MT_WORDS];    /* system-class tags */
	__u64 lifeline[MT_WORDS];  /* tags whose receptions are recorded */
	__u64 deleting[MT_WORDS];  /* tags in state DELETING, for the sweep */
	__u32 epoch;               /* bumped each time a tag's bit is freed */
	__u32 view_size;           /* entries in the view map (tids below it) */
	__u32 host_id;             /* this machine (its initial network namespace) */
	__u32 opts;                /* MT_OPT_*, chosen at load */
	__u64 host_netns;          /* cookie of that namespace (where `tags up` ran) */
	__u64 global[MT_WORDS];    /* global tags (bits below MT_GLOBAL_BITS) */
	__u32 cluster_digest;      /* 16-bit digest of the cluster table (0: none) */
	__u32 pad1;
	__u64 replies[MT_WORDS];   /* tags that travel with replies as well */
	__u32 freed_epoch[MT_TAGS];/* epoch at which each bit was last freed */
	__u32 ll_base[MT_TAGS];    /* lifeline ring of each tag: first slot */
	__u32 ll_size[MT_TAGS];    /*   and its size in slots (0: none) */
	__u64 ll_head[MT_TAGS];    /*   and how many receptions it ever took */
	__u8 default_ttl[MT_TAGS]; /* TTL a tag gets when set by a tool or API */
	__u64 n_tcp_deps;          /* deposits ever made in chan_dep, per type: */
	__u64 n_udp_deps;          /*   while 0, receivers skip the lookup */
	__u64 n_obj_deps;          /*   (shared-memory objects; pipe, eventfd
	                            *   and queue readers always look, and
	                            *   leave a note in chan_reader) */
	__u64 deadlock[MT_WORDS];  /* deadlock tags (MT_F_DEADLOCK) */
	__u64 anyone[MT_WORDS];    /* tags any user may set on itself (MT_F_ANYONE);
	                            * the others only their owner's uid and root */
	__u64 per_request[MT_WORDS]; /* tags held per request (MT_F_PER_REQUEST) */
};

/*
 * A circular call chain found (paper, section 5.3): thread tx sends a
 * request that carries deadlock tag `tag` towards process rx_pid, whose
 * thread rx_tid already holds that tag. Sent to user space through the
 * dl_events ring buffer.
 */
struct mt_deadlock {
	__u64 ts_ns;       /* CLOCK_MONOTONIC */
	__u64 lamport;     /* sender's clock */
	__u32 tag;         /* bit */
	__u32 generation;
	__u32 tx_tid, tx_pid;
	__u32 tx_host;
	__u32 rx_pid;      /* the process the request goes to */
	__u32 rx_tid;      /* its thread found holding the tag */
	__u16 kind;        /* enum mt_kind of the channel */
	__u16 denied;      /* 1: refused (EDEADLK); 0: detected, delivered */
	char tx_comm[MT_COMM_LEN];
};

/* Counters for `mantle tags status`: a per-CPU array of one entry (no
 * shared cache line on the hot path); user space sums the CPUs. */
/* mt_ctl.opts */
#define MT_OPT_NO_FD_CHANNELS 0x1 /* sys_exit never attached: no pipes, FIFOs, eventfd,
                                   * message queues or shared memory */

struct mt_stats {
	__u64 hops;          /* deliveries of a request's tags */
	__u64 rejected;      /* deliveries with a tag refused (terminator, class) */
	__u64 deposit_fail;  /* deposits dropped: channel map full */
	__u64 late;          /* deliveries after the receiver had read */
	__u64 no_view;       /* threads with tid >= view_size */
	__u64 opt_written;   /* TCP options written (segments carrying tags) */
	__u64 opt_parsed;    /* TCP options taken from the wire */
	__u64 opt_mismatch;  /* options dropped: the sender's cluster table differs */
	__u64 opt_nospace;   /* options not written: no room left in the header */
};

/* Public part of a tag table entry (mmapable array of MT_TAGS, world-readable). */
struct mt_tag {
	char name[MT_NAME_LEN];
	__u32 state;       /* enum mt_state */
	__u32 flags;       /* MT_F_SYSTEM, MT_F_LIFELINE */
	__u64 created_ns;  /* CLOCK_REALTIME, ns */
	__u32 generation;  /* bumped each time the bit is allocated */
	__u32 pad;
};

/* Private part of a tag table entry (root-only array of MT_TAGS). */
struct mt_owner {
	__u32 uid;
	__u32 pid;
};

/* One lifeline record (mmapable array of MT_LIFELINE_SLOTS, root-only). */
struct mt_reception {
	__u64 ts_ns;       /* CLOCK_MONOTONIC of the event (one per reception) */
	__u64 seq;         /* 1 + index in this tag's reception stream; 0: empty */
	__u32 rx_tid, rx_pid;
	__u32 tx_tid, tx_pid;
	__u16 kind;        /* enum mt_kind */
	__u8 tag;          /* bit */
	__u8 ttl;          /* TTL the receiver now holds */
	__u32 generation;  /* tag generation, to drop records of a reused bit */
	char rx_comm[MT_COMM_LEN];
	__u64 lamport;     /* receiver's Lamport clock after the reception */
	__u32 rx_host;     /* host of the receiver (machine, or network namespace) */
	__u32 tx_host;     /* host of the sender */
};

/*
 * A channel deposit: the union of the snapshots of tagged requests sent on a
 * channel and not yet drained. Lives in SK_STORAGE of the sending unix
 * socket, or in an LRU hash keyed by pipe inode / TCP flow / UDP port.
 * Lock-free: TTLs of a bit are written before the bit is published with an
 * atomic OR; a reader that drains swaps the vector to 0 atomically.
 */
struct mt_deposit {
	__u64 vec[MT_WORDS];
	__u8 ttl[MT_TAGS];         /* sender's TTL (not yet decremented), set bits only */
	__u32 kind;
	__u32 tx_tid, tx_pid;
	__u32 epoch;               /* ctl epoch of the oldest snapshot in it */
	__u32 last_reader;         /* tid of the last thread that read */
	__u32 tx_host;             /* host of the (last) sender */
	__u64 seq_start, seq_end;  /* TCP: sequence range of tagged bytes */
	__u64 lamport;             /* largest sender clock among the snapshots */
};

/* What a client TCP socket's segments carry: the sender's global tags at
 * its last send (SK_STORAGE, written by tcp_sendmsg_locked). */
struct mt_netsnap {
	__u16 vec;    /* global bits */
	__u16 pad;
	__u32 lamport;
	__u32 host;
	__u32 pid;
	__u8 ttl[MT_GLOBAL_BITS];
};

/* The option on the wire (network byte order for the 16/32-bit fields). */
struct mt_tcpopt {
	__u8 kind;    /* MT_OPT_KIND */
	__u8 len;     /* MT_OPT_FIXED + number of TTL bytes */
	__u16 magic;  /* MT_OPT_MAGIC */
	__u16 digest; /* cluster table digest: receivers with another table drop it */
	__u16 vec;    /* global tags */
	__u32 host;   /* sending host */
	__u32 lamport;/* sender's Lamport clock (low 32 bits) */
	__u32 pid;    /* sending process */
	__u8 ttl[MT_OPT_MAX_TTLS]; /* sender's TTL of each set bit, lowest first */
} __attribute__((packed));

/* Key of deposits that do not live in socket storage. */
struct mt_chan_key {
	/* Scalars only (never kernel addresses: the verifier refuses the
	 * arithmetic of the hint hash on pointers, and ids outlive no object):
	 * a: pipe, mq, shm: device of the inode's file system; TCP:
	 *    saddr<<32|daddr; UDP: port; eventfd: its id; SysV: segment id
	 * b: pipe, mq, shm: inode number; TCP: sport<<16|dport; SysV: IPC
	 *    namespace inode number */
	__u64 a;
	__u64 b;
	__u32 type; /* MT_K_PIPE, MT_K_TCP, MT_K_UDP, MT_K_MQ, MT_K_EVENTFD, MT_K_SHM, MT_KEY_SYSV */
	__u32 pad;  /* TCP, UDP: host of the flow (the same on both ends, or no match) */
};

/* A socket's own record, SK_STORAGE (sk_role): its role, set by the
 * cgroup connect hooks, and for TCP the global tags its segments carry,
 * set by mt_tcp_sendmsg for the option callbacks (one storage lookup per
 * tagged send for both: issue 15, Table 4). */
struct mt_sock {
	__u32 role;      /* MT_ROLE_* */
	__u32 peer_pid;  /* TCP client: owner of the listener it connected to (this host), or 0 */
	struct mt_netsnap net; /* TCP: what its option carries (net.vec 0: nothing) */
};
#define MT_ROLE_UNKNOWN 0
#define MT_ROLE_CLIENT 1 /* called connect(): sends requests */

/* Self-operations (uprobe on mantle_tag_ctl) and tool operations (iter). */
enum mt_op_code {
	MT_OP_NONE = 0,
	MT_OP_SET = 1,     /* hold tag (arg: TTL, 0 = tag default) */
	MT_OP_CLEAR = 2,   /* drop tag */
	MT_OP_TERM = 3,    /* add tag to terminator mask (and drop it) */
	MT_OP_UNTERM = 4,  /* remove tag from terminator mask */
	MT_OP_TTL = 5,     /* set the TTL of a held tag (arg) */
	MT_OP_CLASS = 6,   /* arg MT_CLASS_*: system or user thread, and its children's (root) */
	MT_OP_PING = 7,    /* does nothing: tells the caller the path works */
	MT_OP_DELETE = 8,  /* owner deletes a tag (state -> DELETING) */
};

/* MT_OP_CLASS's argument */
#define MT_CLASS_SYSTEM 0x1        /* a system thread (else a user thread) */
#define MT_CLASS_CHILDREN_USER 0x2 /* the processes it forks from now on are user threads */

/* A tag's expiry timer (array of MT_TAGS). */
struct mt_expiry {
#ifdef __VMLINUX_H__
	struct bpf_timer timer;
#else
	__u64 timer[2];
#endif
	__u32 generation; /* the tag generation it was armed for */
	__u32 pad;
};

/* Context of the mt_arm_expiry syscall program (BPF_PROG_RUN). */
struct mt_expire_args {
	__u32 tag; /* bit */
	__u32 ms;  /* from now */
};

/*
 * Context of the mt_admin syscall program (BPF_PROG_RUN, root-only pin):
 * the only way user space changes the frozen public maps `ctl` and `tags`
 * (issue 8: a writable fd of a world-readable map can be had by anybody on
 * Linux >= 6.4 through BPF_OBJ_PIN, so those maps are frozen and written
 * by programs alone).
 */
struct mt_admin {
	__u32 code;        /* enum mt_admin_code */
	__u32 tag;         /* bit */
	__u32 flags;       /* MT_ADM_INSTALL: MT_F_* of the tag */
	__u32 ll_base;     /* MT_ADM_INSTALL: lifeline ring, first slot */
	__u32 ll_size;     /*   and size in slots (0: none) */
	__u32 digest;      /* MT_ADM_DIGEST: cluster table digest */
	__u64 created_ns;  /* MT_ADM_INSTALL: CLOCK_REALTIME */
	__u8 default_ttl;  /* MT_ADM_INSTALL */
	__u8 pad[3];
	__u32 owner_uid;   /* MT_ADM_INSTALL: the tag's owner (the caller's pid is recorded
	                    * with it; `owners` is frozen, issue 32) */
	char name[MT_NAME_LEN];
};
enum mt_admin_code {
	MT_ADM_INSTALL = 1, /* a FREE entry becomes LIVE with these settings */
	MT_ADM_DELETE = 2,  /* a LIVE tag becomes DELETING (the sweep frees it) */
	MT_ADM_DIGEST = 3,  /* the cluster table's digest */
};

/* Parameters of a tool operation, read by the op iterator (the `op` map,
 * frozen: written by the mt_set_op syscall program, which only a privileged
 * caller may run, issue 32). */
struct mt_op {
	__u32 code;     /* enum mt_op_code */
	__u32 tag;      /* bit */
	__u32 arg;
	__u32 tid;      /* target thread (0: every thread of pid) */
	__u32 pid;      /* target process (0: tid only) */
	__u32 pad;
};

/* What the op / list iterators write per thread they touch or list. */
struct mt_thread_rec {
	__u32 tid, pid;
	__s32 err;      /* op result for this thread (0 ok, -errno) */
	__u32 flags;    /* mt_thread.flags */
	__u64 vec[MT_WORDS];
	__u64 term[MT_WORDS];
	__u8 ttl[MT_TAGS];
	char comm[MT_COMM_LEN];
};

/* errors written to mt_view.op_err / mt_thread_rec.err (negative errno) */
#define MT_EPERM 1
#define MT_ENOENT 2
#define MT_EINVAL 22
#define MT_ECLASS 18 /* EXDEV: class mismatch (system vs user) */
#define MT_ETERM 71  /* EPROTO: thread terminates this tag */
#define MT_EEXIST 17 /* the table entry is not free */

/*
 * Layout asserts: the size and every member's offset of each struct user
 * space mirrors (crates/tags/src/abi.rs), and of the TCP option (a wire
 * format other hosts parse), written out so that a change here that the
 * Rust side does not make fails this compile, not a run. The `layout` test
 * in crates/tags checks the Rust mirrors against the object's BTF, so C,
 * BTF and Rust are held to one layout. In terms of MT_WORDS and MT_TAGS, so
 * they hold for every -DMT_TAGS. __builtin_offsetof: BPF builds have no
 * <stddef.h>.
 */
#define MT_STATIC_ASSERT(c, m) _Static_assert(c, m)
#define MT_SIZE(s, n) MT_STATIC_ASSERT(sizeof(struct s) == (n), "size of struct " #s)
#define MT_OFF(s, f, n)                                                        \
	MT_STATIC_ASSERT(__builtin_offsetof(struct s, f) == (n), "offset of " #s "." #f)

MT_STATIC_ASSERT(MT_TAGS % 64 == 0 && MT_TAGS <= 256, "MT_TAGS: multiple of 64, at most 256");
MT_STATIC_ASSERT(MT_OPT_FIXED + MT_OPT_MAX_TTLS <= 28, "the option must fit beside TCP timestamps");

MT_SIZE(mt_view, 8 * MT_WORDS + 8); /* View */
MT_OFF(mt_view, vec, 0);
MT_OFF(mt_view, op_seq, 8 * MT_WORDS);
MT_OFF(mt_view, op_err, 8 * MT_WORDS + 4);

MT_SIZE(mt_ctl, 72 * MT_WORDS + 56 + 21 * MT_TAGS); /* Ctl */
MT_OFF(mt_ctl, live, 0);
MT_OFF(mt_ctl, system, 8 * MT_WORDS);
MT_OFF(mt_ctl, lifeline, 16 * MT_WORDS);
MT_OFF(mt_ctl, deleting, 24 * MT_WORDS);
MT_OFF(mt_ctl, epoch, 32 * MT_WORDS);
MT_OFF(mt_ctl, view_size, 32 * MT_WORDS + 4);
MT_OFF(mt_ctl, host_id, 32 * MT_WORDS + 8);
MT_OFF(mt_ctl, opts, 32 * MT_WORDS + 12);
MT_OFF(mt_ctl, host_netns, 32 * MT_WORDS + 16);
MT_OFF(mt_ctl, global, 32 * MT_WORDS + 24);
MT_OFF(mt_ctl, cluster_digest, 40 * MT_WORDS + 24);
MT_OFF(mt_ctl, pad1, 40 * MT_WORDS + 28);
MT_OFF(mt_ctl, replies, 40 * MT_WORDS + 32);
MT_OFF(mt_ctl, freed_epoch, 48 * MT_WORDS + 32);
MT_OFF(mt_ctl, ll_base, 48 * MT_WORDS + 32 + 4 * MT_TAGS);
MT_OFF(mt_ctl, ll_size, 48 * MT_WORDS + 32 + 8 * MT_TAGS);
MT_OFF(mt_ctl, ll_head, 48 * MT_WORDS + 32 + 12 * MT_TAGS);
MT_OFF(mt_ctl, default_ttl, 48 * MT_WORDS + 32 + 20 * MT_TAGS);
MT_OFF(mt_ctl, n_tcp_deps, 48 * MT_WORDS + 32 + 21 * MT_TAGS);
MT_OFF(mt_ctl, n_udp_deps, 48 * MT_WORDS + 40 + 21 * MT_TAGS);
MT_OFF(mt_ctl, n_obj_deps, 48 * MT_WORDS + 48 + 21 * MT_TAGS);
MT_OFF(mt_ctl, deadlock, 48 * MT_WORDS + 56 + 21 * MT_TAGS);
MT_OFF(mt_ctl, anyone, 56 * MT_WORDS + 56 + 21 * MT_TAGS);
MT_OFF(mt_ctl, per_request, 64 * MT_WORDS + 56 + 21 * MT_TAGS);

MT_SIZE(mt_deadlock, 64); /* Deadlock */
MT_OFF(mt_deadlock, ts_ns, 0);
MT_OFF(mt_deadlock, lamport, 8);
MT_OFF(mt_deadlock, tag, 16);
MT_OFF(mt_deadlock, generation, 20);
MT_OFF(mt_deadlock, tx_tid, 24);
MT_OFF(mt_deadlock, tx_pid, 28);
MT_OFF(mt_deadlock, tx_host, 32);
MT_OFF(mt_deadlock, rx_pid, 36);
MT_OFF(mt_deadlock, rx_tid, 40);
MT_OFF(mt_deadlock, kind, 44);
MT_OFF(mt_deadlock, denied, 46);
MT_OFF(mt_deadlock, tx_comm, 48);

MT_SIZE(mt_stats, 72); /* Stats */
MT_OFF(mt_stats, hops, 0);
MT_OFF(mt_stats, rejected, 8);
MT_OFF(mt_stats, deposit_fail, 16);
MT_OFF(mt_stats, late, 24);
MT_OFF(mt_stats, no_view, 32);
MT_OFF(mt_stats, opt_written, 40);
MT_OFF(mt_stats, opt_parsed, 48);
MT_OFF(mt_stats, opt_mismatch, 56);
MT_OFF(mt_stats, opt_nospace, 64);

MT_SIZE(mt_tag, 24 + MT_NAME_LEN); /* TagEntry: 56 */
MT_OFF(mt_tag, name, 0);
MT_OFF(mt_tag, state, MT_NAME_LEN);
MT_OFF(mt_tag, flags, MT_NAME_LEN + 4);
MT_OFF(mt_tag, created_ns, MT_NAME_LEN + 8);
MT_OFF(mt_tag, generation, MT_NAME_LEN + 16);
MT_OFF(mt_tag, pad, MT_NAME_LEN + 20);

MT_SIZE(mt_owner, 8); /* Owner */
MT_OFF(mt_owner, uid, 0);
MT_OFF(mt_owner, pid, 4);

MT_SIZE(mt_reception, 72); /* Reception */
MT_OFF(mt_reception, ts_ns, 0);
MT_OFF(mt_reception, seq, 8);
MT_OFF(mt_reception, rx_tid, 16);
MT_OFF(mt_reception, rx_pid, 20);
MT_OFF(mt_reception, tx_tid, 24);
MT_OFF(mt_reception, tx_pid, 28);
MT_OFF(mt_reception, kind, 32);
MT_OFF(mt_reception, tag, 34);
MT_OFF(mt_reception, ttl, 35);
MT_OFF(mt_reception, generation, 36);
MT_OFF(mt_reception, rx_comm, 40);
MT_OFF(mt_reception, lamport, 40 + MT_COMM_LEN);
MT_OFF(mt_reception, rx_host, 48 + MT_COMM_LEN);
MT_OFF(mt_reception, tx_host, 52 + MT_COMM_LEN);

MT_SIZE(mt_tcpopt, MT_OPT_FIXED + MT_OPT_MAX_TTLS); /* on the wire */
MT_OFF(mt_tcpopt, kind, 0);
MT_OFF(mt_tcpopt, len, 1);
MT_OFF(mt_tcpopt, magic, 2);
MT_OFF(mt_tcpopt, digest, 4);
MT_OFF(mt_tcpopt, vec, 6);
MT_OFF(mt_tcpopt, host, 8);
MT_OFF(mt_tcpopt, lamport, 12);
MT_OFF(mt_tcpopt, pid, 16);
MT_OFF(mt_tcpopt, ttl, MT_OPT_FIXED);

MT_SIZE(mt_chan_key, 24); /* kernel side only: the LRU hash key */

MT_SIZE(mt_expire_args, 8); /* ExpireArgs */
MT_OFF(mt_expire_args, tag, 0);
MT_OFF(mt_expire_args, ms, 4);

MT_SIZE(mt_admin, 40 + MT_NAME_LEN); /* Admin: 72 */
MT_OFF(mt_admin, code, 0);
MT_OFF(mt_admin, tag, 4);
MT_OFF(mt_admin, flags, 8);
MT_OFF(mt_admin, ll_base, 12);
MT_OFF(mt_admin, ll_size, 16);
MT_OFF(mt_admin, digest, 20);
MT_OFF(mt_admin, created_ns, 24);
MT_OFF(mt_admin, default_ttl, 32);
MT_OFF(mt_admin, pad, 33);
MT_OFF(mt_admin, owner_uid, 36);
MT_OFF(mt_admin, name, 40);

MT_SIZE(mt_op, 24); /* Op */
MT_OFF(mt_op, code, 0);
MT_OFF(mt_op, tag, 4);
MT_OFF(mt_op, arg, 8);
MT_OFF(mt_op, tid, 12);
MT_OFF(mt_op, pid, 16);
MT_OFF(mt_op, pad, 20);

MT_SIZE(mt_thread_rec, 16 + 16 * MT_WORDS + MT_TAGS + MT_COMM_LEN); /* ThreadRec */
MT_OFF(mt_thread_rec, tid, 0);
MT_OFF(mt_thread_rec, pid, 4);
MT_OFF(mt_thread_rec, err, 8);
MT_OFF(mt_thread_rec, flags, 12);
MT_OFF(mt_thread_rec, vec, 16);
MT_OFF(mt_thread_rec, term, 16 + 8 * MT_WORDS);
MT_OFF(mt_thread_rec, ttl, 16 + 16 * MT_WORDS);
MT_OFF(mt_thread_rec, comm, 16 + 16 * MT_WORDS + MT_TAGS);

#endif
