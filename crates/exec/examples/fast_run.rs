//! Runs a command on the fast path with a few demonstration agents, for
//! trying the path by hand until `mantle run --path fast` exists:
//!
//! ```text
//! cargo run -p mantle-exec --example fast_run -- [--ppid N] [--deny NAME]... [--watch NAME]... [--rewrite] -- CMD...
//! ```
//! `--ppid N`: getppid returns N; `--deny NAME`: NAME fails with EACCES;
//! `--watch NAME`: NAME continues and each result is printed to stderr;
//! `--rewrite`: the stub rewrites trapped call sites.

use mantle_exec::fast::{run_fast, FastOptions};
use mantle_exec::{Agent, Call, Chain, Decision, Guest, Outcome, Sysno, Times};

struct Fixed(Sysno, Decision);
impl Agent for Fixed {
    fn name(&self) -> &str {
        "fixed"
    }
    fn wants(&self) -> Vec<Sysno> {
        vec![self.0]
    }
    fn before(&mut self, _: &Call, _: &mut dyn Guest) -> Decision {
        self.1.clone()
    }
    fn after(&mut self, c: &Call, _: &Decision, o: Outcome, t: Times) {
        if self.1 == Decision::Continue {
            eprintln!(
                "[{}] {}({:#x}, {:#x}, {:#x}) = {o:?} ({} ns in the executive)",
                c.tid, c.nr, c.args[0], c.args[1], c.args[2], t.executive_ns
            );
        }
    }
}

fn main() {
    let mut agents: Vec<Box<dyn Agent>> = Vec::new();
    let mut a = std::env::args().skip(1);
    let sys = |n: Option<String>| {
        let n = n.expect("a call name");
        Sysno::from_name(&n).unwrap_or_else(|| panic!("no system call {n}"))
    };
    let mut cmd = Vec::new();
    let mut opts = FastOptions::default();
    while let Some(x) = a.next() {
        match x.as_str() {
            "--ppid" => {
                let v = a.next().and_then(|v| v.parse().ok()).expect("a number");
                agents.push(Box::new(Fixed(
                    sys(Some("getppid".into())),
                    Decision::Return(v),
                )));
            }
            "--deny" => agents.push(Box::new(Fixed(sys(a.next()), Decision::Fail(libc::EACCES)))),
            "--watch" => agents.push(Box::new(Fixed(sys(a.next()), Decision::Continue))),
            "--rewrite" => opts.rewrite = true,
            "--" => {
                cmd = a.by_ref().collect();
            }
            _ => {
                eprintln!(
                    "usage: fast_run [--ppid N] [--deny NAME]... [--watch NAME]... -- CMD..."
                );
                std::process::exit(2);
            }
        }
    }
    match run_fast(&cmd, Chain::new(agents), &opts) {
        Ok((st, stats)) => {
            eprintln!("fast_run: {st:?} {stats:?}");
            std::process::exit(st.code().unwrap_or(128 + 9));
        }
        Err(e) => {
            eprintln!("fast_run: {e}");
            std::process::exit(1);
        }
    }
}
