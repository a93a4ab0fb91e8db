/* libmantle-instr: the runtime of functions rewritten by `mantle instr`.
 * Link the rewritten objects with -lmantle-instr (libmantle_instr_rt.a or
 * libmantle_instr_rt.so from crates/instr-rt). See docs/instr.md. */
#ifndef MANTLE_INSTR_H
#define MANTLE_INSTR_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* A hook: called with the function id (see the map file `mantle instr`
 * writes) at every entry or exit of an instrumented function. Hooks run
 * with the instrumented function's arguments saved; they must not call
 * instrumented functions. */
typedef void (*mantle_instr_hook)(uint32_t func_id);

/* Replaces the built-in tracer with these hooks (NULL: none).
 * Thread-safe; applies to entries after the call. */
void mantle_instr_set_hooks(mantle_instr_hook enter, mantle_instr_hook leave);

/* Declares a fast hook: it keeps every register but the flags itself, so
 * the runtime calls it without saving registers first (trampoline exits,
 * the default). Compile the file that defines it with -mgeneral-regs-only
 * (GCC and clang do not save SSE state for this attribute). */
#define MANTLE_INSTR_FAST_HOOK __attribute__((no_caller_saved_registers))

/* Like mantle_instr_set_hooks, for hooks declared MANTLE_INSTR_FAST_HOOK. */
void mantle_instr_set_fast_hooks(mantle_instr_hook enter, mantle_instr_hook leave);

/* Open instrumented frames of the calling thread. */
uint32_t mantle_instr_depth(void);

/* Writes the tracer's outputs now (MANTLE_INSTR_OUT, MANTLE_INSTR_TRACE);
 * also done at exit. */
void mantle_instr_flush(void);

#ifdef __cplusplus
}
#endif
#endif
