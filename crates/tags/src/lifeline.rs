//! Lifelines for people and tools, rendered in one place ([`render`]) for
//! every command that prints one (`mantle tag lifeline`, `mantle demo`): a
//! text table, a narrative for the demo, the JSON of
//! [`crate::lifeline_file`], the Chrome trace-event format (opens in
//! Perfetto and chrome://tracing), an SVG plot in the style of the mTags
//! paper's Figure 4 (time across, one row per receiving thread, a mark per
//! reception); and the merge of lifelines collected on several machines in
//! causal order (Lamport clocks; the paper, section 4, names a logical clock
//! as required for ordering distributed lifelines). Pure: no system calls.

use crate::text::term;
use crate::ReceptionInfo;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// How a lifeline is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A table, one line per reception (`mantle tag lifeline`).
    Text,
    /// One sentence per reception, in milliseconds from the first
    /// (`mantle demo`).
    Story,
    /// Pretty JSON ([`crate::lifeline_file::to_json`]).
    Json,
    /// A Chrome trace ([`chrome_trace`]), one line.
    Chrome,
    /// An SVG plot ([`svg`]) under `title`.
    Svg,
}

/// A lifeline as text in `format` (`title` heads the SVG plot; the other
/// formats have none). Every format but SVG ends with a newline.
pub fn render(l: &[ReceptionInfo], format: Format, title: &str) -> String {
    match format {
        Format::Text => text(l),
        Format::Story => story(l),
        Format::Json => {
            serde_json::to_string_pretty(&crate::lifeline_file::to_json(l))
                .expect("a lifeline serializes")
                + "\n"
        }
        Format::Chrome => {
            serde_json::to_string(&chrome_trace(l)).expect("a lifeline serializes") + "\n"
        }
        Format::Svg => svg(l, title),
    }
}

/// A lifeline as a table, oldest first; merged from several machines,
/// ordered by Lamport clock, with the hosts.
fn text(l: &[ReceptionInfo]) -> String {
    let mut v = Vec::new();
    write_text(l, &mut v).expect("writing to memory");
    String::from_utf8(v).expect("the rows are UTF-8")
}

/// The table of [`Format::Text`], written row by row to `w`: a merge of
/// hundreds of thousands of records never builds the whole table in
/// memory (issue 32: 400 000 records took 1.18 GB as one string).
pub fn write_text(l: &[ReceptionInfo], w: &mut dyn std::io::Write) -> std::io::Result<()> {
    let multi = multi_host(l);
    let t0 = l.iter().map(|r| r.ts_ns).min().unwrap_or(0);
    writeln!(
        w,
        "{:>6} {:>12} {:<15} {:>8} {:>8} {:<16} {:>8} {:>8} {:>4}{}",
        "SEQ",
        if multi { "LAMPORT" } else { "T+us" },
        "VIA",
        "RX_TID",
        "RX_PID",
        "RX_COMM",
        "TX_TID",
        "TX_PID",
        "TTL",
        if multi { "  HOST <- FROM" } else { "" }
    )?;
    for r in l {
        let when = if multi {
            r.lamport.to_string()
        } else {
            format!("{:.1}", (r.ts_ns - t0) as f64 / 1e3)
        };
        let ttl = if r.ttl == crate::abi::MT_TTL_INF as u8 {
            "inf".to_string()
        } else {
            r.ttl.to_string()
        };
        write!(
            w,
            "{:>6} {:>12} {:<15} {:>8} {:>8} {:<16} {:>8} {:>8} {:>4}",
            r.seq,
            when,
            term(&r.via),
            r.rx_tid,
            r.rx_pid,
            term(&r.rx_comm),
            r.tx_tid,
            r.tx_pid,
            ttl
        )?;
        if multi {
            write!(w, "  {} <- {}", term(&r.host), term(&r.tx_host))?;
        }
        writeln!(w)?;
    }
    Ok(())
}

/// A lifeline told: when (ms after the first record), who received the
/// tag, and how.
fn story(l: &[ReceptionInfo]) -> String {
    let t0 = l.first().map(|r| r.ts_ns).unwrap_or(0);
    let mut s = String::new();
    for r in l {
        let how = match r.via.as_str() {
            "set" => "set by `mantle tag run`".to_string(),
            "fork" => format!("inherited at fork from pid {}", r.tx_pid),
            via => format!("request over {} from pid {}", term(via), r.tx_pid),
        };
        let _ = writeln!(
            s,
            "  +{:>8.3} ms  {:<8} pid {:<7} {}",
            r.ts_ns.saturating_sub(t0) as f64 / 1e6,
            term(&r.rx_comm),
            r.rx_pid,
            how
        );
    }
    s
}

