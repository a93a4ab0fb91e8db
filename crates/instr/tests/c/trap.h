/* Single-stepping with the trap flag (EFLAGS bit 8): a SIGTRAP after each
 * instruction between STEP_ON() and STEP_OFF(). The kernel clears the
 * flag for the handler and sigreturn restores it, so only the stepped
 * code is stepped, not the handler; a siglongjmp out of the handler
 * leaves it clear. */
#include <signal.h>
#include <string.h>
#define STEP_ON() \
  __asm__ volatile("pushfq\n orq $0x100, (%%rsp)\n popfq" ::: "memory", "cc")
#define STEP_OFF() \
  __asm__ volatile("pushfq\n andq $~0x100, (%%rsp)\n popfq" ::: "memory", "cc")
static void on_each_step(void (*handler)(int), int flags) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sa.sa_flags = flags;
  sigaction(SIGTRAP, &sa, 0);
}
