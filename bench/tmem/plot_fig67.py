#!/usr/bin/env python3
"""Figures 6 and 7 from fig67.json (bench/tmem/fig67.rs), and the bars.

Figure 6: per policy, the per-second maximum tardiness and deadlines
missed against the contexts above the minimum, mean over the task sets
with the range (min..max over sets) as error bars; min and max as
reference lines. A least-squares line is fitted to tmem and to greedy
over the range where their tardiness falls (from the first level to the
level of their lowest mean), and the slopes are compared (the paper:
tmem's 4x steeper).
Figure 7: per policy over time: stacks in use, max tardiness, missed per
second, with the best-effort interval shaded.
Usage: plot_fig67.py fig67.json fig6.png fig7.png > fig67-summary.txt"""
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

d = json.load(open(sys.argv[1]))
rows = d["fig6"]
pols = ["tmem", "tmem-nopi", "greedy", "greedy-nopi", "fair"]
extras = sorted({r["extra"] for r in rows if r["policy"] in pols})
sets = sorted({r["set"] for r in rows})


def series(p, key):
    out = []
    for x in extras:
        v = [r[key] for r in rows if r["policy"] == p and r["extra"] == x]
        if v:
            out.append((x, sum(v) / len(v), min(v), max(v)))
    return out


def ref(p, key):
    v = [r[key] for r in rows if r["policy"] == p]
    return sum(v) / len(v) if v else None


def fit(pts):
    """Least squares slope over the falling range (first point to the lowest)."""
    if not pts:
        return None, 0
    low = min(range(len(pts)), key=lambda i: pts[i][1])
    pts = pts[: low + 1]
    if len(pts) < 2:
        return 0.0, len(pts)
    n = len(pts)
    mx = sum(p[0] for p in pts) / n
    my = sum(p[1] for p in pts) / n
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    sxy = sum((p[0] - mx) * (p[1] - my) for p in pts)
    return (sxy / sxx if sxx else 0.0), n


fig, axs = plt.subplots(1, 2, figsize=(12, 4.8))
for ax, key, label in [
    (axs[0], "max_tardiness_ms", "max tardiness (ms, mean of per-second max)"),
    (axs[1], "missed_per_s", "deadlines missed per second"),
]:
    for p in pols:
        s = series(p, key)
        if not s:
            continue
        ax.errorbar(
            [x for x, *_ in s],
            [m for _, m, _, _ in s],
            yerr=[[m - lo for _, m, lo, _ in s], [hi - m for _, m, _, hi in s]],
            marker="o",
            capsize=3,
            label=p,
        )
    for p, style in [("min", "k:"), ("max", "k--")]:
        v = ref(p, key)
        if v is not None:
            ax.axhline(v, color="k", ls=style[1:], lw=0.8, label=f"{p} (reference)")
    ax.set_xlabel("contexts above the minimum (15)")
    ax.set_ylabel(label)
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
axs[0].legend(fontsize=8)
fig.suptitle(
    f"Figure 6 on mantle: {len(sets)} task sets x {d['secs']} s (after {d['warm']} s), policy period {d['period_ms']} ms"
)
fig.tight_layout()
fig.savefig(sys.argv[2])

print("Figure 6 (mean over task sets; range in brackets)")
print(f"{'policy':<12} " + " ".join(f"{'+' + str(x):>22}" for x in extras))
for key in ["max_tardiness_ms", "missed_per_s", "stacks_in_use"]:
    print(f"  {key}")
    for p in pols:
        s = series(p, key)
        print(f"  {p:<12} " + " ".join(f"{m:>8.2f} [{lo:.1f}..{hi:.1f}]".rjust(22) for _, m, lo, hi in s))
    for p in ["min", "max"]:
        v = ref(p, key)
        print(f"  {p:<12} {v:.2f} (reference)")
fr = [r.get("foreign_rt", 0.0) for r in rows]
if fr:
    print(f"\nother real-time work on the machine during the runs (CPUs' worth): median {sorted(fr)[len(fr) // 2] * 100:.1f}%, max {max(fr) * 100:.1f}%;"
          f" runs above 5%: {sum(1 for x in fr if x > 0.05)} of {len(fr)}")
