/* setjmp/longjmp out of instrumented frames: the skipped frames are
 * closed by the runtime, later calls still pair up. */
#include "count.h"
#include <setjmp.h>
COUNTER(deep); COUNTER(after); COUNTER(main);
static jmp_buf env;
void deep(int n) { CNT(deep); if (n == 0) longjmp(env, 1); deep(n - 1); printf("never\n"); }
int after(int x) { CNT(after); return x * 3; }
int main(void) {
  CNT(main);
  long s = 0;
  for (int i = 0; i < 50; i++) {
    if (setjmp(env) == 0) deep(i % 7);
    s += after(i);
  }
  printf("%ld\n", s);
  REPORT(deep); REPORT(after); REPORT(main);
  return 0;
}
