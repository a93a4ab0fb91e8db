/* four threads calling instrumented functions concurrently. */
#include "count.h"
#include <pthread.h>
COUNTER(leaf); COUNTER(work); COUNTER(main);
long leaf(long x) { CNT(leaf); return x ^ (x >> 3); }
void *work(void *arg) {
  CNT(work);
  long s = (long)arg;
  for (int i = 0; i < 20000; i++) s += leaf(s + i);
  return (void *)s;
}
int main(void) {
  CNT(main);
  pthread_t t[4];
  for (long i = 0; i < 4; i++) pthread_create(&t[i], 0, work, (void *)i);
  long s = 0;
  for (int i = 0; i < 4; i++) { void *r; pthread_join(t[i], &r); s += (long)r; }
  printf("%ld\n", s);
  REPORT(leaf); REPORT(work); REPORT(main);
  return 0;
}
