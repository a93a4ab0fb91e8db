/* Handlers on an alternate signal stack, at every instruction: as
 * sigstep.c, with the SIGTRAP handler on a sigaltstack(2) stack, first
 * one below the stepped frames (malloc'ed), then one above them (a
 * buffer in main's frame). Frames on two stacks cannot be ordered by address: with the stack above, a
 * handler took the frames it interrupted, lower than its own, for frames
 * skipped by longjmp and closed them (crates/instr-rt, on_other_stack).
 * The result line does not depend on the steps; the counts do, and the
 * hooks must match them. */
#include <stdint.h>
#include <stdlib.h>
#include "calls.h"
#include "trap.h"
#define ALT_SIZE (1 << 20)
COUNTER(on_trap);
__attribute__((noinline)) void on_trap(int sig) {
  CNT(on_trap);
  sink += mid(sig);
}
/* Steps calls of mid() with the handler on `alt`, which must lie below
 * this frame or above it, as `above` says (or the test proves nothing). */
static long stepped(void *alt, int above) {
  char here;
  stack_t ss = {.ss_sp = alt, .ss_size = ALT_SIZE};
  if (!alt || sigaltstack(&ss, 0) ||
      ((uintptr_t)alt > (uintptr_t)&here) != above) {
    printf("no alternate stack %s this frame\n", above ? "above" : "below");
    exit(3);
  }
  long s = 0;
  STEP_ON();
  for (int i = 0; i < 4; i++) s += mid(i);
  STEP_OFF();
  return s;
}
int main(void) {
  /* Above the frames stepped() and its callees will have: a buffer in
   * this frame (an address chosen by mmap could not promise that). */
  char above[ALT_SIZE] __attribute__((aligned(16)));
  on_each_step(on_trap, SA_ONSTACK);
  long s = stepped(malloc(ALT_SIZE), 0);
  s += stepped(above, 1);
  printf("result %ld\n", s);
  REPORT(leaf);
  REPORT(mid);
  REPORT(on_trap);
  return 0;
}
