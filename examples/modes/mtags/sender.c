/* The application (the paper's ping): sends N requests, one every 300 ms. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <mantle/tags.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;
    const char *tag_hipow_name = "HIPOW";
    mantle_tag_create(tag_hipow_name, -1, 0, 64);
    mantle_tag_set(tag_hipow_name, 0);

    for (int i = 1; i <= n; i++) {
        printf("ping seq=%d\n", i);
        fflush(stdout);
        usleep(300000);
    }
    return 0;
}
