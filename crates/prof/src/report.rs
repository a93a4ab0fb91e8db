//! `mantle prof report`: reads a session, symbolizes, and renders the
//! report as text, JSON, a flame graph (inferno) or a pprof profile.

use crate::model::{self, Report, ReportOpts};
use crate::session;
use crate::symbols::SessionSymbolizer;
use crate::Error;
use std::path::Path;

/// Builds the report of the session in `dir`.
pub fn report(dir: &Path, opts: &ReportOpts) -> Result<Report, Error> {
    let s = session::read_session(dir)?;
    let mut sym = SessionSymbolizer::new(dir, s.kallsyms.clone());
    let mut r = model::build_report(&s.profile, &s.procs, &s.tags, &s.meta, &mut sym, opts);
    r.caveats.extend(sym.warnings);
    Ok(r)
}

/// Writes a flame graph SVG (frames: process, image, symbol).
pub fn write_flame(r: &Report, out: &Path) -> Result<(), Error> {
    let lines: Vec<String> = r
        .folded
        .iter()
        .map(|(stack, n)| format!("{stack} {n}"))
        .collect();
    let f = std::fs::File::create(out)
        .map_err(|e| Error::Session(format!("create {}: {e}", out.display())))?;
    let mut o = inferno::flamegraph::Options::default();
    o.title = format!("mantle prof: {} ({} samples)", r.meta.event, r.total);
    o.count_name = "samples".into();
    inferno::flamegraph::from_lines(
        &mut o,
        lines.iter().map(String::as_str),
        std::io::BufWriter::new(f),
    )
    .map_err(|e| Error::Session(format!("write flame graph {}: {e}", out.display())))
}

/// Writes a gzipped pprof profile.
pub fn write_pprof(r: &Report, out: &Path) -> Result<(), Error> {
    let p = crate::pprof::build(r);
    std::fs::write(out, crate::pprof::encode_gz(&p))
        .map_err(|e| Error::Session(format!("write {}: {e}", out.display())))
}
