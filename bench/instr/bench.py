#!/usr/bin/env python3
"""Table 5.2 of Paper IV (Kagstrom, LOPI) on real C programs built from the
sources crates.io packages vendor, each run on real input: bzip2 1.0.8
(bzip2-sys) and libdeflate 1.x's gzip program (libdeflate-sys), each
compressing and decompressing a tar of /usr/include, and Lua 5.4.7
(lua-src, with luamain.c as the interpreter) running lua/fib.lua,
lua/binarytrees.lua and lua/strings.lua.

Methods, side by side in one run (each repetition runs every method once,
in turn), pinned with taskset to one CPU:
  base        gcc -O2, uninstrumented
  src         gcc -O2 -finstrument-functions (hooks in another unit)
  src-lto     the same with -flto, so the compiler may inline the hooks
  clang       clang -O2, uninstrumented (XRay's baseline)
  xray        clang -O2 -fxray-instrument, chosen functions always instrumented
  mantle      mantle instr on the .o files, --exit auto (call-through
              trampolines), ordinary C hooks
  mantle-fast the same with the hooks declared MANTLE_INSTR_FAST_HOOK
              (no_caller_saved_registers, -mgeneral-regs-only)
  mantle-pr   --exit patched-rets (patched rets where every exit is a
              movable ret, LOPI's return frames elsewhere), ordinary hooks
  mantle-rf   --exit return-frames (LOPI's design everywhere)
  mantle-linked  mantle instr on the linked program: base's objects linked
              with the hooks and libmantle_instr_rt.so, the executable
              rewritten (--exit auto, ordinary hooks)
  uprobes     base under bpftrace uprobe + uretprobe on the chosen functions
Every method runs the paper's instrumentation (hooks.c): read a 4-byte
value at entry, accumulate it at exit. The chosen functions are the ones
making up 80% of each program's samples in a `mantle prof` session of its
workloads (`mantle instr plan --from-prof SESSION --share 80`).

Needs root (mantle prof, bpftrace). Usage:
  flock /tmp/mantle-bench.lock bench/instr/bench.py [--reps N] [--mb N] [--cpu N] [--uprobe-reps N]
  bench/instr/bench.py --plot       # table52.png from results.json
  bench/instr/bench.py --markdown   # RESULTS.md's tables from results.json
  flock /tmp/mantle-bench.lock bench/instr/bench.py --cost [--reps N]   # only the per-call cost run
      (issue 35): fib(37) and SQLite with every function instrumented, empty hooks, every method
      (mantle ordinary/fast/no hooks, XRay, -finstrument-functions, uprobes on a smaller argument),
      CPU time of each run, rotated repetitions; prints the table and the bars (met/missed)
"""
import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "../.."))
OUT = os.path.join(HERE, "out")
MANTLE_VARIANTS = {  # name: (--exit, hooks.c mode, extra hook flags)
    "mantle": ("auto", "MODE_MANTLE", []),
    "mantle-fast": ("auto", "MODE_MANTLE_FAST", ["-mgeneral-regs-only"]),
    "mantle-pr": ("patched-rets", "MODE_MANTLE", []),
    "mantle-rf": ("return-frames", "MODE_MANTLE", []),
}


def sh(cmd, **kw):
    r = subprocess.run(cmd, shell=isinstance(cmd, str), capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"failed: {cmd}\n{r.stdout}\n{r.stderr}")
    return r


def vendored(pattern):
    subprocess.run(["cargo", "fetch", "--manifest-path", os.path.join(HERE, "vendor/Cargo.toml")], check=True,
                   capture_output=True)
    home = os.environ.get("CARGO_HOME", os.path.expanduser("~/.cargo"))
    d = sorted(glob.glob(f"{home}/registry/src/*/{pattern}"))
    if not d:
        sys.exit(f"{pattern} not found after cargo fetch")
    return d[0]


def programs(inp, inp_big):
    """name: (source files, compile flags, link libraries, workloads {name:
    (args, stdin)}). gzip runs 8 times the input: it is 8 times faster than
    bzip2. Lua runs three programs of bench/instr/lua/, each ~0.6 s
    uninstrumented, with luamain.c as the interpreter (lua-src vendors the
    library, not lua.c)."""
    bz = vendored("bzip2-sys-0.1.13*/bzip2-1.0.8")
    ld = vendored("libdeflate-sys-1.26.1/libdeflate")
    lua = vendored("lua-src-547.1.0/lua-5.4.7")
    lua_srcs = sorted(glob.glob(f"{lua}/*.c")) + [os.path.join(HERE, "luamain.c")]
    scripts = os.path.join(HERE, "lua")
    bz_units = ["blocksort", "huffman", "crctable", "randtable", "compress", "decompress", "bzlib", "bzip2"]
    ld_srcs = sorted(glob.glob(f"{ld}/lib/*.c")) + [f"{ld}/lib/x86/cpu_features.c"] + [
        f"{ld}/programs/{u}.c" for u in ("gzip", "prog_util", "tgetopt")]
    return {
        "bzip2": ([f"{bz}/{u}.c" for u in bz_units], ["-D_FILE_OFFSET_BITS=64"], [],
                  {"compress": (["-9", "-c"], inp), "decompress": (["-d", "-c"], inp + ".bz2")}),
        "gzip": (ld_srcs, [f"-I{ld}", f"-I{ld}/programs"], [],
                 {"compress": (["-6", "-c"], inp_big), "decompress": (["-d", "-c"], inp_big + ".gz")}),
        "lua": (lua_srcs, ["-DLUA_USE_LINUX", f"-I{lua}"], ["-lm"],
                {"fib": ([f"{scripts}/fib.lua", "35"], "/dev/null"),
                 "binarytrees": ([f"{scripts}/binarytrees.lua", "13"], "/dev/null"),
                 "strings": ([f"{scripts}/strings.lua", "10"], "/dev/null")}),
    }


