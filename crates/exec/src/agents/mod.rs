//! The built-in agents (`mantle run --trace/--count/--deny/--redirect/
//! --delay/--perform/--stamp/--sleep/--timers`): pure, unit-tested against a fake guest.
//!
//! [`from_specs`] turns what the user wrote ([`AgentSpecs`]) into the
//! agents of a guest's chain, in this order, for these reasons:
//!
//! 0. **stamp** (`--stamp`, benchmarks): before everything, so that it
//!    sees every call it wants; it only records, and continues.
//! 1. **trace**: first of the others, because only `before` can read the guest's memory
//!    (to show paths), and the chain stops at the first agent that does
//!    not continue; it always continues, and sees the final decision in
//!    `after` (every agent that wants a call sees how it ended).
//! 2. **count**: continues; counts in `after`.
//! 3. **sleep** (`--sleep`): a guest's nanosleep and clock_nanosleep held
//!    in the executive's timer queue; first of the deciding agents (a
//!    sleep is the executive's, whatever else is asked); **timers**
//!    (`--timers`): setitimer/alarm kept by the executive, likewise; and
//!    **sched** (on with dispatching): the guest's sched_setscheduler and
//!    the like land in the executive's policy.
//! 3. **delay**: before the other deciding agents, so that a delayed call is
//!    then decided as usual (a delayed and denied call is slow *and*
//!    denied, like a slow server that refuses).
//! 4. **deny**: a whole call family ([`crate::family`]) fails, without
//!    reading guest memory.
//! 5. **perform**: last: it performs calls nobody else changed.
//!
//! `--redirect` is no agent: it is a mount namespace the launcher makes
//! ([`redirect`], [`crate::enforce`]); the calls it changes are made by
//! the kernel in the guest's view, whatever the chain decides.
//!
//! What trace and count watch (their `wants`): every call the other
//! agents want, plus the calls named in [`AgentSpecs::watch`] (`all` for
//! every call); when that leaves nothing, [`DEFAULT_WATCH`]. They see a
//! call only if it leaves the kernel, and everything they want does.
//!
//! Errors name the option, the spec as written and why ([`SpecError`]);
//! an unknown call name comes with the closest names of the table.

pub mod count;
pub mod decode;
pub mod delay;
pub mod deny;
pub mod errno;
pub mod perform;
pub mod redirect;
pub mod schedcalls;
pub mod sleep;
pub mod stamp;
pub mod timers;
pub mod trace;

pub use crate::spec::AgentSpecs;
pub use count::{CountRow, CountSummary, CountTable};

use crate::agent::Agent;
use crate::sysno::Sysno;
use std::io::Write;
use std::sync::Arc;

/// What trace and count watch when nothing else says: the calls that
/// name files (the redirect family), descriptors and processes; not
/// memory management or time (frequent, and rarely what a trace is for).
pub const DEFAULT_WATCH: &[&str] = &[
    "read",
    "write",
    "pread64",
    "pwrite64",
    "readv",
    "writev",
    "close",
    "fstat",
    "lseek",
    "ioctl",
    "fcntl",
    "getdents64",
    "dup",
    "dup2",
    "dup3",
    "pipe",
    "pipe2",
    "fchdir",
    "ftruncate",
    "fchmod",
    "fchown",
    "socket",
    "connect",
    "accept",
    "accept4",
    "bind",
    "listen",
    "clone",
    "clone3",
    "fork",
    "vfork",
    "wait4",
    "kill",
    "tgkill",
    "exit_group",
];

/// Why a spec was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Why {
    #[error("expected {0}")]
    Syntax(&'static str),
    #[error("no system call named {name:?}{}", did_you_mean(.close))]
    UnknownCall { name: String, close: Vec<String> },
    #[error("bad errno {0:?} (a name like EACCES, or a number from 1 to 4095)")]
    BadErrno(String),
    #[error("bad duration: {0}")]
    BadDuration(String),
    #[error("{0}")]
    BadRedirect(String),
    #[error("{0} is given twice")]
    Repeated(String),
    #[error("{0}")]
    Other(String),
}

fn did_you_mean(close: &[String]) -> String {
    if close.is_empty() {
        String::new()
    } else {
        format!(" (did you mean {}?)", close.join(", "))
    }
}

