#!/usr/bin/env python3
"""bench/multicore: Kågström's Paper III (the application kernel) on this
machine, offloaded (`mantle run --offload`) against native, side by side
in one run.

Rows (the paper's tables, their shape):
  Table 4.2  getpid latency: ns per call, offloaded / native. getpid.c
             calls glibc's syscall(2), whose site the library rewrites
             after its first trap; "off-1+1 trap" is the same with
             MANTLE_OFFLOAD_REWRITE=0 (every call a SIGSYS trap).
  floor      the hand-off under each offloaded call, measured in the same
             repetitions (handoff.c: two threads of one process, client
             on the application CPU, server on the bootstrap CPU): a spin
             round trip, the same with a getpid made by the server (what
             an offloaded getpid cannot go below with any user-space
             hand-off), and a futex round trip (both sides sleeping).
             standard tools on real data (single process): find /usr,
             tar cf of /usr/include, gzip of that tar, grep -r in
             /usr/include: wall time, offloaded / native.
  Tables 4.3/4.4  a multi-threaded real program (xz -T2, zstd -T2) and a
             multiprogramming mix (gzip, grep -r, find, xz -T1 at once,
             timed until the last ends): speedup against native on one
             CPU, for native on both CPUs and for offloaded on one
             bootstrap + one application CPU, and with both CPUs as
             application CPUs.
  idle       CPU used by an idle offloaded program (blocked in read for
             3 s), whole process (rusage of the child), against native.
  Table 4.5  is made by loc.py (`bash bench/multicore/loc.sh`): lizard
             for C and Rust alike, the offload part beside the giant and
             fine executives.

Configurations (pinning):
  native-1   taskset -c APP (the paper's "uniprocessor Linux")
  native-2   unpinned, both CPUs ("SMP Linux")
  off-1+1    offloaded: bootstrap CPU BOOT, application CPU(s) all others
  off-both   offloaded: bootstrap CPU BOOT, application CPUs = every CPU
The offloaded runs preload the library exactly as `mantle run --offload`
does once it has checked its arguments (LD_PRELOAD and MANTLE_OFFLOAD),
without the CLI's own start-up. /dev/cpu_dma_latency is not held.

Statistics: R repetitions (default 5); in each repetition every
configuration of a row runs once, in rotating order; ratios are paired
within a repetition; we print the median and the min..max of the paired
ratios. Bars (issue 31): offloaded getpid <= 5x native; the syscall-heavy
tools <= 1.3x; idle < 1% CPU. Each is printed with MET or MISS.

Usage: python3 bench/multicore/run.py [--reps R] [--quick] [--boot N]
Writes bench/results/multicore/<stamp>.{txt,json} and, with matplotlib,
bench/multicore/RESULTS.png.
"""
import argparse
import glob
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "bench", "multicore")


def find_lib():
    lib = os.environ.get("MANTLE_OFFLOAD_LIB")
    if lib:
        return lib
    found = glob.glob(os.path.join(ROOT, "target", "*", "build", "mantle-offload-*", "out",
                                   "libmantle-offload.so"))
    if not found:
        sys.exit("no libmantle-offload.so: cargo build -p mantle-offload (or set MANTLE_OFFLOAD_LIB)")
    return max(found, key=os.path.getmtime)


def cpus():
    with open("/sys/devices/system/cpu/online") as f:
        text = f.read().strip()
    out = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    allowed = sorted(os.sched_getaffinity(0))
    return [c for c in out if c in allowed]


