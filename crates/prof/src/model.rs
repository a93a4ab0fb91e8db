//! The pure core of the profiler: no system calls, no files.
//!
//! * [`AddressSpaces`] replays what the side band told (initial maps, mmap,
//!   comm/exec, fork, exit) and resolves a sample's ip to an image and an
//!   offset in it, the way OProfile's daemon did with its dcookies: user
//!   addresses become file offsets in a file (identified by path and build
//!   ID), kernel addresses stay addresses in `[kernel.kallsyms]`.
//! * [`Profile`] is the compact merged profile of a session: counts keyed
//!   by (pid, tid, cpu, mode, image, offset, tag vector).
//! * [`Kallsyms`] looks kernel addresses up in a kallsyms snapshot.
//! * [`build_report`] turns a profile plus a symbolizer into the report
//!   model (symbol table, image summary, components, per tag); the
//!   renderers below turn it into text and folded stacks.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// The kernel image's name (as perf and OProfile call it).
pub const KERNEL_IMAGE: &str = "[kernel.kallsyms]";
pub const VDSO_IMAGE: &str = "[vdso]";
pub const ANON_IMAGE: &str = "[anon]";
pub const JIT_IMAGE: &str = "[jit]";
pub const UNKNOWN_IMAGE: &str = "[unknown]";
pub const UNKNOWN_SYMBOL: &str = "[unknown]";

/// CPU mode of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    User,
    Kernel,
}

/// What kind of thing an image is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageKind {
    /// An ELF file on disk (executable or shared library).
    Elf,
    /// The kernel (symbols from the session's kallsyms snapshot).
    Kernel,
    /// The vDSO (a copy is kept in the session).
    Vdso,
    /// Executable anonymous memory without a JIT map.
    Anon,
    /// Executable anonymous memory described by /tmp/perf-PID.map.
    Jit,
    /// An address no mapping covered.
    Unknown,
}

/// An image samples are attributed to. Two files at the same path with
/// different build IDs are two images.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Image {
    pub path: String,
    pub kind: ImageKind,
    /// Lower-case hex, when the file has one.
    pub build_id: Option<String>,
    /// For Jit images: whose perf map (the offsets are absolute addresses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

impl Image {
    pub fn named(path: &str, kind: ImageKind) -> Image {
        Image {
            path: path.to_string(),
            kind,
            build_id: None,
            pid: None,
        }
    }
    /// The short name shown in tables.
    pub fn display(&self) -> String {
        match self.kind {
            ImageKind::Jit => format!("{JIT_IMAGE}:{}", self.pid.unwrap_or(0)),
            _ => self.path.clone(),
        }
    }
}

/// One executable mapping of a process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    /// File path, or `[vdso]`, `[anon]`, `//anon`, `[heap]`...
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
}

/// What the side band and /proc told about one process.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Process {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    /// Main executable (first file mapping after the last exec).
    pub exe: Option<String>,
    pub exited: bool,
    /// Whether this is one of mantle's own processes.
    pub mantle: bool,
    /// Whether /tmp/perf-PID.map was captured for it.
    #[serde(default)]
    pub jit_map: bool,
    #[serde(skip)]
    maps: BTreeMap<u64, Mapping>,
    /// Address spaces before the last execs (newest last, at most
    /// [`OLD_SPACES`]): samples are resolved when drained, up to a second
    /// later, and may predate an exec (ASLR makes overlaps rare).
    #[serde(skip)]
    old: Vec<BTreeMap<u64, Mapping>>,
}

/// How many pre-exec address spaces a process keeps for resolution.
pub const OLD_SPACES: usize = 4;

fn lookup(maps: &BTreeMap<u64, Mapping>, ip: u64) -> Option<&Mapping> {
    maps.range(..=ip)
        .next_back()
        .map(|(_, m)| m)
        .filter(|m| ip < m.end)
}

impl Process {
    pub fn maps(&self) -> impl Iterator<Item = &Mapping> {
        self.maps.values()
    }
}

/// Address spaces of every process seen while recording.
#[derive(Debug, Default)]
pub struct AddressSpaces {
    pub procs: HashMap<u32, Process>,
    /// Every mapping ever seen, for the session's mappings file.
    pub history: Vec<(u32, Mapping)>,
    /// Which process names count as mantle's own.
    pub mantle_comms: Vec<String>,
}

/// Where an ip landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub image: Image,
    /// File offset (ELF), offset from the start (vDSO), or the address
    /// itself (kernel, anon, JIT, unknown).
    pub offset: u64,
}

fn is_mantle_comm(comm: &str, list: &[String]) -> bool {
    list.iter().any(|m| comm == m)
}

impl AddressSpaces {
    pub fn new(mantle_comms: Vec<String>) -> Self {
        AddressSpaces {
            mantle_comms,
            ..Default::default()
        }
    }

    fn proc_mut(&mut self, pid: u32) -> &mut Process {
        self.procs.entry(pid).or_insert_with(|| Process {
            pid,
            ..Default::default()
        })
    }

    /// A process seen in the /proc snapshot.
    pub fn add_process(&mut self, pid: u32, ppid: u32, comm: &str) {
        let mantle = is_mantle_comm(comm, &self.mantle_comms);
        let p = self.proc_mut(pid);
        p.ppid = ppid;
        p.comm = comm.to_string();
        p.mantle |= mantle;
    }

    /// A new executable mapping (snapshot or PERF_RECORD_MMAP2).
    pub fn mmap(&mut self, pid: u32, m: Mapping) {
        self.history.push((pid, m.clone()));
        let p = self.proc_mut(pid);
        if p.exe.is_none() && m.path.starts_with('/') {
            p.exe = Some(m.path.clone());
        }
        // drop what the new mapping overlaps (munmap is not reported)
        let overlapping: Vec<u64> = p
            .maps
            .range(..m.end)
            .filter(|(_, o)| o.end > m.start)
            .map(|(s, _)| *s)
            .collect();
        for s in overlapping {
            p.maps.remove(&s);
        }
        p.maps.insert(m.start, m);
    }

