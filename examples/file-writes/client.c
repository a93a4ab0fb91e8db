/* A two-threaded client (mTags Example 2 / Figure 2), mantle-unaware.
 * Thread "writer" (t_a) stores files through the file server (unix socket);
 * thread "logger" (t_b) only writes log lines into a FIFO read by `cat`.
 * usage: client SERVER_SOCKET LOG_FIFO STATE_DIR
 * Writes STATE_DIR/tids ("WRITER_TID LOGGER_TID"), waits for STATE_DIR/go,
 * works, writes STATE_DIR/done, and keeps both threads alive (so that
 * `mantle tag threads` can list them) until STATE_DIR/quit exists. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static const char *sock_path, *fifo_path, *dir;
static pid_t tid[2];
static pthread_barrier_t ready;
static int finished;                        /* threads done with their work */

static int exists(const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}
static void wait_for(const char *name) { while (!exists(name)) usleep(10000); }

static void *writer(void *arg) {
    (void)arg;
    prctl(PR_SET_NAME, "writer");
    tid[0] = gettid();
    pthread_barrier_wait(&ready);
    wait_for("go");
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strncpy(a.sun_path, sock_path, sizeof a.sun_path - 1);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0) { perror("connect"); exit(1); }
    FILE *in = fdopen(dup(s), "r");
    char line[256];
    for (int i = 1; i <= 5; i++) {          /* one request per file write */
        dprintf(s, "WRITE report-%d.txt chapter %d of the report\n", i, i);
        if (!fgets(line, sizeof line, in)) { fprintf(stderr, "server gone\n"); exit(1); }
        usleep(20000);
    }
    __atomic_add_fetch(&finished, 1, __ATOMIC_SEQ_CST);
    wait_for("quit");                       /* stay alive so `tag threads` sees us */
    close(s);
    return NULL;
}

static void *logger(void *arg) {
    (void)arg;
    prctl(PR_SET_NAME, "logger");
    tid[1] = gettid();
    pthread_barrier_wait(&ready);
    wait_for("go");
    FILE *log = fopen(fifo_path, "w");
    if (!log) { perror("fifo"); exit(1); }
    for (int i = 1; i <= 5; i++) {          /* never talks to the file server */
        fprintf(log, "log: step %d\n", i);
        fflush(log);
        usleep(20000);
    }
    __atomic_add_fetch(&finished, 1, __ATOMIC_SEQ_CST);
    wait_for("quit");
    fclose(log);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: client SOCKET FIFO DIR\n"); return 2; }
    sock_path = argv[1], fifo_path = argv[2], dir = argv[3];
    pthread_t t[2];
    pthread_barrier_init(&ready, NULL, 3);
    pthread_create(&t[0], NULL, writer, NULL);
    pthread_create(&t[1], NULL, logger, NULL);
    pthread_barrier_wait(&ready);
    char p[512];
    snprintf(p, sizeof p, "%s/tids.tmp", dir);
    FILE *f = fopen(p, "w");
    fprintf(f, "%d %d\n", tid[0], tid[1]);
    fclose(f);
    char q[512];
    snprintf(q, sizeof q, "%s/tids", dir);
    rename(p, q);
    while (__atomic_load_n(&finished, __ATOMIC_SEQ_CST) < 2) usleep(10000);
    snprintf(p, sizeof p, "%s/done", dir);
    fclose(fopen(p, "w"));
    pthread_join(t[0], NULL);               /* both wait for DIR/quit */
    pthread_join(t[1], NULL);
    return 0;
}
