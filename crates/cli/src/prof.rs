//! `mantle prof`: the profiler's commands (crates/prof does the work).

use clap::{Args, Subcommand};
use mantle_prof::model::FlameRoot;
use mantle_prof::{RecordOpts, ReportOpts, Stacks, Target, Transport};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Subcommand)]
pub enum ProfCmd {
    /// What this machine can sample (says plainly when there is no PMU).
    #[command(after_help = "Examples:\n  mantle prof events\n  mantle prof events --json")]
    Events {
        #[arg(long)]
        json: bool,
    },
    /// Sample the system, a process or a command into a session (any user
    /// for their own processes, user mode; CAP_BPF + CAP_PERFMON for all).
    #[command(
        after_help = "Examples:\n  mantle prof record -a --duration 10s             # whole system, 10 s, 4000 Hz\n  mantle prof record -F 10000 -- ./multiply         # a command and its children\n  mantle prof record -p 1234 -c 100000 -o srv.prof  # a process, every 100 us of CPU\n  mantle prof record -e cycles --fallback cpu-clock -- make\n  mantle prof record --force -o srv.prof -p 1234    # replace the session srv.prof\n  mantle prof record --stacks none -- ./x           # flat profile, no call stacks\n  mantle prof record --stacks dwarf -- xz -9 f      # stacks of code without frame pointers\n  mantle prof record -- ./x                         # as any user: own process, user mode only\n  mantle prof record --cgroup /sys/fs/cgroup/unified/system.slice/nginx.service --duration 10s\n  mantle prof record -a --continuous /var/lib/prof --rotate 60s --keep 1h  # one session a minute, the last hour kept\n  mantle prof record -a --continuous prof.d --rotate 10s --keep 10m --max-size 500MiB\n  mantle prof record --off-cpu -- ./server          # also where threads block, and how long\n\nWithout CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) a user records their own\nprocesses where kernel.perf_event_paranoid allows (2: user mode only), through\nthe perf ring, untagged; -a, others' processes and --transport ring,\n--self-timing, --stacks bpf, --off-cpu are refused (exit 4, naming what is missing).\n--off-cpu records one session: with --continuous it is refused (exit 2).\nStacks follow kernel.perf_event_max_stack (a warning when it is above what is kept).\n\nThe session (default ./mantle.prof/) is read by `mantle prof report`; an\nexisting one is replaced only with --force.\nStop system-wide or -p recording with Ctrl-C (or --duration)."
    )]
    Record(RecordArgs),
    /// Report on a session: symbols, images, components, tags.
    #[command(
        after_help = "Examples:\n  mantle prof report                       # ./mantle.prof\n  mantle prof report -i srv.prof --by-tag\n  mantle prof report --by-cgroup             # per systemd service / container\n  mantle prof report --json | jq '.components'\n  mantle prof report --flame out.svg --pprof out.pb.gz\n  go tool pprof -top out.pb.gz\n  go tool pprof -list slow_multiply out.pb.gz  # source lines (built with -g)\n  mantle prof report --callers b --callees b   # who calls b, what b calls\n  mantle prof report --callers memcpy          # also __memcpy_avx_unaligned_erms (aliases)\n  mantle prof report --folded out.folded --flame-root tag\n  mantle prof report --debug-dir ./dbg       # split debug files in ./dbg/.build-id/ (or by .gnu_debuglink)\n  mantle prof report -i io.prof --off-cpu-flame off.svg  # a session recorded with --off-cpu\n  go tool pprof -sample_index=off_cpu -top out.pb.gz  # its blocked time in pprof\n\nNames: C++ and Rust demangled; of several names at one address the public one\n(read, not __GI___libc_read); unnamed code of stripped images one row per\nfunction, [libx.so+0x1130..0x11a0].\n\nA session recorded with --off-cpu adds an off-CPU section (blocked time per\nthread, on and off CPU per component side by side, where threads waited),\nits own flame graph (--off-cpu-flame) and pprof's third sample type,\noff_cpu/nanoseconds."
    )]
    Report(ReportArgs),
    /// What changed between two sessions, per function (like perf diff).
    #[command(
        after_help = "Examples:\n  mantle prof diff before.prof after.prof          # largest changes first\n  mantle prof diff a.prof b.prof --comm xz -n 20\n  mantle prof diff a.prof b.prof --json | jq '.rows[0]'\n  mantle prof diff a.prof b.prof --flamegraph diff.svg  # differential flame graph\n\nShares of each session's own samples are compared (recordings differ in\nlength and rate): BASELINE% and NEW% of self time, DELTA in points, and the\ninclusive share's change. Functions are matched on (image, symbol)."
    )]
    Diff(DiffArgs),
    /// Where one function's own samples fell: per source line and per
    /// instruction (like perf annotate).
    #[command(
        after_help = "Examples:\n  mantle prof annotate slow_multiply               # ./mantle.prof: source lines, then disassembly\n  mantle prof annotate -i srv.prof --source lua_geti  # the short name of a C++ function\n  mantle prof annotate --asm memcpy                 # __memcpy_avx_unaligned_erms, by its IFUNC's name\n  mantle prof annotate '[libx.so+0x1130..0x11a0]'   # unnamed code of a stripped library\n  mantle prof annotate --json spin | jq '.[0].lines'\n\nShares are of the function's own samples (its callees not included).\nSource lines need DWARF (-g, or the image's debug file: --debug-dir);\nthe disassembly needs the function's size (its symbol) and the file as recorded."
    )]
    Annotate(AnnotateArgs),
}