/// Puts lifelines together for output. One lifeline (this machine's ring,
/// or one saved file) keeps its own order: on one machine that is the order
/// receptions happened in (the ring's sequence), which Lamport clocks do
/// not give: they are per thread, so a thread that got the tag late from a
/// short chain has a smaller clock than one that got it earlier at the end
/// of a long chain.
///
/// Several lifelines (from several machines) are merged into one causal
/// order: by Lamport clock, then machine, then the machine's own reception
/// sequence. If a reception happened before another (same thread, or
/// through the message that carried the tag), its Lamport clock is smaller,
/// so it comes first; records of one machine may then leave their
/// sequence, as there is no common clock to keep both orders.
pub fn merge(mut parts: Vec<Vec<ReceptionInfo>>) -> Vec<ReceptionInfo> {
    if parts.len() == 1 {
        return parts.pop().unwrap_or_default();
    }
    let mut all: Vec<ReceptionInfo> = parts.drain(..).flatten().collect();
    // The documented order first, then every other field: a total order,
    // so that the result does not depend on the order of the files and a
    // record given twice (two files that overlap) sorts next to itself.
    all.sort_by(merge_order);
    // Only a record equal in every field is the same reception: one host's
    // sequence numbers start again at each load, so two loads' files share
    // (host, seq, tag) for different receptions, which must both stay.
    all.dedup();
    all
}

/// Order of receptions in a merge: Lamport clock, host, the host's
/// sequence, then the remaining fields to break ties.
fn merge_order(a: &ReceptionInfo, b: &ReceptionInfo) -> std::cmp::Ordering {
    (a.lamport, &a.host, a.seq, &a.tag, a.ts_ns)
        .cmp(&(b.lamport, &b.host, b.seq, &b.tag, b.ts_ns))
        .then_with(|| {
            (a.rx_tid, a.rx_pid, &a.rx_comm, a.tx_tid, a.tx_pid)
                .cmp(&(b.rx_tid, b.rx_pid, &b.rx_comm, b.tx_tid, b.tx_pid))
        })
        .then_with(|| (&a.via, a.ttl, &a.tx_host).cmp(&(&b.via, b.ttl, &b.tx_host)))
}

/// Whether the receptions come from more than one machine.
fn multi_host(l: &[ReceptionInfo]) -> bool {
    l.windows(2).any(|w| w[0].host != w[1].host)
}

/// Stable small integers for (host, pid) pairs: Chrome traces key on pid,
/// and pids from different machines may collide.
fn pid_ids(l: &[ReceptionInfo]) -> BTreeMap<(String, u32), u64> {
    let mut ids = BTreeMap::new();
    for r in l {
        for key in [(r.host.clone(), r.rx_pid), (r.tx_host.clone(), r.tx_pid)] {
            let n = ids.len() as u64 + 1;
            ids.entry(key).or_insert(n);
        }
    }
    ids
}

