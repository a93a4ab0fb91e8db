/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * tags.bpf.c: fd channels: pipes, FIFOs, eventfd, POSIX message queues and
 * shared memory (memfd, shm_open, SysV, shared mappings), all seen at
 * tp_btf/sys_exit because none has a tracepoint of its own. The dispatcher
 * reads system-call numbers and argument registers: x86-64 facts, guarded
 * below.
 *
 * A piece of tags.bpf.c, not a header: included once, in order, by
 * tags.bpf.c (one object, one skeleton), and it uses what the pieces
 * before it define.
 */

/*
 * All of these are seen at the exit of the system call that used them
 * (there is no tracepoint inside pipe_read, eventfd_write, mq_timedsend or
 * do_mmap, and no kprobes here: ../shared/platform.md). sys_exit is
 * attached only while a tag exists; each case is a global function, so the
 * verifier checks it once rather than once per path of the dispatcher.
 */
/* The numbers below, and the pt_regs members mt_sys_exit reads them and
 * the arguments from (orig_ax, di, dx, r10, r8), are the x86-64 system-call
 * ABI. Another architecture needs its own table and registers here. */
#if !defined(__TARGET_ARCH_x86)
#error "tags.bpf.c: the fd-channel hooks know the x86-64 system-call numbers and registers only (see README.md, Supported architectures)"
#endif
#define NR_read 0
#define NR_write 1
#define NR_open 2
#define NR_mmap 9
#define NR_readv 19
#define NR_writev 20
#define NR_shmget 29
#define NR_shmat 30
#define NR_creat 85
#define NR_eventfd 284
#define NR_eventfd2 290
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
 * The file behind fd of task (the current one), or 0. One load for the fd
 * array (an array of pointers, which BTF cannot walk: a read-only cast, or
 * a helper call in compat mode); the rest are direct loads through a
 * read-only cast.
 */
