// The comdat2 fixture's second translation unit.
#include "comdat2.h"
long from_b(long n) {
  long s = 0;
  for (long i = 0; i < n; i++) s += shared(i * 2) + scale<long>(i) + long(scale<double>(i * 0.5));
  return s;
}
