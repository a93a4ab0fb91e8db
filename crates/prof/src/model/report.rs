//! The report model: [`build_report`] turns a profile plus a
//! [`Symbolizer`] into tables (symbols, images, components, per tag),
//! folded stacks for flame graphs and located rows for pprof, ready for
//! any renderer.
//!
//! Mechanism: each (image, offset) is symbolized once, then every row is
//! summed into each table. Invariant: the sums cannot overflow, because
//! each table sums a subset of the profile's rows once and the profile's
//! total fits a u64.

use super::image::{Image, ImageKind, Mode, UNKNOWN_SYMBOL};
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
