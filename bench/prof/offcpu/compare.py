#!/usr/bin/env python3
"""mantle prof record --off-cpu against bcc's offcputime (offcputime-bpfcc,
Debian's bpfcc-tools) on bench/prof/offcpu/blocker.c, and both against
the time the program measured around each block (CLOCK_MONOTONIC).

Run as root from the repository root, after `cargo build --release -p
mantle-cli`:

    python3 bench/prof/offcpu/compare.py [-r RUNS] [--f-ms 200 --g-ms 300]

Each run: blocker under `mantle prof record --off-cpu` (then `report
--off-cpu-folded`), and blocker while `offcputime-bpfcc -f` traces the
whole system (started first, given time to compile; its lines of comm
`blocker` kept). For f (nanosleep), g (pipe read) and h (the writer's
nanosleep) it prints each tool's blocked time as a ratio to the
program's own measurement, median and range over the runs, and the
per-run tables to --json. No pinning: both tools see the same scheduler
delays the program measures (the bar is the ratio, not the time). Holds
/run/mantle-kernel.lock while it runs.
"""
import argparse
import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

FUNCS = ("f", "g", "h")


def folded_sums(path, comm=None, scale=1.0):
    """Sum of the folded lines that have each of FUNCS as a frame."""
    out = {f: 0.0 for f in FUNCS}
    with open(path) as fh:
        for line in fh:
            line = line.rstrip("\n")
            if not line or " " not in line:
                continue
            stack, n = line.rsplit(" ", 1)
            frames = stack.split(";")
            if comm is not None and frames[0] != comm:
                continue
            for f in FUNCS:
                if f in frames:
                    out[f] += float(n) * scale
    return out


def measured(path):
    m = {}
    with open(path) as fh:
        for line in fh:
            name, tid, ns = line.split()
            m[name] = int(ns)
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-r", "--runs", type=int, default=5)
    ap.add_argument("--f-ms", type=int, default=200)
    ap.add_argument("--g-ms", type=int, default=300)
    ap.add_argument("--mantle", default="target/release/mantle")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    lock = open("/run/mantle-kernel.lock", "a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    tmp = tempfile.mkdtemp(prefix="mantle-offcpu-bench-")
    try:
        blocker = os.path.join(tmp, "blocker")
        subprocess.run(["cc", "-O0", "-g", "-fno-omit-frame-pointer", "-pthread", "-o",
                        blocker, "bench/prof/offcpu/blocker.c"], check=True)
        runs = []
        args = [str(a.f_ms), str(a.g_ms)]
        for i in range(a.runs):
            s, mf, mm = (os.path.join(tmp, x + str(i)) for x in ("s", "mf", "mm"))
            subprocess.run([a.mantle, "prof", "record", "--off-cpu", "-q", "-o", s, "--",
                            blocker, *args, mm], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            subprocess.run([a.mantle, "prof", "report", "-i", s, "--off-cpu-folded", mf],
                           check=True, stdout=subprocess.DEVNULL)
            mantle = folded_sums(mf)
            bf, bm = os.path.join(tmp, f"bf{i}"), os.path.join(tmp, f"bm{i}")
            dur = (a.f_ms + a.g_ms) / 1000 + 8
            with open(bf, "w") as out:
                bcc = subprocess.Popen(["offcputime-bpfcc", "-f", str(int(dur + 1))],
                                       stdout=out, stderr=subprocess.DEVNULL)
                time.sleep(6)  # bcc compiles its program first
                subprocess.run([blocker, *args, bm], check=True)
                bcc.wait()
            # bcc's folded values are microseconds
            bccs = folded_sums(bf, comm="blocker", scale=1000.0)
            runs.append({"measured_mantle": measured(mm), "mantle": mantle,
                         "measured_bcc": measured(bm), "bcc": bccs})
        print(f"blocker {a.f_ms} {a.g_ms}, {a.runs} runs: blocked time / the program's own "
              "measurement (median [min, max])")
        print(f"{'where':<18} {'mantle':>26} {'bcc offcputime':>26}")
        summary = {}
        for f in FUNCS:
            rm = [r["mantle"][f] / r["measured_mantle"][f] for r in runs]
            rb = [r["bcc"][f] / r["measured_bcc"][f] for r in runs]
            summary[f] = {"mantle": rm, "bcc": rb}
            fmt = lambda v: f"{statistics.median(v):.4f} [{min(v):.4f}, {max(v):.4f}]"
            label = {"f": "f (nanosleep)", "g": "g (pipe read)", "h": "h (writer sleep)"}[f]
            print(f"{label:<18} {fmt(rm):>26} {fmt(rb):>26}")
        if a.json:
            with open(a.json, "w") as fh:
                json.dump({"runs": runs, "ratios": summary}, fh, indent=1)
    finally:
        subprocess.run(["rm", "-rf", tmp])
    return 0


if __name__ == "__main__":
    sys.exit(main())
