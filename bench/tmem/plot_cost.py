#!/usr/bin/env python3
"""The policy's cost against M*|C|*|T| (the paper's O(M|C||T|)): median
run time of the pure core per synthetic size, log-log, one series per M,
with a line of slope 1 through the median point for reference.
Usage: plot_cost.py cost.json cost.png"""
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

d = json.load(open(sys.argv[1]))
rows = d["pure"]
fig, ax = plt.subplots(figsize=(7, 5))
for m in sorted({r["m"] for r in rows}):
    rs = sorted((r for r in rows if r["m"] == m), key=lambda r: r["m"] * r["c"] * r["t"])
    ax.scatter([r["m"] * r["c"] * r["t"] for r in rs], [r["median_ns"] for r in rs], s=14, label=f"M = {m}")
xs = sorted(r["m"] * r["c"] * r["t"] for r in rows)
mid = sorted(rows, key=lambda r: r["m"] * r["c"] * r["t"])[len(rows) // 2]
k = mid["median_ns"] / (mid["m"] * mid["c"] * mid["t"])
ax.plot([xs[0], xs[-1]], [k * xs[0], k * xs[-1]], "k--", lw=0.8, label="slope 1 (O(M|C||T|))")
f8 = d["figure8"]
ax.axhline(f8["median_ns"], color="#c33", lw=0.8, label=f"whole run, Figure 8 system: {f8['share_median_pct']:.4f}% of 250 ms")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("M x |C| x |T| (units x virtual components x real-time threads)")
ax.set_ylabel("median run time, ns")
ax.set_title(f"TMEM policy cost (getppid floor {d['floor_getppid_ns']:.0f} ns, same run)")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=120)
