//! Reads a workload (JSON, as `mantle_lockmodel::Workload`) on stdin and
//! prints, one JSON object per line, the model's speedup and time shares
//! for each CPU count given as arguments (default 1 2 4 8 16 64), with the
//! workload's own `cpus` ignored.
//!
//! With `--fit S` first, the handoff is fitted so that the 2-CPU speedup
//! is S (a measurement; `fit_handoff`, searched in 0..=100 us) and a first
//! line says it: `{"handoff_ns": H}`, or `{"handoff_ns": null, "error":
//! ...}` when no handoff fits (the workload's own is then kept).
//!
//! `cargo run --release -p mantle-lockmodel --example predict -- 1 2 4 < w.json`

use std::io::Read;

use mantle_lockmodel::{fit_handoff, speedup, Workload};

fn main() {
    let mut text = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut text) {
        eprintln!("predict: stdin: {e}");
        std::process::exit(1);
    }
    let w: Workload = match serde_json::from_str(&text) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("predict: the workload: {e}");
            std::process::exit(2);
        }
    };
    let mut w = w;
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--fit") {
        let Some(target) = args.get(1).and_then(|t| t.parse::<f64>().ok()) else {
            eprintln!("predict: --fit takes a speedup");
            std::process::exit(2);
        };
        match fit_handoff(&w, target, 100_000) {
            Ok(h) => {
                w.handoff_ns = h;
                println!("{}", serde_json::json!({ "handoff_ns": h }));
            }
            Err(e) => println!(
                "{}",
                serde_json::json!({ "handoff_ns": null, "error": e.to_string() })
            ),
        }
        args.drain(..2);
    }
    let mut cpus: Vec<usize> = Vec::new();
    for a in args {
        match a.parse() {
            Ok(n) => cpus.push(n),
            Err(_) => {
                eprintln!("predict: {a:?} is not a CPU count");
                std::process::exit(2);
            }
        }
    }
    if cpus.is_empty() {
        cpus = vec![1, 2, 4, 8, 16, 64];
    }
    for n in cpus {
        match speedup(&Workload {
            cpus: n,
            ..w.clone()
        }) {
            Ok(s) => println!(
                "{}",
                serde_json::json!({
                    "cpus": n,
                    "speedup": s.speedup,
                    "makespan_ns": s.many.makespan_ns,
                    "user_share": s.many.user_share(),
                    "exec_share": s.many.exec_share(),
                    "wait_share": s.many.wait_share(),
                    "contention": s.many.contention(),
                })
            ),
            Err(e) => {
                eprintln!("predict: {n} CPUs: {e}");
                std::process::exit(2);
            }
        }
    }
}
