//! The sample path and the read loop of a recording.
//!
//! Mechanism: [`SamplePath`] loads the eBPF `perf_event` program (with the
//! tags subsystem's `view` map when its layout is this build's) and
//! attaches it to every sampling event, whose own output (throttle
//! records) is routed into the side band's ring of its CPU. [`run`]
//! starts the sampling (or releases the gated command), then every poll
//! replays the side band and, every drain interval, drains the sample
//! path's counts, resolving each ip in the address spaces as they are at
//! that moment; it stops at the end of the command, the process, the
//! duration, or on SIGINT/SIGTERM, and drains what is left.
//!
//! Invariant: the side band is always replayed before a drain, so a
//! sample is resolved against the mappings that were announced before it
//! was drained (an exec keeps the old spaces for samples that predate it).

use super::cgroups::{Cgroups, Source as CgroupSource};
use super::choose::Sampling;
use super::host::unix_ns;
use super::sideband::SideBand;
use super::target::Tracee;
use super::{RecordOpts, Target, Transport};
use crate::abi::{Key, Stats, MODE_KERNEL};
use crate::kernel::{self, PerfRecord, PerfRing, Sampler};
use crate::model::{self, AddressSpaces, ImageKind, Mode, Profile, RawSample, Resolved};
use crate::unwind::Unwinders;
use crate::Error;
use std::collections::HashMap;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

/// How sample records read from the perf ring are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum RingLayout {
    /// No sample records in the ring (the eBPF sample path takes them).
    #[default]
    None,
    /// `--stacks dwarf`: registers and a user stack copy
    /// (crate::unwind::parse_sample).
    Dwarf,
    /// No eBPF sample path: IP, TID, TIME, CPU and, with stacks, the
    /// callchain (crate::unwind::parse_chain_sample).
    Chain { callchain: bool },
}

/// The loaded sample path.
pub(super) struct SamplePath {
    /// The eBPF program; None when recording without CAP_BPF (samples
    /// come through the perf ring).
    sampler: Option<Sampler>,
    /// BPF_ENABLE_STATS, while measuring the sample path's cost.
    stats_fd: Option<OwnedFd>,
    /// The tags view map the program reads (kept open while it runs).
    _view: Option<OwnedFd>,
    /// `--stacks dwarf`, or no eBPF path: the program is not attached;
    /// the events' sample records go to the side-band rings and are read
    /// (and unwound) in user space.
    pub layout: RingLayout,
}

impl SamplePath {
    /// Loads the sample path; a tags view of another layout is left out
    /// (samples untagged) with a warning.
    pub fn load(
        o: &RecordOpts,
        bpf: bool,
        warnings: &mut Vec<String>,
    ) -> Result<SamplePath, Error> {
        let dwarf = o.stacks == super::Stacks::Dwarf;
        if !bpf {
            return Ok(SamplePath {
                sampler: None,
                stats_fd: None,
                _view: None,
                layout: if dwarf {
                    RingLayout::Dwarf
                } else {
                    RingLayout::Chain {
                        callchain: o.stacks != super::Stacks::None,
                    }
                },
            });
        }
        // the tags view, if loaded with the layout this build expects
        let want = std::mem::size_of::<mantle_tags::abi::View>() as u32;
        let view = kernel::open_tags_view().filter(|fd| {
            let ok = kernel::map_geometry(fd.as_fd()).is_some_and(|(vs, _)| vs == want);
            if !ok {
                warnings.push(format!(
                    "the loaded tags kernel side has another view layout than this build (value size != {want}): samples are recorded untagged"
                ));
            }
            ok
        });
        let sampler = Sampler::load(
            o.transport == Transport::Ring,
            o.self_timing,
            matches!(o.stacks, super::Stacks::Perf | super::Stacks::Bpf),
            view.as_ref().map(|f| f.as_fd()),
        )?;
        let stats_fd = if o.self_timing {
            kernel::enable_bpf_stats()
        } else {
            None
        };
        if o.stacks == super::Stacks::Dwarf && view.is_some() {
            warnings.push(
                "with --stacks dwarf samples travel through the perf ring, not the eBPF sample path: they are recorded untagged".into(),
            );
        }
        Ok(SamplePath {
            sampler: Some(sampler),
            stats_fd,
            _view: view,
            layout: if dwarf {
                RingLayout::Dwarf
            } else {
                RingLayout::None
            },
        })
    }

