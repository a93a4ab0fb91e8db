/* An intermediate layer (the paper's io-pkt): turns each socket message
 * into a frame for the driver. */
#include <stdio.h>
#include <string.h>

int main(void) {
    char line[512], dst[32], mode[16];
    int len, off;

    setvbuf(stdout, NULL, _IOLBF, 0);
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        if (sscanf(line, "sock dst=%31s mode=%15s len=%d data=%n", dst, mode, &len, &off) != 3)
            continue;
        printf("frame if=%s mode=%s proto=0x0800 len=%d payload=%s\n", dst, mode, len, line + off);
    }
    return 0;
}
