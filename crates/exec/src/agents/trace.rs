//! `--trace`: one line per watched call, with its arguments, its result,
//! what the chain decided, and the time it took in the kernel and in the
//! executive. Text like strace, or (`--json`) one JSON object per line.
//!
//! Text, one line per call:
//!
//! ```text
//! [1234] openat(AT_FDCWD, "/etc/passwd", O_RDONLY) = 3 <kernel 1.2us, executive 3.4us>
//! [1234] openat(AT_FDCWD, "/data/x", O_RDONLY) = 3 (performed, path "/srv/x") <kernel 4.1us, executive 9.0us>
//! [1234] unlink("/tmp/f") = -1 EACCES (failed) <executive 800ns>
//! [1234] read(3, 0x7ffd5000, 4096) = ? <executive 1.1us>
//! ```
//!
//! `= ?` is a call the kernel ran in the guest (`Continue` on the
//! protected path): the executive does not see its result. The note in
//! parentheses says what the chain did when it did not continue:
//! `(failed)`, `(returned)`, `(performed)`, `(performed, path "NEW")`,
//! `(performed as NAME)`. The kernel time is shown when the executive made
//! the call (or the path reports one).
//!
//! JSON lines (`--json`), one object per call, every key always present:
//!
//! | key | type | meaning |
//! |---|---|---|
//! | `tid` | integer | calling thread |
//! | `call` | string | call name (`syscall_NNN` if unknown) |
//! | `nr` | integer | call number (x86-64) |
//! | `args` | array of 6 integers | raw argument registers |
//! | `decoded` | array of strings | the arguments as in the text line |
//! | `decision` | string | `continue`, `fail`, `return`, `perform` |
//! | `path` | string or null | the rewritten path of a `perform` (escaped as in text, without quotes) |
//! | `result` | integer or null | the return value (`-errno` on error); null when unseen |
//! | `error` | string or null | errno name when `result` is an error |
//! | `kernel_ns` | integer | time in the kernel (0 unless the executive made the call) |
//! | `executive_ns` | integer | time in the executive |
//!
//! Arguments are decoded in `before` (only then is the guest's memory at
//! hand) and kept per thread until `after`: a thread has one call pending,
//! so the state is bounded by the number of threads, and a vanished call's
//! entry is replaced by the thread's next call. What is shown is what the
//! guest's memory held when the trace read it: display only, never a
//! decision. For that reason the trace is first in the chain: every agent
//! after it may decide, and the trace still sees each call's arguments;
//! it sees the final decision in `after`.
//!
//! `after` with a `Delay` decision is not the end of a call and prints
//! nothing (the call is traced once, when it ends). Write errors (a closed
//! pipe) stop the trace, never the executive. Formatting allocates: the
//! trace is not on the allocation-free interposition path.

use super::decode;
use super::errno;
use crate::agent::{Agent, Call, Decision, Guest, Outcome, Times};
use crate::sysno::Sysno;
use std::collections::HashMap;
use std::io::Write;

/// The arguments of a call in flight, decoded in `before`.
struct Pending {
    nr: Sysno,
    args: [u64; 6],
    text: Vec<String>,
}

/// Writes one line per watched call.
pub struct Trace {
    out: Box<dyn Write + Send>,
    json: bool,
    wants: Vec<Sysno>,
    pending: HashMap<u32, Pending>,
    /// The output failed: stop writing.
    broken: bool,
}

impl Trace {
    /// A trace of the calls `wants` (sorted by the caller or not), written
    /// to `out`, as JSON lines when `json`.
    pub fn new(out: Box<dyn Write + Send>, json: bool, mut wants: Vec<Sysno>) -> Trace {
        wants.sort();
        wants.dedup();
        Trace {
            out,
            json,
            wants,
            pending: HashMap::new(),
            broken: false,
        }
    }
}

/// The value the guest got, if the executive knows it.
fn result_of(d: &Decision, o: Outcome) -> Option<i64> {
    match (o, d) {
        (Outcome::Result(r), _) => Some(r),
        (Outcome::Unseen, Decision::Fail(e)) => Some(-(*e as i64)),
        (Outcome::Unseen, Decision::Return(v)) => Some(*v),
        (Outcome::Unseen, _) => None,
    }
}

fn decision_name(d: &Decision) -> &'static str {
    match d {
        Decision::Continue => "continue",
        Decision::Fail(_) => "fail",
        Decision::Return(_) => "return",
        Decision::Perform(_) => "perform",
        Decision::Delay(_) => "delay",
        Decision::Timer(_) => "timer",
        Decision::Sched(_) => "sched",
        Decision::Yield => "yield",
    }
}