    /// PERF_RECORD_COMM; `exec` when it came from an exec (the address
    /// space was replaced: mappings that follow describe the new program).
    pub fn comm(&mut self, pid: u32, tid: u32, comm: &str, exec: bool) {
        if pid != tid && !exec {
            return; // a thread renamed itself: the process keeps its name
        }
        let mantle = is_mantle_comm(comm, &self.mantle_comms);
        let p = self.proc_mut(pid);
        p.comm = comm.to_string();
        p.mantle = mantle;
        if exec {
            let old = std::mem::take(&mut p.maps);
            if !old.is_empty() {
                p.old.push(old);
                if p.old.len() > OLD_SPACES {
                    p.old.remove(0);
                }
            }
            p.exe = None;
            p.exited = false;
        }
    }

    /// PERF_RECORD_FORK: a new process starts as a copy of its parent.
    pub fn fork(&mut self, pid: u32, ppid: u32, tid: u32) {
        if pid != tid || pid == ppid {
            return; // a new thread
        }
        let parent = self.procs.get(&ppid).cloned().unwrap_or_default();
        self.procs.insert(
            pid,
            Process {
                pid,
                ppid,
                comm: parent.comm,
                exe: parent.exe,
                exited: false,
                mantle: parent.mantle,
                jit_map: false,
                maps: parent.maps,
                old: Vec::new(),
            },
        );
    }

    /// PERF_RECORD_EXIT: the process is kept so its samples still resolve.
    pub fn exit(&mut self, pid: u32, tid: u32) {
        if pid == tid {
            if let Some(p) = self.procs.get_mut(&pid) {
                p.exited = true;
            }
        }
    }

    /// The image and offset of one sample.
    pub fn resolve(&self, pid: u32, ip: u64, mode: Mode) -> Resolved {
        if mode == Mode::Kernel || ip >= 0xffff_8000_0000_0000 {
            return Resolved {
                image: Image::named(KERNEL_IMAGE, ImageKind::Kernel),
                offset: ip,
            };
        }
        let m = self.procs.get(&pid).and_then(|p| {
            lookup(&p.maps, ip)
                .or_else(|| p.old.iter().rev().find_map(|o| lookup(o, ip)))
                .map(|m| (p, m))
        });
        let Some((p, m)) = m else {
            return Resolved {
                image: Image::named(UNKNOWN_IMAGE, ImageKind::Unknown),
                offset: ip,
            };
        };
        if m.path.starts_with('/') {
            Resolved {
                image: Image {
                    path: m.path.clone(),
                    kind: ImageKind::Elf,
                    build_id: m.build_id.clone(),
                    pid: None,
                },
                offset: ip - m.start + m.pgoff,
            }
        } else if m.path == VDSO_IMAGE {
            Resolved {
                image: Image::named(VDSO_IMAGE, ImageKind::Vdso),
                offset: ip - m.start,
            }
        } else if p.jit_map {
            Resolved {
                image: Image {
                    path: JIT_IMAGE.into(),
                    kind: ImageKind::Jit,
                    build_id: None,
                    pid: Some(pid),
                },
                offset: ip,
            }
        } else {
            Resolved {
                image: Image::named(ANON_IMAGE, ImageKind::Anon),
                offset: ip,
            }
        }
    }
}

/// Parses one line of /proc/PID/maps; executable mappings only.
pub fn parse_maps_line(line: &str) -> Option<Mapping> {
    let mut f = line.split_whitespace();
    let range = f.next()?;
    let perms = f.next()?;
    let off = f.next()?;
    let _dev = f.next()?;
    let _ino = f.next()?;
    let path: String = f.collect::<Vec<_>>().join(" ");
    if !perms.contains('x') {
        return None;
    }
    let (s, e) = range.split_once('-')?;
    Some(Mapping {
        start: u64::from_str_radix(s, 16).ok()?,
        end: u64::from_str_radix(e, 16).ok()?,
        pgoff: u64::from_str_radix(off, 16).ok()?,
        path: if path.is_empty() {
            "//anon".into()
        } else {
            path
        },
        build_id: None,
    })
}

/// Aggregation key of the merged profile.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RowKey {
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    pub mode: Mode,
    pub image: u32,
    pub offset: u64,
    pub tags: Vec<u64>,
}

/// The compact merged profile: images and counts.
///
/// Invariant: the sum of all counts fits a u64. Every count goes in
/// through [`Profile::add_row`], which checks it, so any partial sum a
/// report makes (per symbol, image, component, tag) cannot overflow either.
#[derive(Debug, Default, Clone)]
pub struct Profile {
    pub images: Vec<Image>,
    index: HashMap<Image, u32>,
    counts: HashMap<RowKey, u64>,
    total: u64,
}

/// Adding samples would make the profile's total exceed a u64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("sample counts overflow 64 bits")]
pub struct CountOverflow;

/// One raw sample as the kernel side aggregated it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RawSample {
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    pub mode: Mode,
    pub ip: u64,
    pub tags: Vec<u64>,
}

impl Profile {
    pub fn image_id(&mut self, img: &Image) -> u32 {
        if let Some(&i) = self.index.get(img) {
            return i;
        }
        let i = self.images.len() as u32;
        self.images.push(img.clone());
        self.index.insert(img.clone(), i);
        i
    }

    /// Adds `count` samples of one raw key, resolved now.
    pub fn add(
        &mut self,
        spaces: &AddressSpaces,
        s: &RawSample,
        count: u64,
    ) -> Result<(), CountOverflow> {
        self.add_resolved(s, &spaces.resolve(s.pid, s.ip, s.mode), count)
    }

