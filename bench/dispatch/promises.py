"""bench/dispatch/promises.py: does the executive's dispatching keep its
promises (issue 29)? Run by run.sh after the mechanism comparison, or
alone: python3 bench/dispatch/promises.py [-r REPS] [-c CPU].

1. A guest runs only while dispatched: for every policy, guests that spin,
   block and wake (spin 2 ms, sleep 1 ms) or yield, 2 s on one CPU; each
   guest's CPU time (its cgroup's cpu.stat, from `mantle run -v`) over its
   dispatched time. Above 1 (beyond the switch time) is a leak.
2. A reservation holds against the host: a plain spinning process of the
   host's pinned to the guests' CPU (the "hog"), and beside it
   - the same spinner run natively (SCHED_OTHER): the fair-share floor;
   - a mantle guest under `edf 2ms/10ms` (promised 20%);
   - a lone mantle guest under `fifo 20` (promised the CPU, bounded to
     90% of every 100 ms at real-time priority);
   - xz -9 of 2 MiB natively alone, and under `edf 2ms/10ms` beside the
     hog (promised 5x the native time).
   - two mantle guests under `rr 20/10ms` (together, the same bound); the
     executive's lateness at their quantum ends (p99, max) says whether
     the kernel's fair server had to preempt it.
Medians over REPS repetitions with min..max.
"""
import argparse
import os
import re
import resource
import statistics as st
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANTLE = os.environ.get("MANTLE", os.path.join(ROOT, "target/release/mantle"))

GUEST_C = r"""#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double end;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static void *spin(void *a) { while (now() < end) ; return a; }
static void *sleepy(void *a) {
    struct timespec ms = { 0, 1000000 };
    while (now() < end) { double t = now() + 0.002; while (now() < t) ; nanosleep(&ms, 0); }
    return a;
}
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    double t0 = now();
    end = t0 + atof(argv[2]);
    if (!strcmp(argv[1], "spin")) spin(0);
    else if (!strcmp(argv[1], "sleepy")) sleepy(0);
    else if (!strcmp(argv[1], "yield")) { while (now() < end) sched_yield(); }
    else if (!strcmp(argv[1], "threads")) { pthread_t t; pthread_create(&t, 0, sleepy, 0); spin(0); pthread_join(t, 0); }
    else return 2;
    struct timespec c; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c);
    printf("%s cpu %.6f wall %.6f\n", argv[1], c.tv_sec + c.tv_nsec / 1e9, now() - t0);
    return 0;
}
"""

SCENARIOS = [
    ("rr", "guest", [("spin", None, "spin"), ("sleepy", None, "sleepy"), ("yield", None, "yield")]),
    ("fifo", "guest", [("hi", "fifo 10", "sleepy"), ("lo", None, "spin")]),
    ("rr-prio", "guest", [("r1", "rr 10/5ms", "sleepy"), ("r2", "rr 10/5ms", "spin"), ("be", None, "spin")]),
    ("edf", "guest", [("e1", "edf 2ms/10ms", "sleepy"), ("e2", "edf 3ms/20ms", "spin"), ("be", None, "spin"), ("yield", None, "yield")]),
    ("other", "guest", [("n5", "other 5", "sleepy"), ("n0", "other 0", "spin"), ("yield", "other -5", "yield")]),
    ("thread", "thread", [("two", None, "threads"), ("spin", None, "spin"), ("yield", None, "yield")]),
    ("thread-edf", "thread", [("two", "edf 2ms/10ms", "threads"), ("spin", None, "spin")]),
]


def system(tmp, cpu, per, guests, quantum="10ms"):
    s = f'[dispatch]\ncpus = [{cpu}]\nquantum = "{quantum}"\nper = "{per}"\n'
    for name, sched, cmd in guests:
        s += f'\n[[guest]]\nname = "{name}"\n'
        if sched:
            s += f'sched = "{sched}"\n'
        s += "command = [" + ", ".join(f'"{c}"' for c in cmd) + "]\n"
    f = os.path.join(tmp, "system.toml")
    with open(f, "w") as fh:
        fh.write(s)
    return f


def summary(err):
    line = next((l for l in err.splitlines() if "dispatched s per guest:" in l), None)
    if line is None:
        sys.exit(f"no dispatch summary:\n{err}")

    def lst(key):
        return [float(x) for x in line.split(key, 1)[1].split(";")[0].split()]

    late = re.search(r"lateness at quantum end: median (\d+) p99 (\d+) max (\d+)", line)
    return {
        "cpu": lst("cpu s per guest: "),
        "rt": lst("real-time s per guest: "),
        "ran": lst("dispatched s per guest: "),
        "late": tuple(int(x) for x in late.groups()) if late else (0, 0, 0),
    }


def run_mantle(sysfile):
    p = subprocess.run([MANTLE, "run", "-v", "--system", sysfile], capture_output=True, text=True)
    return p.stdout, summary(p.stderr)


def spread(xs, fmt="{:.3f}"):
    return f"{fmt.format(st.median(xs))} ({fmt.format(min(xs))}..{fmt.format(max(xs))})"