/// The Chrome trace-event JSON of a lifeline. Each reception is a short
/// slice on the receiving thread, linked by a flow arrow from a slice on the
/// sending thread. Time is real time (µs from the first reception) for one
/// machine, and the Lamport clock for lifelines merged from several.
pub fn chrome_trace(l: &[ReceptionInfo]) -> Value {
    let multi = multi_host(l);
    let t0 = l.iter().map(|r| r.ts_ns).min().unwrap_or(0);
    let ts = |r: &ReceptionInfo| -> f64 {
        if multi {
            r.lamport as f64 * 10.0
        } else {
            (r.ts_ns - t0) as f64 / 1e3
        }
    };
    let ids = pid_ids(l);
    let mut ev = Vec::new();
    let mut names: BTreeMap<u64, String> = BTreeMap::new();
    for (i, r) in l.iter().enumerate() {
        let rx = ids[&(r.host.clone(), r.rx_pid)];
        names.insert(
            rx,
            if multi {
                format!("{}[{}]@{}", r.rx_comm, r.rx_pid, r.host)
            } else {
                format!("{}[{}]", r.rx_comm, r.rx_pid)
            },
        );
        let t = ts(r);
        let args = json!({
            "tag": r.tag, "via": r.via, "ttl": r.ttl, "from_pid": r.tx_pid, "from_tid": r.tx_tid,
            "from_host": r.tx_host, "lamport": r.lamport,
        });
        ev.push(
            json!({"name": format!("{} via {}", r.tag, r.via), "cat": "mantle.tag", "ph": "X",
            "ts": t, "dur": 1.0, "pid": rx, "tid": r.rx_tid, "args": args}),
        );
        if r.via != "set" && (r.tx_pid, &r.tx_host) != (r.rx_pid, &r.host) {
            let tx = ids[&(r.tx_host.clone(), r.tx_pid)];
            // The record's place in the lifeline: unique, where host, seq
            // and tag are not (a lifeline may repeat them, and host and
            // tag names may hold the separator).
            let id = i;
            ev.push(
                json!({"name": format!("send {}", r.tag), "cat": "mantle.tag", "ph": "X",
                "ts": t - 0.5, "dur": 0.5, "pid": tx, "tid": r.tx_tid}),
            );
            ev.push(json!({"name": "tag", "cat": "mantle.tag", "ph": "s", "id": id, "ts": t - 0.5, "pid": tx, "tid": r.tx_tid}));
            ev.push(json!({"name": "tag", "cat": "mantle.tag", "ph": "f", "bp": "e", "id": id, "ts": t, "pid": rx, "tid": r.rx_tid}));
        }
    }
    // Processes seen only as senders (the sending machine's file is not in
    // the merge, or the ring wrapped past their own reception): their
    // comm is unknown, but without a name the viewer shows our internal id
    // as if it were a pid.
    let hosts = ids
        .keys()
        .map(|k| &k.0)
        .collect::<std::collections::BTreeSet<_>>();
    for ((host, pid), id) in &ids {
        names.entry(*id).or_insert_with(|| {
            if hosts.len() > 1 {
                format!("[{pid}]@{host}")
            } else {
                format!("[{pid}]")
            }
        });
    }
    for (pid, name) in names {
        ev.push(json!({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}}));
    }
    json!({ "traceEvents": ev, "displayTimeUnit": "ms",
            "otherData": { "clock": if multi { "lamport" } else { "monotonic" } } })
}

/// Colour of an IPC kind in the plot.
fn colour(via: &str) -> &'static str {
    match via {
        "set" => "#444444",
        "fork" => "#8c564b",
        "pipe" => "#1f77b4",
        "unix-stream" | "unix-seqpacket" => "#2ca02c",
        "unix-dgram" => "#98df8a",
        "tcp" => "#d62728",
        "udp" => "#ff9896",
        "signal" => "#9467bd",
        "shm" => "#bcbd22",
        "mq" => "#17becf",
        "eventfd" => "#e377c2",
        _ => "#7f7f7f",
    }
}

/// Text from the records (command names, hosts, IPC names of a merged
/// file) as SVG text or attribute: markup characters escaped, and the
/// characters XML 1.0 forbids even as references (control characters, which
/// any process can put in its comm; U+FFFE, U+FFFF) replaced by U+FFFD, or
/// the whole plot would fail to open.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c < ' ' || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// Receptions an SVG plot draws one by one; beyond, it aggregates.
pub const SVG_MAX_MARKS: usize = 5000;
/// Threads an SVG plot gives a row each; the others share one more row.
pub const SVG_MAX_ROWS: usize = 200;

