//! `--count`: per-call counts, errors and times, summarised at the end
//! like `strace -c` (text, or JSON).
//!
//! The counters live in a [`CountTable`] shared (an `Arc`) between the
//! agent, which adds to it in `after`, and whoever reports: the executive
//! at the guest's end, `mantle exec status` meanwhile. It is a flat array
//! of atomics indexed by call number, allocated once at start-up, so that
//! counting takes no lock and allocates nothing on the interposition path,
//! and a reader never stops the executive. Counters are relaxed: a summary
//! taken while calls are counted may mix a call's count with the previous
//! call's time, which a report can live with.
//!
//! What is counted, per call: calls; errors (a result in -4095..=-1, or a
//! `Fail` whose result the executive did not report); unseen (the kernel
//! ran the call in the guest, so its result is unknown); time in the
//! executive and in the kernel (total and largest). A `Delay` is not the
//! end of a call and is not counted; the call is counted once it ends.

use super::errno;
use crate::agent::{Agent, Call, Decision, Guest, Outcome, Times};
use crate::sysno::Sysno;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

#[derive(Debug, Default)]
struct Counters {
    calls: AtomicU64,
    errors: AtomicU64,
    unseen: AtomicU64,
    executive_ns: AtomicU64,
    executive_max_ns: AtomicU64,
    kernel_ns: AtomicU64,
}

/// The counters of every call, by number.
#[derive(Debug)]
pub struct CountTable {
    by_nr: Box<[Counters]>,
}

impl Default for CountTable {
    fn default() -> Self {
        Self::new()
    }
}

impl CountTable {
    /// A table with a slot for every call the table of numbers knows.
    pub fn new() -> CountTable {
        let n = Sysno::all().map(|s| s.0 as usize + 1).max().unwrap_or(0);
        CountTable {
            by_nr: (0..n).map(|_| Counters::default()).collect(),
        }
    }

    /// Counts one ended call. Numbers past the table are not counted (no
    /// agent wants them: the filter is made from the table).
    pub fn record(&self, nr: Sysno, d: &Decision, o: Outcome, t: Times) {
        let Some(c) = self.by_nr.get(nr.0 as usize) else {
            return;
        };
        c.calls.fetch_add(1, Relaxed);
        let failed = match (o, d) {
            (Outcome::Result(r), _) => errno::of_result(r).is_some(),
            (Outcome::Unseen, Decision::Fail(_)) => true,
            (Outcome::Unseen, Decision::Return(v)) => errno::of_result(*v).is_some(),
            (Outcome::Unseen, _) => {
                c.unseen.fetch_add(1, Relaxed);
                false
            }
        };
        if failed {
            c.errors.fetch_add(1, Relaxed);
        }
        c.executive_ns.fetch_add(t.executive_ns, Relaxed);
        c.executive_max_ns.fetch_max(t.executive_ns, Relaxed);
        c.kernel_ns.fetch_add(t.kernel_ns, Relaxed);
    }

    /// Adds counts taken elsewhere (the fast path's stub counts in the
    /// guest, crate::fast): `calls` calls of `nr`, `errors` of them failed
    /// (bounded by `calls`: the numbers come from guest memory), `ns` spent
    /// from trap to result (kept as kernel time: there is no executive
    /// time without a hand-off).
    pub fn add(&self, nr: Sysno, calls: u64, errors: u64, ns: u64) {
        let Some(c) = self.by_nr.get(nr.0 as usize) else {
            return;
        };
        c.calls.fetch_add(calls, Relaxed);
        c.errors.fetch_add(errors.min(calls), Relaxed);
        c.kernel_ns.fetch_add(ns, Relaxed);
    }

    /// The calls seen so far, most time first.
    pub fn summary(&self) -> CountSummary {
        let mut rows: Vec<CountRow> = self
            .by_nr
            .iter()
            .enumerate()
            .filter(|(_, c)| c.calls.load(Relaxed) > 0)
            .map(|(nr, c)| CountRow::new(Sysno(nr as u32), c))
            .collect();
        rows.sort_by(|a, b| {
            (b.executive_ns + b.kernel_ns)
                .cmp(&(a.executive_ns + a.kernel_ns))
                .then(b.calls.cmp(&a.calls))
                .then(a.call.cmp(&b.call))
        });
        let mut total = CountRow {
            call: "total".into(),
            nr: None,
            ..CountRow::default()
        };
        for r in &rows {
            total.calls += r.calls;
            total.errors += r.errors;
            total.unseen += r.unseen;
            total.executive_ns += r.executive_ns;
            total.executive_max_ns = total.executive_max_ns.max(r.executive_max_ns);
            total.kernel_ns += r.kernel_ns;
        }
        CountSummary { rows, total }
    }
}

