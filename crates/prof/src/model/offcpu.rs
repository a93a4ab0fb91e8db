//! Off-CPU time (`record --off-cpu`): where threads were blocked, and for
//! how long, beside the on-CPU samples.
//!
//! The off-CPU path (src/bpf/offcpu.bpf.c) sums, in the kernel, the time
//! from a thread's switch-out while blocked to its next switch-in, per
//! (process, thread, kernel stack, user stack). The recorder resolves each
//! such place into a leaf frame (the innermost frame: the kernel's
//! `schedule` path, or the user frame when there is no kernel stack) and
//! its callers, in the session's one stack table, and keeps the totals
//! here ([`OffCpu`]); the session writes them as `offcpu.tsv`. The report
//! builds a second set of tables from them with the same
//! [`super::ReportBuilder`], whose counts are then nanoseconds
//! ([`OffCpuReport`]).
//!
//! Invariant: the sum of all nanoseconds fits a u64 (as [`super::Profile`]'s
//! counts), checked when a row is added.

use super::graph::StackGraph;
use super::image::Mode;
use super::profile::{CountOverflow, RowKey};
use super::report::{CompRow, SymRow};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Aggregation key of the off-CPU rows: one thread blocked at one place
/// (leaf `image`+`offset` and the callers' `stack` index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OffCpuKey {
    pub pid: u32,
    pub tid: u32,
    /// The leaf's mode (kernel unless no kernel stack was taken).
    pub mode: Mode,
    pub image: u32,
    pub offset: u64,
    pub stack: u32,
}

impl OffCpuKey {
    /// The row the report builder takes (no CPU, no tags, no cgroup: the
    /// off-CPU path records none of them).
    pub fn row_key(&self, words: usize) -> RowKey {
        RowKey {
            pid: self.pid,
            tid: self.tid,
            cpu: 0,
            mode: self.mode,
            image: self.image,
            offset: self.offset,
            tags: vec![0; words],
            stack: self.stack,
            // the off-CPU path records no cgroup (0: unknown)
            cgroup: 0,
        }
    }
}

/// Blocked time and blocks of one key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OffCpuTotals {
    pub ns: u64,
    pub blocks: u64,
}

/// The off-CPU rows of a recording.
#[derive(Debug, Clone, Default)]
pub struct OffCpu {
    rows: HashMap<OffCpuKey, OffCpuTotals>,
    total_ns: u64,
}

impl OffCpu {
    /// Adds blocked time to a row. Nothing changes when the total would
    /// overflow.
    pub fn add(&mut self, k: OffCpuKey, ns: u64, blocks: u64) -> Result<(), CountOverflow> {
        let total = self.total_ns.checked_add(ns).ok_or(CountOverflow)?;
        let e = self.rows.entry(k).or_default();
        e.ns += ns;
        e.blocks = e.blocks.saturating_add(blocks);
        self.total_ns = total;
        Ok(())
    }

    /// The sum of all rows' nanoseconds.
    pub fn total_ns(&self) -> u64 {
        self.total_ns
    }

    pub fn rows(&self) -> &HashMap<OffCpuKey, OffCpuTotals> {
        &self.rows
    }

    /// Rows sorted by key, for a stable file.
    pub fn sorted_rows(&self) -> Vec<(OffCpuKey, OffCpuTotals)> {
        let mut v: Vec<_> = self.rows.iter().map(|(k, t)| (*k, *t)).collect();
        v.sort_by_key(|(k, _)| *k);
        v
    }

    /// Blocked time per thread: ((pid, tid), totals), most first.
    pub fn per_thread(&self) -> Vec<((u32, u32), OffCpuTotals)> {
        let mut m: HashMap<(u32, u32), OffCpuTotals> = HashMap::new();
        for (k, t) in &self.rows {
            let e = m.entry((k.pid, k.tid)).or_default();
            // parts of the checked total
            e.ns += t.ns;
            e.blocks = e.blocks.saturating_add(t.blocks);
        }
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort_by(|a, b| b.1.ns.cmp(&a.1.ns).then(a.0.cmp(&b.0)));
        v
    }
}

/// What the off-CPU path recorded and lost (meta.json `off_cpu`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffCpuInfo {
    /// Blocked time charged (ns) and blocks, in the session.
    pub ns: u64,
    pub blocks: u64,
    /// Blocks not recorded: the count map was full.
    pub dropped_blocks: u64,
    pub dropped_ns: u64,
    /// Blocks not timed: the table of blocked threads was full.
    pub start_lost: u64,
    /// Stacks not stored (stack table full): those blocks lack a stack.
    pub stack_lost: u64,
    /// Blocks with neither a kernel nor a user stack: timed, not placed
    /// (not in offcpu.tsv).
    pub unstacked_blocks: u64,
    pub unstacked_ns: u64,
}