    /// Attaches the program to every sampling event and routes each
    /// event's output into its CPU's side-band ring. False when some
    /// output could not be routed (throttle records are then not seen).
    pub fn attach(
        &mut self,
        fds: &[(u32, OwnedFd)],
        rings: &HashMap<u32, PerfRing>,
    ) -> Result<bool, Error> {
        let mut throttle_visible = true;
        let ring = self.layout != RingLayout::None;
        for (cpu, fd) in fds {
            if let (false, Some(s)) = (ring, self.sampler.as_mut()) {
                s.attach(fd.as_fd())?;
            }
            if let Some(r) = rings.get(cpu) {
                match kernel::perf_set_output(fd.as_fd(), r.fd.as_fd()) {
                    Ok(()) => {}
                    // the samples themselves travel there: no way round it
                    Err(e) if ring => {
                        return Err(Error::os(
                            format!("route the samples of CPU {cpu} to its ring"),
                            e,
                        ))
                    }
                    Err(_) => throttle_visible = false,
                }
            }
        }
        Ok(throttle_visible)
    }
}

/// Build IDs of the files samples landed in, read once per path.
#[derive(Default)]
struct BuildIds(HashMap<String, Option<String>>);

impl BuildIds {
    fn of(&mut self, path: &str) -> Option<String> {
        if !path.starts_with('/') {
            return None;
        }
        self.0
            .entry(path.to_string())
            .or_insert_with(|| crate::symbols::build_id(Path::new(path)))
            .clone()
    }
}

fn to_raw(k: &Key) -> RawSample {
    RawSample {
        pid: k.pid,
        tid: k.tid,
        cpu: k.cpu,
        mode: if k.mode == MODE_KERNEL {
            Mode::Kernel
        } else {
            Mode::User
        },
        ip: k.ip,
        tags: k.tags.to_vec(),
        cgroup: k.cgroup,
    }
}

/// Drains the sample path into the profile.
#[derive(Default)]
struct Drainer {
    profile: Profile,
    /// Reused buffer of drained (key, count) pairs.
    raw: Vec<(Key, u64)>,
    /// The frames of the drained stack keys (emptied every drain: the
    /// keys are only valid for the map pair just drained).
    frames: HashMap<u64, Vec<u64>>,
    /// User-space cost per sample of each drain that had samples (ns).
    costs: Vec<f64>,
    ids: BuildIds,
    /// `--stacks dwarf`: the unwinders and what they cost (and the
    /// perf-ring samples' counters without the eBPF path).
    dwarf: DwarfSink,
    /// The layout of sample records met in the side band.
    layout: RingLayout,
    /// `--off-cpu`: the off-CPU path and its rows.
    off_cpu: Option<super::offcpu::OffCpuRec>,
}

/// What `--stacks dwarf` samples need and give.
#[derive(Default)]
pub(super) struct DwarfSink {
    unw: Unwinders,
    /// Sample records taken.
    pub samples: u64,
    /// Sample records that did not parse (counted lost).
    pub malformed: u64,
    /// User-space cost of each sample (parse, unwind, resolve, merge), ns,
    /// for the first [`DWARF_COST_SAMPLES`] samples.
    pub costs: Vec<f64>,
    /// Bytes of user stack copied, summed.
    pub stack_bytes: u64,
}

/// Samples whose cost is kept (a minute at 5 000 Hz on two CPUs).
const DWARF_COST_SAMPLES: usize = 600_000;

impl BuildIds {
    /// Gives an ELF resolution the build ID of its file.
    fn fill(&mut self, r: &mut Resolved) {
        if r.image.kind == ImageKind::Elf && r.image.build_id.is_none() {
            r.image.build_id = self.of(&r.image.path);
        }
    }
}

