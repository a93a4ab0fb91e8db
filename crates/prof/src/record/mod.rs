//! `mantle prof record`: opens the perf events, runs the sample path,
//! follows the side band, drains and resolves samples into the merged
//! profile, and writes the session.
//!
//! [`record`] runs the steps in order, one file each:
//! 1. the options and the event, before anything needs privilege
//!    (`check_opts`, `choose`);
//! 2. the host and the tag names (`host`);
//! 3. the sample path loaded (`run::SamplePath`);
//! 4. the target: tasks, or the gated command (`target`);
//! 5. the side band opened and the /proc snapshot taken (`sideband`,
//!    `host`);
//! 6. the sampling events opened, with the fallback if need be
//!    (`choose::open_sampling`), and the sample path attached;
//! 7. the read loop: replay, drain, stop (`run`), with the off-CPU path
//!    when asked (`offcpu`);
//! 8. JIT maps, metadata, the session written, the summary (`finish`,
//!    `summary`).
//!
//! Invariant: everything that can be refused without root is refused
//! before recording starts (a refusal after minutes of recording would
//! waste them).

mod cgroups;
mod choose;
pub mod continuous;
mod finish;
mod host;
mod offcpu;
mod run;
mod sideband;
mod summary;
mod target;

pub use cgroups::Source as CgroupSource;
pub use choose::event_available;
pub use continuous::{Continuous, ContinuousSummary};
pub use host::{max_sample_rate, online_cpus, parse_cpu_list};
pub use summary::Summary;

use crate::model::{AddressSpaces, Meta};
use crate::session;
use crate::Error;
use choose::Placement;
use sideband::SideBand;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::Duration;

/// What to profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every CPU, every process.
    All,
    /// One running process (all its threads, and children it creates).
    Pid(u32),
    /// A command run for the occasion, and its process tree.
    Command(Vec<String>),
    /// Every task of a cgroup (v2 directory) and of its descendants, on
    /// every CPU (perf's `-G`: PERF_FLAG_PID_CGROUP events per CPU).
    Cgroup(PathBuf),
}

/// How samples travel from the sample path to user space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// In-kernel aggregation in hash maps, drained periodically (default).
    Aggregate,
    /// One ring-buffer record per sample.
    Ring,
}

/// Whether and how call stacks are taken (bench/prof/HISTORY.md,
/// "Call stacks", measures the two ways).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stacks {
    /// No stacks: the leaf only (flat profile, the cheapest sample).
    None,
    /// The perf core walks the stack (PERF_SAMPLE_CALLCHAIN in the
    /// event's sample_type) and the sample path's bpf_get_stack keeps
    /// the walk it made.
    Perf,
    /// The sample path's bpf_get_stack walks the stack itself (the
    /// event asks for no callchain).
    Bpf,
    /// The kernel callchain from the perf core, and the user stack
    /// unwound in user space with `.eh_frame` from a copy of its top
    /// (PERF_SAMPLE_REGS_USER + PERF_SAMPLE_STACK_USER, as `perf record
    /// --call-graph dwarf`): for code without frame pointers. Samples go
    /// through the perf ring, not the eBPF sample path (so untagged).
    Dwarf,
}

#[derive(Debug, Clone)]
pub struct RecordOpts {
    pub target: Target,
    pub event: String,
    /// Event to use when `event` is not available here.
    pub fallback: Option<String>,
    pub freq: Option<u64>,
    pub period: Option<u64>,
    pub output: PathBuf,
    pub duration: Option<Duration>,
    pub transport: Transport,
    pub drain_interval: Duration,
    /// Measure the sample path's cost (Table 2).
    pub self_timing: bool,
    /// Call stacks: none, or who walks them.
    pub stacks: Stacks,
    /// `--stacks dwarf`: bytes of user stack copied per sample.
    pub stack_copy: u32,
    /// Live status line (only drawn when stderr is a terminal).
    pub status: bool,
    /// Replace `output` if it holds a session (never anything else).
    pub force: bool,
    /// One session per period in a directory instead of `output`.
    pub continuous: Option<Continuous>,
    /// Failures to simulate (tests).
    pub faults: Faults,
    /// Also record off-CPU time (blocked threads and their stacks, from
    /// sched_switch; eBPF only).
    pub off_cpu: bool,
}

