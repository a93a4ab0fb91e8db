//! `mantle prof record`: opens the perf events, runs the sample path,
//! follows the side band, drains and resolves samples into the merged
//! profile, and writes the session.

use crate::abi::{Key, MODE_KERNEL};
use crate::events::{self, EventDef};
use crate::kernel::{self, attr, PerfEventAttr, PerfRecord, PerfRing, Sampler};
use crate::model::{
    self, AddressSpaces, Dist, Mapping, Meta, Mode, Profile, RawSample, SampleCost, TagName,
};
use crate::session::{self, SessionData};
use crate::Error;
use std::collections::HashMap;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What to profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every CPU, every process.
    All,
    /// One running process (all its threads, and children it creates).
    Pid(u32),
    /// A command run for the occasion, and its process tree.
    Command(Vec<String>),
}

/// How samples travel from the sample path to user space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// In-kernel aggregation in hash maps, drained periodically (default).
    Aggregate,
    /// One ring-buffer record per sample.
    Ring,
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
    /// Live status line (only drawn when stderr is a terminal).
    pub status: bool,
    /// Replace `output` if it holds a session (never anything else).
    pub force: bool,
    /// Failures to simulate (tests).
    pub faults: Faults,
}

/// A seam for tests: system call failures to simulate, so that paths such
/// as "no hardware PMU" are exercised on every machine, with a PMU or not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// perf_event_open of every hardware event fails with this errno
    /// (ENOENT is what a machine without a PMU answers).
    pub hardware_errno: Option<i32>,
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
            status: true,
            force: false,
            faults: Faults::default(),
        }
    }
}

pub const DEFAULT_FREQ: u64 = 4000;

/// The outcome of a recording.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    pub session: String,
    pub meta: Meta,
    pub caveats: Vec<String>,
    pub rows: usize,
    pub images: usize,
    pub processes: usize,
    /// Exit code of the profiled command, if one was run.
    pub command_status: Option<i32>,
}

impl Summary {
    pub fn render(&self) -> String {
        let m = &self.meta;
        let mut s = format!(
            "mantle prof: {} samples of {}{} in {:.2} s ({:.0}/s) on {} CPU(s), {} lost, throttled {} time(s)\n",
            m.samples,
            m.event,
            m.fallback_from
                .as_ref()
                .map(|f| format!(" (fallback for {f})"))
                .unwrap_or_default(),
            m.duration_ns as f64 / 1e9,
            m.samples as f64 / (m.duration_ns as f64 / 1e9).max(1e-9),
            m.cpus,
            m.lost_samples,
            m.throttle_events
        );
        s += &format!(
            "  session {} ({} profile rows, {} images, {} processes)\n",
            self.session, self.rows, self.images, self.processes
        );
        for c in &self.caveats {
            s += &format!("  warning: {c}\n");
        }
        if let Some(c) = &m.cost {
            s += &format!(
                "  sample path: eBPF {:.0} ns mean (sd {:.0}, min {:.0}, max {:.0}, n {}); kernel stats {:.0} ns/run over {} runs; user-space drain {:.0} ns/sample\n",
                c.bpf_self_ns.mean,
                c.bpf_self_ns.stddev,
                c.bpf_self_ns.min,
                c.bpf_self_ns.max,
                c.bpf_self_ns.n,
                c.bpf_stats_mean_ns,
                c.bpf_stats_runs,
                c.drain_ns_per_sample.mean
            );
        }
        if let Some(code) = self.command_status {
            if code != 0 {
                s += &format!("  the command exited with status {code}\n");
            }
        }
        s
    }
}

/// Online CPUs (from /sys/devices/system/cpu/online, e.g. "0-1,4").
pub fn online_cpus() -> Vec<u32> {
    let s =
        std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_else(|_| "0".into());
    parse_cpu_list(s.trim())
}

pub fn parse_cpu_list(s: &str) -> Vec<u32> {
    let mut v = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    v.extend(a..=b);
                }
            }
            None => {
                if let Ok(a) = part.parse() {
                    v.push(a)
                }
            }
        }
    }
    v
}

