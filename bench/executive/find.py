#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""A real workload under mantle's two paths, beside native and strace.

    bash bench/executive/find.sh [--quick] [options]      (repo root, as root)

The workload is `find ROOT -type f` (ROOT default /usr), its output to a
file (its size is checked against native's: every row must list the same
files). Rows (ROWS below):
  native            find alone
  filter floor      filter_floor.c (built in the run with cc): a one-
                    instruction allow-all seccomp filter, then exec find:
                    what any seccomp filter's mere presence costs find on
                    this kernel, which no seccomp-based enforcement beats
  protected deny    `mantle run --deny getppid -- find ...`: a call the find
                    never makes is denied; the filter notifies only getppid,
                    so no call of the find reaches the executive
  fast deny         the same on `--path fast`: only an enforcing agent,
                    which is the kernel filter's (the fast gate), so the
                    stub is not loaded at all and nothing traps
  protected count getppid / fast count getppid
                    an observing agent that wants a call find never makes:
                    on both paths only getppid is notified (on the fast
                    path the gate counts it and no stub is loaded; before
                    issue 29's change every call trapped there: Syscall
                    User Dispatch selects per thread, not per number:
                    docs/exec-fast.md)
  fast count getppid, ref  only with --mantle-ref OLD: fast count getppid
                    with the older binary, interleaved with the others
  protected count   `mantle run --count=all`: every call notified to the
                    executive (a round trip each)
  fast count        `mantle run --path fast --count=all`: every call traps
                    (Syscall User Dispatch has no per-number selector) and
                    is counted in the stub, no hand-off
  fast count rw     the same with --rewrite-sites (find is single-threaded:
                    each `mov $nr,%eax; syscall` site is rewritten into a
                    jump after its first trap)
  strace -f         `strace -f -o /dev/null` (every call stopped, printed)
  strace -f -c      `strace -f -c -o /dev/null` (every call stopped, counted)
  strace -c seccomp `strace -f -c --seccomp-bpf -o /dev/null` (stops only at
                    the calls asked for: with -c, all of them)
  start-up rows     `true` native and under `mantle run --deny getppid`
                    (protected, fast): mantle's fixed cost per run (start
                    the reaper and executive, the guest's filter), which
                    the deny rows include

Pinning: every command under `taskset -c CPU` (default 0: one CPU for the
guest, executive and tracer; --cpu none: not pinned). Repetitions: one
untimed native run warms the page cache, then R repetitions (default 7;
--quick 3), each runs every row once, the row order reversed on odd
repetitions (interleaved, so that a drift of the machine hits every row).
Time: wall clock of the whole command (time.monotonic around it). Per row:
median and min..max over the R runs; ratio to native per repetition
(paired), its median and range.

