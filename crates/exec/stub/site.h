/* Site rewriting, shared by the fast path's stub (stub.c, --rewrite-sites)
 * and the application kernel's library (crates/offload/lib/offload.c):
 * after gVisor's systrap, a system call site that trapped once (Syscall
 * User Dispatch) is rewritten so that later calls from it reach an
 * in-process entry without a signal.
 *
 * Mechanism: the 5 bytes before the site's `syscall` (0f 05) are moved
 * into a per-site stub in a page within 2 GiB of the site, and replaced by
 * `jmp rel32` to it. The `syscall` itself stays, so a thread that had
 * already executed the moved instruction still makes its call (and traps
 * as before). The per-site stub is the moved instruction, then a common
 * body: it steps over the red zone, saves the registers the kernel
 * preserves across a system call (and the flags), calls
 * `entry(nr, a0..a5)` and, unless the entry declines the call, jumps back
 * after the site with the result in rax. A declined call ("punt") is made
 * by the site's own `syscall` instruction, with every register as the
 * program set it: it traps, and the trap handler sees it whole.
 *
 * Shapes of the moved instruction (MX_SITE_*), chosen by the includer:
 * - MX_SITE_IMM: `mov $nr,%eax` (b8 imm32), glibc's wrappers (getpid(),
 *   read(), ...); the number is checked against the trapped call's.
 * - MX_SITE_SYSCALL2: `mov 8(%rsp),%r9` (4c 8b 4c 24 08), glibc's
 *   syscall(2): any number comes through it (the entry must punt what it
 *   cannot make outside a signal handler).
 * - MX_SITE_READ: glibc's read(), whose number is loaded by a 2-byte
 *   `xor %eax,%eax`: `cmpb $i,flag(%rip); je cancellable; xor %eax,%eax;
 *   syscall` (80 3d disp32 i8, 74 rel8, 31 c0, 0f 05). The 7-byte `cmpb`
 *   is the one replaced (its first 5 bytes become the jump; the other 2
 *   are never executed: nothing jumps into an instruction), and the
 *   per-site stub makes the test itself with absolute addresses: a
 *   process with threads takes glibc's cancellable path, unrewritten.
 * The moved instructions of IMM and SYSCALL2 are not rip-relative, and
 * rsp is unchanged at the jump, so they run the same from the per-site
 * stub.
 *
 * Invariants (the includer's): only while no other thread may be
 * executing the site's bytes (cross-modifying code wants more than one
 * store; Linux's text_poke goes through int3); never for calls the trap
 * handler must emulate on its signal frame unless the entry punts them.
 * The code pages written become private copies. The includer builds with
 * -mgeneral-regs-only, so the entry's C code leaves vector registers
 * alone (a system call preserves them). No libc: system calls go through
 * the includer's `sc` (its excluded range). */
#ifndef MANTLE_SITE_H
#define MANTLE_SITE_H
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define MX_SITE_IMM 1u
#define MX_SITE_SYSCALL2 2u
#define MX_SITE_READ 4u

/* the entry's result: in rax:rdx (SysV returns a two-word struct so) */
struct mx_site_ret {
	long ret;  /* the call's result */
	long punt; /* nonzero: not made; the site's own `syscall` makes it (traps) */
};
typedef struct mx_site_ret (*mx_site_entry)(long nr, long a0, long a1, long a2, long a3, long a4,
					    long a5);
typedef long (*mx_site_sc)(long nr, long a, long b, long c, long d, long e, long f);

/* The common body (copied after the moved 5 bytes; rip-relative only
 * within itself). Patch points: the entry's address (the movabs before
 * mx_site_fn), the return address (mx_site_ret), the site's `syscall`
 * (mx_site_sys). */
extern char mx_site_body[] __attribute__((visibility("hidden"))),
	mx_site_fn[] __attribute__((visibility("hidden"))),
	mx_site_ret[] __attribute__((visibility("hidden"))),
	mx_site_sys[] __attribute__((visibility("hidden"))),
	mx_site_end[] __attribute__((visibility("hidden")));