def build(prog, name, cc, cflags, srcs, pflags, hooks=None, hook_flags=(), ldflags=(), objs=None, libs=()):
    d = os.path.join(OUT, prog, name)
    os.makedirs(d, exist_ok=True)
    if objs is None:
        objs = []
        for s in srcs:
            o = os.path.join(d, os.path.basename(s)[:-2] + ".o")
            sh([cc, *cflags, *pflags, "-w", "-c", s, "-o", o])
            objs.append(o)
    extra = []
    if hooks:
        o = os.path.join(d, "hooks.o")
        sh([cc, "-O2", *hook_flags, f"-I{ROOT}/crates/instr-rt/include", "-c", os.path.join(HERE, "hooks.c"),
            "-o", o])
        extra.append(o)
    exe = os.path.join(d, prog)
    sh([cc, *cflags, *objs, *extra, "-o", exe, *ldflags, *libs])
    return exe


def timed(cmd, stdin_path, cpu, env=None):
    with open(stdin_path, "rb") as f:
        t0 = time.perf_counter()
        r = subprocess.run(["taskset", "-c", str(cpu), *cmd], stdin=f, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=env)
        t = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"{cmd} failed: {r.stderr.decode()[:500]}")
    return t, r.stdout, r.stderr.decode()


def choose(mantle, prog, base, base_objs, workloads):
    """The functions making up 80% of the program's samples in a mantle prof
    session of its workloads, as `mantle instr plan --from-prof` chooses."""
    session = os.path.join(OUT, prog, "session.prof")
    script = "; ".join(f"{base} {' '.join(args)} < {path} > /dev/null" for args, path in workloads.values())
    sh(["flock", "/run/mantle-kernel.lock", mantle, "prof", "record", "-q", "-F", "10000", "--stacks", "none",
        "-f", "-o", session, "--", "sh", "-c", script])
    hot, note = [], ""
    for o in base_objs:
        r = sh([mantle, "instr", "plan", o, "--from-prof", session, "--share", "80", "--json"])
        hot += [f["name"] for f in json.loads(r.stdout)["functions"]]
        note = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else note
    return hot, note


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--mb", type=int, default=4, help="input size in MiB")
    ap.add_argument("--cpu", type=int, default=1)
    ap.add_argument("--no-uprobes", action="store_true")
    ap.add_argument("--uprobe-reps", type=int, default=1000,
                    help="run uprobes in the first N repetitions only (it is 100-1000 times slower)")
    ap.add_argument("--only", help="one program (bzip2, gzip or lua)")
    ap.add_argument("--micro-only", action="store_true", help="only micro.c; the programs' rows stay")
    ap.add_argument("--cost", action="store_true",
                    help="only the per-call cost run (issue 35: fib and sqlite --all, empty hooks; a few minutes); "
                         "the other rows stay")
    ap.add_argument("--cost-programs", default="fib,sqlite",
                    help="the cost run's programs (comma-separated; the first SQLite run compiles it four times)")
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    # The rewriter's speed does not matter: its debug build; the runtime's
    # does: release.
    # MANTLE=path uses a mantle already built (any profile) instead.
    mantle = os.environ.get("MANTLE")
    if not mantle:
        sh(["cargo", "build", "-p", "mantle-cli"], cwd=ROOT)
        mantle = os.path.join(ROOT, "target/debug/mantle")
    sh(["cargo", "build", "--release", "-p", "mantle-instr-rt"], cwd=ROOT)
    rt = os.path.join(ROOT, "target/release/libmantle_instr_rt.a")

    # The input: real files, deterministic order.
    inp = os.path.join(OUT, "input.tar")
    inp_big = os.path.join(OUT, "input-x8.tar")
    for path, size in ((inp, a.mb << 20), (inp_big, 8 * a.mb << 20)):
        if not os.path.exists(path) or os.path.getsize(path) != size:
            sh(f"tar --sort=name -cf - -C /usr include 2>/dev/null | head -c {size} > {path}")
    if a.cost:
        old = json.load(open(os.path.join(HERE, "results.json")))
        new = cost_bench(a, mantle, rt)
        # Programs not run this time (--cost-programs) keep their last
        # rows, each with the date and load of its own run.
        for p, v in old.get("cost", {}).get("programs", {}).items():
            new["programs"].setdefault(p, v)
        old["cost"] = new
        old["cost_command"] = "flock /tmp/mantle-bench.lock bench/instr/bench.py " + " ".join(sys.argv[1:])
        json.dump(old, open(os.path.join(HERE, "results.json"), "w"), indent=1)
        cost_markdown(old)
        return
    if a.micro_only:
        old = json.load(open(os.path.join(HERE, "results.json")))
        old["micro"] = micro_bench(a, mantle, rt)
        old["micro_command"] = "flock /tmp/mantle-bench.lock bench/instr/bench.py " + " ".join(sys.argv[1:])
        json.dump(old, open(os.path.join(HERE, "results.json"), "w"), indent=1)
        return
    progs = programs(inp, inp_big)
    res = dict(cpu=a.cpu, reps=a.reps, uprobe_reps=min(a.reps, a.uprobe_reps), mb=a.mb, programs={}, rows=[],
               command="flock /tmp/mantle-bench.lock bench/instr/bench.py " + " ".join(sys.argv[1:]))
    if a.only:
        # One program again: the other's rows stay as the last run left them.
        progs = {a.only: progs[a.only]}
        old = json.load(open(os.path.join(HERE, "results.json")))
        res["programs"] = {p: v for p, v in old["programs"].items() if p != a.only}
        res["rows"] = [r for r in old["rows"] if r["program"] != a.only]
        res["micro"] = old.get("micro")
        res["command"] = old["command"] + " ; then " + res["command"]
    for prog, (srcs, pflags, libs, workloads) in progs.items():
        res["programs"][prog] = run_program(a, mantle, rt, prog, srcs, pflags, libs, workloads, res["rows"])
    if not a.only:
        res["micro"] = micro_bench(a, mantle, rt)
    json.dump(res, open(os.path.join(HERE, "results.json"), "w"), indent=1)
    plot(res)


