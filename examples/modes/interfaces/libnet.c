/* An intermediate layer (the paper's libsocket): turns each application
 * request (a line) into a socket message for the stack. */
#include <stdio.h>
#include <string.h>

int main(void) {
    char line[256], mode[16] = "normal";
    char *m;

    setvbuf(stdout, NULL, _IOLBF, 0);
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        if ((m = strstr(line, " mode=")) != NULL) {
            snprintf(mode, sizeof mode, "%s", m + 6);
            *m = 0;
        }
        printf("sock dst=radio0 mode=%s len=%zu data=%s\n", mode, strlen(line), line);
    }
    return 0;
}
