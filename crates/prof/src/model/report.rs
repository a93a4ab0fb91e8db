//! The report model: a [`ReportBuilder`] takes a session's stacks and
//! rows as they are read and, with a [`Symbolizer`], makes the tables
//! (symbols, images, components, per tag) and the interned stacks
//! ([`StackGraph`]) that flame graphs, folded stacks, pprof and call graphs
//! are made from, ready for any renderer ([`build_report`]: the same from
//! an in-memory profile).
//!
//! Mechanism: each (image, offset) a row reaches is symbolized once (a
//! caller's return address at `offset - 1`, the call instruction, as perf
//! and blazesym's users do), then every row is summed into each table:
//! exclusive (the leaf), inclusive (every distinct function of the row's
//! stack, once). An address no symbol covers is named
//! per address, `image+0xoffset`, never folded into one `[unknown]`.
//! Invariant: the sums cannot overflow, because each table sums a subset
//! of the profile's rows once and the profile's total fits a u64.

use super::graph::{Func, FxMap, GraphRow, StackGraph, NO_FILE};
use super::image::{Image, ImageKind, Mode};
use super::meta::Meta;
use super::profile::{tag_bits, CountOverflow, Frame, Profile, RowKey};
use super::space::Process;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Resolves offsets in an image to symbol names.
pub trait Symbolizer {
    /// One answer per offset, in order (None: no symbol).
    fn symbolize(&mut self, image: &Image, offsets: &[u64]) -> Vec<Option<String>>;

    /// Names and source lines: one answer per offset, in order. By
    /// default the names of [`Self::symbolize`] alone.
    fn locate(&mut self, image: &Image, offsets: &[u64]) -> Vec<Option<SymInfo>> {
        self.symbolize(image, offsets)
            .into_iter()
            .map(|n| n.map(SymInfo::named))
            .collect()
    }
}

/// What is known of one address: its function, the source line, and
/// the calls inlined there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SymInfo {
    /// The function (demangled; the public name among aliases).
    pub name: String,
    /// Other names users may type for the function.
    pub aliases: Vec<String>,
    /// Source file of the address (in the outer function: where the
    /// first inlined call is, if any).
    pub file: Option<String>,
    /// Its line (0: unknown).
    pub line: u32,
    /// The function's first line (0: unknown).
    pub start_line: u32,
    /// The function's code as file offsets \[start, end), when known.
    pub range: Option<(u64, u64)>,
    /// Calls inlined at the address, outermost first: (function, file,
    /// line of the address in it).
    pub inlined: Vec<(String, Option<String>, u32)>,
}

impl SymInfo {
    /// A name and nothing else.
    pub fn named(name: String) -> SymInfo {
        SymInfo {
            name,
            ..Default::default()
        }
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
    /// Per process ("comm\[pid\]"), user and kernel time of that process.
    pub processes: Vec<CompRow>,
    /// Per command name (all processes of one name together).
    pub commands: Vec<CompRow>,
    pub symbols: Vec<SymRow>,
}

/// What was done in one cgroup (`--by-cgroup`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CgroupRow {
    /// Its path in the cgroup v2 tree (`/system.slice/x.service`),
    /// `cgroup:ID` when it was not named while recording, `(unknown)`
    /// when the sample carried no cgroup.
    pub cgroup: String,
    /// The cgroup v2 id (0: unknown).
    pub id: u64,
    pub samples: u64,
    /// Share of all samples.
    pub percent: f64,
    /// Per process ("comm\[pid\]"), user and kernel time of that process.
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_cgroup: Option<Vec<CgroupRow>>,
    /// The executable of the process with the most samples (idle and
    /// mantle's own left out): pprof's main binary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub main_binary: Option<String>,
    /// Whether the session has call stacks (else `inclusive` equals
    /// `symbols` and flame graphs are one frame deep under the root).
    pub stacks: bool,
    /// Inclusive samples per function (the function or anything it
    /// called was running), like `perf report --children`.
    pub inclusive: Vec<SymRow>,
    /// Every row with its interned stack, for flame graphs, folded
    /// stacks, pprof and call graphs ([`StackGraph`]).
    #[serde(skip)]
    pub graph: StackGraph,
    /// `record --off-cpu`: the blocked time, in the same tables (ns).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub off_cpu: Option<super::offcpu::OffCpuReport>,
}

