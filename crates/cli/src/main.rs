//! `mantle`: the command-line tool. Thin: it parses arguments, calls the
//! subsystem crates, and turns their typed errors into messages and exit
//! codes. Exit codes: 0 ok, 1 failure, 2 usage, 3 kernel side not loaded
//! or a kernel feature missing, 4 permission denied, 5 not found.

mod demo;
mod prof;
mod selfset;

use clap::{Args, Parser, Subcommand};
use mantle_tags::abi::OpCode;
use mantle_tags::{CreateOpts, Error, Tags, Target};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "mantle",
    version,
    about = "Microkernel-style system services over an unmodified Linux",
    after_help = "Examples:\n  mantle doctor\n  mantle tags up\n  mantle tag create req --lifeline 1024\n  mantle tag run req -- sh -c 'ls | sort | head'\n  mantle tag lifeline req --json\n  mantle demo\n\nExit codes: 0 ok, 1 failure, 2 usage, 3 not loaded / feature missing, 4 permission denied, 5 not found."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Which kernel features mantle can use on this machine.
    #[command(
        after_help = "Examples:\n  mantle doctor\n  mantle doctor --json | jq '.features[] | select(.available|not)'"
    )]
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// Load, unload and inspect the tags kernel side.
    #[command(subcommand)]
    Tags(TagsCmd),
    /// Create, set, inspect and trace tags.
    #[command(subcommand)]
    Tag(TagCmd),
    /// A tag spreading through a shell pipeline and a client/server pair.
    #[command(
        after_help = "Example:\n  mantle demo        # loads the kernel side if needed, cleans up after"
    )]
    Demo {
        #[arg(long)]
        json: bool,
    },
    /// Profile the whole system, a process or a command (L4oprof-style).
    #[command(subcommand)]
    Prof(prof::ProfCmd),
}