pub fn max_sample_rate() -> Option<i64> {
    mantle_sys::probe::sysctl("perf_event_max_sample_rate").or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
            .ok()
            .and_then(|s| s.trim().parse().ok())
    })
}

fn is_missing_pmu(e: &std::io::Error) -> bool {
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
    if let (true, Some(errno)) = (ev.hardware, faults.hardware_errno) {
        return Err(std::io::Error::from_raw_os_error(errno));
    }
    kernel::perf_event_open(a, pid, cpu)
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
struct Chosen {
    /// The event to sample.
    ev: &'static EventDef,
    /// The event asked for, when the fallback already replaced it.
    fallback_from: Option<&'static EventDef>,
    /// The fallback still available, if sampling `ev` is refused later.
    fallback: Option<&'static EventDef>,
}

/// The event to sample. Errors name the way out: no PMU (with or without
/// a fallback that needs one too), a fallback equal to the event.
fn choose_event(o: &RecordOpts) -> Result<Chosen, Error> {
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
        Some(libc::EINVAL) if freq.is_some() => Error::Kernel(format!(
            "the kernel refused {} at {} Hz (EINVAL): kernel.perf_event_max_sample_rate is {}",
            ev.name,
            freq.unwrap_or(0),
            max_sample_rate()
                .map(|m| m.to_string())
                .unwrap_or("?".into())
        )),
        Some(libc::EACCES) | Some(libc::EPERM) => {
            Error::Permission(format!("perf_event_open of {}: {e}", ev.name))
        }
        _ => Error::Kernel(format!("open {} events: {e}", ev.name)),
    }
}

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
    if o.drain_interval.is_zero() {
        return Err(Error::Invalid("the drain interval must be positive".into()));
    }
    if let Target::Command(argv) = &o.target {
        if argv.is_empty() {
            return Err(Error::Invalid("no command given after --".into()));
        }
    }
    session::check_output(&o.output, o.force)?;
    Ok((freq, period))
}

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

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    b.get(o..o + 4)
        .map(|x| u32::from_ne_bytes(x.try_into().unwrap()))
        .unwrap_or(0)
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    b.get(o..o + 8)
        .map(|x| u64::from_ne_bytes(x.try_into().unwrap()))
        .unwrap_or(0)
}

/// Counters from the side band.
#[derive(Default)]
struct SideStats {
    lost: u64,
    throttle: u64,
    unthrottle: u64,
    lost_samples: u64,
}

fn apply_record(r: &PerfRecord, sp: &mut AddressSpaces, st: &mut SideStats) {
    let b = &r.body;
    match r.type_ {
        kernel::PERF_RECORD_MMAP2 => {
            let (pid, start, len, pgoff) =
                (u32_at(b, 0), u64_at(b, 8), u64_at(b, 16), u64_at(b, 24));
            let path = cstr(b.get(64..).unwrap_or(&[]));
            // The record's MMAP_BUILD_ID misc bit is not trusted: another
            // session's attr.build_id can make the kernel set it on records
            // that carry maj/min/ino (see the side-band attr below).
            // build IDs are read lazily, for images that get samples
            let build_id = None;
            sp.mmap(
                pid,
                Mapping {
                    start,
                    end: start + len,
                    pgoff,
                    path,
                    build_id,
                },
            );
        }
        kernel::PERF_RECORD_COMM => {
            let exec = r.misc & kernel::PERF_RECORD_MISC_COMM_EXEC != 0;
            sp.comm(
                u32_at(b, 0),
                u32_at(b, 4),
                &cstr(&b[8.min(b.len())..]),
                exec,
            );
        }
        kernel::PERF_RECORD_FORK => sp.fork(u32_at(b, 0), u32_at(b, 4), u32_at(b, 8)),
        kernel::PERF_RECORD_EXIT => sp.exit(u32_at(b, 0), u32_at(b, 8)),
        kernel::PERF_RECORD_LOST => st.lost += u64_at(b, 8),
        kernel::PERF_RECORD_THROTTLE => st.throttle += 1,
        kernel::PERF_RECORD_UNTHROTTLE => st.unthrottle += 1,
        kernel::PERF_RECORD_LOST_SAMPLES => st.lost_samples += u64_at(b, 0),
        _ => {}
    }
}

