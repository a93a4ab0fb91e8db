#!/usr/bin/env python3
"""mantle prof record --off-cpu against bcc's offcputime on
bench/prof/offcpu/blocker.c, and both against the time the program
measured around each block (CLOCK_MONOTONIC).

Which offcputime: libbpf-tools' (Debian package libbpf-tools,
/usr/sbin/offcputime: CO-RE, BTF only). The Python one of bpfcc-tools
(offcputime-bpfcc) compiles its program at start against the kernel's
headers, and this VM's kernel (6.18, a Firecracker build) has none: no
/lib/modules/$(uname -r)/build, CONFIG_IKHEADERS not set; it fails with
"Failed to compile BPF module".

Run as root from the repository root, after `cargo build --release -p
mantle-cli`:

    python3 bench/prof/offcpu/compare.py [-r RUNS] [--f-ms 200 --g-ms 300]

Each run: blocker under `mantle prof record --off-cpu` (then `report
--off-cpu-folded`), and blocker while offcputime traces the whole system
(`-p PID`: a shell says its pid, offcputime is started on it, then the
shell execs blocker; 16384 stacks; blocker stays alive until offcputime
has printed, as it names user frames from /proc/PID/maps then). For f (nanosleep), g (pipe read) and h (the writer's
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


def offcputime_sums(path, comm, scale):
    """libbpf-tools offcputime's default output: per entry, its frames
    (kernel then user, leaf first, one per line), `-  comm (tid)`, then
    the time in microseconds."""
    out = {f: 0.0 for f in FUNCS}
    frames = []
    who = None
    with open(path) as fh:
        for line in fh:
            t = line.strip()
            if not t:
                frames, who = [], None
            elif t.startswith("-") and "(" in t:
                who = t[1:].rsplit("(", 1)[0].strip()
            elif who is not None and t.isdigit():
                if who == comm:
                    for f in FUNCS:
                        if f in frames:
                            out[f] += float(t) * scale
                frames, who = [], None
            else:
                frames.append(t)
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
            dur = int((a.f_ms + a.g_ms) / 1000 + 3)
            # a shell that says its pid, waits for a line, then execs
            # blocker (same pid): offcputime -p follows it from the start
            sh = subprocess.Popen(
                ["sh", "-c", 'echo $$; read x; exec "$@"', "sh", blocker, *args, bm,
                 str((dur + 3) * 1000)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            pid = sh.stdout.readline().strip()
            with open(bf, "w") as out:
                bcc = subprocess.Popen(["/usr/sbin/offcputime", "--stack-storage-size",
                                        "16384", "-p", pid, str(dur)],
                                       stdout=out, stderr=subprocess.DEVNULL)
                time.sleep(1)
                sh.stdin.write("go\n")
                sh.stdin.flush()
                # blocker stays alive until offcputime has printed
                bcc.wait()
            sh.wait()
            # offcputime's values are microseconds
            bccs = offcputime_sums(bf, comm="blocker", scale=1000.0)
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
