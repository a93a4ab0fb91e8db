/* Sites the planner must refuse, each for its reason. */
#include <stdio.h>
/* A loop back to the second instruction: a branch target inside the patch. */
__asm__(".text\n.globl loop_in\n.type loop_in,@function\nloop_in:\n"
        "  xor %eax, %eax\n"
        "1: add $1, %eax\n  nop; nop; nop; nop; nop\n"
        "  cmp %edi, %eax\n"
        "  jl 1b\n"
        "  nop; nop; nop; nop\n"
        "  ret\n.size loop_in, .-loop_in\n");
/* Shorter than the patch. */
__asm__(".globl tiny\n.type tiny,@function\ntiny:\n  mov %edi, %eax\n  ret\n.size tiny, .-tiny\n");
/* Realigns the stack in the overwritten bytes: the stub cannot follow rsp. */
__asm__(".globl realign\n.type realign,@function\nrealign:\n  push %rbp\n  mov %rsp, %rbp\n  and $-16, %rsp\n"
        "  lea 2(%rdi), %rax\n  leave\n  ret\n.size realign, .-realign\n");
/* Uses r11 in the overwritten bytes (allowed). */
__asm__(".globl uses_r11\n.type uses_r11,@function\nuses_r11:\n  mov %rdi, %r11\n  lea 1(%r11), %rax\n"
        "  nop; nop; nop; nop; ret\n.size uses_r11, .-uses_r11\n");
/* A short conditional branch in the overwritten bytes (moved as jcc rel32). */
__asm__(".globl early\n.type early,@function\nearly:\n  test %edi, %edi\n  je 2f\n  lea 1(%rdi), %eax\n"
        "  imul %eax, %eax\n  add $3, %eax\n  ret\n2: mov $-1, %eax\n  ret\n.size early, .-early\n");
/* A loop back to the entry itself. */
__asm__(".globl loop_entry\n.type loop_entry,@function\nloop_entry:\n  add $1, %edi\n  cmp $10, %edi\n"
        "  nop; nop; nop; nop; nop; nop\n  jl loop_entry\n  mov %edi, %eax\n  ret\n.size loop_entry, .-loop_entry\n");
int early(int n); int loop_entry(int n);
int loop_in(int n); int tiny(int x); long uses_r11(long x); long realign(long x);
volatile long offset_;
/* Reads its return address (long enough to patch otherwise). */
__attribute__((noinline)) void *where(void) { return (char *)__builtin_return_address(0) + offset_; }
__attribute__((noinline)) long plain(long x) { long y = x * 7; __asm__ volatile("" : "+r"(y)); return y + x / 3; }
int main(void) {
  printf("%d %d %ld %d %ld %ld %d %d %d\n", loop_in(5), tiny(3), uses_r11(4), where() != 0, plain(9), realign(5),
         early(0), early(4), loop_entry(2));
  return 0;
}
