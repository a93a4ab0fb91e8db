/* Per-call cost of the two exit designs on one small function called
 * in a loop (bzip2's hot functions cannot take the balanced exit: their
 * epilogues are branch targets). */
#include <stdio.h>
#include <stdlib.h>
volatile long sink;
__attribute__((noinline)) long work(long x, long y) {
  sink = x;
  long s = x * 31 + y;
  sink = s;
  return s ^ (y >> 3);
}
int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 20000000, s = 0;
  for (long i = 0; i < n; i++) s += work(i, s);
  printf("%ld\n", s);
  return 0;
}
