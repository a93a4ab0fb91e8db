/* An intermediate layer (the paper's libsocket): turns each application
 * request (a line) into a socket message for the stack. */
#include <stdio.h>
#include <string.h>

int main(void) {
    char line[256];

    setvbuf(stdout, NULL, _IOLBF, 0);
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        printf("sock dst=radio0 len=%zu data=%s\n", strlen(line), line);
    }
    return 0;
}