impl OffCpuInfo {
    /// The caveats of an off-CPU recording (every summary and report).
    pub fn caveats(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.dropped_blocks > 0 {
            v.push(format!(
                "off-CPU: {} block(s) ({:.3} s) not recorded: the in-kernel count map was full (more distinct (thread, stack) pairs than it holds)",
                self.dropped_blocks,
                self.dropped_ns as f64 / 1e9
            ));
        }
        if self.start_lost > 0 {
            v.push(format!(
                "off-CPU: {} block(s) not timed: more threads blocked at once than the table of blocked threads holds",
                self.start_lost
            ));
        }
        if self.stack_lost > 0 {
            v.push(format!(
                "off-CPU: {} stack(s) not stored (stack table full): those blocks are placed by the other stack only",
                self.stack_lost
            ));
        }
        if self.unstacked_blocks > 0 {
            v.push(format!(
                "off-CPU: {} block(s) ({:.3} s) had no stack at all and are left out of the off-CPU tables",
                self.unstacked_blocks,
                self.unstacked_ns as f64 / 1e9
            ));
        }
        v
    }
}

/// One thread's blocked time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThreadRow {
    pub pid: u32,
    pub tid: u32,
    /// The process's command name.
    pub comm: String,
    pub ns: u64,
    pub blocks: u64,
    /// Share of the report's off-CPU total.
    pub percent: f64,
}

/// The off-CPU half of a report: the same tables as the on-CPU half, in
/// nanoseconds blocked (each `samples` field is ns), and per thread.
#[derive(Debug, Clone, Serialize)]
pub struct OffCpuReport {
    /// Nanoseconds blocked in the report (after --pid / --comm).
    pub total_ns: u64,
    pub blocks: u64,
    pub threads: Vec<ThreadRow>,
    /// Where threads blocked: the leaf (the kernel's scheduling path).
    pub symbols: Vec<SymRow>,
    /// The functions on the stack while blocked (who waited).
    pub inclusive: Vec<SymRow>,
    pub components: Vec<CompRow>,
    /// The interned stacks (flame graph, pprof), counts in ns.
    #[serde(skip)]
    pub graph: StackGraph,
}

/// The function the kernel switches tasks in: a kernel stack taken at
/// sched_switch is cut to start there.
pub const SWITCH_FUNCTION: &str = "__schedule";

/// How deep [`from_switch`] looks for [`SWITCH_FUNCTION`].
const DISPATCH_FRAMES: usize = 8;

/// A kernel stack taken by the off-CPU program (leaf first) without the
/// frames above `__schedule`: the program's own and the tracepoint's
/// dispatch (`bpf_trace_run4`, sometimes `__traceiter_sched_switch`:
/// their number varies, so no fixed skip count is right). Unchanged when
/// `__schedule` is not among the first frames or kallsyms has no
/// addresses (the dispatch frames then stay in the stack).
pub fn from_switch<'a>(kernel: &'a [u64], ks: &super::Kallsyms) -> &'a [u64] {
    kernel
        .iter()
        .take(DISPATCH_FRAMES)
        .position(|&a| ks.lookup(a) == Some(SWITCH_FUNCTION))
        .map_or(kernel, |i| &kernel[i..])
}

/// Parses one data line of offcpu.tsv (line `n`): `pid tid mode image
/// offset ns blocks stack`, with `n_images` images and `n_stacks` stacks.
pub fn parse_line(
    n: usize,
    line: &str,
    n_images: usize,
    n_stacks: usize,
) -> Result<(OffCpuKey, OffCpuTotals), crate::parse::ParseError> {
    use crate::parse::{At, ParseError};
    let f: Vec<&str> = line.split('\t').collect();
    if f.len() != 8 {
        return Err(ParseError::new(
            At::Line(n),
            format!("{} tab-separated fields, 8 expected", f.len()),
        ));
    }
    let dec = |s: &str, what: &'static str| -> Result<u64, ParseError> {
        if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
            return Err(ParseError::new(
                At::Field(n, what),
                format!("{s:?} is not a decimal number"),
            ));
        }
        s.parse()
            .map_err(|_| ParseError::new(At::Field(n, what), format!("{s} is too large")))
    };
    let u32f = |s: &str, what: &'static str| -> Result<u32, ParseError> {
        u32::try_from(dec(s, what)?)
            .map_err(|_| ParseError::new(At::Field(n, what), format!("{s} is too large")))
    };
    let mode = match f[2] {
        "u" => Mode::User,
        "k" => Mode::Kernel,
        other => {
            return Err(ParseError::new(
                At::Field(n, "mode"),
                format!("{other:?} is neither u nor k"),
            ))
        }
    };
    let image = u32f(f[3], "image")?;
    if image as usize >= n_images {
        return Err(ParseError::new(
            At::Field(n, "image"),
            format!("image {image} is not in images.json ({n_images} images)"),
        ));
    }
    let offset = if f[4].is_empty() || !f[4].bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(ParseError::new(
            At::Field(n, "offset"),
            format!("{:?} is not a hex number", f[4]),
        ));
    } else {
        u64::from_str_radix(f[4], 16)
            .map_err(|_| ParseError::new(At::Field(n, "offset"), "too large"))?
    };
    let stack = u32f(f[7], "stack")?;
    if stack as usize >= n_stacks.max(1) {
        return Err(ParseError::new(
            At::Field(n, "stack"),
            format!(
                "stack {stack} is not in stacks.tsv ({} stacks)",
                n_stacks.max(1) - 1
            ),
        ));
    }
    Ok((
        OffCpuKey {
            pid: u32f(f[0], "pid")?,
            tid: u32f(f[1], "tid")?,
            mode,
            image,
            offset,
            stack,
        },
        OffCpuTotals {
            ns: dec(f[5], "ns")?,
            blocks: dec(f[6], "blocks")?,
        },
    ))
}

