/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Host unit test of the kernel side's ctz64() (ctz64.h, the same code the
 * BPF object is built from), against the compiler's __builtin_ctzll: every
 * single bit, every word with its lowest set bit at each position, and a
 * million pseudo-random words. Built and run by crates/tags/tests/ctz64.rs.
 * Prints each wrong answer and exits 1 if there is any.
 */
#include <linux/types.h>
#include <stdio.h>

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif
#include "ctz64.h"

static unsigned long failures;

static void check(__u64 m)
{
	__u32 got = ctz64(m), want = (__u32)__builtin_ctzll(m);

	if (got != want) {
		if (failures < 64)
			printf("ctz64(0x%016llx) = %u, want %u\n", (unsigned long long)m, got, want);
		failures++;
	}
}

/* xorshift64*: deterministic, so a failure reproduces. */
static __u64 next(__u64 *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dULL;
}

int main(void)
{
	__u64 seed = 0x9e3779b97f4a7c15ULL;
	unsigned long words = 0;

	for (int b = 0; b < 64; b++) {
		check(1ULL << b);
		/* every bit at and above b set: only the lowest may count */
		check(~0ULL << b);
		words += 2;
	}
	for (int i = 0; i < 1000000; i++) {
		__u64 m = next(&seed);
		/* sparse words too: lowest set bits spread over all 64 places */
		if (i & 1)
			m &= next(&seed) & next(&seed);
		if (m) {
			check(m);
			words++;
		}
	}
	printf("ctz64: %lu words checked, %lu wrong\n", words, failures);
	return failures ? 1 : 0;
}