    /// Adds `count` samples of one raw key already resolved.
    pub fn add_resolved(
        &mut self,
        s: &RawSample,
        r: &Resolved,
        count: u64,
    ) -> Result<(), CountOverflow> {
        let image = self.image_id(&r.image);
        self.add_row(
            RowKey {
                pid: s.pid,
                tid: s.tid,
                cpu: s.cpu,
                mode: s.mode,
                image,
                offset: r.offset,
                tags: s.tags.clone(),
            },
            count,
        )
    }

    /// Adds `count` samples to a row (rows with equal keys merge). Nothing
    /// changes when the total would overflow.
    pub fn add_row(&mut self, k: RowKey, count: u64) -> Result<(), CountOverflow> {
        let total = self.total.checked_add(count).ok_or(CountOverflow)?;
        // a row's count is part of the total, so it cannot overflow either
        *self.counts.entry(k).or_insert(0) += count;
        self.total = total;
        Ok(())
    }

    /// The sum of all counts.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The rows and their counts.
    pub fn counts(&self) -> &HashMap<RowKey, u64> {
        &self.counts
    }

    /// Takes every row out (the images stay), e.g. to re-add them under
    /// other keys.
    pub fn take_rows(&mut self) -> HashMap<RowKey, u64> {
        self.total = 0;
        std::mem::take(&mut self.counts)
    }

    /// Rows sorted by key, for a stable file.
    pub fn sorted_rows(&self) -> Vec<(&RowKey, u64)> {
        let mut v: Vec<_> = self.counts.iter().map(|(k, c)| (k, *c)).collect();
        v.sort();
        v
    }

    /// Restores the image index after images were read from disk.
    pub fn with_images(images: Vec<Image>) -> Profile {
        let index = images
            .iter()
            .enumerate()
            .map(|(i, im)| (im.clone(), i as u32))
            .collect();
        Profile {
            images,
            index,
            counts: HashMap::new(),
            total: 0,
        }
    }
}

/// Tag vector words as one hex string, most significant word first
/// ("0" when empty).
pub fn tags_hex(tags: &[u64]) -> String {
    let mut s = String::new();
    for (i, w) in tags.iter().rev().enumerate() {
        if i == 0 {
            let _ = write!(s, "{w:x}");
        } else {
            let _ = write!(s, "{w:016x}");
        }
    }
    let t = s.trim_start_matches('0');
    if t.is_empty() {
        "0".into()
    } else {
        t.to_string()
    }
}

/// Inverse of [`tags_hex`] for a vector of `words` words; None unless
/// `s` is hex digits only (no sign, no space) and fits.
pub fn parse_tags_hex(s: &str, words: usize) -> Option<Vec<u64>> {
    let mut out = vec![0u64; words];
    // ASCII only: the slicing below is by bytes
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let n = s.len();
    for (i, w) in out.iter_mut().enumerate() {
        let end = n.checked_sub(16 * i);
        let Some(end) = end else { break };
        if end == 0 {
            break;
        }
        let start = end.saturating_sub(16);
        *w = u64::from_str_radix(&s[start..end], 16).ok()?;
    }
    if n > 16 * words && !s[..n - 16 * words].trim_start_matches('0').is_empty() {
        return None;
    }
    Some(out)
}

/// Bits set in a tag vector.
pub fn tag_bits(tags: &[u64]) -> Vec<u32> {
    let mut v = Vec::new();
    for (w, word) in tags.iter().enumerate() {
        for b in 0..64 {
            if word & (1u64 << b) != 0 {
                v.push((w * 64 + b) as u32);
            }
        }
    }
    v
}

/// A kallsyms snapshot: text symbols sorted by address.
#[derive(Debug, Default, Clone)]
pub struct Kallsyms {
    syms: Vec<(u64, String)>,
}

impl Kallsyms {
    /// Parses /proc/kallsyms text ("addr type name [module]"). Keeps text
    /// symbols (t/T/w/W); an all-zero table (addresses hidden) is empty.
    pub fn parse(text: &str) -> Kallsyms {
        let mut syms: Vec<(u64, String)> = text
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let a = u64::from_str_radix(f.next()?, 16).ok()?;
                let t = f.next()?;
                let name = f.next()?;
                let module = f.next();
                if a == 0 || !matches!(t, "t" | "T" | "w" | "W") {
                    return None;
                }
                let name = match module {
                    Some(m) => format!("{name} {m}"),
                    None => name.to_string(),
                };
                Some((a, name))
            })
            .collect();
        // Aliases share an address (memset, __memset, __pi_memset): keep
        // the last one in kallsyms order, as perf does (it prefers the
        // alias with a non-zero size, which only the last one has).
        syms.sort_by_key(|s| s.0); // stable: kallsyms order within an address
        let mut out: Vec<(u64, String)> = Vec::with_capacity(syms.len());
        for s in syms {
            match out.last_mut() {
                Some(l) if l.0 == s.0 => *l = s,
                _ => out.push(s),
            }
        }
        Kallsyms { syms: out }
    }
    pub fn len(&self) -> usize {
        self.syms.len()
    }
    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }
    /// The symbol containing `addr` (the nearest one at or below it).
    pub fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self.syms.partition_point(|(a, _)| *a <= addr);
        if i == 0 {
            return None;
        }
        Some(&self.syms[i - 1].1)
    }
}

/// Resolves offsets in an image to symbol names.
pub trait Symbolizer {
    /// One answer per offset, in order (None: no symbol).
    fn symbolize(&mut self, image: &Image, offsets: &[u64]) -> Vec<Option<String>>;
}

