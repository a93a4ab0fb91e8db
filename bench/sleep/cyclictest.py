#!/usr/bin/env python3
"""bench/sleep/cyclictest.py: cyclictest (rt-tests) under the executive's
sleeps, beside the same cyclictest run natively, in one run (issue 29).

cyclictest's measuring thread (SCHED_FIFO 80, one thread, 1 ms interval,
mlockall) sleeps with clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) and
records how late it woke (its latency, us). Configurations, each the
same cyclictest command:

  native     cyclictest alone: the kernel's timer (the floor)
  sleep      mantle run --sleep (the executive holds the sleep)
  sleep-ext  mantle run --sleep --extended (the issue's negative maximum)
  help-prot  mantle run --sleep --extended=50us --boost 10
             (`mantle run --help`'s protected example)
  help-fast  mantle run --path fast --sleep --extended --priority 99 --boost 10
             (the help's fast-path example)

A guest thread at a real-time policy of its own keeps it (a --boost
neither lowers cyclictest's FIFO 80 nor ends it).

Pinning: everything on one CPU (--cpu, default 0: taskset for mantle and
cyclictest, cyclictest -a), the executive included, with --bg
SCHED_OTHER spinners (hog.c) on the same CPU (default 0 and 2). No
/dev/cpu_dma_latency is held by the script (cyclictest holds it itself
unless --laptop: it does, in every configuration alike).

Per configuration and background count: --reps runs (default 5) of
--loops cycles (default 5000: 5 s each), interleaved (a round runs every
configuration once, so that drift of the machine's load hits all alike);
per run the p50, p99 (from cyclictest -h's histogram, 1 us buckets) and
max, and the minimum (negative: a sleep came back early, which must never
happen); reported as the median over the runs with the range [min-max],
and as ratios to native measured in the same round (median of the
per-round ratios). The bars are the lead's; this script prints figures
and ratios, and fails (exit 1) only if any run saw a negative latency.

    python3 bench/sleep/cyclictest.py [--quick] [--cpu 0] [--bg 0,2]
                                      [--reps 5] [--loops 5000]

As root (SCHED_FIFO). Installs rt-tests with apt-get if cyclictest is
missing; builds the release mantle if target/release/mantle is missing.
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

CONFIGS = {
    "native": [],
    "sleep": ["run", "--sleep", "--"],
    "sleep-ext": ["run", "--sleep", "--extended", "--"],
    "help-prot": ["run", "--sleep", "--extended=50us", "--boost", "10", "--"],
    "help-fast": ["run", "--path", "fast", "--sleep", "--extended", "--priority", "99",
                  "--boost", "10", "--"],
}


def need_cyclictest():
    if shutil.which("cyclictest"):
        return
    print("cyclictest.py: installing rt-tests (cyclictest)", file=sys.stderr)
    subprocess.run(["apt-get", "install", "-y", "-q", "rt-tests"], check=True,
                   stdout=subprocess.DEVNULL)
    if not shutil.which("cyclictest"):
        sys.exit("cyclictest.py: rt-tests installed but no cyclictest on PATH")


def need_mantle(path):
    if path and os.access(path, os.X_OK):
        return path
    m = os.path.join(ROOT, "target", "release", "mantle")
    if not os.access(m, os.X_OK):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "mantle-cli"], cwd=ROOT,
                       check=True)
    return m


def pct(hist, total, q):
    """The q-th percentile (us) of a {latency: count} histogram."""
    want = q / 100 * total
    seen = 0
    for lat in sorted(hist):
        seen += hist[lat]
        if seen >= want:
            return lat
    return max(hist) if hist else 0


def one(cfg, mantle, cpu, loops, tmp):
    out = os.path.join(tmp, "ct.json")
    if os.path.exists(out):
        os.unlink(out)
    ct = ["cyclictest", "-m", "-q", "-t1", "-p", "80", "-a", str(cpu), "-i", "1000",
          "-l", str(loops), "-h", "2000", "--json=" + out]
    pre = [mantle] + CONFIGS[cfg] if CONFIGS[cfg] else []
    argv = ["taskset", "-c", str(cpu)] + pre + ct
    r = subprocess.run(argv, capture_output=True, text=True, timeout=loops / 1000 * 4 + 60)
    if r.returncode != 0 or not os.path.exists(out):
        sys.exit(f"cyclictest.py: {' '.join(argv)} exited {r.returncode}: {r.stderr[-400:]}")
    t = json.load(open(out))["thread"]["0"]
    hist = {int(k): v for k, v in t.get("histogram", {}).items()}
    total = t["cycles"]
    over = total - sum(hist.values())  # beyond the histogram's 2000 us
    if over > 0:
        hist[2000] = hist.get(2000, 0) + over
    return {"min": t["min"], "p50": pct(hist, total, 50), "p99": pct(hist, total, 99),
            "max": t["max"], "avg": t["avg"], "cycles": total}


class Hogs:
    def __init__(self, hog, cpu, n):
        self.argv, self.n, self.procs = ["taskset", "-c", str(cpu), hog], n, []

    def __enter__(self):
        self.procs = [subprocess.Popen(self.argv) for _ in range(self.n)]
        return self

    def __exit__(self, *exc):
        for h in self.procs:
            h.kill()
            h.wait()


def spread(xs):
    return f"{st.median(xs):7.1f} [{min(xs):g}-{max(xs):g}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--bg", default="0,2")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--loops", type=int, default=5000)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--mantle")
    ap.add_argument("--quick", action="store_true", help="2 reps of 1000 loops, bg 0")
    ap.add_argument("--json", help="write the runs here")
    a = ap.parse_args()
    if a.quick:
        a.reps, a.loops, a.bg = 2, 1000, "0"
    if os.geteuid() != 0:
        sys.exit("cyclictest.py: needs root (SCHED_FIFO)")
    need_cyclictest()
    mantle = need_mantle(a.mantle)
    cfgs = [c for c in a.configs.split(",") if c]
    bgs = [int(b) for b in a.bg.split(",")]
    tmp = tempfile.mkdtemp(prefix="mantle-cyclictest-")
    hog = os.path.join(tmp, "hog")
    subprocess.run(["cc", "-O2", "-o", hog, os.path.join(HERE, "hog.c")], check=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    load = os.getloadavg()[0]
    runs = {b: {c: [] for c in cfgs} for b in bgs}
    for b in bgs:
        with Hogs(hog, a.cpu, b):
            for rep in range(a.reps):
                for c in cfgs:
                    r = one(c, mantle, a.cpu, a.loops, tmp)
                    runs[b][c].append(r)
                    print(f"bg {b} rep {rep} {c:10s} min {r['min']:4d} p50 {r['p50']:4d} "
                          f"p99 {r['p99']:4d} max {r['max']:5d} us", file=sys.stderr)
    shutil.rmtree(tmp, ignore_errors=True)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"cyclictest -m -t1 -p 80 -i 1000 -l {a.loops} -h 2000, everything on CPU "
             f"{a.cpu} (taskset; cyclictest -a {a.cpu}); {a.reps} runs per configuration, "
             f"interleaved; {now}, commit {commit}, load average {load:.1f} at start",
             "latencies in us: median over runs [min-max]; ratio: median of per-round "
             "ratios to native",
             f"{'config':10s} {'bg':>2s} {'min':>18s} {'p50':>18s} {'p99':>18s} {'max':>20s}"
             f" {'p99/nat':>8s} {'max/nat':>8s}"]
    early = []
    for b in bgs:
        nat = runs[b].get("native")
        for c in cfgs:
            rs = runs[b][c]
            row = f"{c:10s} {b:2d} "
            for k in ("min", "p50", "p99", "max"):
                row += f"{spread([r[k] for r in rs]):>18s} "
            if nat and c != "native":
                for k in ("p99", "max"):
                    rat = [r[k] / max(n[k], 1) for r, n in zip(rs, nat)]
                    row += f"{st.median(rat):8.2f} "
            lines.append(row.rstrip())
            early += [f"{c} bg {b}: min {r['min']} us" for r in rs if r["min"] < 0]
    print("\n".join(lines))
    if early:
        print("EARLY (negative latency): " + "; ".join(early))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"argv": sys.argv, "runs": runs, "lines": lines}, f, indent=1)
    sys.exit(1 if early else 0)


if __name__ == "__main__":
    main()
