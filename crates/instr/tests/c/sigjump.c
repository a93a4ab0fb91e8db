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
#include <signal.h>
#include <string.h>
#include <stdio.h>
volatile long sink;
static sigjmp_buf env;
static volatile long target, steps;
__attribute__((noinline)) long leaf(long x) {
  sink = x;
  return x * 3 + 1;
}
__attribute__((noinline)) long mid(long x) { return leaf(x) + leaf(x + 1); }
__attribute__((noinline)) void on_trap(int sig) {
  sink += mid(sig);
  if (++steps == target) siglongjmp(env, 1);
}
/* The trap flag (EFLAGS bit 8), as in sigstep.c. A jump out of the
 * handler leaves it clear (the kernel cleared it for the handler). */
#define STEP(op) \
  __asm__ volatile("pushfq\n" op " (%%rsp)\n popfq" ::: "memory", "cc")
int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_trap;
  sigaction(SIGTRAP, &sa, 0);
  long k;
  for (k = 1; k <= 100000; k++) {
    target = k;
    steps = 0;
    if (sigsetjmp(env, 1) == 0) {
      STEP("orq $0x100,");
      sink += mid(k);
      STEP("andq $~0x100,");
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
