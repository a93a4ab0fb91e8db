//! `mantle prof annotate SYMBOL` (after `perf annotate`): where in one
//! function its own samples fell, per source line and per instruction.
//!
//! Mechanism: the session's report is built as for `report` (same
//! filters, same symbolizer); the function is found by its full name,
//! short name or an alias ([`crate::model::find_funcs`]); its samples are
//! the rows whose sampled address (the leaf) is in it. Per source line:
//! each sampled address's line from DWARF (the innermost inlined call's,
//! when code was inlined there), the source file's text beside it when the
//! file is readable, every line from the function's first to its last
//! shown. Per instruction: the function's code (its symbol's size, or the
//! range of an unnamed function, [`crate::symbols`]) read from the file
//! that was checked against the recorded build ID (the session's copy for
//! the vDSO), decoded with iced-x86 (Intel syntax), each instruction with
//! the samples at its address and its source line.
//!
//! Invariants: the shares are of the function's own samples (they sum to
//! 100% over the instructions when every sample is inside the known
//! code); code is read only from regular files, at most
//! [`crate::symbols::CODE_MAX`] bytes; source files are read only if
//! regular and at most [`SOURCE_MAX`] bytes. What cannot be shown (no
//! DWARF lines, kernel code, no code range) is said in `notes`.

use crate::model::{find_funcs, Lookup, Report, ReportOpts, Symbolizer, NO_FILE};
use crate::Error;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Largest source file read for its text.
pub const SOURCE_MAX: u64 = 16 << 20;
/// Most source lines shown per file (from the first line with samples or
/// code to the last).
pub const SPAN_MAX: u32 = 2000;

/// What to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnnotateOpts {
    pub source: bool,
    pub asm: bool,
}

impl Default for AnnotateOpts {
    fn default() -> Self {
        AnnotateOpts {
            source: true,
            asm: true,
        }
    }
}

/// One source line of the function.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LineRow {
    pub file: String,
    pub line: u32,
    pub samples: u64,
    /// Share of the function's own samples.
    pub percent: f64,
    /// The line's text, when the source file could be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// One instruction of the function.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InsnRow {
    /// Virtual address in the image (as objdump prints it).
    pub address: u64,
    /// File offset in the image.
    pub offset: u64,
    /// Intel syntax.
    pub text: String,
    pub samples: u64,
    /// Share of the function's own samples.
    pub percent: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Source line (0: unknown).
    pub line: u32,
}

/// The annotation of one function in one image.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Annotation {
    pub symbol: String,
    pub image: String,
    /// The function's own samples (it was running, not its callees).
    pub samples: u64,
    /// Samples in the report.
    pub total: u64,
    /// `samples` as a share of `total`.
    pub percent: f64,
    pub lines: Vec<LineRow>,
    pub instructions: Vec<InsnRow>,
    /// Samples outside the decoded code (its range unknown or wrong).
    pub outside: u64,
    /// What could not be shown, and why.
    pub notes: Vec<String>,
}

fn pct(n: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        100.0 * n as f64 / of as f64
    }
}