#[derive(Args)]
pub struct DiffArgs {
    /// The baseline session.
    baseline: PathBuf,
    /// The session compared with it.
    new: PathBuf,
    /// Only samples of processes with this command name, in both.
    #[arg(long)]
    comm: Option<String>,
    /// Show at most N functions (0: all).
    #[arg(short = 'n', long, default_value_t = 0)]
    limit: usize,
    /// The comparison as JSON (docs/json.md, "diff").
    #[arg(long)]
    json: bool,
    /// Also write a differential flame graph (SVG): the new session's
    /// stacks, red where a function's share grew, blue where it shrank.
    #[arg(long, value_name = "SVG")]
    flamegraph: Option<PathBuf>,
}

#[derive(Args)]
pub struct AnnotateArgs {
    /// The function: its full name as the report prints it, its short
    /// name (C++/Rust without parameters or namespaces), or an alias.
    #[arg(value_name = "SYMBOL")]
    symbol: String,
    /// Session directory.
    #[arg(short, long, default_value = "mantle.prof")]
    input: PathBuf,
    /// Only samples of this process.
    #[arg(long)]
    pid: Option<u32>,
    /// Only samples of processes with this command name (comm).
    #[arg(long)]
    comm: Option<String>,
    /// Source lines only.
    #[arg(long, conflicts_with = "asm")]
    source: bool,
    /// Disassembly only.
    #[arg(long)]
    asm: bool,
    /// An array of annotations (docs/json.md).
    #[arg(long)]
    json: bool,
    /// Look for separate debug files in DIR (as `report --debug-dir`).
    #[arg(long, value_name = "DIR")]
    debug_dir: Vec<PathBuf>,
}

