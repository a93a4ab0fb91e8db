/* The driver (the sink): serves frames on a unix socket, one connection
 * after another, and transmits each one. */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static void do_regular_send(const char *frame) { printf("driver: transmit at normal power: %s\n", frame); }

int main(int argc, char **argv) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    char frame[512];
    int l = socket(AF_UNIX, SOCK_STREAM, 0);

    if (argc != 2)
        return 2;
    strncpy(a.sun_path, argv[1], sizeof a.sun_path - 1);
    unlink(argv[1]);
    if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 4) < 0)
        return 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (;;) {
        FILE *in = fdopen(accept(l, NULL, NULL), "r");
        while (in && fgets(frame, sizeof frame, in)) {
            frame[strcspn(frame, "\n")] = 0;
            do_regular_send(frame);
        }
        if (in)
            fclose(in);
    }
}
