#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""mantle prof call stacks, side by side with `perf record -g` in one run:

  bench/prof/stacks.py calls    [--rate 1000] [--rounds 8000] [--json OUT]
      the known-call-structure program (callgraph.c: main -> a -> b,
      main -> c -> b): inclusive shares of main, a, b, c, spin against the
      truth and against perf -g; the session's size per minute next to
      perf.data's for the same run
  bench/prof/stacks.py overhead [--reps 5] [--rates 1000,5000] [--json OUT]
      the workload's CPU time with no profiler, perf record -g, mantle
      with stacks walked by the perf core (--stacks perf), by the sample
      path's helper (--stacks bpf), and without stacks; cost per sample
      = (CPU time - CPU time without profiler) / samples
  bench/prof/stacks.py real     [--rate 1000] [--json OUT]
      a Python interpreter loop and xz -9, each profiled by perf record -g
      and mantle at once (-p PID): the top-20 exclusive and inclusive
      shares against perf's (frame pointers on both sides)
  bench/prof/stacks.py cost     [--rates 1000,5000] [--json OUT]
      the sample path's self-timed cost per sample (mean, p99, max) for
      each --stacks mode, and --stacks dwarf's user-space unwinding

`--unwind dwarf` (calls, overhead, real) compares `mantle --stacks dwarf`
with `perf record --call-graph dwarf` instead (both: user registers and an
8 KiB stack copy per sample, unwound with .eh_frame), on callgraph.c built
-O2 -fomit-frame-pointer (callgraph-nofp) and on the real programs as
Debian ships them. `real` also profiles a `make -j2` build (24 C files,
gcc -O2; both CPUs, the profilers on CPU 0).

Run as root from the repository root after `cargo build --release`, under
the shared bench lock: `flock /tmp/mantle-bench.lock bench/prof/stacks.py ...`.
Pinning: the workload on CPU 1 (taskset -c 1), the profiler on CPU 0.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import LOCK, MANTLE, PERF, SHM, WORK, Lock, log, med, sh, spread  # noqa: E402

SRC = os.path.dirname(os.path.abspath(__file__))
# inclusive shares of callgraph.c, as fractions of main's (see its comment)
TRUTH = {"main": 100.0, "a": 50.0, "c": 50.0, "b": 70.0, "spin": 100.0}


def build():
    os.makedirs(WORK, exist_ok=True)
    sh(["cc", "-O1", "-fno-omit-frame-pointer", "-fno-inline", "-g", "-o",
        f"{WORK}/callgraph", f"{SRC}/callgraph.c"])
    # as Debian builds: -O2, no frame pointers (no inlining and no tail
    # calls, so that the call structure stays the known one)
    sh(["cc", "-O2", "-fomit-frame-pointer", "-fno-inline", "-fno-optimize-sibling-calls", "-o",
        f"{WORK}/callgraph-nofp", f"{SRC}/callgraph.c"])
    sh(["cc", "-O2", "-o", f"{WORK}/timeit", f"{SRC}/timeit.c"])
    if not os.path.exists(MANTLE):
        sys.exit(f"{MANTLE} missing: cargo build --release first")


def profiler(cfg, rate, out):
    """The profiler's command line prefix for cfg."""
    if cfg == "none":
        return []
    if cfg in ("perf-g", "perf-dwarf"):
        g = ["-g"] if cfg == "perf-g" else ["--call-graph", "dwarf"]
        return ["taskset", "-c", "0", PERF, "record", "-q"] + g + ["-e", "cpu-clock",
                "-F", str(rate), "-o", f"{out}/perf.data", "--"]
    stacks = {"mantle": "perf", "mantle-bpf": "bpf", "mantle-flat": "none",
              "mantle-dwarf": "dwarf"}[cfg]
    return ["taskset", "-c", "0", MANTLE, "prof", "record", "-q", "--force", "-F", str(rate),
            "--stacks", stacks, "-o", f"{out}/{cfg}.prof", "--"]


