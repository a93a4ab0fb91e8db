//! `mantle run`: start a command (or a whole system from a TOML file) as
//! guests of an executive (crates/exec) and wait for it, like strace. The
//! agent options become each guest's chain through
//! `mantle_exec::agents::from_specs`. The exit status is the guest's
//! (128+N when a signal killed it); mantle's own codes (README "Exit
//! codes") only when the guest could not be started or the executive died.

//! Exit codes are a wrapper's (env, timeout, chroot): 125 when mantle
//! itself failed, 126 when the command cannot run, 127 when it is not
//! found; every Failure of this module is given one of them by [`run`].

use crate::exit::{
    Failure, EXIT_FAILURE, EXIT_RUN_CANNOT, EXIT_RUN_ERROR, EXIT_RUN_NOT_FOUND, EXIT_USAGE,
};
use clap::Args;
use mantle_exec::agents::{from_specs, CountTable};
use mantle_exec::executive::{End, Executive, GuestSpec, Options};
use mantle_exec::launch::LaunchError;
use mantle_exec::lockstat::LockStats;
use mantle_exec::spec::{AgentSpecs, TraceOut};
use mantle_exec::system::GuestDef;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args)]
pub struct RunArgs {
    /// Interposition path: protected (seccomp user notification, the
    /// default) or fast (a preloaded stub and shared memory; dynamically
    /// linked commands only: others fall back to protected, said on stderr).
    #[arg(long, value_parser = ["protected", "fast"], default_value = "protected")]
    path: String,
    /// Print every interposed call (arguments, result, time in the kernel
    /// and in the executive) on standard error; `--trace=read,write` (or
    /// `all`) also watches those calls.
    #[arg(long, value_name = "CALLS", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    trace: Option<String>,
    /// Write the trace to this file instead.
    #[arg(long, value_name = "FILE")]
    trace_output: Option<PathBuf>,
    /// Count interposed calls and their time (like strace -c), printed at
    /// the end; `--count=CALLS` also watches those calls. On --path fast,
    /// `--count=CALLS` alone is counted from the kernel's notifications
    /// (no stub: the other calls never trap); `--count`, `--count=all`
    /// or --rewrite-sites count in the stub (there every call traps).
    #[arg(long, value_name = "CALLS", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    count: Option<String>,
    /// Trace and count as JSON lines.
    #[arg(long)]
    json: bool,
    /// Send --trace as OpenTelemetry spans and --count as metrics to the
    /// collector at URL (OTLP over HTTP, e.g. http://127.0.0.1:4318;
    /// docs/otel.md) instead of printing them.
    #[arg(long, value_name = "URL", conflicts_with = "trace_output")]
    otlp: Option<String>,
    /// Fail a call family with ERRNO (default EPERM), enforced by the
    /// kernel on both paths; repeatable. NAME is a family (open, stat,
    /// exec, chdir, unlink, rename, ...: docs/exec.md "Call families"), a
    /// member of one (the whole family: `openat` also denies open, creat,
    /// openat2, open_by_handle_at), another call, or a number (that call
    /// alone). An exec deny starts after the command's own start.
    #[arg(long, value_name = "NAME[=ERRNO]")]
    deny: Vec<String>,
    /// The guest sees NEW at OLD (both exist, two directories or two
    /// files), like a bind mount, because it is one: a private mount
    /// namespace, so every call, `..`, symlink, relative path and
    /// directory fd lands in NEW. Repeatable.
    #[arg(long, value_name = "OLD=NEW")]
    redirect: Vec<String>,
    /// While --deny or --redirect is on, io_uring is refused (EPERM): its
    /// operations are not system calls, and no agent would see an open
    /// made through it. This allows it, giving that up.
    #[arg(long)]
    allow_io_uring: bool,
    /// Hold every call NAME for DURATION (500us, 2ms, 1s) before it runs.
    #[arg(long, value_name = "NAME=DURATION")]
    delay: Vec<String>,
    /// The executive performs call NAME on the guest's behalf (getppid,
    /// open, openat, creat; others fail with ENOSYS).
    #[arg(long, value_name = "NAME")]
    perform: Vec<String>,
    /// For benchmarks: the guest puts its CLOCK_MONOTONIC ns in call
    /// NAME's first argument; write receipt minus that (the one-way trap,
    /// ns) per call to FILE at the end.
    #[arg(long, value_name = "NAME=FILE")]
    stamp: Vec<String>,
    /// The guest's nanosleep and clock_nanosleep are held by the executive
    /// and answered when due (its timer, its priority).
    #[arg(long)]
    sleep: bool,
    /// The guest's setitimer(ITIMER_REAL) and alarm are kept by the
    /// executive, which sends SIGALRM at its own priority.
    #[arg(long)]
    timers: bool,
    /// Extended mode: busy-wait the last DURATION (default 50us) before a
    /// held call is due, to answer it below the timer's granularity (costs
    /// that much CPU per held call). On --path fast the guest spins it
    /// itself: the executive answers early with the due time.
    #[arg(long, value_name = "DURATION", num_args = 0..=1, require_equals = true,
          default_missing_value = "50us", value_parser = mantle_exec::agents::delay::parse_duration)]
    extended: Option<std::time::Duration>,
    /// A guest thread whose held call the executive releases (a sleep come
    /// due, a delay over) runs at SCHED_FIFO N (1-98, below the executive)
    /// until its next interposed call: it runs before the machine's normal
    /// tasks and the guests that were not released. A thread already at a
    /// real-time policy of its own keeps it.
    #[arg(long, value_name = "N", value_parser = crate::flags::int_from_to(1, 98))]
    boost: Option<i32>,
    /// The executive decides when the guest runs, by these parameters:
    /// `edf BUDGET/PERIOD[/DEADLINE]`, `fifo PRIO`, `rr PRIO[/QUANTUM]`,
    /// `other [NICE]` (the guest frozen in a cgroup of its own between its
    /// turns; during a reservation's turn at SCHED_RR 98, below the
    /// executive and above the host's other real-time work, for at most
    /// 90% of every 100 ms; root and cgroup v2).
    /// Its own sched_setscheduler and the like
    /// then go to the executive's policy. With --system: a [dispatch]
    /// table and `sched = ...` per guest.
    #[arg(long, value_name = "SPEC", value_parser = mantle_exec::system::parse_sched)]
    sched: Option<mantle_exec::sched::Params>,
    /// The SCHED_RR priority, 1-99, a dispatched reservation (`edf`,
    /// `fifo`, `rr`) runs at during its turns (default 98, or the system
    /// file's `[dispatch] rt_priority`): above host real-time work below
    /// it, below the executive (lowered to the executive's priority minus
    /// one; SCHED_OTHER if the executive is not real-time). With --sched
    /// or a system's [dispatch].
    #[arg(long, value_name = "N", value_parser = crate::flags::int_from_to(1, 99))]
    rt_priority: Option<i32>,
    /// SCHED_FIFO priority of the executive thread, 1-99; 0 keeps it at
    /// SCHED_OTHER. Default on the protected path: 99 (where allowed; a
    /// warning where not) when it keeps time or dispatches (--sleep,
    /// --delay, --timers, --extended, --boost, --sched, a qos), else
    /// SCHED_OTHER, which answers fastest on a CPU shared with the guest
    /// (no class switch per call; SYNC_WAKE_UP wakes it on the guest's
    /// CPU). On --path fast: SCHED_OTHER unless given.
    #[arg(long, value_parser = crate::flags::int_from_to(0, 99), allow_negative_numbers = true)]
    priority: Option<i32>,
    /// The executive on N CPUs: one executive thread per CPU of LIST
    /// (`0,1`, `0-3`), pinned to it, each serving the guests it places on
    /// its CPU (round robin; a system's dispatcher places them itself).
    /// On --path fast, one serving thread per CPU: a guest thread pinned
    /// to one of them is served by its thread, any other by the thread
    /// with the fewest. Default: one thread, unpinned, or the system
    /// file's `[executive] cpus`, or MANTLE_EXEC_CPUS.
    #[arg(long, value_name = "LIST")]
    exec_cpus: Option<String>,
    /// How the executive's threads share its state: `fine` (a lock per
    /// run queue, per guest, and one for what the guests share) or
    /// `giant` (one lock around everything: one thread in the executive
    /// at a time). Default fine, or the system file's `[executive]
    /// locking`, or MANTLE_EXEC_LOCKING (the tests run both designs).
    #[arg(long, value_name = "DESIGN", value_parser = ["giant", "fine"])]
    exec_locking: Option<String>,
    /// If the executive dies, let the guests run on unsupervised (their
    /// interposed calls then fail with ENOSYS) instead of killing them.
    #[arg(long)]
    fail_open: bool,
    /// Fast path: let the stub rewrite a trapped `mov $nr,%eax; syscall`
    /// site into a jump, so later calls from it skip the signal (patches
    /// the guest's code; only while the process has one thread).
    #[arg(long, requires = "path")]
    rewrite_sites: bool,
    /// Fast path: whether guest and executive spin before they sleep
    /// (auto: when this process may run on more than one CPU). Spinning
    /// saves a cross-CPU wake-up; sharing one CPU, it only delays the other
    /// side.
    #[arg(long, value_parser = ["auto", "on", "off"], default_value = "auto")]
    spin: String,
    /// Do not ask for SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (to measure it).
    #[arg(long)]
    no_sync_wake_up: bool,
    /// Say what the executive set up (priority, memory lock, wake-up mode,
    /// filters) on standard error.
    #[arg(short, long)]
    verbose: bool,
    /// Start every guest described in this TOML file under one executive
    /// (docs/exec.md "System files"); no command then.
    #[arg(long, value_name = "FILE", conflicts_with = "command")]
    system: Option<PathBuf>,
    /// The application kernel (docs/offload.md): the command's user code
    /// runs on the application CPUs while a bootstrap thread of its own
    /// process, pinned to the bootstrap CPU, performs each of its system
    /// calls (a preloaded library and Syscall User Dispatch: dynamically
    /// linked programs only; no executive). mantle becomes the command.
    #[arg(long, conflicts_with_all = ["system", "trace", "count", "deny", "redirect",
          "delay", "perform", "stamp", "sleep", "timers", "sched", "rewrite_sites", "fail_open"])]
    pub(crate) offload: bool,
    /// --offload: the bootstrap CPU (default: the lowest allowed CPU);
    /// online and allowed by the cpuset, else a usage error.
    #[arg(long, value_name = "N", requires = "offload")]
    pub(crate) bootstrap_cpu: Option<u32>,
    /// --offload: the application CPUs (a list, `1,3-5`; default: every
    /// allowed CPU but the bootstrap CPU); may include the bootstrap CPU.
    #[arg(long, value_name = "LIST", requires = "offload")]
    pub(crate) app_cpus: Option<String>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required_unless_present = "system")]
    pub(crate) command: Vec<String>,
}