/// A seam for tests: system call failures to simulate, so that paths such
/// as "no hardware PMU" are exercised on every machine, with a PMU or not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// perf_event_open of every hardware event fails with this errno
    /// (ENOENT is what a machine without a PMU answers).
    pub hardware_errno: Option<i32>,
    /// Record as if the recorder held this privilege instead of its own
    /// (a root test takes the unprivileged perf-ring path; the kernel
    /// still checks what is opened against the real credentials).
    pub privilege: Option<Privilege>,
    /// Take the perf-ring path's cgroups from /proc, as on a kernel
    /// without PERF_SAMPLE_CGROUP.
    pub no_sample_cgroup: bool,
}

impl Default for RecordOpts {
    fn default() -> Self {
        RecordOpts {
            target: Target::All,
            event: "cpu-clock".into(),
            fallback: None,
            freq: None,
            period: None,
            output: PathBuf::from(session::DEFAULT_DIR),
            duration: None,
            transport: Transport::Aggregate,
            drain_interval: Duration::from_millis(1000),
            self_timing: false,
            stacks: Stacks::Perf,
            stack_copy: crate::unwind::STACK_COPY,
            status: true,
            force: false,
            continuous: None,
            faults: Faults::default(),
            off_cpu: false,
        }
    }
}

pub const DEFAULT_FREQ: u64 = 4000;

/// Checks the options alone (no system calls but a look at `output`).
fn check_opts(o: &RecordOpts) -> Result<(Option<u64>, Option<u64>), Error> {
    if o.duration.is_some_and(|d| d.is_zero()) {
        return Err(Error::Invalid(
            "--duration must be more than 0 seconds (leave it out to record until the command ends or Ctrl-C)".into(),
        ));
    }
    let (freq, period) = match (o.freq, o.period) {
        (Some(_), Some(_)) => return Err(Error::Invalid("-F and -c exclude each other".into())),
        (None, None) => (Some(DEFAULT_FREQ), None),
        (f, p) => (f, p),
    };
    if freq == Some(0) || period == Some(0) {
        return Err(Error::Invalid("-F and -c must be positive".into()));
    }
    if !crate::unwind::stack_copy_ok(o.stack_copy) {
        return Err(Error::Invalid(format!(
            "--stack-size {} is not a multiple of 8 from {} to {} bytes",
            o.stack_copy,
            crate::unwind::STACK_COPY_RANGE.start(),
            crate::unwind::STACK_COPY_RANGE.end()
        )));
    }
    if o.stacks != Stacks::Dwarf && o.stack_copy != crate::unwind::STACK_COPY {
        return Err(Error::Invalid(
            "--stack-size is for --stacks dwarf (the other ways copy no stack)".into(),
        ));
    }
    if o.drain_interval.is_zero() {
        return Err(Error::Invalid("the drain interval must be positive".into()));
    }
    if let Target::Command(argv) = &o.target {
        if argv.is_empty() {
            return Err(Error::Invalid("no command given after --".into()));
        }
    }
    if let Some(c) = &o.continuous {
        c.check(o.drain_interval)?;
        if o.force {
            return Err(Error::Invalid(
                "--force is for -o; --continuous writes new sessions only".into(),
            ));
        }
        if o.self_timing {
            return Err(Error::Invalid(
                "--self-timing measures one recording, not with --continuous".into(),
            ));
        }
        if o.off_cpu {
            // the off-CPU rows are summed in the kernel over the whole
            // recording and index its one stack table: not per period
            return Err(Error::Invalid(
                "--off-cpu records one session, not with --continuous".into(),
            ));
        }
    }
    Ok((freq, period))
}

/// The capabilities a recording needs that a process lacks, by name: every
/// way of recording loads the eBPF sample path (bpf(2) needs CAP_BPF,
/// a perf_event program CAP_PERFMON as well; CAP_SYS_ADMIN stands for
/// either) and samples kernel mode (CAP_PERFMON above
/// `perf_event_paranoid` 1), and `-a` opens system-wide events
/// (CAP_PERFMON). Capabilities count only in the initial user namespace
/// (the kernel checks them there for perf events and BPF): uid 0 in
/// `unshare -Ur` has all of its namespace's and none that count. Pure:
/// `caps` is the effective set (bit n = capability n).
pub fn missing_caps(caps: u64, initial_ns: bool) -> Vec<&'static str> {
    use mantle_sys::os::{CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN};
    let has = |c: u32| initial_ns && caps & (1u64 << c) != 0;
    let mut v = Vec::new();
    if !has(CAP_BPF) && !has(CAP_SYS_ADMIN) {
        v.push("CAP_BPF");
    }
    if !has(CAP_PERFMON) && !has(CAP_SYS_ADMIN) {
        v.push("CAP_PERFMON");
    }
    v
}

