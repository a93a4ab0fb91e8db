//! `mantle prof diff A B`: what changed between two sessions, per
//! function, as `perf diff` shows it: each function's share of its own
//! session's samples in A (the baseline) and in B, and the delta in
//! percentage points, exclusive (self) and inclusive.
//!
//! Mechanism: both sessions are reported ([`crate::report::report`], the
//! same filters on each) and their symbol tables joined on (image path,
//! symbol) — the key `perf diff` matches on (dso, symbol). Shares, not
//! sample counts, are compared: two recordings differ in length and rate.
//! [`diff_rows`] is the pure core. [`write_diff_flame`] draws the
//! differential flame graph with inferno's differential mode (Brendan
//! Gregg's difffolded.pl): the new session's stacks, each frame coloured
//! by how its samples changed (red: more, blue: fewer), the baseline
//! scaled to the new session's total so that shares are compared.
//!
//! Invariant: every function of either session has a row (one missing
//! from a session counts 0 % there), so the deltas of the self column sum
//! to 0 (up to rounding) when both sessions have samples.

use crate::model::{Report, ReportOpts, SymRow};
use crate::Error;
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

/// One function in the two sessions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffRow {
    pub image: String,
    pub symbol: String,
    /// Self samples and share (%) in the baseline.
    pub baseline_samples: u64,
    pub baseline_percent: f64,
    /// Self samples and share (%) in the new session.
    pub new_samples: u64,
    pub new_percent: f64,
    /// `new_percent - baseline_percent`, in points.
    pub delta: f64,
    /// Inclusive shares (the function or its callees running) and their
    /// delta; equal to the self shares for sessions without stacks.
    pub baseline_inclusive_percent: f64,
    pub new_inclusive_percent: f64,
    pub inclusive_delta: f64,
}

/// The comparison of two sessions.
#[derive(Debug, Clone, Serialize)]
pub struct Diff {
    pub baseline: String,
    pub new: String,
    pub baseline_total: u64,
    pub new_total: u64,
    /// Every function of either session, largest |delta| first.
    pub rows: Vec<DiffRow>,
    /// The caveats of each session, prefixed with its name.
    pub caveats: Vec<String>,
}

fn pct(n: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        n as f64 * 100.0 / total as f64
    }
}

/// Joins two reports' functions on (image, symbol). Pure.
pub fn diff_rows(a: (&[SymRow], &[SymRow], u64), b: (&[SymRow], &[SymRow], u64)) -> Vec<DiffRow> {
    // (self A, self B, inclusive A, inclusive B) per (image, symbol)
    let mut m: HashMap<(&str, &str), [u64; 4]> = HashMap::new();
    for (rows, slot) in [(a.0, 0), (b.0, 1), (a.1, 2), (b.1, 3)] {
        for r in rows {
            let e = m.entry((r.image.as_str(), r.symbol.as_str())).or_default();
            e[slot] = e[slot].saturating_add(r.samples);
        }
    }
    let mut v: Vec<DiffRow> = m
        .into_iter()
        .map(|((image, symbol), [sa, sb, ia, ib])| {
            let (pa, pb) = (pct(sa, a.2), pct(sb, b.2));
            let (qa, qb) = (pct(ia, a.2), pct(ib, b.2));
            DiffRow {
                image: image.to_string(),
                symbol: symbol.to_string(),
                baseline_samples: sa,
                baseline_percent: pa,
                new_samples: sb,
                new_percent: pb,
                delta: pb - pa,
                baseline_inclusive_percent: qa,
                new_inclusive_percent: qb,
                inclusive_delta: qb - qa,
            }
        })
        .collect();
    v.sort_by(|x, y| {
        y.delta
            .abs()
            .total_cmp(&x.delta.abs())
            .then(y.inclusive_delta.abs().total_cmp(&x.inclusive_delta.abs()))
            .then_with(|| (&x.image, &x.symbol).cmp(&(&y.image, &y.symbol)))
    });
    v
}

/// Compares the sessions `a` (baseline) and `b`, each reported with
/// `opts` (all rows: `opts.limit` is for the rendering).
pub fn diff(a: &Path, b: &Path, opts: &ReportOpts) -> Result<Diff, Error> {
    diff_and_flame(a, b, opts, None)
}