__asm__(".text\n"
	".globl mx_site_body, mx_site_fn, mx_site_ret, mx_site_sys, mx_site_end\n"
	".hidden mx_site_body, mx_site_fn, mx_site_ret, mx_site_sys, mx_site_end\n"
	"mx_site_body:\n"
	"\tlea -128(%rsp),%rsp\n"
	"\tpushfq\n"
	"\tpush %rbp\n"
	"\tmov %rsp,%rbp\n"
	"\tand $-16,%rsp\n"
	"\tpush %rdi\n\tpush %rsi\n\tpush %rdx\n\tpush %r10\n"
	"\tpush %r8\n\tpush %r9\n\tpush %rcx\n\tpush %r11\n"
	"\tpush %rax\n" /* the number (a punt restores it) */
	"\tpush %r9\n"  /* a5: the 7th argument, on the stack */
	"\tmov %r8,%r9\n"
	"\tmov %r10,%r8\n"
	"\tmov %rdx,%rcx\n"
	"\tmov %rsi,%rdx\n"
	"\tmov %rdi,%rsi\n"
	"\tmov %eax,%edi\n"
	"\tmovabs $0x7fffffffffffffff,%rax\n"
	"mx_site_fn:\n"
	"\tcall *%rax\n"
	"\tadd $8,%rsp\n"
	"\ttest %rdx,%rdx\n"
	"\tjnz 1f\n"
	"\tadd $8,%rsp\n"
	"\tpop %r11\n\tpop %rcx\n\tpop %r9\n\tpop %r8\n"
	"\tpop %r10\n\tpop %rdx\n\tpop %rsi\n\tpop %rdi\n"
	"\tmov %rbp,%rsp\n"
	"\tpop %rbp\n"
	"\tpopfq\n"
	"\tlea 128(%rsp),%rsp\n"
	"\tjmp *mx_site_ret(%rip)\n"
	"1:\n"
	"\tpop %rax\n"
	"\tpop %r11\n\tpop %rcx\n\tpop %r9\n\tpop %r8\n"
	"\tpop %r10\n\tpop %rdx\n\tpop %rsi\n\tpop %rdi\n"
	"\tmov %rbp,%rsp\n"
	"\tpop %rbp\n"
	"\tpopfq\n"
	"\tlea 128(%rsp),%rsp\n"
	"\tjmp *mx_site_sys(%rip)\n"
	"mx_site_ret:\n"
	"\t.quad 0\n"
	"mx_site_sys:\n"
	"\t.quad 0\n"
	"mx_site_end:\n");

/* the page per-site stubs are written into (per process: a fork child
 * keeps its copy) */
static char *mx_site_page;
static unsigned mx_site_used;

/* Which shape the bytes before `ip` (the address after a trapped
 * `syscall` of call nr) have, among `shapes`; 0 if none. */
static inline unsigned mx_site_shape(uint64_t ip, uint32_t nr, unsigned shapes)
{
	if (ip < 4096 + 13)
		return 0;
	const unsigned char *p = (const unsigned char *)(uintptr_t)(ip - 7);
	if (p[5] != 0x0f || p[6] != 0x05)
		return 0;
	const unsigned char *q = p - 6;
	if ((shapes & MX_SITE_READ) && nr == 0 && q[0] == 0x80 && q[1] == 0x3d && q[7] == 0x74 &&
	    q[9] == 0x31 && q[10] == 0xc0)
		return MX_SITE_READ;
	if ((shapes & MX_SITE_IMM) && p[0] == 0xb8 && *(const uint32_t *)(const void *)(p + 1) == nr)
		return MX_SITE_IMM;
	if ((shapes & MX_SITE_SYSCALL2) && p[0] == 0x4c && p[1] == 0x8b && p[2] == 0x4c &&
	    p[3] == 0x24 && p[4] == 0x08)
		return MX_SITE_SYSCALL2;
	return 0;
}

static inline int mx_site_near(uint64_t x, uint64_t y)
{
	uint64_t d = x > y ? x - y : y - x;
	return d < (1ull << 30);
}

/* Rewrites the site whose `syscall` ends at ip (trapped with call nr) if
 * its shape is one of `shapes`; later calls from it go to entry. Returns
 * 1 if rewritten. */