impl Drainer {
    fn drain(
        &mut self,
        sampler: Option<&mut Sampler>,
        sp: &AddressSpaces,
        cg: &mut Cgroups,
    ) -> Result<(), Error> {
        if let Some(off) = self.off_cpu.as_mut() {
            let ids = &mut self.ids;
            off.drain(&mut self.profile, sp, &mut |r: &mut Resolved| ids.fill(r))?;
        }
        let Some(sampler) = sampler else {
            return Ok(());
        };
        let t = Instant::now();
        self.frames.clear();
        sampler.drain(&mut self.raw, &mut self.frames)?;
        // counts read from a BPF map: summed saturating, never a panic
        let n: u64 = self.raw.iter().map(|r| r.1).fold(0, u64::saturating_add);
        let Drainer {
            profile,
            raw,
            frames,
            ids,
            ..
        } = self;
        let mut fill = |r: &mut Resolved| ids.fill(r);
        // one resolution per (pid, ip, kernel stack, user stack) per drain
        let mut stacks: HashMap<(u32, u64, u64, u64), u32> = HashMap::new();
        for (k, c) in raw.drain(..) {
            cg.saw(k.cgroup);
            let s = to_raw(&k);
            let mut r = sp.resolve(s.pid, s.ip, s.mode);
            fill(&mut r);
            let stack = match stacks.get(&(k.pid, k.ip, k.kstack, k.ustack)) {
                Some(&id) => id,
                None => {
                    let get = |id: u64| frames.get(&id).map(Vec::as_slice).unwrap_or(&[]);
                    let callers = model::callers(k.ip, get(k.kstack), get(k.ustack));
                    let id = profile.add_stack(sp, k.pid, &callers, &mut fill);
                    stacks.insert((k.pid, k.ip, k.kstack, k.ustack), id);
                    id
                }
            };
            profile
                .add_resolved(&s, &r, stack, c)
                .map_err(|source| Error::Counts {
                    what: "counts drained from the sample path",
                    source,
                })?;
        }
        if n > 0 {
            self.costs.push(t.elapsed().as_nanos() as f64 / n as f64);
        }
        // name new cgroups while they exist
        cg.settle(false);
        Ok(())
    }

    /// One `--stacks dwarf` sample record, replayed in time order: its
    /// user stack unwound against the address space of its moment, and
    /// merged into the profile as the eBPF path's stacks are.
    fn sample(
        &mut self,
        rec: &PerfRecord,
        sp: &AddressSpaces,
        cg: &mut Cgroups,
    ) -> Result<(), Error> {
        let t = Instant::now();
        let parsed = match self.layout {
            RingLayout::Chain { callchain } => {
                crate::unwind::parse_chain_sample(&rec.body, callchain)
            }
            _ => crate::unwind::parse_sample(&rec.body),
        };
        let Some(s) = parsed else {
            self.dwarf.malformed += 1;
            return Ok(());
        };
        self.dwarf.samples += 1;
        self.dwarf.stack_bytes = self.dwarf.stack_bytes.saturating_add(s.stack.len() as u64);
        let mode = if rec.misc & kernel::PERF_RECORD_MISC_CPUMODE_MASK
            == kernel::PERF_RECORD_MISC_KERNEL
        {
            Mode::Kernel
        } else {
            Mode::User
        };
        // the perf-ring frame-pointer layout has the user frames in its
        // callchain already
        let user = if self.layout == RingLayout::Dwarf {
            self.dwarf.unw.unwind(sp, s.pid, &s)
        } else {
            Vec::new()
        };
        let cgroup = match cg.source {
            CgroupSource::PerfSample => {
                let id = crate::unwind::sample_cgroup(&rec.body, &s).unwrap_or(0);
                cg.saw(id);
                id
            }
            CgroupSource::Proc => cg.of_pid(s.pid),
            CgroupSource::Bpf | CgroupSource::None => 0,
        };
        let raw = RawSample {
            pid: s.pid,
            tid: s.tid,
            cpu: s.cpu,
            mode,
            ip: s.ip,
            tags: vec![0; crate::abi::MT_WORDS],
            cgroup,
        };
        let mut r = sp.resolve(s.pid, s.ip, mode);
        self.ids.fill(&mut r);
        let ids = &mut self.ids;
        let callers = model::callers(s.ip, &s.kernel, &user);
        let stack = self
            .profile
            .add_stack(sp, s.pid, &callers, &mut |r: &mut Resolved| ids.fill(r));
        self.profile
            .add_resolved(&raw, &r, stack, 1)
            .map_err(|source| Error::Counts {
                what: "samples unwound from the perf ring",
                source,
            })?;
        if self.dwarf.costs.len() < DWARF_COST_SAMPLES {
            self.dwarf.costs.push(t.elapsed().as_nanos() as f64);
        }
        Ok(())
    }

