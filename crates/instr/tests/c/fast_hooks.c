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
#else
#define HOOK MANTLE_INSTR_FAST_HOOK static
#define SET mantle_instr_set_fast_hooks
#endif
static uint64_t enters[1024], leaves[1024];
HOOK void on_enter(uint32_t id) {
  __atomic_fetch_add(&enters[id & 1023], 1, __ATOMIC_RELAXED);
}
HOOK void on_leave(uint32_t id) {
  __atomic_fetch_add(&leaves[id & 1023], 1, __ATOMIC_RELAXED);
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