def run(cfg, rate, out, rounds, prog="callgraph"):
    """Runs callgraph (or prog) under cfg; returns its (wall, cpu) seconds."""
    tfile = f"{out}/t"
    inner = ["taskset", "-c", "1", f"{WORK}/timeit", tfile, f"{WORK}/{prog}", str(rounds)]
    sh(profiler(cfg, rate, out) + inner, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    w, c = open(tfile).read().split()
    return int(w) / 1e9, int(c) / 1e9


def perf_children(data, comm="callgraph"):
    """{symbol: (children %, self %)} of callgraph's samples in perf.data."""
    out = subprocess.run([PERF, "report", "-i", data, "--children", "--stdio", "-q", "-g", "none",
                          "--no-inline", "--comm", comm, "--percentage", "relative",
                          "--sort", "sym", "-F", "overhead_children,overhead,sym", "--percent-limit", "0"],
                         check=True, capture_output=True, text=True).stdout
    res = {}
    for line in out.splitlines():
        m = re.match(r"^\s*([\d.]+)%\s+([\d.]+)%\s+\[(.)\]\s+(.+?)\s*$", line)
        if m:
            res.setdefault(m.group(4), (float(m.group(1)), float(m.group(2))))
    return res


def perf_samples(data):
    out = subprocess.run([PERF, "report", "-i", data, "--stdio", "-q", "-g", "none", "--sort", "comm",
                          "-F", "sample,comm"], check=True, capture_output=True, text=True).stdout
    return sum(int(l.split()[0]) for l in out.splitlines() if l.strip() and l.split()[0].isdigit())


def mantle_children(session, comm="callgraph"):
    rep = json.loads(subprocess.run([MANTLE, "prof", "report", "--json", "-i", session,
                                     "--comm", comm],
                                    check=True, capture_output=True, text=True).stdout)
    inc = {s["symbol"]: s["percent"] for s in rep["inclusive"]}
    own = {s["symbol"]: s["percent"] for s in rep["symbols"]}
    return {k: (v, own.get(k, 0.0)) for k, v in inc.items()}


def du(path, skip=()):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)
               if f not in skip and os.path.isfile(os.path.join(path, f)))


