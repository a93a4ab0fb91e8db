// C++ whose functions live in COMDAT section groups: inline functions,
// function and class templates, a vtable, and an exception thrown and
// caught across instrumented inline and template frames. Counters are
// C++17 inline variables (one per program, like the functions).
#include <cstdio>
#include <vector>
#define ICOUNTER(f) inline long cnt_##f
#define CNT(f) __atomic_fetch_add(&cnt_##f, 1, __ATOMIC_RELAXED)
#define REPORT(f) printf("count %s %ld\n", #f, cnt_##f)

ICOUNTER(twice); ICOUNTER(mix); ICOUNTER(put); ICOUNTER(area);
ICOUNTER(thrower); ICOUNTER(middle); ICOUNTER(total); ICOUNTER(main);

template <class T> __attribute__((noinline)) T twice(T x) {
  CNT(twice);
  return x * 2 + 1;
}

inline __attribute__((noinline)) long mix(long a, long b, long c, long d, long e, long f, long g) {
  CNT(mix);
  return a * 3 + b * 5 + c * 7 + d * 11 + e * 13 + f * 17 + g * 19;
}

template <class T> struct Stack {
  std::vector<T> v;
  __attribute__((noinline)) void put(T x) { CNT(put); v.push_back(twice(x)); }
};

struct Shape {
  virtual ~Shape() {}
  virtual long area() const = 0;
};
struct Rect : Shape {
  long w, h;
  Rect(long w, long h) : w(w), h(h) {}
  __attribute__((noinline)) long area() const override { CNT(area); return w * h; }
};

template <class T> __attribute__((noinline)) T thrower(T x) {
  CNT(thrower);
  if (x > T(3)) throw int(x);
  return x;
}

inline __attribute__((noinline)) long middle(long x) {
  CNT(middle);
  long r = thrower<long>(x) + twice<long>(x);
  return r * 3 + 1;
}

template <class T> __attribute__((noinline)) T total(const Stack<T> &s) {
  CNT(total);
  T t = 0;
  for (T x : s.v) t += x;
  return t;
}

int main(int argc, char **) {
  CNT(main);
  Stack<int> si;
  Stack<double> sd;
  for (int i = 0; i < 20; i++) {
    si.put(i + argc);
    sd.put(i * 0.5);
  }
  long s = 0;
  for (int i = 0; i < 8; i++) {
    try {
      s += middle(i);
    } catch (int e) {
      s += 1000 + e;
    }
  }
  Rect r(3, 4 + argc);
  const Shape *sh = &r;
  for (int i = 0; i < 5; i++) s += sh->area();
  s += mix(1, 2, 3, 4, 5, 6, argc);
  printf("%ld %d %.1f %ld\n", s, total(si), total(sd), twice<long>(s));
  REPORT(twice); REPORT(mix); REPORT(put); REPORT(area);
  REPORT(thrower); REPORT(middle); REPORT(total); REPORT(main);
  return 0;
}