impl Report {
    /// Folded stacks for flame graphs, root first, sorted:
    /// ("root;caller;...;leaf", count) (the root as [`FlameRoot`] says).
    /// Makes every line's text: for large reports, stream them with
    /// [`StackGraph::write_folded`].
    pub fn folded(&self) -> Vec<(String, u64)> {
        self.graph.folded()
    }
}

/// The bottom frame of each flame-graph stack.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FlameRoot {
    /// `comm[pid]` (default).
    #[default]
    Process,
    /// The component: `[idle]`, `[mantle]` or `comm[pid]`.
    Component,
    /// The sample's tags (one stack per tag; `(untagged)`).
    Tag,
    /// The sample's cgroup path.
    Cgroup,
    /// No root: the stacks alone.
    None,
}

/// The name of an address no symbol covers: the image's file name and
/// the offset, so each address is its own row (perf lists them so).
pub fn unknown_name(image: &Image, offset: u64) -> String {
    let p = image.display();
    let base = p.rsplit('/').next().unwrap_or(&p);
    format!("{base}+0x{offset:x}")
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
    /// A table per cgroup ([`Report::by_cgroup`]).
    pub by_cgroup: bool,
    /// Only samples of this process, if set.
    pub pid: Option<u32>,
    /// Only samples of processes with this command name, if set.
    pub comm: Option<String>,
    /// Longest symbol table (0: all).
    pub limit: usize,
    /// The flame graph's root frame.
    pub flame_root: FlameRoot,
    /// Directories searched for separate debug files by build ID (None:
    /// crate::debugfile::DEFAULT_DEBUG_DIRS).
    pub debug_dirs: Option<Vec<std::path::PathBuf>>,
}

