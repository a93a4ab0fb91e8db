/* A component written in C on libmantle (include/mantle/comp.h): f0 adds
 * a0 + a5; f4(cbid, n) maps a passed CBUF, sums its n bytes, writes the
 * sum into its first 8 bytes and returns it (-errno if refused). */
#include <errno.h>
#include <string.h>
#include "mantle/comp.h"

static int64_t add(const uint64_t *a) { return (int64_t)(a[0] + a[5]); }

static int64_t sum(const uint64_t *a) {
    size_t n = (size_t)a[1];
    unsigned char *b = mantle_cbuf2buf((uint32_t)a[0], n < 8 ? 8 : n);
    if (!b)
        return -errno;
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += b[i];
    memcpy(b, &s, 8);
    return (int64_t)s;
}

int main(void) {
    if (mantle_comp_init() != 0)
        return 2;
    mantle_comp_fn fns[] = {add, add, add, add, sum};
    return -mantle_comp_serve(fns, 5);
}
