#!/usr/bin/env python3
"""The paper's Table 4 on mantle: file operations between two hosts over TCP,
with tags crossing versus mantle not loaded.

Two hosts are network namespaces joined by a veth pair. A file server
(fsrv.c) runs on one, a client (fcli.c) on the other does an IOZone-like mix
against it, every operation a synchronous request/reply: sequential write,
rewrite, read, random read, random write of N records, for record sizes
4 B to 8 KiB (4, 8, ..., 8192).

Conditions, interleaved in one run (ABBA order across repetitions):
  tags: mantle loaded with a cluster table; the client runs under the global
        tag `bench` (mantle tag run), so every data segment it sends carries
        the mTags TCP option and the server thread receives the tag on every
        read (checked after each run: option counters, the server holds it);
  base: mantle not loaded at all (tags down);
  idle: (diagnostic) loaded with the cluster table, client not tagged; run
        in the same load as `tags`, the two alternating which goes first.
A fresh client connection per run (options are enabled on connections made
while global tags exist); each loaded block waits --settle seconds after
`tags up` before its first run. Client and server are pinned to one CPU (--cpu);
/dev/cpu_dma_latency is not held.

Per record size: the time per operation (all five tests) of each run;
median over repetitions and spread (IQR as % of the median) per condition;
ratio = median(tags) / median(base); also the median of the per-repetition
paired ratios. Overall: geometric mean of the per-size ratios. Bars:
overall <= 1.02, no record size >= 1.05.

Run as root:  python3 bench/tags-net/run.py [--quick] [--md RESULTS.md]
It takes /run/mantle-kernel.lock for the whole run, and unloads mantle at
the end.
"""
import argparse
import fcntl
import json
import math
import os
import shutil
import statistics as st
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LOCK = "/run/mantle-kernel.lock"
RECS = [4 << i for i in range(12)]  # 4 .. 8192
TESTS = ["write", "rewrite", "read", "random_read", "random_write"]
PORT = 7788


def sh(*cmd, check=True, **kw):
    r = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if check and r.returncode != 0:
        raise SystemExit(f"`{' '.join(cmd)}` failed ({r.returncode}): {r.stderr.strip()}")
    return r


