#!/usr/bin/env python3
"""mantle instr on the linked bzip2 beside mantle instr on its .o files,
each with the static and the shared runtime (docs/instr.md "Linked
executables and shared libraries"). bench.py has the linked program as a
row of Table 5.2 for every workload ("mantle-linked"); this one adds the
fair peer that row lacks: the .o rewrite with the same shared runtime.

Variants, all running hooks.c's instrumentation (read a 4-byte value at
entry, accumulate it at exit) on the same functions:
  base        gcc -O2, no instrumentation
  o-static    the .o files rewritten, linked with libmantle_instr_rt.a (bench.py's mantle-o)
  o-shared    the same .o files linked with libmantle_instr_rt.so
  linked      base's objects + hooks linked with libmantle_instr_rt.so, then the
              linked program rewritten (stubs in new segments, runtime bound by ld.so)
o-shared is the fair peer of linked: both reach the runtime in a shared
library (its thread-local frames through __tls_get_addr).

Functions: bzip2's compression hot set as bench.py chose it by mantle's
tracer (RESULTS.md: mainSort, mainGtU); --functions to change.
Workload: bzip2 -9 -c on --mb MiB of `tar --sort=name /usr/include`.
Pinning: taskset -c CPU; each repetition runs every variant once in turn.

Usage: flock /tmp/mantle-bench.lock bench/instr/linked.py [--reps N] [--mb N] [--cpu N]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402  (bench.py: sources, build and timing helpers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--mb", type=int, default=2)
    ap.add_argument("--cpu", type=int, default=1)
    ap.add_argument("--functions", default="mainSort,mainGtU")
    a = ap.parse_args()
    out = os.path.join(tempfile.gettempdir(), "mantle-bench-instr-linked")
    os.makedirs(out, exist_ok=True)
    bench.OUT = out
    bench.sh(["cargo", "build", "-p", "mantle-cli"], cwd=bench.ROOT)
    mantle = os.path.join(bench.ROOT, "target/debug/mantle")
    bench.sh(["cargo", "build", "--release", "-p", "mantle-instr-rt"], cwd=bench.ROOT)
    rtdir = os.path.join(bench.ROOT, "target/release")
    rt_a, rt_so = os.path.join(rtdir, "libmantle_instr_rt.a"), os.path.join(rtdir, "libmantle_instr_rt.so")
    inc = os.path.join(bench.ROOT, "crates/instr-rt/include")
    hook_flags = ["-DMODE_MANTLE", f"-I{inc}"]
    so_flags = [f"-L{rtdir}", "-lmantle_instr_rt", f"-Wl,-rpath,{rtdir}"]
    hot = a.functions.split(",")
    hotfile = os.path.join(out, "hot.txt")
    open(hotfile, "w").write("\n".join(hot) + "\n")

    inp = os.path.join(out, "input.tar")
    if not os.path.exists(inp) or os.path.getsize(inp) != a.mb << 20:
        bench.sh(f"tar --sort=name -cf - -C /usr include 2>/dev/null | head -c {a.mb << 20} > {inp}")
    srcs, pflags, libs, _ = bench.programs(inp, inp)["bzip2"]

    def build(name, **kw):
        return bench.build("bzip2", name, "gcc", ["-O2"], srcs, pflags, libs=libs, **kw)

    exes = {"base": build("base")}
    base_objs = [os.path.join(out, "bzip2", "base", os.path.basename(s)[:-2] + ".o") for s in srcs]
    d = os.path.join(out, "o")
    os.makedirs(d, exist_ok=True)
    objs = []
    for o in base_objs:
        n = os.path.join(d, os.path.basename(o))
        bench.sh([mantle, "instr", "rewrite", o, "-o", n, "--functions-from", hotfile])
        objs.append(n)
    exes["o-static"] = build("o-static", objs=objs, hooks=True, hook_flags=hook_flags, ldflags=[rt_a, "-lpthread"])
    exes["o-shared"] = build("o-shared", objs=objs, hooks=True, hook_flags=hook_flags, ldflags=so_flags)
    hooked = build("hooked", objs=base_objs, hooks=True, hook_flags=hook_flags, ldflags=so_flags)
    linked = os.path.join(out, "bzip2.linked")
    r = json.loads(bench.sh([mantle, "instr", "rewrite", hooked, "-o", linked, "--functions-from", hotfile,
                             "--runtime", rt_so, "--json"]).stdout)
    report = {f["name"]: f.get("exit", f.get("kind")) for f in r["functions"]}
    print(f"linked rewrite: {r['instrumented']} instrumented, {r['refused']} refused: {report}")
    exes["linked"] = linked

    args = ["-9", "-c"]
    ref = bench.timed([exes["base"], *args], inp, a.cpu)[1]
    calls = {}
    for m, exe in exes.items():
        _, o, err = bench.timed([exe, *args], inp, a.cpu, dict(os.environ, BENCH_CALLS="1"))
        if o != ref:
            sys.exit(f"{m}: output differs from the uninstrumented program")
        for line in err.splitlines():
            if line.startswith("bench-calls "):
                calls[m] = int(line.split()[1])
    times = {m: [] for m in exes}
    for rep in range(a.reps):
        for m, exe in exes.items():
            times[m].append(bench.timed([exe, *args], inp, a.cpu)[0])
        print(f"repetition {rep + 1}/{a.reps} done", file=sys.stderr)

    b = statistics.median(times["base"])
    bmin = min(times["base"])
    rows = []
    print(f"\nbzip2 -9 -c, {a.mb} MiB, taskset -c {a.cpu}, {a.reps} repetitions; functions: {' '.join(hot)}\n")
    print("| variant | median s | min | max | ratio | min-ratio | calls | ns/call | ns/call (min) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for m, ts in times.items():
        med, lo, hi = statistics.median(ts), min(ts), max(ts)
        c = calls.get(m)
        ns = f"{(med - b) / c * 1e9:.1f}" if c else ""
        nsmin = f"{(lo - bmin) / c * 1e9:.1f}" if c else ""
        print(f"| {m} | {med:.3f} | {lo:.3f} | {hi:.3f} | {med / b:.3f} | {lo / bmin:.3f} | {c or ''} | {ns} | {nsmin} |")
        rows.append(dict(variant=m, times=ts, calls=c))
    res = dict(rows=rows, cpu=a.cpu, reps=a.reps, mb=a.mb, functions=hot, linked_report=report,
               command="flock /tmp/mantle-bench.lock bench/instr/linked.py " + " ".join(sys.argv[1:]))
    json.dump(res, open(os.path.join(HERE, "linked.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
