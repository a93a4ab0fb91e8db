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
#include <signal.h>
#include <string.h>
#include "count.h"
COUNTER(leaf);
COUNTER(mid);
COUNTER(deep);
COUNTER(on_trap);
volatile long sink;
static jmp_buf env;
__attribute__((noinline)) long leaf(long x) {
  CNT(leaf);
  sink = x;
  return x * 3 + 1;
}
__attribute__((noinline)) long mid(long x) {
  CNT(mid);
  return leaf(x) + leaf(x + 1);
}
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
/* The trap flag (EFLAGS bit 8): a SIGTRAP after each instruction. The
 * kernel clears it for the handler and sigreturn restores it, so only
 * main's path is stepped. */
#define STEP(op) \
  __asm__ volatile("pushfq\n" op " (%%rsp)\n popfq" ::: "memory", "cc")
int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_trap;
  sigaction(SIGTRAP, &sa, 0);
  volatile long s = 0;
  STEP("orq $0x100,");
  for (int i = 0; i < 6; i++) {
    s += mid(i);
    if (setjmp(env) == 0) deep(i % 3);
  }
  STEP("andq $~0x100,");
  printf("result %ld\n", (long)s);
  REPORT(leaf);
  REPORT(mid);
  REPORT(deep);
  REPORT(on_trap);
  return 0;
}