/// Time of a side-band record (the sample_id trailer's last u64); records
/// without a trailer (throttling, from the sampling events) sort first.
fn record_time(r: &PerfRecord) -> u64 {
    match r.type_ {
        kernel::PERF_RECORD_MMAP2
        | kernel::PERF_RECORD_COMM
        | kernel::PERF_RECORD_FORK
        | kernel::PERF_RECORD_EXIT
        | kernel::PERF_RECORD_LOST => r
            .body
            .len()
            .checked_sub(8)
            .map(|o| u64_at(&r.body, o))
            .unwrap_or(0),
        _ => 0,
    }
}

/// Reads every CPU's side-band ring and applies the records in time
/// order (a fork seen on one CPU precedes the child's exec on another).
fn replay(
    rings: &mut HashMap<u32, PerfRing>,
    recs: &mut Vec<PerfRecord>,
    sp: &mut AddressSpaces,
    side: &mut SideStats,
) {
    for r in rings.values_mut() {
        r.read(recs);
    }
    recs.sort_by_key(record_time);
    let trace = std::env::var_os("MANTLE_PROF_TRACE").is_some();
    for r in recs.drain(..) {
        if trace {
            eprintln!(
                "sideband t={} type={} misc={:#x} pid={} {:?}",
                record_time(&r),
                r.type_,
                r.misc,
                u32_at(&r.body, 0),
                String::from_utf8_lossy(&r.body[8.min(r.body.len())..]).trim_matches('\0')
            );
        }
        apply_record(&r, sp, side);
    }
}

/// Reads the executable mappings of every process (or of `only`) from /proc.
fn snapshot_proc(sp: &mut AddressSpaces, only: Option<&[u32]>) {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if only.is_some_and(|o| !o.contains(&pid)) {
            continue;
        }
        let dir = e.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let ppid = std::fs::read_to_string(dir.join("stat"))
            .ok()
            .and_then(|s| {
                let r = s.rsplit_once(')')?.1.to_string();
                r.split_whitespace().nth(1)?.parse().ok()
            })
            .unwrap_or(0);
        sp.add_process(pid, ppid, comm.trim());
        if let Ok(maps) = std::fs::read_to_string(dir.join("maps")) {
            for l in maps.lines() {
                if let Some(m) = model::parse_maps_line(l) {
                    sp.mmap(pid, m);
                }
            }
        }
    }
}

/// Text symbols of /proc/kallsyms (None when addresses are hidden).
fn kallsyms_text() -> Option<String> {
    let s = std::fs::read_to_string("/proc/kallsyms").ok()?;
    let mut out = String::with_capacity(s.len() / 2);
    let mut nonzero = false;
    for l in s.lines() {
        let mut f = l.split_whitespace();
        let (Some(a), Some(t)) = (f.next(), f.next()) else {
            continue;
        };
        if matches!(t, "t" | "T" | "w" | "W") {
            if a.bytes().any(|c| c != b'0') {
                nonzero = true;
            }
            out.push_str(l);
            out.push('\n');
        }
    }
    nonzero.then_some(out)
}