/// Names a sample's component: `[idle]`, `[mantle]`, or `comm[pid]`.
/// Kernel-mode samples count for the process that spent them (its
/// kernel column), as the user-mode ones do: a process's system calls
/// and page faults are its own time, and one `[kernel]` row for every
/// process's kernel time said nothing of who spent it (issue 33). Kernel
/// threads are processes of their own (`kworker/0:1[35]`). `mode` no
/// longer changes the name; it stays in the signature for callers.
pub fn component(pid: u32, mode: Mode, procs: &HashMap<u32, Process>) -> String {
    let _ = mode;
    if pid == 0 {
        return "[idle]".into();
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

/// A stack given twice to [`ReportBuilder::add_stack`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the same stack twice")]
pub struct DuplicateStack;

/// The streaming report: stacks, then rows, are added as they are read
/// (never all of profile.tsv in memory), interned and aggregated at once;
/// [`ReportBuilder::finish`] symbolizes each frame a row reaches, once,
/// and sums the tables.
///
/// Memory: a frame table entry per distinct (image, address), 4 bytes per
/// stack frame, 32 bytes per row with distinct (pid, mode, leaf, stack,
/// tags) (tid and cpu are not reported, so rows differing only there
/// merge); the rows are sorted and merged in place.
pub struct ReportBuilder<'a> {
    procs: &'a HashMap<u32, Process>,
    opts: &'a ReportOpts,
    g: StackGraph,
    frame_ids: FxMap<(u32, u64), u32>,
    /// Stack hash -> id, to refuse a stack given twice (a 64-bit hash
    /// collision between two different stacks skips that check only).
    stack_hash: FxMap<u64, u32>,
    tagsets: FxMap<Vec<u64>, u32>,
    tag_vectors: Vec<Vec<u64>>,
    /// Cgroup id -> index in `g.cgroups`.
    cgroup_index: FxMap<u64, u32>,
    /// Cgroup id -> path, from the session.
    cgroup_names: HashMap<u64, String>,
    /// Whether each pid passes the report's filter (cached).
    keep: HashMap<u32, bool>,
    total: u64,
}

fn frames_hash(frames: &[Frame]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for f in frames {
        for w in [f.image as u64, f.offset] {
            h = (h ^ w).wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

impl<'a> ReportBuilder<'a> {
    /// A builder for a session whose image table is `images`.
    pub fn new(images: Vec<Image>, procs: &'a HashMap<u32, Process>, opts: &'a ReportOpts) -> Self {
        let g = StackGraph {
            images,
            stack_start: vec![0, 0],
            flame_root: opts.flame_root,
            ..Default::default()
        };
        ReportBuilder {
            procs,
            opts,
            g,
            frame_ids: FxMap::default(),
            stack_hash: FxMap::default(),
            tagsets: FxMap::default(),
            tag_vectors: Vec::new(),
            cgroup_index: FxMap::default(),
            cgroup_names: HashMap::new(),
            keep: HashMap::new(),
            total: 0,
        }
    }

    /// The session's cgroup names (id -> path), for `--by-cgroup`, the
    /// cgroup flame-graph root and pprof's `cgroup` label.
    pub fn with_cgroup_names(mut self, names: HashMap<u64, String>) -> Self {
        self.cgroup_names = names;
        self
    }

    fn frame(&mut self, image: u32, addr: u64) -> u32 {
        let frames = &mut self.g.frames;
        *self.frame_ids.entry((image, addr)).or_insert_with(|| {
            frames.push((image, addr));
            (frames.len() - 1) as u32
        })
    }

    /// Adds the next stack of the table (ids 1, 2, 3, ... in order): its
    /// callers, nearest first, at their return addresses.
    pub fn add_stack(&mut self, frames: &[Frame]) -> Result<u32, DuplicateStack> {
        let id = (self.g.stack_start.len() - 1) as u32;
        let h = frames_hash(frames);
        let start = self.g.stack_frames.len();
        for f in frames {
            let fr = self.frame(f.image, f.offset.saturating_sub(1));
            self.g.stack_frames.push(fr);
        }
        if let Some(&other) = self.stack_hash.get(&h) {
            let new = &self.g.stack_frames[start..];
            if self.g.callers(other) == new || frames.is_empty() {
                self.g.stack_frames.truncate(start);
                return Err(DuplicateStack);
            }
        } else {
            self.stack_hash.insert(h, id);
        }
        self.g.stack_start.push(self.g.stack_frames.len());
        Ok(id)
    }

    /// The number of stacks added, with the empty stack 0.
    pub fn stacks(&self) -> usize {
        self.g.stack_start.len() - 1
    }

    fn kept(&mut self, pid: u32) -> bool {
        let (procs, opts) = (self.procs, self.opts);
        *self.keep.entry(pid).or_insert_with(|| {
            opts.pid.is_none_or(|p| p == pid)
                && opts
                    .comm
                    .as_ref()
                    .is_none_or(|c| *c == proc_name(pid, procs))
        })
    }

    /// Adds a row (its stack must have been added). Rows the report's
    /// filter leaves out are counted in no table, but still in the
    /// overflow check, as the whole session must fit a u64.
    pub fn add_row(&mut self, k: &RowKey, count: u64) -> Result<(), CountOverflow> {
        self.total = self.total.checked_add(count).ok_or(CountOverflow)?;
        if !self.kept(k.pid) {
            return Ok(());
        }
        let leaf = self.frame(k.image, k.offset);
        let tags = match self.tagsets.get(&k.tags) {
            Some(&t) => t,
            None => {
                let t = self.tag_vectors.len() as u32;
                self.tag_vectors.push(k.tags.clone());
                self.tagsets.insert(k.tags.clone(), t);
                t
            }
        };
        let cgroups = &mut self.g.cgroups;
        let names = &self.cgroup_names;
        let cgroup = *self.cgroup_index.entry(k.cgroup).or_insert_with(|| {
            let name = match (k.cgroup, names.get(&k.cgroup)) {
                (0, _) => "(unknown)".to_string(),
                (_, Some(p)) => p.clone(),
                (id, None) => format!("cgroup:{id}"),
            };
            cgroups.push((k.cgroup, name));
            (cgroups.len() - 1) as u32
        });
        self.g.rows.push(GraphRow {
            pid: k.pid,
            mode: k.mode,
            leaf,
            stack: k.stack,
            tags,
            cgroup,
            count,
        });
        Ok(())
    }

    /// Symbolizes the frames the rows reach and builds the report.
    pub fn finish(self, tags: &[TagName], meta: &Meta, sym: &mut dyn Symbolizer) -> Report {
        let ReportBuilder {
            procs, opts, mut g, ..
        } = self;
        drop(self.frame_ids);
        drop(self.stack_hash);
        drop(self.tagsets);
        drop(self.cgroup_index);
        drop(self.cgroup_names);
        // merge rows that differ only in tid and cpu; by stack first, so
        // that the inclusive sums walk each stack once
        g.rows
            .sort_unstable_by_key(|r| (r.stack, r.leaf, r.pid, r.mode, r.tags, r.cgroup));
        g.rows.dedup_by(|b, a| {
            let same = (a.pid, a.mode, a.leaf, a.stack, a.tags, a.cgroup)
                == (b.pid, b.mode, b.leaf, b.stack, b.tags, b.cgroup);
            if same {
                // both counts are parts of the checked total
                a.count += b.count;
            }
            same
        });
        g.rows.shrink_to_fit();
        symbolize(&mut g, sym);
        let tag_name = |bit: u32| -> String {
            tags.iter()
                .find(|t| t.bit == bit)
                .map(|t| t.name.clone())
                .unwrap_or_else(|| format!("bit{bit}"))
        };
        let tag_bits_of: Vec<Vec<u32>> = self.tag_vectors.iter().map(|v| tag_bits(v)).collect();
        g.tagsets = tag_bits_of
            .iter()
            .map(|b| b.iter().map(|&b| tag_name(b)).collect())
            .collect();
        for r in &g.rows {
            g.comms
                .entry(r.pid)
                .or_insert_with(|| proc_name(r.pid, procs));
            g.components
                .entry((r.pid, r.mode))
                .or_insert_with(|| component(r.pid, r.mode, procs));
        }
        tables(g, &tag_bits_of, &tag_name, procs, meta, opts)
    }
}

/// Names every frame a row reaches: per image, each address once.
fn symbolize(g: &mut StackGraph, sym: &mut dyn Symbolizer) {
    let mut used = vec![false; g.frames.len()];
    let mut stack_used = vec![false; g.stack_start.len().saturating_sub(1)];
    for r in &g.rows {
        used[r.leaf as usize] = true;
        if let Some(u) = stack_used.get_mut(r.stack as usize) {
            *u = true;
        }
    }
    for (s, u) in stack_used.iter().enumerate() {
        if *u {
            for &f in g.callers(s as u32) {
                used[f as usize] = true;
            }
        }
    }
    let mut per_image: BTreeMap<u32, Vec<(u64, u32)>> = BTreeMap::new();
    for (i, &(img, addr)) in g.frames.iter().enumerate() {
        if used[i] {
            per_image.entry(img).or_default().push((addr, i as u32));
        }
    }
    drop(used);
    g.frame_func = vec![u32::MAX; g.frames.len()];
    g.frame_src = vec![(NO_FILE, 0); g.frames.len()];
    let mut func_ids: HashMap<Func, u32> = HashMap::new();
    let mut file_ids: HashMap<String, u32> = HashMap::new();
    let mut file_id = |files: &mut Vec<String>, f: Option<String>| -> u32 {
        let Some(f) = f else { return NO_FILE };
        *file_ids.entry(f).or_insert_with_key(|k| {
            files.push(k.clone());
            (files.len() - 1) as u32
        })
    };
    let mut offs: Vec<u64> = Vec::new();
    for (img, mut v) in per_image {
        v.sort_unstable();
        offs.clear();
        offs.extend(v.iter().map(|x| x.0));
        let image = &g.images[img as usize];
        let infos = sym.locate(image, &offs);
        let iname = image.display();
        let kernel = image.kind == ImageKind::Kernel;
        for ((addr, f), info) in v
            .into_iter()
            .zip(infos.into_iter().chain(std::iter::repeat(None)))
        {
            let info = info.unwrap_or_else(|| SymInfo::named(unknown_name(image, addr)));
            let func = Func {
                image: iname.clone(),
                symbol: info.name,
                kernel,
            };
            let id = match func_ids.get(&func) {
                Some(&id) => id,
                None => {
                    let id = g.funcs.len() as u32;
                    g.funcs.push(func.clone());
                    func_ids.insert(func, id);
                    let start_file = file_id(&mut g.files, info.file.clone());
                    g.func_src.push((start_file, info.start_line));
                    g.func_aliases.push(info.aliases);
                    g.func_range.push(info.range);
                    id
                }
            };
            g.frame_func[f as usize] = id;
            g.frame_src[f as usize] = (file_id(&mut g.files, info.file), info.line);
            if !info.inlined.is_empty() {
                let inl = info
                    .inlined
                    .into_iter()
                    .map(|(n, file, line)| (n, file_id(&mut g.files, file), line))
                    .collect();
                g.frame_inlined.insert(f, inl);
            }
        }
    }
}

/// The tables of a symbolized graph.
fn tables(
    g: StackGraph,
    tag_bits_of: &[Vec<u32>],
    tag_name: &dyn Fn(u32) -> String,
    procs: &HashMap<u32, Process>,
    meta: &Meta,
    opts: &ReportOpts,
) -> Report {
    let nf = g.funcs.len();
    let mut total = 0u64;
    let mut syms = vec![0u64; nf];
    let mut inclusive = vec![0u64; nf];
    let mut stamp = vec![u32::MAX; nf];
    let mut images = vec![0u64; g.images.len()];
    let mut comp_n: FxMap<(u32, Mode), u64> = FxMap::default();
    let mut per_pid: HashMap<u32, u64> = HashMap::new();
    let mut any_stack = false;
    struct TagAcc {
        n: u64,
        procs: HashMap<u32, (u64, u64)>,
        syms: HashMap<u32, u64>,
    }
    let mut per_tag: BTreeMap<Option<u32>, TagAcc> = BTreeMap::new();
    let mut per_cgroup: BTreeMap<u32, TagAcc> = BTreeMap::new();
    // Plain additions below: each accumulator sums a subset of the rows
    // (a row at most once per accumulator), and the rows' total fits a
    // u64 (checked as they were added).
    let rows = &g.rows;
    let mut at = 0;
    let mut epoch = 0u32;
    while at < rows.len() {
        // the rows of one stack (sorted by stack)
        let stack = rows[at].stack;
        let end = at + rows[at..].iter().take_while(|r| r.stack == stack).count();
        let group = &rows[at..end];
        at = end;
        any_stack |= stack != 0;
        // inclusive: each function of the stack once (recursion counts
        // once): the callers' functions get the group's samples, a leaf
        // its row's unless it is one of them
        let weight: u64 = group.iter().map(|r| r.count).sum();
        epoch += 1;
        for &f in g.callers(stack) {
            let func = g.func_of(f) as usize;
            if stamp[func] != epoch {
                stamp[func] = epoch;
                inclusive[func] += weight;
            }
        }
        for r in group {
            let n = r.count;
            total += n;
            let leaf_func = g.func_of(r.leaf);
            if stamp[leaf_func as usize] != epoch {
                inclusive[leaf_func as usize] += n;
            }
            syms[leaf_func as usize] += n;
            images[g.frames[r.leaf as usize].0 as usize] += n;
            *comp_n.entry((r.pid, r.mode)).or_insert(0) += n;
            *per_pid.entry(r.pid).or_insert(0) += n;
            if opts.by_cgroup {
                let t = per_cgroup.entry(r.cgroup).or_insert_with(|| TagAcc {
                    n: 0,
                    procs: HashMap::new(),
                    syms: HashMap::new(),
                });
                t.n += n;
                let pe = t.procs.entry(r.pid).or_insert((0, 0));
                match r.mode {
                    Mode::User => pe.0 += n,
                    Mode::Kernel => pe.1 += n,
                }
                *t.syms.entry(leaf_func).or_insert(0) += n;
            }
            if opts.by_tag {
                let bits = &tag_bits_of[r.tags as usize];
                let keys: Vec<Option<u32>> = if bits.is_empty() {
                    vec![None]
                } else {
                    bits.iter().map(|b| Some(*b)).collect()
                };
                for key in keys {
                    let t = per_tag.entry(key).or_insert_with(|| TagAcc {
                        n: 0,
                        procs: HashMap::new(),
                        syms: HashMap::new(),
                    });
                    t.n += n;
                    let pe = t.procs.entry(r.pid).or_insert((0, 0));
                    match r.mode {
                        Mode::User => pe.0 += n,
                        Mode::Kernel => pe.1 += n,
                    }
                    *t.syms.entry(leaf_func).or_insert(0) += n;
                }
            }
        }
    }
    let mut comps: HashMap<String, (u64, u64)> = HashMap::new();
    for ((pid, mode), n) in comp_n {
        let e = comps
            .entry(g.components[&(pid, mode)].clone())
            .or_insert((0, 0));
        match mode {
            Mode::User => e.0 += n,
            Mode::Kernel => e.1 += n,
        }
    }
    drop(stamp);
    let func_rows = |v: &[u64]| -> HashMap<(String, String), u64> {
        let mut m = HashMap::new();
        for (i, &n) in v.iter().enumerate() {
            if n > 0 {
                let f = &g.funcs[i];
                m.insert((f.image.clone(), f.symbol.clone()), n);
            }
        }
        m
    };
    let mut image_rows: Vec<ImageRow> = images
        .into_iter()
        .enumerate()
        .filter(|(_, n)| *n > 0)
        .map(|(i, n)| {
            let im = &g.images[i];
            ImageRow {
                samples: n,
                percent: pct(n, total),
                image: im.display(),
                kind: im.kind,
                build_id: im.build_id.clone(),
            }
        })
        .collect();
    // the same path with two build IDs stays two rows
    image_rows.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.image.cmp(&b.image)));

    // one group's processes, commands and symbols (a tag's, a cgroup's)
    let group = |t: TagAcc| -> (u64, Vec<CompRow>, Vec<CompRow>, Vec<SymRow>) {
        let mut pm: HashMap<String, (u64, u64)> = HashMap::new();
        let mut cm: HashMap<String, (u64, u64)> = HashMap::new();
        for (pid, (u, k)) in t.procs {
            let name = g.comm(pid).to_string();
            let e = pm.entry(format!("{name}[{pid}]")).or_insert((0, 0));
            e.0 += u;
            e.1 += k;
            let e = cm.entry(name).or_insert((0, 0));
            e.0 += u;
            e.1 += k;
        }
        let sm = t
            .syms
            .into_iter()
            .map(|(f, n)| {
                let f = &g.funcs[f as usize];
                ((f.image.clone(), f.symbol.clone()), n)
            })
            .collect();
        (
            t.n,
            comp_rows(pm, t.n),
            comp_rows(cm, t.n),
            sym_rows(sm, t.n, opts.limit),
        )
    };
    let by_cgroup = opts.by_cgroup.then(|| {
        let mut v: Vec<CgroupRow> = per_cgroup
            .into_iter()
            .map(|(c, t)| {
                let (n, processes, commands, symbols) = group(t);
                let (id, name) = g.cgroups[c as usize].clone();
                CgroupRow {
                    cgroup: name,
                    id,
                    samples: n,
                    percent: pct(n, total),
                    processes,
                    commands,
                    symbols,
                }
            })
            .collect();
        v.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.cgroup.cmp(&b.cgroup)));
        v
    });
    let by_tag = opts.by_tag.then(|| {
        let mut v: Vec<TagRow> = per_tag
            .into_iter()
            .map(|(bit, t)| {
                let (n, processes, commands, symbols) = group(t);
                TagRow {
                    tag: bit.map(tag_name).unwrap_or_else(|| "(untagged)".into()),
                    bit,
                    samples: n,
                    percent: pct(n, total),
                    processes,
                    commands,
                    symbols,
                }
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
    Report {
        meta: meta.clone(),
        caveats: meta.caveats(),
        total,
        symbols: sym_rows(func_rows(&syms), total, opts.limit),
        images: image_rows,
        components: comp_rows(comps, total),
        by_tag,
        by_cgroup,
        main_binary: main_binary(&per_pid, procs),
        stacks: any_stack,
        inclusive: sym_rows(func_rows(&inclusive), total, opts.limit),
        graph: g,
        off_cpu: None,
    }
}

/// Builds the report of an in-memory profile (the streaming path's
/// [`ReportBuilder`] fed from it).
pub fn build_report(
    profile: &Profile,
    procs: &HashMap<u32, Process>,
    tags: &[TagName],
    meta: &Meta,
    sym: &mut dyn Symbolizer,
    opts: &ReportOpts,
) -> Report {
    let mut b = ReportBuilder::new(profile.images.clone(), procs, opts);
    for s in profile.stacks().iter().skip(1) {
        // a Profile's stack table has no duplicates (stack_id)
        let _ = b.add_stack(s);
    }
    for (k, &n) in profile.counts() {
        // the profile's total fits a u64, so no row overflows here
        let _ = b.add_row(k, n);
    }
    b.finish(tags, meta, sym)
}
/// The executable of the process with the most samples (ties: the
/// lower pid), leaving out idle and mantle's own processes.
fn main_binary(per_pid: &HashMap<u32, u64>, procs: &HashMap<u32, Process>) -> Option<String> {
    per_pid
        .iter()
        .filter_map(|(pid, n)| {
            let p = procs.get(pid).filter(|p| *pid != 0 && !p.mantle)?;
            Some((*n, std::cmp::Reverse(*pid), p.exe.clone()?))
        })
        .max()
        .map(|(_, _, exe)| exe)
}

/// `--callers`/`--callees` for one function: who called it and what it
/// called, over the samples whose stack holds it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CallGraph {
    pub symbol: String,
    /// Samples in the report.
    pub total: u64,
    /// Samples whose stack holds the function.
    pub inclusive: u64,
    /// Samples in the function itself.
    #[serde(rename = "self")]
    pub self_samples: u64,
    /// Its callers (at its outermost call in each stack; `[root]` when it
    /// is the bottom frame), summing to `inclusive`; percent of `total`.
    pub callers: Vec<SymRow>,
    /// What it called (at the same call), summing to `inclusive - self`.
    pub callees: Vec<SymRow>,
}

/// The short name of a function as users type it: a C++ or Rust name
/// without its parameters, template arguments and namespaces
/// (`ns::Table<int>::get(int) const` -> `get`), a C name as it is.
pub fn short_name(symbol: &str) -> &str {
    // cut at the parameter list: the first '(' outside template brackets
    let mut depth = 0i32;
    let mut end = symbol.len();
    for (i, c) in symbol.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            // `operator()(int)`: the first parentheses are the name's
            '(' if depth == 0 && symbol[..i].ends_with("operator") => {}
            ')' if depth == 0 && symbol[..i].ends_with("operator(") => {}
            '(' if depth == 0 && i > 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let head = &symbol[..end];
    // drop template arguments at the end, then keep the last path segment
    let head = match head.strip_suffix('>') {
        Some(_) => head.find('<').map_or(head, |i| &head[..i]),
        None => head,
    };
    head.rsplit("::").next().unwrap_or(head)
}

/// Why [`find_call_graph`] found no graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// No function of that name (full or short) is in any stack.
    NotFound,
    /// The short name names several functions: their full names.
    Ambiguous(Vec<String>),
}

/// The call graph of the function the user named: its full name (as the
/// report prints it) or, failing that, its short name ([`short_name`]:
/// `lua_geti` for `lua_geti(lua_State*, int, long long)`) or one of its
/// aliases ([`crate::elfsyms`]: `__read` for `read`, `memcpy` for
/// `__memcpy_avx_unaligned_erms`), when exactly one function has it.
pub fn find_call_graph(r: &Report, name: &str) -> Result<CallGraph, Lookup> {
    let f = find_funcs(&r.graph, name)?;
    let full = &r.graph.funcs[f[0] as usize].symbol;
    call_graph(r, full).ok_or(Lookup::NotFound)
}

/// The functions (ids in `g.funcs`, in every image) the user named: by
/// full name, else by short name ([`short_name`]) or alias, when these
/// name exactly one full name.
pub fn find_funcs(g: &StackGraph, name: &str) -> Result<Vec<u32>, Lookup> {
    let with = |full: &str| -> Vec<u32> {
        (0..g.funcs.len() as u32)
            .filter(|&i| g.funcs[i as usize].symbol == full)
            .collect()
    };
    let exact = with(name);
    if !exact.is_empty() {
        return Ok(exact);
    }
    // the short name, or any alias (glibc's `__read`, the IFUNC `memcpy`
    // of `__memcpy_avx_unaligned_erms`) full or short
    let aka = |i: usize| {
        g.func_aliases
            .get(i)
            .is_some_and(|a| a.iter().any(|x| x == name || short_name(x) == name))
    };
    let mut full: Vec<String> = g
        .funcs
        .iter()
        .enumerate()
        .filter(|(i, f)| short_name(&f.symbol) == name || aka(*i))
        .map(|(_, f)| f.symbol.clone())
        .collect();
    full.sort();
    full.dedup();
    match full.len() {
        0 => Err(Lookup::NotFound),
        1 => Ok(with(&full[0])),
        _ => Err(Lookup::Ambiguous(full)),
    }
}

/// The call graph of `symbol` (matched by its full name, in any image);
/// None when no sample's stack holds it.
pub fn call_graph(r: &Report, symbol: &str) -> Option<CallGraph> {
    let g = &r.graph;
    let want: Vec<bool> = g.funcs.iter().map(|f| f.symbol == symbol).collect();
    if !want.iter().any(|w| *w) {
        return None;
    }
    let (mut inc, mut own) = (0u64, 0u64);
    let mut callers: HashMap<Option<u32>, u64> = HashMap::new();
    let mut callees: HashMap<u32, u64> = HashMap::new();
    let mut chain: Vec<u32> = Vec::new();
    for row in &g.rows {
        chain.clear();
        chain.extend(g.row_funcs(row));
        let Some(i) = chain.iter().rposition(|&f| want[f as usize]) else {
            continue;
        };
        inc += row.count;
        if want[chain[0] as usize] {
            own += row.count;
        }
        *callers.entry(chain.get(i + 1).copied()).or_insert(0) += row.count;
        if i > 0 {
            *callees.entry(chain[i - 1]).or_insert(0) += row.count;
        }
    }
    let name = |f: Option<u32>| match f {
        Some(f) => {
            let f = &g.funcs[f as usize];
            (f.image.clone(), f.symbol.clone())
        }
        None => (String::new(), "[root]".into()),
    };
    (inc > 0).then(|| CallGraph {
        symbol: symbol.to_string(),
        total: r.total,
        inclusive: inc,
        self_samples: own,
        callers: sym_rows(
            callers.into_iter().map(|(f, n)| (name(f), n)).collect(),
            r.total,
            0,
        ),
        callees: sym_rows(
            callees
                .into_iter()
                .map(|(f, n)| (name(Some(f)), n))
                .collect(),
            r.total,
            0,
        ),
    })
}