#[derive(Subcommand)]
enum TagsCmd {
    /// Load and pin the kernel side (root).
    #[command(
        after_help = "Examples:\n  mantle tags up\n  mantle tags up --cluster /etc/mantle/cluster-tags\n  mantle tags up --lib /usr/local/lib/libmantle.so"
    )]
    Up {
        /// libmantle.so whose mantle_tag_ctl carries the self-operation probe
        /// (default: the one next to this binary).
        #[arg(long)]
        lib: Option<PathBuf>,
        /// Cluster table: the global tags (one per line: NAME [ttl=N] [system]),
        /// the same file on every machine; only these cross machines.
        #[arg(long)]
        cluster: Option<PathBuf>,
        /// Follow sockets, signals and fork only: pipes, FIFOs, eventfd,
        /// message queues and shared memory carry no tags, and no process
        /// pays for the system-call tracepoint they need (about 100-200 ns
        /// on every system call of every process while a tag exists).
        #[arg(long)]
        no_fd_channels: bool,
        #[arg(long)]
        json: bool,
    },
    /// Unload the kernel side: every tag disappears (root).
    Down,
    /// Whether the kernel side is loaded, hooks, counters.
    Status {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct Who {
    /// Every thread of this process.
    #[arg(long, conflicts_with = "tid", required_unless_present = "tid")]
    pid: Option<u32>,
    /// This thread only.
    #[arg(long)]
    tid: Option<u32>,
}

impl Who {
    fn target(&self) -> Target {
        match (self.pid, self.tid) {
            (_, Some(t)) => Target::Tid(t),
            (Some(p), _) => Target::Pid(p),
            _ => unreachable!("clap requires one"),
        }
    }
}

#[derive(Subcommand)]
enum TagCmd {
    /// Create a tag (root).
    #[command(
        after_help = "Examples:\n  mantle tag create req\n  mantle tag create hop2 --ttl 2 --lifeline 4096\n  mantle tag create kmode --system\n  mantle tag create burst --expire 500ms\n  mantle tag create echo --replies"
    )]
    Create {
        name: String,
        /// Hops it may travel: 0..254 or inf (default inf).
        #[arg(long, value_parser = mantle_tags::model::parse_ttl)]
        ttl: Option<u8>,
        /// A system tag: held only by system threads.
        #[arg(long)]
        system: bool,
        /// Record receptions in a ring of this many records.
        #[arg(long, default_value_t = 0)]
        lifeline: u32,
        /// Owner (may delete it); default: the caller.
        #[arg(long)]
        owner: Option<u32>,
        /// Travel with replies as well as requests (off by default: the
        /// paper's rule is requests only).
        #[arg(long)]
        replies: bool,
        /// A deadlock tag: marks synchronous call chains; a request that
        /// would reach a thread holding it is reported (see deadlock-guard).
        #[arg(long)]
        deadlock: bool,
        /// Expire after this long (500ms, 2s, 1m): a kernel timer retires the
        /// tag; it stops travelling at once and holders are swept.
        #[arg(long, value_parser = mantle_tags::model::parse_duration_ms)]
        expire: Option<u32>,
        #[arg(long)]
        json: bool,
    },
    /// Delete a tag: every thread holding it loses it.
    Delete { name: String },
    /// List tags.
    #[command(alias = "list")]
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Give a thread (or every thread of a process) a tag (root).
    #[command(after_help = "Example:\n  mantle tag set req --pid 1234 --ttl 3")]
    Set {
        name: String,
        #[command(flatten)]
        who: Who,
        #[arg(long, value_parser = mantle_tags::model::parse_ttl)]
        ttl: Option<u8>,
    },
    /// Take a tag from a thread or process (root).
    Clear {
        name: String,
        #[command(flatten)]
        who: Who,
    },
    /// Make a thread reject a tag: it neither holds nor passes it (root).
    Terminate {
        name: String,
        #[command(flatten)]
        who: Who,
        /// Remove the terminator instead.
        #[arg(long)]
        undo: bool,
    },
    /// Mark threads as system or user threads (root).
    #[command(after_help = "Example:\n  mantle tag class system --pid $(pidof myserver)")]
    Class {
        #[arg(value_parser = ["system", "user"])]
        class: String,
        #[command(flatten)]
        who: Who,
    },
    /// Threads holding a tag (all tagged threads without NAME).
    Threads {
        name: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// The tags a thread holds (readable by anyone).
    Get {
        #[arg(long)]
        tid: u32,
        #[arg(long)]
        json: bool,
    },
    /// Receptions of a tag, oldest first.
    #[command(
        after_help = "Examples:\n  mantle tag lifeline req\n  mantle tag lifeline req --json > here.json\n  mantle tag lifeline req --format svg -o req.svg\n  mantle tag lifeline req --format chrome -o req.trace.json   # open in ui.perfetto.dev\n  mantle tag lifeline req --merge hostb.json hostc.json --format svg -o all.svg"
    )]
    Lifeline {
        name: String,
        /// Same as --format json.
        #[arg(long)]
        json: bool,
        /// text, json, chrome (trace-event JSON for Perfetto or
        /// chrome://tracing), or svg (a plot: time across, a row per thread).
        #[arg(long, value_parser = ["text", "json", "chrome", "svg"], default_value = "text")]
        format: String,
        /// Write to this file instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Merge lifelines saved with --json on other machines (causal order,
        /// by Lamport clock); the local one is included when it exists.
        #[arg(long, num_args = 1..)]
        merge: Vec<PathBuf>,
    },
    /// Guard a process's synchronous call chains against circular waits
    /// (mTags section 5.3), without changing its code.
    #[command(
        long_about = "Guard a process's synchronous call chains against circular waits (mTags \
section 5.3), without changing its code.\n\nThe process takes a deadlock tag as the origin of its \
call chains; its requests pass the tag on, and each participant drops it when its own request is \
answered. A request that would reach a thread already holding the tag closes a circle: it is \
refused with EDEADLK where Linux offers a deny point (a TCP connect on this machine) and \
reported at once everywhere else (sends on connected unix and TCP sockets, pipes, message \
queues; TCP from other machines when it arrives). Each report lists the participants in the \
order they were called. The tag is created (and deleted at exit) unless --name names an \
existing deadlock tag (a cluster table's, for chains across machines).",
        after_help = "Examples:\n  mantle tag deadlock-guard --pid $(pidof client)\n  mantle tag deadlock-guard --pid 1234 --count 1 --timeout 30s --json\n  mantle tag deadlock-guard --pid 1234 --name dl   # a global tag from the cluster table"
    )]
    DeadlockGuard {
        #[command(flatten)]
        who: Who,
        /// Deadlock tag to use (default: a new one, deadlock.PID).
        #[arg(long)]
        name: Option<String>,
        /// Stop after this many reports.
        #[arg(long)]
        count: Option<u64>,
        /// Stop after this long (500ms, 2s, 1m).
        #[arg(long, value_parser = mantle_tags::model::parse_duration_ms)]
        timeout: Option<u32>,
        /// One JSON object per report, one per line.
        #[arg(long)]
        json: bool,
    },
    /// Run a command that holds tags from its first instruction.
    #[command(
        after_help = "Examples:\n  mantle tag run req -- ./client\n  mantle tag run a b --ttl 2 -- sh -c 'cat x | sort'"
    )]
    Run {
        #[arg(required = true)]
        names: Vec<String>,
        #[arg(long, value_parser = mantle_tags::model::parse_ttl)]
        ttl: Option<u8>,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes
    // away (`mantle tag lifeline x | head`): Rust ignores SIGPIPE by default,
    // which turns it into a panic in print!.
    // SAFETY: resetting a signal disposition at start-up, before any thread.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("mantle: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

/// A failed command: what to print and the exit code (see the top of this
/// file). Every subsystem's typed error converts into it, here only.
pub struct Failure {
    pub message: String,
    pub code: u8,
}

pub const EXIT_FAILURE: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_MISSING: u8 = 3;
pub const EXIT_PERMISSION: u8 = 4;
pub const EXIT_NOT_FOUND: u8 = 5;

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let code = match e {
            Error::NotLoaded | Error::Missing(_) => EXIT_MISSING,
            Error::Permission(_) => EXIT_PERMISSION,
            Error::UnknownTag(_) | Error::NoSuchThread(_) => EXIT_NOT_FOUND,
            Error::Invalid(_) => EXIT_USAGE,
            _ => EXIT_FAILURE,
        };
        Failure {
            message: e.to_string(),
            code,
        }
    }
}

