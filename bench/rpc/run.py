#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""bench/rpc/run.py: guest<->guest RPC over a mantle channel against pipe
RPC, unix-socket RPC and RPC through the executive, side by side in one run.

Rows (one round trip of SIZE bytes each way, timed per call by the client):
  pipe        two processes (a client and its forked server) over two pipes:
              the paper's "RPC Between Two Processes Using UNIX Pipes"
  unix        the same over a unix stream socketpair
  pipe-guest  pipe RPC inside one guest of `mantle run` (both processes
              under the guest's seccomp filter, as the channel's guests are:
              what being a guest adds to every system call)
  chan        two guests of one `mantle run --system` over a mantle channel
              (mantle_chan_call / mantle_chan_reply_receive; the default
              spin, 50 us, when the peer last ran on another CPU)
  chan-nospin the same with mantle_chan_set_spin(0): FUTEX_WAIT/WAKE only
              (the default waits awake up to 50 us first: spinning when the
              peer runs on another CPU, sched_yield to it on the same CPU)
  exec        two guests through the executive (mantle_rpc_call /
              mantle_rpc_reply_receive: two seccomp-notification round trips
              per call), today's bench/executive `ggrpc` row

Conditions (pinning; the executive is pinned with taskset, each process
pins itself with sched_setaffinity):
  1cpu   client, server and executive on CPU A
  2cpu   client on CPU A, server and executive on CPU B
  free   nothing pinned
/dev/cpu_dma_latency is not held (idle CPUs may halt: a cross-CPU wake-up
costs tens of microseconds on the 2-vCPU VMs mantle is measured on).

Each repetition runs every row once, in turn (so that drift of the machine
hits every row alike); N timed calls after W warm-up calls per run. Per row
and condition: the median over the R repetitions of the per-run median
(and the min..max of those R medians), of the per-run p99, of the per-run
max. Ratio = median(pipe) / median(row), the same condition and size, in
the same run (> 1: faster than pipes); its spread is the min..max of the
per-repetition ratios.

Output: bench/rpc/results.json (every run), bench/rpc/results.txt (the
table) and bench/rpc/rpc.png (the plot).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = ["pipe", "unix", "pipe-guest", "chan", "chan-nospin", "exec"]
CONDS = ["1cpu", "2cpu", "free"]


def parse(out):
    m = re.search(r"stats n=(\d+) median_ns=(\d+) p99_ns=(\d+) max_ns=(\d+) mean_ns=(\d+)", out)
    if not m:
        raise RuntimeError(f"no stats line in: {out!r}")
    return dict(n=int(m[1]), median=int(m[2]), p99=int(m[3]), max=int(m[4]), mean=int(m[5]))


def pins(cond, a, b):
    """(client cpu, server cpu, executive taskset list or None)"""
    if cond == "1cpu":
        return a, a, str(a)
    if cond == "2cpu":
        return a, b, str(b)
    return -1, -1, None


def run_one(args, row, cond, size):
    bench = os.path.join(args.bin, "rpcbench")
    cc, sc, ex = pins(cond, args.cpu_a, args.cpu_b)
    common = ["-n", str(args.n), "-w", str(args.warmup), "-s", str(size)]
    if row in ("pipe", "unix", "pipe-guest"):
        cmd = [bench, row.split("-")[0]] + common + ["-c", str(cc), "-p", str(sc)]
        if row == "pipe-guest":
            cmd = [args.mantle, "run", "--"] + cmd
            if ex is not None:
                cmd = ["taskset", "-c", ex] + cmd
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError(f"{cmd}: {out.stderr}")
        return parse(out.stdout)
    kind = "chan" if row.startswith("chan") else "exec"
    extra = ["-S", "0"] if row == "chan-nospin" else []
    server = [bench, f"{kind}-server"] + common + ["-c", str(sc)] + extra
    client = [bench, f"{kind}-client"] + common + ["-c", str(cc)] + extra
    with tempfile.TemporaryDirectory(prefix="mantle-rpcbench-") as d:
        f = os.path.join(d, "sys.toml")
        with open(f, "w") as fh:
            for name, argv in (("server", server), ("client", client)):
                fh.write(f"[[guest]]\nname = {json.dumps(name)}\ncommand = {json.dumps(argv)}\n\n")
        cmd = [args.mantle, "run", "--system", f]
        if ex is not None:
            cmd = ["taskset", "-c", ex] + cmd
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError(f"{cmd}: {out.returncode} {out.stdout} {out.stderr}")
        return parse(out.stdout)


