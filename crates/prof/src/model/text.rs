//! The text renderer: the opreport-style report (header, caveats,
//! symbol table, per image, per component, per tag). JSON is the serde
//! form of [`Report`]; flame graphs and pprof are written by
//! [`crate::report`] and [`crate::pprof`].

use super::report::{CallGraph, CompRow, Report, SymRow};
use std::fmt::Write as _;

/// `--callers` / `--callees`: one function's callers or callees, with
/// its inclusive and self samples (like `perf report --children`).
pub fn render_call_graph(g: &CallGraph, callers: bool, callees: bool) -> String {
    let mut o = String::new();
    let pct = |n: u64| {
        if g.total == 0 {
            0.0
        } else {
            100.0 * n as f64 / g.total as f64
        }
    };
    let _ = writeln!(
        o,
        "{}: {} samples inclusive ({:.2}%), {} self ({:.2}%), of {}",
        g.symbol,
        g.inclusive,
        pct(g.inclusive),
        g.self_samples,
        pct(g.self_samples),
        g.total
    );
    if callers {
        let _ = writeln!(o, "\nCallers of {}:", g.symbol);
        sym_table(&mut o, &g.callers);
    }
    if callees {
        let _ = writeln!(o, "\nCalled by {}:", g.symbol);
        sym_table(&mut o, &g.callees);
    }
    o
}

/// A symbol table: samples, %, image, symbol.
fn sym_table(o: &mut String, rows: &[SymRow]) {
    let _ = writeln!(o, "{:>10} {:>9}  {:<32} SYMBOL", "SAMPLES", "%", "IMAGE");
    for s in rows {
        let _ = writeln!(
            o,
            "{:>10} {:>9.4}  {:<32} {}",
            s.samples,
            s.percent,
            short(&s.image, 32),
            s.symbol
        );
    }
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
        "Samples: {} in report, {} recorded, {} lost, throttled {} time(s); call stacks: {}",
        r.total,
        m.samples,
        m.lost_samples,
        m.throttle_events,
        match m.stacks.as_str() {
            "perf" | "bpf" => "frame pointers",
            "dwarf" => "DWARF (.eh_frame) from 8 KiB stack copies",
            _ => "none",
        }
    );
    for c in &r.caveats {
        let _ = writeln!(o, "warning: {c}");
    }
    let _ = writeln!(o);
    sym_table(&mut o, &r.symbols);
    if r.stacks {
        let _ = writeln!(o);
        let _ = writeln!(o, "Inclusive (the function or its callees running):");
        sym_table(&mut o, &r.inclusive);
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
    if let Some(cgs) = &r.by_cgroup {
        let _ = writeln!(o);
        let _ = writeln!(o, "Per cgroup:");
        for t in cgs {
            let _ = writeln!(
                o,
                "cgroup {}: {} samples ({:.4}% of all)",
                t.cgroup, t.samples, t.percent
            );
            group_tables(&mut o, &t.processes, &t.symbols);
        }
    }
    if let Some(off) = &r.off_cpu {
        off_cpu_section(&mut o, r, off);
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

/// A group's processes and its first ten symbols (`--by-cgroup`).
fn group_tables(o: &mut String, procs: &[CompRow], syms: &[SymRow]) {
    let _ = writeln!(
        o,
        "  {:>10} {:>9} {:>10} {:>10}  PROCESS",
        "SAMPLES", "%", "USER", "KERNEL"
    );
    for c in procs {
        let _ = writeln!(
            o,
            "  {:>10} {:>9.4} {:>10} {:>10}  {}",
            c.samples, c.percent, c.user, c.kernel, c.component
        );
    }
    let _ = writeln!(o, "  {:>10} {:>9}  {:<32} SYMBOL", "SAMPLES", "%", "IMAGE");
    for s in syms.iter().take(10) {
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

/// Rows of the off-CPU text tables when `-n` does not say.
const OFF_CPU_ROWS: usize = 25;

/// `record --off-cpu`: blocked time per thread, on and off CPU per
/// component side by side, and where the threads waited.
fn off_cpu_section(o: &mut String, r: &Report, off: &super::offcpu::OffCpuReport) {
    let ms = |ns: u64| ns as f64 / 1e6;
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "Off-CPU time (blocked from switch-out to switch-in, sched_switch): {:.3} ms in {} block(s)",
        ms(off.total_ns),
        off.blocks
    );
    let _ = writeln!(o);
    let _ = writeln!(o, "Per thread, off CPU:");
    let _ = writeln!(o, "{:>12} {:>8} {:>9}  THREAD", "MS", "BLOCKS", "%");
    for t in &off.threads {
        let _ = writeln!(
            o,
            "{:>12.3} {:>8} {:>9.4}  {}[{}] tid {}",
            ms(t.ns),
            t.blocks,
            t.percent,
            t.comm,
            t.pid,
            t.tid
        );
    }
    // on and off CPU side by side, per component
    let mut comps: Vec<(&str, u64, u64)> = Vec::new();
    for c in &r.components {
        comps.push((c.component.as_str(), c.samples, 0));
    }
    for c in &off.components {
        match comps.iter_mut().find(|x| x.0 == c.component) {
            Some(x) => x.2 = c.samples,
            None => comps.push((c.component.as_str(), 0, c.samples)),
        }
    }
    let _ = writeln!(o);
    let _ = writeln!(o, "Per component, on and off CPU:");
    let _ = writeln!(o, "{:>10} {:>12}  COMPONENT", "ON SAMPLES", "OFF-CPU MS");
    for (c, on, offn) in comps {
        let _ = writeln!(o, "{on:>10} {:>12.3}  {c}", ms(offn));
    }
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "Off CPU, inclusive (the function or its callees blocked), ms:"
    );
    let _ = writeln!(o, "{:>12} {:>9}  {:<32} SYMBOL", "MS", "%", "IMAGE");
    for s in off.inclusive.iter().take(OFF_CPU_ROWS) {
        let _ = writeln!(
            o,
            "{:>12.3} {:>9.4}  {:<32} {}",
            ms(s.samples),
            s.percent,
            short(&s.image, 32),
            s.symbol
        );
    }
    if off.inclusive.len() > OFF_CPU_ROWS {
        let _ = writeln!(
            o,
            "  ... {} more (--json, --off-cpu-flame, --pprof)",
            off.inclusive.len() - OFF_CPU_ROWS
        );
    }
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