/// `850ns`, `1.2us`, `3.4ms`, `1.50s`.
pub fn fmt_ns(ns: u64) -> String {
    // the unit is chosen after rounding, so 999.96us prints as 1.0ms
    match ns {
        0..=999 => format!("{ns}ns"),
        1_000..=999_949 => format!("{:.1}us", ns as f64 / 1e3),
        999_950..=999_949_999 => format!("{:.1}ms", ns as f64 / 1e6),
        _ => format!("{:.2}s", ns as f64 / 1e9),
    }
}

/// The text line of a call (without the newline).
pub fn text_line(call: &Call, args: &[String], d: &Decision, o: Outcome, t: Times) -> String {
    let mut s = format!("[{}] {}({})", call.tid, call.nr, args.join(", "));
    match result_of(d, o) {
        None => s.push_str(" = ?"),
        Some(r) => match errno::of_result(r) {
            Some(e) => s.push_str(&format!(" = -1 {}", errno::display(e))),
            None if decode::returns_address(call.nr) => s.push_str(&format!(" = {r:#x}")),
            None => s.push_str(&format!(" = {r}")),
        },
    }
    match d {
        Decision::Continue | Decision::Delay(_) => {}
        Decision::Fail(_) => s.push_str(" (failed)"),
        Decision::Return(_) => s.push_str(" (returned)"),
        Decision::Sched(p) => s.push_str(&format!(" (executive's policy: {})", p.kind())),
        Decision::Yield => s.push_str(" (yielded to the executive's policy)"),
        Decision::Timer(t) => s.push_str(&format!(
            " (executive's timer: {} in {}, every {})",
            t.signal,
            fmt_ns(t.first.as_nanos() as u64),
            fmt_ns(t.interval.as_nanos() as u64)
        )),
        Decision::Perform(p) => {
            if p.nr != call.nr {
                s.push_str(&format!(" (performed as {})", p.nr));
            } else if let Some((_, path)) = &p.path {
                s.push_str(&format!(" (performed, path {})", decode::quote(path)));
            } else {
                s.push_str(" (performed)");
            }
        }
    }
    if t.kernel_ns > 0 || matches!(d, Decision::Perform(_)) {
        s.push_str(&format!(
            " <kernel {}, executive {}>",
            fmt_ns(t.kernel_ns),
            fmt_ns(t.executive_ns)
        ));
    } else {
        s.push_str(&format!(" <executive {}>", fmt_ns(t.executive_ns)));
    }
    s
}

/// The JSON object of a call (schema in the module comment).
pub fn json_line(
    call: &Call,
    args: &[String],
    d: &Decision,
    o: Outcome,
    t: Times,
) -> serde_json::Value {
    let result = result_of(d, o);
    let path = match d {
        Decision::Perform(p) => p.path.as_ref().map(|(_, b)| {
            let q = decode::quote(b);
            q[1..q.len() - 1].to_string()
        }),
        _ => None,
    };
    serde_json::json!({
        "tid": call.tid,
        "call": call.nr.name(),
        "nr": call.nr.0,
        "args": call.args,
        "decoded": args,
        "decision": decision_name(d),
        "path": path,
        "result": result,
        "error": result.and_then(errno::of_result).map(errno::display),
        "kernel_ns": t.kernel_ns,
        "executive_ns": t.executive_ns,
    })
}

