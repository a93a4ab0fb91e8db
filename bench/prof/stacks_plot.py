#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Plots of bench/prof/stacks.py's JSON (bench/prof/RESULTS.md, "Call stacks"):

  python3 bench/prof/stacks_plot.py   # reads stacks-calls.json, stacks-overhead.json
                                      # writes stacks-accuracy.png, stacks-overhead.png
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
    fig, ax = plt.subplots(figsize=(6, 3.5))
    w = 0.2
    for i, (name, v) in enumerate(series):
        ax.bar([x + (i - 1.5) * w for x in range(len(funcs))], v, w, label=name)
    ax.set_xticks(range(len(funcs)), funcs)
    ax.set_ylabel("inclusive time, % of main's")
    ax.set_title("callgraph.c: main→a→b, main→c→b (1 000 samples/s)")
    ax.set_ylim(0, 85)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(f"{HERE}/stacks-accuracy.png", dpi=120)


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


if __name__ == "__main__":
    accuracy()
    overhead()
