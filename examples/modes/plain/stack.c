/* An intermediate layer (the paper's io-pkt): turns each socket message
 * into a frame for the driver. */
#include <stdio.h>
#include <string.h>

int main(void) {
    char line[512], dst[32];
    int len, off;

    setvbuf(stdout, NULL, _IOLBF, 0);
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        if (sscanf(line, "sock dst=%31s len=%d data=%n", dst, &len, &off) != 2)
            continue;
        printf("frame if=%s proto=0x0800 len=%d payload=%s\n", dst, len, line + off);
    }
    return 0;
}
