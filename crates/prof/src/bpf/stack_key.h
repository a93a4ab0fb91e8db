/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The stack key of mantle's two profiler programs (prof.bpf.c's samples,
 * offcpu.bpf.c's blocks): one definition, so that both hash a stack the
 * same way and user space reads both tables with one reader.
 *
 * The stack is taken into a per-CPU scratch buffer, hashed (FNV-1a over
 * its frames, with the kernel/user flag mixed in so that a kernel and a
 * user stack never share a key) and stored in `map` under that hash if it
 * is new. The key 0 (MP_NO_STACK) means "no stack": an empty stack (a
 * user-mode sample has no kernel stack, a kernel thread no user stack) is
 * not a loss; a stack that could not be taken or stored is counted in
 * `*lost`.
 */
#ifndef MANTLE_PROF_STACK_KEY_H
#define MANTLE_PROF_STACK_KEY_H

static __always_inline __u64 mp_stack_key(void *ctx, void *scratch_map, void *map,
					  __u64 flags, __u64 *lost)
{
	__u32 zero = 0;
	struct mp_stack *st = bpf_map_lookup_elem(scratch_map, &zero);
	__u64 h = 0xcbf29ce484222325ULL; /* FNV-1a 64 offset basis */
	long n, err;

	if (!st)
		return MP_NO_STACK;
	/* the helper zeroes the buffer after the last frame */
	n = bpf_get_stack(ctx, st, sizeof(*st), flags);
	if (n <= 0) {
		if (n < 0 && n != -14 /* EFAULT: no such stack */)
			(*lost)++;
		return MP_NO_STACK;
	}
	n /= 8;
	for (int i = 0; i < MP_MAX_STACK; i++) {
		if (i >= n)
			break;
		h ^= st->ips[i];
		h *= 0x100000001b3ULL; /* FNV prime */
	}
	h ^= flags;
	if (h == MP_NO_STACK)
		h = 1;
	err = bpf_map_update_elem(map, &h, st, BPF_NOEXIST);
	if (err && err != -17 /* EEXIST: stored already */) {
		(*lost)++;
		return MP_NO_STACK;
	}
	return h;
}

#endif