/// An SVG plot of a lifeline in the style of the paper's Figure 4: time
/// across, one row per receiving thread (grouped by process, in order of
/// first reception), a mark per reception coloured by the IPC that carried
/// it, and a faint line from the sender's row to the receiver's.
pub fn svg(l: &[ReceptionInfo], title: &str) -> String {
    let multi = multi_host(l);
    let t0 = l.iter().map(|r| r.ts_ns).min().unwrap_or(0);
    let x_of = |r: &ReceptionInfo| -> f64 {
        if multi {
            r.lamport as f64
        } else {
            (r.ts_ns - t0) as f64 / 1e6
        }
    };
    let span = l.iter().map(x_of).fold(0.0f64, f64::max).max(1e-3);
    // rows: receiving threads in order of first appearance, at most
    // SVG_MAX_ROWS; the threads after those share one last row
    let mut rows: Vec<(String, u32, u32)> = Vec::new();
    let mut index: HashMap<(String, u32, u32), usize> = HashMap::new();
    let mut label: BTreeMap<usize, String> = BTreeMap::new();
    let mut folded = 0usize;
    for r in l {
        let key = (r.host.clone(), r.rx_pid, r.rx_tid);
        let i = match index.get(&key) {
            Some(&i) => i,
            None if rows.len() < SVG_MAX_ROWS => {
                rows.push(key.clone());
                index.insert(key, rows.len() - 1);
                rows.len() - 1
            }
            None => {
                folded += 1;
                index.insert(key, SVG_MAX_ROWS);
                continue;
            }
        };
        if i == SVG_MAX_ROWS {
            continue;
        }
        // the last name seen: after exec, the program rather than the shell
        let host = if multi {
            format!("@{}", r.host)
        } else {
            String::new()
        };
        let tid = if r.rx_tid != r.rx_pid {
            format!("/{}", r.rx_tid)
        } else {
            String::new()
        };
        label.insert(i, format!("{}[{}{}]{}", r.rx_comm, r.rx_pid, tid, host));
    }
    if folded > 0 {
        rows.push((String::new(), 0, 0));
        label.insert(SVG_MAX_ROWS, format!("{folded} more thread(s)"));
    }
    // Beyond SVG_MAX_MARKS receptions a mark per reception is unreadable
    // (and the file huge): one mark per thread, pixel column and kind,
    // with its count, and the title says so.
    let aggregate = l.len() > SVG_MAX_MARKS;
    let title = if aggregate || folded > 0 {
        let mut t = format!("{title} (");
        if aggregate {
            t += &format!(
                "aggregated: one mark per thread, 4-pixel column and kind, of {} receptions",
                l.len()
            );
        }
        if folded > 0 {
            if aggregate {
                t += "; ";
            }
            t += &format!("the last row holds {folded} more thread(s)");
        }
        t + ")"
    } else {
        title.to_string()
    };
    let title = title.as_str();
    let (left, top, row_h, width) = (210.0, 50.0, 22.0, 760.0);
    let height = top + row_h * rows.len().max(1) as f64 + 70.0;
    let total_w = left + width + 30.0;
    let xpx = |x: f64| left + x / span * width;
    let row_y = |host: &str, pid: u32, tid: u32| -> Option<f64> {
        index
            .get(&(host.to_string(), pid, tid))
            .map(|&i| top + row_h * i.min(rows.len() - 1) as f64 + row_h / 2.0)
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" font-size="14" font-weight="bold">{}</text>"#,
        left,
        esc(title)
    );
    for i in 0..rows.len() {
        let y = top + row_h * i as f64;
        if i % 2 == 0 {
            let _ = writeln!(
                s,
                r##"<rect x="{left}" y="{y}" width="{width}" height="{row_h}" fill="#f4f4f4"/>"##
            );
        }
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            left - 6.0,
            y + row_h * 0.7,
            esc(&label[&i])
        );
    }
    // axis with ~8 ticks
    let axis_y = top + row_h * rows.len() as f64 + 4.0;
    let _ = writeln!(
        s,
        r#"<line x1="{left}" y1="{axis_y}" x2="{}" y2="{axis_y}" stroke="black"/>"#,
        left + width
    );
    let step = nice_step(span / 8.0);
    let mut t = 0.0;
    while t <= span + 1e-9 {
        let x = xpx(t);
        let _ = writeln!(
            s,
            r#"<line x1="{x}" y1="{axis_y}" x2="{x}" y2="{}" stroke="black"/><text x="{x}" y="{}" text-anchor="middle">{}</text>"#,
            axis_y + 4.0,
            axis_y + 16.0,
            fmt_tick(t)
        );
        t += step;
    }
    let unit = if multi {
        "Lamport clock"
    } else {
        "time since the first reception (ms)"
    };
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{unit}</text>"#,
        left + width / 2.0,
        axis_y + 32.0
    );
    if aggregate {
        let mut bins: BTreeMap<(u64, u32, &str), u64> = BTreeMap::new();
        for r in l {
            let Some(y) = row_y(&r.host, r.rx_pid, r.rx_tid) else {
                continue;
            };
            // 4-pixel columns: at most SVG_MAX_ROWS x 190 marks
            let px = (x_of(r) / span * width) as u32 / 4 * 4;
            *bins.entry((y.to_bits(), px, r.via.as_str())).or_default() += 1;
        }
        for ((y, px, via), n) in bins {
            let y = f64::from_bits(y);
            let _ = writeln!(
                s,
                r#"<rect x="{}" y="{}" width="4" height="{}" fill="{}"><title>{n} reception(s) via {}</title></rect>"#,
                left + px as f64,
                y - row_h * 0.35,
                row_h * 0.7,
                colour(via),
                esc(via),
            );
        }
    }
    // sender -> receiver lines, then marks
    for r in l.iter().take(if aggregate { 0 } else { l.len() }) {
        let (Some(ry), Some(sy)) = (
            row_y(&r.host, r.rx_pid, r.rx_tid),
            row_y(&r.tx_host, r.tx_pid, r.tx_tid),
        ) else {
            continue;
        };
        if r.via == "set" || (ry - sy).abs() < 0.1 {
            continue;
        }
        let x = xpx(x_of(r));
        let _ = writeln!(
            s,
            r#"<line x1="{x}" y1="{sy}" x2="{x}" y2="{ry}" stroke="{}" stroke-opacity="0.25"/>"#,
            colour(&r.via)
        );
    }
    for r in l.iter().take(if aggregate { 0 } else { l.len() }) {
        let Some(y) = row_y(&r.host, r.rx_pid, r.rx_tid) else {
            continue;
        };
        let x = xpx(x_of(r));
        let _ = writeln!(
            s,
            r#"<rect x="{}" y="{}" width="3" height="{}" fill="{}"><title>{} via {} from pid {} (ttl {})</title></rect>"#,
            x - 1.5,
            y - row_h * 0.35,
            row_h * 0.7,
            colour(&r.via),
            esc(&r.tag),
            esc(&r.via),
            r.tx_pid,
            r.ttl
        );
    }
    // legend of the kinds present
    let mut kinds: Vec<&str> = l.iter().map(|r| r.via.as_ref()).collect();
    kinds.sort();
    kinds.dedup();
    let mut lx = left;
    for k in kinds {
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="30" width="10" height="10" fill="{}"/><text x="{}" y="39">{}</text>"#,
            colour(k),
            lx + 14.0,
            esc(k)
        );
        lx += 24.0 + 7.0 * k.len() as f64;
    }
    s.push_str("</svg>\n");
    s
}

