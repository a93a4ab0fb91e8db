//! `mantle prof report`: reads a session, symbolizes, and renders the
//! report as text, JSON, a flame graph (inferno) or a pprof profile.

use crate::model::{self, Report, ReportOpts};
use crate::session;
use crate::symbols::SessionSymbolizer;
use crate::Error;
use std::path::Path;

/// Builds the report of the session in `dir`. A filter (`pid`, `comm`)
/// that selects no sample is [`Error::NoMatch`], not an empty report: an
/// empty table would read as "this process used no CPU".
pub fn report(dir: &Path, opts: &ReportOpts) -> Result<Report, Error> {
    report_and_symbolizer(dir, opts).map(|(r, _)| r)
}

/// [`report`], and the symbolizer that named it (for more questions
/// about the same images: [`crate::annotate`]).
pub fn report_and_symbolizer(
    dir: &Path,
    opts: &ReportOpts,
) -> Result<(Report, SessionSymbolizer), Error> {
    let s = session::read_head(dir)?;
    let mut b = model::ReportBuilder::new(s.images.clone(), &s.procs, opts)
        .with_cgroup_names(s.cgroups.clone());
    session::stream_tables(&s, &mut b)?;
    let mut sym = SessionSymbolizer::new(s.kallsyms.clone()).with_jit(s.jit.clone());
    if let Some(d) = &opts.debug_dirs {
        sym = sym.with_debug_dirs(d.clone());
    }
    if let Some(v) = &s.vdso {
        sym = sym.with_vdso(v);
    }
    let mut r = b.finish(&s.tags, &s.meta, &mut sym);
    // a filter may select a process that only blocked
    r.off_cpu = off_cpu_report(&s, opts, &mut sym)?;
    let blocked = r.off_cpu.as_ref().is_some_and(|o| o.total_ns > 0);
    if r.total == 0 && !blocked && (opts.pid.is_some() || opts.comm.is_some()) {
        let mut filter = Vec::new();
        if let Some(p) = opts.pid {
            filter.push(format!("--pid {p}"));
        }
        if let Some(c) = &opts.comm {
            filter.push(format!("--comm {c}"));
        }
        return Err(Error::NoMatch {
            filter: filter.join(" "),
            session: dir.display().to_string(),
        });
    }
    r.caveats.extend(std::mem::take(&mut sym.warnings));
    r.graph.image_maps = image_maps(&r.graph.images, &s.mappings);
    if let Some(off) = r.off_cpu.as_mut() {
        off.graph.image_maps = r.graph.image_maps.clone();
    }
    Ok((r, sym))
}

/// The off-CPU half of the report (`record --off-cpu`): the same builder
/// over offcpu.tsv (counts in ns), named by the same symbolizer, and the
/// blocked time per thread. None for a session without it.
fn off_cpu_report(
    s: &session::Head,
    opts: &ReportOpts,
    sym: &mut SessionSymbolizer,
) -> Result<Option<model::OffCpuReport>, Error> {
    // the off-CPU path records no cgroup: no per-cgroup tables of it, and
    // its flame graph rooted at the process instead
    let opts = &model::ReportOpts {
        by_cgroup: false,
        flame_root: match opts.flame_root {
            model::FlameRoot::Cgroup => model::FlameRoot::Process,
            r => r,
        },
        ..opts.clone()
    };
    let mut b = model::ReportBuilder::new(s.images.clone(), &s.procs, opts);
    let Some(off) = session::stream_offcpu(s, &mut b)? else {
        return Ok(None);
    };
    let r = b.finish(&s.tags, &s.meta, sym);
    let comm = |pid: u32| {
        s.procs
            .get(&pid)
            .map(|p| p.comm.clone())
            .unwrap_or_else(|| "?".into())
    };
    let threads: Vec<model::ThreadRow> = off
        .per_thread()
        .into_iter()
        .filter(|((pid, _), _)| {
            opts.pid.is_none_or(|p| p == *pid)
                && opts.comm.as_ref().is_none_or(|c| *c == comm(*pid))
        })
        .map(|((pid, tid), t)| model::ThreadRow {
            pid,
            tid,
            comm: comm(pid),
            ns: t.ns,
            blocks: t.blocks,
            percent: if r.total == 0 {
                0.0
            } else {
                100.0 * t.ns as f64 / r.total as f64
            },
        })
        .collect();
    Ok(Some(model::OffCpuReport {
        total_ns: r.total,
        blocks: threads.iter().fold(0, |a, t| a.saturating_add(t.blocks)),
        threads,
        symbols: r.symbols,
        inclusive: r.inclusive,
        components: r.components,
        graph: r.graph,
    }))
}

