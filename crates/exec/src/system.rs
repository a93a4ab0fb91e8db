//! `mantle run --system FILE`: a whole system of guests described in TOML,
//! started under one executive. Pure (parsing and checking).
//!
//! ```toml
//! [[guest]]
//! name = "reader"                 # optional; default: the command's name
//! command = ["cat", "/etc/hostname"]
//! deny = ["openat=EACCES"]        # the same options as `mantle run`
//! perform = ["getppid"]
//! trace = true                    # or trace = "/tmp/reader.trace"
//! count = false
//! watch = ["read,write"]          # calls trace/count watch besides the others'
//! json = false
//! redirect = []
//! delay = []
//! sched = "edf 2ms/10ms"          # with [dispatch]: see parse_sched
//!
//! [dispatch]                      # the executive decides who runs
//! cpus = [0]                      # the CPUs the guests share (more:
//!                                 # partitioned, a CPU per guest)
//! quantum = "10ms"                # best effort's round robin quantum
//! per = "guest"                   # or "thread": each thread a task
//! rt_priority = 98                # SCHED_RR level of a dispatched
//!                                 # reservation, 1-99 (below the
//!                                 # executive's: lowered to it minus 1)
//!
//! [executive]                     # the executive on N CPUs
//! cpus = [0, 1]                   # a thread per CPU, guests spread over
//!                                 # them (default: one thread, unpinned)
//! locking = "fine"                # or "giant" (docs/exec.md "On N CPUs")
//! ```
//!
//! Unknown keys are refused so that a typo never silently means "no
//! agent".

