//! Event choice: which event is sampled (the one asked for, or the
//! `--fallback` when this machine has no PMU for it), and opening the
//! sampling events on every CPU and task of the target.
//!
//! Mechanism: a hardware event is first tried as a counting event on this
//! thread (ENOENT, ENODEV or EOPNOTSUPP: no PMU); a PMU that counts but
//! cannot sample is found when the sampling events are opened, and takes
//! the same way out. Every perf_event_open goes through the [`Faults`]
//! seam, so the no-PMU paths run in tests on any machine.
//!
//! Invariant: the event is never replaced silently: a fallback is recorded
//! in the session (`fallback_from`) and shown in every summary and report.

use super::host::max_sample_rate;
use super::{Faults, RecordOpts};
use crate::events::{self, EventDef};
use crate::kernel::{self, attr, PerfEventAttr};
use crate::Error;
use std::os::fd::{BorrowedFd, OwnedFd};

pub(super) fn is_missing_pmu(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::EOPNOTSUPP)
    )
}

/// perf_event_open for `ev`, through the [`Faults`] seam.
fn open_event(
    ev: &EventDef,
    a: &PerfEventAttr,
    pid: i32,
    cpu: i32,
    faults: &Faults,
) -> Result<OwnedFd, std::io::Error> {
    open_event_in(ev, a, pid, cpu, None, faults)
}

/// [`open_event`], in cgroup mode when `cgroup` is given (`pid` unused).
fn open_event_in(
    ev: &EventDef,
    a: &PerfEventAttr,
    pid: i32,
    cpu: i32,
    cgroup: Option<BorrowedFd>,
    faults: &Faults,
) -> Result<OwnedFd, std::io::Error> {
    if let (true, Some(errno)) = (ev.hardware, faults.hardware_errno) {
        return Err(std::io::Error::from_raw_os_error(errno));
    }
    match cgroup {
        Some(dir) => kernel::perf_event_open_cgroup(a, dir, cpu),
        None => kernel::perf_event_open(a, pid, cpu),
    }
}

/// Whether an event can be opened here (a counting event on this thread).
pub fn event_available(e: &EventDef) -> Result<(), std::io::Error> {
    event_available_with(e, &Faults::default())
}

fn event_available_with(e: &EventDef, faults: &Faults) -> Result<(), std::io::Error> {
    let a = PerfEventAttr {
        type_: e.type_,
        config: e.config,
        flags: attr::DISABLED,
        ..Default::default()
    };
    open_event(e, &a, 0, -1, faults).map(|_| ())
}

/// What [`choose_event`] decided.
pub(super) struct Chosen {
    /// The event to sample.
    pub ev: &'static EventDef,
    /// The event asked for, when the fallback already replaced it.
    pub fallback_from: Option<&'static EventDef>,
    /// The fallback still available, if sampling `ev` is refused later.
    pub fallback: Option<&'static EventDef>,
}

/// The event to sample. Errors name the way out: no PMU (with or without
/// a fallback that needs one too), a fallback equal to the event.
pub(super) fn choose_event(o: &RecordOpts) -> Result<Chosen, Error> {
    let ev = events::by_name(&o.event)
        .ok_or_else(|| Error::UnknownEvent(o.event.clone(), events::names()))?;
    let fb = match &o.fallback {
        Some(f) => Some(
            events::by_name(f).ok_or_else(|| Error::UnknownEvent(f.clone(), events::names()))?,
        ),
        None => None,
    };
    if let Some(fb) = fb {
        if fb.name == ev.name {
            return Err(Error::Invalid(format!(
                "--fallback {} is the event itself (-e {}): the fallback is what is sampled when the event cannot be; use --fallback cpu-clock",
                o.fallback.as_deref().unwrap_or(fb.name),
                o.event
            )));
        }
    }
    let asked = Chosen {
        ev,
        fallback_from: None,
        fallback: fb,
    };
    if !ev.hardware {
        return Ok(asked);
    }
    match event_available_with(ev, &o.faults) {
        Err(e) if is_missing_pmu(&e) => match fb {
            None => Err(Error::NoPmu(ev.name.into())),
            Some(fb) => use_fallback(ev, fb, &o.faults),
        },
        // other errors (EACCES...) are reported when the sampling events
        // are opened, with the same mapping as for any event
        _ => Ok(asked),
    }
}

