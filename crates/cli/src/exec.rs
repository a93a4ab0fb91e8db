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
        after_help = "Examples:\n  mantle exec status\n  mantle exec status --json | jq '.[].guests[].calls'\n\nJSON: a list of executives (schema mantle.exec.status/1, docs/exec.md)."
    )]
    Status {
        #[arg(long)]
        json: bool,
    },
}

pub fn run(c: ExecCmd) -> Result<(), Failure> {
    match c {
        ExecCmd::Status { json } => {
            let all = mantle_exec::status::list(&mantle_exec::status::dir());
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