/// One executable mapping of each image seen while recording (the first
/// of its path and build ID), for pprof's mappings.
pub fn image_maps(
    images: &[crate::model::Image],
    mappings: &[(u32, crate::model::Mapping)],
) -> Vec<Option<(u64, u64, u64)>> {
    let mut first: std::collections::HashMap<(&str, Option<&str>), (u64, u64, u64)> =
        std::collections::HashMap::new();
    for (_, m) in mappings {
        first
            .entry((m.path.as_str(), m.build_id.as_deref()))
            .or_insert((m.start, m.end, m.pgoff));
    }
    images
        .iter()
        .map(|im| {
            first
                .get(&(im.path.as_str(), im.build_id.as_deref()))
                .or_else(|| first.get(&(im.path.as_str(), None)))
                .copied()
        })
        .collect()
}

fn werr(out: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        op: "write",
        path: out.to_path_buf(),
        source,
    }
}

/// Writes the folded stacks ("root;caller;...;leaf count" per line, the
/// format of Brendan Gregg's stackcollapse scripts and inferno), one line
/// at a time.
pub fn write_folded(r: &Report, out: &Path) -> Result<(), Error> {
    let f = std::fs::File::create(out).map_err(werr(out))?;
    let mut w = std::io::BufWriter::new(f);
    r.graph
        .write_folded(&mut w)
        .and_then(|()| std::io::Write::flush(&mut w))
        .map_err(werr(out))
}

/// Writes a flame graph SVG: the root (process, component or tag), then
/// the call stack, callers at the bottom.
pub fn write_flame(r: &Report, out: &Path) -> Result<(), Error> {
    let mut o = inferno::flamegraph::Options::default();
    o.title = format!("mantle prof: {} ({} samples)", r.meta.event, r.total);
    o.count_name = "samples".into();
    flame(&r.graph, o, out)
}

/// The off-CPU graph (`record --off-cpu`) as its own flame graph: the
/// same layout (root, then the stack at the block, callers at the
/// bottom, the kernel's `__schedule` on top), widths in nanoseconds
/// blocked, in inferno's blue "io" palette so it is not mistaken for the
/// on-CPU graph. [`Error::Invalid`] when the session has no off-CPU time.
pub fn write_off_cpu_flame(r: &Report, out: &Path) -> Result<(), Error> {
    let off = off_cpu_of(r)?;
    let mut o = inferno::flamegraph::Options::default();
    o.title = format!(
        "mantle prof: off-CPU time ({:.3} s blocked, {} blocks)",
        off.total_ns as f64 / 1e9,
        off.blocks
    );
    o.count_name = "ns".into();
    o.colors =
        inferno::flamegraph::color::Palette::Basic(inferno::flamegraph::color::BasicPalette::Io);
    flame(&off.graph, o, out)
}

/// The folded stacks of the off-CPU graph (counts in ns).
pub fn write_off_cpu_folded(r: &Report, out: &Path) -> Result<(), Error> {
    let off = off_cpu_of(r)?;
    let f = std::fs::File::create(out).map_err(werr(out))?;
    let mut w = std::io::BufWriter::new(f);
    off.graph
        .write_folded(&mut w)
        .and_then(|()| std::io::Write::flush(&mut w))
        .map_err(werr(out))
}

fn off_cpu_of(r: &Report) -> Result<&model::OffCpuReport, Error> {
    r.off_cpu.as_ref().ok_or_else(|| {
        Error::Invalid(
            "this session has no off-CPU time (record it with `mantle prof record --off-cpu`)"
                .into(),
        )
    })
}

/// Writes the flame graph of `g` with options `o`.
fn flame(
    g: &model::StackGraph,
    mut o: inferno::flamegraph::Options,
    out: &Path,
) -> Result<(), Error> {
    let mut lines: Vec<String> = Vec::new();
    let _ = g.for_each_folded(&mut |l, n| {
        lines.push(format!("{l} {n}"));
        Ok(())
    });
    let f = std::fs::File::create(out).map_err(werr(out))?;
    inferno::flamegraph::from_lines(
        &mut o,
        lines.iter().map(String::as_str),
        std::io::BufWriter::new(f),
    )
    .map_err(|source| Error::Io {
        op: "write flame graph",
        path: out.to_path_buf(),
        source,
    })
}

/// Writes a gzipped pprof profile.
pub fn write_pprof(r: &Report, out: &Path) -> Result<(), Error> {
    let f = std::fs::File::create(out).map_err(werr(out))?;
    crate::pprof::write_gz(r, std::io::BufWriter::new(f)).map_err(werr(out))
}