impl From<mantle_prof::Error> for Failure {
    fn from(e: mantle_prof::Error) -> Self {
        use mantle_prof::Error as P;
        let code = match e {
            P::NoPmu(_) => EXIT_MISSING,
            P::Permission(_) => EXIT_PERMISSION,
            P::NoSession(_) | P::NoSuchProcess(_) => EXIT_NOT_FOUND,
            P::UnknownEvent(..) | P::Invalid(_) | P::RateTooHigh { .. } => EXIT_USAGE,
            _ => EXIT_FAILURE,
        };
        Failure {
            message: e.to_string(),
            code,
        }
    }
}

fn print_json<T: serde::Serialize>(v: &T) {
    println!("{}", serde_json::to_string_pretty(v).expect("serializable"));
}

fn default_lib() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("libmantle.so")))
        .unwrap_or_else(|| PathBuf::from("libmantle.so"))
}

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.cmd {
        Cmd::Doctor { json } => {
            let r = mantle_sys::probe::probe_all();
            if json {
                print_json(&r);
            } else {
                print!("{}", r.render_text());
            }
            Ok(())
        }
        Cmd::Tags(c) => Ok(tags_cmd(c)?),
        Cmd::Tag(c) => Ok(tag_cmd(c)?),
        Cmd::Demo { json } => Ok(demo::run(json)?),
        Cmd::Prof(c) => Ok(prof::run(c)?),
    }
}

