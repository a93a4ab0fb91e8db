//! mantle-prof: a system-wide statistical profiler for mantle, after
//! L4oprof (seeds/002) and OProfile, on an unmodified Linux.
//!
//! What: samples the whole system (or one command's process tree, or one
//! process) on a perf event, and says where the time or the hardware events
//! went: per image, per symbol, per component (kernel, mantle, each
//! process) and per tag (the thread's mTags vector at each sample).
//!
//! Mechanism:
//! * `perf_event_open` per CPU (per CPU and task with `inherit` for a
//!   command or process), software or hardware events by name
//!   ([`events`]); a hardware event on a machine without a PMU is
//!   [`Error::NoPmu`] unless `--fallback` names another event;
//! * an eBPF `perf_event` program (`src/bpf/prof.bpf.c`) is the sample
//!   path: it records (pid, tid, cpu, mode, ip, tag vector, kernel and
//!   user stack keys) into one of two in-kernel hash maps (default) or a
//!   ring buffer, and each distinct call stack once into the stack map
//!   paired with that count map (keyed by a 64-bit hash of its frames;
//!   walked by the perf core with PERF_SAMPLE_CALLCHAIN, or by the
//!   helper); user space flips the pairs and drains the idle one every
//!   second;
//! * with `--stacks dwarf` ([`unwind`]) no program is attached: each
//!   sample record carries the user registers and a copy of the top of the
//!   user stack (PERF_SAMPLE_REGS_USER/STACK_USER), goes through the side
//!   band's ring, and is unwound with `.eh_frame` (framehop) when it is
//!   replayed, then merged like the other stacks (perf `--call-graph
//!   dwarf`, unwound at record time);
//! * a per-CPU dummy event with mmap2/comm/task bits and its own ring is
//!   the side band (mmaps with build IDs, exec, fork, exit); the sampling
//!   events' own output (throttle records) is redirected into it; with an
//!   initial /proc snapshot it lets [`model::AddressSpaces`] turn each ip
//!   into (image, offset) when the samples are drained, so processes that
//!   exit before the report still resolve;
//! * a session ([`session`]) is a directory of merged counts and a stack
//!   table plus what the report needs later (images with build IDs,
//!   kallsyms, vDSO, tag names);
//! * reports ([`report`]) symbolize with blazesym (ELF + DWARF names,
//!   source lines and inlined calls, and separate debug files found by
//!   build ID or `.gnu_debuglink`, [`debugfile`]; the public name among
//!   aliases, [`elfsyms`]; callers at their call instruction; unnamed
//!   code of stripped images per function) and render text (exclusive,
//!   inclusive, callers/callees), JSON, flame graphs (inferno), folded
//!   stacks and pprof with call edges, source lines and real mappings;
//!   [`annotate`] shows one function per source line and per instruction.
//! * [`diff`] compares two sessions per function (`mantle prof diff`).
//!
//! Invariants: the sample path never writes to the perf ring (the program
//! returns 0), so a sample costs the interrupt plus the program; user space
//! only deletes from the count and stack maps that the program is not
//! writing (the `sel` flip, read once per sample so a sample's count and
//! stacks go to one pair); the rate is never changed silently: throttling, a change of
//! `kernel.perf_event_max_sample_rate`, lost samples and a fallback event
//! are written into the session and shown in every summary and report.
//! [`model`] is the pure core (no system calls); [`kernel`] holds every
//! `unsafe` block and system call.
//!
//! Lock order: none inside the crate (one recording thread). The profiler
//! only reads the tags subsystem's pinned `view` map, so it takes no tags
//! lock; the kernel-wide /run/mantle-kernel.lock is for scripts that load
//! or unload the tags kernel side and for benchmarks.

pub mod abi;
pub mod annotate;
pub mod debugfile;
pub mod diff;
pub mod elfsyms;
pub mod events;
pub mod files;
pub mod kernel;
pub mod model;
pub mod parse;
pub mod pprof;
pub mod record;
pub mod report;
pub mod session;
pub mod symbols;
pub mod synth;
pub mod unwind;

pub use model::{Report, ReportOpts};
pub use record::{RecordOpts, Stacks, Summary, Target, Transport};