/// One call's line of the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CountRow {
    pub call: String,
    /// None for the total.
    pub nr: Option<u32>,
    pub calls: u64,
    pub errors: u64,
    pub unseen: u64,
    pub executive_ns: u64,
    pub executive_max_ns: u64,
    pub kernel_ns: u64,
}

impl CountRow {
    fn new(nr: Sysno, c: &Counters) -> CountRow {
        CountRow {
            call: nr.name().into_owned(),
            nr: Some(nr.0),
            calls: c.calls.load(Relaxed),
            errors: c.errors.load(Relaxed),
            unseen: c.unseen.load(Relaxed),
            executive_ns: c.executive_ns.load(Relaxed),
            executive_max_ns: c.executive_max_ns.load(Relaxed),
            kernel_ns: c.kernel_ns.load(Relaxed),
        }
    }

    /// Average ns per call in the executive.
    pub fn executive_avg_ns(&self) -> u64 {
        self.executive_ns.checked_div(self.calls).unwrap_or(0)
    }

    /// Average ns per call in the kernel (over all calls, seen or not).
    pub fn kernel_avg_ns(&self) -> u64 {
        self.kernel_ns.checked_div(self.calls).unwrap_or(0)
    }
}

/// The summary the executive prints at the end (`--count`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CountSummary {
    /// Most time (executive + kernel) first.
    pub rows: Vec<CountRow>,
    pub total: CountRow,
}

impl CountSummary {
    /// A table like `strace -c`: share of the time, totals and averages
    /// in µs, counts; one row per call, then the total.
    pub fn render_text(&self) -> String {
        let all = (self.total.executive_ns + self.total.kernel_ns).max(1) as f64;
        let mut s = String::new();
        let head = [
            "% time",
            "exec us",
            "exec us/call",
            "kern us",
            "kern us/call",
            "calls",
            "errors",
            "unseen",
            "syscall",
        ];
        let _ = writeln!(
            s,
            "{:>6} {:>11} {:>12} {:>11} {:>12} {:>9} {:>9} {:>9} {}",
            head[0], head[1], head[2], head[3], head[4], head[5], head[6], head[7], head[8]
        );
        let rule = "------ ----------- ------------ ----------- ------------ --------- --------- --------- ----------------";
        let _ = writeln!(s, "{rule}");
        let us = |ns: u64| format!("{:.3}", ns as f64 / 1e3);
        let line = |s: &mut String, r: &CountRow| {
            let pct = (r.executive_ns + r.kernel_ns) as f64 * 100.0 / all;
            let _ = writeln!(
                s,
                "{:>6.2} {:>11} {:>12} {:>11} {:>12} {:>9} {:>9} {:>9} {}",
                pct,
                us(r.executive_ns),
                us(r.executive_avg_ns()),
                us(r.kernel_ns),
                us(r.kernel_avg_ns()),
                r.calls,
                r.errors,
                r.unseen,
                r.call
            );
        };
        for r in &self.rows {
            line(&mut s, r);
        }
        let _ = writeln!(s, "{rule}");
        line(&mut s, &self.total);
        s
    }

