//! `mantle exec ...`: the executives running on this machine (for the
//! caller: root sees /run/mantle/exec/, a user their own runtime
//! directory; docs/exec.md "Status").

use crate::exit::Failure;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum ExecCmd {
    /// Running executives and their guests: pid, state, interposed calls
    /// by name, time in the executive.
    #[command(
        after_help = "Examples:\n  mantle exec status\n  mantle exec status --locks\n  mantle exec status --json | jq '.[].guests[].calls'\n\nJSON: a list of executives (schema mantle.exec.status/1, docs/exec.md)."
    )]
    Status {
        #[arg(long)]
        json: bool,
        /// Each executive's lock statistics instead, shaped like `perf
        /// lock contention`: contended acquisitions, total, longest and
        /// average wait, acquisitions, total hold, lock (docs/exec.md "On
        /// N CPUs"). With --json: a list of {pid, locking,
        /// executive_cpus, locks} (docs/json.md).
        #[arg(long)]
        locks: bool,
    },
}

pub fn run(c: ExecCmd) -> Result<(), Failure> {
    match c {
        ExecCmd::Status { json, locks } => {
            let all = mantle_exec::status::list(&mantle_exec::status::dir());
            if locks {
                if json {
                    let v: Vec<LocksJson> = all
                        .iter()
                        .map(|e| LocksJson {
                            pid: e.pid,
                            locking: e.locking.clone(),
                            executive_cpus: e.executive_cpus.clone(),
                            locks: e.locks.clone(),
                        })
                        .collect();
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&v).expect("locks serialise")
                    );
                } else {
                    print!("{}", locks_text(&all));
                }
                return Ok(());
            }
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&all).expect("status serialises")
                );
                return Ok(());
            }
            if all.is_empty() {
                println!("no executive running (for this user)");
            }
            for e in &all {
                println!(
                    "executive {}: path {}, {}, memory {}, SYNC_WAKE_UP {}, on executive death: {}",
                    e.pid,
                    e.path,
                    e.priority
                        .map_or("normal priority".to_string(), |p| format!("SCHED_FIFO {p}")),
                    if e.memory_locked {
                        "locked"
                    } else {
                        "not locked"
                    },
                    if e.sync_wake_up { "on" } else { "off" },
                    if e.fail_open {
                        "guests run on"
                    } else {
                        "guests killed"
                    }
                );
                for g in &e.guests {
                    let state = match (g.exit_code, g.signal) {
                        (Some(c), _) => format!("{} ({c})", g.state),
                        (_, Some(s)) => {
                            format!("{} ({})", g.state, mantle_exec::executive::signal_name(s))
                        }
                        _ => g.state.clone(),
                    };
                    println!(
                        "  {} pid {} {state}: {} (agents: {}; {:.1} us in the executive; {} vanished; {} held)",
                        g.name,
                        g.pid,
                        g.command.join(" "),
                        g.agents.join(","),
                        g.executive_ns as f64 / 1000.0,
                        g.vanished,
                        g.held
                    );
                    if let Some(p) = &g.sched {
                        println!(
                            "    scheduled by the executive: {} ({}), dispatched {:.1} ms{}",
                            p.kind(),
                            serde_json::to_string(p).unwrap_or_default(),
                            g.dispatched_ns as f64 / 1e6,
                            g.cpu.map(|c| format!(" on CPU {c}")).unwrap_or_default()
                        );
                    }
                    for c in &g.calls {
                        println!(
                            "    {:<16} {:>10} calls {:>12.1} us executive {:>12.1} us kernel",
                            c.name,
                            c.count,
                            c.executive_ns as f64 / 1000.0,
                            c.kernel_ns as f64 / 1000.0
                        );
                    }
                }
            }
            Ok(())
        }
    }
}

/// One executive in `mantle exec status --locks --json`.
#[derive(serde::Serialize)]
struct LocksJson {
    pid: u32,
    locking: Option<String>,
    executive_cpus: Vec<usize>,
    locks: Vec<mantle_exec::lockstat::LockStats>,
}