/// The error of a name that finds no function, or several.
pub fn lookup_error(symbol: &str, session: &Path, e: Lookup) -> Error {
    match e {
        Lookup::NotFound => Error::NoMatch {
            filter: format!("symbol {symbol} (full or short name, or alias)"),
            session: session.display().to_string(),
        },
        Lookup::Ambiguous(names) => Error::Invalid(format!(
            "{symbol} names {} functions; give one of: {}",
            names.len(),
            names
                .iter()
                .take(10)
                .map(|n| format!("{n:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Annotates the function `symbol` of the session in `dir`: one
/// [`Annotation`] per image holding a function of that name with samples.
pub fn annotate(
    dir: &Path,
    opts: &ReportOpts,
    symbol: &str,
    what: AnnotateOpts,
) -> Result<Vec<Annotation>, Error> {
    let (r, mut sym) = crate::report::report_and_symbolizer(dir, opts)?;
    let funcs = find_funcs(&r.graph, symbol).map_err(|e| lookup_error(symbol, dir, e))?;
    let mut out = Vec::new();
    for f in funcs {
        out.extend(annotate_func(&r, f, &mut sym, what));
    }
    if out.is_empty() {
        return Err(lookup_error(symbol, dir, Lookup::NotFound));
    }
    out.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.image.cmp(&b.image)));
    Ok(out)
}

/// The annotations of function `f`, one per image with samples in it.
fn annotate_func(
    r: &Report,
    f: u32,
    sym: &mut crate::symbols::SessionSymbolizer,
    what: AnnotateOpts,
) -> Vec<Annotation> {
    let g = &r.graph;
    // its own samples per image, per leaf frame
    let mut per_image: BTreeMap<u32, BTreeMap<u64, (u64, u32)>> = BTreeMap::new();
    for row in &g.rows {
        if g.func_of(row.leaf) == f {
            let (img, off) = g.frames[row.leaf as usize];
            let e = per_image
                .entry(img)
                .or_default()
                .entry(off)
                .or_insert((0, row.leaf));
            e.0 += row.count;
        }
    }
    let func = &g.funcs[f as usize];
    per_image
        .into_iter()
        .map(|(img, at)| {
            let image = &g.images[img as usize];
            let n: u64 = at.values().map(|v| v.0).sum();
            let mut a = Annotation {
                symbol: func.symbol.clone(),
                image: image.display(),
                samples: n,
                total: r.total,
                percent: pct(n, r.total),
                lines: Vec::new(),
                instructions: Vec::new(),
                outside: 0,
                notes: Vec::new(),
            };
            // the source line of each sampled address: the innermost
            // inlined call's when there is one
            let line_of = |frame: u32| -> (u32, u32) {
                match g.frame_inlined.get(&frame).and_then(|v| v.last()) {
                    Some(&(_, file, line)) if file != NO_FILE => (file, line),
                    _ => g.frame_src.get(frame as usize).copied().unwrap_or((NO_FILE, 0)),
                }
            };
            let mut by_line: BTreeMap<(String, u32), u64> = BTreeMap::new();
            for &(count, frame) in at.values() {
                let (file, line) = line_of(frame);
                if let (Some(file), true) = (g.file(file), line > 0) {
                    *by_line.entry((file.to_string(), line)).or_insert(0) += count;
                }
            }
            let range = g.func_range.get(f as usize).copied().flatten();
            if what.asm {
                match range {
                    Some((lo, hi)) => match sym.code(image, lo, hi) {
                        Ok((vaddr, code)) => {
                            a.instructions = disassemble(vaddr, lo, &code, &at, n);
                            let offs: Vec<u64> = a.instructions.iter().map(|i| i.offset).collect();
                            let infos = sym.locate(image, &offs);
                            for (i, info) in a.instructions.iter_mut().zip(infos) {
                                let Some(info) = info else { continue };
                                let (file, line) = match info.inlined.last() {
                                    Some((_, Some(f), l)) => (Some(f.clone()), *l),
                                    _ => (info.file, info.line),
                                };
                                if let (Some(file), true) = (&file, line > 0) {
                                    // lines with code but no samples are shown too
                                    by_line.entry((file.clone(), line)).or_insert(0);
                                }
                                i.file = file;
                                i.line = line;
                            }
                            let inside: u64 = a.instructions.iter().map(|i| i.samples).sum();
                            a.outside = n - inside;
                        }
                        Err(why) => a.notes.push(format!("no disassembly: {why}")),
                    },
                    None => a
                        .notes
                        .push("no disassembly: the function's size is not known".into()),
                }
            }
            if what.source {
                if by_line.is_empty() {
                    a.notes.push(
                        "no source lines: the image has no DWARF line table (build with -g, or install its debug file)"
                            .into(),
                    );
                }
                a.lines = source_lines(&by_line, n);
            }
            if !what.asm {
                a.instructions.clear();
            }
            a
        })
        .collect()
}

/// Decodes `code` (at virtual address `vaddr`, file offset `off`), each
/// instruction with the samples at its bytes.
pub fn disassemble(
    vaddr: u64,
    off: u64,
    code: &[u8],
    samples: &BTreeMap<u64, (u64, u32)>,
    total: u64,
) -> Vec<InsnRow> {
    use iced_x86::{Decoder, DecoderOptions, Formatter, IntelFormatter};
    let mut d = Decoder::with_ip(64, code, vaddr, DecoderOptions::NONE);
    let mut fmt = IntelFormatter::new();
    let mut out = Vec::new();
    let mut insn = iced_x86::Instruction::default();
    while d.can_decode() {
        d.decode_out(&mut insn);
        let o = off + (insn.ip() - vaddr);
        let n: u64 = samples
            .range(o..o + insn.len() as u64)
            .map(|(_, v)| v.0)
            .sum();
        let mut text = String::new();
        if insn.is_invalid() {
            text.push_str("(bad)");
        } else {
            fmt.format(&insn, &mut text);
        }
        out.push(InsnRow {
            address: insn.ip(),
            offset: o,
            text,
            samples: n,
            percent: pct(n, total),
            file: None,
            line: 0,
        });
    }
    out
}

/// Every line from the first to the last of each file (at most
/// [`SPAN_MAX`]), with its samples and, when the file is readable, its
/// text; the file with the most samples first.
fn source_lines(by_line: &BTreeMap<(String, u32), u64>, total: u64) -> Vec<LineRow> {
    let mut files: Vec<(&str, u64)> = Vec::new();
    for ((file, _), n) in by_line {
        match files.last_mut() {
            Some((f, s)) if f == file => *s += n,
            _ => files.push((file, *n)),
        }
    }
    files.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut out = Vec::new();
    for (file, _) in files {
        let lines: HashMap<u32, u64> = by_line
            .range((file.to_string(), 0)..=(file.to_string(), u32::MAX))
            .map(|((_, l), n)| (*l, *n))
            .collect();
        let lo = *lines.keys().min().expect("a file has lines");
        let hi = (*lines.keys().max().expect("a file has lines")).min(lo + SPAN_MAX - 1);
        let text: Option<Vec<String>> = crate::files::read_regular(Path::new(file), SOURCE_MAX)
            .ok()
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .lines()
                    .map(str::to_string)
                    .collect()
            });
        for l in lo..=hi {
            let n = lines.get(&l).copied().unwrap_or(0);
            out.push(LineRow {
                file: file.to_string(),
                line: l,
                samples: n,
                percent: pct(n, total),
                text: text
                    .as_ref()
                    .and_then(|t| t.get(l as usize - 1))
                    .map(|s| s.replace('\t', "    ")),
            });
        }
    }
    out
}

/// The annotation as text: the source lines, then the instructions.
pub fn render(a: &Annotation) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}  ({})  {} samples, {:.2}% of all",
        a.symbol, a.image, a.samples, a.percent
    );
    for n in &a.notes {
        let _ = writeln!(s, "note: {n}");
    }
    let share = |n: u64, p: f64| {
        if n == 0 {
            format!("{:>8} {:>7}", ".", ".")
        } else {
            format!("{n:>8} {p:>6.2}%")
        }
    };
    let mut file = None;
    for l in &a.lines {
        if file != Some(&l.file) {
            let _ = writeln!(
                s,
                "\nSource {}:\n {:>8} {:>7} {:>6}  SOURCE",
                l.file, "SAMPLES", "%", "LINE"
            );
            file = Some(&l.file);
        }
        let _ = writeln!(
            s,
            " {} {:>6}  {}",
            share(l.samples, l.percent),
            l.line,
            l.text.as_deref().unwrap_or("")
        );
    }
    if !a.instructions.is_empty() {
        let _ = writeln!(
            s,
            "\nDisassembly:\n {:>8} {:>7} {:>16}  {:<40} LINE",
            "SAMPLES", "%", "ADDRESS", "INSTRUCTION"
        );
        for i in &a.instructions {
            let line = match (&i.file, i.line) {
                (Some(f), l) if l > 0 => {
                    format!("{}:{l}", f.rsplit('/').next().unwrap_or(f))
                }
                _ => String::new(),
            };
            let _ = writeln!(
                s,
                " {} {:>16x}  {:<40} {line}",
                share(i.samples, i.percent),
                i.address,
                i.text
            );
        }
        if a.outside > 0 {
            let _ = writeln!(s, "({} samples outside the decoded code)", a.outside);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `xor eax, eax; add eax, edx; ret` at 0x1130 (file offset 0x130):
    /// each instruction gets the samples at its bytes.
    #[test]
    fn instructions_carry_their_samples() {
        let code = [0x31, 0xc0, 0x01, 0xd0, 0xc3];
        let samples = BTreeMap::from([(0x132u64, (6u64, 0u32)), (0x134, (2, 1)), (0x200, (1, 2))]);
        let v = disassemble(0x1130, 0x130, &code, &samples, 9);
        let got: Vec<(u64, &str, u64)> = v
            .iter()
            .map(|i| (i.address, i.text.as_str(), i.samples))
            .collect();
        assert_eq!(
            got,
            [
                (0x1130, "xor eax,eax", 0),
                (0x1132, "add eax,edx", 6),
                (0x1134, "ret", 2)
            ]
        );
        assert!((v[1].percent - 66.666).abs() < 0.01);
    }

    #[test]
    fn source_lines_span_the_function() {
        let m = BTreeMap::from([
            (("/nonexistent/a.c".to_string(), 10), 3u64),
            (("/nonexistent/a.c".to_string(), 13), 1),
            (("/nonexistent/b.h".to_string(), 2), 0),
        ]);
        let v = source_lines(&m, 4);
        let got: Vec<(&str, u32, u64)> = v
            .iter()
            .map(|l| (l.file.as_str(), l.line, l.samples))
            .collect();
        assert_eq!(
            got,
            [
                ("/nonexistent/a.c", 10, 3),
                ("/nonexistent/a.c", 11, 0),
                ("/nonexistent/a.c", 12, 0),
                ("/nonexistent/a.c", 13, 1),
                ("/nonexistent/b.h", 2, 0)
            ]
        );
        assert!(v.iter().all(|l| l.text.is_none()));
    }
}
