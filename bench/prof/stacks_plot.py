#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Plots of bench/prof/stacks.py's JSON (bench/prof/HISTORY.md, "Call stacks"):

  python3 bench/prof/stacks_plot.py   # reads stacks-calls.json, stacks-overhead.json,
                                      # dwarf-calls.json, dwarf-overhead.json
                                      # writes stacks-accuracy.png, stacks-overhead.png,
                                      # dwarf-accuracy.png, dwarf-overhead.png
"""
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TRUTH = {"a": 50.0, "c": 50.0, "b": 70.0}


def accuracy():
    c = json.load(open(f"{HERE}/stacks-calls.json"))["configs"]
    funcs = list(TRUTH)
    series = [("truth", [TRUTH[f] for f in funcs])] + [
        (name, [c[k]["inclusive_of_main"][f] for f in funcs])
        for name, k in (("perf record -g", "perf-g"), ("mantle --stacks perf", "mantle"),
                        ("mantle --stacks bpf", "mantle-bpf"))]
    bars(funcs, series, "callgraph.c: main→a→b, main→c→b (1 000 samples/s)", "stacks-accuracy.png")


def bars(funcs, series, title, out):
    """Grouped bars: inclusive shares per function, one bar per series."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    w = 0.8 / len(series)
    for i, (name, v) in enumerate(series):
        ax.bar([x + (i - (len(series) - 1) / 2) * w for x in range(len(funcs))], v, w, label=name)
    ax.set_xticks(range(len(funcs)), funcs)
    ax.set_ylabel("inclusive time, % of main's")
    ax.set_title(title, fontsize=9)
    ax.set_ylim(0, 85)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(f"{HERE}/{out}", dpi=120)


def overhead():
    rows = json.load(open(f"{HERE}/stacks-overhead.json"))
    cfgs = [("perf-g", "perf record -g"), ("mantle", "mantle --stacks perf"),
            ("mantle-bpf", "mantle --stacks bpf"), ("mantle-flat", "mantle --stacks none")]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    rates = [r["rate"] for r in rows]
    for k, name in cfgs:
        ax.plot(rates, [r[k]["overhead_pct"] for r in rows], marker="o", label=name)
    ax.set_xlabel("samples per second")
    ax.set_ylabel("CPU time overhead, %")
    ax.set_title("callgraph.c, medians of 5 (workload CPU 1, profiler CPU 0)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{HERE}/stacks-overhead.png", dpi=120)


def dwarf_accuracy():
    c = json.load(open(f"{HERE}/dwarf-calls.json"))
    rate, cfg = c["rate"], c["configs"]
    funcs = list(TRUTH)
    series = [("truth", [TRUTH[f] for f in funcs])] + [
        (name, [cfg[k]["inclusive_of_main"][f] for f in funcs])
        for name, k in (("perf --call-graph dwarf", "perf-dwarf"), ("mantle --stacks dwarf", "mantle-dwarf"))]
    bars(funcs, series, f"callgraph.c -O2 -fomit-frame-pointer, DWARF unwinding ({rate} samples/s)",
         "dwarf-accuracy.png")


def dwarf_overhead():
    rows = json.load(open(f"{HERE}/dwarf-overhead.json"))
    cfgs = [("perf-dwarf", "perf record --call-graph dwarf"), ("mantle-dwarf", "mantle --stacks dwarf"),
            ("mantle-flat", "mantle --stacks none")]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 3.5))
    rates = [r["rate"] for r in rows]
    for k, name in cfgs:
        ax.plot(rates, [r[k]["overhead_pct"] for r in rows], marker="o", label=name)
    ax.set_xlabel("samples per second")
    ax.set_ylabel("workload CPU time overhead, %")
    ax.set_title(f"callgraph-nofp, medians of {rows[0]['reps']}", fontsize=9)
    ax.legend(fontsize=7)
    # the recorder's user-space unwinding per sample (mantle only)
    w = 0.25
    for i, (q, name) in enumerate((("p50_ns", "p50"), ("mean_ns", "mean"), ("p99_ns", "p99"))):
        bx.bar([x + (i - 1) * w for x in range(len(rows))], [r["mantle_unwind"][q] / 1e3 for r in rows],
               w, label=name)
    bx.set_xticks(range(len(rows)), [f"{r} /s" for r in rates])
    bx.set_ylabel("µs per sample (recorder, CPU 0)")
    bx.set_title("mantle --stacks dwarf: unwinding in user space", fontsize=9)
    bx.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{HERE}/dwarf-overhead.png", dpi=120)


if __name__ == "__main__":
    accuracy()
    overhead()
    if os.path.exists(f"{HERE}/dwarf-calls.json"):
        dwarf_accuracy()
    if os.path.exists(f"{HERE}/dwarf-overhead.json"):
        dwarf_overhead()
