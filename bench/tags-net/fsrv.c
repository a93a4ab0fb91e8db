/* A file server for bench/tags-net (the paper's Table 4): serves read and
 * write requests on one file over TCP, one connection after another. Plain
 * POSIX, mantle-unaware.
 * Protocol (host byte order, both ends on one machine):
 *   request  {u32 op; u32 len; u64 off;} then len bytes for WRITE
 *   reply    {i32 status; u32 len;}      then len bytes for READ
 * usage: fsrv PORT FILE */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

enum { OP_WRITE = 1, OP_READ = 2, OP_TRUNC = 3 };
struct req { uint32_t op, len; uint64_t off; };
struct rep { int32_t status; uint32_t len; };
#define MAXREC (1 << 20)

static int full(int fd, void *b, size_t n, int rd) {
    char *p = b;
    while (n) {
        ssize_t r = rd ? read(fd, p, n) : write(fd, p, n);
        if (r <= 0) return -1;
        p += r, n -= r;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: fsrv PORT FILE\n"); return 2; }
    int file = open(argv[2], O_RDWR | O_CREAT | O_TRUNC, 0644);
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (file < 0 || bind(l, (void *)&a, sizeof a) < 0 || listen(l, 4) < 0) { perror("fsrv"); return 1; }
    char *buf = malloc(MAXREC);
    for (;;) {
        int c = accept(l, NULL, NULL);
        if (c < 0) continue;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct req q;
        while (full(c, &q, sizeof q, 1) == 0 && q.len <= MAXREC) {
            struct rep r = {0, 0};
            struct iovec v[2] = {{&r, sizeof r}, {buf, 0}};
            if (q.op == OP_WRITE) {
                if (full(c, buf, q.len, 1)) break;
                r.status = pwrite(file, buf, q.len, q.off) == (ssize_t)q.len ? 0 : -1;
            } else if (q.op == OP_READ) {
                ssize_t n = pread(file, buf, q.len, q.off);
                r.status = n < 0 ? -1 : 0;
                r.len = n < 0 ? 0 : n;
                v[1].iov_len = r.len;
            } else if (q.op == OP_TRUNC) {
                r.status = ftruncate(file, 0);
            } else {
                r.status = -1;
            }
            if (writev(c, v, 2) != (ssize_t)(sizeof r + v[1].iov_len)) break;
        }
        close(c);
    }
}
