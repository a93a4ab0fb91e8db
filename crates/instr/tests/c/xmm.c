/* Vector registers live across the hooks (crates/instr/src/vregs.rs):
 * callers that keep doubles in xmm registers across calls to a leaf
 * that touches none (GCC's -fipa-ra allows it within a unit), arguments
 * passed through a function that never names them, results returned
 * through a tail call, and a call out of the object. */
#include "count.h"
#include <math.h>
COUNTER(leaf); COUNTER(leaf2); COUNTER(keeps); COUNTER(keeps_many); COUNTER(pass); COUNTER(use);
COUNTER(ret_through); COUNTER(give); COUNTER(out); COUNTER(main);
__attribute__((noinline)) static int leaf(int x) { CNT(leaf); return x * 3 + 1; }
__attribute__((noinline)) static int leaf2(int x) { CNT(leaf2); return x * 5 - 2; }
__attribute__((noinline)) double keeps(double d, int n) {
  CNT(keeps);
  double acc = d, b = d * 0.5;
  for (int i = 0; i < n; i++) { acc = acc * 1.25 + leaf(i); b = b - acc * 0.125; }
  return acc + b;
}
/* Sixteen doubles live across each call: every xmm register. */
__attribute__((noinline)) double keeps_many(double s, int n) {
  CNT(keeps_many);
  double a0 = s, a1 = s + 1, a2 = s + 2, a3 = s + 3, a4 = s + 4, a5 = s + 5, a6 = s + 6, a7 = s + 7;
  double a8 = s + 8, a9 = s + 9, a10 = s + 10, a11 = s + 11, a12 = s + 12, a13 = s + 13, a14 = s + 14;
  for (int i = 0; i < n; i++) {
    int k = leaf2(i);
    a0 += k; a1 *= 1.0001; a2 -= k * 0.5; a3 += a0 * 0.001; a4 -= a1 * 0.002; a5 += a2 * 0.003;
    a6 -= a3 * 0.004; a7 += a4 * 0.005; a8 -= a5 * 0.006; a9 += a6 * 0.007; a10 -= a7 * 0.008;
    a11 += a8 * 0.009; a12 -= a9 * 0.01; a13 += a10 * 0.011; a14 -= a11 * 0.012;
  }
  return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11 + a12 + a13 + a14;
}
__attribute__((noinline)) static double use(double x, double y, int k) { CNT(use); return x * k + y; }
/* Never names xmm0/xmm1: they pass through to use(). */
__attribute__((noinline, optimize("no-optimize-sibling-calls"))) double pass(double x, double y, int k) {
  CNT(pass); return use(x, y, k + 1);
}
__attribute__((noinline)) static double give(int k) { CNT(give); return k * 1.5; }
/* The result comes back in xmm0 through a tail call. */
__attribute__((noinline)) double ret_through(int k) { CNT(ret_through); return give(k + 2); }
/* A call out of the object (libm): arguments and results unknown. */
__attribute__((noinline)) double out(double x) { CNT(out); return cos(x) + sqrt(x + 4.0); }
int main(int argc, char **argv) {
  CNT(main);
  double t = 0;
  for (int i = 0; i < 50; i++)
    t += keeps(argc + i * 0.5, 20) + keeps_many(i, 10) + pass(i, 0.25, i) + ret_through(i) + out(i);
  printf("%.6f\n", t);
  REPORT(leaf); REPORT(leaf2); REPORT(keeps); REPORT(keeps_many); REPORT(pass); REPORT(use);
  REPORT(ret_through); REPORT(give); REPORT(out); REPORT(main);
  return 3;
}