/// [`diff`], and with `flame` the differential flame graph written there
/// ([`write_diff_flame`]).
pub fn diff_and_flame(
    a: &Path,
    b: &Path,
    opts: &ReportOpts,
    flame: Option<&Path>,
) -> Result<Diff, Error> {
    // stacks without a per-process root: pids differ between recordings
    let opts = ReportOpts {
        limit: 0,
        flame_root: crate::model::FlameRoot::None,
        ..opts.clone()
    };
    let ra: Report = crate::report::report(a, &opts)?;
    let rb: Report = crate::report::report(b, &opts)?;
    if let Some(out) = flame {
        write_diff_flame(
            &ra,
            &rb,
            &format!("{} -> {}", a.display(), b.display()),
            out,
        )?;
    }
    let rows = diff_rows(
        (&ra.symbols, &ra.inclusive, ra.total),
        (&rb.symbols, &rb.inclusive, rb.total),
    );
    let mut caveats = Vec::new();
    for (name, r) in [(a, &ra), (b, &rb)] {
        caveats.extend(r.caveats.iter().map(|c| format!("{}: {c}", name.display())));
    }
    if ra.meta.event != rb.meta.event {
        caveats.push(format!(
            "the sessions sampled different events ({} and {}): their shares measure different things",
            ra.meta.event, rb.meta.event
        ));
    }
    Ok(Diff {
        baseline: a.display().to_string(),
        new: b.display().to_string(),
        baseline_total: ra.total,
        new_total: rb.total,
        rows,
        caveats,
    })
}

