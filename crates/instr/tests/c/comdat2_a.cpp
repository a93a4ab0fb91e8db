// The comdat2 fixture's first translation unit (main).
#include "comdat2.h"
int main(int argc, char **) {
  long s = 0;
  for (long i = 0; i < 12 + argc; i++) s += shared(i) + scale<long>(i);
  s += from_b(9);
  printf("%ld\n", s);
  printf("count shared %ld\ncount scale %ld\n", cnt_shared, cnt_scale);
  return 0;
}