static int mx_site_rewrite(uint64_t ip, uint32_t nr, unsigned shapes, mx_site_entry entry,
			   mx_site_sc sc)
{
	unsigned shape = mx_site_shape(ip, nr, shapes);
	if (!shape)
		return 0;
	/* the instruction the jump replaces starts at w; the per-site stub
	 * starts with pro[0..plen) (what w did), then the body */
	unsigned char *w = (unsigned char *)(uintptr_t)(ip - (shape == MX_SITE_READ ? 13 : 7));
	unsigned char pro[32];
	unsigned plen = 0;
	if (shape == MX_SITE_READ) {
		uint64_t flag = (uint64_t)(uintptr_t)w + 7 +
				(uint64_t)(int64_t) * (const int32_t *)(const void *)(w + 2);
		uint64_t cancel = ip - 4 + (uint64_t)(int64_t)(int8_t)w[8];
		pro[plen++] = 0x48; /* movabs $flag,%rax */
		pro[plen++] = 0xb8;
		__builtin_memcpy(pro + plen, &flag, 8);
		plen += 8;
		pro[plen++] = 0x80; /* cmpb $i8,(%rax) */
		pro[plen++] = 0x38;
		pro[plen++] = w[6];
		pro[plen++] = 0x75; /* jne over the far jump */
		pro[plen++] = 14;
		pro[plen++] = 0xff; /* jmp *0(%rip): glibc's cancellable path */
		pro[plen++] = 0x25;
		for (int i = 0; i < 4; i++)
			pro[plen++] = 0;
		__builtin_memcpy(pro + plen, &cancel, 8);
		plen += 8;
		pro[plen++] = 0x31; /* xor %eax,%eax */
		pro[plen++] = 0xc0;
	} else {
		for (unsigned i = 0; i < 5; i++)
			pro[plen++] = w[i]; /* the moved instruction */
	}
	unsigned body = (unsigned)(mx_site_end - mx_site_body), len = plen + body;
	if (!mx_site_page || mx_site_used + len > 4096 ||
	    !mx_site_near((uint64_t)(uintptr_t)mx_site_page, ip)) {
		char *np = 0;
		for (uint64_t k = 1; k < 512 && !np; k++) {
			uint64_t hint = (ip & ~0xfffffull) - k * 0x100000;
			long r = sc(SYS_mmap, (long)hint, 4096, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
			if ((unsigned long)r < -4096ul)
				np = (char *)r;
		}
		if (!np)
			return 0;
		mx_site_page = np;
		mx_site_used = 0;
	} else if (sc(SYS_mprotect, (long)mx_site_page, 4096, PROT_READ | PROT_WRITE, 0, 0, 0) != 0) {
		return 0;
	}
	char *st = mx_site_page + mx_site_used;
	for (unsigned i = 0; i < plen; i++)
		st[i] = (char)pro[i];
	char *b = st + plen;
	for (unsigned i = 0; i < body; i++)
		b[i] = mx_site_body[i];
	*(uint64_t *)(void *)(b + (mx_site_fn - mx_site_body) - 8) = (uint64_t)(uintptr_t)entry;
	*(uint64_t *)(void *)(b + (mx_site_ret - mx_site_body)) = ip;
	*(uint64_t *)(void *)(b + (mx_site_sys - mx_site_body)) = ip - 2;
	mx_site_used += (len + 15) & ~15u;
	sc(SYS_mprotect, (long)mx_site_page, 4096, PROT_READ | PROT_EXEC, 0, 0, 0);
	/* the site: the replaced instruction's first 5 bytes become `jmp
	 * rel32` to the stub; one 8-byte store when they and their
	 * neighbours share a cache line */
	uint64_t pg = (uint64_t)(uintptr_t)w & ~4095ull, end = ip + 1;
	long span = (long)(((end + 4095) & ~4095ull) - pg);
	if (sc(SYS_mprotect, (long)pg, span, PROT_READ | PROT_WRITE | PROT_EXEC, 0, 0, 0) != 0)
		return 0;
	int32_t rel = (int32_t)((int64_t)(uintptr_t)st - (int64_t)((uintptr_t)w + 5));
	unsigned char nb[8];
	for (int i = 0; i < 8; i++)
		nb[i] = w[i];
	nb[0] = 0xe9;
	nb[1] = (unsigned char)rel;
	nb[2] = (unsigned char)(rel >> 8);
	nb[3] = (unsigned char)(rel >> 16);
	nb[4] = (unsigned char)(rel >> 24);
	if (((uintptr_t)w & 63) <= 56) {
		uint64_t v;
		__builtin_memcpy(&v, nb, 8);
		__atomic_store_n((uint64_t *)(void *)w, v, __ATOMIC_SEQ_CST);
	} else {
		for (int i = 4; i >= 0; i--)
			w[i] = nb[i];
	}
	sc(SYS_mprotect, (long)pg, span, PROT_READ | PROT_EXEC, 0, 0, 0);
	return 1;
}

#endif
