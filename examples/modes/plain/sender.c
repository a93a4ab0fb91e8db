/* The application (the paper's ping): sends N requests, one every 300 ms. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;

    for (int i = 1; i <= n; i++) {
        printf("ping seq=%d\n", i);
        fflush(stdout);
        usleep(300000);
    }
    return 0;
}
