#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Tables for bench/tags/run.sh (called by it; not meant to be run alone).

    report.py RAW.tsv PROFILE.tsv META_JSON OUT_PREFIX
    report.py --from-json OLD.json OUT_PREFIX      (re-render a report)

RAW rows:     kind case cond rep value_ns hops_per_op note
PROFILE rows: kind case cond program calls_per_op ns_per_call
Prints the report and writes OUT_PREFIX.txt and OUT_PREFIX.json.

Statistics: per case and condition, the median, the MAD (median absolute
deviation, unscaled, as in the paper's tables) and min..max over the
repetitions; "ratio" is median(condition) / median(baseline); "paired" is
the range of per-repetition ratios (rep r of a condition over rep r of
baseline, which ran next to it), a direct view of the noise.
"""
import json
import statistics
import sys
from collections import defaultdict

CONDS = ["baseline", "floor", "loaded", "bystander", "tagged", "lifeline", "nofd"]
# Table 4 (tags across machines): TCP ping-pongs, whose bar is mantle's cost
# above the hooks' floor <= 2%.
TCP = {"tcp_lo", "tcp_veth"}
IPC = {"unix_pingpong", "pipe_pingpong", "signal_rt", "pipe_read", "eventfd_pingpong",
       "mq_pingpong", "shm_map"}
SELFREAD_MAX_NS = 100.0
# System calls per operation of each micro case, as micro.c makes them (both
# processes of a ping-pong): the divisor of "ns above the floor per system
# call". fork_exit has none (fork, exit, wait and the exec-less child's own
# calls vary); selfread makes none.
SYSCALLS = {"unix_pingpong": 4, "pipe_pingpong": 4, "getpid": 1, "signal_rt": 4,
            "devnull_write": 1, "pipe_read": 2, "eventfd_pingpong": 4, "mq_pingpong": 4,
            "shm_map": 2, "tcp_lo": 4, "tcp_veth": 4}


def bars_of(kind, case, cond):
    """[(text, check(value, ratio, ratio_to_floor) -> bool)]: the issue's bars
    for this row (empty: none). 'F' in a bar's text is the floor's median."""
    if case == "selfread":
        return [("<=100ns", lambda v, r, f: v <= SELFREAD_MAX_NS)]
    if cond == "loaded":
        return [("<=1.02", lambda v, r, f: r <= 1.02)]
    if cond == "bystander" and kind == "micro":
        return [("<=F*1.03", lambda v, r, f: f is not None and f <= 1.03)]
    if cond == "nofd" and kind == "program":
        return [("<=1.03", lambda v, r, f: r <= 1.03)]
    if cond in ("tagged", "lifeline"):
        if kind == "program":
            return [("<=1.03", lambda v, r, f: r <= 1.03)]
        if case in TCP:
            return [("<=F*1.02", lambda v, r, f: f is not None and f <= 1.02)]
        if case in IPC:
            return [("<=1.15", lambda v, r, f: r <= 1.15),
                    ("<=F*1.06", lambda v, r, f: f is not None and f <= 1.06)]
    return []


def mwu_p(xs, ys):
    """Two-sided exact Mann-Whitney U p-value (ties count one half)."""
    n, m = len(xs), len(ys)
    if not n or not m:
        return None
    u = sum((x > y) + 0.5 * (x == y) for x in xs for y in ys)
    # Distribution of U for n, m without ties: count[u] by recursion on (n, m).
    from functools import lru_cache

    @lru_cache(maxsize=None)
    def cnt(a, b, k):
        if k < 0:
            return 0
        if a == 0 or b == 0:
            return 1 if k == 0 else 0
        return cnt(a - 1, b, k - b) + cnt(a, b - 1, k)

    total = sum(cnt(n, m, k) for k in range(n * m + 1))
    lo = min(u, n * m - u)
    tail = sum(cnt(n, m, k) for k in range(int(lo) + 1))  # P(U <= lo); ties: conservative
    return min(1.0, 2.0 * tail / total)


def fmt_t(ns, kind):
    if kind == "program":
        return "%.3f s" % (ns / 1e9)
    if ns >= 1e6:
        return "%.2f ms" % (ns / 1e6)
    if ns >= 1e4:
        return "%.2f us" % (ns / 1e3)
    return "%.1f ns" % ns


def load_raw(raw_p, prof_p):
    vals = defaultdict(dict)  # (kind, case, cond) -> {rep: value}
    hops = defaultdict(list)
    notes = defaultdict(set)
    order = []
    for line in open(raw_p):
        kind, case, cond, rep, v, h, note = line.rstrip("\n").split("\t")
        key = (kind, case, cond)
        if (kind, case) not in order:
            order.append((kind, case))
        vals[key][int(rep)] = float(v)
        hops[key].append(float(h))
        if note != "-":
            notes[key].add(note)
    prof = []
    for line in open(prof_p):
        kind, case, cond, prog, cpo, npc = line.rstrip("\n").split("\t")
        prof.append(dict(kind=kind, case=case, cond=cond, program=prog,
                         calls_per_op=float(cpo), ns_per_call=float(npc)))
    return vals, hops, notes, order, prof


def load_json(path):
    """The same inputs back from a report's .json (to re-render it)."""
    d = json.load(open(path))
    vals, hops, notes, order = defaultdict(dict), defaultdict(list), defaultdict(set), []
    for r in d["rows"]:
        key = (r["kind"], r["case"], r["cond"])
        if (r["kind"], r["case"]) not in order:
            order.append((r["kind"], r["case"]))
        reps = r.get("reps") or list(range(1, len(r["values"]) + 1))
        vals[key] = dict(zip(reps, r["values"]))
        hops[key] = r.get("hops") or [r["hops_per_op"]]
        if r.get("note"):
            notes[key] = set(r["note"].split(","))
    return d["meta"], vals, hops, notes, order, d.get("profile", [])


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--from-json":
        meta, vals, hops, notes, order, prof = load_json(sys.argv[2])
        out = sys.argv[3]
    elif len(sys.argv) == 5:
        raw_p, prof_p, meta_s, out = sys.argv[1:5]
        meta = json.loads(meta_s)
        vals, hops, notes, order, prof = load_raw(raw_p, prof_p)
    else:
        sys.stderr.write(__doc__)
        return 2

    rows = []
    for kind, case in order:
        base = vals.get((kind, case, "baseline"), {})
        bmed = statistics.median(base.values()) if base else None
        flo = vals.get((kind, case, "floor"), {})
        fmed = statistics.median(flo.values()) if flo else None
        for cond in CONDS:
            d = vals.get((kind, case, cond))
            if not d:
                continue
            xs = list(d.values())
            med = statistics.median(xs)
            mad = statistics.median([abs(x - med) for x in xs])
            ratio = med / bmed if bmed else None
            rfloor = med / fmed if fmed and cond in ("bystander", "tagged", "lifeline", "nofd") else None
            paired = [d[r] / base[r] for r in d if r in base and base[r] > 0]
            pval = mwu_p(xs, list(base.values())) if cond != "baseline" else None
            pfloor = mwu_p(xs, list(flo.values())) if rfloor is not None else None
            # ns per system call above the floor, from the per-op difference
            nsc = SYSCALLS.get(case) if kind == "micro" else None
            above = (med - fmed) / nsc if rfloor is not None and nsc else None
            bs = bars_of(kind, case, cond)
            if cond in ("baseline", "floor") and case != "selfread":
                bs = []
            missed = [t for t, ok in bs if not ok(med, ratio, rfloor)]
            verdict = "info" if not bs else ("MISS" if missed else "PASS")
            rows.append(dict(kind=kind, case=case, cond=cond, n=len(xs), values=xs, reps=list(d.keys()),
                             hops=hops[(kind, case, cond)],
                             median=med, mad=mad, min=min(xs), max=max(xs), ratio=ratio,
                             paired_min=min(paired) if paired else None,
                             paired_max=max(paired) if paired else None,
                             bar=",".join(t for t, _ in bs) or None, verdict=verdict, p_mwu=pval,
                             missed=missed, ratio_floor=rfloor, p_floor=pfloor,
                             ns_above_floor_per_syscall=above, syscalls_per_op=nsc,
                             hops_per_op=statistics.median(hops[(kind, case, cond)]),
                             note=",".join(sorted(notes[(kind, case, cond)])) or None))

    lines = []
    p = lines.append
    p("mantle tags overhead (bench/tags/run.sh), %s, git %s, kernel %s, %s CPUs"
      % (meta.get("date"), meta.get("git"), meta.get("kernel"), meta.get("cpus")))
    p("measured: %s/mantle and libmantle.so (mantle sha256 %s...); command: %s"
      % (meta.get("mantle_dir"), meta.get("mantle_sha256"), meta.get("command")))
    p("pinning: %s; /dev/cpu_dma_latency: %s" % (meta.get("pinning"), meta.get("cpu_dma_latency")))
    p("repetitions: micro %s, programs %s; order: %s" % (meta.get("reps_micro"), meta.get("reps_programs"), meta.get("order")))
    p("micro iterations per run: %s (+20%% untimed warm-up; value = median of 5 segments)" % meta.get("iters"))
    p("program inputs: %s" % meta.get("inputs"))
    p("load average at start %s, at end %s; CPUs busy with others' work before the start: %s;"
      % (meta.get("loadavg_start"), meta.get("loadavg_end"), meta.get("busy_before_start")))
    p("wall time micro %ss, programs %ss, the gate's second look %ss"
      % (meta.get("seconds_micro"), meta.get("seconds_programs"), meta.get("seconds_second_look", 0)))
    if meta.get("gate"):
        p("host-speed gate (--gate): %s" % meta["gate"])
    p("statistics: median, MAD and min..max over repetitions; ratio = median / median(baseline);")
    p("paired = range of per-repetition ratios to the baseline run of the same repetition;")
    p("p = two-sided Mann-Whitney U test against baseline (exact; < 0.05: the difference is")
    p("unlikely to be noise). Verdicts use the ratio of medians only, as the issue states the bars.")
    p("xF = median / median(floor): the cost above the hooks' own (floor: empty programs on the")
    p("same hooks); pF = Mann-Whitney p against floor; ns/sc = (median - median(floor)) / system")
    p("calls per op (%s)." % ", ".join("%s %d" % kv for kv in SYSCALLS.items()))
    p("")
    hdr = "%-14s %-9s %11s %9s %23s %6s %11s %6s %6s %6s %7s %-15s %-7s %7s" % (
        "case", "condition", "median", "MAD", "min..max", "ratio", "paired", "p", "xF", "pF", "ns/sc",
        "bar", "verdict", "hops/op")
    for kind, title in (("micro", "Micro cases (per operation; Table 3 shape)"),
                        ("program", "Whole programs (wall time of the pipeline; Table 2 shape)")):
        rs = [r for r in rows if r["kind"] == kind]
        if not rs:
            continue
        p(title)
        p(hdr)
        p("-" * len(hdr))
        last = None
        for r in rs:
            if last and last != r["case"]:
                p("")
            last = r["case"]
            p("%-14s %-9s %11s %9s %23s %6s %11s %6s %6s %6s %7s %-15s %-7s %7s" % (
                r["case"], r["cond"], fmt_t(r["median"], kind), fmt_t(r["mad"], kind),
                fmt_t(r["min"], kind) + ".." + fmt_t(r["max"], kind),
                "%.3f" % r["ratio"] if r["ratio"] else "-",
                "%.2f..%.2f" % (r["paired_min"], r["paired_max"]) if r["paired_min"] else "-",
                "%.3f" % r["p_mwu"] if r["p_mwu"] is not None else "-",
                "%.3f" % r["ratio_floor"] if r.get("ratio_floor") else "-",
                "%.3f" % r["p_floor"] if r.get("p_floor") is not None else "-",
                "%.0f" % r["ns_above_floor_per_syscall"] if r.get("ns_above_floor_per_syscall") is not None else "-",
                r["bar"] or "-", r["verdict"],
                "%.2f" % r["hops_per_op"] if r["cond"] in ("tagged", "lifeline", "nofd") else "-"))
        p("")

    miss = [r for r in rows if r["verdict"] == "MISS"]
    npass = sum(r["verdict"] == "PASS" for r in rows)
    def missed(r):
        if r["case"] == "selfread":
            return "%.1f ns" % r["median"]
        return " ".join("%s (%.3f)" % (t, r["ratio_floor"] if "F" in t and r.get("ratio_floor") else r["ratio"])
                        for t in r.get("missed", []))
    p("bars: %d PASS, %d MISS%s" % (npass, len(miss), (": " + ", ".join(
        "%s/%s %s" % (r["case"], r["cond"], missed(r)) for r in miss)) if miss else ""))

    if prof:
        p("")
        p("Where the time goes: one extra run per case with kernel.bpf_stats_enabled=1")
        p("(calls/op and ns/call per mt_* program from bpftool run_cnt/run_time_ns; 'bpf ns/op' is")
        p("their sum, also as a share of the baseline median: time spent in the programs alone, a")
        p("lower bound of the overhead that noise does not blur; 'measured' is median(condition) -")
        p("median(baseline) from the timed runs above.")
        p("What bpf_stats does not see: entering the programs (tracepoint and syscall slow paths).)")
        med = {(r["kind"], r["case"], r["cond"]): r["median"] for r in rows}
        groups = defaultdict(list)
        for x in prof:
            groups[(x["kind"], x["case"], x["cond"])].append(x)
        p("(micro: per operation; program: per run of the whole pipeline, 'ns/op' = ns per run).")
        p("A program that returns at once shows ~70-90 ns/call here: the floor of this measurement")
        p("(the fl_* rows, the floor condition's empty programs, show it for this run).")
        p("%-8s %-14s %-9s %-16s %10s %9s %12s" % ("kind", "case", "condition", "program", "calls/op", "ns/call", "ns/op"))
        ftot = {(k, c): sum(x["calls_per_op"] * x["ns_per_call"] for x in xs)
                for (k, c, cd), xs in groups.items() if cd == "floor"}
        for (kind, case, cond), xs in groups.items():
            tot = 0.0
            for x in sorted(xs, key=lambda x: -x["calls_per_op"] * x["ns_per_call"]):
                nso = x["calls_per_op"] * x["ns_per_call"]
                tot += nso
                p("%-8s %-14s %-9s %-16s %10.3f %9.1f %12.1f" % (kind, case, cond, x["program"], x["calls_per_op"], x["ns_per_call"], nso))
            m, b = med.get((kind, case, cond)), med.get((kind, case, "baseline"))
            meas = "%.1f" % (m - b) if m is not None and b is not None else "-"
            share = " (%.1f%% of baseline)" % (100.0 * tot / b) if b else ""
            f = med.get((kind, case, "floor"))
            measf = "; above floor %.1f ns/op measured" % (m - f) if m is not None and f is not None and cond != "floor" else ""
            bpff = " (%.1f above the empty programs')" % (tot - ftot[(kind, case)]) if (kind, case) in ftot and cond != "floor" else ""
            p("%-8s %-14s %-9s %-16s %10s %9s %12.1f%s%s; measured %s ns/op%s"
              % (kind, case, cond, "= bpf ns/op", "", "", tot, bpff, share, meas, measf))
        p("")

    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    with open(out + ".txt", "w") as f:
        f.write(text)
    with open(out + ".json", "w") as f:
        json.dump(dict(meta=meta, rows=rows, profile=prof), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
