/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * mantle executive calls: from a guest of `mantle run` to its executive,
 * and RPC between two guests through the executive (link with -lmantle).
 *
 * One system call with a number no kernel has, MANTLE_SYS_EXEC, which the
 * executive's seccomp filter always sends to the executive:
 *   syscall(MANTLE_SYS_EXEC, op, a1, a2, a3, a4, a5)
 * Not under an executive the kernel answers -ENOSYS ("not a guest").
 * No socket; shared memory only for channels (below). A program that
 * never calls these is unchanged. Protected path only (`mantle run`, not `--path fast`).
 *
 *   op                 a1         a2       a3       a4        a5        result >= 0
 *   MANTLE_EXEC_PING   -          -        -        -         -         executive's pid
 *   MANTLE_RPC_CALL    server id  req      req_len  resp      resp_cap  reply length
 *   MANTLE_RPC_RECV    buf        cap      -        -         -         token << 16 | len
 *   MANTLE_RPC_REPLY   token      buf      len      -         -         0
 *   MANTLE_RPC_REPLY_RECV token   buf      len      rbuf      rbuf_cap  as RECV
 *   MANTLE_RPC_CONNECT server id  -        -        -         -         fds (below)
 *   MANTLE_RPC_ACCEPT  -          -        -        -         -         fds (below)
 *   MANTLE_RPC_CLOSE   channel id -        -        -         -         0
 *
 * Two ways to call another guest:
 *  - through the executive (MANTLE_RPC_CALL...: every request and reply
 *    is a trap to the executive and two copies), or
 *  - over a channel the executive brokers (mantle_chan_*, recommended):
 *    CONNECT (client) and ACCEPT (server) meet in the executive, which
 *    checks that the client may call that server (the system file's
 *    `rpc_to`), then installs two memfds in both guests: the data (both
 *    read and write it) and the ctl page (only the executive writes it;
 *    sealed so that a guest can map it read-only only). Calls then go
 *    directly between the guests through the data: no trap per call; a
 *    side spins a bounded time when its peer runs on another CPU, else
 *    sleeps with FUTEX_WAIT. The executive revokes the channel when a
 *    side's process ends (or when it ends itself); a side may close it.
 *    The result of CONNECT/ACCEPT is (ctl_fd << 32) | data_fd.
 *
 * A server id is the guest's index in its system: the order of [[guest]]
 * in the `mantle run --system` file, from 0 (`mantle run -- CMD`: 0).
 * Requests and replies are at most MANTLE_RPC_MAX bytes. A call is held
 * until its server replies; a receive until a request comes.
 *
 * Errors (negative errno):
 *   -ENOSYS     not a guest of an executive
 *   -EINVAL     unknown op
 *   -ESRCH      no such server guest (or it has ended); on reply: the
 *               client is gone
 *   -EMSGSIZE   longer than MANTLE_RPC_MAX, than the receiver's cap (to
 *               the client) or than the client's resp_cap (to the server;
 *               the request stays pending: reply again)
 *   -EFAULT     a buffer is not mapped (the guest whose buffer it is gets
 *               it)
 *   -ENOENT     reply: no such token, or not received by this guest
 *   -EAGAIN     too many requests queued or receivers waiting
 *   -ECONNRESET the server ended, or the executive is ending; on a
 *               channel: the executive revoked it (a side ended)
 *   -EACCES     this guest may not call that server (`rpc_to`)
 *   -EPIPE      channel: the peer closed it
 *   -ETIMEDOUT  channel: no answer within the timeout
 *   -EPROTO     channel: the peer broke the protocol (a length or status
 *               out of bounds): nothing was written beyond the buffers
 */
#ifndef MANTLE_EXEC_H
#define MANTLE_EXEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MANTLE_SYS_EXEC 0x4d41 /* the reserved system call number */
#define MANTLE_EXEC_PING 1     /* ops */
#define MANTLE_RPC_CALL 2
#define MANTLE_RPC_RECV 3
#define MANTLE_RPC_REPLY 4
#define MANTLE_RPC_REPLY_RECV 5 /* reply (token 0: none), then receive */
#define MANTLE_RPC_MAX 4096
#define MANTLE_RPC_LEN_BITS 16 /* a raw RECV result: token << 16 | len */
#define MANTLE_RPC_CONNECT 6
#define MANTLE_RPC_ACCEPT 7
#define MANTLE_RPC_CLOSE 8

/* A channel's shared layout (Rust mirror: mantle_abi::exec; the library
 * below implements the protocol, docs/exec.md "RPC channels"). */