/// The refusal for what [`missing_caps`] found missing.
pub fn privilege_error(missing: &[&str], initial_ns: bool) -> Error {
    let mut s = format!(
        "recording needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), for the eBPF sample path and kernel samples; missing: {}",
        missing.join(", ")
    );
    if !initial_ns {
        s.push_str(
            " (this process is in a user namespace other than the initial one, where no capability counts for perf events or BPF)",
        );
    }
    Error::Permission(s)
}

/// How a recording may sample, given the recorder's privilege: what
/// [`plan_access`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// The eBPF sample path (CAP_BPF and CAP_PERFMON): tags, in-kernel
    /// aggregation. Without it samples travel through the perf ring and
    /// are read in user space (perf's own way).
    pub bpf: bool,
    /// Kernel-mode samples and kernel callchains (CAP_PERFMON, or
    /// `perf_event_paranoid` at most 1). Without it every event is
    /// `exclude_kernel`: user-mode samples only, as perf's `:u`.
    pub kernel: bool,
}

/// What the recorder holds: effective capabilities (bit n = capability
/// n), whether in the initial user namespace, and `perf_event_paranoid`
/// (None: unreadable, taken as the kernel's default 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Privilege {
    pub caps: u64,
    pub initial_ns: bool,
    pub paranoid: Option<i64>,
}

impl Privilege {
    /// This process's.
    pub fn current() -> Privilege {
        Privilege {
            caps: mantle_sys::os::effective_caps().unwrap_or(0),
            initial_ns: mantle_sys::os::in_initial_user_ns(),
            paranoid: host::perf_event_paranoid(),
        }
    }
}

/// Decides how `o` can be recorded with privilege `p`, the way perf
/// decides (kernel/events/core.c): with CAP_BPF and CAP_PERFMON (or
/// CAP_SYS_ADMIN) everything, on the eBPF sample path; without them one's
/// own processes still, where `perf_event_paranoid` allows it (2: user
/// mode only; 1: kernel too; 0 and less: system-wide), through the perf
/// ring, untagged. Refusals are [`Error::Permission`] naming what is
/// missing: `-a` above paranoid 0, any recording at paranoid 3 or more
/// (Debian's "no unprivileged perf"), and the options that exist only on
/// the eBPF path (`--transport ring`, `--self-timing`, `--stacks bpf`,
/// `--off-cpu`).
/// Pure.
pub fn plan_access(o: &RecordOpts, p: Privilege) -> Result<Access, Error> {
    use mantle_sys::os::{CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN};
    let has = |c: u32| p.initial_ns && p.caps & (1u64 << c) != 0;
    let perfmon = has(CAP_PERFMON) || has(CAP_SYS_ADMIN);
    let bpf = perfmon && (has(CAP_BPF) || has(CAP_SYS_ADMIN));
    let paranoid = p.paranoid.unwrap_or(2);
    let missing = missing_caps(p.caps, p.initial_ns);
    let ns_note = if p.initial_ns {
        ""
    } else {
        " (this process is in a user namespace other than the initial one, where no capability counts for perf events or BPF)"
    };
    if !perfmon && paranoid > 2 {
        return Err(Error::Permission(format!(
            "kernel.perf_event_paranoid is {paranoid}: users without CAP_PERFMON (or CAP_SYS_ADMIN) may not use perf events at all; missing: CAP_PERFMON{ns_note}"
        )));
    }
    if matches!(o.target, Target::Cgroup(_)) && !perfmon && paranoid > 0 {
        return Err(Error::Permission(format!(
            "recording a cgroup (--cgroup) opens CPU-wide events, which need CAP_PERFMON (or CAP_SYS_ADMIN) at kernel.perf_event_paranoid {paranoid}; missing: CAP_PERFMON{ns_note}"
        )));
    }
    if o.target == Target::All && !perfmon && paranoid > 0 {
        return Err(Error::Permission(format!(
            "recording every CPU (-a) needs CAP_PERFMON (or CAP_SYS_ADMIN) at kernel.perf_event_paranoid {paranoid}; missing: CAP_PERFMON{ns_note}; without it, record your own command (`mantle prof record -- CMD`) or process (-p)"
        )));
    }
    if !bpf {
        let what = if o.transport == Transport::Ring {
            Some("--transport ring")
        } else if o.self_timing {
            Some("--self-timing")
        } else if o.stacks == Stacks::Bpf {
            Some("--stacks bpf")
        } else if o.off_cpu {
            Some("--off-cpu (sched_switch)")
        } else {
            None
        };
        if let Some(what) = what {
            return Err(Error::Permission(format!(
                "{what} is a way of the eBPF sample path, which needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN); missing: {}{ns_note}",
                missing.join(", ")
            )));
        }
    }
    Ok(Access {
        bpf,
        kernel: perfmon || paranoid <= 1,
    })
}

