#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""The paper's Table 1 (Hijack, section 3.1) on this machine, one run.

Run it through the wrapper, which builds guest.c and ptrace_interpose.c:
    bash bench/executive/run.sh [--quick] [options]       (repo root, as root)

Rows (ROWS below; the paper's figure in cycles at 2.4 GHz, shown in ns):
  timer            two clock_gettime(CLOCK_MONOTONIC) back to back: the
                   floor every per-op time below includes (not subtracted)
  getppid          a plain getppid                     paper: System Call
  ptrace           getppid under ptrace_interpose (PTRACE_SYSCALL, two
                   stops, GETREGS at each)      paper: Interposition, ptrace
  ptrace one-way   guest about to trap -> tracer running with the call
                   (guest's timestamp in rdi, read at the entry stop)
                                          paper: Trap from Guest to Executive
  strace           getppid under `strace -f -qq -e trace=getppid -o /dev/null`
                   (a real tool a user would pick; it stops at every call)
  strace seccomp   the same with --seccomp-bpf (stops only at getppid)
  protected        getppid under `mantle run --perform getppid`: the
                   executive performs getppid on the guest's behalf through
                   seccomp user notification
                   paper: System Call + RPC from Guest to Executive & back
  protected_ref, protected_new  only with --mantle-ref PATH: the protected
                   row without --stamp, run with the --mantle-ref binary and
                   with the --mantle binary, interleaved in the same blocks
                   (an old build against a new one, side by side)
  protected --priority 99  the same with the executive at SCHED_FIFO 99 (the
                   default is SCHED_OTHER when no agent keeps time: a
                   real-time executive pays a class switch each way)
  fast             the same with `--path fast` (in-guest trap, shared memory;
                   the executive answers getppid itself: one round trip;
                   `--spin on` across CPUs, `--spin off` on one CPU)
  fast --rewrite-sites  the fast path with the trapped call site rewritten
                   into a jump after its first trap (no signal afterwards)
                   (fast and fast --rewrite-sites: an agent that decides,
                   so a hand-off to the executive per call: the reference)
  fast --count     an agent that only observes: `--path fast --count=all`,
                   served in the stub (counters in the shared region), no
                   hand-off: the trap and the call; `, rewritten`: the same
                   with --rewrite-sites (a jump to the stub, no signal)
  ref: rows        reference floors, not mantle: what the mechanism under
                   each of mantle's paths costs with nothing on top.
                   notif floor: notif_floor.c, a minimal seccomp user
                   notification supervisor (poll, RECV, SEND with
                   FLAG_CONTINUE); + SYNC_WAKE_UP: the same with
                   SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP set; SIGSYS trap floor:
                   the guest traps its own getppid (seccomp RET_TRAP) and
                   answers in its handler, no executive round trip;
                   notif floor, SYNC, value: notif_floor -s -v, the C
                   supervisor in mantle's configuration (SYNC_WAKE_UP,
                   answers with a value, as --perform getppid does);
                   in-process handler: guest.c inproc, getppid made through
                   a call to a function that keeps the registers (what a
                   rewritten site does at least)
  protected/fast one-way  guest about to trap -> executive holding the call:
                   the guest's CLOCK_MONOTONIC start time (in getppid's rdi)
                   subtracted from the executive's receipt time, recorded by
                   `mantle run --stamp getppid=FILE` in the protected and
                   fast rows' own runs (a clock read and a store per call)
  pipe RPC         1-byte round trip over a pair of pipes between two
                   processes         paper: RPC Between Two Processes, Pipes
  guest<->guest RPC through the executive: a 1-byte round trip from one
                   guest (guest.c ggrpc, the client, on A) to another
                   (ggrpcd, the server, on B or A) through mantle's
                   executive: `mantle run --system` with a generated TOML
                   (server first: server id 0), the executive under
                   taskset on B (or A)   paper: RPC Between Two Guests
The "over plain" column (a row's median minus the plain getppid median in
the same condition) is what compares with the paper's "RPC from Guest to
Executive & back" row: the interposition cost without the call itself.

A row whose tool is missing or refuses the command line (today: `mantle run`
without --perform or --path fast, or no mantle binary) is probed once, with
a 50-call run, and printed as "not available: <why>", never given a number.
A row is added or enabled by one line in ROWS.

Conditions, each a separate block: one CPU (the guest, the tracer or
executive, the pipe peer: all on CPU --cpus A, default 0) and across CPUs
(guest on A, tracer/executive/pipe peer on B, default 1), each with
/dev/cpu_dma_latency not held and held at 0 (the runner opens it, writes 0
as a 4-byte int and keeps it open for the block; idle CPUs then poll instead
of halting, see ../shared/platform.md); and "free": the guest on A, the
tracer/executive/pipe peer (and the RPC server guest) allowed on A and B,
placed by the scheduler: the condition where SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP
can wake the supervisor on the guest's CPU (pinned, there is nothing to
wake across). The tool is started under `taskset -c CPU` (`A,B` for free);
the guest pins itself with sched_setaffinity before timing. Rows with no
second party (timer, getppid) run in every condition too, as a check on
the noise. Nothing runs at real-time priority except what mantle's
executive sets for itself.