def run_program(a, mantle, rt, prog, srcs, pflags, libs, workloads, rows):
    def b(name, cc, cflags, **kw):
        return build(prog, name, cc, cflags, srcs, pflags, libs=libs, **kw)

    base = b("base", "gcc", ["-O2"])
    base_objs = [os.path.join(OUT, prog, "base", os.path.basename(s)[:-2] + ".o") for s in srcs]
    if "decompress" in workloads:
        inp = workloads["compress"][1]
        packed = workloads["decompress"][1]
        if not os.path.exists(packed) or os.path.getmtime(packed) < os.path.getmtime(inp):
            sh(f"{base} -9 -c < {inp} > {packed}")
    hot, note = choose(mantle, prog, base, base_objs, workloads)
    print(f"{prog}: chosen by mantle prof ({note}): {' '.join(hot)}")
    names = set()
    for o in base_objs:
        for line in sh(["nm", o]).stdout.splitlines():
            p = line.split()
            if len(p) == 3 and p[1] in "tT":
                names.add(p[2])
    cold = sorted(n for n in names - set(hot) if not any(n in h for h in hot))
    hotfile = os.path.join(OUT, prog, "hot.txt")
    open(hotfile, "w").write("\n".join(hot) + "\n")

    exes = {"base": base}
    excl_flag = "-finstrument-functions-exclude-function-list=" + ",".join(cold)
    exes["src"] = b("src", "gcc", ["-O2", "-finstrument-functions", excl_flag], hooks=True, hook_flags=["-DMODE_CYG"])
    exes["src-lto"] = b("src-lto", "gcc", ["-O2", "-flto", "-finstrument-functions", excl_flag], hooks=True,
                        hook_flags=["-DMODE_CYG", "-flto"])
    lto_calls = sh(f"objdump -d {exes['src-lto']} | grep -c 'call.*__cyg_profile_func' || true").stdout.strip()
    exes["clang"] = b("clang", "clang", ["-O2"])
    xl = os.path.join(OUT, prog, "xray-always.txt")
    # clang names no clones: gcc's sweepstep.constprop.0 is clang's sweepstep.
    open(xl, "w").write("".join(f"fun:{h.split('.')[0]}\n" for h in hot))
    xf = ["-O2", "-fxray-instrument", "-fxray-instruction-threshold=1000000", f"-fxray-always-instrument={xl}"]
    exes["xray"] = b("xray", "clang", xf, hooks=True, hook_flags=["-DMODE_XRAY"])
    info = dict(chosen=hot, prof=note, src_lto_hook_calls=lto_calls, mantle={})
    for variant, (exit_mode, hook_mode, hook_flags) in MANTLE_VARIANTS.items():
        d = os.path.join(OUT, prog, variant)
        os.makedirs(d, exist_ok=True)
        mp = os.path.join(d, "map.tsv")
        if os.path.exists(mp):
            os.remove(mp)
        objs, refused, exits = [], [], {}
        for o in base_objs:
            n = os.path.join(d, os.path.basename(o))
            r = json.loads(sh([mantle, "instr", "rewrite", o, "-o", n, "--functions-from", hotfile, "--map", mp,
                               "--exit", exit_mode, "--json"]).stdout)
            refused += [f"{f['name']} ({f['reason']['kind']})" for f in r["functions"] if f["status"] == "refused"]
            for f in r["functions"]:
                if f["status"] == "instrumented":
                    exits[f["exit"]] = exits.get(f["exit"], 0) + 1
            objs.append(n)
        exes[variant] = b(variant, "gcc", ["-O2"], objs=objs, hooks=True, hook_flags=[f"-D{hook_mode}", *hook_flags],
                          ldflags=[rt, "-lpthread"])
        info["mantle"][variant] = dict(refused=refused, exits=exits)
        print(f"  {variant} (--exit {exit_mode}): exits {exits}, refused: {refused or 'none'}")
    exes["mantle-linked"], info["mantle"]["mantle-linked"] = linked_rewrite(mantle, rt, prog, b, base_objs, hotfile)
    print(f"  src-lto hook calls left: {lto_calls}")

    # Same output everywhere; calls as the hooks count them.
    ref = {w: timed([base, *args], path, a.cpu)[1] for w, (args, path) in workloads.items()}
    calls = {}
    for m, exe in exes.items():
        for w, (args, path) in workloads.items():
            _, out, err = timed([exe, *args], path, a.cpu, dict(os.environ, BENCH_CALLS="1"))
            if out != ref[w]:
                sys.exit(f"{prog} {m} {w}: output differs from the uninstrumented program")
            for line in err.splitlines():
                if line.startswith("bench-calls "):
                    calls[(m, w)] = int(line.split()[1])

    methods = list(exes) + ([] if a.no_uprobes else ["uprobes"])
    times = {(m, w): [] for m in methods for w in workloads}
    spec = ",".join(f'uprobe:{base}:"{h}"' for h in hot)
    rspec = ",".join(f'uretprobe:{base}:"{h}"' for h in hot)
    prog_bt = f"{spec} {{ @s[tid] = nsecs; @n = count(); }} {rspec} {{ @a += nsecs - @s[tid]; }}"
    for rep in range(a.reps):
        for m in methods:
            for w, (args, path) in workloads.items():
                if m == "uprobes" and rep >= a.uprobe_reps:
                    continue
                if m == "uprobes":
                    t, out = uprobe_run(prog_bt, [base, *args], path, a.cpu, calls, (m, w))
                    if out != ref[w]:
                        sys.exit("uprobes: output differs")
                else:
                    t, _, _ = timed([exes[m], *args], path, a.cpu)
                times[(m, w)].append(t)
        print(f"  {prog}: repetition {rep + 1}/{a.reps} done", file=sys.stderr)

    what = " ".join(os.path.basename(args[0]) for args, _ in workloads.values()) if prog == "lua" else \
        f"input {os.path.getsize(workloads['compress'][1]) >> 20} MiB of /usr/include (tar)"
    print(f"\n{prog}, {what}, taskset -c {a.cpu}, {a.reps} repetitions (uprobes {min(a.reps, a.uprobe_reps)}), "
          "median [min-max] seconds; ratio to the method's baseline (clang for xray, gcc for the rest)")
    print(f"{'workload':<11}{'method':<14}{'median s':>10}{'min':>8}{'max':>8}{'ratio':>8}{'calls':>12}"
          f"{'ns/call':>9}{'min-ratio':>10}{'ns/call(min)':>13}")
    for w in workloads:
        for m in methods:
            ts = times[(m, w)]
            med = statistics.median(ts)
            bm = "clang" if m == "xray" else "base"
            bmed = statistics.median(times[(bm, w)])
            c = calls.get((m, w)) or calls.get(("mantle", w))
            timed_m = m not in ("base", "clang")
            per = (med - bmed) / c * 1e9 if c and timed_m else None
            # Minimum against minimum: the least disturbed run of each
            # (the machine is shared; medians carry other engineers' load).
            bmin = min(times[(bm, w)])
            per_min = (min(ts) - bmin) / c * 1e9 if c and timed_m else None
            # Paired: each repetition's time over its own baseline run (run
            # seconds apart, so a slow phase of the machine hits both).
            paired = statistics.median(t / b for t, b in zip(ts, times[(bm, w)]))
            rows.append(dict(program=prog, workload=w, method=m, median=med, min=min(ts), max=max(ts),
                             ratio=med / bmed, min_ratio=min(ts) / bmin, paired_ratio=paired, calls=c,
                             ns_per_call=per,
                             ns_per_call_min=per_min, times=ts))
            print(f"{w:<11}{m:<14}{med:>10.3f}{min(ts):>8.3f}{max(ts):>8.3f}{med / bmed:>8.3f}"
                  f"{(c or 0):>12}{(f'{per:.1f}' if per is not None else '-'):>9}"
                  f"{min(ts) / bmin:>10.3f}{(f'{per_min:.1f}' if per_min is not None else '-'):>13}")
    return info