fn nice_step(raw: f64) -> f64 {
    let p = 10f64.powf(raw.max(1e-9).log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= raw {
            return m * p;
        }
    }
    10.0 * p
}

fn fmt_tick(t: f64) -> String {
    if t == t.trunc() {
        format!("{t:.0}")
    } else if t * 10.0 == (t * 10.0).trunc() {
        format!("{t:.1}")
    } else {
        format!("{t:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(
        host: &str,
        seq: u64,
        lamport: u64,
        rx: u32,
        tx: u32,
        via: &'static str,
        ts_ms: u64,
    ) -> ReceptionInfo {
        ReceptionInfo {
            lamport,
            ttl: 3,
            ..crate::test_reception(seq, ts_ms * 1_000_000, rx, tx, via, host)
        }
    }

    /// The one renderer: the table (real time on one machine, Lamport
    /// clock and hosts across several, "inf" for an unlimited TTL), the
    /// demo's story, and the JSON and trace formats of their own functions.
    #[test]
    fn render_every_format() {
        let mut l = vec![
            rec("h", 1, 1, 10, 10, "set", 0),
            rec("h", 2, 2, 11, 10, "fork", 2),
            rec("h", 3, 3, 12, 11, "pipe", 5),
        ];
        l[0].ttl = crate::abi::MT_TTL_INF as u8;
        let t = render(&l, Format::Text, "");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert!(
            lines[0].contains("T+us") && !lines[0].contains("HOST"),
            "{t}"
        );
        assert!(lines[1].ends_with(" inf"), "{t}");
        assert!(
            lines[3].contains(" 5000.0 ") && lines[3].ends_with("   3"),
            "{t}"
        );
        let story = render(&l, Format::Story, "");
        assert_eq!(
            story,
            "  +   0.000 ms  p10      pid 10      set by `mantle tag run`\n\
             \x20 +   2.000 ms  p11      pid 11      inherited at fork from pid 10\n\
             \x20 +   5.000 ms  p12      pid 12      request over pipe from pid 11\n"
        );
        let json: serde_json::Value =
            serde_json::from_str(&render(&l, Format::Json, "")).expect("json");
        assert_eq!(json, crate::lifeline_file::to_json(&l));
        let chrome: serde_json::Value =
            serde_json::from_str(&render(&l, Format::Chrome, "")).expect("json");
        assert_eq!(chrome, chrome_trace(&l));
        assert_eq!(render(&l, Format::Svg, "x"), svg(&l, "x"));
        l[2].host = "g".into();
        let t = render(&l, Format::Text, "");
        assert!(
            t.starts_with(&format!("{:>6} {:>12}", "SEQ", "LAMPORT")),
            "{t}"
        );
        assert!(
            t.lines().nth(3).is_some_and(|x| x.ends_with("  g <- h")),
            "{t}"
        );
    }

    #[test]
    fn merge_orders_by_lamport_then_host() {
        let a = vec![
            rec("a", 1, 1, 10, 10, "set", 0),
            rec("a", 2, 2, 11, 10, "pipe", 5),
        ];
        let mut b = vec![
            rec("b", 1, 4, 20, 11, "tcp", 1),
            rec("b", 2, 3, 21, 20, "pipe", 0),
        ];
        b[0].tx_host = "a".into();
        let m = merge(vec![b, a]);
        let order: Vec<(String, u64)> = m.iter().map(|r| (r.host.clone(), r.lamport)).collect();
        assert_eq!(
            order,
            vec![
                ("a".into(), 1),
                ("a".into(), 2),
                ("b".into(), 3),
                ("b".into(), 4)
            ]
        );
        // merging a lifeline with itself changes nothing
        assert_eq!(merge(vec![m.clone(), m.clone()]).len(), 4);
    }

    /// One machine's lifeline is printed as it happened: A is given the
    /// tag (clock 1), passes it to B (3), B to C (5), and then A to D (4):
    /// D's clock is below C's although D got the tag last.
    #[test]
    fn one_lifeline_keeps_reception_order() {
        let l = vec![
            rec("h", 1, 1, 10, 10, "set", 0),
            rec("h", 2, 3, 11, 10, "pipe", 1),
            rec("h", 3, 5, 12, 11, "pipe", 2),
            rec("h", 4, 4, 13, 10, "pipe", 3),
        ];
        let seqs = |m: &[ReceptionInfo]| m.iter().map(|r| r.seq).collect::<Vec<_>>();
        assert_eq!(seqs(&merge(vec![l.clone()])), vec![1, 2, 3, 4]);
        // Merged with another machine's, the causal order rules.
        let other = vec![rec("k", 1, 6, 20, 12, "tcp", 4)];
        let m = merge(vec![l, other]);
        let order: Vec<(String, u64)> = m.iter().map(|r| (r.host.clone(), r.seq)).collect();
        let want: Vec<(String, u64)> = [("h", 1), ("h", 2), ("h", 4), ("h", 3), ("k", 1)]
            .iter()
            .map(|(h, s)| (h.to_string(), *s))
            .collect();
        assert_eq!(order, want);
    }

    #[test]
    fn chrome_trace_has_slices_flows_and_names() {
        let l = vec![
            rec("h", 1, 1, 10, 10, "set", 0),
            rec("h", 2, 2, 11, 10, "pipe", 2),
        ];
        let v = chrome_trace(&l);
        let ev = v["traceEvents"].as_array().unwrap();
        assert_eq!(
            ev.iter()
                .filter(|e| e["ph"] == "X" && e["name"] == "t via pipe")
                .count(),
            1
        );
        assert_eq!(ev.iter().filter(|e| e["ph"] == "s").count(), 1);
        assert_eq!(ev.iter().filter(|e| e["ph"] == "f").count(), 1);
        assert_eq!(ev.iter().filter(|e| e["ph"] == "M").count(), 2);
        let pipe = ev.iter().find(|e| e["name"] == "t via pipe").unwrap();
        assert_eq!(pipe["ts"].as_f64().unwrap(), 2000.0); // µs after the first
        assert_eq!(v["otherData"]["clock"], "monotonic");
    }

    #[test]
    fn svg_has_a_row_per_thread_and_a_mark_per_reception() {
        let l = vec![
            rec("h", 1, 1, 10, 10, "set", 0),
            rec("h", 2, 2, 11, 10, "pipe", 2),
            rec("h", 3, 3, 11, 10, "pipe", 4),
        ];
        let s = svg(&l, "lifeline of t");
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<title>").count(), 3);
        assert!(s.contains(">p10[10]<") && s.contains(">p11[11]<"));
        assert!(s.contains("lifeline of t"));
    }

    // Regression tests for what fuzzing found (crates/tags/fuzz,
    // docs/tags.md "Fuzzing").

    /// Two loads of mantle on one host number their receptions from 1
    /// again: files saved from each share (host, seq, tag) for different
    /// receptions. The merge used to keep only one of them.
    #[test]
    fn merge_keeps_distinct_receptions_with_the_same_host_seq_and_tag() {
        let old = vec![rec("a", 1, 1, 10, 10, "set", 0)];
        let new = vec![rec("a", 1, 2, 30, 30, "set", 100)];
        let m = merge(vec![old.clone(), new.clone()]);
        assert_eq!(m.len(), 2);
        assert!(m.contains(&old[0]) && m.contains(&new[0]));
        // the same record in two files is still given once
        assert_eq!(merge(vec![old.clone(), old.clone(), new]).len(), 2);
    }

    /// Receptions equal in (Lamport clock, host, seq) but not otherwise
    /// came out in the order the files were given.
    #[test]
    fn merge_does_not_depend_on_the_order_of_the_files() {
        let a = vec![rec("a", 1, 1, 10, 10, "set", 0)];
        let b = vec![rec("a", 1, 1, 20, 20, "set", 5)];
        let ab = merge(vec![a.clone(), b.clone()]);
        assert_eq!(ab, merge(vec![b, a]));
        assert_eq!(merge(vec![ab.clone(), ab.clone()]), ab);
    }

    /// Command names are chosen by any process (prctl) and merged files
    /// by anyone: their text must never become markup or characters XML
    /// forbids, or the plot does not open.
    #[test]
    fn svg_is_well_formed_whatever_the_records_say() {
        let mut r = rec("h", 1, 1, 10, 10, "set", 0);
        r.rx_comm = "evil\u{1b}[31m\u{1}".into();
        let mut p = rec("h", 2, 2, 11, 10, "pipe", 1);
        p.via = "<svg onload=alert(1)>".into();
        let s = svg(&[r, p], "t\u{0}");
        assert!(!s.chars().any(|c| c < ' ' && c != '\n'), "{s}");
        assert!(!s.contains("<svg onload"), "{s}");
        assert!(s.contains("&lt;svg onload=alert(1)&gt;"), "{s}");
        assert_eq!(s.matches("<title>").count(), 2);
    }

    /// A process seen only as a sender (its machine's file not merged)
    /// had no name in the trace, which then showed the internal id.
    #[test]
    fn chrome_trace_names_processes_seen_only_as_senders() {
        let mut r = rec("b", 1, 3, 20, 11, "tcp", 0);
        r.tx_host = "a".into();
        let v = chrome_trace(&[r]);
        let ev = v["traceEvents"].as_array().unwrap();
        let names: Vec<&str> = ev
            .iter()
            .filter(|e| e["ph"] == "M")
            .map(|e| e["args"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names.contains(&"[11]@a"), "{names:?}");
    }

    /// Flow ids were "host:seq:tag", which a lifeline can repeat (and
    /// names with ':' can forge): arrows then joined the wrong slices.
    #[test]
    fn chrome_flow_ids_are_unique() {
        let r = rec("h", 2, 2, 11, 10, "pipe", 1);
        let v = chrome_trace(&[r.clone(), r]);
        let ids: Vec<String> = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "s")
            .map(|e| e["id"].to_string())
            .collect();
        assert_eq!(ids.len(), 2);
        assert_ne!(ids[0], ids[1]);
    }

    #[test]
    fn ticks() {
        assert_eq!(nice_step(0.13), 0.2);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(fmt_tick(2.0), "2");
        assert_eq!(fmt_tick(0.5), "0.5");
    }
}