def fmt_ns(v):
    return f"{v / 1000:.2f}u" if v >= 1000 else f"{v:.0f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="directory of rpcbench")
    ap.add_argument("--mantle", required=True, help="the mantle binary")
    ap.add_argument("-n", type=int, default=20000, help="timed calls per run")
    ap.add_argument("--warmup", type=int, default=2000)
    ap.add_argument("-r", "--reps", type=int, default=5)
    ap.add_argument("--sizes", default="1,4096")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--conds", default=",".join(CONDS))
    ap.add_argument("--cpu-a", type=int, default=0)
    ap.add_argument("--cpu-b", type=int, default=1)
    ap.add_argument("--out", default=HERE, help="where results.json/.txt and rpc.png go")
    ap.add_argument("--argv0", default="bench/rpc/run.py")
    args = ap.parse_args()
    rows = args.rows.split(",")
    conds = args.conds.split(",")
    sizes = [int(s) for s in args.sizes.split(",")]
    if "pipe" not in rows:
        rows.insert(0, "pipe")
    runs = []
    t0 = time.time()
    for rep in range(args.reps):
        for cond in conds:
            for size in sizes:
                for row in rows:
                    s = run_one(args, row, cond, size)
                    s.update(row=row, cond=cond, size=size, rep=rep)
                    runs.append(s)
                    print(f"rep {rep} {cond:5} size {size:5} {row:12} median {fmt_ns(s['median']):>8} "
                          f"p99 {fmt_ns(s['p99']):>8} max {fmt_ns(s['max']):>8}", file=sys.stderr)
    elapsed = time.time() - t0
    git = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    meta = dict(commit=git, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), n=args.n,
                warmup=args.warmup, reps=args.reps, cpu_a=args.cpu_a, cpu_b=args.cpu_b,
                cpus=os.cpu_count(), kernel=os.uname().release, seconds=round(elapsed))

    summary = []
    for cond in conds:
        for size in sizes:
            base = {r["rep"]: r["median"] for r in runs if r["row"] == "pipe" and r["cond"] == cond and r["size"] == size}
            for row in rows:
                rs = [r for r in runs if r["row"] == row and r["cond"] == cond and r["size"] == size]
                meds = [r["median"] for r in rs]
                ratios = [base[r["rep"]] / r["median"] for r in rs]
                summary.append(dict(
                    cond=cond, size=size, row=row,
                    median=statistics.median(meds), med_min=min(meds), med_max=max(meds),
                    p99=statistics.median(r["p99"] for r in rs),
                    max=statistics.median(r["max"] for r in rs),
                    worst=max(r["max"] for r in rs),
                    ratio=statistics.median(base.values()) / statistics.median(meds),
                    ratio_min=min(ratios), ratio_max=max(ratios)))

    lines = [f"# {args.argv0} -n {args.n} --warmup {args.warmup} -r {args.reps}   commit {git}, {meta['date']}, "
             f"{meta['cpus']} CPUs, Linux {meta['kernel']}, {meta['seconds']} s",
             "# 1cpu: client, server, executive on CPU %d; 2cpu: client on %d, server and executive on %d; free: unpinned"
             % (args.cpu_a, args.cpu_a, args.cpu_b),
             "# per row: median of R per-run medians (min..max), median of per-run p99 and max, worst max;"
             " vs pipe = median(pipe)/median(row), > 1 faster (min..max of per-rep ratios)",
             f"{'cond':5} {'size':>5} {'row':12} {'median':>8} {'(min..max)':>18} {'p99':>8} {'max':>8} {'worst':>8}  vs pipe"]
    for s in summary:
        lines.append(f"{s['cond']:5} {s['size']:5} {s['row']:12} {fmt_ns(s['median']):>8} "
                     f"{fmt_ns(s['med_min']) + '..' + fmt_ns(s['med_max']):>18} {fmt_ns(s['p99']):>8} "
                     f"{fmt_ns(s['max']):>8} {fmt_ns(s['worst']):>8}  {s['ratio']:.2f}x "
                     f"({s['ratio_min']:.2f}..{s['ratio_max']:.2f})")
    lines.append("# verdict (paper: Hijack guest<->guest RPC 1.57x faster than pipes): chan vs pipe, 1-byte")
    for s in summary:
        if s["row"] == "chan" and s["size"] == min(sizes):
            lines.append(f"#   {s['cond']:5} {s['ratio']:.2f}x  {'FASTER' if s['ratio'] > 1 else 'SLOWER'} than pipes"
                         f"{'  (>= 1.57x)' if s['ratio'] >= 1.57 else ''}")
    table = "\n".join(lines) + "\n"
    print(table)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.txt"), "w") as f:
        f.write(table)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(dict(meta=meta, summary=summary, runs=runs), f, indent=1)
    plot(summary, conds, sizes, rows, os.path.join(args.out, "rpc.png"), meta)


def plot(summary, conds, sizes, rows, path, meta):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(sizes), figsize=(6 * len(sizes), 4.5), squeeze=False)
    colors = {"pipe": "tab:gray", "unix": "tab:brown", "pipe-guest": "tab:olive", "chan": "tab:blue",
              "chan-nospin": "tab:cyan", "exec": "tab:red"}
    width = 0.8 / len(rows)
    for ax, size in zip(axes[0], sizes):
        for k, row in enumerate(rows):
            xs, ys, lo, hi, p99 = [], [], [], [], []
            for i, cond in enumerate(conds):
                s = next(x for x in summary if x["cond"] == cond and x["size"] == size and x["row"] == row)
                xs.append(i + (k - (len(rows) - 1) / 2) * width)
                ys.append(s["median"] / 1000)
                lo.append((s["median"] - s["med_min"]) / 1000)
                hi.append((s["med_max"] - s["median"]) / 1000)
                p99.append(s["p99"] / 1000)
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=row, color=colors.get(row))
            ax.scatter(xs, p99, marker="_", color="black", s=60, zorder=3,
                       label="p99" if k == 0 else None)
        ax.set_xticks(range(len(conds)))
        ax.set_xticklabels(conds)
        ax.set_yscale("log")
        ax.set_ylabel("round trip, us (log)")
        ax.set_title(f"{size}-byte round trip")
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"guest<->guest RPC: mantle channel vs pipes (median of {meta['reps']} runs x "
                 f"{meta['n']} calls; bars: min..max of run medians; ticks: p99)  {meta['commit']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