def linked_rewrite(mantle, rt, prog, b, base_objs, hotfile):
    """mantle on the linked program: the baseline's own objects linked with
    hooks.c (ordinary hooks) and the shared runtime, the executable then
    rewritten (stubs in new segments, libmantle_instr_rt.so a DT_NEEDED bound
    by ld.so; docs/instr.md "Linked executables and shared libraries"),
    the same functions as the .o rows, --exit auto."""
    rtdir = os.path.dirname(rt)
    hooked = b("mantle-linked", "gcc", ["-O2"], objs=base_objs, hooks=True, hook_flags=["-DMODE_MANTLE"],
               ldflags=[f"-L{rtdir}", "-lmantle_instr_rt", f"-Wl,-rpath,{rtdir}"])
    exe = hooked + ".instr"
    r = json.loads(sh([mantle, "instr", "rewrite", hooked, "-o", exe, "--functions-from", hotfile, "--map",
                       os.path.join(os.path.dirname(hooked), "map.tsv"), "--runtime",
                       os.path.join(rtdir, "libmantle_instr_rt.so"), "--json"]).stdout)
    refused = [f"{f['name']} ({f['reason']['kind']})" for f in r["functions"] if f["status"] == "refused"]
    exits = {}
    for f in r["functions"]:
        if f["status"] == "instrumented":
            exits[f["exit"]] = exits.get(f["exit"], 0) + 1
    print(f"  mantle-linked (linked {prog}, --exit auto): exits {exits}, refused: {refused or 'none'}")
    return exe, dict(refused=refused, exits=exits)


