/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * ctz64(): index of the lowest set bit of a 64-bit word, for the kernel side
 * (tags.bpf.c walks tag vectors bit by bit with it) and for the host unit
 * test that checks it (test_ctz64.c, run by crates/tags/tests/ctz64.rs): the
 * one definition both compile, so the test checks what the BPF runs.
 *
 * De Bruijn multiplication: m & -m isolates the lowest set bit 2^k, the
 * product with the de Bruijn constant shifts a 6-bit window that is unique
 * for each k into the top bits, and the table maps that window back to k.
 * The table belongs to this constant and no other (a constant with a
 * different sequence gave wrong bits for 42..56: issue 8, item 8).
 *
 * The includer provides __u8, __u32, __u64 and __always_inline (vmlinux.h
 * and bpf_helpers.h in the BPF build; linux/types.h and a define on the host).
 */
#ifndef MANTLE_CTZ64_H
#define MANTLE_CTZ64_H

#define MT_DEBRUIJN64 0x03f79d71b4cb0a89ULL

static const __u8 debruijn64[64] = {
	0,  1,  48, 2,  57, 49, 28, 3,  61, 58, 50, 42, 38, 29, 17, 4,
	62, 55, 59, 36, 53, 51, 43, 22, 45, 39, 33, 30, 24, 18, 12, 5,
	63, 47, 56, 27, 60, 41, 37, 16, 54, 35, 52, 21, 44, 32, 23, 11,
	46, 26, 40, 15, 34, 20, 31, 10, 25, 14, 19, 9,  13, 8,  7,  6,
};

/* m != 0; for m == 0 the result is 0, which callers never rely on. */
static __always_inline __u32 ctz64(__u64 m)
{
	return debruijn64[(((m & -m) * MT_DEBRUIJN64) >> 58) & 63];
}

#endif