#[derive(Args)]
pub struct RecordArgs {
    /// Every CPU, every process (the default without -p or a command).
    #[arg(short = 'a', long = "all-cpus", conflicts_with = "pid")]
    all: bool,
    /// One process (all its threads, and children it creates later).
    #[arg(short, long)]
    pid: Option<u32>,
    /// Every task of a cgroup v2 directory and its descendants, on every
    /// CPU (a systemd service or scope, a container), like perf's -G.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["all", "pid"])]
    cgroup: Option<PathBuf>,
    /// Event to sample (see `mantle prof events`).
    #[arg(short, long, default_value = "cpu-clock")]
    event: String,
    /// When EVENT needs a PMU that is not there, sample this event instead
    /// (said in the summary and the report header).
    #[arg(long, value_name = "EVENT")]
    fallback: Option<String>,
    /// Samples per second (per CPU, per task), adjusted by the kernel.
    #[arg(short = 'F', long, conflicts_with = "count")]
    freq: Option<u64>,
    /// A sample every COUNT events (ns for cpu-clock / task-clock).
    #[arg(short = 'c', long)]
    count: Option<u64>,
    /// Session directory (not replaced if it exists, unless --force).
    #[arg(short, long, default_value = "mantle.prof")]
    output: PathBuf,
    /// Replace the session at --output (only a session directory, never
    /// another file or directory). Long form only: `-f` is a function
    /// everywhere else in mantle (`instr -f NAME`).
    #[arg(long)]
    force: bool,
    /// Continuous recording: one session per --rotate period in DIR (made
    /// if missing, not its parents), named by its start time in UTC
    /// (20261129T114500.000Z); the oldest deleted beyond --keep and
    /// --max-size. No sample is lost at a rotation. Instead of --output.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["output", "force", "self_timing"])]
    continuous: Option<PathBuf>,
    /// With --continuous: the length of one session (at least 100ms and
    /// the drain interval).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "continuous")]
    rotate: Option<Duration>,
    /// With --continuous: how far back sessions are kept (the newest
    /// ceil(KEEP / ROTATE) sessions); at least --rotate.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "continuous")]
    keep: Option<Duration>,
    /// With --continuous: also delete the oldest sessions while they take
    /// more than SIZE (500MiB, 2GiB); the newest is always kept.
    #[arg(long, value_name = "SIZE", value_parser = mantle_units::parse_size, requires = "continuous")]
    max_size: Option<u64>,
    /// Stop after this long (10s, 500ms, 1m; more than 0).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    duration: Option<Duration>,
    /// How samples leave the kernel: aggregate (in-kernel counts) or ring.
    #[arg(long, default_value = "aggregate", value_parser = ["aggregate", "ring"])]
    transport: String,
    /// Time between drains of the in-kernel counts (at least 10ms).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_drain)]
    drain_interval: Duration,
    /// Measure the sample path's own cost per sample (eBPF and user space).
    #[arg(long)]
    self_timing: bool,
    /// Call stacks: walked by the perf core (perf, default), by the sample
    /// path's helper (bpf), unwound with .eh_frame from an 8 KiB copy of
    /// the user stack (dwarf, like perf --call-graph dwarf: for code built
    /// without frame pointers; samples untagged), or none (flat profile).
    /// perf and bpf follow frame pointers: code built without them shows
    /// its caller chain cut short.
    #[arg(long, default_value = "perf", value_parser = ["perf", "bpf", "dwarf", "none"])]
    stacks: String,
    /// With --stacks dwarf: user stack copied per sample, a size (8192,
    /// 8KiB, 56KiB; a bare number is bytes): a multiple of 8 bytes from
    /// 512 to 56KiB (57344); perf's default 8KiB. Deeper stacks end early;
    /// a larger copy costs more per sample.
    #[arg(long, default_value = "8KiB", value_name = "SIZE", value_parser = parse_stack_size)]
    stack_size: u32,
    /// Also record off-CPU time: how long each thread was blocked, with
    /// its kernel and user stack where it blocked (sched_switch, eBPF:
    /// needs CAP_BPF and CAP_PERFMON). The report shows it beside the
    /// on-CPU samples.
    #[arg(long)]
    off_cpu: bool,
    /// No live status line.
    #[arg(short, long)]
    quiet: bool,
    /// Summary as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Command to run and profile (with its children).
    #[arg(last = true)]
    command: Vec<String>,
}