/// The text of one row of offcpu.tsv (see [`parse_line`]).
pub fn format_line(k: &OffCpuKey, t: &OffCpuTotals) -> String {
    format!(
        "{}\t{}\t{}\t{}\t{:x}\t{}\t{}\t{}",
        k.pid,
        k.tid,
        match k.mode {
            Mode::User => "u",
            Mode::Kernel => "k",
        },
        k.image,
        k.offset,
        t.ns,
        t.blocks,
        k.stack
    )
}

/// The header line of offcpu.tsv.
pub const HEADER: &str = "# pid\ttid\tmode\timage\toffset\tns\tblocks\tstack\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_bad_ones_are_refused() {
        let k = OffCpuKey {
            pid: 10,
            tid: 11,
            mode: Mode::Kernel,
            image: 1,
            offset: 0x1f0,
            stack: 2,
        };
        let t = OffCpuTotals {
            ns: 200_000_000,
            blocks: 1,
        };
        let l = format_line(&k, &t);
        assert_eq!(parse_line(1, &l, 2, 3).unwrap(), (k, t));
        // image or stack out of the tables, a bad mode, a field short
        assert!(parse_line(1, &l, 1, 3).is_err());
        assert!(parse_line(1, &l, 2, 2).is_err());
        assert!(parse_line(1, &l.replace("\tk\t", "\tx\t"), 2, 3).is_err());
        assert!(parse_line(1, "10\t11\tk\t1\t1f0\t5\t1", 2, 3).is_err());
        assert!(parse_line(1, &l.replace("200000000", "-1"), 2, 3).is_err());
    }

    #[test]
    fn kernel_stacks_start_at_the_switch() {
        let ks = crate::model::Kallsyms::parse(
            "ffffffff81000000 T bpf_trace_run4\nffffffff81000100 T __traceiter_sched_switch\nffffffff81000200 T __schedule\nffffffff81000300 T schedule\n",
        );
        let st = [
            0xffffffffc0000010,
            0xffffffff81000010,
            0xffffffff81000110,
            0xffffffff81000210,
            0xffffffff81000310,
        ];
        assert_eq!(from_switch(&st, &ks), &st[3..]);
        // without __schedule near the top, or without addresses: unchanged
        assert_eq!(from_switch(&st[4..], &ks), &st[4..]);
        assert_eq!(
            from_switch(&st, &crate::model::Kallsyms::default()),
            &st[..]
        );
    }

    #[test]
    fn totals_per_thread_and_overflow() {
        let mut o = OffCpu::default();
        let k = |tid, stack| OffCpuKey {
            pid: 1,
            tid,
            mode: Mode::Kernel,
            image: 0,
            offset: 0,
            stack,
        };
        o.add(k(2, 1), 300, 1).unwrap();
        o.add(k(2, 2), 200, 2).unwrap();
        o.add(k(3, 1), 100, 1).unwrap();
        o.add(k(2, 1), 50, 1).unwrap();
        let t = o.per_thread();
        assert_eq!(t[0].0, (1, 2));
        assert_eq!((t[0].1.ns, t[0].1.blocks), (550, 4));
        assert_eq!(t[1].1.ns, 100);
        assert_eq!(o.total_ns(), 650);
        assert!(o.add(k(3, 1), u64::MAX, 1).is_err());
        assert_eq!(o.total_ns(), 650);
    }
}
