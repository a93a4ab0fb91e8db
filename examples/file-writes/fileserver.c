/* A file server (mTags Example 2 / Figure 2, t_c), mantle-unaware: one
 * thread serving "WRITE NAME TEXT" lines on a unix socket, one connection
 * after another, storing TEXT in DIR/NAME and answering "OK".
 * usage: fileserver SOCKET DIR */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: fileserver SOCKET DIR\n"); return 2; }
    prctl(PR_SET_NAME, "fileserver");
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    strncpy(a.sun_path, argv[1], sizeof a.sun_path - 1);
    unlink(argv[1]);
    int l = socket(AF_UNIX, SOCK_STREAM, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 8) < 0) { perror("listen"); return 1; }
    for (;;) {
        int c = accept(l, NULL, NULL);
        if (c < 0) continue;
        FILE *in = fdopen(c, "r");
        char line[512], name[128], path[1024];
        while (fgets(line, sizeof line, in)) {
            int off = 0;
            if (sscanf(line, "WRITE %127s %n", name, &off) != 1 || strchr(name, '/')) {
                dprintf(c, "ERR\n");
                continue;
            }
            snprintf(path, sizeof path, "%s/%s", argv[2], name);
            FILE *f = fopen(path, "w");
            if (f) { fputs(line + off, f); fclose(f); }
            dprintf(c, f ? "OK\n" : "ERR\n");
        }
        fclose(in);
    }
}