use crate::spec::{AgentSpecs, TraceOut};
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    guest: Vec<GuestEntry>,
    dispatch: Option<DispatchEntry>,
    qos: Option<QosEntry>,
    executive: Option<ExecutiveEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecutiveEntry {
    cpus: Option<Vec<usize>>,
    locking: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QosEntry {
    period: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DispatchEntry {
    cpus: Option<Vec<usize>>,
    quantum: Option<String>,
    per: Option<String>,
    rt_priority: Option<i64>,
}

/// A dispatched reservation's host priority (`rt_priority`, SCHED_RR
/// 1-99), checked.
pub fn check_rt_priority(p: i64) -> Result<i32, String> {
    if (1..=99).contains(&p) {
        Ok(p as i32)
    } else {
        Err(format!(
            "rt_priority: {p} is not a real-time priority (1-99)"
        ))
    }
}

/// A whole system: its guests, and how the executive dispatches them
/// (None: the host's scheduler does).
#[derive(Clone, Debug)]
pub struct System {
    pub guests: Vec<GuestDef>,
    pub dispatch: Option<crate::dispatch::DispatchOptions>,
    /// The QoS reader's token period (`[qos] period`, default 100 ms).
    pub qos_period: Option<std::time::Duration>,
    /// `[executive] cpus`: a thread per CPU (None: not given).
    pub exec_cpus: Option<Vec<usize>>,
    /// `[executive] locking` (None: not given).
    pub locking: Option<crate::executive::Locking>,
}

/// A guest's scheduling parameters as written (`--sched`, `sched = ...`):
/// `edf BUDGET/PERIOD[/DEADLINE]` (a reservation), `fifo PRIO`,
/// `rr PRIO[/QUANTUM]` (fixed priority, 1-99, FIFO or round robin inside
/// the level), `other [NICE]` (best effort). Durations as `--delay`'s
/// (`500us`, `2ms`, `1s`).
pub fn parse_sched(s: &str) -> Result<crate::sched::Params, String> {
    use crate::agents::delay::parse_duration;
    use crate::sched::Params;
    let ns = |d: &str| parse_duration(d).map(|d| d.as_nanos().min(u128::from(u64::MAX)) as u64);
    let mut w = s.split_whitespace();
    let kind = w.next().ok_or("empty scheduling parameters")?;
    let arg = w.next();
    if w.next().is_some() {
        return Err(format!("{s:?}: too many words"));
    }
    let p = match (kind, arg) {
        ("edf", Some(a)) => {
            let parts: Vec<&str> = a.split('/').collect();
            let (budget, period, deadline) = match parts[..] {
                [b, p] => (ns(b)?, ns(p)?, ns(p)?),
                [b, p, d] => (ns(b)?, ns(p)?, ns(d)?),
                _ => return Err(format!("{s:?}: edf BUDGET/PERIOD[/DEADLINE]")),
            };
            Params::Edf {
                period_ns: period,
                budget_ns: budget,
                deadline_ns: deadline,
            }
        }
        ("fifo" | "rr", Some(a)) => {
            let (prio, q) = a.split_once('/').map_or((a, None), |(p, q)| (p, Some(q)));
            let prio: u8 = prio.parse().map_err(|_| format!("{s:?}: priority 1-99"))?;
            let quantum_ns = match (kind, q) {
                ("fifo", None) => None,
                ("rr", None) => Some(100_000_000), // Linux's SCHED_RR default
                ("rr", Some(q)) => Some(ns(q)?),
                _ => return Err(format!("{s:?}: fifo PRIO takes no quantum")),
            };
            Params::Fixed { prio, quantum_ns }
        }
        ("other", n) => Params::BestEffort {
            nice: n
                .map(|n| n.parse::<i8>().map_err(|_| format!("{s:?}: nice -20..19")))
                .transpose()?
                .unwrap_or(0),
        },
        _ => {
            return Err(format!(
                "{s:?}: expected edf BUDGET/PERIOD[/DEADLINE], fifo PRIO, rr PRIO[/QUANTUM] or other [NICE]"
            ))
        }
    };
    p.check().map_err(|e| format!("{s:?}: {e}"))?;
    Ok(p)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GuestEntry {
    name: Option<String>,
    command: Vec<String>,
    #[serde(default)]
    trace: Option<TraceSetting>,
    #[serde(default)]
    count: bool,
    #[serde(default)]
    json: bool,
    #[serde(default)]
    deny: Vec<String>,
    #[serde(default)]
    redirect: Vec<String>,
    #[serde(default)]
    delay: Vec<String>,
    #[serde(default)]
    perform: Vec<String>,
    #[serde(default)]
    stamp: Vec<String>,
    #[serde(default)]
    sleep: bool,
    #[serde(default)]
    timers: bool,
    #[serde(default)]
    watch: Vec<String>,
    #[serde(default)]
    allow_io_uring: bool,
    sched: Option<String>,
    /// Items per second, or "best-effort" (the executive reads its
    /// sockets, Figure 7).
    qos: Option<toml::Value>,
    /// The guests (names) it may call by RPC; absent: every guest.
    rpc_to: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum TraceSetting {
    On(bool),
    File(PathBuf),
}

/// One guest of a system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestDef {
    pub name: String,
    pub command: Vec<String>,
    pub agents: AgentSpecs,
    /// Where the trace goes (with `agents.trace`).
    pub trace_out: TraceOut,
    /// How the executive schedules it (with dispatching).
    pub sched: Option<crate::sched::Params>,
    /// Its I/O reservation (the executive reads its sockets).
    pub qos: Option<crate::qos::Rate>,
    /// The guests (indexes) it may call by RPC or connect a channel to
    /// (`rpc_to = ["name", ...]`); None: every guest.
    pub rpc_to: Option<Vec<usize>>,
}

/// Parses a system file's text.
pub fn parse(text: &str) -> Result<System, String> {
    let f: File = toml::from_str(text).map_err(|e| e.to_string())?;
    if f.guest.is_empty() {
        return Err("no [[guest]] in the system file".into());
    }
    let mut out = Vec::new();
    let mut rpc_names = Vec::new();
    for (i, g) in f.guest.into_iter().enumerate() {
        let Some(first) = g.command.first() else {
            return Err(format!("guest {}: empty command", i + 1));
        };
        let name = g
            .name
            .clone()
            .unwrap_or_else(|| first.rsplit('/').next().unwrap_or(first).to_string());
        if out.iter().any(|o: &GuestDef| o.name == name) {
            return Err(format!("two guests are named {name:?}"));
        }
        let (trace, trace_out) = match g.trace {
            None | Some(TraceSetting::On(false)) => (false, TraceOut::Stderr),
            Some(TraceSetting::On(true)) => (true, TraceOut::Stderr),
            Some(TraceSetting::File(p)) => (true, TraceOut::File(p)),
        };
        let sched = match &g.sched {
            Some(s) => Some(parse_sched(s).map_err(|e| format!("guest {name}: sched: {e}"))?),
            None => None,
        };
        if sched.is_some() && f.dispatch.is_none() {
            return Err(format!(
                "guest {name}: sched needs a [dispatch] table (the executive then decides who runs)"
            ));
        }
        let qos = match &g.qos {
            None => None,
            Some(toml::Value::Integer(n)) if *n > 0 => Some(crate::qos::Rate::PerSecond(*n as u64)),
            Some(toml::Value::String(s)) if s == "best-effort" => Some(crate::qos::Rate::BestEffort),
            Some(v) => {
                return Err(format!(
                    "guest {name}: qos: items per second (a positive number) or \"best-effort\", not {v}"
                ))
            }
        };
        rpc_names.push(g.rpc_to.clone());
        out.push(GuestDef {
            rpc_to: None,
            qos,
            sched,
            name,
            command: g.command,
            agents: AgentSpecs {
                trace,
                count: g.count,
                deny: g.deny,
                redirect: g.redirect,
                delay: g.delay,
                perform: g.perform,
                stamp: g.stamp,
                sleep: g.sleep,
                timers: g.timers,
                // on when the system is dispatched
                sched_calls: f.dispatch.is_some(),
                json: g.json,
                watch: g.watch,
                allow_io_uring: g.allow_io_uring,
            },
            trace_out,
        });
    }
    // names resolved once every guest is known (a guest may name a later one)
    for (i, names) in rpc_names.into_iter().enumerate() {
        let Some(names) = names else { continue };
        let mut to = Vec::new();
        for n in &names {
            let Some(k) = out.iter().position(|o| &o.name == n) else {
                return Err(format!(
                    "guest {}: rpc_to: no guest named {n:?}",
                    out[i].name
                ));
            };
            to.push(k);
        }
        out[i].rpc_to = Some(to);
    }
    let dispatch = match f.dispatch {
        None => None,
        Some(d) => {
            let mut o = crate::dispatch::DispatchOptions::default();
            if let Some(c) = d.cpus {
                if c.is_empty() {
                    return Err("[dispatch] cpus: at least one CPU".into());
                }
                o.cpus = c;
            }
            if let Some(q) = d.quantum {
                o.quantum = crate::agents::delay::parse_duration(&q)
                    .map_err(|e| format!("[dispatch] quantum: {e}"))?;
            }
            if let Some(p) = d.rt_priority {
                o.rt_priority = check_rt_priority(p).map_err(|e| format!("[dispatch] {e}"))?;
            }
            o.per = match d.per.as_deref() {
                None | Some("guest") => crate::dispatch::Unit::Guest,
                Some("thread") => crate::dispatch::Unit::Thread,
                Some(x) => {
                    return Err(format!(
                        "[dispatch] per: \"{x}\" is neither \"guest\" nor \"thread\""
                    ))
                }
            };
            Some(o)
        }
    };
    let qos_period = match f.qos.and_then(|q| q.period) {
        Some(p) => Some(
            crate::agents::delay::parse_duration(&p).map_err(|e| format!("[qos] period: {e}"))?,
        ),
        None => None,
    };
    let (exec_cpus, locking) = match f.executive {
        None => (None, None),
        Some(e) => {
            if let Some(c) = &e.cpus {
                let mut sorted = c.clone();
                sorted.sort_unstable();
                sorted.dedup();
                if c.is_empty() || sorted.len() != c.len() {
                    return Err("[executive] cpus: one or more distinct CPUs".into());
                }
            }
            let locking = match e.locking.as_deref() {
                None => None,
                Some(l) => Some(
                    l.parse::<crate::executive::Locking>()
                        .map_err(|e| format!("[executive] locking: {e}"))?,
                ),
            };
            (e.cpus, locking)
        }
    };
    Ok(System {
        guests: out,
        dispatch,
        qos_period,
        exec_cpus,
        locking,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_guests_and_refuses_typos() {
        let g = parse(
            r#"
[[guest]]
command = ["/bin/cat", "/etc/hostname"]
deny = ["openat=EACCES"]
[[guest]]
name = "b"
command = ["true"]
trace = "/tmp/t"
"#,
        )
        .unwrap();
        assert!(g.dispatch.is_none());
        let g = g.guests;
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].name, "cat");
        assert_eq!(g[0].agents.deny, vec!["openat=EACCES".to_string()]);
        assert!(g[1].agents.trace);
        assert_eq!(g[1].trace_out, TraceOut::File("/tmp/t".into()));
        assert!(parse("[[guest]]\ncommand = [\"x\"]\ndeny_ = []\n").is_err());
        assert!(parse("[[guest]]\ncommand = []\n").is_err());
        assert!(parse("").is_err());
        assert!(parse("[[guest]]\ncommand=[\"a\"]\n[[guest]]\ncommand=[\"a\"]\n").is_err());
    }

    #[test]
    fn the_executive_table_sets_cpus_and_locking_and_refuses_bad_ones() {
        let g = "[[guest]]\ncommand = [\"true\"]\n";
        let s = parse(g).unwrap();
        assert_eq!((s.exec_cpus, s.locking), (None, None));
        let s = parse(&format!(
            "{g}[executive]\ncpus = [0, 1]\nlocking = \"giant\"\n"
        ))
        .unwrap();
        assert_eq!(
            (s.exec_cpus, s.locking),
            (Some(vec![0, 1]), Some(crate::executive::Locking::Giant))
        );
        for bad in [
            "cpus = []",
            "cpus = [1, 1]",
            "locking = \"coarse\"",
            "threads = 2",
        ] {
            assert!(parse(&format!("{g}[executive]\n{bad}\n")).is_err(), "{bad}");
        }
    }

    #[test]
    fn rpc_to_names_guests_and_refuses_strangers() {
        let g = parse(
            r#"
[[guest]]
name = "client"
command = ["a"]
rpc_to = ["server"]
[[guest]]
name = "server"
command = ["b"]
rpc_to = []
[[guest]]
name = "free"
command = ["c"]
"#,
        )
        .unwrap()
        .guests;
        assert_eq!(g[0].rpc_to, Some(vec![1]));
        assert_eq!(g[1].rpc_to, Some(vec![]));
        assert_eq!(g[2].rpc_to, None);
        let e =
            parse("[[guest]]\nname = \"a\"\ncommand = [\"x\"]\nrpc_to = [\"nope\"]\n").unwrap_err();
        assert!(e.contains("no guest named \"nope\""), "{e}");
    }

    #[test]
    fn dispatch_and_sched_parameters() {
        let s = parse(
            "[dispatch]\ncpus = [1]\nquantum = \"5ms\"\n\
             [[guest]]\ncommand = [\"a\"]\nsched = \"edf 2ms/10ms\"\n\
             [[guest]]\nname = \"b\"\ncommand = [\"b\"]\n",
        )
        .unwrap();
        let d = s.dispatch.unwrap();
        assert_eq!(
            (d.cpus, d.quantum),
            (vec![1], std::time::Duration::from_millis(5))
        );
        assert_eq!(
            s.guests[0].sched,
            Some(crate::sched::Params::Edf {
                period_ns: 10_000_000,
                budget_ns: 2_000_000,
                deadline_ns: 10_000_000
            })
        );
        assert_eq!(s.guests[1].sched, None);
        // sched without [dispatch], an empty CPU list, a bad quantum: refused
        assert!(parse("[[guest]]\ncommand = [\"a\"]\nsched = \"fifo 5\"\n").is_err());
        assert!(parse("[dispatch]\ncpus = []\n[[guest]]\ncommand = [\"a\"]\n").is_err());
        assert!(parse("[dispatch]\nquantum = \"x\"\n[[guest]]\ncommand = [\"a\"]\n").is_err());
        assert!(parse("[dispatch]\nwhat = 1\n[[guest]]\ncommand = [\"a\"]\n").is_err());
        // rt_priority: 98 by default, 1-99, nothing else
        assert_eq!(
            parse("[dispatch]\n[[guest]]\ncommand = [\"a\"]\n")
                .unwrap()
                .dispatch
                .unwrap()
                .rt_priority,
            98
        );
        for (v, ok) in [
            ("1", Some(1)),
            ("99", Some(99)),
            ("50", Some(50)),
            ("0", None),
            ("100", None),
            ("-3", None),
            ("\"x\"", None),
        ] {
            let r = parse(&format!(
                "[dispatch]\nrt_priority = {v}\n[[guest]]\ncommand = [\"a\"]\n"
            ));
            assert_eq!(
                r.as_ref()
                    .ok()
                    .map(|s| s.dispatch.as_ref().unwrap().rt_priority),
                ok,
                "{v}: {r:?}"
            );
        }
        assert!(
            parse("[dispatch]\nrt_priority = 0\n[[guest]]\ncommand = [\"a\"]\n")
                .unwrap_err()
                .contains("rt_priority: 0 is not a real-time priority (1-99)")
        );
        // per: both units, and nothing else
        use crate::dispatch::Unit;
        for (v, u) in [
            ("guest", Some(Unit::Guest)),
            ("thread", Some(Unit::Thread)),
            ("x", None),
        ] {
            let r = parse(&format!(
                "[dispatch]\nper = \"{v}\"\n[[guest]]\ncommand = [\"a\"]\n"
            ));
            assert_eq!(r.ok().and_then(|s| s.dispatch).map(|d| d.per), u, "{v}");
        }
        assert_eq!(d.per, Unit::Guest);
    }

    #[test]
    fn sched_specs_each_kind_and_the_bad_ones() {
        use crate::sched::Params;
        let ms = 1_000_000;
        for (s, p) in [
            (
                "edf 2ms/10ms",
                Params::Edf {
                    period_ns: 10 * ms,
                    budget_ns: 2 * ms,
                    deadline_ns: 10 * ms,
                },
            ),
            (
                "edf 1ms/10ms/5ms",
                Params::Edf {
                    period_ns: 10 * ms,
                    budget_ns: ms,
                    deadline_ns: 5 * ms,
                },
            ),
            (
                "fifo 1",
                Params::Fixed {
                    prio: 1,
                    quantum_ns: None,
                },
            ),
            (
                "fifo 99",
                Params::Fixed {
                    prio: 99,
                    quantum_ns: None,
                },
            ),
            (
                "rr 50",
                Params::Fixed {
                    prio: 50,
                    quantum_ns: Some(100 * ms),
                },
            ),
            (
                "rr 50/5ms",
                Params::Fixed {
                    prio: 50,
                    quantum_ns: Some(5 * ms),
                },
            ),
            ("other", Params::BestEffort { nice: 0 }),
            ("other -20", Params::BestEffort { nice: -20 }),
            ("other 19", Params::BestEffort { nice: 19 }),
        ] {
            assert_eq!(parse_sched(s), Ok(p), "{s}");
        }
        for bad in [
            "",
            "edf",
            "edf 2ms",
            "edf 20ms/10ms",
            "edf 2ms/10ms/20ms",
            "edf 0ms/10ms",
            "fifo",
            "fifo 0",
            "fifo 100",
            "fifo 5/1ms",
            "rr x",
            "other 20",
            "other -21",
            "deadline 1ms/2ms",
            "fifo 5 6",
        ] {
            assert!(parse_sched(bad).is_err(), "{bad:?}");
        }
    }
}