disturbed = bool(fr) and sorted(fr)[len(fr) // 2] > 0.05
if disturbed:
    print("DISTURBED: other real-time work took more than 5% of a CPU in the median run; the figures below"
          " measure that interference, not the policies: no bar is assessed from this run")
st, nt = fit(series("tmem", "max_tardiness_ms"))
sg, ng = fit(series("greedy", "max_tardiness_ms"))
print(f"\nslope of max tardiness against contexts, falling range: tmem {st:.3f} ms/context over {nt} points, greedy {sg:.3f} ms/context over {ng} points")
if sg and sg < 0:
    print(f"  tmem/greedy slope ratio {st / sg:.2f} (bar: >= 4)" + (" [disturbed run: not assessed]" if disturbed else ""))
else:
    print("  greedy's tardiness does not fall over the range: the ratio is undefined (bar not assessable)")
for a, b in [("tmem", "tmem-nopi"), ("greedy", "greedy-nopi")]:
    ta = [m for _, m, _, _ in series(a, "max_tardiness_ms")]
    tb = [m for _, m, _, _ in series(b, "max_tardiness_ms")]
    worse = sum(1 for x, y in zip(ta, tb) if y > x)
    print(f"  {b} worse than {a} at {worse} of {len(ta)} levels; mean {sum(tb) / max(len(tb), 1):.1f} vs {sum(ta) / max(len(ta), 1):.1f} ms")

f7 = d["fig7"]
runs = f7["runs"]
be0, be1 = f7["be"]
fig, axs = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
for r in runs:
    t = list(range(len(r["max_tardiness_ms"])))
    axs[0].plot([m[0] for m in r["memory"]], [m[1] for m in r["memory"]], label=r["policy"])
    axs[1].step(t, r["max_tardiness_ms"], where="post", label=r["policy"])
    axs[2].step(t, r["missed"], where="post", label=r["policy"])
for ax, label in zip(axs, ["stacks in use (contexts)", "max tardiness (ms)", "deadlines missed / s"]):
    ax.axvspan(be0, be1, color="grey", alpha=0.15)
    ax.set_ylabel(label)
    ax.grid(alpha=0.3)
axs[0].set_yscale("log")
axs[1].set_yscale("symlog", linthresh=1.0)
axs[1].set_ylim(bottom=0)
axs[2].set_ylim(bottom=0)
axs[2].set_xlabel("time (s); shaded: best-effort threads running")
axs[0].legend(fontsize=8, ncol=3)
fig.suptitle(f"Figure 7 on mantle: open system, pool {f7['pool']} contexts (max: its bound)")
fig.tight_layout()
fig.savefig(sys.argv[3])

print(f"\nFigure 7 (best-effort threads {be0:.1f}..{be1:.1f} s; per second)")
period = d["period_ms"] / 1000.0
for r in runs:
    mt = r["max_tardiness_ms"]
    jobs = r["jobs"]
    before = [j[1] for j in jobs if 1.0 <= j[0] < be0]
    lvl = max(before) if before else 0.0
    # the first time after the arrival from which every job's tardiness
    # is back at the level before (within 1 ms), for the rest of the interval
    back = None
    during = [j for j in jobs if be0 <= j[0] < be1]
    for i, j in enumerate(during):
        if all(k[1] <= lvl + 1.0 for k in during[i:]):
            back = j[0] - be0
            break
    mem_before = [m[1] for m in r["memory"] if 1.0 <= m[0] < be0]
    mem_during = [m[1] for m in r["memory"] if be0 <= m[0] < be1]
    avg = lambda v: sum(v) / len(v) if v else float("nan")
    print(
        f"  {r['policy']:<10} [other RT {r.get('foreign_rt', 0) * 100:.0f}%] before: max tardiness {lvl:8.2f} ms, stacks {avg(mem_before):6.1f}; "
        f"during: max {max((j[1] for j in during), default=0):8.2f} ms, missed {sum(r['missed'][int(be0):int(be1)])}, "
        f"stacks {avg(mem_during):6.1f}; back to the level before "
        + (f"{back:.2f} s = {back / period:.1f} periods after the arrival" if back is not None else "never during the interval")
    )
