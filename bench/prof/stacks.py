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
      each --stacks mode

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
    sh(["cc", "-O2", "-o", f"{WORK}/timeit", f"{SRC}/timeit.c"])
    if not os.path.exists(MANTLE):
        sys.exit(f"{MANTLE} missing: cargo build --release first")


def profiler(cfg, rate, out):
    """The profiler's command line prefix for cfg."""
    if cfg == "none":
        return []
    if cfg == "perf-g":
        return ["taskset", "-c", "0", PERF, "record", "-q", "-g", "-e", "cpu-clock",
                "-F", str(rate), "-o", f"{out}/perf.data", "--"]
    stacks = {"mantle": "perf", "mantle-bpf": "bpf", "mantle-flat": "none"}[cfg]
    return ["taskset", "-c", "0", MANTLE, "prof", "record", "-q", "--force", "-F", str(rate),
            "--stacks", stacks, "-o", f"{out}/{cfg}.prof", "--"]


def run(cfg, rate, out, rounds):
    """Runs callgraph under cfg; returns its (wall, cpu) seconds."""
    tfile = f"{out}/t"
    inner = ["taskset", "-c", "1", f"{WORK}/timeit", tfile, f"{WORK}/callgraph", str(rounds)]
    sh(profiler(cfg, rate, out) + inner, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    w, c = open(tfile).read().split()
    return int(w) / 1e9, int(c) / 1e9


def perf_children(data):
    """{symbol: (children %, self %)} of callgraph's samples in perf.data."""
    out = subprocess.run([PERF, "report", "-i", data, "--children", "--stdio", "-q", "-g", "none",
                          "--comm", "callgraph", "--percentage", "relative",
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


def mantle_children(session):
    rep = json.loads(subprocess.run([MANTLE, "prof", "report", "--json", "-i", session,
                                     "--comm", "callgraph"],
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
    res = {"rate": args.rate, "rounds": args.rounds, "configs": {}}
    with Lock():
        for cfg in ("perf-g", "mantle", "mantle-bpf"):
            wall, cpu = run(cfg, args.rate, out, args.rounds)
            if cfg == "perf-g":
                prof, size, fixed = perf_children(f"{out}/perf.data"), du(f"{out}/perf.data"), 0
            else:
                s = f"{out}/{cfg}.prof"
                prof = mantle_children(s)
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
    print(f"\n#### Inclusive time per function, % of main's (callgraph.c, {args.rate} Hz, "
          f"{args.rounds} rounds, workload on CPU 1, profiler on CPU 0)\n")
    print("| function | truth | perf record -g | mantle (--stacks perf) | mantle (--stacks bpf) | mantle - truth | mantle - perf |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for f, t in TRUTH.items():
        p, m, b = (c[k]["inclusive_of_main"][f] for k in ("perf-g", "mantle", "mantle-bpf"))
        print(f"| {f} | {t:.1f} | {p:.2f} | {m:.2f} | {b:.2f} | {m - t:+.2f} | {m - p:+.2f} |")
    print(f"\n#### Session size for the same run ({args.rate} Hz)\n")
    print("| recorder | run (s) | size | of which fixed per session (kallsyms.gz, vdso.so) | growth per minute of sampling |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for k, v in c.items():
        print(f"| {k} | {v['wall_s']:.1f} | {v['bytes'] / 1e3:.0f} kB | {v['fixed_bytes'] / 1e3:.0f} kB | "
              f"{v['variable_bytes_per_min'] / 1e3:.1f} kB/min |")
    if args.json:
        json.dump(res, open(args.json, "w"), indent=1)


def perf_shares(data, comm, children):
    """{symbol: %} of comm's samples in perf.data, inclusive or exclusive."""
    mode = ["--children", "-F", "overhead_children,sym"] if children else ["--no-children", "-F", "overhead,sym"]
    out = subprocess.run([PERF, "report", "-i", data, "--stdio", "-q", "-g", "none", "--comm", comm,
                          "--percentage", "relative", "--sort", "sym", "--percent-limit", "0"] + mode,
                         check=True, capture_output=True, text=True).stdout
    res = {}
    for line in out.splitlines():
        m = re.match(r"^\s*([\d.]+)%\s+\[(.)\]\s+(.+?)\s*$", line)
        if m:
            res[m.group(3)] = res.get(m.group(3), 0.0) + float(m.group(1))
    return res


def mantle_shares(session, comm, children):
    rep = json.loads(subprocess.run([MANTLE, "prof", "report", "--json", "-i", session, "--comm", comm],
                                    check=True, capture_output=True, text=True).stdout)
    res = {}
    for s in rep["inclusive" if children else "symbols"]:
        res[s["symbol"]] = res.get(s["symbol"], 0.0) + s["percent"]
    return res


def real(args):
    """Top-20 shares of real programs, mantle against perf record -g (both
    frame-pointer stacks). Symbols only perf cannot name (addresses) are
    left out of the comparison and their total is said."""
    build()
    os.makedirs(SHM, exist_ok=True)
    out = tempfile.mkdtemp(dir=SHM)
    src = f"{WORK}/xz-input"
    if not os.path.exists(src):
        sh(["sh", "-c", f"cat /usr/include/*.h /usr/include/*/*.h | head -c 40000000 > {src}"])
    loads = {
        "python3": ["python3", "-c", "s = 0\nfor i in range(40_000_000): s += i * i % 7"],
        "xz": ["xz", "-9", "-T1", "-c", "-k", src],
    }
    res = {}
    with Lock():
        for name, argv in loads.items():
            # one run, both profilers on it (-p): the workload's own
            # run-to-run variation does not count in the differences
            w = subprocess.Popen(["taskset", "-c", "1"] + argv,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            pid = str(w.pid)
            pf = subprocess.Popen(["taskset", "-c", "0", PERF, "record", "-q", "-g", "-e", "cpu-clock",
                                   "-F", str(args.rate), "-o", f"{out}/perf.data", "-p", pid],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            mp = subprocess.Popen(["taskset", "-c", "0", MANTLE, "prof", "record", "-q", "--force",
                                   "-F", str(args.rate), "-o", f"{out}/mantle.prof", "-p", pid],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            w.wait()
            pf.wait()
            mp.wait()
            for children in (False, True):
                p = perf_shares(f"{out}/perf.data", name, children)
                m = mantle_shares(f"{out}/mantle.prof", name, children)
                named = {k: v for k, v in p.items() if not k.startswith("0x")}
                top = sorted(named, key=lambda k: -named[k])[:20]
                rows = [(k, named[k], m.get(k, 0.0)) for k in top]
                kind = "inclusive" if children else "exclusive"
                res[f"{name}/{kind}"] = {
                    "rows": rows,
                    # with complete stacks every sample of the program is under main
                    "main_inclusive": (p.get("main", 0.0), m.get("main", 0.0)) if children else None,
                    "max_abs_diff": max(abs(a - b) for _, a, b in rows),
                    "perf_unnamed_pct": sum(v for k, v in p.items() if k.startswith("0x")),
                }
    shutil.rmtree(out, ignore_errors=True)
    for k, r in res.items():
        print(f"\n#### {k}: top 20 of perf record -g (named), % of the program's samples, {args.rate} Hz\n")
        print(f"max |mantle - perf| = {r['max_abs_diff']:.2f} pt; perf's unnamed addresses: {r['perf_unnamed_pct']:.1f}%")
        if r["main_inclusive"]:
            pm, mm = r["main_inclusive"]
            print(f"samples whose stack reaches main (complete stacks): perf {pm:.1f}%, mantle {mm:.1f}%")
        print()
        print("| symbol | perf -g | mantle | diff |")
        print("| --- | ---: | ---: | ---: |")
        for s, a, b in r["rows"]:
            print(f"| {s} | {a:.2f} | {b:.2f} | {b - a:+.2f} |")
    if args.json:
        json.dump(res, open(args.json, "w"), indent=1)


CFGS = ["none", "perf-g", "mantle", "mantle-bpf", "mantle-flat"]


def overhead(args):
    build()
    os.makedirs(SHM, exist_ok=True)
    out = tempfile.mkdtemp(dir=SHM)
    results = []
    for rate in [int(r) for r in args.rates.split(",")]:
        t = {c: [] for c in CFGS}
        samples = {c: [] for c in CFGS}
        with Lock():
            run("none", rate, out, args.rounds)  # warm caches
            for rep in range(args.reps):
                k = rep % len(CFGS)
                for cfg in CFGS[k:] + CFGS[:k]:  # interleaved, rotating
                    t[cfg].append(run(cfg, rate, out, args.rounds))
                    if cfg == "perf-g":
                        samples[cfg].append(perf_samples(f"{out}/perf.data"))
                    elif cfg != "none":
                        samples[cfg].append(json.load(open(f"{out}/{cfg}.prof/meta.json"))["samples"])
        base = med([x[1] for x in t["none"]])
        row = {"rate": rate, "reps": args.reps, "rounds": args.rounds}
        for cfg in CFGS:
            cpu = [x[1] for x in t[cfg]]
            row[cfg] = {"cpu_median_s": med(cpu), "cpu_spread_pct": spread(cpu), "cpu_runs": cpu,
                        "overhead_pct": (med(cpu) / base - 1) * 100}
            if samples[cfg]:
                n = med(samples[cfg])
                row[cfg]["samples"] = n
                row[cfg]["ns_per_sample"] = (med(cpu) - base) * 1e9 / n
        results.append(row)
        log(f"{rate}/s " + "  ".join(f"{c} {row[c]['overhead_pct']:+.2f}%" for c in CFGS))
    shutil.rmtree(out, ignore_errors=True)
    print(f"\n#### Overhead with stacks (callgraph.c, CPU time of the workload, medians of {args.reps}, "
          "spread = (max - min) / median; workload on CPU 1, profiler on CPU 0)\n")
    print("| samples/s | no profiler | perf record -g | mantle --stacks perf | mantle --stacks bpf | mantle --stacks none | mantle (perf) - perf -g |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        cell = lambda c: (f"{r[c]['cpu_median_s']:.3f} s ±{r[c]['cpu_spread_pct']:.1f}%"
                          + ("" if c == "none" else f" ({r[c]['overhead_pct']:+.2f}%)"))
        print(f"| {r['rate']} | " + " | ".join(cell(c) for c in CFGS)
              + f" | {r['mantle']['overhead_pct'] - r['perf-g']['overhead_pct']:+.2f} pt |")
    print("\n#### Whole cost per sample: (CPU time - CPU time without profiler) / samples, ns\n")
    print("| samples/s | perf record -g | mantle --stacks perf | mantle --stacks bpf | mantle --stacks none |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        print(f"| {r['rate']} | " + " | ".join(f"{r[c]['ns_per_sample']:.0f}" for c in CFGS[1:]) + " |")
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
    a.add_argument("--json")
    o = sub.add_parser("overhead")
    o.add_argument("--reps", type=int, default=5)
    o.add_argument("--rates", default="1000,5000")
    o.add_argument("--rounds", type=int, default=3000)
    o.add_argument("--json")
    c = sub.add_parser("cost")
    c.add_argument("--rates", default="1000,5000")
    c.add_argument("--rounds", type=int, default=3000)
    c.add_argument("--json")
    r = sub.add_parser("real")
    r.add_argument("--rate", type=int, default=1000)
    r.add_argument("--json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root")
    {"calls": calls, "overhead": overhead, "cost": cost, "real": real}[args.cmd](args)


if __name__ == "__main__":
    main()