fn tags_cmd(c: TagsCmd) -> Result<(), Error> {
    match c {
        TagsCmd::Up {
            lib,
            cluster,
            no_fd_channels,
            json,
        } => {
            if mantle_sys::os::geteuid() != 0 {
                return Err(Error::Permission(
                    "loading the kernel side needs root".into(),
                ));
            }
            // Validate the cluster table before loading anything.
            let table = match &cluster {
                Some(p) => {
                    let text = std::fs::read_to_string(p).map_err(|e| {
                        Error::Invalid(format!("cannot read cluster table {}: {e}", p.display()))
                    })?;
                    Some(mantle_tags::model::parse_cluster(&text).map_err(|e| {
                        Error::Invalid(format!("cluster table {}: {e}", p.display()))
                    })?)
                }
                None => None,
            };
            let lib = lib.unwrap_or_else(default_lib);
            let lib = lib.canonicalize().unwrap_or(lib);
            let r = mantle_tags::kernel::up(&lib, mantle_tags::kernel::UpOpts { no_fd_channels })?;
            if let Some(t) = &table {
                let installed = Tags::open().and_then(|tags| {
                    tags.install_cluster(t)?;
                    mantle_tags::kernel::attach_tagged()
                });
                if let Err(e) = installed {
                    let _ = mantle_tags::kernel::down();
                    return Err(e);
                }
                if !json {
                    println!(
                        "cluster table: {} global tag(s), digest {:04x}",
                        t.tags.len(),
                        t.digest
                    );
                }
            }
            if json {
                print_json(&r);
            } else {
                println!(
                    "tags kernel side loaded: pinned at {}, view of {} threads, self-operations via {}, cgroup hooks at {}",
                    r.pin_root, r.view_entries, r.ctl_lib, r.cgroup
                );
            }
            Ok(())
        }
        TagsCmd::Down => {
            if mantle_sys::os::geteuid() != 0 {
                return Err(Error::Permission(
                    "unloading the kernel side needs root".into(),
                ));
            }
            mantle_tags::kernel::down()?;
            println!("tags kernel side unloaded");
            Ok(())
        }
        TagsCmd::Status { json } => {
            let st = match Tags::open() {
                Ok(t) => t.status(),
                Err(Error::NotLoaded) => mantle_tags::Status::default(),
                Err(e) => return Err(e),
            };
            if json {
                print_json(&st);
            } else if !st.loaded {
                println!("tags: not loaded (mantle tags up)");
            } else {
                println!(
                    "tags: loaded, {} live tag(s), hooks {}",
                    st.live_tags,
                    if st.hooks_attached {
                        "attached"
                    } else {
                        "detached (no tags)"
                    }
                );
                if !st.fd_channels {
                    println!("  channels:   sockets, signals, fork only (--no-fd-channels)");
                }
                println!("  view:       {} thread slots", st.view_entries);
                println!("  hops:       {} deliveries", st.hops);
                println!("  rejected:   {} (terminators, classes)", st.rejected);
                println!(
                    "  late:       {} (reader faster than the sender's hook)",
                    st.late
                );
                println!("  dropped:    {} (channel map full)", st.deposit_fail);
                println!("  no view:    {} (tid beyond pid_max at load)", st.no_view);
                if st.cluster_digest != 0 {
                    println!("  cluster:    table digest {:04x}", st.cluster_digest);
                    println!(
                        "  TCP option: {} written, {} parsed, {} dropped (other cluster table), {} without room",
                        st.tcp_options_written, st.tcp_options_parsed, st.tcp_options_mismatched, st.tcp_options_no_space
                    );
                }
            }
            Ok(())
        }
    }
}

fn print_threads(ts: &[mantle_tags::ThreadInfo], json: bool) {
    if json {
        print_json(&ts);
        return;
    }
    println!(
        "{:>8} {:>8} {:<16} {:<6} TAGS(ttl) / TERMINATORS",
        "TID", "PID", "COMM", "CLASS"
    );
    for t in ts {
        let tags: Vec<String> = t
            .tags
            .iter()
            .map(|(n, ttl)| {
                if *ttl == 255 {
                    n.clone()
                } else {
                    format!("{n}({ttl})")
                }
            })
            .collect();
        let mut line = tags.join(",");
        if !t.terminators.is_empty() {
            line += &format!(" / !{}", t.terminators.join(",!"));
        }
        println!(
            "{:>8} {:>8} {:<16} {:<6} {}",
            t.tid,
            t.pid,
            t.comm,
            if t.system { "system" } else { "user" },
            line
        );
    }
}

