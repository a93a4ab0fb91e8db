/* Signals arriving at any point, instrumented code inside the handler:
 * a timer signal every 20 us while main calls instrumented functions 60
 * million times, so handlers run inside the runtime's entry and exit
 * paths (thousands of signals a run). The result line does not depend on the signals; the
 * counts (per run) do, and the hooks must match them. */
#include <signal.h>
#include <string.h>
#include <time.h>
#include "calls.h"
COUNTER(on_signal);
__attribute__((noinline)) void on_signal(int sig) {
  CNT(on_signal);
  sink += mid(sig);
}
int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGALRM, &sa, 0);
  timer_t t;
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_SIGNAL;
  ev.sigev_signo = SIGALRM;
  timer_create(CLOCK_MONOTONIC, &ev, &t);
  struct itimerspec it = {{0, 20000}, {0, 20000}};
  timer_settime(t, 0, &it, 0);
  long s = 0;
  for (long i = 0; i < 20000000; i++) s += mid(i);
  timer_delete(t);
  printf("result %ld\n", s);
  REPORT(leaf);
  REPORT(mid);
  REPORT(on_signal);
  return 0;
}
