#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""ring: one member of a ring of synchronous TCP services, for the deadlock
example (examples/deadlock.sh) and tests (crates/cli/tests/tags_net.rs). It
knows nothing of mantle.

    ring.py PORT NEXT_HOST NEXT_PORT [--start]

Serves one request at a time on PORT: reads a line, calls NEXT with it (a
new connection per call), waits for the answer, then answers with it. With
--start it first waits for a line on stdin, then makes one call of its own
and prints "answered ..." when (if ever) it gets the answer. Every member
of a ring calling itself round waits for the next one: a circular wait.
"""
import socket
import sys


def call(host, port, line):
    with socket.create_connection((host, port)) as s:
        s.sendall(line)
        return s.makefile("rb").readline()


def main():
    port, nhost, nport = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", port))
    ls.listen(8)
    print("listening", flush=True)
    if "--start" in sys.argv:
        sys.stdin.readline()
        try:
            print("answered", call(nhost, nport, b"req\n"), flush=True)
        except OSError as e:
            print("call failed:", e, flush=True)
    while True:
        c, _ = ls.accept()
        with c:
            line = c.makefile("rb").readline()
            try:
                ans = call(nhost, nport, line)
            except OSError as e:
                print("call failed:", e, flush=True)
                ans = b"error\n"
            c.sendall(ans)


if __name__ == "__main__":
    main()