#define MANTLE_CHAN_MAGIC 0x4e48434du
#define MANTLE_CHAN_VERSION 1
#define MANTLE_CHAN_MAX MANTLE_RPC_MAX
#define MANTLE_CHAN_CLIENT_OFF 64
#define MANTLE_CHAN_SERVER_OFF 128
#define MANTLE_CHAN_REQ_OFF 4096
#define MANTLE_CHAN_RESP_OFF (MANTLE_CHAN_REQ_OFF + MANTLE_CHAN_MAX)
#define MANTLE_CHAN_DATA_SIZE (MANTLE_CHAN_RESP_OFF + MANTLE_CHAN_MAX)
#define MANTLE_CHAN_CTL_SIZE 4096
#define MANTLE_CHAN_OPEN 1    /* ctl state */
#define MANTLE_CHAN_CLOSED 2  /* a side closed it */
#define MANTLE_CHAN_REVOKED 3 /* the executive revoked it */

struct mantle_chan_side { /* one side's line in the data */
	uint32_t seq;     /* client: request number; server: number answered */
	uint32_t len;     /* request / reply bytes */
	uint32_t waiting; /* 1 while this side sleeps on the peer's seq */
	uint32_t cpu;     /* the CPU this side last ran on (a hint) */
	uint32_t arg;     /* client: room for the reply; server: 0 or errno */
	uint32_t reserved[11];
};
struct mantle_chan_ctl { /* the ctl page, written by the executive only */
	uint32_t magic, version, state, id, client, server;
	uint32_t reserved[10];
};
_Static_assert(sizeof(struct mantle_chan_side) == 64, "chan side");
_Static_assert(__builtin_offsetof(struct mantle_chan_side, arg) == 16, "chan side arg");
_Static_assert(sizeof(struct mantle_chan_ctl) == 64, "chan ctl");
_Static_assert(__builtin_offsetof(struct mantle_chan_ctl, id) == 12, "chan ctl id");

/* One call with one argument (MANTLE_EXEC_PING: the executive's pid). */
int64_t mantle_exec_call(uint64_t op, uint64_t arg);

/* Sends req to guest `server`, waits for the reply (into resp); returns
 * its length. */
int64_t mantle_rpc_call(uint32_t server, const void *req, size_t req_len,
			void *resp, size_t resp_cap);

/* Waits for the next request to this guest (into buf); returns its length
 * and stores its token in *token (token: NULL or a writable uint32_t). */
int64_t mantle_rpc_receive(void *buf, size_t cap, uint32_t *token);

/* Answers request `token` with buf; 0 or -errno. */
int mantle_rpc_reply(uint32_t token, const void *buf, size_t len);

/* A server's loop in one trap per request: answers `token` (0: none)
 * with resp, then waits for the next request (into buf) as
 * mantle_rpc_receive; a reply refused for the server's own fault
 * (-ENOENT, -EMSGSIZE, -EFAULT) is returned without receiving. */
int64_t mantle_rpc_reply_receive(uint32_t token, const void *resp, size_t len,
				 void *buf, size_t cap, uint32_t *next);

/* ---- Channels. Timeouts in ns, < 0: no limit (a revoked or closed
 * channel still ends every wait at once). One call at a time per channel;
 * results >= 0 or -errno. */
typedef struct mantle_chan mantle_chan;

/* Client: connects to guest `server` (held until it accepts). */
int mantle_chan_connect(uint32_t server, mantle_chan **out);
/* Server: waits for a client to connect to this guest. */
int mantle_chan_accept(mantle_chan **out);
/* Client: sends req, waits for the reply (into resp): its length. */
int64_t mantle_chan_call(const mantle_chan *ch, const void *req, size_t len,
			 void *resp, size_t cap, int64_t timeout_ns);
/* Server: the next request (into buf): its length. A request larger than
 * cap is answered -EMSGSIZE to its client and the wait goes on. */
int64_t mantle_chan_receive(const mantle_chan *ch, void *buf, size_t cap,
			    int64_t timeout_ns);
/* Server: answers the request received last (-EMSGSIZE: larger than the
 * client's room; the request stays unanswered). */
int mantle_chan_reply(const mantle_chan *ch, const void *resp, size_t len);
/* Server: reply (if a request is unanswered), then receive. */
int64_t mantle_chan_reply_receive(const mantle_chan *ch, const void *resp,
				  size_t len, void *buf, size_t cap,
				  int64_t timeout_ns);
/* How long to spin for the peer before sleeping when it runs on another
 * CPU (default 50000 ns; 0: never spin). */
void mantle_chan_set_spin(const mantle_chan *ch, uint64_t spin_ns);
/* The channel's number in its executive. */
uint32_t mantle_chan_id(const mantle_chan *ch);
/* Closes (the peer's waits fail with -EPIPE) and frees. */
void mantle_chan_close(mantle_chan *ch);

#ifdef __cplusplus
}
#endif

#endif /* MANTLE_EXEC_H */