/// A duration as `perf lock contention` writes one: ns, us, ms or s with
/// two decimals.
fn perf_time(ns: u64) -> String {
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.2} us", f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", f / 1e6)
    } else {
        format!("{:.2} s", f / 1e9)
    }
}

/// `mantle exec status --locks`: per executive, its locks sorted by total
/// wait (perf lock contention's default key), then acquisitions.
fn locks_text(all: &[mantle_exec::status::ExecStatus]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if all.is_empty() {
        out.push_str("no executive running (for this user)\n");
    }
    for e in all {
        let cpus = if e.executive_cpus.is_empty() {
            "one thread, unpinned".to_string()
        } else {
            format!(
                "threads on CPUs {}",
                e.executive_cpus
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            )
        };
        let _ = writeln!(
            out,
            "executive {}: {} locking, {cpus}",
            e.pid,
            e.locking.as_deref().unwrap_or("no")
        );
        if e.locks.is_empty() {
            out.push_str("  no locks (an executive without N-CPU locking)\n");
            continue;
        }
        let _ = writeln!(
            out,
            " {:>10} {:>12} {:>12} {:>12} {:>12} {:>12}  name",
            "contended", "total wait", "max wait", "avg wait", "acquired", "total hold"
        );
        let mut locks: Vec<_> = e.locks.iter().collect();
        locks.sort_by(|a, b| {
            b.wait_ns
                .cmp(&a.wait_ns)
                .then(b.acquisitions.cmp(&a.acquisitions))
        });
        for l in locks {
            let _ = writeln!(
                out,
                " {:>10} {:>12} {:>12} {:>12} {:>12} {:>12}  {}",
                l.contended,
                perf_time(l.wait_ns),
                perf_time(l.max_wait_ns),
                perf_time(l.wait_ns.checked_div(l.contended).unwrap_or(0)),
                l.acquisitions,
                perf_time(l.hold_ns),
                l.name
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use mantle_exec::lockstat::LockStats;
    use mantle_exec::status::{ExecStatus, SCHEMA};

    #[test]
    fn perf_times_take_their_unit() {
        assert_eq!(perf_time(999), "999 ns");
        assert_eq!(perf_time(12_340), "12.34 us");
        assert_eq!(perf_time(5_000_000), "5.00 ms");
        assert_eq!(perf_time(2_500_000_000), "2.50 s");
    }

    #[test]
    fn locks_are_shown_like_perf_lock_contention_most_waited_first() {
        let lock = |name: &str, acq, cont, wait| LockStats {
            name: name.into(),
            acquisitions: acq,
            contended: cont,
            wait_ns: wait,
            max_wait_ns: wait / 2,
            hold_ns: 1_000_000,
            ..Default::default()
        };
        let e = ExecStatus {
            schema: SCHEMA.into(),
            pid: 42,
            uid: 0,
            path: "protected".into(),
            priority: None,
            memory_locked: false,
            sync_wake_up: true,
            fail_open: false,
            started_unix_ms: 0,
            updated_unix_ms: 0,
            guests: vec![],
            locking: Some("giant".into()),
            executive_cpus: vec![0, 1],
            locks: vec![lock("guest a", 100, 0, 0), lock("giant", 200, 50, 100_000)],
        };
        let t = locks_text(&[e]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "executive 42: giant locking, threads on CPUs 0,1");
        assert!(lines[1].contains("contended") && lines[1].ends_with("name"));
        // giant waited longest: first; avg wait = 100 us / 50 = 2 us
        assert!(
            lines[2].ends_with("giant") && lines[2].contains("2.00 us"),
            "{t}"
        );
        assert!(lines[2].trim_start().starts_with("50 "), "{t}");
        assert!(lines[3].ends_with("guest a"), "{t}");
        assert_eq!(locks_text(&[]), "no executive running (for this user)\n");
    }
}