def pin(pid, cpu):
    os.sched_setaffinity(pid, {cpu})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-r", "--reps", type=int, default=5)
    ap.add_argument("-c", "--cpu", type=int, default=0)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mantle-promises-")
    guest = os.path.join(tmp, "guest")
    with open(guest + ".c", "w") as f:
        f.write(GUEST_C)
    subprocess.run(["cc", "-O2", "-pthread", "-o", guest, guest + ".c"], check=True)
    print(f"kernel {os.uname().release}; guests on CPU {a.cpu} ([dispatch] cpus), executive unpinned at SCHED_FIFO 99; {a.reps} repetitions; median (min..max)")
    print("\n1. CPU time / dispatched time per guest (cgroup cpu.stat; 2 s; quantum 10 ms)")
    print(f"{'policy':11} {'guest':7} {'sched':14} {'cpu/dispatched':24} {'max leak s':>10} {'real-time s':>20}")
    for tag, per, gs in SCENARIOS:
        ratios = {g[0]: [] for g in gs}
        leak = {g[0]: [] for g in gs}
        rt = {g[0]: [] for g in gs}
        for _ in range(a.reps):
            f = system(tmp, a.cpu, per, [(n, s, [guest, m, "2"]) for n, s, m in gs])
            _, sm = run_mantle(f)
            for k, (n, _, _) in enumerate(gs):
                ratios[n].append(sm["cpu"][k] / max(sm["ran"][k], 1e-9))
                leak[n].append(sm["cpu"][k] - sm["ran"][k])
                rt[n].append(sm["rt"][k])
        for n, s, _ in gs:
            print(f"{tag:11} {n:7} {s or 'best effort':14} {spread(ratios[n]):24} {max(leak[n]):>10.3f} {spread(rt[n]):>20}")

    print("\n2. Against a host CPU hog pinned to the same CPU (2 s each)")
    hog = subprocess.Popen([guest, "spin", "100000"], stdout=subprocess.DEVNULL)
    pin(hog.pid, a.cpu)
    try:
        rows = {"native SCHED_OTHER spinner (fair-share floor)": [], "mantle edf 2ms/10ms spinner (promised 0.20)": [],
                "mantle fifo 20 spinner, alone (bounded to 0.90 real-time)": [],
                "mantle two rr 20/10ms spinners (together; bounded to 0.90)": []}
        late = []
        for _ in range(a.reps):
            p = subprocess.run(["taskset", "-c", str(a.cpu), guest, "spin", "2"], capture_output=True, text=True)
            v = p.stdout.split()
            rows["native SCHED_OTHER spinner (fair-share floor)"].append(float(v[2]) / float(v[4]))
            out, _ = run_mantle(system(tmp, a.cpu, "guest", [("rt", "edf 2ms/10ms", [guest, "spin", "2"])]))
            v = out.split()
            rows["mantle edf 2ms/10ms spinner (promised 0.20)"].append(float(v[2]) / float(v[4]))
            out, sm = run_mantle(system(tmp, a.cpu, "guest", [("rt", "fifo 20", [guest, "spin", "2"])]))
            v = out.split()
            rows["mantle fifo 20 spinner, alone (bounded to 0.90 real-time)"].append(float(v[2]) / float(v[4]))
            out, sm = run_mantle(system(tmp, a.cpu, "guest", [(n, "rr 20/10ms", [guest, "spin", "2"]) for n in ("a", "b")]))
            v = [float(x) for x in out.split() if x[0].isdigit()]
            rows["mantle two rr 20/10ms spinners (together; bounded to 0.90)"].append((v[0] + v[2]) / max(v[1], v[3]))
            late.append(sm["late"])
        for k, xs in rows.items():
            print(f"  {k:58} share of the CPU {spread(xs)}")
        print(f"  executive's lateness at quantum end in the rr runs: p99 {spread([l[1] / 1e3 for l in late], '{:.0f}')} us, max {spread([l[2] / 1e3 for l in late], '{:.0f}')} us")
        data = os.path.join(tmp, "data")
        with open(data, "wb") as fh:
            fh.write(os.urandom(1 << 20) + bytes(1 << 20))
        xz = ["xz", "-9", "-T1", "-c", data]
        hog.kill()
        hog.wait()
        # native: its CPU time (what an idle CPU's wall time would be; the
        # wall time on a loaded machine is the load's)
        nat, natwall, under = [], [], []
        for _ in range(a.reps):
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.monotonic()
            subprocess.run(["taskset", "-c", str(a.cpu)] + xz, stdout=subprocess.DEVNULL, check=True)
            natwall.append(time.monotonic() - t)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            nat.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
        hog = subprocess.Popen([guest, "spin", "100000"], stdout=subprocess.DEVNULL)
        pin(hog.pid, a.cpu)
        for _ in range(a.reps):
            f = system(tmp, a.cpu, "guest", [("xz", "edf 2ms/10ms", ["sh", "-c", " ".join(xz) + " >/dev/null"])])
            t = time.monotonic()
            subprocess.run([MANTLE, "run", "--system", f], capture_output=True, check=True)
            under.append(time.monotonic() - t)
        print(f"  xz -9 of 2 MiB: native CPU time {spread(nat)} s (wall {spread(natwall)} s, no hog); under edf 2ms/10ms beside the hog, wall {spread(under)} s; ratio of medians {st.median(under) / st.median(nat):.2f} (promised 5.00)")
    finally:
        hog.kill()
        hog.wait()


if __name__ == "__main__":
    main()
