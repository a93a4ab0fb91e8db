/* mantle component runtime: isolated components with synchronous
 * invocation (thread migration) and CBUFs. Link with -lmantle; start the
 * component with `mantle comp up SYSTEM.toml` (docs/comp.md).
 * Errors: negative errnos; CBUF pointers: NULL with errno set. */
#ifndef MANTLE_COMP_H
#define MANTLE_COMP_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

/* Reads the environment `mantle comp up` set; 0 or -EINVAL. */
int mantle_comp_init(void);

/* Invokes function `func` of `server` (a component this one may invoke)
 * with up to 6 words; the caller blocks, the server runs it at the
 * caller's priority, read at every call (a thread that changes its
 * scheduling between calls needs to tell nobody).
 * -EPIPE: the server died; -EACCES: not allowed. */
int mantle_comp_invoke(const char *server, uint32_t func, const uint64_t *args,
                       size_t nargs, int64_t *ret);

/* One exported function: 6 argument words in, one word out. */
typedef int64_t (*mantle_comp_fn)(const uint64_t *args);

/* Serves fns[0..n) on this component's contexts; returns only on error. */
int mantle_comp_serve(const mantle_comp_fn *fns, size_t n);

/* TMEM paper Table I. */
void *mantle_cbuf_alloc(size_t size, uint32_t *cbid);
int mantle_cbuf_free(void *buf);
void *mantle_cbuf2buf(uint32_t cbid, size_t size);

#ifdef __cplusplus
}
#endif
#endif