/// The tag table's names. A kernel side loaded by another mantle build
/// with another layout makes the tags crate panic on a size check: the
/// profile is then recorded without names (silently for the panic, with a
/// warning in the session).
fn tag_names() -> (bool, Vec<TagName>) {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(|| match mantle_tags::Tags::open() {
        Ok(t) => Some(
            t.list()
                .unwrap_or_default()
                .into_iter()
                .map(|i| TagName {
                    bit: i.bit,
                    name: i.name,
                })
                .collect::<Vec<_>>(),
        ),
        Err(_) => None,
    });
    std::panic::set_hook(hook);
    match r {
        Ok(Some(v)) => (true, v),
        _ => (false, Vec::new()),
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
    }
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Records a session. Blocks until the command exits, the process exits,
/// the duration ends, or SIGINT/SIGTERM.
pub fn record(o: &RecordOpts) -> Result<Summary, Error> {
    // everything that can be said without root first, and before the
    // recording (a refusal after minutes of recording would waste them)
    let (freq, period) = check_opts(o)?;
    let Chosen {
        mut ev,
        fallback_from,
        fallback,
    } = choose_event(o)?;
    let mut fallback_from: Option<String> = fallback_from.map(|e| e.name.to_string());
    if mantle_sys::os::geteuid() != 0 {
        return Err(Error::Permission(
            "recording needs root (system-wide perf events and eBPF)".into(),
        ));
    }
    let max_rate_start = max_sample_rate();
    if let (Some(f), Some(m)) = (freq, max_rate_start) {
        if f as i64 > m {
            return Err(Error::RateTooHigh { asked: f, max: m });
        }
    }
    let cpus = online_cpus();
    let own_comm = std::fs::read_to_string("/proc/self/comm")
        .unwrap_or_default()
        .trim()
        .to_string();
    let mut mantle_comms = vec!["mantle".to_string()];
    if !own_comm.is_empty() && own_comm != "mantle" {
        mantle_comms.push(own_comm);
    }
    let mut sp = AddressSpaces::new(mantle_comms);
    let mut ids = BuildIds(HashMap::new());
    let (tags_loaded, tags_start) = tag_names();

    // the sample path
    let mut warnings = Vec::new();
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
    let mut sampler = Sampler::load(
        o.transport == Transport::Ring,
        o.self_timing,
        view.as_ref().map(|f| f.as_fd()),
    )?;
    let stats_fd = if o.self_timing {
        kernel::enable_bpf_stats()
    } else {
        None
    };

    // the target
    let mut child = None;
    let mut gate = None;
    let (pids, inherit, on_exec, target_desc): (Vec<i32>, bool, bool, String) = match &o.target {
        Target::All => (vec![-1], false, false, "all CPUs".into()),
        Target::Pid(p) => {
            let tids: Vec<i32> = std::fs::read_dir(format!("/proc/{p}/task"))
                .map_err(|_| Error::NoSuchProcess(*p))?
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect();
            (tids, true, false, format!("pid {p}"))
        }
        Target::Command(argv) => {
            if argv.is_empty() {
                return Err(Error::Invalid("no command given after --".into()));
            }
            let (c, g) = kernel::spawn_gated(argv)
                .map_err(|e| Error::Invalid(format!("cannot run {}: {e}", argv[0])))?;
            let pid = c.pid as i32;
            child = Some(c);
            gate = Some(g);
            (
                vec![pid],
                true,
                true,
                format!("command: {}", argv.join(" ")),
            )
        }
    };

    // The side band: a dummy event per CPU (and per thread for -p), with
    // its own ring. System-wide for -a; for a process or a command it
    // follows that task tree only (inherit), as perf does, so the rest of
    // the machine's activity costs nothing here.
    let mut rings: HashMap<u32, PerfRing> = HashMap::new();
    let mut extra_side: Vec<OwnedFd> = Vec::new();
    let side_attr = PerfEventAttr {
        type_: events::PERF_TYPE_SOFTWARE,
        config: kernel::PERF_COUNT_SW_DUMMY,
        sample_period: 1,
        // every record carries (pid, tid, time) at its end, so records of
        // different CPUs' rings can be replayed in time order
        sample_type: kernel::PERF_SAMPLE_TID | kernel::PERF_SAMPLE_TIME,
        flags: attr::MMAP
            | attr::MMAP2
            | attr::COMM
            | attr::COMM_EXEC
            | attr::TASK
            | attr::SAMPLE_ID_ALL
            | if inherit { attr::INHERIT } else { 0 },
        // Not attr::BUILD_ID: on this kernel the MMAP_BUILD_ID misc bit it
        // sets leaks into other sessions' MMAP2 records (which carry
        // maj/min/ino), and a `perf record` running at the same time
        // aborts. Build IDs are read from the files instead (cached).
        ..Default::default()
    };
    for &cpu in &cpus {
        for (n, &pid) in pids.iter().enumerate() {
            let fd = match kernel::perf_event_open(&side_attr, pid, cpu as i32) {
                Ok(fd) => fd,
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) && n > 0 => continue,
                Err(e) => {
                    return Err(Error::Kernel(format!(
                        "open the side-band event on CPU {cpu}: {e}"
                    )))
                }
            };
            if let Some(r) = rings.get(&cpu) {
                kernel::perf_set_output(fd.as_fd(), r.fd.as_fd()).map_err(|e| {
                    Error::Kernel(format!("route side band of thread {pid} on CPU {cpu}: {e}"))
                })?;
                extra_side.push(fd);
            } else {
                let ring = PerfRing::new(fd, 256).map_err(|e| {
                    Error::Kernel(format!("mmap the side-band ring of CPU {cpu}: {e}"))
                })?;
                rings.insert(cpu, ring);
            }
        }
    }
    match &o.target {
        Target::All => snapshot_proc(&mut sp, None),
        Target::Pid(p) => snapshot_proc(&mut sp, Some(&[*p, std::process::id()])),
        Target::Command(_) => snapshot_proc(&mut sp, Some(&[std::process::id()])),
    }
    if let Some(p) = sp.procs.get_mut(&std::process::id()) {
        p.mantle = true;
    }

    // the sampling events
    let open_all = |ev: &EventDef| -> Result<Vec<(u32, OwnedFd)>, std::io::Error> {
        let mut fds = Vec::new();
        for &pid in &pids {
            for &cpu in &cpus {
                let mut flags = attr::DISABLED;
                if inherit {
                    flags |= attr::INHERIT;
                }
                if on_exec {
                    flags |= attr::ENABLE_ON_EXEC;
                }
                if freq.is_some() {
                    flags |= attr::FREQ;
                }
                let a = PerfEventAttr {
                    type_: ev.type_,
                    config: ev.config,
                    sample_period: freq.or(period).unwrap(),
                    sample_type: kernel::PERF_SAMPLE_IP | kernel::PERF_SAMPLE_TID,
                    flags,
                    ..Default::default()
                };
                match open_event(ev, &a, pid, cpu as i32, &o.faults) {
                    Ok(fd) => fds.push((cpu, fd)),
                    // a thread of -p PID that exited meanwhile
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) && pids.len() > 1 => {}
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
                let c = use_fallback(ev, fb, &o.faults)?;
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
                    Err(e) => return Err(open_error(ev, e, freq)),
                }
            }
            None => return Err(Error::NoPmu(ev.name.to_string())),
        },
        Err(e) => return Err(open_error(ev, e, freq)),
    };
    let mut throttle_visible = true;
    for (cpu, fd) in &fds {
        sampler.attach(fd.as_fd())?;
        if let Some(r) = rings.get(cpu) {
            if kernel::perf_set_output(fd.as_fd(), r.fd.as_fd()).is_err() {
                throttle_visible = false;
            }
        }
    }

    // go
    let start = Instant::now();
    let start_ns = unix_ns();
    kernel::catch_stop_signals();
    if let Some(g) = gate.take() {
        g.release()
            .map_err(|e| Error::Kernel(format!("start the command: {e}")))?;
    } else {
        for (_, fd) in &fds {
            kernel::perf_enable(fd.as_fd()).map_err(|e| Error::Kernel(format!("enable: {e}")))?;
        }
    }
    let live = o.status && kernel::stderr_is_tty();
    let mut profile = Profile::default();
    let mut side = SideStats::default();
    let mut recs = Vec::new();
    let mut raw = Vec::new();
    let mut drain_costs: Vec<f64> = Vec::new();
    let mut last_drain = Instant::now();
    let mut last_status = Instant::now();
    let mut last_samples = 0u64;
    let mut command_status = None;
    let poll = if o.transport == Transport::Ring {
        Duration::from_millis(50)
    } else {
        Duration::from_millis(100).min(o.drain_interval)
    };
    let drain = |sampler: &mut Sampler,
                 sp: &mut AddressSpaces,
                 profile: &mut Profile,
                 raw: &mut Vec<(Key, u64)>,
                 drain_costs: &mut Vec<f64>,
                 ids: &mut BuildIds|
     -> Result<(), Error> {
        let t = Instant::now();
        sampler.drain(raw)?;
        let n: u64 = raw.iter().map(|r| r.1).sum();
        for (k, c) in raw.drain(..) {
            let s = to_raw(&k);
            let mut r = sp.resolve(s.pid, s.ip, s.mode);
            if r.image.kind == model::ImageKind::Elf && r.image.build_id.is_none() {
                r.image.build_id = ids.of(&r.image.path);
            }
            profile
                .add_resolved(&s, &r, c)
                .map_err(|e| Error::Kernel(format!("counts drained from the sample path: {e}")))?;
        }
        if n > 0 {
            drain_costs.push(t.elapsed().as_nanos() as f64 / n as f64);
        }
        Ok(())
    };
    loop {
        std::thread::sleep(poll);
        replay(&mut rings, &mut recs, &mut sp, &mut side);
        if o.transport == Transport::Ring || last_drain.elapsed() >= o.drain_interval {
            drain(
                &mut sampler,
                &mut sp,
                &mut profile,
                &mut raw,
                &mut drain_costs,
                &mut ids,
            )?;
            last_drain = Instant::now();
        }
        if live && last_status.elapsed() >= Duration::from_millis(500) {
            let st = sampler.stats();
            let dt = last_status.elapsed().as_secs_f64();
            let _ = write!(
                std::io::stderr(),
                "\r\x1b[Kmantle prof: {} samples, {:.0}/s, lost {}, throttled {}",
                st.samples,
                (st.samples - last_samples) as f64 / dt,
                st.dropped + st.ring_full + side.lost_samples,
                side.throttle
            );
            last_samples = st.samples;
            last_status = Instant::now();
        }
        let mut done = kernel::stop_requested();
        if let Some(d) = o.duration {
            done |= start.elapsed() >= d;
        }
        if let Some(c) = child.as_mut() {
            if let Some(s) = c.try_wait() {
                command_status = Some(s);
                done = true;
            }
        }
        if let Target::Pid(p) = o.target {
            done |= !Path::new(&format!("/proc/{p}")).exists();
        }
        if done {
            break;
        }
    }
    let duration = start.elapsed();
    if live {
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
    for (_, fd) in &fds {
        let _ = kernel::perf_disable(fd.as_fd());
    }
    sampler.detach();
    if let Some(mut c) = child.take() {
        // stopped early (signal or duration): the command keeps its signal
        if let Some(s) = c.wait() {
            command_status.get_or_insert(s);
        }
    }
    replay(&mut rings, &mut recs, &mut sp, &mut side);
    drain(
        &mut sampler,
        &mut sp,
        &mut profile,
        &mut raw,
        &mut drain_costs,
        &mut ids,
    )?;
    drain(
        &mut sampler,
        &mut sp,
        &mut profile,
        &mut raw,
        &mut drain_costs,
        &mut ids,
    )?;
    let st = sampler.stats();
    let (run_ns, run_cnt) = sampler.prog_run_stats();
    drop(stats_fd);

    let (_, tags_end) = tag_names();
    let mut tags = tags_end;
    for t in tags_start {
        if !tags.iter().any(|x| x.bit == t.bit) {
            tags.push(t);
        }
    }
    tags.sort_by_key(|t| t.bit);

    // JIT maps of processes that had executable anonymous memory
    let mut jit_maps = Vec::new();
    let sampled_pids: std::collections::HashSet<u32> =
        profile.counts().keys().map(|k| k.pid).collect();
    for pid in sampled_pids {
        // a regular file only: /tmp is writable by anyone, and a FIFO there
        // would block a plain open forever
        let path = PathBuf::from(format!("/tmp/perf-{pid}.map"));
        if let Ok(b) = crate::files::read_regular(&path, session::JSON_MAX) {
            // written by the JIT, so anything: the session keeps only the
            // lines the report's parser accepts, and says how many it dropped
            let (t, dropped) = crate::symbols::JitMap::clean(&String::from_utf8_lossy(&b));
            if dropped > 0 {
                warnings.push(format!(
                    "{}: {dropped} malformed line(s) dropped",
                    path.display()
                ));
            }
            if let Some(p) = sp.procs.get_mut(&pid) {
                p.jit_map = true;
            }
            jit_maps.push((pid, t));
        }
    }
    // JIT images need re-resolution now that jit_map is known: redo anon rows
    if !jit_maps.is_empty() {
        let rows = profile.take_rows();
        let anon = profile
            .images
            .iter()
            .position(|i| i.kind == model::ImageKind::Anon);
        for (k, n) in rows {
            if Some(k.image as usize) == anon && sp.procs.get(&k.pid).is_some_and(|p| p.jit_map) {
                let img = model::Image {
                    path: model::JIT_IMAGE.into(),
                    kind: model::ImageKind::Jit,
                    build_id: None,
                    pid: Some(k.pid),
                };
                let id = profile.image_id(&img);
                profile
                    .add_row(model::RowKey { image: id, ..k }, n)
                    .expect("the same counts as before");
            } else {
                profile.add_row(k, n).expect("the same counts as before");
            }
        }
    }

    let ks = kallsyms_text();
    if !throttle_visible {
        warnings.push(
            "throttle records could not be routed to the side band: throttling is detected only through the max-sample-rate sysctl".into(),
        );
    }
    let cost = o.self_timing.then(|| SampleCost {
        bpf_self_ns: Dist::from_moments(
            st.t_n,
            st.t_sum as f64,
            st.t_sumsq as f64,
            st.t_min as f64,
            st.t_max as f64,
        ),
        bpf_stats_mean_ns: if run_cnt > 0 {
            run_ns as f64 / run_cnt as f64
        } else {
            0.0
        },
        bpf_stats_runs: run_cnt,
        drain_ns_per_sample: Dist::of(&drain_costs),
    });
    let meta = Meta {
        format: session::FORMAT,
        mantle_version: env!("CARGO_PKG_VERSION").into(),
        event: ev.name.into(),
        fallback_from,
        freq,
        period,
        target: target_desc,
        cpus: cpus.len() as u32,
        start_unix_ns: start_ns,
        duration_ns: duration.as_nanos() as u64,
        samples: st.samples,
        lost_samples: st.dropped + st.ring_full + side.lost_samples,
        lost_sideband: side.lost,
        throttle_events: side.throttle,
        unthrottle_events: side.unthrottle,
        max_sample_rate_start: max_rate_start,
        max_sample_rate_end: max_sample_rate(),
        transport: match o.transport {
            Transport::Aggregate => "aggregate".into(),
            Transport::Ring => "ring".into(),
        },
        tags_loaded,
        kernel_symbols: ks.is_some(),
        warnings,
        cost,
    };
    let vdso = kernel::vdso_image();
    session::write_session(
        &o.output,
        &SessionData {
            meta: &meta,
            profile: &profile,
            procs: &sp.procs,
            history: &sp.history,
            tags: &tags,
            kallsyms_text: ks.as_deref(),
            vdso: vdso.as_deref(),
            jit_maps: &jit_maps,
        },
        o.force,
    )?;
    Ok(Summary {
        session: o.output.display().to_string(),
        caveats: meta.caveats(),
        rows: profile.counts().len(),
        images: profile.images.len(),
        processes: sp.procs.len(),
        meta,
        command_status,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn cpu_list() {
        assert_eq!(parse_cpu_list("0-1"), vec![0, 1]);
        assert_eq!(parse_cpu_list("0,2-3,7"), vec![0, 2, 3, 7]);
        assert_eq!(parse_cpu_list("0"), vec![0]);
        assert!(parse_cpu_list("").is_empty());
    }
}
