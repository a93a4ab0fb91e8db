#!/usr/bin/env python3
"""bench/qos: Hijack's Figures 8, 9 and 10 (seeds/001 section 3.3) on this
machine: QoS resource allocation among four tasks reading UDP streams.

Four receivers (receiver.c) each read their own stream; task0 reserves
35 000 packets/s, task1 20 000, task2 10 000, task3 is best effort; the
streams (one sender.c process, 16-byte packets with serial and send time,
over loopback) run at 42 000 packets/s each, task3's from t=0 and the
others joining at 5 s intervals (task2 at 5 s, task1 at 10 s, task0 at
15 s), to 20 s: from under-load into overload. This 2-CPU VM cannot carry
4 x 42 000 packets/s through interposed reads, so every rate is scaled by
--scale (default 0.25; the proportions are the paper's), and each
receiver spends --work-us (default 30 us) of CPU per packet (its
processing: without it one CPU takes every stream and nothing is
overloaded). Receivers on CPU --cpu (default 0), the sender on the other.

Three configurations, one after the other:
  mantle  the receivers are guests of `mantle run --system` with
          `qos = RATE` / `qos = "best-effort"` and [qos] period = 100 ms:
          the executive reads their sockets for them by Figure 7's token
          scheduler (crates/exec/src/qos.rs)
  same    the receivers at SCHED_RR 50 each (the paper's "same prio")
  diff    SCHED_RR 80/70/60/50 by importance ("diff prio")

Per task and second: packets delivered, dropped (serial gaps), mean and
max jitter (|inter-arrival - inter-send|). Plots like Figures 8-10 (three
panels each), the data as JSON. Bar (issue 11): under mantle, in the
overload seconds (all four streams on, the first second after task0
joins skipped), each reserved task receives >= 95% of its reservation and
the best-effort task gets the surplus (> 0).

    python3 bench/qos/run.py [--scale 0.25] [--work-us 30] [--configs mantle,same,diff]

As root (SCHED_RR, the executive's SCHED_FIFO). No mantle kernel side.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RESERVE = [35000, 20000, 10000, None]   # task3: best effort
START = [15, 10, 5, 0]                   # seconds after t0
RATE = 42000
END = 20
PRIO = [80, 70, 60, 50]


def build(out):
    os.makedirs(out, exist_ok=True)
    for p in ("sender", "receiver"):
        subprocess.run(["cc", "-O2", "-Wall", "-o", os.path.join(out, p), os.path.join(HERE, p + ".c")],
                       check=True)


def parse(text):
    rows = []
    for line in text.split("\n"):
        v = line.split()
        if len(v) == 5:
            rows.append([int(x) for x in v])
    return rows


def run_config(a, cfg, bin_, port):
    t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC) + 1_500_000_000
    outs = [os.path.join(a.out, f"{cfg}-task{k}.txt") for k in range(4)]
    recv = [[os.path.join(bin_, "receiver"), str(t0), str(END), str(port + k), str(a.work_us), outs[k]]
            for k in range(4)]
    procs = []
    if cfg == "mantle":
        sysf = os.path.join(a.out, "qos.toml")
        with open(sysf, "w") as f:
            f.write("[qos]\nperiod = \"100ms\"\n")
            for k in range(4):
                q = int(RESERVE[k] * a.scale) if RESERVE[k] else '"best-effort"'
                f.write(f"\n[[guest]]\nname = \"task{k}\"\nqos = {q}\ncommand = {json.dumps(recv[k])}\n")
        procs.append(subprocess.Popen(["taskset", "-c", str(a.cpu), a.mantle, "run", "--system", sysf]))
    else:
        for k in range(4):
            prio = 50 if cfg == "same" else PRIO[k]
            procs.append(subprocess.Popen(["taskset", "-c", str(a.cpu), "chrt", "-r", str(prio)] + recv[k]))
    other = 1 - a.cpu if a.cpu in (0, 1) else 0
    streams = [f"{RATE * a.scale:.0f}:{START[k]}" for k in range(4)]
    sender = subprocess.Popen(["taskset", "-c", str(other), os.path.join(bin_, "sender"), str(t0),
                               str(END + 1), str(port)] + streams)
    for p in procs:
        p.wait(timeout=END + 30)
    sender.wait()
    res = {}
    for k in range(4):
        try:
            res[k] = parse(open(outs[k]).read())
        except OSError:
            res[k] = []
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=0.25)
    ap.add_argument("--work-us", type=float, default=30)
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--configs", default="mantle,same,diff")
    ap.add_argument("--mantle", default=os.path.join(ROOT, "target/release/mantle"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/qos"))
    a = ap.parse_args()
    bin_ = os.path.join(a.out, "bin")
    build(bin_)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    data = {}
    for n, cfg in enumerate(a.configs.split(",")):
        data[cfg] = run_config(a, cfg, bin_, 41000 + 10 * n)
        print(f"{cfg}: done", file=sys.stderr, flush=True)
    report(a, data, stamp)


def report(a, data, stamp):
    lines = [f"command: python3 bench/qos/run.py {' '.join(sys.argv[1:])}",
             f"date: {stamp}  kernel: {os.uname().release}",
             f"scale {a.scale}: streams of {RATE * a.scale:.0f} packets/s, reservations "
             f"{[int(r * a.scale) if r else 'best-effort' for r in RESERVE]}, {a.work_us} us of work per packet, "
             f"receivers on CPU {a.cpu}, the sender on the other; t0 = task3's start, task2 +5 s, "
             f"task1 +10 s, task0 +15 s, end {END} s"]
    over = range(START[0] + 1, END)
    for cfg, res in data.items():
        lines.append("")
        lines.append(f"== {cfg}: per task, mean over the overload seconds {over.start}..{over.stop - 1}")
        lines.append(f"{'task':6s} {'reserved':>9s} {'delivered/s':>12s} {'dropped/s':>10s} {'mean jitter':>12s} "
                     f"{'max jitter':>11s}")
        for k in range(4):
            rows = [r for r in res.get(k, []) if r[0] in over]
            if not rows:
                lines.append(f"task{k}  no data")
                continue
            d = sum(r[1] for r in rows) / len(rows)
            dr = sum(r[2] for r in rows) / len(rows)
            mj = sum(r[3] for r in rows) / len(rows)
            xj = max(r[4] for r in rows)
            resv = int(RESERVE[k] * a.scale) if RESERVE[k] else 0
            lines.append(f"task{k}  {resv if resv else 'BE':>9} {d:12.0f} {dr:10.0f} {mj:12.0f} {xj:11.0f}")
    if "mantle" in data:
        lines.append("")
        lines.append("bars (issue 11, Figures 8-10), mantle in overload:")
        res = data["mantle"]
        for k in range(3):
            rows = [r for r in res.get(k, []) if r[0] in over]
            resv = RESERVE[k] * a.scale
            got = (sum(r[1] for r in rows) / len(rows)) if rows else 0
            lines.append(f"  task{k}: {got:.0f}/s of {resv:.0f}/s reserved = {100 * got / resv:.1f}% "
                         f"(need >= 95%) {'PASS' if got >= 0.95 * resv else 'MISS'}")
        rows = [r for r in res.get(3, []) if r[0] in over]
        be = (sum(r[1] for r in rows) / len(rows)) if rows else 0
        lines.append(f"  task3 (best effort): {be:.0f}/s of the surplus {'PASS' if be > 0 else 'MISS'}")
    text = "\n".join(lines)
    print(text)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"qos-{stamp}.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(a.out, f"qos-{stamp}.json"), "w") as f:
        json.dump({cfg: {str(k): v for k, v in res.items() if isinstance(k, int)} for cfg, res in data.items()}, f)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        for fig_no, col, what in ((8, 1, "packets delivered / s"), (9, 2, "packets dropped / s"),
                                  (10, 4, "max jitter (ms)")):
            fig, axes = plt.subplots(1, len(data), figsize=(4.5 * len(data), 3.4), sharey=True)
            axes = axes if len(data) > 1 else [axes]
            for ax, (cfg, res) in zip(axes, data.items()):
                for k in range(4):
                    rows = res.get(k, [])
                    ys = [r[col] / (1e6 if col == 4 else 1) for r in rows]
                    ax.plot([r[0] for r in rows], ys, label=f"task{k}" + ("" if RESERVE[k] else " (BE)"))
                ax.set_title(cfg)
                ax.set_xlabel("time (s)")
            axes[0].set_ylabel(what)
            axes[-1].legend(fontsize=7)
            fig.suptitle(f"Figure {fig_no}: {what}")
            fig.tight_layout()
            p = os.path.join(a.out, f"fig{fig_no}-{stamp}.png")
            fig.savefig(p, dpi=110)
            print(f"plot: {p}")
    except ImportError:
        print("no matplotlib: no plots")


if __name__ == "__main__":
    main()