/// What a session's metadata says about the recording (the report header).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Meta {
    pub format: u32,
    pub mantle_version: String,
    /// The event actually sampled.
    pub event: String,
    /// The event that was asked for, when a fallback replaced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_from: Option<String>,
    /// Requested frequency (Hz) or period (events), one of the two.
    pub freq: Option<u64>,
    pub period: Option<u64>,
    pub target: String,
    pub cpus: u32,
    pub start_unix_ns: u64,
    pub duration_ns: u64,
    pub samples: u64,
    /// Samples the sample path could not record (map or ring full).
    pub lost_samples: u64,
    /// Side-band records lost (PERF_RECORD_LOST).
    pub lost_sideband: u64,
    pub throttle_events: u64,
    pub unthrottle_events: u64,
    pub max_sample_rate_start: Option<i64>,
    pub max_sample_rate_end: Option<i64>,
    /// "aggregate" or "ring".
    pub transport: String,
    pub tags_loaded: bool,
    pub kernel_symbols: bool,
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The sample path's own cost, when measured (`record --self-timing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<SampleCost>,
}

/// Distribution of a per-sample cost in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    pub n: u64,
    pub mean: f64,
    pub stddev: f64,
    pub min: f64,
    pub max: f64,
}

impl Dist {
    /// From a count, a sum, a sum of squares, min and max.
    pub fn from_moments(n: u64, sum: f64, sumsq: f64, min: f64, max: f64) -> Dist {
        if n == 0 {
            return Dist::default();
        }
        let mean = sum / n as f64;
        let var = (sumsq / n as f64 - mean * mean).max(0.0);
        Dist {
            n,
            mean,
            stddev: var.sqrt(),
            min,
            max,
        }
    }
    /// From individual values.
    pub fn of(v: &[f64]) -> Dist {
        let n = v.len() as u64;
        let sum: f64 = v.iter().sum();
        let sumsq: f64 = v.iter().map(|x| x * x).sum();
        let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        Dist::from_moments(n, sum, sumsq, min, max)
    }
}

/// The sample path's own cost (the paper's Table 2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SampleCost {
    /// The eBPF program timing itself (bpf_ktime_get_ns at entry and exit).
    pub bpf_self_ns: Dist,
    /// Kernel accounting: run_time_ns / run_cnt (BPF_ENABLE_STATS), mean only.
    pub bpf_stats_mean_ns: f64,
    pub bpf_stats_runs: u64,
    /// User space: draining + resolving, per sample, one value per drain.
    pub drain_ns_per_sample: Dist,
}

impl Meta {
    /// Lines that must be shown wherever the profile is (summary, report).
    pub fn caveats(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(f) = &self.fallback_from {
            v.push(format!(
                "event {f} is not available here: sampled {} instead (--fallback)",
                self.event
            ));
        }
        if self.throttle_events > 0 {
            v.push(format!(
                "the kernel throttled sampling {} time(s) (perf_event_max_sample_rate or interrupt time too long): fewer samples than asked",
                self.throttle_events
            ));
        }
        if let (Some(a), Some(b)) = (self.max_sample_rate_start, self.max_sample_rate_end) {
            if a != b {
                v.push(format!(
                    "kernel.perf_event_max_sample_rate changed during recording: {a} -> {b} (the kernel lowers it when sample interrupts take too long)"
                ));
            }
        }
        if self.lost_samples > 0 {
            v.push(format!(
                "{} sample(s) lost in the sample path (count map or ring buffer full)",
                self.lost_samples
            ));
        }
        if self.lost_sideband > 0 {
            v.push(format!(
                "{} side-band record(s) lost: some mappings may be missing",
                self.lost_sideband
            ));
        }
        if !self.kernel_symbols {
            v.push("kernel symbols unavailable (kallsyms addresses hidden)".into());
        }
        v.extend(self.warnings.iter().cloned());
        v
    }
}

/// A tag known at record time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagName {
    pub bit: u32,
    pub name: String,
}

/// One line of the symbol table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SymRow {
    pub samples: u64,
    pub percent: f64,
    pub image: String,
    pub symbol: String,
}

/// One line of the image summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImageRow {
    pub samples: u64,
    pub percent: f64,
    pub image: String,
    pub kind: ImageKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_id: Option<String>,
}

/// One component (kernel, idle, mantle, each process).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompRow {
    pub component: String,
    pub samples: u64,
    pub percent: f64,
    pub user: u64,
    pub kernel: u64,
}

/// What was done on behalf of one tag.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TagRow {
    pub tag: String,
    pub bit: Option<u32>,
    pub samples: u64,
    /// Share of all samples.
    pub percent: f64,
    /// Per process ("comm[pid]"), user and kernel time of that process.
    pub processes: Vec<CompRow>,
    /// Per command name (all processes of one name together).
    pub commands: Vec<CompRow>,
    pub symbols: Vec<SymRow>,
}

/// The whole report, ready for any renderer.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub meta: Meta,
    pub caveats: Vec<String>,
    pub total: u64,
    pub symbols: Vec<SymRow>,
    pub images: Vec<ImageRow>,
    pub components: Vec<CompRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_tag: Option<Vec<TagRow>>,
    /// Folded lines for flame graphs: "component;image;symbol count".
    #[serde(skip)]
    pub folded: Vec<(String, u64)>,
    /// (image index, offset, symbol) for pprof.
    #[serde(skip)]
    pub located: Vec<Located>,
}

/// A sample row with its symbol, for pprof.
#[derive(Debug, Clone)]
pub struct Located {
    pub image: Image,
    pub offset: u64,
    pub symbol: String,
    pub pid: u32,
    pub comm: String,
    pub mode: Mode,
    pub tags: Vec<String>,
    pub count: u64,
}

fn pct(n: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        100.0 * n as f64 / total as f64
    }
}

