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
    if r.total == 0 && (opts.pid.is_some() || opts.comm.is_some()) {
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
    Ok((r, sym))
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
    let mut lines: Vec<String> = Vec::new();
    let _ = r.graph.for_each_folded(&mut |l, n| {
        lines.push(format!("{l} {n}"));
        Ok(())
    });
    let f = std::fs::File::create(out).map_err(werr(out))?;
    let mut o = inferno::flamegraph::Options::default();
    o.title = format!("mantle prof: {} ({} samples)", r.meta.event, r.total);
    o.count_name = "samples".into();
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
