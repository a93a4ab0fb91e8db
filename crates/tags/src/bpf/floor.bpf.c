// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The hooks' floor (issue 15): one *empty* program on every hook the tags
 * kernel side attaches while a tag exists, attached the same way
 * (tp_btf = BPF_TRACE_RAW_TP, cgroup sock_addr, sockops at the cgroup v2
 * root), so that bench/tags can measure what merely having the hooks costs
 * (the tracepoint slow paths, the trampoline into a BPF program) apart from
 * what mantle's programs do in them. sockops turns on the TCP header-option
 * callbacks mantle turns on while a global tag exists (see fl_sockops),
 * and then writes and parses nothing.
 *
 * Not part of mantle's kernel side: loaded only by `mantle-tags-floor up`
 * (src/bin/mantle-tags-floor.rs) for benchmarks. Program names start with
 * fl_, so `mantle tags up` does not take them for another copy of tags.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The same hooks as TAGGED_HOOKS in src/kernel.rs, and sockops. */
SEC("tp_btf/sys_exit")
int BPF_PROG(fl_sys_exit, struct pt_regs *regs, long ret) { return 0; }

SEC("tp_btf/sched_process_fork")
int BPF_PROG(fl_fork, struct task_struct *parent, struct task_struct *child) { return 0; }

SEC("tp_btf/sched_process_exit")
int BPF_PROG(fl_exit, struct task_struct *task) { return 0; }

SEC("tp_btf/signal_generate")
int BPF_PROG(fl_signal, int sig, struct kernel_siginfo *info, struct task_struct *task, int group,
	     int result)
{
	return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(fl_sock_send, struct sock *sk, int ret, int flags) { return 0; }

SEC("tp_btf/sk_data_ready")
int BPF_PROG(fl_unix_queued, struct sock *sk) { return 0; }

SEC("tp_btf/sock_recv_length")
int BPF_PROG(fl_sock_recv, struct sock *sk, int ret, int flags) { return 0; }

SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(fl_tcp_sendmsg, struct sock *sk, struct msghdr *msg, struct sk_buff *skb,
	     int size_goal)
{
	return 0;
}

SEC("cgroup/sendmsg4")
int fl_sendmsg4(struct bpf_sock_addr *ctx) { return 1; }

SEC("cgroup/sendmsg6")
int fl_sendmsg6(struct bpf_sock_addr *ctx) { return 1; }

/* The option callbacks mantle turns on while a global tag exists (and no
 * global tag travels with replies): writing on the connect() side, parsing
 * unknown options on both; no option is written or read. */
SEC("sockops")
int fl_sockops(struct bpf_sock_ops *skops)
{
	__u32 op = skops->op;
	int fl = BPF_SOCK_OPS_PARSE_UNKNOWN_HDR_OPT_CB_FLAG;

	if (op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB && op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	if (op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB)
		fl |= BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG;
	bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags | fl);
	return 1;
}