/// The warning a session without the eBPF path or kernel samples carries.
fn access_warning(a: Access, p: Privilege) -> Option<String> {
    let missing = missing_caps(p.caps, p.initial_ns).join(", ");
    let paranoid = p
        .paranoid
        .map_or("unreadable".to_string(), |n| n.to_string());
    match (a.bpf, a.kernel) {
        (true, _) => None,
        (false, false) => Some(format!(
            "recorded without {missing} (kernel.perf_event_paranoid {paranoid}): user-mode samples only (time in the kernel is not seen), samples through the perf ring, untagged (no eBPF sample path)"
        )),
        (false, true) => Some(format!(
            "recorded without {missing}: samples through the perf ring, untagged (no eBPF sample path)"
        )),
    }
}

/// A frequency the kernel accepts; returns the rate limit at the start
/// (compared with the one at the end: the kernel lowers it when sample
/// interrupts take too long).
fn check_rate(freq: Option<u64>) -> Result<Option<i64>, Error> {
    let max_rate_start = max_sample_rate();
    if let (Some(f), Some(m)) = (freq, max_rate_start) {
        if f as i64 > m {
            return Err(Error::RateTooHigh { asked: f, max: m });
        }
    }
    Ok(max_rate_start)
}

/// The processes already there: every one for -a; for a process or a
/// command, that process and mantle itself (which is marked as such).
fn snapshot(sp: &mut AddressSpaces, target: &Target) {
    match target {
        // a cgroup's processes are any of the machine's (and move)
        Target::All | Target::Cgroup(_) => host::snapshot_proc(sp, None),
        Target::Pid(p) => host::snapshot_proc(sp, Some(&[*p, std::process::id()])),
        Target::Command(_) => host::snapshot_proc(sp, Some(&[std::process::id()])),
    }
    if let Some(p) = sp.procs.get_mut(&std::process::id()) {
        p.mantle = true;
    }
}