/// Writes the differential flame graph of reports `a` (baseline) and `b`
/// to `out`: inferno's differential mode over the two reports' folded
/// stacks, with the baseline normalized to `b`'s total. Frames are `b`'s
/// stacks sized by `b`'s samples; each frame's colour and its tooltip's
/// last figure (`+1.23%`) are its change in share of all samples. (A
/// function only the baseline ran has no frame: perf and Gregg's
/// flamegraph draw the new profile; swap the two to see it.)
pub fn write_diff_flame(a: &Report, b: &Report, title: &str, out: &Path) -> Result<(), Error> {
    let werr = |source| Error::Io {
        op: "write flame graph",
        path: out.to_path_buf(),
        source,
    };
    let (mut fa, mut fb) = (Vec::new(), Vec::new());
    a.graph.write_folded(&mut fa).map_err(werr)?;
    b.graph.write_folded(&mut fb).map_err(werr)?;
    let mut folded = Vec::new();
    inferno::differential::from_readers(
        inferno::differential::Options {
            normalize: true,
            strip_hex: false,
        },
        &fa[..],
        &fb[..],
        &mut folded,
    )
    .map_err(werr)?;
    let f = std::fs::File::create(out).map_err(werr)?;
    let mut o = inferno::flamegraph::Options::default();
    o.title = format!("mantle prof diff: {title}");
    o.subtitle = Some(format!(
        "{} -> {} samples; red: more, blue: less (baseline scaled to the new total)",
        a.total, b.total
    ));
    o.count_name = "samples".into();
    inferno::flamegraph::from_reader(&mut o, &folded[..], std::io::BufWriter::new(f)).map_err(werr)
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

impl Diff {
    /// The text table (`limit` rows, 0: all), as perf diff prints it.
    pub fn render(&self, limit: usize) -> String {
        let mut o = format!(
            "Baseline: {} ({} samples)\nNew:      {} ({} samples)\n",
            self.baseline, self.baseline_total, self.new, self.new_total
        );
        for c in &self.caveats {
            o += &format!("warning: {c}\n");
        }
        o += &format!(
            "\n{:>9} {:>9} {:>9}  {:>9} {:>9}  {:<32} SYMBOL\n",
            "BASELINE%", "NEW%", "DELTA", "INCL.B%", "INCL.DELTA", "IMAGE"
        );
        let n = if limit == 0 {
            self.rows.len()
        } else {
            limit.min(self.rows.len())
        };
        for r in &self.rows[..n] {
            o += &format!(
                "{:>9.2} {:>9.2} {:>+9.2}  {:>9.2} {:>+10.2} {:<32} {}\n",
                r.baseline_percent,
                r.new_percent,
                r.delta,
                r.baseline_inclusive_percent,
                r.inclusive_delta,
                short(&r.image, 32),
                r.symbol
            );
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(image: &str, symbol: &str, samples: u64) -> SymRow {
        SymRow {
            samples,
            percent: 0.0,
            image: image.into(),
            symbol: symbol.into(),
        }
    }

    /// Shares, not counts, are compared; a function missing from one side
    /// counts 0 % there; the largest change comes first; self deltas sum
    /// to 0; inclusive shares have their own delta.
    #[test]
    fn deltas_in_points_of_each_sessions_total() {
        let a = [row("/x", "f", 50), row("/x", "g", 50)];
        let ai = [
            row("/x", "main", 100),
            row("/x", "f", 50),
            row("/x", "g", 50),
        ];
        let b = [row("/x", "f", 150), row("/x", "g", 30), row("/y", "h", 20)];
        let bi = [
            row("/x", "main", 180),
            row("/x", "f", 150),
            row("/x", "g", 30),
        ];
        let v = diff_rows((&a, &ai, 100), (&b, &bi, 200));
        let by = |s: &str| v.iter().find(|r| r.symbol == s).unwrap();
        assert_eq!(by("f").delta, 25.0);
        assert_eq!(by("g").delta, -35.0);
        assert_eq!(by("h").delta, 10.0);
        assert_eq!((by("h").baseline_samples, by("h").new_samples), (0, 20));
        assert_eq!(v[0].symbol, "g");
        let sum: f64 = v.iter().map(|r| r.delta).sum();
        assert!(sum.abs() < 1e-9, "{sum}");
        assert_eq!(by("main").delta, 0.0);
        assert_eq!(by("main").inclusive_delta, -10.0);
        // the same symbol in two images is two functions
        let v = diff_rows(
            (&[row("/a", "f", 1)], &[], 1),
            (&[row("/b", "f", 1)], &[], 1),
        );
        assert_eq!(v.len(), 2);
        // empty sessions: no division by zero
        assert!(diff_rows((&[], &[], 0), (&[], &[], 0)).is_empty());
    }
}

#[cfg(test)]
mod flame_tests {
    use super::*;
    use crate::model::{
        build_report, Frame, Image, ImageKind, Meta, Mode, Profile, RowKey, Symbolizer,
    };

    /// Names offsets 0x100.. as f0, f1, ... (one function per 0x100).
    struct Names;
    impl Symbolizer for Names {
        fn symbolize(&mut self, _: &Image, offsets: &[u64]) -> Vec<Option<String>> {
            let names = ["main", "steady", "grows", "shrinks"];
            offsets
                .iter()
                .map(|o| names.get((*o / 0x100) as usize).map(|s| s.to_string()))
                .collect()
        }
    }

    /// main -> steady, main -> grows, main -> shrinks with these counts.
    fn report(steady: u64, grows: u64, shrinks: u64) -> Report {
        let mut p = Profile::with_images(vec![Image::named("/bin/x", ImageKind::Elf)]);
        let main = p.stack_id(&[Frame {
            image: 0,
            offset: 0x11,
        }]);
        for (leaf, n) in [(0x110, steady), (0x210, grows), (0x310, shrinks)] {
            if n == 0 {
                continue;
            }
            p.add_row(
                RowKey {
                    pid: 1,
                    tid: 1,
                    cpu: 0,
                    mode: Mode::User,
                    image: 0,
                    offset: leaf,
                    tags: vec![0; crate::abi::MT_WORDS],
                    stack: main,
                    cgroup: 0,
                },
                n,
            )
            .unwrap();
        }
        build_report(
            &p,
            &Default::default(),
            &[],
            &Meta::default(),
            &mut Names,
            &ReportOpts {
                flame_root: crate::model::FlameRoot::None,
                ..Default::default()
            },
        )
    }

    /// The SVG names the function whose share grew with a positive
    /// change and the one that shrank with a negative one, and the steady
    /// one with none (the baseline is scaled to the new total: twice the
    /// samples at the same shares is no change).
    #[test]
    fn differential_flame_graph_names_the_changed_functions() {
        let a = report(500, 250, 250);
        let b = report(1000, 900, 100);
        let out =
            std::env::temp_dir().join(format!("mantle-diff-flame-{}.svg", std::process::id()));
        write_diff_flame(&a, &b, "a -> b", &out).unwrap();
        let svg = std::fs::read_to_string(&out).unwrap();
        std::fs::remove_file(&out).unwrap();
        let title = |f: &str| -> String {
            let at = svg
                .find(&format!("<title>{f} ("))
                .unwrap_or_else(|| panic!("no frame {f}"));
            svg[at..at + svg[at..].find("</title>").unwrap()].to_string()
        };
        // grows: 25% -> 45% of 2000 samples: +20 points
        assert!(title("grows").ends_with("; +20.00%)"), "{}", title("grows"));
        assert!(
            title("shrinks").ends_with("; -20.00%)"),
            "{}",
            title("shrinks")
        );
        assert!(title("steady").ends_with("; 0.00%)"), "{}", title("steady"));
        assert!(
            svg.contains("mantle prof diff: a -&gt; b") || svg.contains("mantle prof diff: a -> b")
        );
    }
}