    /// Replays the side band, with `--stacks dwarf` samples in their place.
    fn replay(
        &mut self,
        side: &mut SideBand,
        sp: &mut AddressSpaces,
        cg: &mut Cgroups,
    ) -> Result<(), Error> {
        let mut err = None;
        side.replay(sp, &mut |rec, sp| {
            if err.is_none() {
                err = self.sample(rec, sp, cg).err();
            }
        });
        cg.settle(false);
        err.map_or(Ok(()), Err)
    }
}

/// One period of a continuous recording, drained: its samples and
/// counters (differences from the period before), the side band's too.
pub(super) struct Period {
    pub run: Run,
    pub side: super::sideband::SideStats,
}

/// What a continuous recording does with each period's [`Period`]
/// (write it as a session), given the address spaces and cgroups as they
/// are at its end.
pub(super) type OnPeriod<'a> =
    &'a mut dyn FnMut(Period, &mut AddressSpaces, &Cgroups) -> Result<(), Error>;

/// Where a continuous recording's period started: the counters then.
struct PeriodStart {
    at: Instant,
    unix_ns: u64,
    stats: Stats,
    side: super::sideband::SideStats,
    dwarf: (u64, u64, u64),
    unwind: crate::unwind::UnwindStats,
}

impl PeriodStart {
    fn now(path: &SamplePath, side: &SideBand, d: &Drainer) -> PeriodStart {
        PeriodStart {
            at: Instant::now(),
            unix_ns: unix_ns(),
            stats: path
                .sampler
                .as_ref()
                .map(Sampler::stats)
                .unwrap_or_default(),
            side: side.stats.clone(),
            dwarf: (d.dwarf.samples, d.dwarf.malformed, d.dwarf.stack_bytes),
            unwind: d.dwarf.unw.stats.clone(),
        }
    }

    /// The period from this start to now: takes the drained profile out.
    fn close(
        &self,
        path: &SamplePath,
        side: &SideBand,
        d: &mut Drainer,
        command_status: Option<i32>,
    ) -> Period {
        let now = path
            .sampler
            .as_ref()
            .map(Sampler::stats)
            .unwrap_or_default();
        let b = &self.stats;
        let stats = Stats {
            samples: now.samples.saturating_sub(b.samples),
            dropped: now.dropped.saturating_sub(b.dropped),
            ring_full: now.ring_full.saturating_sub(b.ring_full),
            stack_lost: now.stack_lost.saturating_sub(b.stack_lost),
            ..Stats::default()
        };
        let u = &d.dwarf.unw.stats;
        let unwind = crate::unwind::UnwindStats {
            stacks: u.stacks.saturating_sub(self.unwind.stacks),
            truncated: u.truncated.saturating_sub(self.unwind.truncated),
            no_user: u.no_user.saturating_sub(self.unwind.no_user),
        };
        let dwarf = DwarfSink {
            samples: d.dwarf.samples.saturating_sub(self.dwarf.0),
            malformed: d.dwarf.malformed.saturating_sub(self.dwarf.1),
            stack_bytes: d.dwarf.stack_bytes.saturating_sub(self.dwarf.2),
            costs: std::mem::take(&mut d.dwarf.costs),
            ..DwarfSink::default()
        };
        Period {
            run: Run {
                profile: std::mem::take(&mut d.profile),
                start_unix_ns: self.unix_ns,
                duration: self.at.elapsed(),
                command_status,
                stats,
                prog_run: (0, 0),
                drain_costs: std::mem::take(&mut d.costs),
                cost_hist: Vec::new(),
                dwarf,
                unwind,
                // (--off-cpu is refused with --continuous: its rows index
                // the whole recording's stack table)
                off_cpu: None,
            },
            side: side.stats.since(&self.side),
        }
    }
}

/// What the read loop produced.
pub(super) struct Run {
    pub profile: Profile,
    pub start_unix_ns: u64,
    pub duration: Duration,
    /// Exit code of the command, if one was run.
    pub command_status: Option<i32>,
    /// The sample path's counters at the end.
    pub stats: Stats,
    /// BPF_ENABLE_STATS: (run time in ns, runs) of the program.
    pub prog_run: (u64, u64),
    /// User-space drain cost per sample, one value per drain.
    pub drain_costs: Vec<f64>,
    /// The program's self-timing histogram (empty without --self-timing).
    pub cost_hist: Vec<u64>,
    /// `--stacks dwarf`: samples, their cost, the unwinders' counters.
    pub dwarf: DwarfSink,
    pub unwind: crate::unwind::UnwindStats,
    /// `--off-cpu`: the off-CPU path, drained, and its rows.
    pub off_cpu: Option<super::offcpu::OffCpuRec>,
}

