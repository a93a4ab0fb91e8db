// A C++ exception crossing instrumented frames (an int: no library
// classes, so no COMDAT groups in a non-PIC object).
#include "count.h"
COUNTER(thrower); COUNTER(middle); COUNTER(main);
__attribute__((noinline)) int thrower(int x) { CNT(thrower); if (x > 2) throw x; return x; }
__attribute__((noinline)) int middle(int x) { CNT(middle); int r = thrower(x); return r * 3 + 1; }
int main() {
  CNT(main);
  int s = 0;
  for (int i = 0; i < 6; i++) {
    try { s += middle(i); } catch (int e) { s += 100 + e; }
  }
  printf("%d\n", s);
  REPORT(thrower); REPORT(middle); REPORT(main);
  return 0;
}