/// A spec that cannot be used: `--deny opnat=EACCES: no system call named
/// "opnat" (did you mean openat?)`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--{option} {spec}: {why}")]
pub struct SpecError {
    /// The option, without dashes (`deny`).
    pub option: &'static str,
    /// The spec as written.
    pub spec: String,
    pub why: Why,
}

impl SpecError {
    pub fn new(option: &'static str, spec: &str, why: Why) -> SpecError {
        SpecError {
            option,
            spec: spec.to_string(),
            why,
        }
    }
}

/// A call by name, or why not.
pub fn parse_call(name: &str) -> Result<Sysno, Why> {
    if name.is_empty() {
        return Err(Why::Syntax("a system call name"));
    }
    Sysno::from_name(name).ok_or_else(|| Why::UnknownCall {
        name: name.to_string(),
        close: close_names(name),
    })
}

/// Up to five names of the table near `name`: within two edits, or
/// containing it (or contained in it) when it is at least three letters.
pub fn close_names(name: &str) -> Vec<String> {
    let low = name.to_ascii_lowercase();
    let mut near: Vec<(usize, String)> = Sysno::all()
        .map(|s| s.name().into_owned())
        .filter_map(|n| {
            let d = edit_distance(&low, &n);
            let sub = low.len() >= 3 && (n.contains(&low) || low.contains(&n));
            (d <= 2 || sub).then_some((d, n))
        })
        .collect();
    near.sort();
    near.into_iter().take(5).map(|(_, n)| n).collect()
}

/// Levenshtein distance (bytes).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, &x) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &y) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(x != y))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The agents of one guest, and the handles the executive reports from.
pub struct Built {
    /// The chain's agents, in the order of the module comment: give them
    /// to [`crate::agent::Chain::new`].
    pub agents: Vec<Box<dyn Agent>>,
    /// The counters of `--count` (None without it): the executive prints
    /// `count.summary()` when the guest ends ([`CountSummary::render_text`]
    /// or [`CountSummary::to_json`] with `--json`), and `exec status` may
    /// read it meanwhile.
    pub count: Option<Arc<CountTable>>,
    /// What trace and count watch (empty without them).
    pub watch: Vec<Sysno>,
    /// What the launcher makes the kernel enforce (the filter's refusals,
    /// the redirect's mount namespace).
    pub enforce: crate::enforce::Enforcement,
    /// What each `--deny` was taken to mean (a family, a call, a number).
    pub deny_meant: Vec<String>,
}

impl std::fmt::Debug for Built {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Built")
            .field(
                "agents",
                &self.agents.iter().map(|a| a.name()).collect::<Vec<_>>(),
            )
            .field("count", &self.count.is_some())
            .field("watch", &self.watch.len())
            .finish()
    }
}

/// Parses `specs` into agents. `trace_out` receives the trace's lines
/// (used only with `--trace`; the executive gives stderr or a file,
/// buffered as it likes: lines are not flushed one by one, and dropping
/// the agent flushes a `BufWriter`).
pub fn from_specs(
    specs: &AgentSpecs,
    trace_out: Box<dyn Write + Send>,
) -> Result<Built, SpecError> {
    let mut dl = delay::Delay::default();
    for s in &specs.delay {
        dl.add(s)?;
    }
    let mut dn = deny::Deny::default();
    for s in &specs.deny {
        dn.add(s)?;
    }
    let mut rd = redirect::Redirects::default();
    for s in &specs.redirect {
        rd.add(s)?;
    }
    let mut pf = perform::Perform::default();
    for s in &specs.perform {
        pf.add(s)?;
    }

    let mut deciding: Vec<Box<dyn Agent>> = Vec::new();
    if specs.sleep {
        deciding.push(Box::new(sleep::Sleep::default()));
    }
    if specs.timers {
        deciding.push(Box::new(timers::Timers::default()));
    }
    if specs.sched_calls {
        deciding.push(Box::new(schedcalls::SchedCalls::default()));
    }
    if !dl.is_empty() {
        deciding.push(Box::new(dl));
    }
    let enforce = crate::enforce::Enforcement::new(&dn, rd, specs.allow_io_uring);
    let deny_meant = dn.meant().to_vec();
    if !dn.is_empty() {
        deciding.push(Box::new(dn));
    }
    if !pf.is_empty() {
        deciding.push(Box::new(pf));
    }

    let watching = specs.trace || specs.count;
    if !watching && !specs.watch.is_empty() {
        return Err(SpecError::new(
            "trace",
            &specs.watch.join(","),
            Why::Other("a list of calls to watch needs --trace or --count".into()),
        ));
    }
    let mut watch: Vec<Sysno> = deciding.iter().flat_map(|a| a.wants()).collect();
    for entry in &specs.watch {
        for name in entry.split(',').map(str::trim) {
            match name {
                "all" => watch.extend(Sysno::all()),
                "default" => watch.extend(default_watch()),
                n => watch.push(parse_call(n).map_err(|w| SpecError::new("trace", entry, w))?),
            }
        }
    }
    if watch.is_empty() && watching {
        watch = default_watch();
    }
    watch.sort();
    watch.dedup();

    let mut agents: Vec<Box<dyn Agent>> = Vec::new();
    for s in &specs.stamp {
        agents.push(Box::new(stamp::Stamp::from_spec(s)?));
    }
    if specs.trace {
        agents.push(Box::new(trace::Trace::new(
            trace_out,
            specs.json,
            watch.clone(),
        )));
    }
    let count = specs.count.then(|| Arc::new(CountTable::new()));
    if let Some(t) = &count {
        agents.push(Box::new(count::Count::new(t.clone(), watch.clone())));
    }
    agents.extend(deciding);
    Ok(Built {
        agents,
        count,
        watch: if watching { watch } else { Vec::new() },
        enforce,
        deny_meant,
    })
}