def uprobe_run(prog_bt, cmd, path, cpu, calls, key):
    probe = subprocess.Popen(["bpftrace", "-e", prog_bt], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    line = ""
    while "Attaching" not in line:
        line = probe.stdout.readline()
        if not line and probe.poll() is not None:
            sys.exit("bpftrace failed to attach")
    time.sleep(0.5)
    t, out, _ = timed(cmd, path, cpu)
    probe.send_signal(2)
    for l in probe.communicate()[0].splitlines():
        if l.startswith("@n:"):
            calls[key] = int(l.split()[1])
    return t, out


def uprobe_cost_run(bt, cmd, cpu, env):
    """Runs cmd pinned under bpftrace's `-c` (split at spaces, no shell;
    bpftrace starts it once every
    probe is attached, and stops at its exit): the program's CPU time
    (user + system: the uprobe traps run in its context, as /usr/bin/time
    reports them) and the count bpftrace printed, or None."""
    with tempfile.NamedTemporaryFile("r", prefix="mantle-uprobe-", suffix=".time") as tf:
        p = subprocess.run(["bpftrace", "-e", bt, "-c",
                            " ".join(["/usr/bin/time", "-o", tf.name, "-f", "%U,%S", "taskset", "-c", str(cpu),
                                        *cmd])], capture_output=True, text=True, env=env)
        n = [int(l.split()[1]) for l in p.stdout.splitlines() if l.startswith("@n:")]
        lines = tf.read().strip().splitlines()
        times = lines[-1].split(",") if lines else []
    if not n or len(times) < 2:
        print(p.stderr[-500:], file=sys.stderr)
        return None
    return dict(calls=n[0], cpu_s=float(times[-2]) + float(times[-1]))


def micro_bench(a, mantle, rt):
    """work() called 20M times: uninstrumented, and each exit design.
    Returns ns per call over the baseline."""
    d = os.path.join(OUT, "micro")
    os.makedirs(d, exist_ok=True)
    obj = os.path.join(d, "micro.o")
    sh(["gcc", "-O2", "-c", os.path.join(HERE, "micro.c"), "-o", obj])
    exes = {"base": os.path.join(d, "base")}
    sh(["gcc", obj, "-o", exes["base"]])
    exits = {}
    for variant, (mode, hook_mode, hook_flags) in MANTLE_VARIANTS.items():
        o = os.path.join(d, f"micro-{variant}.o")
        r = json.loads(sh([mantle, "instr", "rewrite", obj, "-o", o, "-f", "work", "--exit", mode, "--json"]).stdout)
        exits[variant] = r["functions"][0].get("exit")
        hooks = os.path.join(d, f"hooks-{variant}.o")
        sh(["gcc", "-O2", f"-D{hook_mode}", *hook_flags, f"-I{ROOT}/crates/instr-rt/include", "-c",
            os.path.join(HERE, "hooks.c"), "-o", hooks])
        exes[variant] = os.path.join(d, variant)
        sh(["gcc", o, hooks, rt, "-lpthread", "-o", exes[variant]])
    # The default when nothing is set: trampolines, no hooks, no output
    # asked for (the tracer does not run; it did before issue 35, 26x).
    exes["mantle-nohooks"] = os.path.join(d, "mantle-nohooks")
    exits["mantle-nohooks"] = exits.get("mantle")
    sh(["gcc", os.path.join(d, "micro-mantle.o"), rt, "-lpthread", "-o", exes["mantle-nohooks"]])
    n = 20_000_000
    times = {m: [] for m in exes}
    for _ in range(a.reps):
        for m in times:
            t0 = time.perf_counter()
            sh(["taskset", "-c", str(a.cpu), exes[m], str(n)])
            times[m].append(time.perf_counter() - t0)
    base = statistics.median(times["base"])
    out = {}
    print(f"\nmicro: work() x {n}, taskset -c {a.cpu}, {a.reps} repetitions (median [min-max] s, ns/call over base)")
    for m, ts in times.items():
        med = statistics.median(ts)
        per = (med - base) / n * 1e9
        per_min = (min(ts) - min(times["base"])) / n * 1e9
        out[m] = dict(median=med, min=min(ts), max=max(ts), ns_per_call=per, ns_per_call_min=per_min,
                      exit=exits.get(m), times=ts)
        print(f"  {m:<14} {med:7.3f} [{min(ts):.3f}-{max(ts):.3f}]  {per:6.1f} ns/call (min: {per_min:5.1f})"
              f"  exit: {exits.get(m, '-')}")
    return out


COST_METHODS = {  # name: (compiler, extra compile flags on the instrumented unit, empty_hooks.c mode, hook flags)
    "src": ("gcc", ["-finstrument-functions"], "MODE_CYG", []),
    "xray": ("clang", ["-fxray-instrument", "-fxray-instruction-threshold=1"], "MODE_XRAY", []),
    "mantle": ("gcc", [], "MODE_MANTLE", []),
    "mantle-fast": ("gcc", [], "MODE_MANTLE_FAST", ["-mgeneral-regs-only"]),
    "mantle-nohooks": ("gcc", [], "MODE_NONE", []),
}


def cpu_run(cmd, cpu, env=None):
    """Runs cmd pinned: (stdout, stderr). The caller takes its CPU time
    (user + system, from the children's rusage): not wall time, since the
    machine is shared and a run that waits for the CPU does not count the
    wait."""
    p = subprocess.Popen(["taskset", "-c", str(cpu), *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env)
    out, err = p.communicate()
    if p.returncode != 0:
        sys.exit(f"{cmd} failed: {err.decode()[:500]}")
    return out, err.decode()


def unit_functions(obj):
    """The functions an object defines (nm: t/T symbols), which are the
    ones of the linked program that come from it; not GCC's `.cold`
    parts (jumped to, never called)."""
    out = sh(["nm", "--defined-only", obj]).stdout
    return sorted({l.split()[2] for l in out.splitlines()
                   if len(l.split()) == 3 and l.split()[1] in "tT" and not l.split()[2].endswith(".cold")})


def cost_bench(a, mantle, rt):
    """Per-call cost with empty hooks, every method side by side (issue 35):
    fib(37) (bench/instr/fib.c) and the SQLite amalgamation with every
    function instrumented (--all) under sqlmain.c. Returns the results."""
    import resource
    d = os.path.join(OUT, "cost")
    os.makedirs(d, exist_ok=True)
    sq = vendored("libsqlite3-sys-0.30.1/sqlite3")
    inc = f"-I{ROOT}/crates/instr-rt/include"
    sqf = ["-DSQLITE_THREADSAFE=0", "-DSQLITE_OMIT_LOAD_EXTENSION"]
    # name: (instrumented unit, driver unit or None, unit flags, argument, uprobes argument)
    progs = {"fib": (os.path.join(HERE, "fib.c"), None, [], "37", "27"),
             "sqlite": (f"{sq}/sqlite3.c", os.path.join(HERE, "sqlmain.c"), sqf, "20000", "300")}

    def cc(compiler, flags, src, obj):
        # Cached: the amalgamation takes a minute of CPU per compiler.
        if not os.path.exists(obj) or os.path.getmtime(obj) < os.path.getmtime(src):
            sh([compiler, *flags, "-w", "-c", src, "-o", obj])
        return obj

    res = dict(cpu=a.cpu, reps=a.reps, programs={})
    chosen = a.cost_programs.split(",")
    for prog, (unit, driver, uflags, arg, uarg) in progs.items():
        if prog not in chosen:
            continue
        pd = os.path.join(d, prog)
        os.makedirs(pd, exist_ok=True)
        drv = {c: [cc(c, ["-O2", f"-I{sq}"], driver, os.path.join(pd, f"driver-{c}.o"))] if driver else []
               for c in ("gcc", "clang")}
        gobj = cc("gcc", ["-O2", *uflags], unit, os.path.join(pd, "unit-gcc.o"))
        exes = {"base": os.path.join(pd, "base"), "clang": os.path.join(pd, "clang")}
        sh(["gcc", gobj, *drv["gcc"], "-o", exes["base"], "-lm"])
        sh(["clang", cc("clang", ["-O2", *uflags], unit, os.path.join(pd, "unit-clang.o")), *drv["clang"],
            "-o", exes["clang"], "-lm"])
        info = {}
        for m, (compiler, cflags, mode, hflags) in COST_METHODS.items():
            hooks = os.path.join(pd, f"hooks-{m}.o")
            sh([compiler, "-O2", f"-D{mode}", *hflags, inc, "-c", os.path.join(HERE, "empty_hooks.c"), "-o", hooks])
            if m.startswith("mantle"):
                obj = os.path.join(pd, "unit-mantle.o")
                r = json.loads(sh([mantle, "instr", "rewrite", gobj, "-o", obj, "--all", "--json"]).stdout)
                info = dict(instrumented=r["instrumented"], refused=r["refused"])
                link = ["gcc", obj, *drv["gcc"], hooks, rt, "-lpthread", "-lm"]
            else:
                obj = cc(compiler, ["-O2", *uflags, *cflags], unit, os.path.join(pd, f"unit-{m}.o"))
                link = [compiler, *(cflags[:1] if m == "xray" else []), obj, *drv[compiler], hooks, "-lm"]
            exes[m] = os.path.join(pd, m)
            sh([*link, "-o", exes[m]])
        ref = cpu_run([exes["base"], arg], a.cpu)[0]
        calls = {}
        for m in COST_METHODS:
            out, err = cpu_run([exes[m], arg], a.cpu, dict(os.environ, BENCH_CALLS="1"))
            if out != ref:
                sys.exit(f"cost {prog} {m}: output differs from the uninstrumented program")
            calls[m] = next(int(l.split()[1]) for l in err.splitlines() if l.startswith("bench-calls "))
        times = {m: [] for m in exes}
        for rep in range(a.reps):
            # Rotated: each repetition starts with a different method.
            order = list(exes)[rep % len(exes):] + list(exes)[:rep % len(exes)]
            for m in order:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu_run([exes[m], arg], a.cpu)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                times[m].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            print(f"  cost {prog}: repetition {rep + 1}/{a.reps} done", file=sys.stderr)
        rows = {}
        for m in COST_METHODS:
            base = times["clang" if m == "xray" else "base"]
            per = [(t - b) / calls[m] * 1e9 for t, b in zip(times[m], base)]
            rows[m] = dict(calls=calls[m], ns_per_call=statistics.median(per), ns_min=min(per), ns_max=max(per),
                           times=times[m])
        for b in ("base", "clang"):
            rows[b] = dict(times=times[b])
        up = None
        if shutil.which("bpftrace") and not a.no_uprobes:
            # 2.7-6.6 us a call: a smaller argument, one run, over the base's
            # CPU time at that argument.
            # The instrumented unit's functions by name: a wildcard also
            # matches the C start files' size-0 symbols (register_tm_clones),
            # which bpftrace refuses ("Offset outside the function bounds").
            fns = unit_functions(gobj)
            bt = (",".join(f'uprobe:{exes["base"]}:"{f}"' for f in fns) + " { @n = count(); } "
                  + ",".join(f'uretprobe:{exes["base"]}:"{f}"' for f in fns) + " { }")
            # bpftrace attaches at most 512 probes unless told (SQLite has
            # about 1,500 functions, two probes each).
            env = dict(os.environ, BPFTRACE_MAX_PROBES="100000")
            up = uprobe_cost_run(bt, [exes["base"], uarg], a.cpu, env)
            if up is None:
                print(f"  cost {prog}: uprobes not measured (bpftrace printed no count)", file=sys.stderr)
            else:
                tb = []
                for _ in range(3):
                    before = resource.getrusage(resource.RUSAGE_CHILDREN)
                    cpu_run([exes["base"], uarg], a.cpu)
                    after = resource.getrusage(resource.RUSAGE_CHILDREN)
                    tb.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
                up.update(arg=uarg, functions=len(fns), base_cpu_s=statistics.median(tb))
                up["ns_per_call"] = (up["cpu_s"] - up["base_cpu_s"]) / up["calls"] * 1e9
        rows["uprobes"] = up
        res["programs"][prog] = dict(arg=arg, rows=rows, mantle=info, reps=a.reps,
                                     date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                     load=os.getloadavg()[0])
    return res


def cost_markdown(res):
    c = res.get("cost")
    if not c:
        return
    ms = ["mantle", "mantle-fast", "mantle-nohooks", "xray", "src"]
    names = {"mantle": "mantle, ordinary empty C hooks", "mantle-fast": "mantle, fast hooks",
             "mantle-nohooks": "mantle, no hooks (the default)", "xray": "XRay, patched, empty handler",
             "src": "gcc -finstrument-functions, empty hooks", "uprobes": "uprobes + uretprobes (bpftrace, one run)"}
    progs = list(c["programs"])
    print(f"\nCost per call, empty hooks (CPU time, taskset -c {c['cpu']}, {c['reps']} rotated repetitions; "
          "median [min-max] over repetitions of (time - same repetition's baseline) / calls)\n")
    for p in progs:
        q = c["programs"][p]
        if "date" in q:
            print(f"{p}: run ending {q['date']}, {q['reps']} repetitions, load average {q['load']:.1f}")
    print()
    print("| method | " + " | ".join(f"{p} ({c['programs'][p]['arg']}), ns per call | calls" for p in progs)
          + " |\n|---|" + "---|---|" * len(progs))
    for m in ms + ["uprobes"]:
        cells = []
        for p in progs:
            r = c["programs"][p]["rows"].get(m)
            if not r:
                cells += ["not run", ""]
            elif m == "uprobes":
                cells += [f"{r['ns_per_call']:.0f} (CPU, one run, argument {r['arg']}, {r['functions']} functions)",
                          str(r["calls"])]
            else:
                cells += [f"{r['ns_per_call']:.1f} [{r['ns_min']:.1f}-{r['ns_max']:.1f}]", str(r["calls"])]
        print(f"| {names[m]} | " + " | ".join(cells) + " |")
    print("\n| bar (issue 35) | " + " | ".join(progs) + " |\n|---|" + "---|" * len(progs))
    bars = [("ordinary empty C hooks at most 5 ns a call", lambda r: r["mantle"]["ns_per_call"] <= 5.0,
             lambda r: f"{r['mantle']['ns_per_call']:.1f} ns"),
            ("ordinary hooks below XRay's patched cost", lambda r: r["mantle"]["ns_per_call"] < r["xray"]["ns_per_call"],
             lambda r: f"{r['mantle']['ns_per_call']:.1f} vs {r['xray']['ns_per_call']:.1f} ns"),
            ("fast hooks at most 3 ns a call", lambda r: r["mantle-fast"]["ns_per_call"] <= 3.0,
             lambda r: f"{r['mantle-fast']['ns_per_call']:.1f} ns"),
            ("no hooks cost no more than empty hooks",
             lambda r: r["mantle-nohooks"]["ns_per_call"] <= r["mantle"]["ns_per_call"],
             lambda r: f"{r['mantle-nohooks']['ns_per_call']:.1f} vs {r['mantle']['ns_per_call']:.1f} ns")]
    for name, ok, show in bars:
        cells = []
        for p in progs:
            r = c["programs"][p]["rows"]
            cells.append(f"{'met' if ok(r) else 'missed'} ({show(r)})")
        print(f"| {name} | " + " | ".join(cells) + " |")


def paired_ratio(res, c, m):
    """The median over repetitions of each run's time over the same
    repetition's baseline run (program, workload) c; None without a row m
    (a method added after the program's rows were measured)."""
    row = lambda meth: next((r for r in res["rows"] if (r["program"], r["workload"]) == c
                             and r["method"] == meth), None)
    if row(m) is None:
        return None
    base = row("clang" if m == "xray" else "base")["times"]
    return statistics.median(t / b for t, b in zip(row(m)["times"], base))


def plot(res):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cols = list(dict.fromkeys((r["program"], r["workload"]) for r in res["rows"]))
    ms = [m for m in dict.fromkeys(r["method"] for r in res["rows"]) if m not in ("base", "clang")]
    fig, ax = plt.subplots(figsize=(max(10, 1.7 * len(cols)), 4.8))
    width = 0.8 / len(ms)
    for i, m in enumerate(ms):
        ys = [paired_ratio(res, c, m) or 0 for c in cols]
        ax.bar([j + i * width for j in range(len(cols))], ys, width, label=m)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cols))], [f"{p} {w}" for p, w in cols])
    ax.set_ylabel("execution time / uninstrumented")
    ax.set_yscale("log")
    ax.set_title(f"Table 5.2: 80% of samples by mantle prof, taskset -c {res['cpu']}, "
                 f"paired ratio, median of {res['reps']} (uprobes: {res.get('uprobe_reps', res['reps'])})")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "table52.png"), dpi=120)


