/* The instrumentation every method runs (Paper IV §5.4): read a 4-byte
 * value at function entry, accumulate it at exit, per function. The value
 * stands in for a hardware counter (none on these machines). One file,
 * three front ends: -finstrument-functions (MODE_CYG), LLVM XRay
 * (MODE_XRAY) and mantle instr (MODE_MANTLE; MODE_MANTLE_FAST: hooks that
 * save the registers they use themselves). bzip2 is single-threaded,
 * so plain arrays suffice. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

volatile uint32_t bench_value = 1;
static uint32_t start_[4096];
static uint64_t acc_[4096];
static uint64_t calls_;

static inline __attribute__((always_inline)) void on_enter(uint32_t id) {
  start_[id & 4095] = bench_value;
  calls_++;
}
static inline __attribute__((always_inline)) void on_leave(uint32_t id) {
  acc_[id & 4095] += bench_value - start_[id & 4095];
}

static void report(void) {
  if (getenv("BENCH_CALLS")) fprintf(stderr, "bench-calls %llu\n", (unsigned long long)calls_);
}

#if defined(MODE_CYG)
__attribute__((no_instrument_function)) void __cyg_profile_func_enter(void *fn, void *site) {
  (void)site;
  on_enter((uint32_t)((uintptr_t)fn >> 4));
}
__attribute__((no_instrument_function)) void __cyg_profile_func_exit(void *fn, void *site) {
  (void)site;
  on_leave((uint32_t)((uintptr_t)fn >> 4));
}
__attribute__((constructor, no_instrument_function)) static void init(void) { atexit(report); }
#elif defined(MODE_XRAY)
/* xray/xray_interface.h is C++; its C entry points are these. */
enum XRayEntryType { ENTRY = 0, EXIT = 1, TAIL = 2 };
int __xray_set_handler(void (*entry)(int32_t, enum XRayEntryType));
int __xray_patch(void);
static void handler(int32_t id, enum XRayEntryType t) {
  if (t == ENTRY) on_enter((uint32_t)id);
  else on_leave((uint32_t)id);
}
__attribute__((constructor)) static void init(void) {
  __xray_set_handler(handler);
  __xray_patch();
  atexit(report);
}
#elif defined(MODE_MANTLE_FAST)
/* The same hooks, declared to keep every register (compile with
 * -mgeneral-regs-only): the runtime then saves nothing before calling. */
#include "mantle/instr.h"
MANTLE_INSTR_FAST_HOOK static void enter(uint32_t id) { on_enter(id); }
MANTLE_INSTR_FAST_HOOK static void leave(uint32_t id) { on_leave(id); }
__attribute__((constructor)) static void init(void) {
  mantle_instr_set_fast_hooks(enter, leave);
  atexit(report);
}
#elif defined(MODE_MANTLE)
#include "mantle/instr.h"
static void enter(uint32_t id) { on_enter(id); }
static void leave(uint32_t id) { on_leave(id); }
__attribute__((constructor)) static void init(void) {
  mantle_instr_set_hooks(enter, leave);
  atexit(report);
}
#endif
