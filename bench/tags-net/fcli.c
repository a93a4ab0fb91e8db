/* The client for bench/tags-net (the paper's Table 4): an IOZone-like mix
 * against fsrv over TCP, every operation a synchronous request/reply.
 * For each record size: sequential write, rewrite, read, random read,
 * random write of N records each (the file is N records long). Prints one
 * JSON line per (record size, test): total ns for its N operations.
 * usage: fcli HOST PORT N RECSIZE... */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum { OP_WRITE = 1, OP_READ = 2, OP_TRUNC = 3 };
struct req { uint32_t op, len; uint64_t off; };
struct rep { int32_t status; uint32_t len; };
static int s;
static char *buf;

static void full(void *b, size_t n) {
    char *p = b;
    while (n) {
        ssize_t r = read(s, p, n);
        if (r <= 0) { perror("fcli read"); exit(1); }
        p += r, n -= r;
    }
}

static void op(uint32_t o, uint32_t len, uint64_t off) {
    struct req q = {o, o == OP_WRITE ? len : len, off};
    struct iovec v[2] = {{&q, sizeof q}, {buf, o == OP_WRITE ? len : 0}};
    if (writev(s, v, 2) != (ssize_t)(sizeof q + v[1].iov_len)) { perror("fcli write"); exit(1); }
    struct rep r;
    full(&r, sizeof r);
    if (r.status) { fprintf(stderr, "fcli: server error\n"); exit(1); }
    if (r.len) full(buf, r.len);
}

static uint64_t now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000ull + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: fcli HOST PORT N RECSIZE...\n"); return 2; }
    int n = atoi(argv[3]), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    inet_pton(AF_INET, argv[1], &a.sin_addr);
    s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, (void *)&a, sizeof a) < 0) { perror("fcli connect"); return 1; }
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    buf = malloc(1 << 20);
    memset(buf, 'x', 1 << 20);
    uint32_t *perm = malloc(n * sizeof *perm);
    srand(42);
    for (int k = 4; k < argc; k++) {
        uint32_t rec = atoi(argv[k]);
        for (int i = 0; i < n; i++) perm[i] = i;
        for (int i = n - 1; i > 0; i--) { int j = rand() % (i + 1); uint32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
        op(OP_TRUNC, 0, 0);
        const char *names[] = {"write", "rewrite", "read", "random_read", "random_write"};
        for (int t = 0; t < 5; t++) {
            uint64_t t0 = now();
            for (int i = 0; i < n; i++) {
                uint64_t off = (uint64_t)(t >= 3 ? perm[i] : (uint32_t)i) * rec;
                op(t == 2 || t == 3 ? OP_READ : OP_WRITE, rec, off);
            }
            printf("{\"rec\": %u, \"test\": \"%s\", \"ops\": %d, \"ns\": %llu}\n", rec, names[t], n,
                   (unsigned long long)(now() - t0));
        }
    }
    fflush(stdout);
    return 0;
}