fn lifeline_cmd(
    name: &str,
    format: &str,
    output: Option<PathBuf>,
    merge: &[PathBuf],
) -> Result<(), Error> {
    let mut parts = Vec::new();
    match Tags::open().and_then(|t| t.lifeline(name)) {
        Ok(l) => parts.push(l),
        // With files to merge, a machine without the tag (or without mantle
        // loaded) just contributes nothing.
        Err(e) if merge.is_empty() => return Err(e),
        Err(_) => {}
    }
    for f in merge {
        let text = std::fs::read_to_string(f)
            .map_err(|e| Error::Invalid(format!("cannot read {}: {e}", f.display())))?;
        let l: Vec<mantle_tags::ReceptionInfo> = serde_json::from_str(&text).map_err(|e| {
            Error::Invalid(format!(
                "{} is not a lifeline saved with `mantle tag lifeline --json`: {e}",
                f.display()
            ))
        })?;
        parts.push(l.into_iter().filter(|r| r.tag == name).collect());
    }
    let l = mantle_tags::lifeline::merge(parts);
    let text = match format {
        "json" => serde_json::to_string_pretty(&l).expect("json") + "\n",
        "chrome" => {
            serde_json::to_string(&mantle_tags::lifeline::chrome_trace(&l)).expect("json") + "\n"
        }
        "svg" => mantle_tags::lifeline::svg(
            &l,
            &format!("lifeline of tag {name} ({} receptions)", l.len()),
        ),
        _ => lifeline_text(&l),
    };
    match output {
        Some(p) => std::fs::write(&p, text)
            .map_err(|e| Error::Invalid(format!("cannot write {}: {e}", p.display()))),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

fn lifeline_text(l: &[mantle_tags::ReceptionInfo]) -> String {
    use std::fmt::Write;
    let multi = l.windows(2).any(|w| w[0].host != w[1].host);
    let t0 = l.iter().map(|r| r.ts_ns).min().unwrap_or(0);
    let mut s = format!(
        "{:>6} {:>12} {:<15} {:>8} {:>8} {:<16} {:>8} {:>8} {:>4}{}\n",
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
    );
    for r in l {
        let when = if multi {
            r.lamport.to_string()
        } else {
            format!("{:.1}", (r.ts_ns - t0) as f64 / 1e3)
        };
        let ttl = if r.ttl == 255 {
            "inf".to_string()
        } else {
            r.ttl.to_string()
        };
        let _ = write!(
            s,
            "{:>6} {:>12} {:<15} {:>8} {:>8} {:<16} {:>8} {:>8} {:>4}",
            r.seq, when, r.via, r.rx_tid, r.rx_pid, r.rx_comm, r.tx_tid, r.tx_pid, ttl
        );
        if multi {
            let _ = write!(s, "  {} <- {}", r.host, r.tx_host);
        }
        s.push('\n');
    }
    s
}

/// Set on SIGINT/SIGTERM: the guard stops and cleans up.
static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, std::sync::atomic::Ordering::Relaxed);
}

fn deadlock_guard(
    t: &Tags,
    who: &Who,
    name: Option<String>,
    count: Option<u64>,
    timeout: Option<u32>,
    json: bool,
) -> Result<(), Error> {
    let target = who.target();
    let id = who.pid.or(who.tid).unwrap_or_default();
    let (name, made) = match name {
        Some(n) => {
            if !t.info(t.lookup(&n)?)?.deadlock {
                return Err(Error::Invalid(format!(
                    "tag {n:?} is not a deadlock tag (create it with --deadlock)"
                )));
            }
            (n, false)
        }
        None => {
            let n = format!("deadlock.{id}");
            let o = CreateOpts {
                lifeline: 1024,
                deadlock: true,
                ..Default::default()
            };
            t.create(&n, &o)?;
            (n, true)
        }
    };
    let cleanup = |t: &Tags| {
        if made {
            let _ = t.delete(&name);
        }
    };
    if let Err(e) = t.op(OpCode::Set, Some(&name), 0, target) {
        cleanup(t);
        return Err(e);
    }
    // SAFETY: installing an async-signal-safe handler that stores a flag.
    unsafe {
        libc::signal(libc::SIGINT, on_stop as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_stop as *const () as libc::sighandler_t);
    }
    eprintln!(
        "mantle: guarding {} with deadlock tag {name}; waiting for circular call chains (Ctrl-C to stop)",
        match target {
            Target::Pid(p) => format!("process {p}"),
            Target::Tid(x) => format!("thread {x}"),
        }
    );
    let end =
        timeout.map(|ms| std::time::Instant::now() + std::time::Duration::from_millis(ms as u64));
    let mut seen = 0u64;
    let r = t.watch_deadlocks(|rep| {
        if let Some(rep) = rep.filter(|r| r.tag == name) {
            seen += 1;
            if json {
                println!("{}", serde_json::to_string(&rep).unwrap_or_default());
            } else {
                print!("{}", mantle_tags::deadlock::render(&rep));
            }
            use std::io::Write;
            let _ = std::io::stdout().flush();
        }
        !STOP.load(std::sync::atomic::Ordering::Relaxed)
            && count.is_none_or(|c| seen < c)
            && end.is_none_or(|e| std::time::Instant::now() < e)
    });
    cleanup(t);
    r?;
    if seen == 0 {
        eprintln!("mantle: no circular call chain seen");
    }
    Ok(())
}

