/* The fib workload of bench/instr's cost run (issue 35): recursive Fibonacci,
 * one small function called tens of millions of times. */
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 37;
  printf("%ld\n", fib(n));
  return 0;
}
