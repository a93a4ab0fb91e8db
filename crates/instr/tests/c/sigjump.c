/* Signal handlers that leave by siglongjmp, from every instruction: for
 * k = 1, 2, ..., the trap flag single-steps a call of mid() and the
 * SIGTRAP handler, at the k-th step, runs instrumented code and jumps
 * back to main, until a k beyond the call's last instruction lets the
 * call finish. So main's trampolines are abandoned at every instruction
 * of their entry and exit paths and their hooks (a push claimed but not
 * completed, among others), and the next call, and main's own exit, must
 * get past what was left. The result line does not depend on the steps;
 * "steps" (the call's length in instructions) varies by build. */
#include <setjmp.h>
#include "calls.h"
#include "trap.h"
static sigjmp_buf env;
static volatile long target, steps;
__attribute__((noinline)) void on_trap(int sig) {
  sink += mid(sig);
  if (++steps == target) siglongjmp(env, 1);
}
int main(void) {
  on_each_step(on_trap, 0);
  long k;
  for (k = 1; k <= 100000; k++) {
    target = k;
    steps = 0;
    if (sigsetjmp(env, 1) == 0) {
      STEP_ON();
      sink += mid(k);
      STEP_OFF();
      break;
    }
    sink += mid(k);
  }
  long s = 0;
  for (long i = 0; i < 100; i++) s += mid(i);
  printf("result %ld\n", s);
  printf("steps %ld\n", k);
  return 0;
}
