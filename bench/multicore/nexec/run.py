#!/usr/bin/env python3
"""bench/multicore/nexec: the executive on N CPUs (Kågström, Paper II,
section 3.4 and Table 3.1's shape), giant lock against fine locks, side by
side in one run.

Workload: two guests (bench/multicore/nexec/nexec.c), each looping CALLS
times over K of user work (a fixed number of iterations, calibrated here:
K is nominal) then one getppid that the executive interposes (`count`
agent watching getppid: a Continue, the cheapest interposed call). K is
swept from 1 us to 10 ms; CALLS = clamp(W / K, 10, 20000) so that every
run does about W of user work per guest. The time of a run is the
makespan: from the first guest's start to the last guest's end, read from
the guests' own CLOCK_MONOTONIC stamps (mantle's start-up is not in it).

Configurations (pinning: A and B are the first two allowed CPUs):
  native-1  both guests under `taskset -c A`, no executive
  native-2  one guest on A, one on B, no executive
  giant-1   `mantle run --system`, [executive] cpus = [A], locking giant
            (one executive thread pinned on A, both guests on A)
  giant-2   cpus = [A, B]: a thread on each CPU, one guest on each
  fine-1, fine-2  the same with locking = "fine"
  fastgiant-1/2, fastfine-1/2  the fast path's server (`mantle run
            --path fast --exec-cpus A[,B] --exec-locking D --perform
            getppid -- sh -c 'taskset -c A nexec & taskset -c X nexec;
            wait'`, X = A or B): a serving thread pinned on each CPU, the
            guests pinned beside them, every getppid answered by the
            executive through the shared slots (--count would be served
            in the stub, with no hand-off); `--spin off`: each serving
            thread shares its CPU with its guest, where a spinning side
            only delays the other (fast::FastOptions::default)
The executive's threads stay SCHED_OTHER (count keeps no time);
/dev/cpu_dma_latency is not held.

Statistics: R repetitions (default 5; --quick 2); in each repetition every
configuration of a K runs once, in an order rotated per repetition;
speedups (X-1 / X-2) are paired within a repetition; we print the median
and min..max. Per K and design:
  speedup      the 2-CPU speedup against 1 CPU (native's is the ideal)
  guest share  native-1 / design-1: the share of the 1-CPU run in guest
               code (the rest is the executive and its round trips)
  contention   on 2 CPUs, lock wait / (wait + hold) summed over the
               outermost locks (giant; the run queues for fine): the share
               of executive time spent waiting for a lock
Bar (issue 31): fine's 2-CPU speedup >= 1.8 at the longest K, and above
giant's at every K; printed with MET or MISS.

The model (crates/lockmodel, examples/predict.rs): from the measured hold
times (the lock statistics' log2 histograms, a sample per bucket middle,
weighted by count), the guests' user time per call (native-1), and the
time per call outside the lock (design-1's time per call minus both);
the handoff is fitted once, on giant's 2-CPU speedup at the smallest K,
and held fixed; it predicts 1, 2, 4, 8, 16 and 64 CPUs for both designs
at every K (one guest per CPU).

Usage: python3 bench/multicore/nexec/run.py [--reps R] [--quick]
       [--mantle PATH]
Writes bench/multicore/nexec/data/<stamp>.{txt,json} and, with matplotlib,
bench/multicore/nexec/RESULTS.png.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HERE = os.path.join(ROOT, "bench", "multicore", "nexec")
KS_US = [1, 10, 100, 1000, 10000]
DESIGNS = ["native", "giant", "fine", "fastgiant", "fastfine"]
EXEC_DESIGNS = ["giant", "fine", "fastgiant", "fastfine"]


def allowed_cpus():
    for line in open("/proc/self/status"):
        if line.startswith("Cpus_allowed_list:"):
            out = []
            for part in line.split()[1].split(","):
                a, _, b = part.partition("-")
                out.extend(range(int(a), int(b or a) + 1))
            return out
    return [0]


def build_guest(tmp):
    exe = os.path.join(tmp, "nexec")
    subprocess.run(["cc", "-O2", "-Wall", "-o", exe, os.path.join(HERE, "nexec.c")], check=True)
    return exe


def calibrate(exe, cpu):
    out = subprocess.run(["taskset", "-c", str(cpu), exe, "--calibrate", "200000"],
                         check=True, capture_output=True, text=True).stdout
    return float(out)


def makespan(stdout):
    stamps = [tuple(map(int, l.split())) for l in stdout.splitlines() if l.strip()]
    if len(stamps) != 2:
        raise RuntimeError(f"expected two guests' stamps, got {stdout!r}")
    return (max(e for _, e in stamps) - min(s for s, _ in stamps)) / 1e9


def run_native(exe, iters, calls, cpus):
    procs = [subprocess.Popen(["taskset", "-c", str(c), exe, str(iters), str(calls)],
                              stdout=subprocess.PIPE, text=True) for c in cpus]
    out = ""
    for p in procs:
        o, _ = p.communicate()
        if p.returncode != 0:
            raise RuntimeError(f"native guest exited {p.returncode}")
        out += o
    return makespan(out), None


def run_exec(mantle, exe, iters, calls, cpus, locking, tmp):
    sysfile = os.path.join(tmp, "sys.toml")
    guest = (f'[[guest]]\nname = "{{}}"\ncommand = ["{exe}", "{iters}", "{calls}"]\n'
             'count = true\nwatch = ["getppid"]\n')
    with open(sysfile, "w") as f:
        f.write(guest.format("g1") + guest.format("g2"))
        f.write(f'[executive]\ncpus = {list(cpus)}\nlocking = "{locking}"\n')
    r = subprocess.run([mantle, "run", "--json", "--system", sysfile],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"mantle exited {r.returncode}: {r.stderr[-2000:]}")
    rec = None
    for line in r.stderr.splitlines():
        if '"mantle.run.exit/1"' in line:
            rec = json.loads(line)
    if rec is None or "locks" not in rec:
        raise RuntimeError("no exit record with locks: " + r.stderr[-2000:])
    return makespan(r.stdout), rec["locks"]


def run_fast(mantle, exe, iters, calls, cpus, locking):
    pins = [cpus[0], cpus[0]] if len(cpus) == 1 else list(cpus)
    script = " & ".join(f"taskset -c {c} {exe} {iters} {calls}" for c in pins) + "; wait"
    args = [mantle, "run", "--path", "fast", "--exec-cpus", ",".join(map(str, cpus)),
            "--exec-locking", locking, "--spin", "off",
            "--perform", "getppid", "--json", "--", "sh", "-c", script]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"mantle exited {r.returncode}: {r.stderr[-2000:]}")
    rec = None
    for line in r.stderr.splitlines():
        if '"mantle.run.exit/1"' in line:
            rec = json.loads(line)
    if rec is None or "locks" not in rec:
        raise RuntimeError("no exit record with locks: " + r.stderr[-2000:])
    return makespan(r.stdout), rec["locks"]


def outer(locks, design):
    """The outermost locks: what a thread holds while in the executive."""
    design = design.removeprefix("fast")
    if design == "giant":
        return [l for l in locks if l["name"] == "giant"]
    return [l for l in locks if l["name"].startswith("runqueue")]


def contention(locks, design):
    o = outer(locks, design)
    wait = sum(l["wait_ns"] for l in locks)
    hold = sum(l["hold_ns"] for l in o)
    return wait / (wait + hold) if wait + hold else 0.0


def samples(locks, design, n=1000):
    """Hold times (ns) drawn from the outer locks' log2 histograms: a
    bucket's middle, as many times as its share of n."""
    hist = [0] * 32
    for l in outer(locks, design):
        for i, c in enumerate(l["hold_hist"]):
            hist[i] += c
    total = sum(hist)
    out = []
    for i, c in enumerate(hist):
        if c:
            out.extend([int(1.5 * (1 << i))] * max(1, round(n * c / total)))
    return out or [0]


