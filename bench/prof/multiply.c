/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
#include <stdio.h>
#include <stdlib.h>
/* The paper's Multiply workload: main calls slow_multiply and fast_multiply. */
__attribute__((noinline)) int fast_multiply(int x, int y) { return x * y; }
__attribute__((noinline)) int slow_multiply(int x, int y) {
	int i, j, z;
	for (i = 0, z = 0; i < x; i++)
		z = z + y;
	for (j = 0; j < 100; j++) asm volatile("" ::: "memory");
	return z;
}
int main(int argc, char **argv) {
	long n = argc > 1 ? atol(argv[1]) : 20000;
	int i, j, x;
	volatile int r = 0;
	for (i = 0; i < n; i++)
		for (j = 0; j < 30; j++) {
			x = fast_multiply(i, j);
			r += x;
			x = slow_multiply(i % 1000, j);
			r += x;
		}
	printf("%d\n", r);
	return 0;
}