/// Report options.
#[derive(Debug, Clone, Default)]
pub struct ReportOpts {
    pub by_tag: bool,
    /// Only samples of this process, if set.
    pub pid: Option<u32>,
    /// Only samples of processes with this command name, if set.
    pub comm: Option<String>,
    /// Longest symbol table (0: all).
    pub limit: usize,
}

/// Names a sample's component: `[idle]`, `[kernel]`, `[mantle]`, or
/// `comm[pid]`.
pub fn component(pid: u32, mode: Mode, procs: &HashMap<u32, Process>) -> String {
    if pid == 0 {
        return "[idle]".into();
    }
    if mode == Mode::Kernel {
        return "[kernel]".into();
    }
    match procs.get(&pid) {
        Some(p) if p.mantle => "[mantle]".into(),
        Some(p) => format!("{}[{pid}]", p.comm),
        None => format!("?[{pid}]"),
    }
}

fn proc_name(pid: u32, procs: &HashMap<u32, Process>) -> String {
    if pid == 0 {
        return "swapper".into();
    }
    procs
        .get(&pid)
        .map(|p| p.comm.clone())
        .unwrap_or_else(|| "?".into())
}

fn comp_rows(m: HashMap<String, (u64, u64)>, total: u64) -> Vec<CompRow> {
    let mut v: Vec<CompRow> = m
        .into_iter()
        .map(|(c, (u, k))| CompRow {
            component: c,
            samples: u + k,
            percent: pct(u + k, total),
            user: u,
            kernel: k,
        })
        .collect();
    v.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then(a.component.cmp(&b.component))
    });
    v
}

fn sym_rows(m: HashMap<(String, String), u64>, total: u64, limit: usize) -> Vec<SymRow> {
    let mut v: Vec<SymRow> = m
        .into_iter()
        .map(|((image, symbol), n)| SymRow {
            samples: n,
            percent: pct(n, total),
            image,
            symbol,
        })
        .collect();
    v.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then(a.image.cmp(&b.image))
            .then(a.symbol.cmp(&b.symbol))
    });
    if limit > 0 {
        v.truncate(limit);
    }
    v
}

/// Builds the report: symbolizes every (image, offset) once, then sums.
pub fn build_report(
    profile: &Profile,
    procs: &HashMap<u32, Process>,
    tags: &[TagName],
    meta: &Meta,
    sym: &mut dyn Symbolizer,
    opts: &ReportOpts,
) -> Report {
    // symbolize per image, each offset once
    let keep = |k: &RowKey| {
        opts.pid.is_none_or(|p| p == k.pid)
            && opts
                .comm
                .as_ref()
                .is_none_or(|c| *c == proc_name(k.pid, procs))
    };
    let mut per_image: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for k in profile.counts().keys() {
        if !keep(k) {
            continue;
        }
        per_image.entry(k.image).or_default().push(k.offset);
    }
    let mut names: HashMap<(u32, u64), String> = HashMap::new();
    for (img, mut offs) in per_image {
        offs.sort_unstable();
        offs.dedup();
        let image = &profile.images[img as usize];
        let res = sym.symbolize(image, &offs);
        for (o, s) in offs.iter().zip(res) {
            names.insert((img, *o), s.unwrap_or_else(|| UNKNOWN_SYMBOL.into()));
        }
    }
    let tag_name = |bit: u32| -> String {
        tags.iter()
            .find(|t| t.bit == bit)
            .map(|t| t.name.clone())
            .unwrap_or_else(|| format!("bit{bit}"))
    };

    let mut total = 0u64;
    let mut syms: HashMap<(String, String), u64> = HashMap::new();
    let mut images: HashMap<u32, u64> = HashMap::new();
    let mut comps: HashMap<String, (u64, u64)> = HashMap::new();
    let mut folded: HashMap<String, u64> = HashMap::new();
    let mut located = Vec::new();
    struct TagAcc {
        n: u64,
        procs: HashMap<String, (u64, u64)>,
        cmds: HashMap<String, (u64, u64)>,
        syms: HashMap<(String, String), u64>,
    }
    let mut per_tag: BTreeMap<Option<u32>, TagAcc> = BTreeMap::new();

    // Plain additions below: each accumulator sums a subset of the rows
    // (a row at most once per accumulator), and the rows' total fits a u64
    // (the Profile invariant).
    for (k, &n) in profile.counts() {
        if !keep(k) {
            continue;
        }
        total += n;
        let image = &profile.images[k.image as usize];
        let iname = image.display();
        let sname = names
            .get(&(k.image, k.offset))
            .cloned()
            .unwrap_or_else(|| UNKNOWN_SYMBOL.into());
        *syms.entry((iname.clone(), sname.clone())).or_insert(0) += n;
        *images.entry(k.image).or_insert(0) += n;
        let comp = component(k.pid, k.mode, procs);
        let e = comps.entry(comp.clone()).or_insert((0, 0));
        match k.mode {
            Mode::User => e.0 += n,
            Mode::Kernel => e.1 += n,
        }
        let pname = proc_name(k.pid, procs);
        *folded
            .entry(format!(
                "{};{};{}",
                sanitize_folded(&format!("{pname}[{}]", k.pid)),
                sanitize_folded(&iname),
                sanitize_folded(&sname)
            ))
            .or_insert(0) += n;
        let bits = tag_bits(&k.tags);
        located.push(Located {
            image: image.clone(),
            offset: k.offset,
            symbol: sname.clone(),
            pid: k.pid,
            comm: pname.clone(),
            mode: k.mode,
            tags: bits.iter().map(|b| tag_name(*b)).collect(),
            count: n,
        });
        if opts.by_tag {
            let keys: Vec<Option<u32>> = if bits.is_empty() {
                vec![None]
            } else {
                bits.iter().map(|b| Some(*b)).collect()
            };
            for key in keys {
                let t = per_tag.entry(key).or_insert_with(|| TagAcc {
                    n: 0,
                    procs: HashMap::new(),
                    cmds: HashMap::new(),
                    syms: HashMap::new(),
                });
                t.n += n;
                let pe = t
                    .procs
                    .entry(format!("{pname}[{}]", k.pid))
                    .or_insert((0, 0));
                let ce = t.cmds.entry(pname.clone()).or_insert((0, 0));
                match k.mode {
                    Mode::User => {
                        pe.0 += n;
                        ce.0 += n
                    }
                    Mode::Kernel => {
                        pe.1 += n;
                        ce.1 += n
                    }
                }
                *t.syms.entry((iname.clone(), sname.clone())).or_insert(0) += n;
            }
        }
    }

    let mut image_rows: Vec<ImageRow> = images
        .into_iter()
        .map(|(i, n)| {
            let im = &profile.images[i as usize];
            ImageRow {
                samples: n,
                percent: pct(n, total),
                image: im.display(),
                kind: im.kind,
                build_id: im.build_id.clone(),
            }
        })
        .collect();
    // the same path with two build IDs stays two rows; merge only equal names+ids
    image_rows.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.image.cmp(&b.image)));

    let by_tag = opts.by_tag.then(|| {
        let mut v: Vec<TagRow> = per_tag
            .into_iter()
            .map(|(bit, t)| TagRow {
                tag: bit.map(tag_name).unwrap_or_else(|| "(untagged)".into()),
                bit,
                samples: t.n,
                percent: pct(t.n, total),
                processes: comp_rows(t.procs, t.n),
                commands: comp_rows(t.cmds, t.n),
                symbols: sym_rows(t.syms, t.n, if opts.limit == 0 { 0 } else { opts.limit }),
            })
            .collect();
        // tagged first (by samples), untagged last
        v.sort_by(|a, b| {
            a.bit
                .is_none()
                .cmp(&b.bit.is_none())
                .then(b.samples.cmp(&a.samples))
        });
        v
    });

    let mut folded: Vec<(String, u64)> = folded.into_iter().collect();
    folded.sort();
    located.sort_by(|a, b| b.count.cmp(&a.count).then(a.offset.cmp(&b.offset)));
    Report {
        meta: meta.clone(),
        caveats: meta.caveats(),
        total,
        symbols: sym_rows(syms, total, opts.limit),
        images: image_rows,
        components: comp_rows(comps, total),
        by_tag,
        folded,
        located,
    }
}

