//! The report model: [`build_report`] turns a profile plus a
//! [`Symbolizer`] into tables (symbols, images, components, per tag),
//! folded stacks for flame graphs and located rows for pprof, ready for
//! any renderer.
//!
//! Mechanism: each (image, offset) is symbolized once (a caller's return
//! address at `offset - 1`, the call instruction, as perf and blazesym's
//! users do), then every row is summed into each table: exclusive (the
//! leaf), inclusive (every distinct function of the row's stack, once),
//! and its stack folded root first. An address no symbol covers is named
//! per address, `image+0xoffset`, never folded into one `[unknown]`.
//! Invariant: the sums cannot overflow, because each table sums a subset
//! of the profile's rows once and the profile's total fits a u64.

use super::image::{Image, ImageKind, Mode};
use super::meta::Meta;
use super::profile::{tag_bits, Profile, RowKey};
use super::space::Process;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Resolves offsets in an image to symbol names.
pub trait Symbolizer {
    /// One answer per offset, in order (None: no symbol).
    fn symbolize(&mut self, image: &Image, offsets: &[u64]) -> Vec<Option<String>>;
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
    /// Folded stacks for flame graphs, root first:
    /// "root;caller;...;leaf count" (the root as [`FlameRoot`] says).
    #[serde(skip)]
    pub folded: Vec<(String, u64)>,
    /// Rows with their symbolized stacks, for pprof and call graphs.
    #[serde(skip)]
    pub located: Vec<Located>,
}

/// One frame with its symbol.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Loc {
    pub image: Image,
    /// As recorded: the leaf's offset, or a caller's return address.
    pub offset: u64,
    pub symbol: String,
}

/// A sample row with its symbolized stack, for pprof and call graphs.
#[derive(Debug, Clone)]
pub struct Located {
    /// Leaf first, then the callers, nearest first.
    pub frames: Vec<Loc>,
    pub pid: u32,
    pub comm: String,
    pub mode: Mode,
    pub tags: Vec<String>,
    pub count: u64,
}

