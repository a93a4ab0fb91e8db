/* recursion, varargs, more than 6 arguments (integers and doubles),
 * function pointers, tail calls (-O2 turns them into jmp). */
#include "count.h"
#include <stdarg.h>
COUNTER(fib); COUNTER(sum); COUNTER(many); COUNTER(mix); COUNTER(sq);
COUNTER(cube); COUNTER(tail_a); COUNTER(tail_b); COUNTER(main);
/* no tail-recursion elimination: every recursive call is a real entry */
__attribute__((optimize("no-optimize-sibling-calls"))) int fib(int n) { CNT(fib); return n < 2 ? n : fib(n - 1) + fib(n - 2); }
int sum(int n, ...) {
  CNT(sum);
  va_list ap; va_start(ap, n);
  int s = 0; for (int i = 0; i < n; i++) s += va_arg(ap, int);
  va_end(ap); return s;
}
long many(long a, long b, long c, long d, long e, long f, long g, long h, long i) {
  CNT(many); return a + b * 2 + c * 3 + d * 4 + e * 5 + f * 6 + g * 7 + h * 8 + i * 9;
}
double mix(double a, int b, double c, int d, double e, int f, double g, int h,
           double i, int j, double k, int l, double m, double n, double o) {
  CNT(mix); return a + b + c * d + e * f + g * h + i * j + k * l + m + n + o;
}
long sq(long x) { CNT(sq); return x * x; }
long cube(long x) { CNT(cube); return x * x * x; }
long tail_b(long x) { CNT(tail_b); return x > 0 ? sq(x) : cube(x); }   /* tail call */
long tail_a(long x) { CNT(tail_a); return tail_b(x - 1); }            /* tail call */
int main(int argc, char **argv) {
  CNT(main);
  long (*ops[])(long) = { sq, cube, tail_a };
  long acc = 0;
  for (int i = 0; i < 300; i++) acc += ops[i % 3](i + argc);
  printf("%d %d %ld %.3f %ld\n", fib(18), sum(5, 1, 2, 3, 4, 5),
         many(1, 2, 3, 4, 5, 6, 7, 8, 9),
         mix(1.5, 2, 3.5, 4, 5.5, 6, 7.5, 8, 9.5, 10, 11.5, 12, 13.5, 14.5, 15.5), acc);
  REPORT(fib); REPORT(sum); REPORT(many); REPORT(mix); REPORT(sq); REPORT(cube);
  REPORT(tail_a); REPORT(tail_b); REPORT(main);
  return 7;
}
