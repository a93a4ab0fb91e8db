//! `mantle comp up|status|down`: a system of components (crates/comp,
//! docs/comp.md). `up` is the manager: it runs in the foreground until
//! SIGTERM/SIGINT (or `mantle comp down`), ticking the stack and CBUF
//! managers and writing its status to `<dir>/status.json` (schema
//! mantle.comp.status/2, docs/comp.md), where `status` reads it.
//!
//! The directory: /run/mantle/comp for root (0755; the status file is
//! 0644: component names and cache counts, nothing secret), otherwise
//! $XDG_RUNTIME_DIR/mantle/comp (the user's own 0700 runtime dir), or
//! /tmp/mantle-comp-UID (0700) without one. Every command first checks
//! the directory is ours and writable by nobody else ([`dir`]).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Subcommand;
use mantle_comp::system::PolicyName;
use mantle_comp::{Manager, SystemFile};

use crate::exit::{Failure, EXIT_FAILURE, EXIT_NOT_FOUND, EXIT_PERMISSION, EXIT_USAGE};

#[derive(Subcommand)]
pub enum CompCmd {
    /// Start the system of components FILE describes and manage it (in
    /// the foreground, until SIGTERM or `mantle comp down`).
    #[command(
        after_help = "Examples:\n  mantle comp up system.toml &\n  mantle comp up --json system.toml   # events as JSON lines\n\nA cyclic invocation graph is refused (exit 2) naming the cycle; a component that cannot start is exit 5 (not found) or 1."
    )]
    Up {
        /// The system file (TOML: components, interfaces, who may invoke
        /// whom, memory limits; docs/comp.md).
        file: PathBuf,
        /// Print events (deaths, reclaims, holders past their bound) as
        /// JSON lines instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Components, their caches (stacks and CBUFs: allocated a^j, in use,
    /// waiters, desired δ^j, estimated requests r^j), blocked threads and
    /// their block counts and times.
    #[command(
        after_help = "Examples:\n  mantle comp status\n  mantle comp status --json | jq '.components[].tmem'\n\nWith no system up (for this user) it says so and exits 0; --json prints null."
    )]
    Status {
        /// Print the status as JSON (schema in docs/comp.md).
        #[arg(long)]
        json: bool,
        /// Print the policy's decisions, every run logged since the
        /// system started (oldest first), instead of the status.
        #[arg(long)]
        history: bool,
    },
    /// Switch the TMEM policy of the running system: none, fixed, min,
    /// max, fair, greedy, greedy-nopi, tmem, tmem-nopi (docs/comp.md).
    #[command(
        after_help = "Examples:\n  mantle comp policy tmem\n  mantle comp policy greedy-nopi\n\nOnly the user who started the system can (exit 5: no system up for this user)."
    )]
    Policy {
        /// The policy's name.
        name: String,
    },
    /// Stop the running system (SIGTERM to its manager, which ends every
    /// component).
    #[command(after_help = "Examples:\n  mantle comp down")]
    Down,
}

fn dir_path() -> PathBuf {
    if mantle_sys::os::geteuid() == 0 {
        PathBuf::from("/run/mantle/comp")
    } else {
        std::env::var_os("XDG_RUNTIME_DIR")
            .map(|d| PathBuf::from(d).join("mantle/comp"))
            .unwrap_or_else(|| {
                PathBuf::from(format!("/tmp/mantle-comp-{}", mantle_sys::os::geteuid()))
            })
    }
}

/// The state directory, checked before anything in it is believed: a
/// real directory (not a symlink) of ours, writable by nobody else.
/// Why: without XDG_RUNTIME_DIR the path is a guessable name in /tmp,
/// which another user could create first and fill with a status to show
/// or a pid for `down` to signal.
fn dir() -> Result<PathBuf, Failure> {
    use std::os::unix::fs::MetadataExt;
    let d = dir_path();
    let md = match std::fs::symlink_metadata(&d) {
        Ok(md) => md,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(d),
        Err(e) => return Err(Failure::io("directory", &d, &e)),
    };
    if !md.is_dir() || md.uid() != mantle_sys::os::geteuid() || md.mode() & 0o022 != 0 {
        return Err(Failure::new(
            EXIT_PERMISSION,
            format!(
                "{} is not a directory owned by uid {} and writable only by it: refusing to use it",
                d.display(),
                mantle_sys::os::geteuid()
            ),
        ));
    }
    Ok(d)
}

fn fail(e: mantle_comp::Error) -> Failure {
    use mantle_comp::Error as E;
    let code = match &e {
        E::Spec(_) | E::Cycle(_) => EXIT_USAGE,
        E::Start(_, io) if io.kind() == std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
        _ => EXIT_FAILURE,
    };
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg += &format!(": {s}");
        src = s.source();
    }
    Failure::new(code, msg)
}