def calls(args):
    build()
    os.makedirs(SHM, exist_ok=True)
    out = tempfile.mkdtemp(dir=SHM)
    dwarf = args.unwind == "dwarf"
    prog = "callgraph-nofp" if dwarf else "callgraph"
    cfgs = ("perf-dwarf", "mantle-dwarf") if dwarf else ("perf-g", "mantle", "mantle-bpf")
    res = {"rate": args.rate, "rounds": args.rounds, "unwind": args.unwind, "program": prog,
           "configs": {}}
    with Lock():
        for cfg in cfgs:
            wall, cpu = run(cfg, args.rate, out, args.rounds, prog)
            if cfg.startswith("perf-"):
                prof, size, fixed = perf_children(f"{out}/perf.data", prog), du(f"{out}/perf.data"), 0
            else:
                s = f"{out}/{cfg}.prof"
                prof = mantle_children(s, prog)
                size = du(s)
                fixed = size - du(s, skip=("kallsyms.gz", "vdso.so"))
            main = prof.get("main", (0, 0))[0] or 1
            shares = {f: 100.0 * prof.get(f, (0, 0))[0] / main for f in TRUTH}
            res["configs"][cfg] = {"wall_s": wall, "cpu_s": cpu, "main_pct": main,
                                   "inclusive_of_main": shares,
                                   "bytes": size, "fixed_bytes": fixed,
                                   "bytes_per_min": size / wall * 60,
                                   "variable_bytes_per_min": (size - fixed) / wall * 60}
            log(f"{cfg:10} {wall:.1f}s  " + "  ".join(f"{f} {v:.1f}" for f, v in shares.items())
                + f"  {size / 1e6:.2f} MB")
    shutil.rmtree(out, ignore_errors=True)
    c = res["configs"]
    print(f"\n#### Inclusive time per function, % of main's ({prog}, {args.rate} Hz, "
          f"{args.rounds} rounds, workload on CPU 1, profiler on CPU 0)\n")
    if dwarf:
        print("| function | truth | perf --call-graph dwarf | mantle --stacks dwarf | mantle - truth | mantle - perf |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for f, t in TRUTH.items():
            p, m = (c[k]["inclusive_of_main"][f] for k in cfgs)
            print(f"| {f} | {t:.1f} | {p:.2f} | {m:.2f} | {m - t:+.2f} | {m - p:+.2f} |")
    else:
        print("| function | truth | perf record -g | mantle (--stacks perf) | mantle (--stacks bpf) | mantle - truth | mantle - perf |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for f, t in TRUTH.items():
            p, m, b = (c[k]["inclusive_of_main"][f] for k in cfgs)
            print(f"| {f} | {t:.1f} | {p:.2f} | {m:.2f} | {b:.2f} | {m - t:+.2f} | {m - p:+.2f} |")
    print(f"\n#### Session size for the same run ({args.rate} Hz)\n")
    print("| recorder | run (s) | size | of which fixed per session (kallsyms.gz, vdso.so) | growth per minute of sampling |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for k, v in c.items():
        print(f"| {k} | {v['wall_s']:.1f} | {v['bytes'] / 1e3:.0f} kB | {v['fixed_bytes'] / 1e3:.0f} kB | "
              f"{v['variable_bytes_per_min'] / 1e3:.1f} kB/min |")
    if args.json:
        json.dump(res, open(args.json, "w"), indent=1)


def strip_params(name):
    """A demangled C++ name without its parameter list (and a trailing
    `const`): mantle shows `f(int)`, perf `f`."""
    n = name[:-6] if name.endswith(") const") else name
    if not n.endswith(")") or n.startswith("operator"):
        return name
    depth = 0
    for i in range(len(n) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(n[i], 0)
        if depth == 0:
            return n[:i] if i > 0 else name
    return name


def norm(name):
    """One name for one function across the two recorders: no C++
    parameters, no symbol version (`@@GLIBC_2.34`), and glibc's aliases
    for one address (perf shows `malloc`, `cfree`, `__libc_start_main`
    where blazesym picks `__GI___libc_malloc`, `__GI___libc_free`,
    `__libc_start_main_impl`)."""
    n = strip_params(name).split("@")[0]
    for p in ("__GI_", "__libc_"):
        if n.startswith(p) and len(n) > len(p):
            n = n[len(p):]
    if n.endswith("_impl"):
        n = n[:-5]
    # glibc's multiarch memcpy variants are aliases of the memmove ones
    if n.startswith("__memcpy_") and n.endswith("_unaligned_erms"):
        n = "__memmove_" + n[len("__memcpy_"):]
    return {"cfree": "free"}.get(n, n)


def merged(shares, children):
    """Shares under normalized names: summed (exclusive), or the largest
    (inclusive: two names of one function are one frame of a stack)."""
    res = {}
    for k, v in shares.items():
        n = norm(k)
        res[n] = max(res.get(n, 0.0), v) if children else res.get(n, 0.0) + v
    return res


def perf_shares(data, comm, children):
    """{symbol: %} of comm's samples in perf.data (every sample's when comm
    is None), inclusive or exclusive."""
    mode = ["--children", "-F", "overhead_children,sym"] if children else ["--no-children", "-F", "overhead,sym"]
    only = ["--comm", comm] if comm else []
    # --no-inline: mantle names no inlined frames, and perf's inline
    # expansion runs addr2line over every address (minutes for cc1)
    out = subprocess.run([PERF, "report", "-i", data, "--stdio", "-q", "-g", "none", "--no-inline"] + only
                         + ["--percentage", "relative", "--sort", "sym", "--percent-limit", "0"] + mode,
                         check=True, capture_output=True, text=True).stdout
    res = {}
    for line in out.splitlines():
        m = re.match(r"^\s*([\d.]+)%\s+\[(.)\]\s+(.+?)\s*$", line)
        if m:
            res[m.group(3)] = res.get(m.group(3), 0.0) + float(m.group(1))
    return res


def mantle_shares(session, comm, children):
    only = ["--comm", comm] if comm else []
    rep = json.loads(subprocess.run([MANTLE, "prof", "report", "--json", "-i", session] + only,
                                    check=True, capture_output=True, text=True).stdout)
    res = {}
    for s in rep["inclusive" if children else "symbols"]:
        res[s["symbol"]] = res.get(s["symbol"], 0.0) + s["percent"]
    return res


MAKE_FILES = 24


def make_project():
    """A C project for `make -j2`: MAKE_FILES files of 120 functions each,
    compiled with gcc -O2 (the compiler's own time is what is profiled)."""
    d = f"{WORK}/makeproj"
    os.makedirs(d, exist_ok=True)
    for i in range(MAKE_FILES):
        with open(f"{d}/f{i}.c", "w") as f:
            f.write("#include <stdio.h>\n#include <string.h>\n#include <stdlib.h>\n")
            for j in range(120):
                f.write(f"""
struct s{j} {{ int a[16]; double d; char name[32]; }};
int fn{i}_{j}(int n, struct s{j} *p) {{
    int acc = {j};
    for (int k = 0; k < n; k++) {{
        acc += p->a[k % 16] * (k ^ {j});
        if (acc % 7 == 3) snprintf(p->name, sizeof p->name, "x%d", acc);
        else p->d += acc / (k + 1.0);
        switch (k % 5) {{ case 0: acc <<= 1; break; case 1: acc -= strlen(p->name); break;
                         case 2: acc ^= (int)p->d; break; default: acc += {i}; }}
    }}
    return acc;
}}
""")
    with open(f"{d}/Makefile", "w") as f:
        objs = " ".join(f"f{i}.o" for i in range(MAKE_FILES))
        f.write(f"all: {objs}\n%.o: %.c\n\tcc -O2 -c -o $@ $<\nclean:\n\trm -f *.o\n")
    return d


def real(args):
    """Top-20 shares of real programs, mantle against perf (the same
    unwinding on both sides: frame pointers, or DWARF with --unwind dwarf).
    Names are compared normalized (norm()). Symbols only perf cannot name
    (addresses) are left out of the comparison and their total is said."""
    build()
    os.makedirs(SHM, exist_ok=True)
    out = tempfile.mkdtemp(dir=SHM)
    src = f"{WORK}/xz-input"
    if not os.path.exists(src):
        sh(["sh", "-c", f"cat /usr/include/*.h /usr/include/*/*.h | head -c 40000000 > {src}"])
    proj = make_project()
    dwarf = args.unwind == "dwarf"
    # (name, comm filter or None for the whole process tree, CPUs, argv);
    # each starts after a second's sleep, so both profilers are attached
    # (-p follows children created afterwards) before the work begins
    loads = [
        ("python3", "python3", "1", ["python3", "-c", "s = 0\nfor i in range(40_000_000): s += i * i % 7"]),
        ("xz", "xz", "1", ["xz", "-9", "-T1", "-c", "-k", src]),
        ("make -j2", None, "0,1", ["make", "-s", "-j2", "-C", proj]),
    ]
    only = args.only.split(",") if args.only else None
    g = ["--call-graph", "dwarf"] if dwarf else ["-g"]
    res = {}
    with Lock():
        for name, comm, cpus, argv in loads:
            if only and name.split()[0] not in only:
                continue
            if name.startswith("make"):
                sh(["make", "-s", "-C", proj, "clean"])
            # one run, both profilers on it (-p): the workload's own
            # run-to-run variation does not count in the differences
            w = subprocess.Popen(["taskset", "-c", cpus, "sh", "-c", 'sleep 1; exec "$@"', "sh"] + argv,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            pid = str(w.pid)
            pf = subprocess.Popen(["taskset", "-c", "0", PERF, "record", "-q"] + g + ["-e", "cpu-clock",
                                   "-F", str(args.rate), "-o", f"{out}/perf.data", "-p", pid],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            mp = subprocess.Popen(["taskset", "-c", "0", MANTLE, "prof", "record", "-q", "--force",
                                   "--stacks", "dwarf" if dwarf else "perf",
                                   "-F", str(args.rate), "-o", f"{out}/mantle.prof", "-p", pid],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            w.wait()
            pf.wait()
            mp.wait()
            meta = json.load(open(f"{out}/mantle.prof/meta.json"))
            for children in (False, True):
                kind = "inclusive" if children else "exclusive"
                res[f"{name}/{kind}"] = {
                    "mantle_samples": meta["samples"],
                    "unwind": meta.get("unwind"),
                    # every share, as each recorder named it
                    "perf_all": perf_shares(f"{out}/perf.data", comm, children),
                    "mantle_all": mantle_shares(f"{out}/mantle.prof", comm, children),
                }
                compare(res[f"{name}/{kind}"], children)
            if args.json:  # after each program: a long run keeps what it measured
                json.dump(res, open(args.json, "w"), indent=1)
    shutil.rmtree(out, ignore_errors=True)
    print_real(res, args.rate, dwarf)
    if args.json:
        json.dump(res, open(args.json, "w"), indent=1)


def unnamed(k):
    """perf's names for addresses it cannot name: 0x… or 16 hex digits."""
    return k.startswith("0x") or re.fullmatch(r"[0-9a-f]{16}", k) is not None


def compare(r, children):
    """The top 20 of perf's named functions with mantle's share of each,
    names normalized (norm()), from the raw shares in r."""
    p, m = merged(r["perf_all"], children), merged(r["mantle_all"], children)
    named = {k: v for k, v in p.items() if not unnamed(k)}
    top = sorted(named, key=lambda k: -named[k])[:20]
    r["rows"] = [(k, named[k], m.get(k, 0.0)) for k in top]
    # with complete stacks every sample of the program is under main
    r["main_inclusive"] = (p.get("main", 0.0), m.get("main", 0.0)) if children else None
    r["max_abs_diff"] = max(abs(a - b) for _, a, b in r["rows"])
    r["perf_unnamed_pct"] = sum(v for k, v in p.items() if unnamed(k))


def print_real(res, rate, dwarf):
    how = "perf record --call-graph dwarf vs mantle --stacks dwarf" if dwarf else "perf record -g vs mantle --stacks perf"
    for k, r in res.items():
        print(f"\n#### {k}: top 20 of perf (named), % of the program's samples, {rate} Hz, {how}\n")
        print(f"max |mantle - perf| = {r['max_abs_diff']:.2f} pt; perf's unnamed addresses: {r['perf_unnamed_pct']:.1f}%; "
              f"mantle samples {r['mantle_samples']}")
        if r["main_inclusive"]:
            pm, mm = r["main_inclusive"]
            print(f"samples whose stack reaches main (complete stacks): perf {pm:.1f}%, mantle {mm:.1f}%")
        u = r["unwind"]
        if u:
            print(f"mantle's unwinding: {u['stacks']} stacks, {u['truncated']} in part; user-space cost per sample "
                  f"mean {u['cost_ns']['mean'] / 1e3:.1f} us, p50 {u['cost_p50_ns'] / 1e3:.1f}, "
                  f"p99 {u['cost_p99_ns'] / 1e3:.1f}, max {u['cost_ns']['max'] / 1e3:.0f} us")
        print()
        print("| symbol | perf | mantle | diff |")
        print("| --- | ---: | ---: | ---: |")
        for s_, a_, b_ in r["rows"]:
            print(f"| {s_} | {a_:.2f} | {b_:.2f} | {b_ - a_:+.2f} |")


def reanalyze(args):
    """Compares again the raw shares a `real` run kept in its JSON."""
    res = json.load(open(args.input))
    for k, r in res.items():
        compare(r, k.endswith("/inclusive"))
    print_real(res, args.rate, args.unwind == "dwarf")
    if args.json:
        json.dump(res, open(args.json, "w"), indent=1)


CFGS = ["none", "perf-g", "mantle", "mantle-bpf", "mantle-flat"]
CFGS_DWARF = ["none", "perf-dwarf", "mantle-dwarf", "mantle-flat"]
NAMES = {"none": "no profiler", "perf-g": "perf record -g", "mantle": "mantle --stacks perf",
         "mantle-bpf": "mantle --stacks bpf", "mantle-flat": "mantle --stacks none",
         "perf-dwarf": "perf --call-graph dwarf", "mantle-dwarf": "mantle --stacks dwarf"}


def overhead(args):
    build()
    os.makedirs(SHM, exist_ok=True)
    out = tempfile.mkdtemp(dir=SHM)
    dwarf = args.unwind == "dwarf"
    cfgs = CFGS_DWARF if dwarf else CFGS
    prog = "callgraph-nofp" if dwarf else "callgraph"
    mine, theirs = ("mantle-dwarf", "perf-dwarf") if dwarf else ("mantle", "perf-g")
    results = []
    for rate in [int(r) for r in args.rates.split(",")]:
        t = {c: [] for c in cfgs}
        samples = {c: [] for c in cfgs}
        unwind = []
        with Lock():
            run("none", rate, out, args.rounds, prog)  # warm caches
            for rep in range(args.reps):
                k = rep % len(cfgs)
                for cfg in cfgs[k:] + cfgs[:k]:  # interleaved, rotating
                    t[cfg].append(run(cfg, rate, out, args.rounds, prog))
                    if cfg.startswith("perf-"):
                        samples[cfg].append(perf_samples(f"{out}/perf.data"))
                    elif cfg != "none":
                        meta = json.load(open(f"{out}/{cfg}.prof/meta.json"))
                        samples[cfg].append(meta["samples"])
                        if meta.get("unwind"):
                            unwind.append(meta["unwind"])
        base = med([x[1] for x in t["none"]])
        row = {"rate": rate, "reps": args.reps, "rounds": args.rounds, "unwind": args.unwind,
               "program": prog, "configs": cfgs}
        for cfg in cfgs:
            cpu = [x[1] for x in t[cfg]]
            row[cfg] = {"cpu_median_s": med(cpu), "cpu_spread_pct": spread(cpu), "cpu_runs": cpu,
                        "overhead_pct": (med(cpu) / base - 1) * 100}
            if samples[cfg]:
                n = med(samples[cfg])
                row[cfg]["samples"] = n
                row[cfg]["ns_per_sample"] = (med(cpu) - base) * 1e9 / n
        if unwind:
            row["mantle_unwind"] = {
                "mean_ns": med([u["cost_ns"]["mean"] for u in unwind]),
                "p50_ns": med([u["cost_p50_ns"] for u in unwind]),
                "p99_ns": med([u["cost_p99_ns"] for u in unwind]),
                "max_ns": max(u["cost_ns"]["max"] for u in unwind),
                "stack_bytes_mean": med([u["stack_bytes_mean"] for u in unwind]),
                "truncated": sum(u["truncated"] for u in unwind),
                "stacks": sum(u["stacks"] for u in unwind),
            }
        results.append(row)
        log(f"{rate}/s " + "  ".join(f"{c} {row[c]['overhead_pct']:+.2f}%" for c in cfgs))
    shutil.rmtree(out, ignore_errors=True)
    print(f"\n#### Overhead with stacks ({prog}, CPU time of the workload, medians of {args.reps}, "
          "spread = (max - min) / median; workload on CPU 1, profiler on CPU 0)\n")
    print("| samples/s | " + " | ".join(NAMES[c] for c in cfgs) + f" | {NAMES[mine]} - {NAMES[theirs]} |")
    print("| ---: | " + " | ".join("---:" for _ in cfgs) + " | ---: |")
    for r in results:
        cell = lambda c: (f"{r[c]['cpu_median_s']:.3f} s ±{r[c]['cpu_spread_pct']:.1f}%"
                          + ("" if c == "none" else f" ({r[c]['overhead_pct']:+.2f}%)"))
        print(f"| {r['rate']} | " + " | ".join(cell(c) for c in cfgs)
              + f" | {r[mine]['overhead_pct'] - r[theirs]['overhead_pct']:+.2f} pt |")
    print("\n#### Whole cost per sample in the workload: (CPU time - CPU time without profiler) / samples, ns\n")
    print("| samples/s | " + " | ".join(NAMES[c] for c in cfgs[1:]) + " |")
    print("| ---: | " + " | ".join("---:" for _ in cfgs[1:]) + " |")
    for r in results:
        print(f"| {r['rate']} | " + " | ".join(f"{r[c]['ns_per_sample']:.0f}" for c in cfgs[1:]) + " |")
    if dwarf:
        print("\n#### mantle --stacks dwarf: user-space cost per sample in the recorder (CPU 0): "
              "parse, unwind, resolve, merge (medians over the runs; max of all)\n")
        print("| samples/s | mean | p50 | p99 | max | stack bytes copied (mean) | stacks unwound only in part |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in results:
            u = r["mantle_unwind"]
            print(f"| {r['rate']} | {u['mean_ns'] / 1e3:.2f} us | {u['p50_ns'] / 1e3:.2f} us | "
                  f"{u['p99_ns'] / 1e3:.2f} us | {u['max_ns'] / 1e3:.0f} us | {u['stack_bytes_mean']:.0f} | "
                  f"{u['truncated']} of {u['stacks']} |")
    if args.json:
        json.dump(results, open(args.json, "w"), indent=1)


def cost(args):
    build()
    os.makedirs(SHM, exist_ok=True)
    out = tempfile.mkdtemp(dir=SHM)
    res = []
    with Lock():
        for rate in [int(r) for r in args.rates.split(",")]:
            for stacks in ("perf", "bpf", "none"):
                sh([MANTLE, "prof", "record", "-q", "--force", "--self-timing", "--stacks", stacks,
                    "-F", str(rate), "-o", f"{out}/c.prof", "--", "taskset", "-c", "1",
                    f"{WORK}/callgraph", str(args.rounds)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                c = json.load(open(f"{out}/c.prof/meta.json"))["cost"]
                res.append({"rate": rate, "stacks": stacks} | c)
    shutil.rmtree(out, ignore_errors=True)
    print("\n#### The sample path's own run time per sample (self-timed eBPF program, ns; callgraph.c)\n")
    print("| samples/s | --stacks | mean | p50 | p99 | max | runs | kernel bpf_stats mean | user-space drain per sample |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in res:
        b = r["bpf_self_ns"]
        print(f"| {r['rate']} | {r['stacks']} | {b['mean']:.0f} | {r['bpf_p50_ns']:.0f} | {r['bpf_p99_ns']:.0f} | "
              f"{b['max']:.0f} | {b['n']} | {r['bpf_stats_mean_ns']:.0f} | {r['drain_ns_per_sample']['mean']:.0f} |")
    if args.json:
        json.dump(res, open(args.json, "w"), indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("calls")
    a.add_argument("--rate", type=int, default=1000)
    a.add_argument("--rounds", type=int, default=8000)
    a.add_argument("--unwind", choices=["fp", "dwarf"], default="fp")
    a.add_argument("--json")
    o = sub.add_parser("overhead")
    o.add_argument("--reps", type=int, default=5)
    o.add_argument("--rates", default="1000,5000")
    o.add_argument("--rounds", type=int, default=3000)
    o.add_argument("--unwind", choices=["fp", "dwarf"], default="fp")
    o.add_argument("--json")
    c = sub.add_parser("cost")
    c.add_argument("--rates", default="1000,5000")
    c.add_argument("--rounds", type=int, default=3000)
    c.add_argument("--json")
    r = sub.add_parser("real")
    r.add_argument("--rate", type=int, default=1000)
    r.add_argument("--unwind", choices=["fp", "dwarf"], default="fp")
    r.add_argument("--only", help="comma-separated: python3,xz,make")
    r.add_argument("--json")
    a2 = sub.add_parser("reanalyze", help="compare again the shares a `real` run kept")
    a2.add_argument("input")
    a2.add_argument("--rate", type=int, default=1000)
    a2.add_argument("--unwind", choices=["fp", "dwarf"], default="fp")
    a2.add_argument("--json")
    args = ap.parse_args()
    if args.cmd == "reanalyze":
        return reanalyze(args)
    if os.geteuid() != 0:
        sys.exit("run as root")
    {"calls": calls, "overhead": overhead, "cost": cost, "real": real}[args.cmd](args)


if __name__ == "__main__":
    main()