LABELS = {"base": "gcc -O2", "src": "-finstrument-functions", "src-lto": "... -flto (hooks inlined)",
          "clang": "clang -O2", "xray": "XRay", "mantle": "mantle .o, trampolines, ordinary hooks",
          "mantle-fast": "mantle .o, trampolines, fast hooks", "mantle-pr": "mantle .o, patched rets",
          "mantle-rf": "mantle .o, return frames",
          "mantle-nohooks": "mantle .o, trampolines, no hooks (the default)", "mantle-linked": "mantle linked, trampolines, ordinary hooks",
          "uprobes": "uprobes + uretprobes (bpftrace)"}


def f(x, fmt):
    return "" if x is None else format(x, fmt)


def markdown(res):
    """RESULTS.md's tables from results.json: one per program and workload."""
    for c in dict.fromkeys((r["program"], r["workload"]) for r in res["rows"]):
        rows = [r for r in res["rows"] if (r["program"], r["workload"]) == c]
        print(f"\n| {c[0]} {c[1]} | median s | min | max | paired ratio | min-ratio | calls | ns/call (median) "
              "| ns/call (min) |\n|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            n = len(r["times"])
            paired = "" if r["method"] == "clang" else f"{paired_ratio(res, c, r['method']):.3f}"
            calls = "" if r["method"] in ("base", "clang") else r["calls"] or ""
            # Per call over a few thousand calls is noise over calls: left out.
            many = bool(calls) and calls >= 100_000
            print(f"| {LABELS.get(r['method'], r['method'])}{f' ({n} run)' if n == 1 else ''} | {r['median']:.3f} "
                  f"| {r['min']:.3f} | {r['max']:.3f} | {paired} | {r['min_ratio']:.3f} | {calls} "
                  f"| {f(r['ns_per_call'], '.1f') if many else ''} | {f(r['ns_per_call_min'], '.1f') if many else ''} |")
    bars(res)


def bars(res):
    """The issue's bars, on the workloads whose chosen functions are called
    at least 100,000 times (the rest measure noise): paired ratios, and
    each mantle row's ratio over source-level (non-inlined) instrumentation's."""
    ms = ["src", "xray", "mantle", "mantle-fast", "mantle-linked", "uprobes"]
    print("\n| workload | " + " | ".join(LABELS[m] for m in ms) + " | mantle / src | mantle-fast / src "
          "| mantle-linked / src |\n|" + "---|" * (len(ms) + 4))
    over = {m: [] for m in ("mantle", "mantle-fast", "mantle-linked")}
    for c in dict.fromkeys((r["program"], r["workload"]) for r in res["rows"]):
        calls = next(r["calls"] for r in res["rows"] if (r["program"], r["workload"]) == c and r["method"] == "base")
        if not calls or calls < 100_000:
            continue
        p = {m: paired_ratio(res, c, m) for m in ms}
        for m in over:
            over[m].append(p[m] / p["src"] if p[m] else None)
        print(f"| {c[0]} {c[1]} | " + " | ".join(f(p[m], ".3f") for m in ms) + " | "
              + " | ".join(f(over[m][-1], ".2f") for m in over) + " |")
    print("| average | " + " |" * len(ms) + " " + " | ".join(
        f(statistics.mean(v), ".2f") if v and None not in v else "" for v in over.values()) + " |")


if __name__ == "__main__":
    if sys.argv[1:] == ["--plot"]:
        # Redraw from results.json without running anything.
        plot(json.load(open(os.path.join(HERE, "results.json"))))
    elif sys.argv[1:] == ["--markdown"]:
        markdown(json.load(open(os.path.join(HERE, "results.json"))))
        cost_markdown(json.load(open(os.path.join(HERE, "results.json"))))
    else:
        main()