Repetitions: R (default 5) repetitions; each repetition runs every condition
block (order alternating ABBA across repetitions) and in each every row
once (row order reversed on odd repetitions). A run is one guest process:
WARMUP (default N/10) untimed ops then N (default 20000) timed ops, each op
timed in the guest with clock_gettime. Per row and condition: mean, median,
p99 and max over all R*N ops, and the spread: min..max of the R repetition
medians. Ratios: "x cheaper than ptrace" = median(ptrace) / median(row), in
the same condition and run; the per-repetition paired ratios' min..max are
in the JSON. Bars (issue 10): protected >= 2.5x cheaper than ptrace, fast
>= 4x, guest<->guest RPC faster than pipe RPC (the paper: 1.57x); each
reported PASS, MISS or n/a per condition, never fatal (SUSPECT: the ratio
passes but the row is no slower than a plain getppid, see Checks).
Floor bars (issue 29), median(row)/median(floor) in the same condition:
protected <= 1.3x the C supervisor with SYNC_WAKE_UP answering a value;
fast --count <= 1.5x the SIGSYS trap floor; fast --count rewritten <= 1.5x
the in-process handler floor (FLOOR_BARS).

Checks: the guest compares every getppid result with its PPid in
/proc/self/stat (an executive performing the call must return the guest's
parent); a wrong value is reported. An interposed row whose median is under
2x the plain getppid is flagged as suspicious (is the call interposed?).
The load average and the state of /dev/cpu_dma_latency before the run are
reported: the machine may be shared; numbers from a busy machine are noisy.