Bars (issue 29): protected deny and fast deny at most 1.05x native (and,
for information, their ratio to the filter floor: mantle's own share); the
protected and fast --count=all faster than strace -f (the `strace -f -c`
row, which counts the same). PASS / MISS; never fatal. Output on stdout and
in bench/results/executive/find-<date>.{txt,json}.
"""
import argparse
import datetime
import json
import os
import shutil
import statistics as st
import subprocess
import sys
import tempfile
import time

# one place for finding the binary and naming the commit: run.py's
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import default_mantle, git_desc  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# (key, label, prefix argv or None for the workload alone, workload: find|true)
ROWS = [
    ("native", "find, native", [], "find"),
    ("filter_floor", "find, allow-all seccomp filter (floor)", ["{floor}"], "find"),
    ("protected_deny", "find, protected --deny getppid", ["{m}", "run", "--deny", "getppid", "--"], "find"),
    ("fast_deny", "find, fast --deny getppid", ["{m}", "run", "--path", "fast", "--deny", "getppid", "--"], "find"),
    ("protected_count_rare", "find, protected --count getppid",
     ["{m}", "run", "--count=getppid", "--"], "find"),
    ("fast_count_rare", "find, fast --count getppid",
     ["{m}", "run", "--path", "fast", "--count=getppid", "--"], "find"),
    # only with --mantle-ref OLD: the same with an older binary, side by side
    ("fast_count_rare_ref", "find, fast --count getppid, --mantle-ref binary",
     ["{mref}", "run", "--path", "fast", "--count=getppid", "--"], "find"),
    ("protected_count", "find, protected --count=all", ["{m}", "run", "--count=all", "--"], "find"),
    ("fast_count", "find, fast --count=all", ["{m}", "run", "--path", "fast", "--count=all", "--"], "find"),
    ("fast_count_rw", "find, fast --count=all --rewrite-sites",
     ["{m}", "run", "--path", "fast", "--rewrite-sites", "--count=all", "--"], "find"),
    ("strace", "find, strace -f", ["strace", "-f", "-qq", "-o", "/dev/null", "--"], "find"),
    ("strace_c", "find, strace -f -c", ["strace", "-f", "-c", "-o", "/dev/null", "--"], "find"),
    ("strace_c_seccomp", "find, strace -f -c --seccomp-bpf",
     ["strace", "-f", "-c", "--seccomp-bpf", "-o", "/dev/null", "--"], "find"),
    ("true_native", "true, native", [], "true"),
    ("true_protected", "true, protected --deny getppid", ["{m}", "run", "--deny", "getppid", "--"], "true"),
    ("true_fast", "true, fast --deny getppid", ["{m}", "run", "--path", "fast", "--deny", "getppid", "--"], "true"),
]
BARS = [  # (row, against, kind, bound)
    ("protected_deny", "native", "at_most", 1.05),
    ("fast_deny", "native", "at_most", 1.05),
    ("protected_deny", "filter_floor", "above_floor", 1.0),
    ("fast_deny", "filter_floor", "above_floor", 1.0),
    ("protected_count", "strace_c", "faster", 1.0),
    ("fast_count", "strace_c", "faster", 1.0),
    ("fast_count_rw", "strace_c", "faster", 1.0),
    ("protected_count", "strace", "faster", 1.0),
    ("fast_count", "strace", "faster", 1.0),
]


def ms(x):
    return f"{x * 1000:.0f}" if x >= 0.1 else f"{x * 1000:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--argv0", default="python3 bench/executive/find.py")
    ap.add_argument("--quick", action="store_true", help="R=3")
    ap.add_argument("--reps", type=int, default=None, help="repetitions (default 7)")
    ap.add_argument("--root", default="/usr", help="the tree find walks (default /usr)")
    ap.add_argument("--cpu", default="0", help="CPU to pin every command to, or none (default 0)")
    ap.add_argument("--rows", default=None, help="only these row keys, comma-separated")
    ap.add_argument("--mantle", default=None)
    ap.add_argument("--mantle-ref", default=None,
                    help="an older mantle binary: adds the row fast_count_rare_ref")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/executive"))
    a = ap.parse_args()
    reps = a.reps or (3 if a.quick else 7)
    mantle = a.mantle or default_mantle()
    rows = [r for r in ROWS if not a.rows or r[0] in a.rows.split(",")]
    tmp = tempfile.mkdtemp(prefix="mantle-bench-find-")
    pin = [] if a.cpu == "none" else ["taskset", "-c", a.cpu]
    lines = []

    def say(s=""):
        print(s, flush=True)
        lines.append(s)

    def argv_of(r):
        pre = [x.format(m=mantle or "mantle", floor=floor or "filter_floor",
                        mref=a.mantle_ref or "") for x in r[2]]
        work = ["find", a.root, "-type", "f"] if r[3] == "find" else ["true"]
        return pin + pre + work

    floor = None
    if any(r[2][:1] == ["{floor}"] for r in rows):
        floor = os.path.join(tmp, "filter_floor")
        cc = subprocess.run(["cc", "-O2", "-o", floor, os.path.join(HERE, "filter_floor.c")],
                            capture_output=True, text=True)
        if cc.returncode != 0:
            floor = None
    avail = {}
    for r in rows:
        tool = r[2][0] if r[2] else None
        if tool == "{floor}":
            avail[r[0]] = None if floor else "cc could not build filter_floor.c"
        elif tool == "{mref}" and not a.mantle_ref:
            avail[r[0]] = "no --mantle-ref binary given"
        elif tool == "{m}" and not mantle:
            avail[r[0]] = "no mantle binary (cargo build --release -p mantle-cli)"
        elif tool and tool not in ("{m}", "{mref}") and not shutil.which(tool):
            avail[r[0]] = f"{tool} is not installed"
        else:
            avail[r[0]] = None
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    load0 = open("/proc/loadavg").read().split()[:3]
    user = [x for i, x in enumerate(sys.argv[1:]) if x != "--argv0" and (i == 0 or sys.argv[i] != "--argv0")]
    say(f"command: {a.argv0}" + (" " + " ".join(user) if user else ""))
    say(f"date: {stamp}  kernel: {os.uname().release}  commit: {git_desc()}  mantle: {mantle}")
    say(f"workload: find {a.root} -type f > FILE; R={reps} interleaved repetitions (row order "
        f"reversed on odd ones); every command pinned: "
        + ("no" if not pin else f"taskset -c {a.cpu}") + "; wall time of the whole command")
    say(f"load average at start: {' '.join(load0)}")
    say()
    # warm the page cache (untimed)
    subprocess.run(pin + ["find", a.root, "-type", "f"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    times = {r[0]: [] for r in rows}
    sizes = {r[0]: set() for r in rows}
    failed = {}
    t_start = time.time()
    for rep in range(reps):
        order = rows if rep % 2 == 0 else list(reversed(rows))
        for r in order:
            k = r[0]
            if avail[k] or k in failed:
                continue
            out = os.path.join(tmp, f"{k}.out")
            argv = argv_of(r)
            with open(out, "wb") as fo:
                t0 = time.monotonic()
                try:
                    p = subprocess.run(argv, stdout=fo, stderr=subprocess.PIPE, timeout=a.timeout)
                except subprocess.TimeoutExpired:
                    failed[k] = f"timed out after {a.timeout} s"
                    continue
                dt = time.monotonic() - t0
            # find exits 1 when some directory is unreadable: the same for all
            if p.returncode not in (0, 1):
                failed[k] = f"exited {p.returncode}: {p.stderr.decode(errors='replace').strip()[-200:]}"
                continue
            times[k].append(dt)
            sizes[k].add(os.path.getsize(out))
            print(f"rep {rep + 1}/{reps} {k:18s} {dt * 1000:.0f} ms", file=sys.stderr, flush=True)
    elapsed = time.time() - t_start

    stats = {}
    for r in rows:
        k = r[0]
        xs = times[k]
        if not xs:
            continue
        s = {"median": st.median(xs), "min": min(xs), "max": max(xs), "runs": xs}
        base = "true_native" if r[3] == "true" else "native"
        if times.get(base) and k != base and len(times[base]) == len(xs):
            pr = [x / y for x, y in zip(xs, times[base])]
            s["ratio_native"] = st.median(pr)
            s["ratio_range"] = [min(pr), max(pr)]
        stats[k] = s
    say(f"{'row':40s} {'median ms':>9s} {'min..max ms':>15s} {'x native (paired)':>24s}")
    for r in rows:
        k = r[0]
        if avail[k] or k in failed:
            say(f"{r[1]:40s} not available: {avail[k] or failed[k]}")
            continue
        s = stats[k]
        ratio = (f"{s['ratio_native']:.3f} ({s['ratio_range'][0]:.3f}..{s['ratio_range'][1]:.3f})"
                 if "ratio_native" in s else "")
        say(f"{r[1]:40s} {ms(s['median']):>9s} {ms(s['min']) + '..' + ms(s['max']):>15s} {ratio:>24s}")
        if r[3] == "find" and times.get("native") and sizes[k] != sizes["native"]:
            say(f"{'':42s}! output size {sorted(sizes[k])} differs from native's {sorted(sizes['native'])}")
    say()
    say("bars (issue 29):")
    bars = []
    for k, against, kind, bound in BARS:
        s, o = stats.get(k), stats.get(against)
        if not s or not o:
            say(f"  {k:16s} vs {against:10s} n/a (a row did not run)")
            bars.append({"row": k, "against": against, "verdict": "n/a"})
            continue
        pr = [x / y for x, y in zip(s["runs"], o["runs"])] if len(s["runs"]) == len(o["runs"]) else []
        ratio = s["median"] / o["median"]
        if kind == "at_most":
            ok = ratio <= bound
            text = f"{ratio:.3f}x {against} (need <= {bound}x)"
        elif kind == "above_floor":
            ok = None
            text = f"{ratio:.3f}x {against} (mantle's share above the floor; no bar)"
        else:
            ok = ratio < bound
            text = f"{1 / ratio:.2f}x faster than {against} (need > 1x)"
        if pr:
            text += f"; paired reps {min(pr):.3f}..{max(pr):.3f}x"
        verdict = "info" if ok is None else "PASS" if ok else "MISS"
        say(f"  {k:16s} {text} {verdict}")
        bars.append({"row": k, "against": against, "kind": kind, "bound": bound, "ratio": ratio,
                     "paired": pr, "verdict": verdict})
    say()
    load1 = open("/proc/loadavg").read().split()[:3]
    say(f"elapsed {elapsed:.0f} s; load average at start {' '.join(load0)}, at end {' '.join(load1)}")
    os.makedirs(a.out, exist_ok=True)
    base = os.path.join(a.out, f"find-{stamp}")
    with open(base + ".txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(base + ".json", "w") as f:
        json.dump({"date": stamp, "commit": git_desc(), "root": a.root, "reps": reps, "cpu": a.cpu,
                   "rows": {r[0]: {"label": r[1], "argv": argv_of(r), "stats": stats.get(r[0]),
                                   "unavailable": avail[r[0]], "failed": failed.get(r[0])}
                            for r in rows},
                   "bars": bars, "load_start": load0, "load_end": load1}, f, indent=1)
    print(f"wrote {base}.txt and {base}.json", file=sys.stderr)
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