/// `ev` cannot be sampled for want of a PMU: `fb` replaces it, if it needs
/// no PMU itself.
fn use_fallback(
    ev: &'static EventDef,
    fb: &'static EventDef,
    faults: &Faults,
) -> Result<Chosen, Error> {
    if fb.hardware && event_available_with(fb, faults).is_err_and(|e| is_missing_pmu(&e)) {
        return Err(Error::FallbackNoPmu {
            event: ev.name.into(),
            fallback: fb.name.into(),
        });
    }
    Ok(Chosen {
        ev: fb,
        fallback_from: Some(ev),
        fallback: None,
    })
}

/// The error for a sampling event the kernel refused.
fn open_error(ev: &EventDef, e: std::io::Error, freq: Option<u64>) -> Error {
    match e.raw_os_error() {
        Some(libc::EINVAL) if freq.is_some() => Error::os(
            format!(
                "the kernel refused {} at {} Hz (EINVAL): kernel.perf_event_max_sample_rate is {}",
                ev.name,
                freq.unwrap_or(0),
                max_sample_rate()
                    .map(|m| m.to_string())
                    .unwrap_or("?".into())
            ),
            e,
        ),
        Some(libc::EACCES) | Some(libc::EPERM) => {
            Error::Permission(format!("perf_event_open of {}: {e}", ev.name))
        }
        _ => Error::os(format!("open {} events", ev.name), e),
    }
}

/// Where and how the sampling events are opened.
pub(super) struct Placement<'a> {
    /// Tasks (-1: every task of the CPU).
    pub pids: &'a [i32],
    pub cpus: &'a [u32],
    /// Children inherit the events (a process or a command).
    pub inherit: bool,
    /// Enabled by the command's exec (the gated child).
    pub on_exec: bool,
    /// A frequency in Hz, else `period` events per sample.
    pub freq: Option<u64>,
    pub period: Option<u64>,
    /// Ask the perf core for the callchain (PERF_SAMPLE_CALLCHAIN).
    pub callchain: bool,
    /// Its depth (`sample_max_stack`).
    pub max_stack: u16,
    /// `--stacks dwarf`: the callchain's kernel part only, plus the user
    /// registers and a copy of this many bytes of the user stack in every
    /// sample record.
    pub dwarf: Option<u32>,
    /// The sample records themselves go through the perf ring (no eBPF
    /// sample path, or `--stacks dwarf`): they carry their time and CPU
    /// (the layouts crate::unwind parses).
    pub ring_samples: bool,
    /// User mode only (`exclude_kernel`, no kernel callchain): what an
    /// unprivileged recorder may sample at `perf_event_paranoid` 2.
    pub exclude_kernel: bool,
    /// `--cgroup`: the events are opened in cgroup mode on this directory.
    pub cgroup: Option<BorrowedFd<'a>>,
    /// Perf-ring sample records carry the task's cgroup id
    /// (PERF_SAMPLE_CGROUP, after every other field).
    pub sample_cgroup: bool,
}

/// The sampling events that were opened, and the event they sample.
pub(super) struct Sampling {
    /// (CPU, fd) of every sampling event.
    pub fds: Vec<(u32, OwnedFd)>,
    pub ev: &'static EventDef,
    /// The event asked for, when the fallback replaced it.
    pub fallback_from: Option<String>,
}