/// Folded-stack frames may not contain ';' (frame separator) or newlines.
fn sanitize_folded(s: &str) -> String {
    s.replace([';', '\n'], ":")
}

/// The opreport-style text report.
pub fn render_text(r: &Report) -> String {
    let mut o = String::new();
    let m = &r.meta;
    let rate = match (m.freq, m.period) {
        (Some(f), _) => format!("{f} Hz"),
        (_, Some(p)) => format!("every {p} events"),
        _ => "default".into(),
    };
    let _ = writeln!(
        o,
        "Event: {}{} sampled at {}, {} CPU(s), {:.2} s, target {}",
        m.event,
        m.fallback_from
            .as_ref()
            .map(|f| format!(" (fallback for {f})"))
            .unwrap_or_default(),
        rate,
        m.cpus,
        m.duration_ns as f64 / 1e9,
        m.target
    );
    let _ = writeln!(
        o,
        "Samples: {} in report, {} recorded, {} lost, throttled {} time(s)",
        r.total, m.samples, m.lost_samples, m.throttle_events
    );
    for c in &r.caveats {
        let _ = writeln!(o, "warning: {c}");
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "{:>10} {:>9}  {:<32} SYMBOL", "SAMPLES", "%", "IMAGE");
    for s in &r.symbols {
        let _ = writeln!(
            o,
            "{:>10} {:>9.4}  {:<32} {}",
            s.samples,
            s.percent,
            short(&s.image, 32),
            s.symbol
        );
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "Per image:");
    let _ = writeln!(o, "{:>10} {:>9}  IMAGE", "SAMPLES", "%");
    for i in &r.images {
        let _ = writeln!(o, "{:>10} {:>9.4}  {}", i.samples, i.percent, i.image);
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "Per component:");
    let _ = writeln!(
        o,
        "{:>10} {:>9} {:>10} {:>10}  COMPONENT",
        "SAMPLES", "%", "USER", "KERNEL"
    );
    for c in &r.components {
        let _ = writeln!(
            o,
            "{:>10} {:>9.4} {:>10} {:>10}  {}",
            c.samples, c.percent, c.user, c.kernel, c.component
        );
    }
    if let Some(tags) = &r.by_tag {
        let _ = writeln!(o);
        let _ = writeln!(o, "Per tag:");
        for t in tags {
            let _ = writeln!(
                o,
                "tag {}: {} samples ({:.4}% of all)",
                t.tag, t.samples, t.percent
            );
            let _ = writeln!(
                o,
                "  {:>10} {:>9} {:>10} {:>10}  PROCESS",
                "SAMPLES", "%", "USER", "KERNEL"
            );
            for c in &t.processes {
                let _ = writeln!(
                    o,
                    "  {:>10} {:>9.4} {:>10} {:>10}  {}",
                    c.samples, c.percent, c.user, c.kernel, c.component
                );
            }
            let _ = writeln!(o, "  {:>10} {:>9}  {:<32} SYMBOL", "SAMPLES", "%", "IMAGE");
            for s in t.symbols.iter().take(10) {
                let _ = writeln!(
                    o,
                    "  {:>10} {:>9.4}  {:<32} {}",
                    s.samples,
                    s.percent,
                    short(&s.image, 32),
                    s.symbol
                );
            }
        }
    }
    o
}

