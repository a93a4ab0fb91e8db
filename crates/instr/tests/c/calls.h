/* The instrumented calls of the signal fixtures: mid() calls leaf()
 * twice, each counts its own calls (count.h), and `sink` keeps the
 * compiler from dropping them. */
#include "count.h"
COUNTER(leaf);
COUNTER(mid);
volatile long sink;
__attribute__((noinline)) long leaf(long x) {
  CNT(leaf);
  sink = x;
  return x * 3 + 1;
}
__attribute__((noinline)) long mid(long x) {
  CNT(mid);
  return leaf(x) + leaf(x + 1);
}