/// Records a session. Blocks until the command exits, the process exits,
/// the duration ends, or SIGINT/SIGTERM.
pub fn record(o: &RecordOpts) -> Result<Summary, Error> {
    // refusals that need no privilege, then the privilege and the rate
    let (freq, period) = check_opts(o)?;
    let chosen = choose::choose_event(o)?;
    let privilege = o.faults.privilege.unwrap_or_else(Privilege::current);
    let access = plan_access(o, privilege)?;
    let max_rate_start = check_rate(freq)?;
    // then the output, still before anything is recorded (an unprivileged
    // user hears about the privilege first: the output's directory may be
    // one only the privileged can write)
    let mut writer = match &o.continuous {
        Some(c) => Some(continuous::Writer::new(c)?),
        None => {
            session::check_output(&o.output, o.force)?;
            session::check_writable(&o.output)?;
            None
        }
    };
    // set up: host, sample path, target, side band, sampling events
    let cpus = online_cpus();
    let mut sp = AddressSpaces::new(host::mantle_comms());
    let (tags_loaded, tags_start) = host::tag_names();
    let mut warnings: Vec<String> = access_warning(access, privilege).into_iter().collect();
    let mut path = run::SamplePath::load(o, access.bpf, &mut warnings)?;
    // samples go through the perf ring when there is no eBPF path, and
    // with --stacks dwarf (the stack copies)
    let ring_samples = !access.bpf || o.stacks == Stacks::Dwarf;
    let pages = sideband::ring_pages(
        o.stacks == Stacks::Dwarf,
        o.stack_copy,
        ring_samples,
        !access.bpf,
        cpus.len(),
    )?;
    let mut tracee = target::start(&o.target)?;
    // --off-cpu: its own eBPF programs, on sched_switch (plan_access
    // refused it without CAP_BPF)
    let off_cpu = if o.off_cpu {
        Some(offcpu::OffCpuRec::load(&o.target, &tracee)?)
    } else {
        None
    };
    let mut side = SideBand::open(
        &cpus,
        &tracee.pids,
        tracee.inherit,
        pages,
        !access.kernel,
        tracee.cgroup.as_ref().map(|f| f.as_fd()),
    )
    .map_err(|e| not_yours(e, o, access, privilege))?;
    snapshot(&mut sp, &o.target);
    let max_stack = host::max_stack(ring_samples);
    let cgroups = cgroup_source(ring_samples, &o.faults, &mut warnings);
    let sampling = choose::open_sampling(
        chosen,
        &Placement {
            pids: &tracee.pids,
            cpus: &cpus,
            inherit: tracee.inherit,
            on_exec: tracee.on_exec,
            freq,
            period,
            callchain: matches!(o.stacks, Stacks::Perf | Stacks::Dwarf),
            dwarf: (o.stacks == Stacks::Dwarf).then_some(o.stack_copy),
            max_stack: max_stack.depth,
            ring_samples,
            exclude_kernel: !access.kernel,
            cgroup: tracee.cgroup.as_ref().map(|f| f.as_fd()),
            sample_cgroup: cgroups == cgroups::Source::PerfSample,
        },
        &o.faults,
    )
    .map_err(|e| not_yours(e, o, access, privilege))?;
    if let Some(w) = max_stack.warning {
        if o.stacks != Stacks::None {
            warnings.push(w);
        }
    }
    let throttle_visible = path.attach(&sampling.fds, &side.rings)?;

    // record until the end, then drain
    let mut cg = cgroups::Cgroups::new(cgroups);
    if cg.source == cgroups::Source::None {
        warnings.push("no cgroup v2 mounted: samples carry no cgroup".into());
    }
    let recorded = finish::Recorded {
        ev: sampling.ev,
        fallback_from: sampling.fallback_from.clone(),
        freq,
        period,
        target: tracee.desc.clone(),
        cpus: cpus.len() as u32,
        max_rate_start,
        tags_loaded,
        warnings,
        throttle_visible,
        access,
        max_stack: max_stack.depth,
        cgroup_source: cg.source,
    };
    let Some(writer) = writer.as_mut() else {
        let mut p = run::run(
            o,
            &mut path,
            &mut side,
            &mut sp,
            &sampling,
            &mut tracee,
            run::Sink {
                cgroups: &mut cg,
                rotation: None,
                off_cpu,
            },
        )?;
        // what the report needs later, and the session
        let (_, tags_end) = host::tag_names();
        let tags = host::merge_tag_names(tags_start, tags_end);
        let mut r = recorded;
        let jit_maps = finish::jit_maps(&mut p.run.profile, &mut sp, &mut r.warnings)?;
        return finish::write(
            o,
            p.run,
            &sp,
            r,
            finish::Tables {
                side: &p.side,
                tags: &tags,
                jit_maps: &jit_maps,
                cgroups: &cg,
            },
        );
    };
    // continuous: each period written as it ends, the last one at the end;
    // the writer reads kallsyms for each session, the summary says now
    // whether it can
    let kernel_symbols = host::kallsyms_text().is_some();
    let mut write_period = |mut p: run::Period,
                            sp: &mut AddressSpaces,
                            cg: &cgroups::Cgroups|
     -> Result<Meta, Error> {
        let (_, names) = host::tag_names();
        let tags = host::merge_tag_names(tags_start.clone(), names);
        let mut r = recorded.clone();
        let jit_maps = finish::jit_maps(&mut p.run.profile, sp, &mut r.warnings)?;
        let meta = finish::meta(o, &p.run, &r, &p.side, kernel_symbols);
        let cgroups = cg.table(p.run.profile.counts().keys().map(|k| k.cgroup));
        writer.submit(continuous::PeriodData {
            meta: meta.clone(),
            profile: p.run.profile,
            procs: sp.procs.clone(),
            history: sp.history.clone(),
            tags,
            jit_maps,
            cgroups,
        })?;
        Ok(meta)
    };
    let c = o.continuous.as_ref().expect("continuous");
    let last = run::run(
        o,
        &mut path,
        &mut side,
        &mut sp,
        &sampling,
        &mut tracee,
        run::Sink {
            cgroups: &mut cg,
            rotation: Some((c.rotate, &mut |p, sp, cg| {
                write_period(p, sp, cg).map(|_| ())
            })),
            // refused with --continuous (check_opts)
            off_cpu: None,
        },
    )?;
    let command_status = last.run.command_status;
    let rows = last.run.profile.counts().len();
    let images = last.run.profile.images.len();
    let meta = write_period(last, &mut sp, &cg)?;
    writer.finish()?;
    Ok(Summary {
        session: writer
            .summary
            .written
            .last()
            .map(|n| c.dir.join(n).display().to_string())
            .unwrap_or_default(),
        caveats: meta.caveats(),
        rows,
        images,
        processes: sp.procs.len(),
        meta,
        command_status,
        continuous: Some(writer.summary.clone()),
    })
}

