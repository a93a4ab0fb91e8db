/* Handlers on an alternate signal stack, at every instruction: as
 * sigstep.c, with the SIGTRAP handler on a sigaltstack(2) stack, first
 * one below main's stack (malloc'ed), then one mapped above it. Frames
 * on two stacks cannot be ordered by address: with the stack above, a
 * handler took the frames it interrupted, lower than its own, for frames
 * skipped by longjmp and closed them (crates/instr-rt, on_other_stack).
 * The result line does not depend on the steps; the counts do, and the
 * hooks must match them. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include "calls.h"
#include "trap.h"
#define ALT_SIZE (1 << 20)
COUNTER(on_trap);
__attribute__((noinline)) void on_trap(int sig) {
  CNT(on_trap);
  sink += mid(sig);
}
/* A mapping above this thread's stack: the first free 16 MiB step down
 * from the top of the user address space. */
static void *above_stack(void) {
  char here;
  for (uintptr_t a = 0x7fffff000000; a > (uintptr_t)&here + (64 << 20); a -= 16 << 20) {
    void *p = mmap((void *)a, ALT_SIZE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != MAP_FAILED) return p;
  }
  return 0;
}
static long stepped(void *alt) {
  stack_t ss = {.ss_sp = alt, .ss_size = ALT_SIZE};
  if (!alt || sigaltstack(&ss, 0)) {
    printf("no alternate stack\n");
    exit(3);
  }
  long s = 0;
  STEP_ON();
  for (int i = 0; i < 4; i++) s += mid(i);
  STEP_OFF();
  return s;
}
int main(void) {
  on_each_step(on_trap, SA_ONSTACK);
  char here;
  void *below = malloc(ALT_SIZE), *above = above_stack();
  printf("below %d above %d\n", (uintptr_t)below < (uintptr_t)&here,
         above && (uintptr_t)above > (uintptr_t)&here);
  long s = stepped(below);
  s += stepped(above);
  printf("result %ld\n", s);
  REPORT(leaf);
  REPORT(mid);
  REPORT(on_trap);
  return 0;
}