pub fn run(c: CompCmd) -> Result<(), Failure> {
    match c {
        CompCmd::Up { file, json } => up(&file, json),
        CompCmd::Status { json, history } if history => show_history(json),
        CompCmd::Status { json, .. } => status(json),
        CompCmd::Policy { name } => switch_policy(&name),
        CompCmd::Down => down(),
    }
}

fn up(file: &std::path::Path, json: bool) -> Result<(), Failure> {
    let text = std::fs::read_to_string(file).map_err(|e| Failure::io("system file", file, &e))?;
    let spec = SystemFile::parse(&text).map_err(|e| {
        let f = fail(e);
        Failure::new(f.code, format!("{}: {}", file.display(), f.message))
    })?;
    let d = dir()?;
    {
        use std::os::unix::fs::DirBuilderExt;
        // 0755 for root (status is world-readable), 0700 for a user
        let mode = if mantle_sys::os::geteuid() == 0 {
            0o755
        } else {
            0o700
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(&d)
            .map_err(|e| Failure::io("directory", &d, &e))?;
    }
    let d = dir()?;
    let pidf = d.join("manager.pid");
    if let Ok(p) = std::fs::read_to_string(&pidf) {
        if let Ok(pid) = p.trim().parse::<i32>() {
            if mantle_sys::supervise::kill(pid, 0).unwrap_or(false) {
                return Err(Failure::new(
                    EXIT_FAILURE,
                    format!("a system is up already (manager pid {pid}): mantle comp down"),
                ));
            }
        }
    }
    mantle_sys::supervise::catch_signals(&[libc::SIGTERM, libc::SIGINT], &[]);
    let mut m = Manager::up(spec).map_err(fail)?;
    std::fs::write(&pidf, std::process::id().to_string())
        .map_err(|e| Failure::io("pid file", &pidf, &e))?;
    let statf = d.join("status.json");
    let reqf = d.join(POLICY_REQUEST);
    let logf = d.join(DECISION_LOG);
    let _ = std::fs::remove_file(&reqf);
    let _ = std::fs::remove_file(&logf);
    let mut logged = 0u64;
    let mut events: Vec<serde_json::Value> = Vec::new();
    let mut last = Instant::now() - Duration::from_secs(1);
    let write = |m: &Manager, events: &[serde_json::Value]| {
        let st = m.status();
        let v = serde_json::json!({
            "schema": "mantle.comp.status/2",
            "manager_pid": std::process::id(),
            "file": file.display().to_string(),
            "policy": st.policy,
            "last_run": st.last_run,
            "components": st.components,
            "events": events,
        });
        let tmp = statf.with_extension("tmp");
        if std::fs::write(&tmp, serde_json::to_vec_pretty(&v).unwrap_or_default()).is_ok() {
            let _ = std::fs::rename(&tmp, &statf);
        }
    };
    while mantle_sys::supervise::term_requested() == 0 {
        let mut ev: Vec<serde_json::Value> = Vec::new();
        // `mantle comp policy NAME`: a request file in our own directory
        // (0755 root's, or the user's 0700: nobody else can write it)
        if let Ok(name) = std::fs::read_to_string(&reqf) {
            let _ = std::fs::remove_file(&reqf);
            let from = m.status().policy.name;
            match PolicyName::parse(name.trim()) {
                Some(p) => {
                    m.set_policy(p);
                    ev.push(serde_json::json!({"event": "policy", "from": from, "to": p.as_str()}));
                }
                None => {
                    ev.push(serde_json::json!({"event": "policy_refused", "name": name.trim()}))
                }
            }
        }
        ev.extend(
            m.tick()
                .iter()
                .map(|e| serde_json::to_value(e).unwrap_or_default()),
        );
        logged = log_decisions(&m, &logf, logged);
        for v in ev {
            if json {
                println!("{v}");
            } else {
                eprintln!("mantle comp: {v}");
            }
            events.push(v);
            if events.len() > 64 {
                events.remove(0);
            }
        }
        if last.elapsed() >= Duration::from_millis(200) {
            write(&m, &events);
            last = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    m.down();
    write(&m, &events);
    let _ = std::fs::remove_file(&pidf);
    let _ = std::fs::remove_file(&statf);
    let _ = std::fs::remove_file(&reqf);
    let _ = std::fs::remove_file(&logf);
    Ok(())
}

/// The status file of this user's system, or None when none is up.
fn read_status() -> Result<Option<serde_json::Value>, Failure> {
    let f = dir()?.join("status.json");
    let t = match std::fs::read_to_string(&f) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Failure::io("cannot read", &f, &e)),
    };
    serde_json::from_str(&t)
        .map(Some)
        .map_err(|e| Failure::new(EXIT_FAILURE, format!("{}: {e}", f.display())))
}

/// Nothing up is an answer, not a failure (as `exec status`): exit 0,
/// and `null` for --json.
fn status(json: bool) -> Result<(), Failure> {
    let Some(v) = read_status()? else {
        if json {
            println!("null");
        } else {
            println!("no system of components is up (for this user)");
        }
        return Ok(());
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(());
    }
    println!(
        "manager {} ({})",
        v["manager_pid"],
        v["file"].as_str().unwrap_or("")
    );
    println!(
        "{:<16} {:>7} {:>5}  {:>5} {:>5} {:>5} {:>7} {:>6} {:>10}  {:>6} {:>7} {:>6}",
        "component",
        "pid",
        "alive",
        "a^j",
        "busy",
        "free",
        "waiting",
        "blocks",
        "block_ms",
        "slabs",
        "in_use",
        "KiB"
    );
    for c in v["components"].as_array().into_iter().flatten() {
        let s = &c["stacks"];
        let b = &c["cbufs"];
        println!(
            "{:<16} {:>7} {:>5}  {:>5} {:>5} {:>5} {:>7} {:>6} {:>10.3}  {:>6} {:>7} {:>6}",
            c["name"].as_str().unwrap_or("?"),
            c["pid"].to_string(),
            c["alive"].to_string(),
            s["allocated"].to_string(),
            s["busy"].to_string(),
            s["free"].to_string(),
            s["waiters"].to_string(),
            s["blocks"].to_string(),
            s["block_ns"].as_u64().unwrap_or(0) as f64 / 1e6,
            b["slabs"].to_string(),
            b["in_use"].to_string(),
            b["bytes"].as_u64().unwrap_or(0) / 1024
        );
    }
    println!(
        "\npolicy {} every {} ms, {} runs{} (Table II at the last run; pages of 4 KiB for cbufs)",
        v["policy"]["name"].as_str().unwrap_or("?"),
        v["policy"]["period_ms"],
        v["policy"]["runs"],
        match v["policy"]["tardiness_rejected"].as_u64() {
            Some(n) if n > 0 => format!(", {n} tardiness reports refused"),
            _ => String::new(),
        }
    );
    println!(
        "{:<16} {:<5} {:>6} {:>6} {:>6} {:>7} {:>7} {:>6}  blocked threads (tid: count, ms since last run)",
        "component", "kind", "a^j", "in_use", "used", "blocked", "delta", "r^j"
    );
    for c in v["components"].as_array().into_iter().flatten() {
        for t in c["tmem"].as_array().into_iter().flatten() {
            let threads: Vec<String> = t["per_thread"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|b| {
                    format!(
                        "{}: {}, {:.3}",
                        b["tid"],
                        b["blocks"],
                        b["block_ns"].as_u64().unwrap_or(0) as f64 / 1e6
                    )
                })
                .collect();
            println!(
                "{:<16} {:<5} {:>6} {:>6} {:>6} {:>7} {:>7} {:>6}  {}",
                c["name"].as_str().unwrap_or("?"),
                t["kind"].as_str().unwrap_or("?"),
                t["allocated"].to_string(),
                t["in_use"].to_string(),
                t["used_since"].to_string(),
                t["blocked"].to_string(),
                t["desired"].to_string(),
                t["estimated_requests"].to_string(),
                threads.join("; ")
            );
        }
    }
    if let Some(r) = v["last_run"].as_object() {
        let ds = decisions_text(&v["last_run"]);
        println!(
            "last decisions (run {}, {}): {}",
            r["run"],
            r["policy"].as_str().unwrap_or("?"),
            if ds.is_empty() {
                "none".to_string()
            } else {
                ds.join(" ")
            }
        );
    }
    for e in v["events"].as_array().into_iter().flatten() {
        println!("event: {e}");
    }
    Ok(())
}

/// The request file `mantle comp policy` writes and the manager consumes.
const POLICY_REQUEST: &str = "policy.request";
/// Every policy run's decisions, JSON lines (`status --history`).
const DECISION_LOG: &str = "decisions.log";
/// The log is cut to its newer half past this size.
const DECISION_LOG_MAX: u64 = 4 << 20;

/// Appends the runs after `logged` to the decision log; returns the last
/// run logged.
/// A policy run's decisions as `component/kind=desired` words (status and
/// --history print them alike).
fn decisions_text(run: &serde_json::Value) -> Vec<String> {
    run["decisions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            format!(
                "{}/{}={}",
                d["component"].as_str().unwrap_or("?"),
                d["kind"].as_str().unwrap_or("?"),
                d["desired"]
            )
        })
        .collect()
}