/// Where the samples' cgroups will come from: the eBPF sample path reads
/// them itself; sample records through the perf ring carry them where
/// the kernel takes PERF_SAMPLE_CGROUP and the perf_event controller is
/// on the v2 hierarchy (else the ids would be of a v1 tree), and are
/// otherwise looked up in /proc per process (said in `warnings`).
fn cgroup_source(
    ring_samples: bool,
    faults: &Faults,
    warnings: &mut Vec<String>,
) -> cgroups::Source {
    if !ring_samples {
        return cgroups::Source::Bpf;
    }
    let v1 =
        std::fs::read_to_string("/proc/self/cgroup").is_ok_and(|t| cgroups::perf_event_on_v1(&t));
    let works = !faults.no_sample_cgroup && cgroups::perf_sample_cgroup_works();
    if works && !v1 {
        return cgroups::Source::PerfSample;
    }
    warnings.push(format!(
        "{}: each process's cgroup was read from /proc/PID/cgroup at its first sample (a process that moved later is counted in its first cgroup)",
        if v1 {
            "the perf_event controller is on a cgroup v1 hierarchy"
        } else {
            "this kernel does not take PERF_SAMPLE_CGROUP (Linux 5.7+, CONFIG_CGROUP_PERF)"
        }
    ));
    cgroups::Source::Proc
}