static __always_inline struct file *fd_file_of(struct task_struct *cur, int fd)
{
	struct task_struct *task = bpf_core_cast(cur, struct task_struct);
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

static __always_inline struct file *fd_file(int fd)
{
	return fd_file_of(cur_task(), fd);
}

/*
 * The address of eventfd_fops (0 until learned). An eventfd is then one
 * load and a compare: f_op sits in the struct file, which the system call
 * has just used, while the name below is two loads away in the file's
 * dentry, which eventfd_read() and eventfd_write() never touch (cold lines
 * on every call; issue 15, sixth session). Learned by mt_on_eventfd only,
 * from the file an eventfd2() call of this load returned when it also has
 * the kernel's name "[eventfd]"; until then every eventfd is recognised by
 * its name. No data ksym for it here (no CONFIG_KALLSYMS_ALL:
 * docs/tags.md). A kernel address: .bss is never pinned, so only root
 * reaches it (by id), as cur_cache.
 */
__u64 mt_eventfd_fops;

/* An eventfd: its f_op once learned, else its name, "[eventfd]" (every
 * eventfd's anonymous-inode file has it). */
static __always_inline int is_eventfd(struct file *f)
{
	const char *n;

	if (mt_eventfd_fops)
		return (__u64)f->f_op == mt_eventfd_fops;
	n = bpf_rdonly_cast(f->f_path.dentry->d_name.name, 0);
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
static __always_inline struct file *msg_chan(struct task_struct *task, int fd, int mq_only,
					     struct mt_chan_key *k, __u32 *kind)
{
	struct file *f = fd_file_of(task, fd);

	if (!f)
		return 0;
	*kind = chan_of(f, k);
	if (!*kind || (mq_only != (*kind == MT_K_MQ)))
		return 0;
	return f;
}

/*
 * The slot protocol (fd_dep, maps.bpf.h). A slot belongs to one channel key
 * at a time; a sender of another channel claims it.
 *   sender:  busy += 1; if claimed, or the key is not its own (after
 *            claiming it, see fd_enter), leave; deposit; busy -= 1.
 *   claim:   busy 0 -> MT_SLOT_CLAIM (only while no sender is inside);
 *            gen += 1; empty the deposit; write the key; busy -= CLAIM.
 *   reader:  gen; key compare; take; gen again: a changed gen means the
 *            slot was claimed meanwhile, and what was taken is dropped.
 * So a sender's bits land only in a slot keyed by its own channel (a claim
 * waits for no sender and empties the deposit before the new key shows),
 * and a reader delivers only bits taken while the slot had its key. A
 * reader that finds no deposit notes itself as gen << 32 | tid, which a
 * sender trusts only under the same gen.
 */
static __always_inline struct mt_fdslot *fd_slot(const struct mt_chan_key *k)
{
	__u32 i = hint_bit(k);

	return bpf_map_lookup_elem(&fd_dep, &i);
}

/* Start a claim of sl (busy 0 -> MT_SLOT_CLAIM): 0 if a sender is inside or
 * another claim runs. Then gen moves on and the deposit is emptied. */
static __always_inline int fd_claim(struct mt_fdslot *sl)
{
	if (__sync_val_compare_and_swap(&sl->busy, 0, MT_SLOT_CLAIM) != 0)
		return 0;
	__sync_fetch_and_add(&sl->gen, 1);
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++)
		if (sl->d.vec[w])
			__sync_lock_test_and_set(&sl->d.vec[w], 0);
	sl->d.last_reader = 0;
	sl->reader = 0;
	return 1;
}

static __always_inline void fd_leave(struct mt_fdslot *sl)
{
	__sync_fetch_and_sub(&sl->busy, 1);
}

/* Enter slot sl as a sender of k without claiming it (busy held: no claim
 * can run until fd_leave). 1: entered, k owns the slot; 0: not entered, a
 * claim runs right now (this send's tags are dropped); -1: not entered,
 * another channel owns the slot. */
static __always_inline int fd_enter_own(struct mt_fdslot *sl, const struct mt_chan_key *k)
{
	if (__sync_fetch_and_add(&sl->busy, 1) & MT_SLOT_CLAIM) {
		fd_leave(sl);
		return 0;
	}
	if (key_eq(&sl->key, k))
		return 1;
	fd_leave(sl);
	return -1;
}

/* Enter the slot of k as a sender (fd_enter_own), claiming it for k if
 * another channel has it. 0: not entered (claimed by someone else right
 * now; this send's tags are dropped). */
static __always_inline struct mt_fdslot *fd_enter(const struct mt_chan_key *k)
{
	struct mt_fdslot *sl = fd_slot(k);
	int own;

	if (!sl)
		return 0;
	own = fd_enter_own(sl, k);
	if (own >= 0)
		return own ? sl : 0;
	if (!fd_claim(sl))
		return 0;
	sl->key.a = k->a;
	sl->key.b = k->b;
	sl->key.pad = k->pad;
	sl->key.type = k->type;
	/* the claim ends and this sender enters, in one atomic add (not a
	 * store: a sender that found the claim keeps its count until it
	 * takes it back) */
	__sync_fetch_and_sub(&sl->busy, MT_SLOT_CLAIM - 1);
	chan_hint_set(k);
	return sl;
}

/* The reader the slot's note names, if it was noted under the current gen. */
static __always_inline __u32 fd_reader(struct mt_fdslot *sl)
{
	__u64 r = sl->reader;

	return r >> 32 == sl->gen ? (__u32)r : 0;
}

/*
 * After a deposit into slot sl (for channel k) whose message was read
 * already (the channel is drained at the sender's hook): hand the tags to
 * that reader. After the deposit (a locked OR: a full barrier on x86): a
 * reader that found no slot noted itself in chan_reader, one that found it
 * empty in sl->reader; each looked again after its exchange, so either it
 * saw the deposit or it is seen here. A global function: rare, and
 * deliver() is large.
 */
__noinline int mt_fd_late(struct mt_fdslot *sl, struct mt_chan_key *k)
{
	struct mt_ctl *c = get_ctl();
	__u32 reader;

	if (!sl || !k || !c)
		return 0;
	reader = fd_reader(sl);
	if (!reader)
		reader = chan_reader_of(k);
	deliver_late(c, &sl->d, reader);
	return 0;
}

/* A sender inside slot sl (for channel k, behind file f) deposits s; if
 * its message was read already, the late hand-over; then it leaves. */
static __always_inline void fd_deposit_leave(struct mt_fdslot *sl, struct snap *s,
					     struct mt_ctl *c, struct file *f,
					     struct mt_chan_key *k, __u32 kind)
{
	deposit(&sl->d, s, kind, c->epoch, 0, 0);
	if (chan_drained(f, kind))
		mt_fd_late(sl, k);
	fd_leave(sl);
}

/*
 * A request sent on the message channel k (of kind) behind file (write,
 * writev, mq_timedsend) by a thread that holds tags (mt_sys_exit checked,
 * and found the channel: the fd is walked once per send): deposit the
 * sender's tags on the channel; if the reader already took the message (it
 * ran between the send and this hook), hand the tags to that reader now.
 * task and f: the current task (as cur_cache has it) and the file,
 * untrusted pointers read through read-only loads; the helper for a
 * trusted `current` runs only if the snapshot needs the task storage
 * (take_snapshot_fast could not make it).
 */
__noinline int mt_on_send(struct task_struct *task __arg_untrusted,
			  struct file *f __arg_untrusted, struct mt_chan_key *k, __u32 kind)
{
	struct snap s = {};
	struct mt_fdslot *sl;
	struct mt_ctl *c;
	__u64 left = 0;

	if (!task || !f || !k)
		return 0;
	if (!take_snapshot_fast(task, &s, &c) && !take_snapshot_of(cur_task(), &s, &c))
		return 0;
	/* Pipes, FIFOs, queues and eventfds are one-way: no answer ends a
	 * call on them, so a deadlock tag does not ride them (issue 32: a
	 * chain's logger kept the tag for good), and a write to a thread
	 * that holds one closes no circle (the writer waits for nothing). */
#pragma unroll
	for (int w = 0; w < MT_WORDS; w++) {
		s.vec[w] &= ~c->deadlock[w];
		left |= s.vec[w];
	}
	if (!left)
		return 0;
	sl = fd_enter(k);
	if (!sl)
		return 0;
	/* The sender only reads the reader notes, never stores them: a plain
	 * store here (of the 0 read just before a reader's exchange) once
	 * erased a reader that had found the new deposit empty, and the late
	 * hand-over below found nobody (the CI failure of
	 * first_tagged_send_on_a_fresh_channel, a spinning mq reader, issue
	 * 15). */
	fd_deposit_leave(sl, &s, c, f, k, kind);
	return 0;
}

/*
 * The common tagged send, inline (as rx_inline for receptions: no global
 * call): a sender whose passable tags all have an unlimited TTL (the fast
 * snapshot), none of them a deadlock tag, on a channel that owns its slot
 * already. Returns 1 when the send is done, 0 when mt_on_send must run
 * (a claim, a deadlock tag, the slow snapshot); then the clock this
 * snapshot advanced is advanced again, which a Lamport clock allows.
 */
static __always_inline int tx_inline(struct task_struct *task, struct file *f,
				     struct mt_chan_key *k, __u32 kind)
{
	struct snap s; /* deposit() reads only what the snapshot writes */
	__u64 dl[MT_WORDS];
	struct mt_fdslot *sl;
	struct mt_ctl *c;
	int own;

	if (!take_snapshot_fast(task, &s, &c) || snap_dl(c, &s, dl))
		return 0;
	sl = fd_slot(k);
	if (!sl)
		return 1;
	own = fd_enter_own(sl, k);
	if (own <= 0)
		return own == 0; /* a claim runs: dropped, as fd_enter does */
	fd_deposit_leave(sl, &s, c, f, k, kind);
	return 1;
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
	if (!d || vec_empty(d->vec) || d->tx_tid == tid_of(cur_task()))
		return 0;
	mt_receive(d, 0);
	return 0;
}

/*
 * A message received from fd (read/readv, mq_timedreceive), inline: the
 * common case, a channel that has never had a deposit (its hint bit is
 * clear), leaves the reader's note (one load, a store only when it
 * changed) and returns; sockets, regular files and devices return after
 * the inode's type. Only taking a deposit is a call (mt_receive).
 */
static __always_inline int on_recv(struct task_struct *task, int fd, int mq_only)
{
	struct mt_chan_key k;
	struct mt_fdslot *sl;
	struct file *f;
	__u32 kind, g, tid = tid_of(task);
	__u64 me;
	int clear;

	f = msg_chan(task, fd, mq_only, &k, &kind);
	if (!f)
		return 0;
	if (!chan_hinted(&k)) {
		/* a sender depositing now sees this note, or is seen below;
		 * the note was this thread's already (every read after the
		 * first): no store, and the sender that sets the bit now reads
		 * it, so no second look (issue 15) */
		if (!note_reader(&k, tid) || !chan_hinted(&k))
			return 0;
	}
	sl = fd_slot(&k);
	if (!sl)
		return 0;
	g = sl->gen;
	if (!key_eq(&sl->key, &k)) {
		/* the sender's hook may not have claimed the slot yet: leave a
		 * note, then look again (see note_reader) */
		note_reader(&k, tid);
		g = sl->gen;
		if (!key_eq(&sl->key, &k))
			return 0;
	}
	if (vec_empty(sl->d.vec)) {
		/* as in note_reader: publish, then look again, so that a
		 * sender depositing now either sees this reader or is seen */
		me = (__u64)g << 32 | tid;
		if (sl->reader == me)
			return 0;
		__sync_lock_test_and_set(&sl->reader, me);
		if (vec_empty(sl->d.vec))
			return 0;
	}
	clear = chan_drained(f, kind);
	if (rx_inline(&sl->d, sl, &k, g, tid, clear, task))
		return 0;
	mt_receive_in(&sl->d, sl, &k, (__u64)g << 1 | clear, task);
	return 0;
}

/*
 * A new eventfd: its key (the eventfd's id) is the lowest free number, the
 * id of some eventfd closed a moment ago, of any process. That one's deposit
 * entry is not this channel's: forget what it holds and who read it last
 * (its last_reader was a thread of another process, and the late hand-over
 * gave that thread the first tagged message of this eventfd while its real
 * reader got nothing: first_tagged_send_on_a_fresh_channel_spinning_stress,
 * issue 15). Pipes and queues are keyed by inode numbers, which are not
 * reused like this. Rare (one eventfd2 call), so not on any hot path.
 */
__noinline int mt_on_eventfd(int fd)
{
	struct mt_chan_key k;
	struct mt_fdslot *sl;
	struct file *f = fd_file(fd);
	__u64 h, *r;

	if (!f || chan_of(f, &k) != MT_K_EVENTFD)
		return 0;
	if (!mt_eventfd_fops)
		mt_eventfd_fops = (__u64)f->f_op; /* see is_eventfd */
	if (!chan_hinted(&k))
		return 0;
	sl = fd_slot(&k);
	/* a claim that keeps the key: new gen, empty deposit, no reader */
	if (sl && key_eq(&sl->key, &k) && fd_claim(sl))
		__sync_fetch_and_sub(&sl->busy, MT_SLOT_CLAIM);
	r = reader_slot(&k, &h);
	if (r && *r >> 32 == (__u32)h)
		__sync_lock_test_and_set(r, 0);
	return 0;
}

/* A tagged thread's send on fd: find the message channel inline (writes
 * to sockets, files and devices, most of them, then skip the global call
 * and the helper for a trusted `current`: ~40 ns a write, issue 15) and
 * hand it to mt_on_send, which does not walk the fd again. */
static __always_inline int on_send(struct task_struct *task, int fd, int mq_only)
{
	struct mt_chan_key k;
	struct file *f;
	__u32 kind;

	f = msg_chan(task, fd, mq_only, &k, &kind);
	if (!f || tx_inline(task, f, &k, kind))
		return 0;
	return mt_on_send(task, f, &k, kind);
}

/*
 * The current task, found from the system call's registers through
 * cur_cache (no helper call on a hit; see the map). Read-only: its fields
 * load through an untrusted cast; what needs a trusted task (task storage)
 * fetches it with the helper, on the slow tagged paths only.
 */
static __always_inline struct task_struct *cur_of_regs(struct pt_regs *regs)
{
	__u32 z = 0, i;
	__u64 *base = bpf_map_lookup_elem(&cur_cache, &z), *slot;
	struct task_struct *t;
	long d;

	if (!base)
		return 0;
	/* pointer - pointer: a plain number (privileged programs only) */
	d = (long)regs - (long)base;
	i = (__u32)(d >> 14) & (MT_CUR_SLOTS - 1);
	slot = bpf_map_lookup_elem(&cur_cache, &i);
	if (!slot)
		return 0;
	if (*slot) {
		t = bpf_core_cast((void *)*slot, struct task_struct);
		if ((__u64)t->stack + MT_THREAD_SIZE - bpf_core_type_size(struct pt_regs) ==
		    (__u64)regs)
			return t;
	}
	t = cur_task();
	if ((__u64)bpf_core_cast(t, struct task_struct)->stack + MT_THREAD_SIZE -
		    bpf_core_type_size(struct pt_regs) ==
	    (__u64)regs)
		*slot = (__u64)t;
	return bpf_core_cast(t, struct task_struct);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(mt_sys_exit, struct pt_regs *regs, long ret)
{
	struct task_struct *task;
	long nr;

	/* nobody holds a tag: nothing to deposit, nothing to take */
	if (!mt_held_any)
		return 0;
	nr = regs->orig_ax;
	/* rt_sigreturn (its frame's restore set orig_ax to -1; its return
	 * value is the interrupted code's, any sign): the end of a signal's
	 * request (task.bpf.h) */
	if (nr == -1)
		return mt_sigreturn(cur_of_regs(regs));
	if (ret < 0)
		return 0;
	/* one inline copy of each side (the verifier checks every copy) */
	if (nr == NR_read || nr == NR_readv || nr == NR_mq_timedreceive) {
		if (!ret && nr != NR_mq_timedreceive)
			return 0;
		task = cur_of_regs(regs);
		return task ? on_recv(task, (int)regs->di, nr == NR_mq_timedreceive) : 0;
	}
	if (nr == NR_write || nr == NR_writev || nr == NR_mq_timedsend) {
		if (!ret && nr != NR_mq_timedsend)
			return 0;
		task = cur_of_regs(regs);
		return task && task_tagged(task) ?
			       on_send(task, (int)regs->di, nr == NR_mq_timedsend) :
			       0;
	}
	switch (nr) {
	case NR_eventfd:
	case NR_eventfd2:
		return mt_on_eventfd((int)ret);
	case NR_memfd_create:
		task = cur_of_regs(regs);
		return task && task_tagged(task) ? mt_on_shm((int)ret, 0, 1) : 0;
	case NR_open:
	case NR_openat:
	case NR_openat2:
	case NR_creat: {
		/* shm_open: a file that this call created on a tmpfs */
		struct file *f;

		task = cur_of_regs(regs);
		if (!task || !task_tagged(task) || !(f = fd_file_of(task, (int)ret)))
			return 0;
		if (!(f->f_mode & MT_FMODE_CREATED) || !f->f_inode ||
		    f->f_inode->i_sb->s_magic != TMPFS_MAGIC)
			return 0;
		return mt_on_shm((int)ret, 0, 1);
	}
	case NR_shmget:
		if (!(regs->dx & MT_IPC_CREAT))
			return 0;
		task = cur_of_regs(regs);
		return task && task_tagged(task) ? mt_on_shm(-1, ret, 1) : 0;
	case NR_mmap:
		return (regs->r10 & MT_MAP_SHARED) && (int)regs->r8 >= 0 ?
			       mt_on_shm((int)regs->r8, 0, 0) : 0;
	case NR_shmat:
		return mt_on_shm(-1, (long)regs->di, 0);
	}
	return 0;
}