/// A path shortened from the left to `n` characters.
fn short(s: &str, n: usize) -> String {
    let c = s.chars().count();
    if c <= n {
        s.to_string()
    } else {
        let tail: String = s.chars().skip(c - (n - 1)).collect();
        format!("…{tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct FakeSym;
    impl Symbolizer for FakeSym {
        fn symbolize(&mut self, image: &Image, offsets: &[u64]) -> Vec<Option<String>> {
            offsets
                .iter()
                .map(|o| match image.kind {
                    ImageKind::Elf if *o < 0x2000 => Some("slow".into()),
                    ImageKind::Elf if *o < 0x3000 => Some("fast".into()),
                    _ => None,
                })
                .collect()
        }
    }

    fn spaces() -> AddressSpaces {
        let mut s = AddressSpaces::new(vec!["mantle".into()]);
        s.add_process(10, 1, "app");
        s.mmap(
            10,
            Mapping {
                start: 0x400000,
                end: 0x403000,
                pgoff: 0x1000,
                path: "/bin/app".into(),
                build_id: Some("ab".into()),
            },
        );
        s.mmap(
            10,
            Mapping {
                start: 0x7fff0000,
                end: 0x7fff2000,
                pgoff: 0,
                path: "[vdso]".into(),
                build_id: None,
            },
        );
        s.add_process(20, 1, "mantle");
        s
    }

    fn raw(pid: u32, ip: u64, mode: Mode, tags: u64) -> RawSample {
        RawSample {
            pid,
            tid: pid,
            cpu: 0,
            mode,
            ip,
            tags: vec![tags],
        }
    }

    #[test]
    fn resolves_files_vdso_kernel_unknown() {
        let s = spaces();
        let r = s.resolve(10, 0x400010, Mode::User);
        assert_eq!(r.image.path, "/bin/app");
        assert_eq!(r.offset, 0x1010);
        assert_eq!(r.image.build_id.as_deref(), Some("ab"));
        let r = s.resolve(10, 0x7fff0100, Mode::User);
        assert_eq!((r.image.kind, r.offset), (ImageKind::Vdso, 0x100));
        let r = s.resolve(10, 0xffffffff81000000, Mode::Kernel);
        assert_eq!(r.image.kind, ImageKind::Kernel);
        let r = s.resolve(10, 0x500000, Mode::User);
        assert_eq!(r.image.kind, ImageKind::Unknown);
        let r = s.resolve(99, 0x400010, Mode::User);
        assert_eq!(r.image.kind, ImageKind::Unknown);
    }

    #[test]
    fn fork_copies_exec_replaces_exit_keeps() {
        let mut s = spaces();
        s.fork(11, 10, 11);
        assert_eq!(s.resolve(11, 0x400010, Mode::User).image.path, "/bin/app");
        s.fork(10, 10, 12); // a thread: nothing new
        assert!(!s.procs.contains_key(&12));
        s.comm(11, 11, "other", true);
        // until the new program maps something there, a sample taken before
        // the exec still resolves in the old address space
        assert_eq!(s.resolve(11, 0x400010, Mode::User).image.path, "/bin/app");
        s.mmap(
            11,
            Mapping {
                start: 0x400000,
                end: 0x401000,
                pgoff: 0,
                path: "/bin/other".into(),
                build_id: None,
            },
        );
        s.exit(11, 11);
        assert!(s.procs[&11].exited);
        assert_eq!(s.resolve(11, 0x400010, Mode::User).image.path, "/bin/other");
        // the parent is untouched
        assert_eq!(s.resolve(10, 0x400010, Mode::User).image.path, "/bin/app");
    }

    #[test]
    fn mmap_replaces_overlaps() {
        let mut s = spaces();
        s.mmap(
            10,
            Mapping {
                start: 0x402000,
                end: 0x404000,
                pgoff: 0,
                path: "/lib/x.so".into(),
                build_id: None,
            },
        );
        assert_eq!(
            s.resolve(10, 0x400010, Mode::User).image.kind,
            ImageKind::Unknown
        );
        assert_eq!(s.resolve(10, 0x403010, Mode::User).image.path, "/lib/x.so");
    }

    #[test]
    fn maps_line() {
        let m =
            parse_maps_line("55d4c8a00000-55d4c8a21000 r-xp 00002000 fe:01 1234   /usr/bin/cat")
                .unwrap();
        assert_eq!(m.start, 0x55d4c8a00000);
        assert_eq!(m.pgoff, 0x2000);
        assert_eq!(m.path, "/usr/bin/cat");
        assert!(parse_maps_line("00400000-00401000 rw-p 00000000 00:00 0").is_none());
        let a = parse_maps_line("00400000-00401000 r-xp 00000000 00:00 0").unwrap();
        assert_eq!(a.path, "//anon");
        let p = parse_maps_line("00400000-00401000 r-xp 00000000 00:00 0  /a b/c").unwrap();
        assert_eq!(p.path, "/a b/c");
    }

    #[test]
    fn aggregation_merges_equal_keys() {
        let s = spaces();
        let mut p = Profile::default();
        p.add(&s, &raw(10, 0x400010, Mode::User, 0), 3).unwrap();
        p.add(&s, &raw(10, 0x400010, Mode::User, 0), 4).unwrap();
        p.add(&s, &raw(10, 0x400010, Mode::User, 1), 1).unwrap();
        p.add(&s, &raw(10, 0xffffffff81000000, Mode::Kernel, 0), 2)
            .unwrap();
        assert_eq!(p.counts().len(), 3);
        assert_eq!(p.total(), 10);
        assert_eq!(p.images.len(), 2);
    }

    #[test]
    fn counts_that_would_overflow_are_refused_and_change_nothing() {
        let s = spaces();
        let mut p = Profile::default();
        p.add(&s, &raw(10, 0x400010, Mode::User, 0), u64::MAX)
            .unwrap();
        assert_eq!(
            p.add(&s, &raw(10, 0x400020, Mode::User, 0), 1),
            Err(CountOverflow)
        );
        assert_eq!(
            p.add(&s, &raw(10, 0x400010, Mode::User, 0), 1),
            Err(CountOverflow)
        );
        assert_eq!(p.total(), u64::MAX);
        assert_eq!(
            p.counts().values().copied().collect::<Vec<_>>(),
            vec![u64::MAX]
        );
    }

    #[test]
    fn tags_hex_roundtrip() {
        assert_eq!(tags_hex(&[0]), "0");
        assert_eq!(tags_hex(&[0x5]), "5");
        assert_eq!(tags_hex(&[1, 2]), "20000000000000001");
        assert_eq!(parse_tags_hex("20000000000000001", 2), Some(vec![1, 2]));
        assert_eq!(parse_tags_hex("5", 1), Some(vec![5]));
        assert_eq!(parse_tags_hex("0", 2), Some(vec![0, 0]));
        assert_eq!(parse_tags_hex("20000000000000001", 1), None);
        assert_eq!(parse_tags_hex("+5", 1), None);
        assert_eq!(parse_tags_hex(" 5", 1), None);
        assert_eq!(parse_tags_hex("", 1), None);
        assert_eq!(parse_tags_hex("0\u{e9}000000000000000", 1), None); // sliced inside a character before
        assert_eq!(tag_bits(&[0b101, 1]), vec![0, 2, 64]);
    }

    #[test]
    fn kallsyms_lookup() {
        let k = Kallsyms::parse(
            "ffffffff81000000 T _stext\nffffffff81000100 t do_thing\nffffffff81000200 D data\nffffffffc0000000 t modfn\t[mod]\n0000000000000000 T hidden\n",
        );
        assert_eq!(k.len(), 3);
        assert_eq!(k.lookup(0xffffffff81000150), Some("do_thing"));
        assert_eq!(k.lookup(0xffffffff81000000), Some("_stext"));
        assert_eq!(k.lookup(0xffffffffc0000010), Some("modfn [mod]"));
        assert_eq!(k.lookup(0x1000), None);
        let k = Kallsyms::parse(
            "ffffffff82000000 T memset\nffffffff82000000 T __memset\nffffffff82000000 T __pi_memset\nffffffff82000100 T next\n",
        );
        assert_eq!(k.lookup(0xffffffff82000010), Some("__pi_memset"));
    }

    fn report(by_tag: bool) -> Report {
        let s = spaces();
        let mut p = Profile::default();
        p.add(&s, &raw(10, 0x400010, Mode::User, 0), 60).unwrap(); // slow, untagged
        p.add(&s, &raw(10, 0x401010, Mode::User, 1), 30).unwrap(); // fast, tag a
        p.add(&s, &raw(10, 0xffffffff81000010, Mode::Kernel, 1), 5)
            .unwrap();
        p.add(&s, &raw(0, 0xffffffff81000010, Mode::Kernel, 0), 4)
            .unwrap();
        p.add(&s, &raw(20, 0x999, Mode::User, 0), 1).unwrap();
        let tags = vec![TagName {
            bit: 0,
            name: "a".into(),
        }];
        build_report(
            &p,
            &s.procs,
            &tags,
            &Meta::default(),
            &mut FakeSym,
            &ReportOpts {
                by_tag,
                ..Default::default()
            },
        )
    }

    #[test]
    fn report_tables() {
        let r = report(false);
        assert_eq!(r.total, 100);
        assert_eq!(r.symbols[0].symbol, "slow");
        assert_eq!(r.symbols[0].percent, 60.0);
        assert_eq!(r.symbols[1].symbol, "fast");
        assert_eq!(r.images[0].image, "/bin/app");
        assert_eq!(r.images[0].samples, 90);
        let comp: Vec<(&str, u64)> = r
            .components
            .iter()
            .map(|c| (c.component.as_str(), c.samples))
            .collect();
        assert_eq!(
            comp,
            vec![
                ("app[10]", 90),
                ("[kernel]", 5),
                ("[idle]", 4),
                ("[mantle]", 1)
            ]
        );
        assert!(r.by_tag.is_none());
        let text = render_text(&r);
        assert!(text.contains("Per component:"), "{text}");
        assert!(text.contains("slow"));
        let folded: u64 = r.folded.iter().map(|f| f.1).sum();
        assert_eq!(folded, 100);
        assert!(r.folded.iter().any(|(l, _)| l == "app[10];/bin/app;slow"));
    }

    #[test]
    fn report_by_tag() {
        let r = report(true);
        let t = r.by_tag.as_ref().unwrap();
        assert_eq!(t[0].tag, "a");
        assert_eq!(t[0].samples, 35);
        assert_eq!(t[0].processes[0].component, "app[10]");
        assert_eq!(t[0].processes[0].user, 30);
        assert_eq!(t[0].processes[0].kernel, 5);
        assert_eq!(t[0].symbols[0].symbol, "fast");
        assert_eq!(t[1].tag, "(untagged)");
        assert_eq!(t[1].samples, 65);
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["by_tag"][0]["tag"], "a");
        assert_eq!(j["symbols"][0]["symbol"], "slow");
    }

    #[test]
    fn caveats_name_fallback_and_throttling() {
        let m = Meta {
            event: "cpu-clock".into(),
            fallback_from: Some("cycles".into()),
            throttle_events: 2,
            max_sample_rate_start: Some(100000),
            max_sample_rate_end: Some(50000),
            kernel_symbols: true,
            ..Default::default()
        };
        let c = m.caveats().join("\n");
        assert!(c.contains("cycles is not available"));
        assert!(c.contains("throttled sampling 2"));
        assert!(c.contains("100000 -> 50000"));
    }
}