Output: the command, date, kernel and commit at the top; a text table per
condition and the bars, on stdout and in
bench/results/executive/table1-<date>.txt; the numbers in .json beside it;
a plot (.png, or --plot-format svg; matplotlib: bars are medians, whiskers
go to p99, log scale, the paper's figure as a marker) unless matplotlib is
missing (then said, not fatal).

This benchmark does not load mantle's kernel side and does not take
/run/mantle-kernel.lock.

Exit status: 0 when every available row ran in every condition (MISS rows
and "not available" rows included), 1 when a run failed.
"""
import argparse
import array
import datetime
import json
import os
import shutil
import statistics as st
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GHZ = 2.4  # the paper's Pentium IV


class Row:
    def __init__(self, key, label, mode, tool=None, paper=None, unavailable=None,
                 interposed=False, companion_of=None, needs=None):
        self.key = key
        self.label = label
        self.mode = mode            # guest.c mode
        self.tool = tool            # argv prefix (with {placeholders}) or None
        self.paper = paper          # (paper row, cycles) or None
        self.unavailable = unavailable  # fixed reason: never run
        self.interposed = interposed    # getppid under an interposer
        self.companion_of = companion_of  # samples come from that row's run
        self.needs = needs          # executable the tool needs ({mantle}, strace)


STRACE = ["strace", "-f", "-qq", "-e", "trace=getppid", "-o", "/dev/null"]
# One line per row. The protected and fast rows are live: they run as soon
# as `mantle run` accepts their command line.
ROWS = [
    Row("timer", "timer floor (2x clock_gettime)", "null"),
    Row("getppid", "plain getppid", "getppid", paper=("System Call", 430)),
    Row("ptrace", "getppid, ptrace (SYSCALL+GETREGS)", "getppid",
        tool=["{ptrace}", "-o", "{oneway}", "--"], interposed=True,
        paper=("Interposition using POSIX ptrace", 26000)),
    Row("ptrace_oneway", "one-way trap, ptrace", "getppid", companion_of="ptrace",
        paper=("Trap from Guest to Executive", 1250)),
    Row("strace", "getppid, strace -f", "getppid", tool=STRACE + ["--"], interposed=True,
        needs="strace"),
    Row("strace_seccomp", "getppid, strace -f --seccomp-bpf", "getppid",
        tool=STRACE + ["--seccomp-bpf", "--"], interposed=True, needs="strace"),
    Row("protected", "getppid, mantle protected path", "getppid",
        tool=["{mantle}", "run", "--stamp", "getppid={oneway}", "--perform", "getppid", "--"], interposed=True, needs="{mantle}",
        paper=("System Call + RPC Guest to Executive & back", 430 + 2900)),
    # --mantle-ref PATH only: the protected row with another binary (an
    # older build), interleaved with the others in the same blocks
    Row("protected_ref", "getppid, protected, --mantle-ref binary", "getppid",
        tool=["{mantle_ref}", "run", "--perform", "getppid", "--"], interposed=True,
        needs="{mantle_ref}"),
    Row("protected_new", "getppid, protected, --mantle binary, no --stamp", "getppid",
        tool=["{mantle}", "run", "--perform", "getppid", "--"], interposed=True,
        needs="{mantle_ref}"),
    Row("fast", "getppid, mantle fast path", "getppid",
        tool=["{mantle}", "run", "--path", "fast", "--spin", "{spin}",
              "--stamp", "getppid={oneway}", "--perform", "getppid", "--"],
        interposed=True, needs="{mantle}",
        paper=("System Call + RPC Guest to Executive & back", 430 + 2900)),
    Row("protected_fifo", "getppid, protected, --priority 99", "getppid",
        tool=["{mantle}", "run", "--priority", "99", "--perform", "getppid", "--"],
        interposed=True, needs="{mantle}"),
    Row("fast_rewrite", "getppid, fast path, --rewrite-sites", "getppid",
        tool=["{mantle}", "run", "--path", "fast", "--spin", "{spin}", "--rewrite-sites",
              "--perform", "getppid", "--"],
        interposed=True, needs="{mantle}",
        paper=("System Call + RPC Guest to Executive & back", 430 + 2900)),
    # --count=all: served in the stub (a --count of named calls alone is
    # the gate's, by notification: the protected path's cost)
    Row("fast_count", "getppid, fast, --count (in stub)", "getppid",
        tool=["{mantle}", "run", "--path", "fast", "--count=all", "--"],
        interposed=True, needs="{mantle}"),
    Row("fast_count_rewrite", "getppid, fast, --count, rewritten", "getppid",
        tool=["{mantle}", "run", "--path", "fast", "--rewrite-sites", "--count=getppid", "--"],
        interposed=True, needs="{mantle}"),
    Row("notif_value_floor", "ref: notif floor, SYNC, value (C)", "getppid",
        tool=["{notif}", "-s", "-v", "--"], interposed=True),
    Row("inproc_floor", "ref: in-process handler floor (C)", "inproc", interposed=True),
    Row("notif_floor", "ref: seccomp notif floor (C)", "getppid",
        tool=["{notif}", "--"], interposed=True),
    Row("notif_sync_floor", "ref: notif floor + SYNC_WAKE_UP", "getppid",
        tool=["{notif}", "-s", "--"], interposed=True),
    Row("sigsys_floor", "ref: in-guest SIGSYS trap floor (C)", "sigsys", interposed=True),
    Row("protected_oneway", "one-way trap, protected path", "getppid", companion_of="protected",
        paper=("Trap from Guest to Executive", 1250)),
    Row("fast_oneway", "one-way trap, fast path", "getppid", companion_of="fast",
        paper=("Trap from Guest to Executive", 1250)),
    Row("pipe", "pipe RPC, 1-byte round trip", "pipe",
        paper=("RPC Between Two Processes Using UNIX Pipes", 14500)),
    Row("ggrpc", "guest<->guest RPC via executive", "ggrpc",
        tool=["{mantle}", "run", "--system", "{system}"], needs="{mantle}",
        paper=("RPC Between Two Hijack Guests", 9250)),
]
BARS = [  # (row, against, minimum ratio, how the ratio is formed)
    ("protected", "ptrace", 2.5, "median(ptrace)/median(protected)"),
    ("protected_fifo", "ptrace", 2.5, "median(ptrace)/median(protected, --priority 99)"),
    ("fast", "ptrace", 4.0, "median(ptrace)/median(fast)"),
    ("fast_rewrite", "ptrace", 4.0, "median(ptrace)/median(fast, --rewrite-sites)"),
    ("ggrpc", "pipe", 1.0, "median(pipe)/median(ggrpc), must be > 1 (paper 1.57)"),
]
# rows that make getppid without a trap once warm (not "suspicious" when
# close to a plain getppid)
NO_TRAP = ("fast_count_rewrite", "inproc_floor")
# Issue 29: cost against the floor of the same mechanism, same condition,
# same run: (row, floor row, most allowed median(row)/median(floor)).
FLOOR_BARS = [
    ("protected", "notif_value_floor", 1.3,
     "protected path (default priority, --perform getppid: SYNC_WAKE_UP, answers a value) "
     "vs the C supervisor with SYNC_WAKE_UP answering a value"),
    ("protected_ref", "notif_value_floor", 1.3,
     "the same with the --mantle-ref binary (no --stamp)"),
    ("protected_new", "notif_value_floor", 1.3,
     "the same with the --mantle binary, no --stamp (to compare with protected_ref)"),
    ("fast_count", "sigsys_floor", 1.5,
     "fast path, an observing agent (--count) served in the stub, no rewriting, "
     "vs the bare SIGSYS trap"),
    ("fast_count_rewrite", "inproc_floor", 1.5,
     "fast path, --count in the stub, call site rewritten, vs a bare in-process handler"),
]


def pct(sorted_xs, q):
    """Nearest-rank percentile of a sorted list."""
    if not sorted_xs:
        return float("nan")
    k = max(0, min(len(sorted_xs) - 1, int(round(q / 100.0 * len(sorted_xs) + 0.5)) - 1))
    return sorted_xs[k]


def read_oneway(path):
    """A one-way file: guest.c's format (ptrace_interpose) or `mantle run
    --stamp`'s text (ns per line, '#' lines are notes)."""
    with open(path, "rb") as f:
        head = f.read(1)
    if head and head not in b"0123456789#":
        return read_samples(path)  # a header line, then binary
    xs, notes = [], []
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                notes.append(line[1:].strip())
            elif line.strip():
                xs.append(int(line))
    return {"stamp": "; ".join(notes)}, xs


def read_samples(path):
    with open(path, "rb") as f:
        data = f.read()
    nl = data.index(b"\n")
    header = dict(kv.split("=", 1) for kv in data[:nl].decode().split()[2:] if "=" in kv)
    a = array.array("I")
    a.frombytes(data[nl + 1:])
    return header, a


class DmaHold:
    """Hold /dev/cpu_dma_latency at 0 while in the block."""
    PATH = "/dev/cpu_dma_latency"

    def __init__(self, on):
        self.on = on
        self.fd = None

    def __enter__(self):
        if self.on:
            self.fd = os.open(self.PATH, os.O_RDWR | os.O_CLOEXEC)
            os.write(self.fd, struct.pack("i", 0))
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def dma_current():
    """The machine's current cpu_dma_latency target (us), or None."""
    try:
        fd = os.open(DmaHold.PATH, os.O_RDONLY | os.O_CLOEXEC)
        try:
            b = os.read(fd, 4)
        finally:
            os.close(fd)
        return struct.unpack("i", b)[0] if len(b) == 4 else None
    except OSError:
        return None


def shorten(argv):
    """argv for people: programs by name, output files as FILE."""
    out = []
    for i, x in enumerate(argv):
        if i and argv[i - 1] == "-o" and x.startswith(tempfile.gettempdir()):
            out.append("FILE")
        elif os.path.isabs(x) and os.access(x, os.X_OK) and not os.path.isdir(x):
            out.append(os.path.basename(x))
        else:
            out.append(x)
    return out


def cpu_busy(seconds=1.0):
    """Share of each CPU busy (all processes) over `seconds`, in %."""
    def snap():
        d = {}
        for ln in open("/proc/stat"):
            f = ln.split()
            if f[0].startswith("cpu") and f[0] != "cpu":
                v = [int(x) for x in f[1:]]
                d[f[0]] = (sum(v), v[3] + v[4])  # total, idle+iowait
        return d
    s0 = snap()
    time.sleep(seconds)
    s1 = snap()
    return {c: round(100.0 * (1 - (s1[c][1] - s0[c][1]) / max(1, s1[c][0] - s0[c][0])))
            for c in s1}


def read_or(path, default):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def sh_quote(argv):
    import shlex
    return " ".join(shlex.quote(a) for a in argv)


class Bench:
    def __init__(self, args):
        self.a = args
        self.tmp = tempfile.mkdtemp(prefix="mantle-bench-exec-")
        self.subst = {"ptrace": os.path.join(args.bin, "ptrace_interpose"),
                      "notif": os.path.join(args.bin, "notif_floor"),
                      "mantle": args.mantle or "",
                      "mantle_ref": args.mantle_ref or ""}
        self.errors = []

    def tool_argv(self, row, oneway, across=False):
        # the fast path spins only where guest and executive have a CPU
        # each; unpinned, mantle decides (auto)
        spin = "auto" if across == "free" else ("on" if across else "off")
        s = dict(self.subst, oneway=oneway, spin=spin)
        return [t.format(**s) for t in row.tool] if row.tool else []

    def command(self, row, cond, n, warm, out, oneway):
        """argv for one run of row in condition cond."""
        free = cond["across"] == "free"
        gcpu = self.a.cpu_a
        # free: the other party may run on either CPU (the scheduler, or a
        # SYNC_WAKE_UP wake-up, places it); the guest stays on A
        ocpu = (f"{self.a.cpu_a},{self.a.cpu_b}" if free
                else self.a.cpu_b if cond["across"] else self.a.cpu_a)
        guest = [os.path.join(self.a.bin, "guest"), row.mode, "-n", str(n), "-w", str(warm),
                 "-c", str(gcpu), "-o", out]
        if row.mode == "pipe":
            guest += ["-p", "-2" if free else str(ocpu)]
        if row.mode == "ggrpc":
            # two guests of one executive: the server (id 0) on the peer CPU
            server = [os.path.join(self.a.bin, "guest"), "ggrpcd", "-n", str(n), "-w",
                      str(warm)] + ([] if free else ["-c", str(ocpu)])
            system = out + ".system.toml"
            with open(system, "w") as f:
                for name, argv in (("server", server), ("client", guest)):
                    f.write(f"[[guest]]\nname = {json.dumps(name)}\n"
                            f"command = {json.dumps(argv)}\n\n")
            s = dict(self.subst, system=system)
            return ["taskset", "-c", str(ocpu)] + [t.format(**s) for t in row.tool]
        return ["taskset", "-c", str(ocpu)] + self.tool_argv(row, oneway, cond["across"]) + guest

    def run_once(self, row, cond, n, warm, tag, timeout):
        out = os.path.join(self.tmp, f"{row.key}-{tag}.bin")
        oneway = os.path.join(self.tmp, f"{row.key}-{tag}.oneway")
        for p in (out, oneway):
            if os.path.exists(p):
                os.unlink(p)
        argv = self.command(row, cond, n, warm, out, oneway)
        try:
            r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return None, f"timed out after {timeout} s: {sh_quote(shorten(argv))}", argv
        if r.returncode != 0 or not os.path.exists(out):
            errl = r.stderr.strip().splitlines() or ["(no message)"]
            msg = next((x for x in errl if "error" in x.lower()), errl[-1]).strip()[:200]
            return None, f"`{sh_quote(shorten(argv))}` exited {r.returncode}: {msg}", argv
        hdr, xs = read_samples(out)
        res = {"header": hdr, "ns": xs, "stderr": r.stderr.strip()[-500:]}
        # --count rows: the getppid calls mantle counted (the check that
        # the stub observed every call; its table is on stderr)
        for ln in r.stderr.splitlines():
            f = ln.split()
            if len(f) == 9 and f[-1] == "getppid" and f[5].isdigit():
                res["counted"] = int(f[5])
        if os.path.exists(oneway):
            res["oneway_header"], res["oneway"] = read_oneway(oneway)
        return res, None, argv

    def probe(self, row):
        """None if row can run, else the reason it cannot."""
        if row.unavailable:
            return row.unavailable
        if row.companion_of:
            return None
        if row.needs:
            exe = row.needs.format(**self.subst)
            if not exe and row.needs == "{mantle_ref}":
                return "not available: no --mantle-ref binary given"
            if not exe:
                return ("not available: no mantle binary (looked for target/release/mantle, "
                        "target/debug/mantle, mantle on PATH; build: cargo build --release "
                        "--bin mantle, or --mantle PATH)")
            if not (shutil.which(exe) or os.access(exe, os.X_OK)):
                return f"not available: {exe} is not installed"
        cond = {"across": False, "dma": False}
        res, err, argv = self.run_once(row, cond, 50, 0, "probe", 30)
        if err:
            return "not available: " + err
        return None


def summarize(samples_per_rep):
    allx = sorted(x for xs in samples_per_rep for x in xs)
    meds = [st.median(xs) for xs in samples_per_rep if len(xs)]
    return {
        "n": len(allx),
        "mean": sum(allx) / len(allx),
        "median": st.median(allx),
        "p99": pct(allx, 99),
        "max": allx[-1],
        "min": allx[0],
        "rep_medians": meds,
        "spread_lo": min(meds),
        "spread_hi": max(meds),
    }


def fmt_ns(x):
    if x is None:
        return "-"
    if x >= 100000:
        return f"{x / 1000:.0f}u"
    if x >= 10000:
        return f"{x / 1000:.1f}u"
    return f"{x:.0f}"


def default_mantle():
    for p in (os.path.join(ROOT, "target/release/mantle"), os.path.join(ROOT, "target/debug/mantle")):
        if os.access(p, os.X_OK):
            return p
    return shutil.which("mantle")


def git_desc():
    try:
        return subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="where guest and ptrace_interpose are (run.sh sets it)")
    ap.add_argument("--argv0", default="python3 bench/executive/run.py")
    ap.add_argument("--quick", action="store_true", help="smoke run: N=2000, R=2")
    ap.add_argument("-n", type=int, default=None, help="timed ops per run (default 20000)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed ops per run (default N/10)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions R (default 5)")
    ap.add_argument("--cpus", default="0,1", help="A,B: the guest's CPU and the other CPU (default 0,1)")
    ap.add_argument("--conditions", default="1cpu,1cpu+dma,2cpu,2cpu+dma,free",
                    help="blocks to run, from 1cpu, 1cpu+dma, 2cpu, 2cpu+dma, free")
    ap.add_argument("--rows", default=None, help="only these row keys, comma-separated")
    ap.add_argument("--mantle", default=None, help="the mantle binary (default target/release/mantle)")
    ap.add_argument("--mantle-ref", default=None,
                    help="a second mantle binary (e.g. an older build): adds the rows protected_ref "
                         "and protected_new (both without --stamp), side by side in the same blocks")
    ap.add_argument("--timeout", type=int, default=180, help="seconds per run (default 180)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/executive"))
    ap.add_argument("--max-wait", type=float, default=0,
                    help="wait up to S seconds for both CPUs to be <= 15%% busy before timing "
                         "(default 0: do not wait; the busy share is reported either way)")
    ap.add_argument("--plot-format", default="png", choices=["png", "svg"])
    a = ap.parse_args()
    if a.quick:
        a.n = a.n or 2000
        a.reps = a.reps or 2
    a.n = a.n or 20000
    a.reps = a.reps or 5
    a.warmup = a.n // 10 if a.warmup is None else a.warmup
    a.cpu_a, a.cpu_b = (int(c) for c in a.cpus.split(","))
    a.mantle = a.mantle or default_mantle()
    if os.geteuid() != 0:
        print("run.py: note: not root: /dev/cpu_dma_latency cannot be held (those blocks will fail)",
              file=sys.stderr)
    conds = []
    for c in a.conditions.split(","):
        if c not in ("1cpu", "1cpu+dma", "2cpu", "2cpu+dma", "free"):
            sys.exit(f"run.py: unknown condition {c}")
        across = "free" if c == "free" else c.startswith("2")
        conds.append({"name": c, "across": across, "dma": c.endswith("+dma")})
    rows = [r for r in ROWS if not a.rows or r.key in a.rows.split(",")]
    b = Bench(a)
    os.makedirs(a.out, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    user_args, skip = [], 0
    for x in sys.argv[1:]:
        if skip:
            skip -= 1
        elif x in ("--bin", "--argv0"):
            skip = 1
        else:
            user_args.append(x)
    cmdline = a.argv0 + (" " + sh_quote(user_args) if user_args else "")
    lines = []

    def say(s=""):
        print(s, flush=True)
        lines.append(s)

    dma0 = dma_current()
    load0 = open("/proc/loadavg").read().split()[:3]
    busy0 = cpu_busy()
    waited = 0.0
    while max(busy0.values()) > 15 and waited < a.max_wait:
        print(f"waiting for a quiet machine: {busy0}", file=sys.stderr, flush=True)
        time.sleep(4)
        waited += 5
        busy0 = cpu_busy()
    say(f"command: {cmdline}")
    say(f"date: {stamp}  kernel: {os.uname().release}  commit: {git_desc()}  "
        f"mantle: {a.mantle or 'none'}")
    say(f"N={a.n} timed ops per run after {a.warmup} warm-up ops, R={a.reps} repetitions; "
        f"guest on CPU {a.cpu_a}; tracer/executive/pipe peer on CPU {a.cpu_a} (1cpu) or "
        f"{a.cpu_b} (2cpu); +dma: /dev/cpu_dma_latency held at 0")
    say(f"CPUs busy with other work before the run (1 s sample"
        + (f", after waiting {waited:.0f} s" if waited else "") + "): "
        + ", ".join(f"{c} {v}%" for c, v in busy0.items())
        + ("  (BUSY: the numbers below are noisy)" if max(busy0.values()) > 15 else ""))
    idle = "/".join(read_or(f"/sys/devices/system/cpu/cpuidle/current_{k}", "?")
                    for k in ("driver", "governor"))
    say(f"cpuidle driver/governor: {idle}"
        + ("  (no cpuidle driver: holding cpu_dma_latency may change nothing)"
           if idle.startswith("none") else ""))
    say(f"load average at start: {' '.join(load0)}; cpu_dma_latency before the run: "
        f"{dma0 if dma0 is not None else 'unreadable'} us"
        + ("" if dma0 is None or dma0 >= 2000000000 else
           "  (HELD BY ANOTHER PROCESS: the blocks without +dma are not clean)"))
    say("per-op times include the timer floor (row `timer`); ns unless marked u (us)")
    say()

    # Probe every row once.
    avail = {}
    for r in rows:
        avail[r.key] = b.probe(r)
        if r.companion_of and avail.get(r.companion_of):
            avail[r.key] = f"not available: its row {r.companion_of} is not"
        print(f"probe {r.key}: {avail[r.key] or 'ok'}", file=sys.stderr, flush=True)

    # Timed runs.
    data = {(r.key, c["name"]): [] for r in rows for c in conds}
    checks = {(r.key, c["name"]): [] for r in rows for c in conds}
    argv_of = {}
    stderr_of = {}  # the tool's last words (e.g. the executive's warnings)
    failed = {}
    t_start = time.time()
    for rep in range(a.reps):
        order = conds if rep % 2 == 0 else list(reversed(conds))
        rorder = rows if rep % 2 == 0 else list(reversed(rows))
        for c in order:
            try:
                hold = DmaHold(c["dma"])
                hold.__enter__()
            except OSError as e:
                for r in rows:
                    failed[(r.key, c["name"])] = f"cannot hold /dev/cpu_dma_latency: {e}"
                continue
            try:
                for r in rorder:
                    if avail[r.key] or r.companion_of or (r.key, c["name"]) in failed:
                        continue
                    res, err, argv = b.run_once(r, c, a.n, a.warmup, f"{c['name']}-{rep}", a.timeout)
                    argv_of[(r.key, c["name"])] = argv
                    if err:
                        failed[(r.key, c["name"])] = err
                        b.errors.append(f"{r.key} {c['name']} rep {rep}: {err}")
                        print(f"FAILED {r.key} {c['name']}: {err}", file=sys.stderr)
                        continue
                    data[(r.key, c["name"])].append(res["ns"])
                    if res["stderr"]:
                        stderr_of[(r.key, c["name"])] = res["stderr"]
                    if any(t in ("--count=getppid", "--count=all") for t in (r.tool or [])):
                        want = a.n + a.warmup
                        got = res.get("counted")
                        if got != want:
                            checks[(r.key, c["name"])].append(
                                f"mantle counted {got} getppid calls, the guest made {want} "
                                f"(rep {rep})")
                    bad = int(res["header"].get("ppid_bad", "0"))
                    if bad:
                        checks[(r.key, c["name"])].append(
                            f"getppid returned {res['header'].get('ret')} (not the guest's parent "
                            f"per /proc) {bad} times in rep {rep}")
                    for comp in rows:
                        if comp.companion_of == r.key and "oneway" in res:
                            data[(comp.key, c["name"])].append(res["oneway"][a.warmup:])
                    print(f"rep {rep + 1}/{a.reps} {c['name']:9s} {r.key:15s} median "
                          f"{st.median(res['ns']):.0f} ns", file=sys.stderr, flush=True)
            finally:
                hold.__exit__()
    elapsed = time.time() - t_start
    load1 = open("/proc/loadavg").read().split()[:3]

    # Statistics.
    stats = {}
    for (k, cn), reps in data.items():
        if reps and all(len(x) for x in reps):
            stats[(k, cn)] = summarize(reps)
    for c in conds:
        cn = c["name"]
        pt = stats.get(("ptrace", cn))
        plain = stats.get(("getppid", cn))
        for r in rows:
            s = stats.get((r.key, cn))
            if not s:
                continue
            if pt and r.interposed and r.key != "ptrace":
                s["x_cheaper_than_ptrace"] = pt["median"] / s["median"]
                s["paired_ratio_range"] = [
                    min(p / q for p, q in zip(pt["rep_medians"], s["rep_medians"])),
                    max(p / q for p, q in zip(pt["rep_medians"], s["rep_medians"]))]
            if plain and r.interposed:
                s["over_plain"] = s["median"] - plain["median"]
                # rows that do not trap (a rewritten site, an in-process
                # call) are checked otherwise (the count they report)
                if s["median"] < 2 * plain["median"] and r.key not in NO_TRAP:
                    checks[(r.key, cn)].append(
                        "suspicious: median under 2x a plain getppid: is getppid really interposed?")

    # Tables.
    cdesc = {
        "1cpu": f"one CPU: everything on CPU {a.cpu_a}; cpu_dma_latency not held",
        "1cpu+dma": f"one CPU: everything on CPU {a.cpu_a}; cpu_dma_latency held at 0",
        "2cpu": f"across CPUs: guest on CPU {a.cpu_a}, tracer/executive/pipe peer on CPU {a.cpu_b}; "
                "cpu_dma_latency not held",
        "2cpu+dma": f"across CPUs: guest on CPU {a.cpu_a}, tracer/executive/pipe peer on CPU {a.cpu_b}; "
                    "cpu_dma_latency held at 0",
        "free": f"unpinned peer: guest on CPU {a.cpu_a}, tracer/executive/pipe peer allowed on CPUs "
                f"{a.cpu_a},{a.cpu_b} (placed by the scheduler; SYNC_WAKE_UP wakes the executive on "
                "the guest's CPU); cpu_dma_latency not held",
    }
    hdr = (f"{'row':35s} {'paper':>6s} {'mean':>7s} {'median':>7s} {'p99':>7s} {'max':>7s} "
           f"{'rep medians':>15s} {'ptrace/x':>8s} {'-plain':>7s}")
    for c in conds:
        cn = c["name"]
        say(f"== {cn}: {cdesc[cn]} ==")
        say(hdr)
        for r in rows:
            paper = fmt_ns(r.paper[1] / GHZ) if r.paper else ""
            why = avail[r.key] or failed.get((r.key, cn)) or failed.get((r.companion_of, cn))
            s = stats.get((r.key, cn))
            if why or not s:
                why = why or "no samples"
                if not why.startswith("not "):
                    why = "FAILED: " + why
                say(f"{r.label:35s} {paper:>6s} {why}")
                continue
            ratio = f"{s['x_cheaper_than_ptrace']:.2f}x" if "x_cheaper_than_ptrace" in s else ""
            spread = f"{fmt_ns(s['spread_lo'])}..{fmt_ns(s['spread_hi'])}"
            say(f"{r.label:35s} {paper:>6s} {fmt_ns(s['mean']):>7s} {fmt_ns(s['median']):>7s} "
                f"{fmt_ns(s['p99']):>7s} {fmt_ns(s['max']):>7s} {spread:>15s} {ratio:>8s} "
                f"{fmt_ns(s.get('over_plain')):>7s}")
            for note in dict.fromkeys(checks[(r.key, cn)]):
                say(f"{'':37s}! {note}")
        say()
    say("paper: the paper's Table 1 figure, cycles / 2.4 GHz, in ns (10000 runs, average); "
        "rep medians: min..max of the R repetition medians; ptrace/x: median(ptrace)/median(row), "
        "same condition; -plain: median minus the plain getppid median (the paper's "
        "'RPC Guest to Executive & back' is the protected/fast -plain)")
    say()
    say("bars (issue 10), per condition:")
    bars_out = []
    for key, against, need, how in BARS:
        for c in conds:
            cn = c["name"]
            s, o = stats.get((key, cn)), stats.get((against, cn))
            if s and o:
                ratio = o["median"] / s["median"]
                ok = ratio >= need if key != "ggrpc" else ratio > need
                verdict = "PASS" if ok else "MISS"
                if ok and any(x.startswith("suspicious") for x in checks[(key, cn)]):
                    verdict = "SUSPECT"  # passes only because nothing was interposed?
                text = f"{ratio:.2f}x (need {'>' if key == 'ggrpc' else '>='} {need}x) {verdict}"
            else:
                ratio, verdict = None, "n/a"
                missing = key if not s else against
                text = f"n/a: row {missing} " + ("not run (--rows)" if missing not in avail
                                                  else "not available" if avail.get(missing)
                                                  else "failed" if failed.get((missing, cn))
                                                  else "has no samples")
            bars_out.append({"row": key, "against": against, "condition": cn, "need": need,
                             "how": how, "ratio": ratio, "verdict": verdict})
            say(f"  {key:9s} vs {against:6s} {cn:9s} {text}")
    say()
    say("cost against the floor measured beside it (issue 29), median(row)/median(floor), "
        "per condition:")
    for key, floor, most, how in FLOOR_BARS:
        for c in conds:
            cn = c["name"]
            s, o = stats.get((key, cn)), stats.get((floor, cn))
            if s and o:
                ratio = s["median"] / o["median"]
                verdict = "PASS" if ratio <= most else "MISS"
                pr = [p / q for p, q in zip(s["rep_medians"], o["rep_medians"])]
                text = (f"{ratio:.2f}x (paired reps {min(pr):.2f}..{max(pr):.2f}; "
                        f"need <= {most}x) {verdict}")
            else:
                ratio, verdict, pr = None, "n/a", []
                text = "n/a: a row was not run or failed"
            bars_out.append({"row": key, "against": floor, "condition": cn, "most": most,
                             "how": how, "ratio": ratio, "verdict": verdict})
            say(f"  {key:18s} / {floor:17s} {cn:9s} {text}")
    say()
    say(f"elapsed {elapsed:.0f} s; load average at start {' '.join(load0)}, at end {' '.join(load1)}"
        + ("  (the machine was busy before the run: numbers are noisy)" if max(busy0.values()) > 15
           else ""))

    # Files.
    base = os.path.join(a.out, f"table1-{stamp}")
    with open(base + ".txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    js = {
        "command": cmdline, "date": stamp, "kernel": os.uname().release, "commit": git_desc(),
        "mantle": a.mantle, "n": a.n, "warmup": a.warmup, "reps": a.reps,
        "cpus": [a.cpu_a, a.cpu_b], "busy_before_pct": busy0, "cpuidle": idle, "load_start": load0, "load_end": load1,
        "cpu_dma_latency_before": dma0, "elapsed_s": elapsed, "ghz_paper": GHZ,
        "conditions": [dict(c, description=cdesc[c["name"]]) for c in conds],
        "rows": [], "bars": bars_out,
    }
    for r in rows:
        jr = {"key": r.key, "label": r.label, "mode": r.mode,
              "tool": r.tool, "paper_row": r.paper[0] if r.paper else None,
              "paper_cycles": r.paper[1] if r.paper else None,
              "paper_ns": r.paper[1] / GHZ if r.paper else None,
              "available": avail[r.key] is None, "reason": avail[r.key], "conditions": {}}
        for c in conds:
            cn = c["name"]
            s = stats.get((r.key, cn))
            jr["conditions"][cn] = {
                "argv": argv_of.get((r.key, cn)), "failed": failed.get((r.key, cn)),
                "checks": list(dict.fromkeys(checks[(r.key, cn)])),
                "stderr_tail": stderr_of.get((r.key, cn)), "stats": s}
        js["rows"].append(jr)
    with open(base + ".json", "w") as f:
        json.dump(js, f, indent=1)
    print(f"wrote {base}.txt and {base}.json", file=sys.stderr)
    plot(js, base + "." + a.plot_format, cmdline)
    shutil.rmtree(b.tmp, ignore_errors=True)
    return 1 if b.errors else 0


def plot(js, path, cmdline):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot skipped: matplotlib is not installed (python3 -m pip install matplotlib)",
              file=sys.stderr)
        return
    conds = [c["name"] for c in js["conditions"]]
    rows = js["rows"]
    fig, axes = plt.subplots(1, len(conds), figsize=(4.2 * len(conds), 6.5), sharey=True, squeeze=False)
    for ax, cn in zip(axes[0], conds):
        xs = range(len(rows))
        for i, r in enumerate(rows):
            s = r["conditions"][cn]["stats"]
            if s:
                ax.bar(i, s["median"], color="tab:orange" if r["key"] in ("protected", "protected_fifo", "fast", "fast_rewrite",
                                                         "fast_count", "fast_count_rewrite", "ggrpc")
                       else "tab:blue")
                ax.errorbar(i, s["median"], yerr=[[0], [s["p99"] - s["median"]]], color="black",
                            capsize=3, lw=1)
            else:
                ax.text(i, 30, "n/a", rotation=90, ha="center", va="bottom", fontsize=7, color="gray")
            if r["paper_ns"]:
                ax.plot(i, r["paper_ns"], marker="_", markersize=14, color="red", mew=2)
        ax.set_yscale("log")
        ax.set_ylim(10, None)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r["label"] for r in rows], rotation=75, ha="right", fontsize=7)
        ax.set_title(cn, fontsize=10)
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0][0].set_ylabel("ns per op (bar: median, whisker: p99; red: paper at 2.4 GHz)")
    fig.suptitle(f"Table 1 on this machine, {js['date']}\n{cmdline}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