/// Opens the sampling events of `chosen` (disabled) everywhere `at` says.
/// A hardware event whose sampling is refused for want of a PMU takes the
/// fallback, if there is one.
pub(super) fn open_sampling(
    chosen: Chosen,
    at: &Placement,
    faults: &Faults,
) -> Result<Sampling, Error> {
    let Chosen {
        mut ev,
        fallback_from,
        fallback,
    } = chosen;
    let mut fallback_from: Option<String> = fallback_from.map(|e| e.name.to_string());
    // check_opts gave one of the two
    let sample_period = at.freq.or(at.period).unwrap_or(super::DEFAULT_FREQ);
    let open_all = |ev: &EventDef| -> Result<Vec<(u32, OwnedFd)>, std::io::Error> {
        let mut fds = Vec::new();
        for &pid in at.pids {
            for &cpu in at.cpus {
                let mut flags = attr::DISABLED;
                if at.inherit {
                    flags |= attr::INHERIT;
                }
                if at.on_exec {
                    flags |= attr::ENABLE_ON_EXEC;
                }
                if at.freq.is_some() {
                    flags |= attr::FREQ;
                }
                let mut sample_type = kernel::PERF_SAMPLE_IP
                    | kernel::PERF_SAMPLE_TID
                    | if at.callchain {
                        kernel::PERF_SAMPLE_CALLCHAIN
                    } else {
                        0
                    };
                let (mut regs, mut stack) = (0, 0);
                if at.ring_samples {
                    sample_type |= kernel::PERF_SAMPLE_TIME | kernel::PERF_SAMPLE_CPU;
                }
                if at.exclude_kernel {
                    flags |= attr::EXCLUDE_KERNEL | attr::EXCLUDE_CALLCHAIN_KERNEL;
                }
                if let Some(copy) = at.dwarf {
                    // the record layout crate::unwind::parse_sample reads
                    sample_type |= kernel::PERF_SAMPLE_TIME
                        | kernel::PERF_SAMPLE_CPU
                        | kernel::PERF_SAMPLE_REGS_USER
                        | kernel::PERF_SAMPLE_STACK_USER;
                    flags |= attr::EXCLUDE_CALLCHAIN_USER;
                    (regs, stack) = (crate::unwind::REGS_MASK, copy);
                }
                if at.sample_cgroup && (at.ring_samples || at.dwarf.is_some()) {
                    // the last field (crate::unwind::sample_cgroup)
                    sample_type |= kernel::PERF_SAMPLE_CGROUP;
                }
                let a = PerfEventAttr {
                    type_: ev.type_,
                    config: ev.config,
                    sample_period,
                    sample_type,
                    sample_regs_user: regs,
                    sample_stack_user: stack,
                    sample_max_stack: at.max_stack,
                    flags,
                    ..Default::default()
                };
                match open_event_in(ev, &a, pid, cpu as i32, at.cgroup, faults) {
                    Ok(fd) => fds.push((cpu, fd)),
                    // a thread of -p PID that exited meanwhile
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) && at.pids.len() > 1 => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(fds)
    };
    let fds = match open_all(ev) {
        Ok(f) => f,
        // the counting probe passed, sampling did not (a PMU without
        // sampling interrupts): the same as no PMU
        Err(e) if ev.hardware && is_missing_pmu(&e) => match fallback {
            Some(fb) => {
                let c = use_fallback(ev, fb, faults)?;
                fallback_from = Some(ev.name.to_string());
                ev = c.ev;
                match open_all(ev) {
                    Ok(f) => f,
                    Err(e) if ev.hardware && is_missing_pmu(&e) => {
                        return Err(Error::FallbackNoPmu {
                            event: fallback_from.unwrap_or_default(),
                            fallback: ev.name.into(),
                        })
                    }
                    Err(e) => return Err(open_error(ev, e, at.freq)),
                }
            }
            None => return Err(Error::NoPmu(ev.name.to_string())),
        },
        Err(e) => return Err(open_error(ev, e, at.freq)),
    };
    Ok(Sampling {
        fds,
        ev,
        fallback_from,
    })
}