#[derive(Args)]
pub struct ReportArgs {
    /// Session directory.
    #[arg(short, long, default_value = "mantle.prof")]
    input: PathBuf,
    /// Per tag: which processes and symbols spent time on its behalf.
    #[arg(long)]
    by_tag: bool,
    /// Per cgroup (systemd service, container, scope): which processes
    /// and symbols spent time in it, by its path at record time.
    #[arg(long)]
    by_cgroup: bool,
    /// Only samples of this process.
    #[arg(long)]
    pid: Option<u32>,
    /// Only samples of processes with this command name (comm).
    #[arg(long)]
    comm: Option<String>,
    /// Show at most N symbols (0: all).
    #[arg(short = 'n', long, default_value_t = 0)]
    limit: usize,
    #[arg(long)]
    json: bool,
    /// Also write a flame graph (SVG).
    #[arg(long, value_name = "SVG")]
    flame: Option<PathBuf>,
    /// Also write a gzipped pprof profile (go tool pprof).
    #[arg(long, value_name = "PB_GZ")]
    pprof: Option<PathBuf>,
    /// Also write the folded stacks (one "root;...;leaf count" per line).
    #[arg(long, value_name = "FILE")]
    folded: Option<PathBuf>,
    /// Also write the off-CPU flame graph (SVG; a session recorded with
    /// --off-cpu): where threads blocked, widths in ns, blue.
    #[arg(long, value_name = "SVG")]
    off_cpu_flame: Option<PathBuf>,
    /// Also write the off-CPU folded stacks (counts in ns).
    #[arg(long, value_name = "FILE")]
    off_cpu_folded: Option<PathBuf>,
    /// The flame graph's (and folded stacks') bottom frame.
    #[arg(long, default_value = "process", value_parser = ["process", "component", "tag", "cgroup", "none"])]
    flame_root: String,
    /// Instead of the tables: who called SYMBOL (and SYMBOL's totals).
    #[arg(long, value_name = "SYMBOL")]
    callers: Option<String>,
    /// Instead of the tables: what SYMBOL called.
    #[arg(long, value_name = "SYMBOL")]
    callees: Option<String>,
    /// Look for separate debug files in DIR/.build-id/ (repeatable;
    /// replaces the default /usr/lib/debug and /lib/debug). The debuginfod
    /// client's cache is searched after, and debuginfod-find asked when
    /// DEBUGINFOD_URLS is set; then by the image's .gnu_debuglink beside
    /// it, in .debug/ beside it, and in DIR/<the image's directory>/.
    #[arg(long, value_name = "DIR")]
    debug_dir: Vec<PathBuf>,
}

/// `--duration`: mantle's one grammar ([`mantle_units`]), more than 0
/// (0 recorded for one poll interval).
fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = mantle_units::parse_duration(s).map_err(|e| e.to_string())?;
    if d.is_zero() {
        return Err(format!(
            "{s} is not more than 0 (leave --duration out to record until the command ends or Ctrl-C)"
        ));
    }
    Ok(d)
}

/// `--drain-interval`: at least 10ms (each drain reads the whole map).
fn parse_drain(s: &str) -> Result<Duration, String> {
    let d = mantle_units::parse_duration(s).map_err(|e| e.to_string())?;
    if d < Duration::from_millis(10) {
        return Err(format!("{s} is shorter than 10ms"));
    }
    Ok(d)
}

/// `--stack-size`: mantle's one grammar of sizes ([`mantle_units`]); its
/// range is the recorder's to check (mantle_prof::unwind::STACK_COPY_RANGE).
fn parse_stack_size(s: &str) -> Result<u32, String> {
    let n = mantle_units::parse_size(s).map_err(|e| e.to_string())?;
    u32::try_from(n).map_err(|_| format!("{s} is more than 56KiB (57344 bytes)"))
}

/// Writes to stdout; a closed pipe (`| head`) is not an error.
fn out(s: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(s.as_bytes());
}

fn print_json<T: serde::Serialize>(v: &T) {
    out(&(serde_json::to_string_pretty(v).expect("serializable") + "\n"));
}

