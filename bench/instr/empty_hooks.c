/* Empty hooks for bench/instr's cost run (issue 35: the cost of the
 * instrumentation itself, per call): one file, four front ends, as
 * hooks.c. The hooks do nothing unless BENCH_CALLS is set, when the entry
 * hook counts calls (a separate, untimed run): the timed runs pay for one
 * predicted branch on a constant. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int counting;
static uint64_t calls_;
#define ON_ENTER() do { if (__builtin_expect(counting, 0)) calls_++; } while (0)
static void report(void) { fprintf(stderr, "bench-calls %llu\n", (unsigned long long)calls_); }
#define INIT() do { counting = getenv("BENCH_CALLS") != 0; if (counting) atexit(report); } while (0)

#if defined(MODE_CYG)
__attribute__((no_instrument_function)) void __cyg_profile_func_enter(void *fn, void *site) {
  (void)fn, (void)site;
  ON_ENTER();
}
__attribute__((no_instrument_function)) void __cyg_profile_func_exit(void *fn, void *site) { (void)fn, (void)site; }
__attribute__((constructor, no_instrument_function)) static void init(void) { INIT(); }
#elif defined(MODE_XRAY)
enum XRayEntryType { ENTRY = 0, EXIT = 1, TAIL = 2 };
int __xray_set_handler(void (*entry)(int32_t, enum XRayEntryType));
int __xray_patch(void);
static void handler(int32_t id, enum XRayEntryType t) {
  (void)id;
  if (t == ENTRY) ON_ENTER();
}
__attribute__((constructor)) static void init(void) {
  INIT();
  __xray_set_handler(handler);
  __xray_patch();
}
#elif defined(MODE_MANTLE_FAST)
#include "mantle/instr.h"
MANTLE_INSTR_FAST_HOOK static void enter(uint32_t id) { (void)id; ON_ENTER(); }
MANTLE_INSTR_FAST_HOOK static void leave(uint32_t id) { (void)id; }
__attribute__((constructor)) static void init(void) {
  INIT();
  mantle_instr_set_fast_hooks(enter, leave);
}
#elif defined(MODE_MANTLE)
#include "mantle/instr.h"
static void enter(uint32_t id) { (void)id; ON_ENTER(); }
static void leave(uint32_t id) { (void)id; }
__attribute__((constructor)) static void init(void) {
  INIT();
  mantle_instr_set_hooks(enter, leave);
}
#elif defined(MODE_NONE)
/* No hooks (mantle's default with no output asked for): counts through
 * ordinary hooks only in the untimed counting run. */
#include "mantle/instr.h"
static void enter(uint32_t id) { (void)id; calls_++; }
__attribute__((constructor)) static void init(void) {
  INIT();
  if (counting) mantle_instr_set_hooks(enter, 0);
}
#endif