fn launch_failure(e: &LaunchError) -> Failure {
    let code = match e {
        LaunchError::NotFound(_) => EXIT_RUN_NOT_FOUND,
        LaunchError::NotExecutable(_) => EXIT_RUN_CANNOT,
        _ => EXIT_RUN_ERROR,
    };
    Failure::new(code, error_chain(e))
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// Where a guest's trace goes.
pub(crate) fn trace_writer(out: &TraceOut) -> Result<Box<dyn std::io::Write + Send>, Failure> {
    Ok(match out {
        TraceOut::Stderr => Box::new(std::io::stderr()),
        TraceOut::File(p) => Box::new(std::io::LineWriter::new(
            std::fs::File::create(p).map_err(|e| Failure::io("cannot write", p, &e))?,
        )),
    })
}

/// Prints a guest's `--count` summary (text like `strace -c`, or JSON).
fn print_counts(name: &str, count: &Option<Arc<CountTable>>, json: bool) {
    if let Some(c) = count {
        let s = c.summary();
        if json {
            eprintln!(
                "{}",
                serde_json::json!({"guest": name, "count": s.to_json()})
            );
        } else {
            eprintln!("mantle: calls of guest {name}:\n{}", s.render_text());
        }
    }
}

/// `--path fast`: one command, served by an executive process under the
/// same reaper as the protected path ([`mantle_exec::reaper::run`]): the
/// reaper (this process) forwards SIGTERM/SIGHUP and, when the executive
/// ends however it ends, kills what is left of the guest tree (cgroup.kill
/// as root, a /proc walk in any case) unless `--fail-open`; the executive
/// ([`mantle_exec::fast::run_fast_supervised`]) is a child subreaper that
/// serves orphaned guests too and kills the guest tree itself if the
/// reaper is killed. `None`: the command is static, fall back to the
/// protected path.
/// `--count=NAME,...` with names only (not `all`, not `default`, not
/// the default list of a bare `--count`).
fn counts_named_calls_only(specs: &AgentSpecs) -> bool {
    specs.count
        && !specs.watch.is_empty()
        && specs
            .watch
            .iter()
            .flat_map(|w| w.split(','))
            .all(|n| !matches!(n.trim(), "all" | "default" | ""))
}

fn run_fast(
    a: &RunArgs,
    def: &GuestDef,
    cpus: &[usize],
    locking: mantle_exec::executive::Locking,
) -> Result<Option<i32>, Failure> {
    use mantle_exec::fast::{
        is_dynamic, resolve, run_fast_supervised, FastError, FastOptions, EXEC_SPIN,
    };
    // before forking: a static command falls back to the protected path
    // (in this process), a missing one is this process's failure
    let prog = def
        .command
        .first()
        .ok_or_else(|| Failure::new(EXIT_USAGE, "no command to run"))?;
    let exe = resolve(prog)
        .ok_or_else(|| Failure::new(EXIT_RUN_NOT_FOUND, format!("{prog}: command not found")))?;
    match is_dynamic(&exe) {
        Ok(true) | Err(FastError::NotElf(_)) => {}
        Ok(false) => {
            eprintln!(
                "mantle: {} is statically linked: the fast path needs a dynamically linked guest; using the protected path",
                exe.display()
            );
            return Ok(None);
        }
        Err(e) => return Err(Failure::new(EXIT_RUN_ERROR, error_chain(&e))),
    }
    let built = from_specs(
        &def.agents,
        crate::otlp::exec_writer(&def.name, &def.trace_out)?,
    )
    .map_err(|e| Failure::new(EXIT_USAGE, e.to_string()))?;
    check_enforcement(&def.name, &built, a.verbose)?;
    let count = built.count.clone();
    // what enforces runs on the kernel's filter (the gate), never in the
    // guest-reachable fast chain
    let (enforcing, observing): (Vec<_>, Vec<_>) =
        built.agents.into_iter().partition(|a| a.name() == "deny");
    // --count is served in the stub (counters in the shared region, no
    // hand-off per call), never in the chain
    let (counting, observing): (Vec<_>, Vec<_>) =
        observing.into_iter().partition(|a| a.name() == "count");
    // ... unless the stub has nothing else to do and --count names its
    // calls: then the gate counts them from the kernel's notifications
    // and no stub is loaded, so that the calls no agent wants never trap
    // (Syscall User Dispatch traps every call; seccomp chooses by
    // number). --count=all (or the default list, or with
    // --rewrite-sites) stays in the stub: there most calls are wanted,
    // and a trap is cheaper than a notification. docs/exec-fast.md,
    // "Why calls that no agent wants trapped".
    let in_gate = observing.is_empty()
        && !counting.is_empty()
        && !a.rewrite_sites
        && counts_named_calls_only(&def.agents);
    let (enforcing, counting) = if in_gate {
        let mut e = enforcing;
        e.extend(counting);
        (e, Vec::new())
    } else {
        (enforcing, counting)
    };
    let counted: Vec<_> = counting.iter().flat_map(|a| a.wants()).collect();
    let chain = mantle_exec::Chain::new(observing);
    let mut opts = FastOptions {
        enforce: built.enforce,
        rewrite: a.rewrite_sites,
        extended: a.extended.unwrap_or_default(),
        boost: a.boost,
        priority: a.priority,
        fail_open: a.fail_open,
        count: count.clone().map(|t| (t, counted)),
        cpus: cpus.to_vec(),
        locking,
        ..FastOptions::default()
    };
    match a.spin.as_str() {
        "on" => (opts.guest_spin, opts.exec_spin) = (2000, EXEC_SPIN),
        "off" => (opts.guest_spin, opts.exec_spin) = (0, std::time::Duration::ZERO),
        _ => {}
    }
    let (name, command, json) = (def.name.clone(), def.command.clone(), a.json);
    let reaper = std::process::id();
    let executive = move || -> i32 {
        mantle_sys::supervise::catch_signals(
            &[libc::SIGTERM, libc::SIGHUP],
            &[libc::SIGINT, libc::SIGQUIT],
        );
        match run_fast_supervised(&command, chain, enforcing, &opts, reaper) {
            Ok((status, _stats, locks)) => {
                if !crate::otlp::exec_end(&[(name.clone(), count.clone(), json)]) {
                    print_counts(&name, &count, json);
                }
                use std::os::unix::process::ExitStatusExt;
                let end = match (status.code(), status.signal()) {
                    (Some(c), _) => End::Exited(c),
                    (None, Some(signal)) => End::Killed {
                        signal,
                        core: status.core_dumped(),
                    },
                    _ => End::Exited(1),
                };
                if json {
                    exit_record_locks(
                        end.shell_status(),
                        &[guest_end_json(&name, None, &end)],
                        &locks,
                    );
                }
                end.shell_status()
            }
            Err(e) => {
                let code = match e {
                    FastError::NotFound(_) => EXIT_RUN_NOT_FOUND,
                    _ => EXIT_RUN_ERROR,
                };
                let msg = error_chain(&e);
                eprintln!("mantle: {msg}");
                if json {
                    exit_record(i32::from(code), &[], Some(&msg));
                }
                i32::from(code)
            }
        }
    };
    let end = mantle_exec::reaper::run(a.fail_open, executive)
        .map_err(|e| Failure::new(EXIT_FAILURE, format!("cannot start the executive: {e}")))?;
    match (end.executive.code, end.executive.signal) {
        (Some(code), _) => Ok(Some(code)),
        (_, sig) => {
            let what = if a.fail_open {
                "its guests run on unsupervised (--fail-open): the fast path's stub makes their calls itself".to_string()
            } else {
                format!("its guests were killed ({} processes)", end.killed)
            };
            Err(Failure::new(
                EXIT_FAILURE,
                format!(
                    "the executive (pid {}) was killed by {}; {what}",
                    end.executive_pid,
                    mantle_exec::executive::signal_name(sig.unwrap_or(0))
                ),
            ))
        }
    }
}

/// `mantle run`; every failure leaves with 125, 126 or 127 (module doc).
pub fn run(a: RunArgs) -> Result<(), Failure> {
    if a.offload {
        return crate::offload::run(&a.command, a.bootstrap_cpu, a.app_cpus.as_deref());
    }
    let json = a.json;
    run_guests(a).map_err(|mut f| {
        if f.code != EXIT_RUN_CANNOT && f.code != EXIT_RUN_NOT_FOUND {
            f.code = EXIT_RUN_ERROR;
        }
        if json {
            // the record is the last line: the message goes first
            eprintln!("mantle: {}", f.message);
            exit_record(i32::from(f.code), &[], Some(&f.message));
            std::process::exit(i32::from(f.code));
        }
        f
    })
}

/// `--json`: the run's last line on standard error, one object of schema
/// `mantle.run.exit/1` (docs/exec.md "JSON"): the status mantle exits
/// with, whether it is a guest's or mantle's own (`error` is then the
/// message), and how each guest ended. A script tells a guest's 125 from
/// mantle's by `error`.
fn exit_record(status: i32, guests: &[serde_json::Value], error: Option<&str>) {
    eprintln!(
        "{}",
        serde_json::json!({
            "schema": "mantle.run.exit/1",
            "status": status,
            "error": error,
            "guests": guests,
        })
    );
}

/// [`exit_record`] of a run that ended normally, with the executive's
/// lock statistics (docs/json.md).
fn exit_record_locks(status: i32, guests: &[serde_json::Value], locks: &[LockStats]) {
    eprintln!(
        "{}",
        serde_json::json!({
            "schema": "mantle.run.exit/1",
            "status": status,
            "error": null,
            "guests": guests,
            "locks": locks,
        })
    );
}

/// A guest's end for [`exit_record`].
fn guest_end_json(name: &str, pid: Option<u32>, end: &End) -> serde_json::Value {
    let (state, code, signal) = match end {
        End::Exited(c) => ("exited", Some(*c), None),
        End::Killed { signal, .. } => ("killed", None, Some(*signal)),
        End::NotStarted { .. } => ("not-started", None, None),
    };
    serde_json::json!({
        "name": name,
        "pid": pid,
        "state": state,
        "exit_code": code,
        "signal": signal,
        "status": end.shell_status(),
    })
}

fn run_guests(a: RunArgs) -> Result<(), Failure> {
    if (a.rewrite_sites || a.spin != "auto") && a.path != "fast" {
        return Err(Failure::new(
            EXIT_USAGE,
            "--rewrite-sites and --spin are fast-path options (--path fast)",
        ));
    }
    if a.path == "fast" && a.system.is_some() {
        return Err(Failure::new(
            EXIT_USAGE,
            "--path fast runs one command; a --system file runs on the protected path",
        ));
    }
    let (exec_cpus, env_cpus, locking) = exec_design(&a)?;
    let (defs, dispatch, qos_period, sys_cpus, sys_locking): (Vec<GuestDef>, _, _, _, _) =
        match &a.system {
            Some(file) => {
                let text = std::fs::read_to_string(file)
                    .map_err(|e| Failure::io("cannot read", file, &e))?;
                let s = mantle_exec::system::parse(&text)
                    .map_err(|e| Failure::new(EXIT_USAGE, format!("{}: {e}", file.display())))?;
                (s.guests, s.dispatch, s.qos_period, s.exec_cpus, s.locking)
            }
            None => (
                vec![GuestDef {
                    name: a.command[0]
                        .rsplit('/')
                        .next()
                        .unwrap_or("guest")
                        .to_string(),
                    command: a.command.clone(),
                    agents: AgentSpecs {
                        trace: a.trace.is_some() || a.trace_output.is_some(),
                        count: a.count.is_some(),
                        deny: a.deny.clone(),
                        redirect: a.redirect.clone(),
                        delay: a.delay.clone(),
                        perform: a.perform.clone(),
                        stamp: a.stamp.clone(),
                        sleep: a.sleep,
                        timers: a.timers,
                        sched_calls: a.sched.is_some(),
                        json: a.json,
                        allow_io_uring: a.allow_io_uring,
                        watch: [&a.trace, &a.count]
                            .into_iter()
                            .flatten()
                            .filter(|w| !w.is_empty())
                            .cloned()
                            .collect(),
                    },
                    trace_out: match &a.trace_output {
                        Some(p) => TraceOut::File(p.clone()),
                        None => TraceOut::Stderr,
                    },
                    sched: a.sched,
                    qos: None,
                    rpc_to: None,
                }],
                a.sched
                    .map(|_| mantle_exec::dispatch::DispatchOptions::default()),
                None,
                None,
                None,
            ),
        };
    // the command line over the system file over the environment
    let exec_cpus = match (exec_cpus, sys_cpus, env_cpus) {
        (Some(c), _, _) => c,
        (None, Some(c), _) => {
            check_exec_cpus(&c)?;
            c
        }
        (None, None, c) => c.unwrap_or_default(),
    };
    let locking = locking.or(sys_locking).unwrap_or(env_locking()?);
    let mut defs = defs;
    crate::otlp::exec_start(a.otlp.as_deref(), &mut defs)?;
    let mut dispatch = dispatch;
    if let Some(p) = a.rt_priority {
        match &mut dispatch {
            Some(d) => d.rt_priority = p,
            None => {
                return Err(Failure::new(
                    EXIT_USAGE,
                    "--rt-priority is the dispatcher's: give --sched, or a --system file with a [dispatch] table",
                ))
            }
        }
    }
    if a.path == "fast" && a.sched.is_some() {
        return Err(Failure::new(
            EXIT_USAGE,
            "--sched is the protected path's (not yet --path fast)",
        ));
    }
    if a.path == "fast" {
        if let Some(code) = run_fast(&a, &defs[0], &exec_cpus, locking)? {
            std::process::exit(code);
        }
    }
    // Check everything before forking: agent options, commands.
    let mut specs = Vec::new();
    let mut counts = Vec::new();
    for d in &defs {
        let built = from_specs(&d.agents, crate::otlp::exec_writer(&d.name, &d.trace_out)?)
            .map_err(|e| {
                let msg = if a.system.is_some() {
                    format!("guest {}: {e}", d.name)
                } else {
                    e.to_string()
                };
                Failure::new(EXIT_USAGE, msg)
            })?;
        mantle_exec::launch::prepare(&d.command).map_err(|e| launch_failure(&e))?;
        check_enforcement(&d.name, &built, a.verbose)?;
        counts.push((d.name.clone(), built.count, d.agents.json));
        specs.push(GuestSpec {
            name: d.name.clone(),
            argv: d.command.clone(),
            agents: built.agents,
            sched: d.sched,
            qos: d.qos,
            enforce: built.enforce,
            rpc_to: d.rpc_to.clone(),
        });
    }
    let system = a.system.is_some();
    if let Some(g) = a.boost {
        let exec = a.priority.unwrap_or(99);
        if g >= exec {
            return Err(Failure::new(
                EXIT_USAGE,
                format!(
                    "--boost {g} must be below the executive's SCHED_FIFO priority ({})",
                    if exec == 0 {
                        "SCHED_OTHER with --priority 0".to_string()
                    } else {
                        exec.to_string()
                    }
                ),
            ));
        }
    }
    let opts = Options {
        priority: a.priority,
        sync_wake: !a.no_sync_wake_up,
        fail_open: a.fail_open,
        spin_before: a.extended.unwrap_or_default(),
        boost: a.boost,
        dispatch,
        verbose: a.verbose,
        qos_period: qos_period.unwrap_or(std::time::Duration::from_millis(100)),
        cpus: exec_cpus,
        locking,
        ..Options::default()
    };
    let verbose = a.verbose;
    let fail_open = a.fail_open;
    let json = a.json;
    let executive = move || -> i32 { executive_main(opts, specs, counts, verbose, system, json) };
    let end = mantle_exec::reaper::run(fail_open, executive)
        .map_err(|e| Failure::new(EXIT_FAILURE, format!("cannot start the executive: {e}")))?;
    match (end.executive.code, end.executive.signal) {
        (Some(code), _) => std::process::exit(code),
        (_, sig) => {
            let sig = sig.unwrap_or(0);
            let what = if fail_open {
                "its guests run on unsupervised (--fail-open): their interposed calls fail with ENOSYS".to_string()
            } else {
                format!("its guests were killed ({} processes)", end.killed)
            };
            Err(Failure::new(
                EXIT_RUN_ERROR,
                format!(
                    "the executive (pid {}) was killed by {}; {what}",
                    end.executive_pid,
                    mantle_exec::executive::signal_name(sig)
                ),
            ))
        }
    }
}

/// `--exec-cpus`, MANTLE_EXEC_CPUS and `--exec-locking` as given
/// (checked: the CPUs are allowed).
type ExecDesign = (
    Option<Vec<usize>>,
    Option<Vec<usize>>,
    Option<mantle_exec::executive::Locking>,
);

fn exec_design(a: &RunArgs) -> Result<ExecDesign, Failure> {
    let list = |what: &str, l: &str| -> Result<Vec<usize>, Failure> {
        let set = mantle_offload::parse_cpu_list(l)
            .map_err(|e| Failure::new(EXIT_USAGE, format!("{what} {l}: {e}")))?;
        let c: Vec<usize> = set.into_iter().map(|c| c as usize).collect();
        check_exec_cpus(&c)?;
        Ok(c)
    };
    let flag = a
        .exec_cpus
        .as_deref()
        .map(|l| list("--exec-cpus", l))
        .transpose()?;
    // MANTLE_EXEC_CPUS: the default list (the test suite runs the
    // executive's tests on N CPUs, on both paths); only those of its CPUs
    // this process may run on (a test pins mantle itself)
    let env = match std::env::var("MANTLE_EXEC_CPUS") {
        Ok(l) if !l.is_empty() => {
            let set = mantle_offload::parse_cpu_list(&l)
                .map_err(|e| Failure::new(EXIT_USAGE, format!("MANTLE_EXEC_CPUS {l}: {e}")))?;
            let allowed = mantle_sys::os::allowed_cpus().unwrap_or_default();
            let c: Vec<usize> = set
                .into_iter()
                .filter(|c| allowed.contains(c))
                .map(|c| c as usize)
                .collect();
            (!c.is_empty()).then_some(c)
        }
        _ => None,
    };
    let locking = a
        .exec_locking
        .as_deref()
        .map(|l| l.parse().map_err(|e: String| Failure::new(EXIT_USAGE, e)))
        .transpose()?;
    Ok((flag, env, locking))
}

/// Each executive CPU must be one this process may run on.
fn check_exec_cpus(cpus: &[usize]) -> Result<(), Failure> {
    let allowed = mantle_sys::os::allowed_cpus()
        .map_err(|e| Failure::new(EXIT_FAILURE, format!("cannot read the allowed CPUs: {e}")))?;
    for &c in cpus {
        if !allowed.contains(&(c as u32)) {
            return Err(Failure::new(
                EXIT_USAGE,
                format!(
                    "executive CPU {c} is not online or not allowed by the cpuset (allowed: {})",
                    allowed
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            ));
        }
    }
    Ok(())
}

/// MANTLE_EXEC_LOCKING: the default design when neither the command line
/// nor a system file says (the test suite runs the executive's tests
/// under both).
fn env_locking() -> Result<mantle_exec::executive::Locking, Failure> {
    match std::env::var("MANTLE_EXEC_LOCKING") {
        Ok(v) if !v.is_empty() => v
            .parse()
            .map_err(|e: String| Failure::new(EXIT_USAGE, format!("MANTLE_EXEC_LOCKING: {e}"))),
        _ => Ok(Default::default()),
    }
}

/// Checks a guest's redirect against the file system before anything
/// starts; with `-v`, says what each --deny was taken to mean and what the
/// kernel enforces.
fn check_enforcement(
    name: &str,
    built: &mantle_exec::agents::Built,
    verbose: bool,
) -> Result<(), Failure> {
    built
        .enforce
        .binds()
        .map_err(|e| Failure::new(EXIT_USAGE, e))?;
    if !verbose {
        return Ok(());
    }
    for m in &built.deny_meant {
        eprintln!("mantle: guest {name}: --deny {m}");
    }
    for line in built.enforce.describe() {
        eprintln!("mantle: guest {name}: {line}");
    }
    Ok(())
}

/// The executive process: start the guests, serve them, return the exit
/// status.
fn executive_main(
    opts: Options,
    specs: Vec<GuestSpec>,
    counts: Vec<(String, Option<Arc<CountTable>>, bool)>,
    verbose: bool,
    system: bool,
    json: bool,
) -> i32 {
    mantle_sys::supervise::catch_signals(
        &[libc::SIGTERM, libc::SIGHUP],
        &[libc::SIGINT, libc::SIGQUIT],
    );
    let log = Box::new(|m: &str| eprintln!("mantle: {m}"));
    let ex = match Executive::start(opts, specs, log) {
        Ok(ex) => ex,
        Err(e) => {
            let f = match &e {
                mantle_exec::executive::Error::Launch { source, .. } => {
                    let f = launch_failure(source);
                    Failure::new(f.code, error_chain(&e))
                }
                _ => Failure::new(EXIT_RUN_ERROR, error_chain(&e)),
            };
            eprintln!("mantle: {}", f.message);
            if json {
                exit_record(i32::from(f.code), &[], Some(&f.message));
            }
            return i32::from(f.code);
        }
    };
    let s = ex.setup();
    if let (Err(w), true) = (&s.priority, s.fifo_wanted) {
        eprintln!("mantle: warning: {w}");
    }
    if verbose {
        if let (Err(w), true) = (&s.memory_locked, s.fifo_wanted) {
            eprintln!("mantle: warning: {w}");
        }
        eprintln!(
            "mantle: executive pid {}: path protected, {}, memory {}, SYNC_WAKE_UP {}",
            std::process::id(),
            match &s.priority {
                Ok(p) => format!("SCHED_FIFO {p}"),
                Err(_) => "normal priority".into(),
            },
            if s.memory_locked.is_ok() {
                "locked"
            } else {
                "not locked"
            },
            if s.sync_wake_up { "on" } else { "off" }
        );
        for ((name, calls), pid) in s.filters.iter().zip(ex.pids()) {
            eprintln!(
                "mantle: guest {name} (pid {pid}): interposed calls: {}",
                if calls.is_empty() {
                    "none".to_string()
                } else {
                    calls.join(" ")
                }
            );
        }
    }
    let (ends, locks) = ex.run_with_locks();
    if !crate::otlp::exec_end(&counts) {
        for (name, count, json) in &counts {
            print_counts(name, count, *json);
        }
    }
    let mut status = 0;
    for e in &ends {
        if let End::NotStarted { step, errno } = &e.end {
            eprintln!(
                "mantle: guest {} could not start: {step}: {}",
                e.name,
                std::io::Error::from_raw_os_error(*errno)
            );
        }
        if system && verbose {
            eprintln!(
                "mantle: guest {} (pid {}) ended: status {}",
                e.name,
                e.pid,
                e.end.shell_status()
            );
        }
        if status == 0 {
            status = e.end.shell_status();
        }
    }
    if json {
        let guests: Vec<_> = ends
            .iter()
            .map(|e| guest_end_json(&e.name, Some(e.pid), &e.end))
            .collect();
        exit_record_locks(status, &guests, &locks);
    }
    status
}