/// Errors of the profiler. The CLI maps them to messages and exit codes.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("event {0} needs a hardware PMU, and this machine has none (perf_event_open: ENOENT); record with `--fallback cpu-clock` to sample CPU time instead")]
    NoPmu(String),
    /// The fallback event needs a PMU too, and there is none.
    #[error("event {event} needs a hardware PMU, and this machine has none; the fallback {fallback} is a hardware event too: use `--fallback cpu-clock` (or task-clock)")]
    FallbackNoPmu { event: String, fallback: String },
    #[error("unknown event {0:?} (known: {1}; see `mantle prof events`)")]
    UnknownEvent(String, String),
    #[error("-F {asked} is above kernel.perf_event_max_sample_rate ({max}): ask for less, or raise the sysctl; mantle does not lower the rate silently")]
    RateTooHigh { asked: u64, max: i64 },
    #[error("permission denied: {0}")]
    Permission(String),
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("no such process: {0}")]
    NoSuchProcess(u32),
    #[error("no session at {0} (record one with `mantle prof record -o DIR`)")]
    NoSession(String),
    /// `record -o DIR` where DIR already holds a session.
    #[error("{0} already exists: pass --force to replace it, or -o another directory")]
    SessionExists(String),
    /// `record -o PATH --force` where PATH is not a session: never removed.
    #[error("{0} exists and is not a mantle session (no meta.json): not replacing it, even with --force")]
    NotASession(String),
    /// A report filter (--pid, --comm) that selects no sample.
    #[error("no samples match {filter} in {session}")]
    NoMatch { filter: String, session: String },
    /// A session file (or a file it names) that is not a regular file.
    #[error("{}: not a regular file ({kind}): not read", path.display())]
    NotRegular {
        path: std::path::PathBuf,
        kind: &'static str,
    },
    #[error("{}: larger than {limit} bytes: not read", path.display())]
    TooLarge {
        path: std::path::PathBuf,
        limit: u64,
    },
    /// A session file that does not parse or does not make sense.
    #[error("session file {}: {source}", file.display())]
    Corrupt {
        file: std::path::PathBuf,
        #[source]
        source: parse::ParseError,
    },
    /// Reading or writing a file failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Kernel-side trouble described in words (no OS error to keep).
    #[error("kernel: {0}")]
    Kernel(String),
    /// A system call failed: what was being done, and its error (io or
    /// libbpf), kept as the source; [`Error::errno`] reads its errno.
    #[error("kernel: {what}: {source}")]
    Os {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The sample counts would overflow 64 bits (counts from the sample
    /// path's maps, which a corrupted map could make arbitrary).
    #[error("kernel: {what}: {source}")]
    Counts {
        what: &'static str,
        #[source]
        source: model::CountOverflow,
    },
}

impl Error {
    /// A failed system call: `what` was being done.
    pub fn os(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Error {
        Error::Os {
            what: what.into(),
            source: source.into(),
        }
    }

    /// The errno behind a failed system call: the first `io::Error` with
    /// an OS code in the source chain.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Os { source, .. } => mantle_sys::os::errno_in_chain(source.as_ref()),
            // a session file another user's (0700 directory): EACCES
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// The error of reading `path` with [`files::read_regular`].
    pub fn open(path: &std::path::Path, e: files::OpenError) -> Error {
        let path = path.to_path_buf();
        match e {
            files::OpenError::NotRegular(kind) => Error::NotRegular { path, kind },
            files::OpenError::TooLarge { limit } => Error::TooLarge { path, limit },
            files::OpenError::Io(source) => Error::Io {
                op: "read",
                path,
                source,
            },
        }
    }
}

/// One line of `mantle prof events`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EventInfo {
    pub name: &'static str,
    pub hardware: bool,
    pub available: bool,
    pub detail: String,
    pub description: &'static str,
}

/// What this machine offers.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EventsReport {
    pub pmu: bool,
    pub events: Vec<EventInfo>,
    pub max_sample_rate: Option<i64>,
    pub perf_event_paranoid: Option<i64>,
    pub note: String,
}

/// Tries every known event (a counting event on this thread; no sampling).
pub fn list_events() -> EventsReport {
    let events: Vec<EventInfo> = events::EVENTS
        .iter()
        .map(|e| {
            let r = record::event_available(e);
            EventInfo {
                name: e.name,
                hardware: e.hardware,
                available: r.is_ok(),
                detail: match r {
                    Ok(()) => "ok".into(),
                    Err(err) if err.raw_os_error() == Some(libc::ENOENT) => {
                        "ENOENT: no PMU for this event".into()
                    }
                    Err(err) => err.to_string(),
                },
                description: e.description,
            }
        })
        .collect();
    let pmu = events.iter().any(|e| e.hardware && e.available);
    let note = if pmu {
        "a hardware PMU is present: hardware events can be sampled".to_string()
    } else {
        "no hardware PMU on this machine: cycles, instructions, cache and TLB misses cannot be sampled; use cpu-clock (or --fallback cpu-clock)".to_string()
    };
    EventsReport {
        pmu,
        events,
        max_sample_rate: record::max_sample_rate(),
        perf_event_paranoid: std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
            .ok()
            .and_then(|s| s.trim().parse().ok()),
        note,
    }
}
