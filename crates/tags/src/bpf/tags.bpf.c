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
 *                 before the data is queued, with its sequence range (only
 *                 for a flow whose route ends on this host); taken in
 *                 sock_recv_length once a tagged byte is read.
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
 *   signals       sig_dep[target thread] at signal_generate, taken when a
 *                 handler starts (signal_deliver); per-request tags end at
 *                 its rt_sigreturn (sys_exit, orig_ax -1). Signals that run
 *                 no handler deliver at signal_generate, sender to target,
 *                 without per-request tags (task.bpf.h).
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
 * Cost when untagged: until some thread has held a tag (mt_held_any),
 * every hook returns after one load. Then every send hook starts with one
 * array load of the sender's own vector and returns if it is empty;
 * receivers return after a storage lookup, or, for chan_dep channels,
 * after a per-type count of deposits and a hint bitmap (readers of pipes,
 * eventfd and queues have no count to skip on: they leave a note in
 * chan_reader even before the first deposit). Each helper or BPF-to-BPF
 * call costs ~20 ns here (docs/tags.md, "What each step of the hot path
 * costs"), so a hook fetches the current task once. The hooks are
 * attached only while a tag exists (loader); sys_exit can be left out for
 * a whole load.
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

/*
 * The pieces, by concern, in the order they build on each other (each
 * opens with what it holds). One translation unit, so one object and one
 * skeleton: program and map names are the same as when this was one file.
 */
#include "tags/maps.bpf.h"
#include "tags/core.bpf.h"
#include "tags/task.bpf.h"
#include "tags/deadlock.bpf.h"
#include "tags/sockets.bpf.h"
#include "tags/fdchan.bpf.h"
#include "tags/hosts.bpf.h"
#include "tags/connect.bpf.h"
#include "tags/ops.bpf.h"