def take_lock():
    """flock the kernel lock; reuse an fd flock(1) passed down to us."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == LOCK:
                fcntl.flock(int(fd), fcntl.LOCK_EX | fcntl.LOCK_NB)
                return int(fd)
        except OSError:
            pass
    f = os.open(LOCK, os.O_WRONLY | os.O_CREAT, 0o600)  # root's alone
    os.chmod(LOCK, 0o600)
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"waiting for {LOCK} (another user of the kernel side)", file=sys.stderr)
        fcntl.flock(f, fcntl.LOCK_EX)
    return f


def pct(xs, q):
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    k = (len(xs) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


class Bench:
    def __init__(self, a):
        self.a = a
        self.mantle = a.mantle
        self.up_args = ["--no-fd-channels"] if a.no_fd_channels else []
        self.tmp = tempfile.mkdtemp(prefix="mantle-tags-net.")
        os.chmod(self.tmp, 0o755)
        tag = f"tn{os.getpid() % 100000}"
        self.cli, self.srv = tag + "c", tag + "s"
        self.ns_made = []
        self.server = None
        self.loaded = False

    # ------------------------------------------------------------ setup
    def setup(self):
        for prog in ["fsrv", "fcli"]:
            sh("cc", "-O2", "-Wall", "-o", f"{self.tmp}/{prog}", f"{HERE}/{prog}.c")
        for n in (self.cli, self.srv):
            sh("ip", "netns", "add", n)
            self.ns_made.append(n)
            sh("ip", "-n", n, "link", "set", "lo", "up")
        vc, vs = self.cli + "0", self.srv + "0"
        sh("ip", "link", "add", vc, "netns", self.cli, "type", "veth", "peer", "name", vs, "netns", self.srv)
        sh("ip", "-n", self.cli, "addr", "add", "10.77.60.1/24", "dev", vc)
        sh("ip", "-n", self.srv, "addr", "add", "10.77.60.2/24", "dev", vs)
        sh("ip", "-n", self.cli, "link", "set", vc, "up")
        sh("ip", "-n", self.srv, "link", "set", vs, "up")
        with open(f"{self.tmp}/cluster", "w") as f:
            f.write("# bench/tags-net\nbench\n")
        sh(self.mantle, "tags", "down", check=False)
        self.server = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.srv}", "taskset", "-c", str(self.a.cpu),
             f"{self.tmp}/fsrv", str(PORT), f"{self.tmp}/served.file"],
            stdin=subprocess.DEVNULL)
        for _ in range(300):
            r = sh("nsenter", f"--net=/run/netns/{self.srv}", "ss", "-Hltn", f"sport = :{PORT}", check=False)
            if str(PORT) in r.stdout:
                break
            time.sleep(0.01)
        else:
            raise SystemExit("the file server did not start")

    def cleanup(self):
        if self.server and self.server.poll() is None:
            self.server.terminate()
            try:
                self.server.wait(3)
            except subprocess.TimeoutExpired:
                self.server.kill()
        for n in self.ns_made:
            r = sh("ip", "netns", "pids", n, check=False)
            for p in r.stdout.split():
                try:
                    os.kill(int(p), 9)
                except (OSError, ValueError):
                    pass
            sh("ip", "netns", "del", n, check=False)
        if self.loaded:
            sh(self.mantle, "tags", "down", check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -------------------------------------------------------------- runs
    def client(self, tagged):
        """tagged: False, True (the global tag `bench`), or a tag name."""
        cmd = ["nsenter", f"--net=/run/netns/{self.cli}", "taskset", "-c", str(self.a.cpu)]
        if tagged:
            cmd += [self.mantle, "tag", "run", "bench" if tagged is True else tagged, "--"]
        cmd += [f"{self.tmp}/fcli", "10.77.60.2", str(PORT), str(self.a.ops)] + [str(r) for r in RECS]
        r = sh(*cmd)
        rows = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
        assert len(rows) == len(RECS) * len(TESTS), r.stdout
        return rows

    def run_loaded(self, rep):
        """Load with the cluster table, settle, then run the client tagged and
        (diagnostic) untagged, in alternating order; unload."""
        t0 = time.time()
        sh(self.mantle, "tags", "up", "--cluster", f"{self.tmp}/cluster", *self.up_args)
        self.loaded = True
        load_s = time.time() - t0
        time.sleep(self.a.settle)
        out = {}
        for cond in (("tags", "idle") if rep % 2 == 0 else ("idle", "tags")):
            rows = self.client(cond == "tags")
            info = {"load_s": load_s}
            if cond == "tags":
                info["status"] = json.loads(sh(self.mantle, "tags", "status", "--json").stdout)
                threads = json.loads(sh(self.mantle, "tag", "threads", "bench", "--json").stdout)
                info["server_holds"] = any(int(t.get("pid", 0)) == self.server.pid for t in threads)
            out[cond] = (rows, info)
        sh(self.mantle, "tags", "down")
        self.loaded = False
        return out

    def run_plain_load(self):
        """(--diag) Load without a cluster table: run the client with no tag
        in the table at all ('empty': the propagation hooks are detached),
        then create a local tag and run the client under it ('local': the
        propagation hooks run, no TCP option)."""
        sh(self.mantle, "tags", "up", *self.up_args)
        self.loaded = True
        time.sleep(self.a.settle)
        out = {"empty": (self.client(False), {})}
        sh(self.mantle, "tag", "create", "benchlocal")
        cmd_tag = "benchlocal"
        out["local"] = (self.client(cmd_tag), {})
        sh(self.mantle, "tags", "down")
        self.loaded = False
        return out

    def run_base(self):
        r = sh(self.mantle, "tags", "status", check=False)
        if "not loaded" not in r.stdout + r.stderr:
            raise SystemExit(f"baseline: mantle should not be loaded: {r.stdout}{r.stderr}")
        return self.client(False), {}


def opt_counters(status):
    """TCP option counters from `tags status --json`, whatever their nesting."""
    out = {}

    def walk(v, path=""):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, f"{path}.{k}" if path else k)
        elif isinstance(v, (int, float)) and "opt" in path:
            out[path] = v
    walk(status)
    return out


def analyse(runs, a):
    """runs: list of (rep, cond, rows, info)."""
    conds = ("tags", "base", "idle", "empty", "local")
    per = {c: {r: [] for r in RECS} for c in conds}
    per_test = {c: {t: [] for t in TESTS} for c in conds}
    by_rep = {}
    for rep, cond, rows, _ in runs:
        tot = {r: 0 for r in RECS}
        tt = {t: 0 for t in TESTS}
        for x in rows:
            tot[x["rec"]] += x["ns"]
            tt[x["test"]] += x["ns"]
        for r in RECS:
            us = tot[r] / (len(TESTS) * a.ops) / 1e3
            per[cond][r].append(us)
            by_rep.setdefault((rep, r), {})[cond] = us
        for t in TESTS:
            per_test[cond][t].append(tt[t] / (len(RECS) * a.ops) / 1e3)
    table = []
    for r in RECS:
        b, t = per["base"][r], per["tags"][r]
        paired = [by_rep[(k, r)]["tags"] / by_rep[(k, r)]["base"] for k in range(a.reps)]
        table.append({
            "rec": r,
            "base_us": st.median(b), "base_iqr_pct": 100 * (pct(b, .75) - pct(b, .25)) / st.median(b),
            "tags_us": st.median(t), "tags_iqr_pct": 100 * (pct(t, .75) - pct(t, .25)) / st.median(t),
            "ratio": st.median(t) / st.median(b),
            "idle_ratio": st.median(per["idle"][r]) / st.median(b),
            "paired_median": st.median(paired), "paired_p25": pct(paired, .25), "paired_p75": pct(paired, .75),
        })
    overall = math.exp(sum(math.log(x["ratio"]) for x in table) / len(table))
    overall_paired = math.exp(sum(math.log(x["paired_median"]) for x in table) / len(table))
    tests = [{"test": t, "ratio": st.median(per_test["tags"][t]) / st.median(per_test["base"][t])} for t in TESTS]
    overall_idle = math.exp(sum(math.log(x["idle_ratio"]) for x in table) / len(table))
    diag = {}
    for c in ("idle", "empty", "local"):
        if per[c][RECS[0]]:
            rs = [st.median(per[c][r]) / st.median(per["base"][r]) for r in RECS]
            diag[c] = math.exp(sum(math.log(x) for x in rs) / len(rs))
    table_diag = diag
    return table, overall, overall_paired, tests, (overall_idle, table_diag)


def report(table, overall, overall_paired, tests, idle_diag, runs, a, elapsed, cmdline):
    overall_idle, diag = idle_diag
    worst = max(table, key=lambda x: x["ratio"])
    ok_overall, ok_each = overall <= 1.02, worst["ratio"] < 1.05
    infos = [i for _, c, _, i in runs if c == "tags"]
    held = sum(1 for i in infos if i["server_holds"])
    counters = [opt_counters(i["status"]) for i in infos]
    loads = [i["load_s"] for i in infos]
    L = []
    L.append(f"Command: `{cmdline}`  ")
    L.append(f"Date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, kernel {os.uname().release}, {os.cpu_count()} CPUs; run took {elapsed:.0f} s.  ")
    L.append(f"Repetitions: {a.reps} per condition, interleaved ABBA (loaded, base, base, loaded, ...; within each load, tags and idle alternate first); {a.ops} operations per test "
             f"per record size (file = {a.ops} records), 5 tests, 12 record sizes: {a.ops * 5 * 12} request/reply pairs per run.  ")
    L.append(f"Pinning: client and file server both on CPU {a.cpu} (taskset); /dev/cpu_dma_latency not held.  ")
    L.append(f"tags: mantle loaded with a cluster table, client under the global tag `bench` (the Table 4 condition); base: mantle not loaded; "
             f"idle (diagnostic): loaded with the cluster table, client untagged. Each client run waits {a.settle} s after the load.  ")
    L.append(f"Checks in the tags runs: the file server held the tag after {held}/{len(infos)} runs; "
             f"TCP option counters after each run: {counters[0] if counters else '-'} (first run); "
             f"load time of the kernel side {st.median(loads):.1f} s (median).")
    L.append("")
    L.append("| record size (B) | base µs/op (median) | base IQR | tags µs/op (median) | tags IQR | ratio tags/base | paired ratio median [p25–p75] | idle/base |")
    L.append("| --: | --: | --: | --: | --: | --: | --: | --: |")
    for x in table:
        L.append(f"| {x['rec']} | {x['base_us']:.2f} | {x['base_iqr_pct']:.1f}% | {x['tags_us']:.2f} | {x['tags_iqr_pct']:.1f}% | "
                 f"**{x['ratio']:.3f}** | {x['paired_median']:.3f} [{x['paired_p25']:.3f}–{x['paired_p75']:.3f}] | {x['idle_ratio']:.3f} |")
    L.append(f"| **overall** (geometric mean) | | | | | **{overall:.3f}** | {overall_paired:.3f} | {overall_idle:.3f} |")
    L.append("")
    if a.diag:
        L.append("Diagnostic conditions, overall (geometric mean over record sizes of median/median base): "
                 + ", ".join(f"{c} {v:.3f}" for c, v in diag.items())
                 + " (empty: loaded, no tag in the table, so the propagation hooks are detached; "
                 "local: client under a local tag, no TCP option; idle: cluster table loaded, client untagged).")
        L.append("")
    L.append("Per test (all record sizes): " + ", ".join(f"{t['test']} {t['ratio']:.3f}" for t in tests) + ".")
    L.append("")
    L.append(f"Bars: overall ≤ 1.02: **{'PASS' if ok_overall else 'FAIL'}** ({overall:.3f}); "
             f"no record size ≥ 1.05: **{'PASS' if ok_each else 'FAIL'}** (worst {worst['rec']} B: {worst['ratio']:.3f}).")
    return "\n".join(L), ok_overall and ok_each


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="3 repetitions, 64 operations per test")
    p.add_argument("--reps", type=int, default=10, help="repetitions per condition (default 10)")
    p.add_argument("--ops", type=int, default=512, help="operations per test and record size (default 512)")
    p.add_argument("--cpu", type=int, default=1, help="CPU for client and server (default 1)")
    p.add_argument("--settle", type=float, default=1.0, help="seconds to wait after loading mantle (default 1)")
    p.add_argument("--mantle", default=os.path.join(ROOT, "target/release/mantle"))
    p.add_argument("--diag", action="store_true",
                   help="also a load without cluster table per repetition: 'empty' (no tags) and 'local' (client under a local tag)")
    p.add_argument("--no-fd-channels", action="store_true",
                   help="load with `tags up --no-fd-channels` (sys_exit never attached)")
    p.add_argument("--json", help="write every run's raw figures here")
    p.add_argument("--md", help="write the report (markdown) here")
    a = p.parse_args()
    if a.quick:
        a.reps, a.ops, a.settle = 3, 64, 0.5
    if os.geteuid() != 0:
        raise SystemExit("run as root (loads mantle's kernel side, makes network namespaces)")
    if not os.path.exists(a.mantle):
        sh("cargo", "build", "--release", "--quiet", cwd=ROOT)
    cmdline = "python3 bench/tags-net/run.py " + " ".join(sys.argv[1:])
    take_lock()
    b = Bench(a)
    t0 = time.time()
    runs = []
    try:
        b.setup()
        b.client(False)  # warm-up (not counted)
        for rep in range(a.reps):
            order = ("loaded", "base") if rep % 2 == 0 else ("base", "loaded")
            if a.diag:
                order = order + ("plain",) if rep % 2 == 0 else ("plain",) + order
            for block in order:
                if block == "plain":
                    for cond, (rows, info) in b.run_plain_load().items():
                        runs.append((rep, cond, rows, info))
                elif block == "base":
                    rows, info = b.run_base()
                    runs.append((rep, "base", rows, info))
                else:
                    for cond, (rows, info) in b.run_loaded(rep).items():
                        runs.append((rep, cond, rows, info))
            print(f"rep {rep + 1}/{a.reps} done ({time.time() - t0:.0f} s)", file=sys.stderr)
    finally:
        b.cleanup()
    table, overall, overall_paired, tests, overall_idle = analyse(runs, a)
    text, ok = report(table, overall, overall_paired, tests, overall_idle, runs, a, time.time() - t0, cmdline)
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write(text + "\n")
    if a.json:
        with open(a.json, "w") as f:
            json.dump([{"rep": r, "cond": c, "rows": rows, "info": i} for r, c, rows, i in runs], f)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