/// A perf event refused for `-p` of a process that is not the
/// recorder's, without CAP_PERFMON: said in those words (exit 4).
fn not_yours(e: Error, o: &RecordOpts, a: Access, p: Privilege) -> Error {
    let denied =
        matches!(e, Error::Permission(_)) || matches!(e.errno(), Some(libc::EACCES | libc::EPERM));
    match o.target {
        Target::Pid(pid) if denied && !a.bpf => Error::Permission(format!(
            "pid {pid} is not yours to record: without CAP_PERFMON (or CAP_SYS_ADMIN), kernel.perf_event_paranoid {} lets a user record only their own processes; missing: {} ({e})",
            p.paranoid.map_or("unreadable".to_string(), |n| n.to_string()),
            missing_caps(p.caps, p.initial_ns).join(", ")
        )),
        _ => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mantle_sys::os::{CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN};

    /// perf's privilege model (kernel/events/core.c), capability by
    /// capability and paranoid level by level.
    #[test]
    fn access_follows_perf_event_paranoid_and_capabilities() {
        let c = |caps: &[u32]| caps.iter().fold(0u64, |s, c| s | 1 << c);
        let p = |caps: u64, initial_ns: bool, paranoid: i64| Privilege {
            caps,
            initial_ns,
            paranoid: Some(paranoid),
        };
        let cmd = RecordOpts {
            target: Target::Command(vec!["x".into()]),
            ..Default::default()
        };
        let all = RecordOpts::default();
        let full = Access {
            bpf: true,
            kernel: true,
        };
        // privileged: everything, on the eBPF path
        for caps in [c(&[CAP_BPF, CAP_PERFMON]), c(&[CAP_SYS_ADMIN])] {
            for paranoid in [-1, 2, 3] {
                assert_eq!(plan_access(&all, p(caps, true, paranoid)).unwrap(), full);
            }
        }
        // nobody at 2: their own command, user mode, perf ring
        let user = Access {
            bpf: false,
            kernel: false,
        };
        assert_eq!(plan_access(&cmd, p(0, true, 2)).unwrap(), user);
        // ... and uid 0 of a user namespace with every capability there
        assert_eq!(plan_access(&cmd, p(u64::MAX, false, 2)).unwrap(), user);
        // at 1 kernel mode too; at 0 and below the whole system
        assert!(plan_access(&cmd, p(0, true, 1)).unwrap().kernel);
        assert!(plan_access(&all, p(0, true, 1)).is_err());
        assert!(plan_access(&all, p(0, true, 0)).is_ok());
        // unreadable paranoid: the kernel's default, 2
        let unknown = Privilege {
            caps: 0,
            initial_ns: true,
            paranoid: None,
        };
        assert_eq!(plan_access(&cmd, unknown).unwrap(), user);
        // a cgroup is CPU-wide: as -a
        let cg = RecordOpts {
            target: Target::Cgroup("/sys/fs/cgroup/x".into()),
            ..Default::default()
        };
        let e = plan_access(&cg, p(0, true, 2)).unwrap_err().to_string();
        assert!(
            e.contains("--cgroup") && e.contains("missing: CAP_PERFMON"),
            "{e}"
        );
        assert!(plan_access(&cg, p(0, true, 0)).is_ok());
        assert!(plan_access(&cg, p(c(&[CAP_PERFMON]), true, 2)).is_ok());
        // -a at 2 without CAP_PERFMON: refused, naming it
        let e = plan_access(&all, p(0, true, 2)).unwrap_err().to_string();
        assert!(e.contains("missing: CAP_PERFMON"), "{e}");
        let e = plan_access(&all, p(u64::MAX, false, 2))
            .unwrap_err()
            .to_string();
        assert!(e.contains("user namespace"), "{e}");
        // paranoid 3 (Debian's): nothing without CAP_PERFMON
        let e = plan_access(&cmd, p(0, true, 3)).unwrap_err().to_string();
        assert!(e.contains("perf_event_paranoid is 3"), "{e}");
        // CAP_PERFMON alone: kernel samples, the perf ring
        assert_eq!(
            plan_access(&all, p(c(&[CAP_PERFMON]), true, 2)).unwrap(),
            Access {
                bpf: false,
                kernel: true
            }
        );
        // the eBPF path's own options need it
        for o in [
            RecordOpts {
                transport: Transport::Ring,
                ..cmd.clone()
            },
            RecordOpts {
                self_timing: true,
                ..cmd.clone()
            },
            RecordOpts {
                stacks: Stacks::Bpf,
                ..cmd.clone()
            },
            RecordOpts {
                off_cpu: true,
                ..cmd.clone()
            },
        ] {
            let e = plan_access(&o, p(c(&[CAP_PERFMON]), true, 2))
                .unwrap_err()
                .to_string();
            assert!(e.contains("missing: CAP_BPF"), "{e}");
            assert!(plan_access(&o, p(c(&[CAP_SYS_ADMIN]), true, 2)).is_ok());
        }
        // --stacks dwarf and none need no eBPF
        for stacks in [Stacks::Dwarf, Stacks::None] {
            let o = RecordOpts {
                stacks,
                ..cmd.clone()
            };
            assert_eq!(plan_access(&o, p(0, true, 2)).unwrap(), user);
        }
    }

    #[test]
    fn capabilities_not_uid_decide() {
        let c = |caps: &[u32]| caps.iter().fold(0u64, |s, c| s | 1 << c);
        assert_eq!(missing_caps(0, true), vec!["CAP_BPF", "CAP_PERFMON"]);
        assert!(missing_caps(c(&[CAP_BPF, CAP_PERFMON]), true).is_empty());
        assert!(missing_caps(c(&[CAP_SYS_ADMIN]), true).is_empty());
        assert_eq!(missing_caps(c(&[CAP_PERFMON]), true), vec!["CAP_BPF"]);
        assert_eq!(missing_caps(c(&[CAP_BPF]), true), vec!["CAP_PERFMON"]);
        // every capability, in a user namespace: none counts
        assert_eq!(
            missing_caps(u64::MAX, false),
            vec!["CAP_BPF", "CAP_PERFMON"]
        );
        let e = privilege_error(&["CAP_BPF"], false).to_string();
        assert!(
            e.contains("missing: CAP_BPF") && e.contains("user namespace"),
            "{e}"
        );
    }
}
