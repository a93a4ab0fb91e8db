#!/usr/bin/env bash
# Two builds of libmantle_instr_rt.a side by side on micro.c (work() x N,
# trampoline exit, fast and ordinary hooks from hooks.c): for a change to
# the runtime's assembly, its cost per call measured in one run. The
# programs run alternately (base, A, B for each hook kind, each
# repetition), pinned with taskset -c CPU.
#
#   bench/instr/runtime_ab.sh OLD.a NEW.a [--reps 11] [--cpu 1] [--n 20000000]
#
# Prints, per program, the median [min-max] seconds and ns/call over the
# uninstrumented base, and per hook kind the median of NEW/OLD over the
# repetitions (each repetition's NEW run over its own OLD run).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
[ $# -ge 2 ] || { sed -n '2,13p' "$0"; exit 2; }
old=$(realpath "$1") new=$(realpath "$2"); shift 2
reps=11 cpu=1 n=20000000
while [ $# -gt 0 ]; do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --cpu) cpu=$2; shift 2 ;;
    --n) n=$2; shift 2 ;;
    *) echo "runtime_ab.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
mantle=${MANTLE:-$root/target/release/mantle}
[ -x "$mantle" ] || { echo "runtime_ab.sh: no $mantle (cargo build --release, or MANTLE=)" >&2; exit 2; }
d=$(mktemp -d /tmp/mantle-runtime-ab.XXXXXX)
trap 'rm -rf "$d"' EXIT
inc="$root/crates/instr-rt/include"
gcc -O2 -c "$here/micro.c" -o "$d/micro.o"
"$mantle" instr rewrite "$d/micro.o" -o "$d/micro-i.o" -f work --exit auto >/dev/null
gcc -O2 -DMODE_MANTLE_FAST -mgeneral-regs-only -I"$inc" -c "$here/hooks.c" -o "$d/fast.o"
gcc -O2 -DMODE_MANTLE -I"$inc" -c "$here/hooks.c" -o "$d/ordinary.o"
gcc "$d/micro.o" -o "$d/base"
progs=(base)
for kind in fast ordinary; do
  for v in old new; do
    lib=$old; [ $v = new ] && lib=$new
    gcc "$d/micro-i.o" "$d/$kind.o" "$lib" -lpthread -o "$d/$kind-$v"
    progs+=("$kind-$v")
  done
done
# The output must not change with the runtime.
want=$("$d/base" 1000)
for p in "${progs[@]}"; do
  [ "$("$d/$p" 1000)" = "$want" ] || { echo "runtime_ab.sh: $p prints other output" >&2; exit 1; }
done
echo "micro.c work() x $n, taskset -c $cpu, $reps repetitions, order ${progs[*]}" >&2
for ((r = 1; r <= reps; r++)); do
  for p in "${progs[@]}"; do
    s=$(date +%s%N)
    taskset -c "$cpu" "$d/$p" "$n" >/dev/null
    e=$(date +%s%N)
    echo "$r $p $(( e - s ))"
  done
  echo -n "." >&2
done > "$d/times"
echo >&2
python3 - "$d/times" "$n" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
n = int(sys.argv[2])
t = {}
for r, p, ns in rows:
    t.setdefault(p, {})[int(r)] = int(ns) / 1e9
base = statistics.median(t["base"].values())
print(f"{'program':<14} {'median s':>9} {'min':>7} {'max':>7} {'ns/call':>8}")
for p, ts in t.items():
    v = list(ts.values())
    med = statistics.median(v)
    print(f"{p:<14} {med:9.3f} {min(v):7.3f} {max(v):7.3f} {(med - base) / n * 1e9:8.2f}")
for kind in ("fast", "ordinary"):
    q = [t[f"{kind}-new"][r] / t[f"{kind}-old"][r] for r in t["base"]]
    print(f"{kind}: new/old median {statistics.median(q):.4f} [{min(q):.4f}-{max(q):.4f}]")
PY