/// [`DEFAULT_WATCH`] and the redirect family, as numbers.
pub fn default_watch() -> Vec<Sysno> {
    let mut v: Vec<Sysno> = DEFAULT_WATCH
        .iter()
        .chain(redirect::FAMILY.iter().map(|(n, _)| n))
        .filter_map(|n| Sysno::from_name(n))
        .collect();
    v.sort();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::fake::FakeGuest;
    use crate::agent::{Call, Chain, Decision, Outcome, Times};

    fn nr(n: &str) -> Sysno {
        Sysno::from_name(n).unwrap()
    }

    fn sink() -> Box<dyn Write + Send> {
        Box::new(std::io::sink())
    }

    fn names(b: &Built) -> Vec<&str> {
        b.agents.iter().map(|a| a.name()).collect()
    }

    #[test]
    fn default_watch_names_real_calls() {
        for n in DEFAULT_WATCH {
            assert!(Sysno::from_name(n).is_some(), "{n}");
        }
        assert_eq!(
            default_watch().len(),
            DEFAULT_WATCH.len() + redirect::FAMILY.len()
        );
    }

    #[test]
    fn every_call_of_the_table_is_accepted_by_name() {
        for n in Sysno::all() {
            assert_eq!(parse_call(&n.name()), Ok(n));
            let s = AgentSpecs {
                deny: vec![format!("{n}=EACCES")],
                delay: vec![format!("{n}=1us")],
                perform: vec![n.name().into_owned()],
                ..Default::default()
            };
            let b = from_specs(&s, sink()).unwrap();
            assert_eq!(names(&b), ["delay", "deny", "perform"]);
        }
    }

    #[test]
    fn nothing_asked_builds_nothing() {
        let b = from_specs(&AgentSpecs::default(), sink()).unwrap();
        assert!(b.agents.is_empty() && b.count.is_none() && b.watch.is_empty());
        assert!(AgentSpecs::default().is_empty());
    }

    #[test]
    fn agents_come_in_the_documented_order() {
        let s = AgentSpecs {
            trace: true,
            count: true,
            deny: vec!["unlink=EACCES".into()],
            redirect: vec!["/data=/srv".into()],
            delay: vec!["openat=1ms".into()],
            perform: vec!["getppid".into()],
            ..Default::default()
        };
        let b = from_specs(&s, sink()).unwrap();
        assert_eq!(names(&b), ["trace", "count", "delay", "deny", "perform"]);
        // the redirect is the launcher's mount, not an agent
        assert!(!b.enforce.binds_spec().is_empty());
        assert!(b.count.is_some());
        // trace and count watch what the others want, nothing more
        let mut want: Vec<Sysno> = b.agents[2..].iter().flat_map(|a| a.wants()).collect();
        want.sort();
        want.dedup();
        assert_eq!(b.watch, want);
        assert_eq!(b.agents[0].wants(), want);
        assert_eq!(b.agents[1].wants(), want);
    }

    #[test]
    fn watch_lists_and_defaults() {
        let alone = AgentSpecs {
            trace: true,
            ..Default::default()
        };
        assert_eq!(from_specs(&alone, sink()).unwrap().watch, default_watch());
        let named = AgentSpecs {
            count: true,
            watch: vec!["getppid, openat".into(), "read".into()],
            ..Default::default()
        };
        let mut w = vec![nr("getppid"), nr("openat"), nr("read")];
        w.sort();
        assert_eq!(from_specs(&named, sink()).unwrap().watch, w);
        let all = AgentSpecs {
            trace: true,
            watch: vec!["all".into()],
            ..Default::default()
        };
        assert_eq!(
            from_specs(&all, sink()).unwrap().watch.len(),
            Sysno::all().count()
        );
        let bad = AgentSpecs {
            trace: true,
            watch: vec!["getppid,opnat".into()],
            ..Default::default()
        };
        let e = from_specs(&bad, sink()).unwrap_err();
        assert_eq!(e.option, "trace");
        assert!(e.to_string().contains("openat"), "{e}");
        let orphan = AgentSpecs {
            watch: vec!["read".into()],
            ..Default::default()
        };
        assert!(from_specs(&orphan, sink()).is_err());
    }

    #[test]
    fn errors_name_the_spec_and_close_calls() {
        let s = AgentSpecs {
            deny: vec!["opnat=EACCES".into()],
            ..Default::default()
        };
        let e = from_specs(&s, sink()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--deny opnat=EACCES: no system call named \"opnat\" (did you mean openat, openat2?)"
        );
        let close = close_names("stat");
        assert!(close.starts_with(&["stat".to_string()]), "{close:?}");
        assert!(close_names("zzzzzzzzzz").is_empty());
        let e = parse_call("xyzzy").unwrap_err();
        assert_eq!(e.to_string(), "no system call named \"xyzzy\"");
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        for (field, bad) in [
            (
                "delay",
                AgentSpecs {
                    delay: vec!["openat=0s".into()],
                    ..Default::default()
                },
            ),
            (
                "redirect",
                AgentSpecs {
                    redirect: vec!["data=/x".into()],
                    ..Default::default()
                },
            ),
            (
                "perform",
                AgentSpecs {
                    perform: vec!["getpid2".into()],
                    ..Default::default()
                },
            ),
        ] {
            assert_eq!(from_specs(&bad, sink()).unwrap_err().option, field);
        }
    }

    /// The whole chain, as the executive will drive it: delay, then the
    /// re-ask is denied, and trace and count see the end.
    #[test]
    fn the_chain_delays_then_decides_and_trace_sees_the_final_decision() {
        #[derive(Clone, Default)]
        struct Out(Arc<std::sync::Mutex<Vec<u8>>>);
        impl Write for Out {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let out = Out::default();
        let s = AgentSpecs {
            trace: true,
            count: true,
            deny: vec!["unlink=EACCES".into()],
            delay: vec!["unlink=5ms".into()],
            redirect: vec!["/data=/srv".into()],
            ..Default::default()
        };
        let b = from_specs(&s, Box::new(out.clone())).unwrap();
        let count = b.count.clone().unwrap();
        let mut chain = Chain::new(b.agents);
        let mut g = FakeGuest::default();
        g.mem.insert(0x1000, b"/data/f\0".to_vec());
        let unlink = Call {
            tid: 5,
            nr: nr("unlink"),
            args: [0x1000, 0, 0, 0, 0, 0],
            ip: 1,
            received_ns: 0,
            start_ns: 0,
        };
        let (d, who) = chain.before(&unlink, &mut g);
        assert_eq!(d, Decision::Delay(std::time::Duration::from_millis(5)));
        assert_eq!(who, Some(2));
        let (d, who) = chain.before(&unlink, &mut g);
        assert_eq!((d.clone(), who), (Decision::Fail(libc::EACCES), Some(3)));
        chain.after(
            &unlink,
            &d,
            Outcome::Result(-13),
            Times {
                kernel_ns: 0,
                executive_ns: 700,
            },
        );
        drop(chain);
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            "[5] unlink(\"/data/f\") = -1 EACCES (failed) <executive 700ns>\n"
        );
        let sum = count.summary();
        assert_eq!(sum.total.calls, 1);
        assert_eq!(sum.total.errors, 1);
    }
}