fn tag_cmd(c: TagCmd) -> Result<(), Error> {
    if let TagCmd::Lifeline {
        name,
        json,
        format,
        output,
        merge,
    } = c
    {
        return lifeline_cmd(&name, if json { "json" } else { &format }, output, &merge);
    }
    let t = Tags::open()?;
    match c {
        TagCmd::Create {
            name,
            ttl,
            system,
            lifeline,
            owner,
            replies,
            deadlock,
            expire,
            json,
        } => {
            let info = t.create(
                &name,
                &CreateOpts {
                    ttl,
                    system,
                    lifeline,
                    owner_uid: owner,
                    replies,
                    deadlock,
                },
            )?;
            if let Some(ms) = expire {
                if let Err(e) = t.expire_after(&name, ms) {
                    let _ = t.delete(&name);
                    return Err(e);
                }
            }
            if json {
                print_json(&info);
            } else {
                println!("created tag {} (bit {})", info.name, info.bit);
            }
        }
        TagCmd::Delete { name } => {
            t.delete(&name)?;
            println!("deleted tag {name}");
        }
        TagCmd::Ls { json } => {
            let l = t.list()?;
            if json {
                print_json(&l);
            } else {
                println!(
                    "{:>3} {:<20} {:<8} {:<6} {:<6} {:>4} {:>9} {:>10} {:>6}",
                    "BIT",
                    "NAME",
                    "STATE",
                    "SCOPE",
                    "CLASS",
                    "TTL",
                    "LIFELINE",
                    "RECEIVED",
                    "OWNER"
                );
                for i in l {
                    println!(
                        "{:>3} {:<20} {:<8} {:<6} {:<6} {:>4} {:>9} {:>10} {:>6}",
                        i.bit,
                        i.name,
                        i.state,
                        i.scope,
                        if i.system { "system" } else { "user" },
                        i.ttl.map(|x| x.to_string()).unwrap_or_else(|| "inf".into()),
                        i.lifeline,
                        i.receptions,
                        i.owner_uid
                            .map(|u| u.to_string())
                            .unwrap_or_else(|| "-".into())
                    );
                }
            }
        }
        TagCmd::Set { name, who, ttl } => {
            let r = t.op(
                OpCode::Set,
                Some(&name),
                ttl.map(|x| x as u32).unwrap_or(0),
                who.target(),
            )?;
            println!("tag {name} set on {} thread(s)", r.len());
        }
        TagCmd::Clear { name, who } => {
            let r = t.op(OpCode::Clear, Some(&name), 0, who.target())?;
            println!("tag {name} cleared on {} thread(s)", r.len());
        }
        TagCmd::Terminate { name, who, undo } => {
            let code = if undo { OpCode::Unterm } else { OpCode::Term };
            let r = t.op(code, Some(&name), 0, who.target())?;
            println!(
                "{} {name} on {} thread(s)",
                if undo { "accepting" } else { "terminating" },
                r.len()
            );
        }
        TagCmd::Class { class, who } => {
            let r = t.op(
                OpCode::Class,
                None,
                (class == "system") as u32,
                who.target(),
            )?;
            println!("{} thread(s) marked {class}", r.len());
        }
        TagCmd::Threads { name, json } => print_threads(&t.threads(name.as_deref())?, json),
        TagCmd::Get { tid, json } => {
            let v = t.vector_of(tid)?;
            if json {
                print_json(&v);
            } else {
                println!("{}", v.join(" "));
            }
        }
        TagCmd::Lifeline { .. } => unreachable!("handled before opening the table"),
        TagCmd::DeadlockGuard {
            who,
            name,
            count,
            timeout,
            json,
        } => deadlock_guard(&t, &who, name, count, timeout, json)?,
        TagCmd::Run {
            names,
            ttl,
            command,
        } => {
            let me = std::process::id();
            let ttl = ttl.map(|x| x as u32).unwrap_or(0);
            for n in &names {
                if mantle_sys::os::geteuid() == 0 {
                    t.op(OpCode::Set, Some(n), ttl, Target::Tid(me))?;
                } else {
                    // Unprivileged: through the trusted path, which can
                    // only ever change this thread's own tags.
                    selfset::set(n, ttl)?;
                }
            }
            use std::os::unix::process::CommandExt;
            let e = std::process::Command::new(&command[0])
                .args(&command[1..])
                .exec();
            return Err(Error::Invalid(format!("cannot run {}: {e}", command[0])));
        }
    }
    Ok(())
}