fn log_decisions(m: &Manager, logf: &std::path::Path, logged: u64) -> u64 {
    use std::io::Write;
    let mut last = logged;
    let mut text = String::new();
    for r in m.history().filter(|r| r.run > logged) {
        text += &serde_json::to_string(r).unwrap_or_default();
        text.push('\n');
        last = r.run;
    }
    if text.is_empty() {
        return last;
    }
    if std::fs::metadata(logf).is_ok_and(|md| md.len() > DECISION_LOG_MAX) {
        if let Ok(old) = std::fs::read_to_string(logf) {
            let keep = old.len() / 2;
            let cut = old[keep..].find('\n').map_or(old.len(), |i| keep + i + 1);
            let _ = std::fs::write(logf, &old[cut..]);
        }
    }
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(logf)
    {
        let _ = f.write_all(text.as_bytes());
    }
    last
}

fn show_history(json: bool) -> Result<(), Failure> {
    let d = dir()?;
    if read_status()?.is_none() {
        if json {
            println!("null");
        } else {
            println!("no system of components is up (for this user)");
        }
        return Ok(());
    }
    let text = std::fs::read_to_string(d.join(DECISION_LOG)).unwrap_or_default();
    let runs: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&runs).unwrap_or_default()
        );
        return Ok(());
    }
    for r in &runs {
        let ds = decisions_text(r);
        let tardy: Vec<String> = r["tardiness"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(tid, ns)| format!("{tid}: {:.3} ms", ns.as_u64().unwrap_or(0) as f64 / 1e6))
            .collect();
        println!(
            "run {} at {} ms, {}: {}{}{}",
            r["run"],
            r["at_ms"],
            r["policy"].as_str().unwrap_or("?"),
            ds.join(" "),
            if tardy.is_empty() { "" } else { "; tardiness " },
            tardy.join(", ")
        );
        for c in r["clamped"].as_array().into_iter().flatten() {
            println!(
                "  clamped {}/{}: asked {}, set {}",
                c["component"].as_str().unwrap_or("?"),
                c["kind"].as_str().unwrap_or("?"),
                c["asked"],
                c["desired"]
            );
        }
    }
    Ok(())
}

