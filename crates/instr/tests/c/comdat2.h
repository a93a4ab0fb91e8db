// An inline function and a template both translation units of the
// comdat2 fixture instantiate: each object has its own copy in a COMDAT
// group, the linker keeps the first.
#include <cstdio>
inline long cnt_shared, cnt_scale;
inline __attribute__((noinline)) long shared(long x) {
  __atomic_fetch_add(&cnt_shared, 1, __ATOMIC_RELAXED);
  return x * 7 + (x >> 2) - 3;
}
template <class T> __attribute__((noinline)) T scale(T x) {
  __atomic_fetch_add(&cnt_scale, 1, __ATOMIC_RELAXED);
  return x * T(3) - T(1);
}
long from_b(long n);
