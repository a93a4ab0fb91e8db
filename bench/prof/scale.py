#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""The report's memory and time at scale (issue 33), side by side:

  bench/prof/scale.py synth [--reps 3] [--sizes 1000000:100000,3000000:300000]
      synthetic sessions (crates/prof/examples/synth.rs: ROWS rows over
      STACKS distinct 60-frame stacks, real libc functions as frames);
      `mantle prof report` of each: peak RSS and CPU and wall time, median
      of --reps runs with the spread, against the issue's bars
      (1M rows: <= 512 MiB; 3M rows, 300k stacks: <= 1 GiB, <= 30 s)
  bench/prof/scale.py real [--secs 20] [--rate 4000] [--reps 3]
      one real system-wide recording with call stacks, made by mantle
      and `perf record -a -g` at once, at the same rate, while a
      workload (`make -j2` of 24 C files, then xz) runs; then
      `mantle prof report` against `perf report -g --stdio` on that run:
      peak RSS and time, and the ratios mantle / perf

Peak RSS is the report process's ru_maxrss (wait4). Run as root from the
repository root after `cargo build --release -p mantle-cli` and
`cargo build --release -p mantle-prof --example synth`. `real` holds
/run/mantle-kernel.lock while recording. Pinning: none (the report is
single-threaded; the recorders as the workload finds them); the machine
is shared, so compare the ratios, not the seconds.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import MANTLE, PERF, Lock, log  # noqa: E402

TARGET = os.environ.get("CARGO_TARGET_DIR",
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../target"))
SYNTH = os.path.join(TARGET, "release/examples/synth")
WORK = os.environ.get("MANTLE_BENCH_DIR", "/var/tmp/mantle-bench-scale")


def measure(argv):
    """(peak RSS MiB, wall s, cpu s) of one run of argv (output discarded)."""
    t = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv}: exit {os.waitstatus_to_exitcode(status)}")
    return ru.ru_maxrss / 1024, wall, ru.ru_utime + ru.ru_stime


def med_spread(v):
    m = statistics.median(v)
    return m, (max(v) - min(v)) / m * 100 if m else 0.0


def runs(argv, reps):
    r = [measure(argv) for _ in range(reps)]
    return [med_spread([x[i] for x in r]) for i in range(3)]


def row(name, res):
    (rss, rs), (wall, ws), (cpu, cs) = res
    return f"| {name} | {rss:.0f} MiB ({rs:.0f}%) | {wall:.1f} s ({ws:.0f}%) | {cpu:.1f} s ({cs:.0f}%) |"


def synth(a):
    os.makedirs(WORK, exist_ok=True)
    print("| session | report peak RSS (spread) | wall (spread) | CPU (spread) | bar |")
    print("| --- | ---: | ---: | ---: | --- |")
    for size in a.sizes.split(","):
        rows, stacks = (int(x) for x in size.split(":"))
        d = tempfile.mkdtemp(dir=WORK)
        s = os.path.join(d, "s")
        try:
            subprocess.run([SYNTH, s, str(rows), str(stacks), "60", "1"], check=True)
            res = runs([MANTLE, "prof", "report", "-i", s], a.reps)
            bar = "<= 512 MiB" if rows <= 1_000_000 else "<= 1024 MiB, <= 30 s"
            ok = res[0][0] <= (512 if rows <= 1_000_000 else 1024) and (rows <= 1_000_000 or res[1][0] <= 30)
            print(row(f"{rows} rows, {stacks} stacks x 60 frames", res)
                  + f" {bar}: {'met' if ok else 'NOT met'} |", flush=True)
        finally:
            shutil.rmtree(d)


def workload(d):
    """A C build then xz: many processes and deep enough stacks."""
    src = os.path.join(d, "src")
    os.makedirs(src)
    for i in range(24):
        with open(os.path.join(src, f"f{i}.c"), "w") as f:
            f.write("#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n")
            for j in range(60):
                f.write(f"int f{i}_{j}(int x) {{ char b[64]; snprintf(b, sizeof b, \"%d\", x); return (int)strlen(b) + x * {j}; }}\n")
    with open(os.path.join(src, "Makefile"), "w") as f:
        objs = " ".join(f"f{i}.o" for i in range(24))
        f.write(f"all: {objs}\n%.o: %.c\n\tgcc -O2 -g -c $< -o $@\n")
    return (f"make -s -C {src} -j2 && head -c 40000000 /dev/urandom > {d}/r && "
            f"xz -T1 -6 -k -c {d}/r > /dev/null; make -s -C {src} clean >/dev/null 2>&1 || true; "
            f"rm -f {src}/*.o")


def real(a):
    os.makedirs(WORK, exist_ok=True)
    d = tempfile.mkdtemp(dir=WORK)
    try:
        session, data = os.path.join(d, "m.prof"), os.path.join(d, "perf.data")
        wl = workload(d)
        with Lock():
            m = subprocess.Popen([MANTLE, "prof", "record", "-a", "-F", str(a.rate), "-q",
                                  "--duration", f"{a.secs}s", "-o", session],
                                 stdout=subprocess.DEVNULL)
            p = subprocess.Popen([PERF, "record", "-a", "-g", "-F", str(a.rate), "-q", "-o", data,
                                  "--", "sleep", str(a.secs)], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            end = time.monotonic() + a.secs
            while time.monotonic() < end - 1:
                subprocess.run(["sh", "-c", wl], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            m.wait()
            p.wait()
        msize = sum(os.path.getsize(os.path.join(session, f)) for f in os.listdir(session)
                    if os.path.isfile(os.path.join(session, f)))
        print(f"one {a.secs} s system-wide recording at {a.rate} Hz with stacks: mantle session "
              f"{msize / 1e6:.1f} MB, perf.data {os.path.getsize(data) / 1e6:.1f} MB; "
              f"medians of {a.reps} reports (spread)\n")
        mr = runs([MANTLE, "prof", "report", "-i", session], a.reps)
        pr = runs([PERF, "report", "-i", data, "-g", "--stdio"], a.reps)
        print("| report | peak RSS | wall | CPU |")
        print("| --- | ---: | ---: | ---: |")
        print(row("mantle prof report", mr))
        print(row("perf report -g --stdio", pr))
        print(f"| mantle / perf | {mr[0][0] / pr[0][0]:.2f}x | {mr[1][0] / pr[1][0]:.2f}x "
              f"| {mr[2][0] / pr[2][0]:.2f}x |")
    finally:
        shutil.rmtree(d)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("synth")
    s.add_argument("--reps", type=int, default=3)
    s.add_argument("--sizes", default="1000000:100000,3000000:300000")
    r = sub.add_parser("real")
    r.add_argument("--secs", type=int, default=20)
    r.add_argument("--rate", type=int, default=4000)
    r.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    {"synth": synth, "real": real}[a.cmd](a)


if __name__ == "__main__":
    main()
