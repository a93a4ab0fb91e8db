/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * mantle executive calls: from a guest of `mantle run` to its executive,
 * and RPC between two guests through the executive (link with -lmantle).
 *
 * One system call with a number no kernel has, MANTLE_SYS_EXEC, which the
 * executive's seccomp filter always sends to the executive:
 *   syscall(MANTLE_SYS_EXEC, op, a1, a2, a3, a4, a5)
 * Not under an executive the kernel answers -ENOSYS ("not a guest").
 * No socket, no shared memory; a program that never calls these is
 * unchanged. Protected path only (`mantle run`, not `--path fast`).
 *
 *   op                 a1         a2       a3       a4        a5        result >= 0
 *   MANTLE_EXEC_PING   -          -        -        -         -         executive's pid
 *   MANTLE_RPC_CALL    server id  req      req_len  resp      resp_cap  reply length
 *   MANTLE_RPC_RECV    buf        cap      -        -         -         token << 16 | len
 *   MANTLE_RPC_REPLY   token      buf      len      -         -         0
 *   MANTLE_RPC_REPLY_RECV token   buf      len      rbuf      rbuf_cap  as RECV
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
 *   -ECONNRESET the server ended, or the executive is ending
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

#ifdef __cplusplus
}
#endif

#endif /* MANTLE_EXEC_H */