/// Where samples go besides the profile: their cgroups' names, and with
/// a continuous recording each period.
pub(super) struct Sink<'a> {
    pub cgroups: &'a mut Cgroups,
    /// The period length and what is done with each period.
    pub rotation: Option<(Duration, OnPeriod<'a>)>,
    /// `--off-cpu`: the off-CPU path (never with a rotation).
    pub off_cpu: Option<super::offcpu::OffCpuRec>,
}

/// A continuous recording's rotation, called on every poll of the read
/// loop (it checks the time itself).
type Rotate<'a> = &'a mut dyn FnMut(
    &mut SamplePath,
    &mut SideBand,
    &mut AddressSpaces,
    &mut Drainer,
    &mut Cgroups,
) -> Result<(), Error>;

/// What the read loop needs besides the recording's parts.
struct Loop<'a> {
    start: Instant,
    cg: &'a mut Cgroups,
    rotate: Rotate<'a>,
}

/// Starts sampling, reads until the recording ends, stops and drains.
pub(super) fn run(
    o: &RecordOpts,
    path: &mut SamplePath,
    side: &mut SideBand,
    sp: &mut AddressSpaces,
    sampling: &Sampling,
    tracee: &mut Tracee,
    sink: Sink,
) -> Result<Period, Error> {
    let Sink {
        cgroups: cg,
        mut rotation,
        off_cpu,
    } = sink;
    let fds = &sampling.fds;
    let mut d = Drainer {
        layout: path.layout,
        off_cpu,
        ..Drainer::default()
    };
    // off-CPU blocks are charged from here (not a command's gate wait)
    if let Some(off) = d.off_cpu.as_mut() {
        off.arm()?;
    }
    let start = Instant::now();
    let start_unix_ns = unix_ns();
    // the counters before the first sample: every sample in a period
    let mut period = PeriodStart::now(path, side, &d);
    start_sampling(fds, tracee)?;
    let command_status = read_loop(
        o,
        path,
        side,
        sp,
        tracee,
        &mut d,
        Loop {
            start,
            cg: &mut *cg,
            rotate: &mut |path, side, sp, d, cg| {
                // a continuous recording's rotation: a drain (after the side
                // band), then the drained profile is the period's
                let Some((every, on_period)) = rotation.as_mut() else {
                    return Ok(());
                };
                if period.at.elapsed() < *every {
                    return Ok(());
                }
                d.replay(side, sp, cg)?;
                d.drain(path.sampler.as_mut(), sp, cg)?;
                cg.settle(true);
                let p = period.close(path, side, d, None);
                period = PeriodStart::now(path, side, d);
                on_period(p, sp, cg)
            },
        },
    )?;
    let duration = start.elapsed();
    let command_status = stop_sampling(fds, path, tracee, command_status);
    // (the off-CPU path stayed attached until the command had exited:
    // its last blocks are charged when it runs to exit)
    if let Some(off) = d.off_cpu.as_mut() {
        off.stop();
    }
    // what is left (twice: each drain flips the two count maps and
    // empties the one that was taking samples, so both end up empty)
    d.replay(side, sp, cg)?;
    d.drain(path.sampler.as_mut(), sp, cg)?;
    d.drain(path.sampler.as_mut(), sp, cg)?;
    cg.settle(true);
    Ok(command_status).map(|command_status| {
        let stats = path
            .sampler
            .as_ref()
            .map(Sampler::stats)
            .unwrap_or_default();
        let prog_run = path
            .sampler
            .as_ref()
            .map_or((0, 0), Sampler::prog_run_stats);
        let cost_hist = if o.self_timing {
            path.sampler
                .as_ref()
                .map(Sampler::cost_hist)
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        drop(path.stats_fd.take());
        let unwind = d.dwarf.unw.stats.clone();
        if rotation.is_some() {
            // the last period: from its start, its counters only
            return period.close(path, side, &mut d, command_status);
        }
        let run = Run {
            profile: d.profile,
            start_unix_ns,
            duration,
            command_status,
            stats,
            prog_run,
            drain_costs: d.costs,
            cost_hist,
            dwarf: d.dwarf,
            unwind,
            off_cpu: d.off_cpu,
        };
        Period {
            run,
            side: side.stats.clone(),
        }
    })
}

/// Go: the command's exec enables its events; otherwise enable them all.
fn start_sampling(fds: &[(u32, OwnedFd)], tracee: &mut Tracee) -> Result<(), Error> {
    kernel::catch_stop_signals();
    if let Some(g) = tracee.gate.take() {
        g.release().map_err(|e| Error::os("start the command", e))?;
    } else {
        for (_, fd) in fds {
            kernel::perf_enable(fd.as_fd()).map_err(|e| Error::os("enable", e))?;
        }
    }
    Ok(())
}

/// Polls until the recording ends: replays the side band, drains on
/// schedule, draws the live status line. Returns the command's status
/// when it ended the recording.
fn read_loop(
    o: &RecordOpts,
    path: &mut SamplePath,
    side: &mut SideBand,
    sp: &mut AddressSpaces,
    tracee: &mut Tracee,
    d: &mut Drainer,
    l: Loop,
) -> Result<Option<i32>, Error> {
    let Loop { start, cg, rotate } = l;
    let live = o.status && kernel::stderr_is_tty();
    let mut last_drain = Instant::now();
    let mut last_status = Instant::now();
    let mut last_samples = 0u64;
    let mut command_status = None;
    let poll = if path.layout != RingLayout::None {
        Duration::from_millis(super::sideband::DWARF_POLL_MS)
    } else if o.transport == Transport::Ring {
        Duration::from_millis(50)
    } else {
        Duration::from_millis(100).min(o.drain_interval)
    };
    loop {
        std::thread::sleep(poll);
        d.replay(side, sp, cg)?;
        if o.transport == Transport::Ring || last_drain.elapsed() >= o.drain_interval {
            d.drain(path.sampler.as_mut(), sp, cg)?;
            last_drain = Instant::now();
        }
        rotate(path, side, sp, d, cg)?;
        if live && last_status.elapsed() >= Duration::from_millis(500) {
            let st = path
                .sampler
                .as_ref()
                .map(Sampler::stats)
                .unwrap_or_default();
            let samples = st.samples.saturating_add(d.dwarf.samples);
            let dt = last_status.elapsed().as_secs_f64();
            let _ = write!(
                std::io::stderr(),
                "\r\x1b[Kmantle prof: {} samples, {:.0}/s, lost {}, throttled {}",
                samples,
                samples.saturating_sub(last_samples) as f64 / dt,
                st.dropped
                    .saturating_add(st.ring_full)
                    .saturating_add(side.stats.lost_samples),
                side.stats.throttle
            );
            last_samples = samples;
            last_status = Instant::now();
        }
        let mut done = kernel::stop_requested();
        if let Some(d) = o.duration {
            done |= start.elapsed() >= d;
        }
        if let Some(c) = tracee.child.as_mut() {
            if let Some(s) = c.try_wait() {
                command_status = Some(s);
                done = true;
            }
        }
        match &o.target {
            Target::Pid(p) => done |= !Path::new(&format!("/proc/{p}")).exists(),
            // the cgroup was removed
            Target::Cgroup(dir) => done |= !dir.join("cgroup.procs").exists(),
            _ => {}
        }
        if done {
            break;
        }
    }
    if live {
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
    Ok(command_status)
}

/// Disables the events, detaches the program, waits for the command;
/// its status.
fn stop_sampling(
    fds: &[(u32, OwnedFd)],
    path: &mut SamplePath,
    tracee: &mut Tracee,
    mut command_status: Option<i32>,
) -> Option<i32> {
    for (_, fd) in fds {
        let _ = kernel::perf_disable(fd.as_fd());
    }
    if let Some(s) = path.sampler.as_mut() {
        s.detach();
    }
    if let Some(mut c) = tracee.child.take() {
        // stopped early (signal or duration): the command keeps its signal
        if let Some(s) = c.wait() {
            command_status.get_or_insert(s);
        }
    }
    command_status
}
