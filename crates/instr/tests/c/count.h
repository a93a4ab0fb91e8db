/* Each fixture counts its own calls, so the test can compare the tracer's
 * counts with the truth. Built with -O2 -fno-inline (no function vanishes). */
#include <stdio.h>
#define COUNTER(f) static long cnt_##f
#define CNT(f) __atomic_fetch_add(&cnt_##f, 1, __ATOMIC_RELAXED)
#define REPORT(f) printf("count %s %ld\n", #f, cnt_##f)