def timed(argv, env=None, stdout=subprocess.DEVNULL):
    """Wall seconds, CPU seconds (user+sys of the child and its children)."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, env=env, stdout=stdout, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode not in (0, 1):  # grep: 1 = no match
        raise RuntimeError(f"{argv} exited {p.returncode}")
    return wall, ru.ru_utime + ru.ru_stime


def med(xs):
    return statistics.median(xs)


def spread(xs):
    return f"{min(xs):.2f}..{max(xs):.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 repetitions, smaller data")
    ap.add_argument("--boot", type=int, default=None, help="bootstrap CPU (default: the lowest)")
    a = ap.parse_args()
    reps = 2 if a.quick else a.reps
    cs = cpus()
    if len(cs) < 2:
        sys.exit(f"needs two CPUs (has {cs})")
    boot = cs[0] if a.boot is None else a.boot
    apps = [c for c in cs if c != boot]
    lib = find_lib()
    work = tempfile.mkdtemp(prefix="mantle-bench-multicore-")
    try:
        run(a, reps, cs, boot, apps, lib, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(a, reps, cs, boot, apps, lib, work):
    binp = os.path.join(work, "bin")
    os.makedirs(binp)
    for prog in ("getpid", "idle", "handoff"):
        subprocess.run(["cc", "-O2", "-pthread", "-o", os.path.join(binp, prog), os.path.join(HERE, prog + ".c")],
                       check=True)
    getpid = os.path.join(binp, "getpid")
    handoff = os.path.join(binp, "handoff")
    idle = os.path.join(binp, "idle")
    data = os.path.join(work, "include.tar")
    subprocess.run(["tar", "cf", data, "-C", "/usr", "include"], check=True)
    small = os.path.join(work, "small.tar")
    mb = 2 if a.quick else 8
    with open(data, "rb") as f, open(small, "wb") as g:
        g.write(f.read(mb << 20))

    base = dict(os.environ)
    base.pop("LD_PRELOAD", None)
    base.pop("MANTLE_OFFLOAD", None)

    def off_env(app_cpus):
        e = dict(base)
        e["LD_PRELOAD"] = lib
        e["MANTLE_OFFLOAD"] = f"{boot}:{','.join(map(str, app_cpus))}"
        return e

    app1 = ",".join(map(str, apps))
    configs = {
        "native-1": (["taskset", "-c", app1], base),
        "native-2": ([], base),
        "off-1+1": ([], off_env(apps)),
        "off-both": ([], off_env(cs)),
    }

    def sh(cmd):
        return ["sh", "-c", cmd]

    n_getpid = 20000 if a.quick else 100000
    single = {
        ("find /usr/include" if a.quick else "find /usr"): ["find", "/usr/include" if a.quick else "/usr"],
        "tar cf /usr/include": ["tar", "cf", "-", "-C", "/usr", "include"],
        "gzip": ["gzip", "-c", data],
        "grep -r": ["grep", "-r", "-c", "define", "/usr/include"],
    }
    parallel = {"xz -T2": ["xz", "-T2", "-6", "-c", small]}
    if shutil.which("zstd"):
        parallel["zstd -T2"] = ["zstd", "-T2", "-12", "-c", small]
    multi = sh(
        f"gzip -c {data} >/dev/null & grep -r -c define /usr/include >/dev/null & "
        f"find {'/usr/include' if a.quick else '/usr'} >/dev/null & xz -T1 -6 -c {small} >/dev/null & wait"
    )
    parallel["multiprogramming (4 at once)"] = multi

    trap_env = dict(off_env(apps))
    trap_env["MANTLE_OFFLOAD_REWRITE"] = "0"
    # the getpid rows: the four configurations, the trap alone, the floors
    getpid_rows = {cfg: (pre + [getpid, str(n_getpid)], env) for cfg, (pre, env) in configs.items()}
    getpid_rows["off-1+1 trap"] = ([getpid, str(n_getpid // 4)], trap_env)
    for mode, n in (("spin", n_getpid), ("spin-getpid", n_getpid), ("futex", 2000)):
        getpid_rows[f"floor {mode}"] = ([handoff, mode, str(apps[0]), str(boot), str(n)], base)

    res = {"getpid": {}, "single": {}, "parallel": {}, "idle": {}}
    order = list(configs)
    for r in range(reps):
        rot = order[r % len(order):] + order[:r % len(order)]
        print(f"repetition {r + 1}/{reps}", file=sys.stderr)
        grot = list(getpid_rows)
        grot = grot[r % len(grot):] + grot[:r % len(grot)]
        for cfg in grot:
            argv, env = getpid_rows[cfg]
            out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
            res["getpid"].setdefault(cfg, []).append(float(out.stdout))
        for name, argv in single.items():
            for cfg in rot:
                pre, env = configs[cfg]
                res["single"].setdefault(name, {}).setdefault(cfg, []).append(timed(pre + argv, env)[0])
        for name, argv in parallel.items():
            for cfg in rot:
                pre, env = configs[cfg]
                res["parallel"].setdefault(name, {}).setdefault(cfg, []).append(timed(pre + argv, env)[0])
        for cfg in ("native-1", "off-1+1"):
            pre, env = configs[cfg]
            wall, cpu = timed(pre + [idle, "3"], env)
            res["idle"].setdefault(cfg, []).append(100.0 * cpu / wall)

    lines = []
    p = lines.append
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    load = os.getloadavg()
    head = (f"bench/multicore {stamp}: kernel {os.uname().release}, CPUs {cs}, bootstrap CPU {boot}, "
            f"application CPUs {apps} (off-1+1) or {cs} (off-both); native-1 pinned to {app1}; "
            f"R={reps} repetitions; load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; "
            f"library {lib}")
    p(head)
    p("")

    def ratio(xs, ys):
        return [x / y for x, y in zip(xs, ys)]

    bars = []
    g = res["getpid"]
    p("Table 4.2 shape: getpid, ns per call (median, min..max over repetitions)")
    for cfg in getpid_rows:
        p(f"  {cfg:18s} {med(g[cfg]):9.1f} ns  ({spread(g[cfg])})")
    gr = ratio(g["off-1+1"], g["native-1"])
    ok = med(gr) <= 5
    bars.append(("offloaded getpid / native <= 5x", med(gr), spread(gr), ok))
    p(f"  offloaded (1+1) / native-1: {med(gr):.1f}x ({spread(gr)})  bar <= 5x: {'MET' if ok else 'MISS'}")
    tr = ratio(g["off-1+1 trap"], g["native-1"])
    p(f"  the trap alone (MANTLE_OFFLOAD_REWRITE=0) / native-1: {med(tr):.1f}x ({spread(tr)})")
    fr = ratio(g["floor spin-getpid"], g["native-1"])
    p(f"  floor (spin round trip + getpid) / native-1: {med(fr):.1f}x ({spread(fr)}): "
      f"no cross-CPU hand-off can do better here")
    orr = ratio(g["off-1+1"], g["floor spin-getpid"])
    p(f"  offloaded (1+1) / floor: {med(orr):.2f}x ({spread(orr)}): the library's own cost over the hand-off")
    p("")
    p("Table 4.2 shape: single-process tools, wall seconds (median) and offloaded / native-1 (paired)")
    p(f"  {'program':24s} {'native-1':>9s} {'native-2':>9s} {'off-1+1':>9s} {'off-both':>9s}  off-1+1/native-1")
    for name, d in res["single"].items():
        rr = ratio(d["off-1+1"], d["native-1"])
        ok = med(rr) <= 1.3
        bars.append((f"{name}: offloaded / native <= 1.3x", med(rr), spread(rr), ok))
        p(f"  {name:24s} {med(d['native-1']):9.3f} {med(d['native-2']):9.3f} {med(d['off-1+1']):9.3f} "
          f"{med(d['off-both']):9.3f}  {med(rr):.2f}x ({spread(rr)}) bar <= 1.3x: {'MET' if ok else 'MISS'}")
    p("")
    p("Tables 4.3/4.4 shape: parallel and multiprogramming, speedup vs native on one CPU (native-1 / config, paired)")
    p(f"  {'workload':30s} {'native-1 s':>10s} {'native-2':>16s} {'off-1+1':>16s} {'off-both':>16s}")
    for name, d in res["parallel"].items():
        cells = []
        for cfg in ("native-2", "off-1+1", "off-both"):
            sp = ratio(d["native-1"], d[cfg])
            cells.append(f"{med(sp):5.2f} ({spread(sp)})")
        p(f"  {name:30s} {med(d['native-1']):10.3f} " + " ".join(f"{c:>16s}" for c in cells))
    p("")
    p("Idle: CPU used by a program blocked in read() for 3 s (percent of wall time, whole process)")
    for cfg, xs in res["idle"].items():
        p(f"  {cfg:10s} {med(xs):6.3f} %  ({spread(xs)})")
    ok = med(res["idle"]["off-1+1"]) < 1.0
    bars.append(("idle offloaded program < 1% CPU", med(res["idle"]["off-1+1"]), spread(res["idle"]["off-1+1"]), ok))
    p("")
    p("Bars:")
    for name, v, s, ok in bars:
        p(f"  {name}: {v:.2f} ({s}) {'MET' if ok else 'MISS'}")
    text = "\n".join(lines)
    print(text)
    outdir = os.path.join(ROOT, "bench", "results", "multicore")
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, f"{stamp}.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(outdir, f"{stamp}.json"), "w") as f:
        json.dump({"head": head, "results": res, "bars": bars}, f, indent=1)
    plot(res, os.path.join(HERE, "RESULTS.png"), head)


def plot(res, path, head):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot", file=sys.stderr)
        return
    fig, axs = plt.subplots(1, 3, figsize=(15, 4.5))
    names = list(res["single"])
    rr = [statistics.median([o / n for o, n in zip(res["single"][k]["off-1+1"], res["single"][k]["native-1"])]) for k in names]
    g = statistics.median([o / n for o, n in zip(res["getpid"]["off-1+1"], res["getpid"]["native-1"])])
    axs[0].bar(["getpid"], [g], color="tab:red")
    axs[0].axhline(5, ls="--", c="k")
    axs[0].set_title("getpid: offloaded / native (bar 5x)")
    axs[1].bar(names, rr, color="tab:orange")
    axs[1].axhline(1.3, ls="--", c="k")
    axs[1].set_title("tools: offloaded / native-1 (bar 1.3x)")
    axs[1].tick_params(axis="x", rotation=20)
    pn = list(res["parallel"])
    w = 0.27
    for i, cfg in enumerate(("native-2", "off-1+1", "off-both")):
        sp = [statistics.median([n / c for n, c in zip(res["parallel"][k]["native-1"], res["parallel"][k][cfg])]) for k in pn]
        axs[2].bar([j + (i - 1) * w for j in range(len(pn))], sp, w, label=cfg)
    axs[2].set_xticks(range(len(pn)))
    axs[2].set_xticklabels([n.split(" (")[0] for n in pn], rotation=20)
    axs[2].axhline(1, ls=":", c="k")
    axs[2].set_title("speedup vs native on 1 CPU")
    axs[2].legend()
    fig.suptitle(head[:150], fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    main()