impl Agent for Trace {
    fn name(&self) -> &str {
        "trace"
    }
    fn wants(&self) -> Vec<Sysno> {
        self.wants.clone()
    }
    fn before(&mut self, call: &Call, guest: &mut dyn Guest) -> Decision {
        let text = decode::args(call.nr, &call.args, guest);
        self.pending.insert(
            call.tid,
            Pending {
                nr: call.nr,
                args: call.args,
                text,
            },
        );
        Decision::Continue
    }
    fn after(&mut self, call: &Call, d: &Decision, o: Outcome, t: Times) {
        if matches!(d, Decision::Delay(_)) {
            return;
        }
        let text = match self.pending.remove(&call.tid) {
            Some(p) if p.nr == call.nr && p.args == call.args => p.text,
            // not seen in `before` (cannot happen when first in the
            // chain): the raw registers
            _ => call.args.iter().map(|v| format!("{v:#x}")).collect(),
        };
        if self.broken {
            return;
        }
        let line = if self.json {
            json_line(call, &text, d, o, t).to_string()
        } else {
            text_line(call, &text, d, o, t)
        };
        if writeln!(self.out, "{line}").is_err() {
            self.broken = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::fake::FakeGuest;
    use crate::agent::Perform;
    use std::sync::{Arc, Mutex};

    /// A writer the test can read back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    struct Broken;
    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn nr(n: &str) -> Sysno {
        Sysno::from_name(n).unwrap()
    }

    fn openat(tid: u32) -> Call {
        Call {
            tid,
            nr: nr("openat"),
            args: [libc::AT_FDCWD as i64 as u64, 0x1000, 0, 0, 0, 0],
            ip: 0,
            received_ns: 0,
            start_ns: 0,
        }
    }

    fn guest() -> FakeGuest {
        let mut g = FakeGuest::default();
        g.mem.insert(0x1000, b"/etc/passwd\0".to_vec());
        g
    }

    fn times(k: u64, e: u64) -> Times {
        Times {
            kernel_ns: k,
            executive_ns: e,
        }
    }

    #[test]
    fn text_lines_like_strace() {
        let out = Shared::default();
        let mut t = Trace::new(Box::new(out.clone()), false, vec![nr("openat")]);
        let mut g = guest();
        let c = openat(1234);
        assert_eq!(t.before(&c, &mut g), Decision::Continue);
        let perf = Decision::Perform(Perform {
            nr: c.nr,
            args: c.args,
            path: None,
        });
        t.after(&c, &perf, Outcome::Result(3), times(1200, 3400));
        t.before(&c, &mut g);
        t.after(&c, &Decision::Continue, Outcome::Unseen, times(0, 900));
        t.before(&c, &mut g);
        t.after(&c, &Decision::Fail(13), Outcome::Result(-13), times(0, 800));
        t.before(&c, &mut g);
        let redirected = Decision::Perform(Perform {
            nr: c.nr,
            args: c.args,
            path: Some((1, b"/srv/passwd".to_vec())),
        });
        t.after(&c, &redirected, Outcome::Result(4), times(4100, 9000));
        assert_eq!(
            out.text(),
            "[1234] openat(AT_FDCWD, \"/etc/passwd\", O_RDONLY) = 3 (performed) <kernel 1.2us, executive 3.4us>\n\
             [1234] openat(AT_FDCWD, \"/etc/passwd\", O_RDONLY) = ? <executive 900ns>\n\
             [1234] openat(AT_FDCWD, \"/etc/passwd\", O_RDONLY) = -1 EACCES (failed) <executive 800ns>\n\
             [1234] openat(AT_FDCWD, \"/etc/passwd\", O_RDONLY) = 4 (performed, path \"/srv/passwd\") <kernel 4.1us, executive 9.0us>\n"
        );
    }

    #[test]
    fn results_known_without_an_outcome() {
        let c = openat(1);
        let a = vec![];
        let l = text_line(&c, &a, &Decision::Fail(2), Outcome::Unseen, times(0, 5));
        assert!(l.contains("= -1 ENOENT (failed)"), "{l}");
        let l = text_line(&c, &a, &Decision::Return(7), Outcome::Unseen, times(0, 5));
        assert!(l.contains("= 7 (returned)"), "{l}");
        let mmap = Call {
            nr: nr("mmap"),
            ..c
        };
        let l = text_line(
            &mmap,
            &a,
            &Decision::Continue,
            Outcome::Result(0x7f0000001000),
            times(5, 5),
        );
        assert!(l.contains("= 0x7f0000001000 <kernel 5ns"), "{l}");
        let l = text_line(
            &c,
            &a,
            &Decision::Continue,
            Outcome::Result(-4000),
            times(0, 5),
        );
        assert!(l.contains("= -1 errno 4000"), "{l}");
        let other = Decision::Perform(Perform {
            nr: nr("getpid"),
            args: [0; 6],
            path: None,
        });
        let l = text_line(&c, &a, &other, Outcome::Result(1), times(1, 1));
        assert!(l.contains("(performed as getpid)"), "{l}");
    }

    #[test]
    fn json_lines_follow_the_schema() {
        let out = Shared::default();
        let mut t = Trace::new(Box::new(out.clone()), true, vec![nr("openat")]);
        let mut g = guest();
        let c = openat(77);
        t.before(&c, &mut g);
        t.after(&c, &Decision::Fail(13), Outcome::Result(-13), times(0, 800));
        t.before(&c, &mut g);
        t.after(&c, &Decision::Continue, Outcome::Unseen, times(0, 900));
        t.before(&c, &mut g);
        let redirected = Decision::Perform(Perform {
            nr: c.nr,
            args: c.args,
            path: Some((1, b"/srv/\"x\"".to_vec())),
        });
        t.after(&c, &redirected, Outcome::Result(4), times(10, 20));
        let lines: Vec<serde_json::Value> = out
            .text()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        let keys = [
            "tid",
            "call",
            "nr",
            "args",
            "decoded",
            "decision",
            "path",
            "result",
            "error",
            "kernel_ns",
            "executive_ns",
        ];
        for l in &lines {
            let o = l.as_object().unwrap();
            assert_eq!(o.len(), keys.len(), "{l}");
            for k in keys {
                assert!(o.contains_key(k), "{k} missing in {l}");
            }
        }
        let l = &lines[0];
        assert_eq!(l["tid"], 77);
        assert_eq!(l["call"], "openat");
        assert_eq!(l["nr"], libc::SYS_openat);
        assert_eq!(l["args"][0], libc::AT_FDCWD as i64 as u64);
        assert_eq!(l["args"].as_array().unwrap().len(), 6);
        assert_eq!(l["decoded"][1], "\"/etc/passwd\"");
        assert_eq!(l["decision"], "fail");
        assert_eq!(l["result"], -13);
        assert_eq!(l["error"], "EACCES");
        assert_eq!(l["executive_ns"], 800);
        assert!(l["path"].is_null());
        assert!(lines[1]["result"].is_null());
        assert!(lines[1]["error"].is_null());
        assert_eq!(lines[1]["decision"], "continue");
        assert_eq!(lines[2]["path"], "/srv/\\\"x\\\"");
        assert_eq!(lines[2]["result"], 4);
    }

    #[test]
    fn delays_print_nothing_and_threads_keep_their_own_arguments() {
        let out = Shared::default();
        let mut t = Trace::new(Box::new(out.clone()), false, vec![nr("openat")]);
        let mut g = guest();
        g.mem.insert(0x2000, b"/other\0".to_vec());
        let a = openat(1);
        let b = Call {
            tid: 2,
            args: [3, 0x2000, 0, 0, 0, 0],
            ..a
        };
        t.before(&a, &mut g);
        t.before(&b, &mut g);
        t.after(
            &a,
            &Decision::Delay(std::time::Duration::from_millis(1)),
            Outcome::Unseen,
            times(0, 1),
        );
        assert_eq!(out.text(), "");
        t.after(&b, &Decision::Continue, Outcome::Unseen, times(0, 1));
        t.after(&a, &Decision::Continue, Outcome::Unseen, times(0, 1));
        assert_eq!(
            out.text(),
            "[2] openat(3, \"/other\", O_RDONLY) = ? <executive 1ns>\n\
             [1] openat(AT_FDCWD, \"/etc/passwd\", O_RDONLY) = ? <executive 1ns>\n"
        );
        // an `after` without its `before`: raw registers, no panic
        t.after(&a, &Decision::Continue, Outcome::Unseen, times(0, 1));
        assert!(out.text().ends_with(
            "[1] openat(0xffffffffffffff9c, 0x1000, 0x0, 0x0, 0x0, 0x0) = ? <executive 1ns>\n"
        ));
    }

    #[test]
    fn unreadable_memory_and_a_broken_output_are_not_fatal() {
        let mut t = Trace::new(Box::new(Broken), false, vec![nr("openat")]);
        let mut g = FakeGuest::default();
        let c = openat(1);
        t.before(&c, &mut g);
        t.after(&c, &Decision::Continue, Outcome::Unseen, times(0, 1));
        assert!(t.broken);
        t.before(&c, &mut g);
        t.after(&c, &Decision::Continue, Outcome::Unseen, times(0, 1));
        assert!(t.pending.is_empty());
    }

    #[test]
    fn times_at_unit_boundaries() {
        assert_eq!(fmt_ns(0), "0ns");
        assert_eq!(fmt_ns(999), "999ns");
        assert_eq!(fmt_ns(1_000), "1.0us");
        assert_eq!(fmt_ns(999_949), "999.9us");
        assert_eq!(fmt_ns(999_950), "1.0ms");
        assert_eq!(fmt_ns(1_000_000), "1.0ms");
        assert_eq!(fmt_ns(999_949_999), "999.9ms");
        assert_eq!(fmt_ns(999_950_000), "1.00s");
        assert_eq!(fmt_ns(999_999_999), "1.00s");
        assert_eq!(fmt_ns(1_000_000_000), "1.00s");
        assert_eq!(fmt_ns(u64::MAX), "18446744073.71s");
    }
}
