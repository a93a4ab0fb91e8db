/* A handler that closes frames skipped by longjmp while the code it
 * interrupted is closing them too. After a longjmp out of padded() and
 * jump(), main's next call closes both frames; jump's lies 8 KiB down,
 * below where a handler's frames start, so a handler running
 * instrumented code closes it as well. For k = 1, 2, ..., the trap flag
 * steps that call and the SIGTRAP handler calls mid() at the k-th step
 * only (on_trap itself is left uninstrumented by the test, or its own
 * entry at the first step would close jump's frame before main could).
 * So the handler comes once at every instruction of main's closing.
 * Each frame must be closed once, with its own leave. */
#include <setjmp.h>
#include "calls.h"
#include "trap.h"
COUNTER(padded);
COUNTER(jump);
static jmp_buf env;
static volatile long target, steps;
__attribute__((noinline)) void jump(void) {
  CNT(jump);
  longjmp(env, 1);
}
__attribute__((noinline)) void padded(void) {
  volatile char pad[8192];
  CNT(padded);
  pad[0] = 1;
  jump();
  sink += pad[0];
}
void on_trap(int sig) {
  if (++steps == target) sink += mid(sig);
}
int main(void) {
  on_each_step(on_trap, 0);
  long s = 0;
  for (long k = 1; k <= 400; k++) {
    target = k;
    steps = 0;
    if (setjmp(env) == 0) padded();
    STEP_ON();
    sink += mid(k);
    STEP_OFF();
    s += k;
  }
  printf("result %ld\n", s);
  REPORT(leaf);
  REPORT(mid);
  REPORT(padded);
  REPORT(jump);
  return 0;
}