/// `mantle comp policy NAME`: hands the name to this user's manager and
/// waits (2 s at most) for its status to show it.
fn switch_policy(name: &str) -> Result<(), Failure> {
    let Some(p) = PolicyName::parse(name) else {
        let names: Vec<&str> = PolicyName::ALL.iter().map(|p| p.as_str()).collect();
        return Err(Failure::new(
            EXIT_USAGE,
            format!("policy {name:?}: not one of {}", names.join(", ")),
        ));
    };
    let d = dir()?;
    let Some(before) = read_status()? else {
        return Err(Failure::new(
            EXIT_NOT_FOUND,
            "no system of components is up (for this user)",
        ));
    };
    let runs = before["policy"]["runs"].as_u64().unwrap_or(0);
    let req = d.join(POLICY_REQUEST);
    let tmp = d.join("policy.request.tmp");
    std::fs::write(&tmp, p.as_str()).map_err(|e| Failure::io("policy request", &tmp, &e))?;
    std::fs::rename(&tmp, &req).map_err(|e| Failure::io("policy request", &req, &e))?;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
        if let Some(v) = read_status()? {
            if v["policy"]["name"] == p.as_str()
                && !req.exists()
                && v["policy"]["runs"].as_u64() > Some(runs)
            {
                println!(
                    "policy {} (was {})",
                    p.as_str(),
                    before["policy"]["name"].as_str().unwrap_or("?")
                );
                return Ok(());
            }
        }
    }
    Err(Failure::new(
        EXIT_FAILURE,
        format!("the manager did not take policy {} within 2 s", p.as_str()),
    ))
}

fn down() -> Result<(), Failure> {
    let pidf = dir()?.join("manager.pid");
    let pid: i32 = std::fs::read_to_string(&pidf)
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .ok_or_else(|| {
            Failure::new(
                EXIT_NOT_FOUND,
                "no system of components is up (for this user)",
            )
        })?;
    if !mantle_sys::supervise::kill(pid, libc::SIGTERM)
        .map_err(|e| Failure::new(EXIT_PERMISSION, format!("signal manager {pid}: {e}")))?
    {
        let _ = std::fs::remove_file(&pidf);
        return Err(Failure::new(
            EXIT_NOT_FOUND,
            format!("manager {pid} is gone (stale pid file removed)"),
        ));
    }
    let t0 = Instant::now();
    while mantle_sys::supervise::kill(pid, 0).unwrap_or(false)
        && t0.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}
