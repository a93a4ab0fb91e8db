/* A signal at every instruction: the trap flag single-steps main's calls
 * of instrumented functions (the trampolines' entry and exit paths, the
 * hooks, a longjmp out of nested frames and the next entry's closing of
 * them), and the SIGTRAP handler calls instrumented code at each step.
 * So a handler runs at every instruction boundary of those paths, and at
 * every two consecutive ones: the timer fixture (signals.c) met that
 * pair only by chance (a handler at a push's count and another one
 * instruction later: crates/instr-rt, __mantle_instr_tramp_enter). The result
 * line does not depend on the steps; the counts do, and the hooks must
 * match them. */
#include <setjmp.h>
#include "calls.h"
#include "trap.h"
COUNTER(deep);
COUNTER(on_trap);
static jmp_buf env;
__attribute__((noinline)) void deep(int n) {
  CNT(deep);
  if (n == 0) longjmp(env, 1);
  deep(n - 1);
  sink++;
}
__attribute__((noinline)) void on_trap(int sig) {
  CNT(on_trap);
  sink += mid(sig);
}
int main(void) {
  on_each_step(on_trap, 0);
  volatile long s = 0;
  STEP_ON();
  for (int i = 0; i < 6; i++) {
    s += mid(i);
    if (setjmp(env) == 0) deep(i % 3);
  }
  STEP_OFF();
  printf("result %ld\n", (long)s);
  REPORT(leaf);
  REPORT(mid);
  REPORT(deep);
  REPORT(on_trap);
  return 0;
}