pub fn run(c: ProfCmd) -> Result<(), mantle_prof::Error> {
    match c {
        ProfCmd::Events { json } => {
            let r = mantle_prof::list_events();
            if json {
                print_json(&r);
            } else {
                println!("{}", r.note);
                println!(
                    "kernel.perf_event_max_sample_rate = {}, perf_event_paranoid = {}",
                    r.max_sample_rate
                        .map(|v| v.to_string())
                        .unwrap_or("?".into()),
                    r.perf_event_paranoid
                        .map(|v| v.to_string())
                        .unwrap_or("?".into())
                );
                println!();
                println!(
                    "{:<18} {:<9} {:<5} {:<32} DESCRIPTION",
                    "EVENT", "KIND", "OK", "DETAIL"
                );
                for e in &r.events {
                    println!(
                        "{:<18} {:<9} {:<5} {:<32} {}",
                        e.name,
                        if e.hardware { "hardware" } else { "software" },
                        if e.available { "yes" } else { "no" },
                        e.detail,
                        e.description
                    );
                }
            }
            Ok(())
        }
        ProfCmd::Record(a) => {
            let target = if !a.command.is_empty() {
                if a.all || a.pid.is_some() || a.cgroup.is_some() {
                    return Err(mantle_prof::Error::Invalid(
                        "give either -a, -p PID, --cgroup DIR or a command after --".into(),
                    ));
                }
                Target::Command(a.command)
            } else if let Some(c) = a.cgroup {
                Target::Cgroup(c)
            } else if let Some(p) = a.pid {
                Target::Pid(p)
            } else if std::env::args()
                .skip_while(|x| x != "record")
                .any(|x| x == "--")
            {
                // `record --` alone: a command was meant; clap gives an
                // empty one, which would record the whole system
                return Err(mantle_prof::Error::Invalid(
                    "no command given after --".into(),
                ));
            } else {
                Target::All
            };
            let opts = RecordOpts {
                target,
                event: a.event,
                fallback: a.fallback,
                freq: a.freq,
                period: a.count,
                output: a.output,
                duration: a.duration,
                transport: if a.transport == "ring" {
                    Transport::Ring
                } else {
                    Transport::Aggregate
                },
                drain_interval: a.drain_interval,
                self_timing: a.self_timing,
                stacks: match a.stacks.as_str() {
                    "bpf" => Stacks::Bpf,
                    "none" => Stacks::None,
                    "dwarf" => Stacks::Dwarf,
                    _ => Stacks::Perf,
                },
                stack_copy: a.stack_size,
                status: !a.quiet,
                force: a.force,
                continuous: a.continuous.map(|dir| mantle_prof::record::Continuous {
                    dir,
                    rotate: a.rotate.unwrap_or(Duration::from_secs(60)),
                    keep: a.keep.unwrap_or(Duration::from_secs(3600)),
                    max_bytes: a.max_size,
                }),
                faults: Default::default(),
                off_cpu: a.off_cpu,
            };
            let s = mantle_prof::record::record(&opts)?;
            if a.json {
                print_json(&s);
            } else {
                eprint!("{}", s.render());
            }
            // the command's own status, as perf (and env, time) pass it
            // on: a failed build must not look like a good profile
            if let Some(code) = s.command_status.filter(|c| *c != 0) {
                use std::io::Write;
                let _ = std::io::stdout().flush();
                std::process::exit(code);
            }
            Ok(())
        }
        ProfCmd::Annotate(a) => {
            let opts = ReportOpts {
                pid: a.pid,
                comm: a.comm,
                debug_dirs: (!a.debug_dir.is_empty()).then_some(a.debug_dir),
                ..Default::default()
            };
            let what = mantle_prof::annotate::AnnotateOpts {
                source: !a.asm,
                asm: !a.source,
            };
            let v = mantle_prof::annotate::annotate(&a.input, &opts, &a.symbol, what)?;
            if a.json {
                print_json(&v);
            } else {
                let text: Vec<String> = v.iter().map(mantle_prof::annotate::render).collect();
                out(&text.join("\n"));
            }
            Ok(())
        }
        ProfCmd::Report(a) => {
            let opts = ReportOpts {
                by_tag: a.by_tag,
                by_cgroup: a.by_cgroup,
                pid: a.pid,
                comm: a.comm,
                limit: a.limit,
                flame_root: match a.flame_root.as_str() {
                    "component" => FlameRoot::Component,
                    "tag" => FlameRoot::Tag,
                    "cgroup" => FlameRoot::Cgroup,
                    "none" => FlameRoot::None,
                    _ => FlameRoot::Process,
                },
                debug_dirs: (!a.debug_dir.is_empty()).then_some(a.debug_dir),
            };
            let r = mantle_prof::report::report(&a.input, &opts)?;
            if let Some(p) = &a.flame {
                mantle_prof::report::write_flame(&r, p)?;
            }
            if let Some(p) = &a.pprof {
                mantle_prof::report::write_pprof(&r, p)?;
            }
            if let Some(p) = &a.folded {
                mantle_prof::report::write_folded(&r, p)?;
            }
            if let Some(p) = &a.off_cpu_flame {
                mantle_prof::report::write_off_cpu_flame(&r, p)?;
            }
            if let Some(p) = &a.off_cpu_folded {
                mantle_prof::report::write_off_cpu_folded(&r, p)?;
            }
            if a.callers.is_some() || a.callees.is_some() {
                if let (Some(x), Some(y)) = (&a.callers, &a.callees) {
                    if x != y {
                        return Err(mantle_prof::Error::Invalid(
                            "--callers and --callees name one symbol (give the same, or one)"
                                .into(),
                        ));
                    }
                }
                let sym = a
                    .callers
                    .as_ref()
                    .or(a.callees.as_ref())
                    .expect("one is set");
                use mantle_prof::model::Lookup;
                let g = mantle_prof::model::find_call_graph(&r, sym).map_err(|e| match e {
                    Lookup::NotFound => mantle_prof::Error::NoMatch {
                        filter: format!("symbol {sym} (full or short name) in any stack"),
                        session: a.input.display().to_string(),
                    },
                    // a usage error: the user names one of them
                    Lookup::Ambiguous(names) => mantle_prof::Error::Invalid(format!(
                        "{sym} names {} functions; give one of: {}",
                        names.len(),
                        names
                            .iter()
                            .take(10)
                            .map(|n| format!("{n:?}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                })?;
                if a.json {
                    print_json(&g);
                } else {
                    out(&mantle_prof::model::render_call_graph(
                        &g,
                        a.callers.is_some(),
                        a.callees.is_some(),
                    ));
                }
                return Ok(());
            }
            if a.json {
                print_json(&r);
            } else {
                out(&mantle_prof::model::render_text(&r));
            }
            Ok(())
        }
        ProfCmd::Diff(a) => {
            let opts = ReportOpts {
                comm: a.comm,
                ..Default::default()
            };
            let mut d = mantle_prof::diff::diff_and_flame(
                &a.baseline,
                &a.new,
                &opts,
                a.flamegraph.as_deref(),
            )?;
            if a.json {
                if a.limit > 0 {
                    d.rows.truncate(a.limit);
                }
                print_json(&d);
            } else {
                out(&d.render(a.limit));
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(subcommand)]
        c: ProfCmd,
    }

    fn record(args: &[&str]) -> Result<RecordArgs, clap::Error> {
        let argv = ["t", "record"].iter().chain(args).copied();
        match T::try_parse_from(argv)?.c {
            ProfCmd::Record(a) => Ok(a),
            _ => unreachable!("record parses as Record"),
        }
    }

    #[test]
    fn duration_must_be_positive_and_finite() {
        assert_eq!(
            record(&["--duration", "500ms"]).unwrap().duration,
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            record(&["--duration", "1m"]).unwrap().duration,
            Some(Duration::from_secs(60))
        );
        // a bare number has no unit in mantle's one grammar
        for bad in ["0s", "0", "10", "-1s", "NaN", "inf", "1e30s", "x"] {
            let arg = format!("--duration={bad}");
            let e = record(&[&arg]).err().expect(bad);
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{bad}");
            assert_eq!(e.exit_code(), crate::EXIT_USAGE as i32);
        }
        let e = record(&["--duration", "0s"]).err().unwrap().to_string();
        assert!(e.contains("not more than 0"), "{e}");
        let e = record(&["--duration", "10"]).err().unwrap().to_string();
        assert!(e.contains("has no unit"), "{e}");
        assert_eq!(record(&[]).unwrap().drain_interval, Duration::from_secs(1));
        assert!(record(&["--drain-interval", "5ms"]).is_err());
    }

    /// `--continuous`: its options only with it, not with -o, --force or
    /// --self-timing, durations with units; the defaults 60s and 1h.
    #[test]
    fn continuous_options_are_usage_errors_out_of_place() {
        let a = record(&["--continuous", "d"]).unwrap();
        assert_eq!(a.continuous.as_deref(), Some(std::path::Path::new("d")));
        assert_eq!((a.rotate, a.keep, a.max_size), (None, None, None));
        let a = record(&[
            "--continuous",
            "d",
            "--rotate",
            "1s",
            "--keep",
            "3s",
            "--max-size",
            "1MiB",
        ])
        .unwrap();
        assert_eq!(a.rotate, Some(Duration::from_secs(1)));
        assert_eq!(a.keep, Some(Duration::from_secs(3)));
        assert_eq!(a.max_size, Some(1 << 20));
        for bad in [
            &["--rotate", "1s"][..],
            &["--keep", "1h"],
            &["--max-size", "1MiB"],
            &["--continuous", "d", "-o", "s"],
            &["--continuous", "d", "--force"],
            &["--continuous", "d", "--self-timing"],
            &["--continuous", "d", "--rotate", "60"],
            &["--continuous", "d", "--keep", "0s"],
        ] {
            let e = record(bad).err().unwrap_or_else(|| panic!("{bad:?}"));
            assert_eq!(e.exit_code(), crate::EXIT_USAGE as i32, "{bad:?}");
        }
    }

    /// Writes a session of `p` (cpu-clock) in `d`, with kernel symbols
    /// when `kallsyms` is given.
    fn write_test_session(
        d: &std::path::Path,
        p: &mantle_prof::model::Profile,
        kallsyms: Option<&str>,
    ) {
        use mantle_prof::session::{write_session, SessionData, FORMAT};
        let meta = mantle_prof::model::Meta {
            format: FORMAT,
            event: "cpu-clock".into(),
            samples: p.total(),
            kernel_symbols: kallsyms.is_some(),
            ..Default::default()
        };
        write_session(
            d,
            &SessionData {
                meta: &meta,
                profile: p,
                procs: &Default::default(),
                history: &[],
                tags: &[],
                kallsyms_text: kallsyms,
                vdso: None,
                jit_maps: &[],
                cgroups: &[],
                off_cpu: None,
            },
            false,
        )
        .unwrap();
    }

    #[test]
    fn stacks_take_four_values() {
        assert_eq!(record(&[]).unwrap().stacks, "perf");
        for v in ["perf", "bpf", "dwarf", "none"] {
            assert_eq!(record(&["--stacks", v]).unwrap().stacks, v);
        }
        let e = record(&["--stacks", "fp"]).err().unwrap();
        assert_eq!(e.exit_code(), crate::EXIT_USAGE as i32);
    }

    /// `--callers`/`--callees` on a session with stacks: the call graph
    /// as text and JSON; a symbol in no stack is exit 5; two different
    /// symbols are a usage error.
    #[test]
    fn report_callers_and_callees() {
        use mantle_prof::model::{Frame, Image, ImageKind, Mode, Profile, RowKey};
        let d = std::env::temp_dir().join(format!("mantle-cli-prof-cg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let mut p =
            Profile::with_images(vec![Image::named("[kernel.kallsyms]", ImageKind::Kernel)]);
        let (a, b, main) = (
            0xffffffff81000100u64,
            0xffffffff81000200,
            0xffffffff81000300,
        );
        let f = |offset| Frame { image: 0, offset };
        for (leaf, callers, n) in [
            (b, vec![f(a + 1), f(main + 1)], 5),
            (a, vec![f(main + 1)], 2),
        ] {
            let stack = p.stack_id(&callers);
            p.add_row(
                RowKey {
                    pid: 7,
                    tid: 7,
                    cpu: 0,
                    mode: Mode::Kernel,
                    image: 0,
                    offset: leaf,
                    tags: vec![0; mantle_prof::abi::MT_WORDS],
                    stack,
                    cgroup: 0,
                },
                n,
            )
            .unwrap();
        }
        write_test_session(
            &d,
            &p,
            Some("ffffffff81000100 T fa\nffffffff81000200 T fb\nffffffff81000300 T fmain\nffffffff81000400 T end\n"),
        );
        let run = |args: &[&str]| {
            let mut argv = vec!["mantle", "prof", "report", "-i", d.to_str().unwrap()];
            argv.extend(args);
            crate::run(<crate::Cli as Parser>::try_parse_from(argv).unwrap())
        };
        assert!(run(&["--callers", "fb", "--callees", "fb"]).is_ok());
        assert!(run(&["--callees", "fmain", "--json"]).is_ok());
        let r = mantle_prof::report::report(&d, &ReportOpts::default()).unwrap();
        let g = mantle_prof::model::call_graph(&r, "fmain").unwrap();
        assert_eq!((g.inclusive, g.self_samples), (7, 0));
        assert_eq!(g.callees.len(), 1);
        assert_eq!(
            (g.callees[0].symbol.as_str(), g.callees[0].samples),
            ("fa", 7)
        );
        // annotate: the kernel's code is not kept (said, not an error); a
        // name of no function is exit 5
        let annotate = |args: &[&str]| {
            let mut argv = vec!["mantle", "prof", "annotate", "-i", d.to_str().unwrap()];
            argv.extend(args);
            crate::run(<crate::Cli as Parser>::try_parse_from(argv).unwrap())
        };
        assert!(annotate(&["fb"]).is_ok());
        assert!(annotate(&["--json", "fb"]).is_ok());
        let a =
            mantle_prof::annotate::annotate(&d, &ReportOpts::default(), "fb", Default::default())
                .unwrap();
        assert_eq!((a.len(), a[0].samples), (1, 5));
        assert!(
            a[0].notes.iter().any(|n| n.contains("no disassembly")),
            "{:?}",
            a[0].notes
        );
        let f = annotate(&["nosuch"]).expect_err("no such symbol");
        assert_eq!(f.code, crate::EXIT_NOT_FOUND);
        let f = run(&["--callers", "nosuch"]).expect_err("no such symbol");
        assert_eq!(f.code, crate::EXIT_NOT_FOUND);
        let f = run(&["--callers", "fa", "--callees", "fb"]).expect_err("two symbols");
        assert_eq!(f.code, crate::EXIT_USAGE);
        // folded stacks: the kernel frames marked, callers first
        let folded = d.join("out.folded");
        assert!(run(&["--folded", folded.to_str().unwrap(), "--flame-root", "none"]).is_ok());
        let text = std::fs::read_to_string(&folded).unwrap();
        assert!(text.contains("fmain_[k];fa_[k];fb_[k] 5\n"), "{text}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn force_is_a_flag() {
        assert!(!record(&[]).unwrap().force);
        assert!(record(&["--force"]).unwrap().force);
        // -f is a function elsewhere (instr): force has no short form
        assert!(record(&["-f"]).is_err());
    }

    /// The report's errors reach the user as the documented exit codes.
    #[test]
    fn exit_codes() {
        use mantle_prof::Error as P;
        let code = |e: P| crate::Failure::from(e).code;
        assert_eq!(
            code(P::NoMatch {
                filter: "--pid 1".into(),
                session: "s".into()
            }),
            crate::EXIT_NOT_FOUND
        );
        assert_eq!(code(P::SessionExists("s".into())), crate::EXIT_USAGE);
        assert_eq!(code(P::NotASession("s".into())), crate::EXIT_USAGE);
        assert_eq!(
            code(P::FallbackNoPmu {
                event: "cycles".into(),
                fallback: "instructions".into()
            }),
            crate::EXIT_MISSING
        );
    }

    /// `mantle prof report --pid N` with no sample of N: exit code 5 and a
    /// message (main prints it on stderr), not empty tables and 0.
    #[test]
    fn report_of_a_pid_without_samples_is_not_found() {
        use mantle_prof::model::{Image, ImageKind, Mode, Profile, RowKey};
        let d = std::env::temp_dir().join(format!("mantle-cli-prof-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        let mut p =
            Profile::with_images(vec![Image::named("[kernel.kallsyms]", ImageKind::Kernel)]);
        p.add_row(
            RowKey {
                pid: 7,
                tid: 7,
                cpu: 0,
                mode: Mode::Kernel,
                image: 0,
                offset: 0x10,
                tags: vec![0; mantle_prof::abi::MT_WORDS],
                stack: 0,
                cgroup: 0,
            },
            3,
        )
        .unwrap();
        write_test_session(&d, &p, None);
        let run = |pid: &str| {
            let cli = <crate::Cli as Parser>::try_parse_from([
                "mantle",
                "prof",
                "report",
                "--json",
                "-i",
                d.to_str().unwrap(),
                "--pid",
                pid,
            ])
            .unwrap();
            crate::run(cli)
        };
        let f = run("999999").expect_err("no samples of 999999");
        assert_eq!(f.code, crate::EXIT_NOT_FOUND);
        assert!(
            f.message.contains("no samples match --pid 999999"),
            "{}",
            f.message
        );
        assert!(run("7").is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