    /// The summary as one JSON object: `{"rows": [CountRow...], "total":
    /// CountRow}`, every time in ns.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// The agent: counts every call it watches.
pub struct Count {
    table: Arc<CountTable>,
    wants: Vec<Sysno>,
}

impl Count {
    pub fn new(table: Arc<CountTable>, mut wants: Vec<Sysno>) -> Count {
        wants.sort();
        wants.dedup();
        Count { table, wants }
    }
}

impl Agent for Count {
    fn name(&self) -> &str {
        "count"
    }
    fn wants(&self) -> Vec<Sysno> {
        self.wants.clone()
    }
    fn before(&mut self, _: &Call, _: &mut dyn Guest) -> Decision {
        Decision::Continue
    }
    fn after(&mut self, call: &Call, d: &Decision, o: Outcome, t: Times) {
        if !matches!(d, Decision::Delay(_)) {
            self.table.record(call.nr, d, o, t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nr(n: &str) -> Sysno {
        Sysno::from_name(n).unwrap()
    }

    fn call(n: &str) -> Call {
        Call {
            tid: 1,
            nr: nr(n),
            args: [0; 6],
            ip: 0,
            received_ns: 0,
            start_ns: 0,
        }
    }

    fn t(k: u64, e: u64) -> Times {
        Times {
            kernel_ns: k,
            executive_ns: e,
        }
    }

    #[test]
    fn counts_errors_unseen_and_times() {
        let table = Arc::new(CountTable::new());
        let mut c = Count::new(table.clone(), vec![nr("openat"), nr("getppid")]);
        let o = call("openat");
        c.after(&o, &Decision::Continue, Outcome::Unseen, t(0, 100));
        c.after(&o, &Decision::Fail(13), Outcome::Result(-13), t(0, 300));
        c.after(&o, &Decision::Fail(2), Outcome::Unseen, t(0, 200));
        c.after(
            &o,
            &Decision::Delay(std::time::Duration::from_millis(1)),
            Outcome::Unseen,
            t(0, 50),
        );
        let g = call("getppid");
        for _ in 0..4 {
            c.after(
                &g,
                &Decision::Perform(crate::agent::Perform {
                    nr: g.nr,
                    args: g.args,
                    path: None,
                }),
                Outcome::Result(1),
                t(1000, 2000),
            );
        }
        let s = table.summary();
        assert_eq!(s.rows.len(), 2);
        // most time first
        assert_eq!(s.rows[0].call, "getppid");
        assert_eq!(s.rows[0].calls, 4);
        assert_eq!(s.rows[0].errors, 0);
        assert_eq!(s.rows[0].kernel_ns, 4000);
        assert_eq!(s.rows[0].kernel_avg_ns(), 1000);
        assert_eq!(s.rows[0].executive_avg_ns(), 2000);
        let r = &s.rows[1];
        assert_eq!((r.calls, r.errors, r.unseen), (3, 2, 1));
        assert_eq!(r.executive_ns, 600);
        assert_eq!(r.executive_max_ns, 300);
        assert_eq!(r.nr, Some(libc::SYS_openat as u32));
        assert_eq!(s.total.calls, 7);
        assert_eq!(s.total.errors, 2);
        assert_eq!(s.total.executive_ns, 8600);
        assert_eq!(s.total.nr, None);
    }

    #[test]
    fn text_and_json_summaries() {
        let table = CountTable::new();
        table.record(
            nr("openat"),
            &Decision::Continue,
            Outcome::Result(3),
            t(1500, 2500),
        );
        table.record(
            nr("read"),
            &Decision::Continue,
            Outcome::Result(-4),
            t(500, 500),
        );
        let s = table.summary();
        let text = s.render_text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6, "{text}");
        assert!(lines[0].starts_with("% time"));
        assert!(lines[2].starts_with(" 80.00       2.500        2.500       1.500        1.500         1         0         0 openat"), "{text}");
        assert!(lines[3].ends_with(" read"), "{text}");
        assert!(
            lines[5].ends_with(" total") && lines[5].starts_with("100.00"),
            "{text}"
        );
        let j = s.to_json();
        assert_eq!(j["rows"][0]["call"], "openat");
        assert_eq!(j["rows"][1]["errors"], 1);
        assert_eq!(j["total"]["calls"], 2);
        assert!(j["total"]["nr"].is_null());
    }

    #[test]
    fn empty_and_out_of_table() {
        let table = CountTable::new();
        table.record(
            Sysno(100_000),
            &Decision::Continue,
            Outcome::Unseen,
            t(0, 1),
        );
        let s = table.summary();
        assert!(s.rows.is_empty());
        assert_eq!(s.total.calls, 0);
        assert!(s.render_text().contains("total"));
        // every call of the table has a slot
        for n in Sysno::all() {
            table.record(n, &Decision::Continue, Outcome::Unseen, t(0, 1));
        }
        assert_eq!(table.summary().rows.len(), Sysno::all().count());
    }
}
