#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""bench/dispatch/freezers.py: how long each way of stopping and starting
a guest takes to ask for, idle and beside another program's cgroup churn
(issue 29: the dispatcher's cgroup.freeze writes waited for the kernel's
global cgroup mutex).

A spinner pinned to CPU 0; this process at SCHED_FIFO 99 times N
stop/start pairs (2 ms apart) of: cgroup v2 cgroup.freeze, SIGSTOP /
SIGCONT, sched_setscheduler SCHED_IDLE / SCHED_RR 98, and the cgroup v1
freezer's freezer.state (where that hierarchy is mounted). With --churn,
a shell loop beside it makes a cgroup, moves a process in and out and
removes it, over and over (what other programs' cgroup work does to the
cgroup mutex). Prints median, p99 and max of the calls, in us. As root.

    python3 bench/dispatch/freezers.py [-n 300] [--churn]
"""
import argparse, os, re, signal, subprocess, time

ap = argparse.ArgumentParser()
ap.add_argument("-n", type=int, default=300)
ap.add_argument("--churn", action="store_true")
a = ap.parse_args()
mounts = open("/proc/self/mounts").read().splitlines()
v2 = next((m.split()[1] for m in mounts if m.split()[2] == "cgroup2"), None)
v1 = next((m.split()[1] for m in mounts
           if m.split()[2] == "cgroup" and "freezer" in m.split()[3].split(",")), None)
me = os.getpid()
d2 = f"{v2}/mantle-freezers.{me}"
d1 = f"{v1}/mantle-freezers.{me}" if v1 else None
churn_dir = f"{v2}/mantle-freezers-churn.{me}"
os.mkdir(d2)
if d1:
    os.mkdir(d1)
spin = subprocess.Popen(["taskset", "-c", "0", "sh", "-c", "while :; do :; done"])
churn = None
if a.churn:
    churn = subprocess.Popen(["sh", "-c", f"""sleep 1000 & s=$!
trap 'kill $s; rmdir {churn_dir} 2>/dev/null; exit' TERM
while :; do mkdir {churn_dir}; echo $s > {churn_dir}/cgroup.procs
echo $s > {v2}/cgroup.procs; rmdir {churn_dir}; done"""])
try:
    time.sleep(0.2)
    open(f"{d2}/cgroup.procs", "w").write(str(spin.pid))
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(99))

    def meas(name, on, off):
        ts = []
        for _ in range(a.n):
            for f in (on, off):
                t = time.perf_counter()
                f()
                ts.append(time.perf_counter() - t)
                time.sleep(0.002)
        ts.sort()
        q = lambda p: ts[min(len(ts) - 1, int(len(ts) * p))] * 1e6
        print(f"{name:32s} median {q(0.5):8.0f} p99 {q(0.99):8.0f} max {ts[-1]*1e6:8.0f} us", flush=True)

    print(f"{2*a.n} calls each, spinner on CPU 0, {'beside a cgroup churn' if a.churn else 'no churn'}, load {os.getloadavg()[0]:.1f}")
    f2 = os.open(f"{d2}/cgroup.freeze", os.O_WRONLY)
    meas("v2 cgroup.freeze 1/0", lambda: os.write(f2, b"1"), lambda: os.write(f2, b"0"))
    meas("SIGSTOP/SIGCONT", lambda: os.kill(spin.pid, signal.SIGSTOP), lambda: os.kill(spin.pid, signal.SIGCONT))
    meas("sched_setscheduler IDLE/RR 98",
         lambda: os.sched_setscheduler(spin.pid, os.SCHED_IDLE, os.sched_param(0)),
         lambda: os.sched_setscheduler(spin.pid, os.SCHED_RR, os.sched_param(98)))
    os.sched_setscheduler(spin.pid, os.SCHED_OTHER, os.sched_param(0))
    if d1:
        open(f"{d1}/cgroup.procs", "w").write(str(spin.pid))
        f1 = os.open(f"{d1}/freezer.state", os.O_WRONLY)
        meas("v1 freezer.state FROZEN/THAWED", lambda: os.write(f1, b"FROZEN"), lambda: os.write(f1, b"THAWED"))
        os.write(f1, b"THAWED")
    else:
        print("v1 freezer: no cgroup v1 freezer hierarchy mounted")
finally:
    if churn:
        churn.terminate()
        churn.wait()
    spin.kill()
    spin.wait()
    for d in (d2, d1):
        if d:
            try:
                os.rmdir(d)
            except OSError:
                pass