def med(xs):
    return statistics.median(xs)


def spread(xs):
    return f"{med(xs):.2f} ({min(xs):.2f}..{max(xs):.2f})"


def predict(tool, workload, fit=None, cpus=(1, 2, 4, 8, 16, 64)):
    args = [tool] + (["--fit", f"{fit:.4f}"] if fit else []) + [str(c) for c in cpus]
    r = subprocess.run(args, input=json.dumps(workload), capture_output=True, text=True, check=True)
    lines = [json.loads(l) for l in r.stdout.splitlines()]
    head = lines.pop(0) if fit else None
    return head, lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--mantle", default=os.path.join(ROOT, "target", "release", "mantle"))
    ap.add_argument("--predict", default=os.path.join(ROOT, "target", "release", "examples", "predict"))
    a = ap.parse_args()
    reps = a.reps or (2 if a.quick else 5)
    work_s = 0.05 if a.quick else 0.1
    cpus = allowed_cpus()
    if len(cpus) < 2:
        sys.exit("nexec: needs two allowed CPUs")
    A, B = cpus[0], cpus[1]
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="mantle-nexec-") as tmp:
        exe = build_guest(tmp)
        ns_per_iter = calibrate(exe, A)
        res = {}
        for k in KS_US:
            iters = max(1, round(k * 1000 / ns_per_iter))
            calls = int(min(20000, max(10, work_s * 1e6 / k)))
            configs = [(d, n) for d in DESIGNS for n in (1, 2)]
            runs = {f"{d}-{n}": [] for d, n in configs}
            locks = {f"{d}-{n}": [] for d, n in configs}
            for r in range(reps):
                order = configs[r % len(configs):] + configs[:r % len(configs)]
                for d, n in order:
                    cs = [A] if n == 1 else [A, B]
                    if d == "native":
                        t, l = run_native(exe, iters, calls, [A, A] if n == 1 else [A, B])
                    elif d.startswith("fast"):
                        t, l = run_fast(a.mantle, exe, iters, calls, cs, d.removeprefix("fast"))
                    else:
                        t, l = run_exec(a.mantle, exe, iters, calls, cs, d, tmp)
                    runs[f"{d}-{n}"].append(t)
                    locks[f"{d}-{n}"].append(l)
            res[k] = {"iters": iters, "calls": calls, "runs": runs, "locks": locks}
            print(f"K={k}us done ({time.time() - started:.0f}s)", file=sys.stderr)
    # figures
    lines = []
    say = lines.append
    say(f"nexec {stamp}: 2 guests, K swept {KS_US[0]} us..{KS_US[-1]} us, R={reps}, "
        f"CPUs A={A} B={B}, {ns_per_iter:.3f} ns per iteration (calibrated on A), "
        f"load average {os.getloadavg()[0]:.1f} at the end, {time.time() - started:.0f}s")
    say("")
    say("| K | calls/guest | native speedup | giant speedup | fine speedup | giant guest share | fine guest share | giant contention (2 CPUs) | fine contention (2 CPUs) |")
    say("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    summary = {}
    for k in KS_US:
        r = res[k]["runs"]
        sp = {d: [x / y for x, y in zip(r[f"{d}-1"], r[f"{d}-2"])] for d in DESIGNS}
        share = {d: [x / y for x, y in zip(r["native-1"], r[f"{d}-1"])] for d in EXEC_DESIGNS}
        cont = {d: [contention(l, d) for l in res[k]["locks"][f"{d}-2"]] for d in EXEC_DESIGNS}
        summary[k] = {"speedup": {d: med(v) for d, v in sp.items()},
                      "speedup_min": {d: min(v) for d, v in sp.items()},
                      "speedup_max": {d: max(v) for d, v in sp.items()},
                      "guest_share": {d: med(v) for d, v in share.items()},
                      "contention": {d: med(v) for d, v in cont.items()},
                      "makespan_s": {c: med(v) for c, v in r.items()}}
        say(f"| {k} us | {res[k]['calls']} | {spread(sp['native'])} | {spread(sp['giant'])} | "
            f"{spread(sp['fine'])} | {med(share['giant']):.2f} | {med(share['fine']):.2f} | "
            f"{100 * med(cont['giant']):.1f} % | {100 * med(cont['fine']):.1f} % |")
    kmax = KS_US[-1]
    bar1 = summary[kmax]["speedup"]["fine"] >= 1.8
    bar2 = all(summary[k]["speedup"]["fine"] > summary[k]["speedup"]["giant"] for k in KS_US)
    say("")
    say(f"bar: fine's 2-CPU speedup at K={kmax} us >= 1.8: {summary[kmax]['speedup']['fine']:.2f} "
        f"{'MET' if bar1 else 'MISS'}")
    say("bar: fine's speedup above giant's at every K: "
        + ", ".join(f"{k}us {summary[k]['speedup']['fine']:.2f}/{summary[k]['speedup']['giant']:.2f}" for k in KS_US)
        + f" {'MET' if bar2 else 'MISS'}")
    say("")
    say("The fast path's server (--perform getppid through the shared slots; guests pinned beside "
        "the serving threads, each sharing its CPU with its guest: --spin off):")
    say("")
    say("| K | native speedup | fast giant speedup | fast fine speedup | fast giant guest share | fast fine guest share | fast giant contention (2 CPUs) | fast fine contention (2 CPUs) |")
    say("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for k in KS_US:
        r = res[k]["runs"]
        sp = {d: [x / y for x, y in zip(r[f"{d}-1"], r[f"{d}-2"])] for d in DESIGNS}
        say(f"| {k} us | {spread(sp['native'])} | {spread(sp['fastgiant'])} | {spread(sp['fastfine'])} | "
            f"{summary[k]['guest_share']['fastgiant']:.2f} | {summary[k]['guest_share']['fastfine']:.2f} | "
            f"{100 * summary[k]['contention']['fastgiant']:.1f} % | {100 * summary[k]['contention']['fastfine']:.1f} % |")
    fbar = all(summary[k]["speedup"]["fastfine"] > summary[k]["speedup"]["fastgiant"] for k in KS_US)
    say("")
    say("fast path: fine's speedup above giant's at every K: "
        + ", ".join(f"{k}us {summary[k]['speedup']['fastfine']:.2f}/{summary[k]['speedup']['fastgiant']:.2f}" for k in KS_US)
        + f" {'MET' if fbar else 'MISS'}; fine at K={kmax} us >= 1.8: "
        + f"{summary[kmax]['speedup']['fastfine']:.2f} {'MET' if summary[kmax]['speedup']['fastfine'] >= 1.8 else 'MISS'}")
    # the model
    model = {}
    if os.path.exists(a.predict):
        kfit = KS_US[0]
        handoff = None
        fit_note = ""
        for k in KS_US:
            r = res[k]
            calls = r["calls"]
            user = med(r["runs"]["native-1"]) * 1e9 / (2 * calls)
            model[k] = {}
            for d in ("giant", "fine"):
                hold = samples(r["locks"][f"{d}-2"][-1], d)
                mean_hold = sum(hold) / len(hold)
                per_call = med(r["runs"][f"{d}-1"]) * 1e9 / (2 * calls)
                transport = max(0.0, per_call - user - mean_hold)
                seg = {"lock": None, "time": {"kind": "const", "ns": int(transport)}}
                held = {"lock": "giant" if d == "giant" else "cpu_local",
                        "time": {"kind": "empirical", "samples_ns": hold}}
                w = {"cpus": 2, "guests_per_cpu": 1, "calls_per_guest": min(calls, 400),
                     "user": {"kind": "const", "ns": int(user)},
                     "call": {"segments": [seg, held]},
                     "handoff_ns": handoff or 0, "seed": 31}
                if d == "giant" and k == kfit:
                    head, _ = predict(a.predict, w, fit=summary[k]["speedup"]["giant"], cpus=(2,))
                    handoff = head.get("handoff_ns")
                    fit_note = head.get("error", "")
                    w["handoff_ns"] = handoff or 0
                _, pred = predict(a.predict, w)
                model[k][d] = {"user_ns": user, "transport_ns": transport, "mean_hold_ns": mean_hold,
                               "handoff_ns": w["handoff_ns"], "pred": pred}
        say("")
        say(f"model: handoff fitted on giant's 2-CPU speedup at K={kfit} us: "
            + (f"{handoff} ns" if handoff is not None else f"no fit ({fit_note}); 0 ns used"))
        say("")
        say("| K | design | user/call | outside lock/call | mean hold | model 2 CPUs (measured) | 4 | 8 | 16 | 64 |")
        say("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for k in KS_US:
            for d in ("giant", "fine"):
                m = model[k][d]
                p = {x["cpus"]: x["speedup"] for x in m["pred"]}
                say(f"| {k} us | {d} | {m['user_ns'] / 1e3:.1f} us | {m['transport_ns'] / 1e3:.2f} us | "
                    f"{m['mean_hold_ns'] / 1e3:.2f} us | {p[2]:.2f} ({summary[k]['speedup'][d]:.2f}) | "
                    f"{p[4]:.2f} | {p[8]:.2f} | {p[16]:.2f} | {p[64]:.2f} |")
    else:
        say("")
        say(f"model: {a.predict} not built (cargo build --release -p mantle-lockmodel --example predict)")
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.join(HERE, "data"), exist_ok=True)
    cmd = "python3 bench/multicore/nexec/run.py " + " ".join(sys.argv[1:])
    with open(os.path.join(HERE, "data", stamp + ".txt"), "w") as f:
        f.write(f"$ {cmd}\n" + text)
    with open(os.path.join(HERE, "data", stamp + ".json"), "w") as f:
        json.dump({"stamp": stamp, "command": cmd, "cpus": [A, B], "ns_per_iter": ns_per_iter,
                   "reps": reps, "ks_us": KS_US, "results": {str(k): v for k, v in res.items()},
                   "summary": {str(k): v for k, v in summary.items()},
                   "model": {str(k): v for k, v in model.items()}}, f)
    plot(summary, model, stamp, cmd)


def plot(summary, model, stamp, cmd):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot", file=sys.stderr)
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for d, m in (("native", "k:"), ("giant", "o-"), ("fine", "s-"), ("fastgiant", "^--"),
                 ("fastfine", "v--")):
        y = [summary[k]["speedup"][d] for k in KS_US]
        lo = [y[i] - summary[k]["speedup_min"][d] for i, k in enumerate(KS_US)]
        hi = [summary[k]["speedup_max"][d] - y[i] for i, k in enumerate(KS_US)]
        ax1.errorbar(KS_US, y, yerr=[lo, hi], fmt=m, capsize=3, label=d)
    ax1.set_xscale("log")
    ax1.set_xlabel("K: user work between interposed calls (us)")
    ax1.set_ylabel("speedup, 2 CPUs against 1 (median, min..max)")
    ax1.set_title("measured: 2 guests")
    ax1.axhline(1.8, color="grey", lw=0.5)
    ax1.legend()
    if model:
        for k, c in ((KS_US[0], "tab:red"), (KS_US[2], "tab:blue")):
            for d, ls in (("giant", "-"), ("fine", "--")):
                p = model[k][d]["pred"]
                ax2.plot([x["cpus"] for x in p], [x["speedup"] for x in p], ls, color=c,
                         label=f"{d}, K={k} us")
                ax2.plot([2], [summary[k]["speedup"][d]], "o" if d == "giant" else "s", color=c)
        ax2.set_xscale("log", base=2)
        ax2.set_yscale("log", base=2)
        ax2.set_xlabel("CPUs (one guest each)")
        ax2.set_ylabel("speedup (model; markers: measured)")
        ax2.set_title("model (crates/lockmodel), handoff fitted at 2 CPUs")
        ax2.legend(fontsize=8)
    fig.suptitle(f"bench/multicore/nexec {stamp}: {cmd}", fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "RESULTS.png"), dpi=90)


if __name__ == "__main__":
    main()