/// The bottom frame of each flame-graph stack.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FlameRoot {
    /// `comm[pid]` (default).
    #[default]
    Process,
    /// The component: `[idle]`, `[kernel]`, `[mantle]` or `comm[pid]`.
    Component,
    /// The sample's tags (one stack per tag; `(untagged)`).
    Tag,
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
    // (image, offset looked up): the leaf exactly, callers at the call
    let mut per_image: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for k in profile.counts().keys() {
        if !keep(k) {
            continue;
        }
        per_image.entry(k.image).or_default().push(k.offset);
        for f in profile.stack(k.stack) {
            per_image
                .entry(f.image)
                .or_default()
                .push(f.offset.saturating_sub(1));
        }
    }
    let mut names: HashMap<(u32, u64), String> = HashMap::new();
    for (img, mut offs) in per_image {
        offs.sort_unstable();
        offs.dedup();
        let image = &profile.images[img as usize];
        let res = sym.symbolize(image, &offs);
        for (o, s) in offs.iter().zip(res) {
            names.insert((img, *o), s.unwrap_or_else(|| unknown_name(image, *o)));
        }
    }
    let name_of = |img: u32, at: u64| -> String {
        names
            .get(&(img, at))
            .cloned()
            .unwrap_or_else(|| unknown_name(&profile.images[img as usize], at))
    };
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
    let mut inclusive: HashMap<(String, String), u64> = HashMap::new();
    let mut located = Vec::new();
    let mut any_stack = false;
    let mut per_pid: HashMap<u32, u64> = HashMap::new();
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
        let sname = name_of(k.image, k.offset);
        *syms.entry((iname.clone(), sname.clone())).or_insert(0) += n;
        *images.entry(k.image).or_insert(0) += n;
        let comp = component(k.pid, k.mode, procs);
        let e = comps.entry(comp.clone()).or_insert((0, 0));
        match k.mode {
            Mode::User => e.0 += n,
            Mode::Kernel => e.1 += n,
        }
        let pname = proc_name(k.pid, procs);
        *per_pid.entry(k.pid).or_insert(0) += n;
        let callers = profile.stack(k.stack);
        any_stack |= !callers.is_empty();
        let mut frames = Vec::with_capacity(1 + callers.len());
        frames.push(Loc {
            image: image.clone(),
            offset: k.offset,
            symbol: sname.clone(),
        });
        for f in callers {
            frames.push(Loc {
                image: profile.images[f.image as usize].clone(),
                offset: f.offset,
                symbol: name_of(f.image, f.offset.saturating_sub(1)),
            });
        }
        // inclusive: each function of the stack once (recursion counts once)
        let mut seen: Vec<(String, &str)> = Vec::with_capacity(frames.len());
        for l in &frames {
            let key = (l.image.display(), l.symbol.as_str());
            if !seen.contains(&key) {
                seen.push(key);
            }
        }
        for (i, sy) in seen {
            *inclusive.entry((i, sy.to_string())).or_insert(0) += n;
        }
        let bits = tag_bits(&k.tags);
        let tags: Vec<String> = bits.iter().map(|b| tag_name(*b)).collect();
        let chain: Vec<String> = frames
            .iter()
            .rev()
            .map(|l| {
                let s = sanitize_folded(&l.symbol);
                if l.image.kind == ImageKind::Kernel {
                    // perf's and inferno's mark of a kernel frame
                    format!("{s}_[k]")
                } else {
                    s
                }
            })
            .collect();
        let chain = chain.join(";");
        let roots: Vec<String> = match opts.flame_root {
            FlameRoot::Process => vec![format!("{pname}[{}]", k.pid)],
            FlameRoot::Component => vec![comp.clone()],
            FlameRoot::Tag if tags.is_empty() => vec!["(untagged)".into()],
            FlameRoot::Tag => tags.iter().map(|t| format!("tag {t}")).collect(),
            FlameRoot::None => vec![],
        };
        if roots.is_empty() {
            *folded.entry(chain.clone()).or_insert(0) += n;
        }
        for r in roots {
            *folded
                .entry(format!("{};{chain}", sanitize_folded(&r)))
                .or_insert(0) += n;
        }
        located.push(Located {
            frames,
            pid: k.pid,
            comm: pname.clone(),
            mode: k.mode,
            tags,
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
    located.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then(a.frames[0].offset.cmp(&b.frames[0].offset))
    });
    Report {
        meta: meta.clone(),
        caveats: meta.caveats(),
        total,
        symbols: sym_rows(syms, total, opts.limit),
        images: image_rows,
        components: comp_rows(comps, total),
        by_tag,
        main_binary: main_binary(&per_pid, procs),
        stacks: any_stack,
        inclusive: sym_rows(inclusive, total, opts.limit),
        folded,
        located,
    }
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

/// The call graph of `symbol` (matched by name, in any image); None when
/// no sample's stack holds it.
pub fn call_graph(r: &Report, symbol: &str) -> Option<CallGraph> {
    let (mut inc, mut own) = (0u64, 0u64);
    let mut callers: HashMap<(String, String), u64> = HashMap::new();
    let mut callees: HashMap<(String, String), u64> = HashMap::new();
    let key = |l: &Loc| (l.image.display(), l.symbol.clone());
    for l in &r.located {
        let Some(i) = l.frames.iter().rposition(|f| f.symbol == symbol) else {
            continue;
        };
        inc += l.count;
        if l.frames[0].symbol == symbol {
            own += l.count;
        }
        let caller = l
            .frames
            .get(i + 1)
            .map(key)
            .unwrap_or_else(|| (String::new(), "[root]".into()));
        *callers.entry(caller).or_insert(0) += l.count;
        if i > 0 {
            *callees.entry(key(&l.frames[i - 1])).or_insert(0) += l.count;
        }
    }
    (inc > 0).then(|| CallGraph {
        symbol: symbol.to_string(),
        total: r.total,
        inclusive: inc,
        self_samples: own,
        callers: sym_rows(callers, r.total, 0),
        callees: sym_rows(callees, r.total, 0),
    })
}

/// Folded-stack frames may not contain ';' (frame separator) or newlines.
fn sanitize_folded(s: &str) -> String {
    s.replace([';', '\n'], ":")
}
