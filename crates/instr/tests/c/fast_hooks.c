/* Fast hooks (MANTLE_INSTR_FAST_HOOK, compiled with -mgeneral-regs-only),
 * or ordinary ones with -DORDINARY: count entries and exits per id,
 * thread-safe, and write them at exit to the file MANTLE_TEST_FAST_OUT
 * names ("id enters leaves" lines). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "mantle/instr.h"
#ifdef ORDINARY
#define HOOK static
#define SET mantle_instr_set_hooks
/* An ordinary hook may use every caller-saved register: these write junk
 * into all of them, so a register the runtime should have kept (a value
 * a caller keeps across the call, an argument, a result) and did not
 * shows in the program's output (crates/instr/src/vregs.rs). */
#define CLOBBER()                                                          \
  __asm__ volatile(                                                        \
      "pcmpeqd %%xmm0, %%xmm0\n movaps %%xmm0, %%xmm1\n"                   \
      "movaps %%xmm0, %%xmm2\n movaps %%xmm0, %%xmm3\n"                    \
      "movaps %%xmm0, %%xmm4\n movaps %%xmm0, %%xmm5\n"                    \
      "movaps %%xmm0, %%xmm6\n movaps %%xmm0, %%xmm7\n"                    \
      "movaps %%xmm0, %%xmm8\n movaps %%xmm0, %%xmm9\n"                    \
      "movaps %%xmm0, %%xmm10\n movaps %%xmm0, %%xmm11\n"                  \
      "movaps %%xmm0, %%xmm12\n movaps %%xmm0, %%xmm13\n"                  \
      "movaps %%xmm0, %%xmm14\n movaps %%xmm0, %%xmm15\n"                  \
      "mov $-1, %%rcx\n mov $-1, %%rdx\n mov $-1, %%rsi\n mov $-1, %%rdi\n" \
      "mov $-1, %%r8\n mov $-1, %%r9\n mov $-1, %%r10\n mov $-1, %%r11\n"   \
      ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",   \
      "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", \
      "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11")
#else
#define CLOBBER()
#define HOOK MANTLE_INSTR_FAST_HOOK static
#define SET mantle_instr_set_fast_hooks
#endif
static uint64_t enters[1024], leaves[1024];
HOOK void on_enter(uint32_t id) {
  __atomic_fetch_add(&enters[id & 1023], 1, __ATOMIC_RELAXED);
  CLOBBER();
}
HOOK void on_leave(uint32_t id) {
  __atomic_fetch_add(&leaves[id & 1023], 1, __ATOMIC_RELAXED);
  CLOBBER();
}
static void dump(void) {
  const char *p = getenv("MANTLE_TEST_FAST_OUT");
  FILE *f = p ? fopen(p, "w") : NULL;
  if (!f) return;
  for (int i = 0; i < 1024; i++)
    if (enters[i] || leaves[i]) fprintf(f, "%d %llu %llu\n", i, (unsigned long long)enters[i], (unsigned long long)leaves[i]);
  fclose(f);
}
__attribute__((constructor)) static void init(void) {
  SET(on_enter, on_leave);
  atexit(dump);
}
