//! `mantle`: the command-line tool. Thin: it parses arguments, calls the
//! subsystem crates, and turns their typed errors into messages and exit
//! codes, here only (`Failure` and its `From` impls; the rule is `EXIT_*`
//! below and in README "Exit codes").
//!
//! Privilege is `mantle_sys::os::privileged()` (capabilities in the
//! initial user namespace), never `euid == 0`: inside `unshare -Ur` a
//! user is uid 0 and still has no power over the machine's BPF objects.

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
    after_help = "Examples:\n  mantle doctor\n  mantle tags up\n  mantle tag create req --lifeline 1024\n  mantle tag run req -- sh -c 'ls | sort | head'\n  mantle tag lifeline req --json\n  mantle demo\n\nExit codes: 0 ok, 1 failure, 2 usage (a malformed command line), 3 kernel side not loaded or a feature missing, 4 permission denied, 5 not found (a tag, thread, process, user, program or lifeline). `mantle tag run` exits with its command's status once the command runs."
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
        /// Print the report as JSON (features[]: id, name, available, detail, needed_by).
        #[arg(long)]
        json: bool,
    },
    /// Load, unload and inspect the tags kernel side (`mantle tags ...`).
    #[command(
        subcommand,
        after_help = "Examples:\n  mantle tags up\n  mantle tags status\n  mantle tags down\n\nSingle tags are `mantle tag ...` (create, ls, run, lifeline...)."
    )]
    Tags(TagsCmd),
    /// Create, set, inspect and trace tags (`mantle tag ...`).
    #[command(
        subcommand,
        after_help = "Examples:\n  mantle tag create req --lifeline 1024\n  mantle tag ls\n  mantle tag run req -- ./client\n  mantle tag lifeline req\n  mantle tag delete req\n\nThe kernel side is `mantle tags ...` (up, down, status)."
    )]
    Tag(TagCmd),
    /// A tag spreading through a shell pipeline and a client/server pair.
    #[command(
        after_help = "Examples:\n  mantle demo                          # loads the kernel side if needed, cleans up after\n  mantle demo --json | jq '.lifeline[].rx_comm'"
    )]
    Demo {
        /// Print the tag, its holders and its lifeline as JSON (README "JSON").
        #[arg(long)]
        json: bool,
    },
    /// Profile the whole system, a process or a command (L4oprof-style).
    #[command(
        subcommand,
        after_help = "Examples:\n  mantle prof events\n  mantle prof record -a --duration 10\n  mantle prof report"
    )]
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
        /// Cluster table: the global tags, one per line: NAME [ttl=N|inf]
        /// [system] [deadlock] (`#` starts a comment); the same file on
        /// every machine; only these cross machines.
        #[arg(long)]
        cluster: Option<PathBuf>,
        /// Follow sockets, signals and fork only: pipes, FIFOs, eventfd,
        /// message queues and shared memory carry no tags, and no process
        /// pays for the system-call tracepoint they need (about 100-200 ns
        /// on every system call of every process while a tag exists).
        #[arg(long)]
        no_fd_channels: bool,
        /// Print what was loaded as JSON (pin_root, view_entries, ctl_lib, cgroup).
        #[arg(long)]
        json: bool,
    },
    /// Unload the kernel side: every tag disappears, every user's (root).
    #[command(
        after_help = "Examples:\n  mantle tags down\n  mantle tags status | grep -q 'not loaded' || mantle tags down"
    )]
    Down,
    /// Whether the kernel side is loaded, hooks, counters.
    #[command(
        after_help = "Examples:\n  mantle tags status\n  mantle tags status --json | jq .live_tags"
    )]
    Status {
        /// Print the status as JSON (loaded, live_tags, hops and other counters).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct Who {
    /// Every thread of this process.
    #[arg(
        long,
        conflicts_with = "tid",
        required_unless_present = "tid",
        allow_negative_numbers = true
    )]
    pid: Option<u32>,
    /// This thread only.
    #[arg(long, allow_negative_numbers = true)]
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
        /// Tag name: 1 to 31 of A-Z a-z 0-9 _ . : - (not first).
        #[arg(value_parser = tag_name)]
        name: String,
        /// Hops it may travel: 0..254 or inf (default inf).
        #[arg(long, value_parser = mantle_tags::model::parse_ttl, allow_negative_numbers = true)]
        ttl: Option<u8>,
        /// A system tag: held only by system threads.
        #[arg(long)]
        system: bool,
        /// Record receptions in a ring of this many records (0: none; all
        /// tags share 65536).
        #[arg(long, default_value_t = 0, value_parser = lifeline_size, allow_negative_numbers = true)]
        lifeline: u32,
        /// Owner, a user name or uid: may delete the tag without root
        /// (default: the caller).
        #[arg(long)]
        owner: Option<String>,
        /// Travel with replies as well as requests (off by default: the
        /// paper's rule is requests only).
        #[arg(long)]
        replies: bool,
        /// A deadlock tag: marks synchronous call chains; a request that
        /// would reach a thread holding it is reported (see deadlock-guard).
        #[arg(long)]
        deadlock: bool,
        /// Any user may set it on itself (default: only root and the owner;
        /// threads that receive it over IPC hold it either way).
        #[arg(long)]
        anyone: bool,
        /// Held per request: a thread that receives it with a request holds
        /// it only until it answers that request, and passes it on only with
        /// the requests it makes meanwhile (follow one request through
        /// servers that stay up).
        #[arg(long)]
        per_request: bool,
        /// Expire after this long (500ms, 2s, 1m): a kernel timer retires the
        /// tag; it stops travelling at once and holders are swept.
        #[arg(long, value_parser = mantle_tags::model::parse_duration_ms)]
        expire: Option<u32>,
        /// Print the new tag as JSON (README "JSON": a tag).
        #[arg(long)]
        json: bool,
    },
    /// Delete a tag: every thread holding it loses it (root or its owner).
    #[command(
        after_help = "Examples:\n  mantle tag delete req\n  mantle tag create job --owner alice && runuser -u alice -- mantle tag delete job"
    )]
    Delete {
        /// The tag to delete.
        #[arg(value_parser = tag_name)]
        name: String,
    },
    /// List tags.
    #[command(
        alias = "list",
        after_help = "Examples:\n  mantle tag ls\n  mantle tag ls --json | jq -r '.[].name'"
    )]
    Ls {
        /// Print the tags as JSON (README "JSON": a list of tags).
        #[arg(long)]
        json: bool,
    },
    /// Give a thread (or every thread of a process) a tag (root).
    #[command(
        after_help = "Examples:\n  mantle tag set req --pid 1234\n  mantle tag set req --tid 1236 --ttl 3"
    )]
    Set {
        /// The tag to give.
        #[arg(value_parser = tag_name)]
        name: String,
        #[command(flatten)]
        who: Who,
        /// Hops it may travel from there: 0..254 or inf (default: the tag's).
        #[arg(long, value_parser = mantle_tags::model::parse_ttl, allow_negative_numbers = true)]
        ttl: Option<u8>,
    },
    /// Take a tag from a thread or process (root).
    #[command(
        after_help = "Examples:\n  mantle tag clear req --pid 1234\n  mantle tag clear req --tid 1236"
    )]
    Clear {
        /// The tag to take away.
        #[arg(value_parser = tag_name)]
        name: String,
        #[command(flatten)]
        who: Who,
    },
    /// Make a thread reject a tag: it neither holds nor passes it (root).
    #[command(
        after_help = "Examples:\n  mantle tag terminate req --pid 1234          # 1234 drops req and rejects it from now on\n  mantle tag terminate req --pid 1234 --undo   # accepts it again"
    )]
    Terminate {
        /// The tag to reject.
        #[arg(value_parser = tag_name)]
        name: String,
        #[command(flatten)]
        who: Who,
        /// Remove the terminator instead.
        #[arg(long)]
        undo: bool,
    },
    /// Mark threads as system or user threads (root).
    #[command(
        after_help = "Examples:\n  mantle tag class system --pid $(pidof myserver)\n  mantle tag class user --tid 1236"
    )]
    Class {
        /// system (holds system tags only) or user (user tags only).
        #[arg(value_parser = ["system", "user"])]
        class: String,
        #[command(flatten)]
        who: Who,
    },
    /// Threads holding a tag (all tagged threads without NAME) (root).
    #[command(
        after_help = "Examples:\n  mantle tag threads req\n  mantle tag threads\n  mantle tag threads req --json | jq '.[].pid'"
    )]
    Threads {
        /// Only threads holding this tag (default: every thread with a tag,
        /// a terminator or a class mark).
        #[arg(value_parser = tag_name)]
        name: Option<String>,
        /// Print the threads as JSON (README "JSON": a list of threads).
        #[arg(long)]
        json: bool,
    },
    /// The tags a thread holds (readable by anyone).
    #[command(
        after_help = "Examples:\n  mantle tag get --tid 1234\n  mantle tag get --tid $$ --json"
    )]
    Get {
        /// The thread: any thread id (a process id names its main thread).
        #[arg(long, allow_negative_numbers = true)]
        tid: u32,
        /// Print the thread as JSON (README "JSON": a thread; TTLs,
        /// terminators and class only for root).
        #[arg(long)]
        json: bool,
    },
    /// Receptions of a tag, oldest first.
    #[command(
        after_help = "Examples:\n  mantle tag lifeline req\n  mantle tag lifeline req --json > here.json\n  mantle tag lifeline req --format svg -o req.svg\n  mantle tag lifeline req --format chrome -o req.trace.json   # open in ui.perfetto.dev\n  mantle tag lifeline req --merge hostb.json hostc.json --format svg -o all.svg"
    )]
    Lifeline {
        /// The tag (it must have been created with --lifeline N).
        #[arg(value_parser = tag_name)]
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
        #[arg(long, value_parser = tag_name)]
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
        after_help = "Examples:\n  mantle tag run req -- ./client\n  mantle tag run a b --ttl 2 -- sh -c 'cat x | sort'\n\nThe tags come before `--`, the command after it. Once the command runs, the exit status is the command's; if it cannot be started, mantle's (5: not found, 4: not executable)."
    )]
    Run {
        /// Tags to hold (one or more).
        #[arg(required = true, value_parser = tag_name)]
        names: Vec<String>,
        /// Hops they may travel from the command: 0..254 or inf (default:
        /// each tag's).
        #[arg(long, value_parser = mantle_tags::model::parse_ttl, allow_negative_numbers = true)]
        ttl: Option<u8>,
        /// The command and its arguments, after `--`.
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
    let cli = parse_args();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("mantle: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

/// The command tree as users see it: every `--json` flag without its own
/// help (other subsystems' too) says what it does.
fn command() -> clap::Command {
    use clap::CommandFactory;
    fn fill(c: clap::Command) -> clap::Command {
        c.mut_args(|a| {
            if a.get_id() == "json" && a.get_help().is_none() {
                a.help("Print the result as JSON instead of text")
            } else {
                a
            }
        })
        .mut_subcommands(fill)
    }
    fill(Cli::command())
}

/// Parses the command line; a usage error exits 2 (clap's code, EXIT_USAGE)
/// with clap's message plus a tip for the mistakes new users make.
fn parse_args() -> Cli {
    use clap::FromArgMatches;
    let args: Vec<String> = std::env::args().collect();
    let parsed = command()
        .try_get_matches_from(&args)
        .and_then(|m| Cli::from_arg_matches(&m));
    match parsed {
        Ok(c) => c,
        Err(mut e) => {
            if let Some((tip, replace)) = usage_tip(&e, &args) {
                use clap::error::{ContextKind, ContextValue};
                let mut tips = match e.get(ContextKind::Suggested) {
                    Some(ContextValue::StyledStrs(v)) if !replace => v.clone(),
                    _ => Vec::new(),
                };
                tips.push(tip.into());
                e.insert(ContextKind::Suggested, ContextValue::StyledStrs(tips));
            }
            e.exit()
        }
    }
}

/// A tip for a usage error: `tags X` that is a `tag` command (and the
/// reverse), and `tag run` without the `--` before its command; and
/// whether it replaces clap's own tips (which, for `tag run T sh -c x`,
/// would say to write `-- -c`).
fn usage_tip(e: &clap::Error, args: &[String]) -> Option<(String, bool)> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    // The first two words that are not options: the command path.
    let words: Vec<&str> = args
        .iter()
        .skip(1)
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    match e.kind() {
        ErrorKind::InvalidSubcommand => {
            let Some(ContextValue::String(bad)) = e.get(ContextKind::InvalidSubcommand) else {
                return None;
            };
            let other = match words.first() {
                Some(&"tags") => "tag",
                Some(&"tag") => "tags",
                _ => return None,
            };
            let tree = command();
            let sub = tree.find_subcommand(other)?;
            let hit = sub.get_subcommands().find(|c| {
                c.get_name() == bad.as_str() || c.get_all_aliases().any(|a| a == bad.as_str())
            })?;
            let tip = format!(
                "`{bad}` is a command of `mantle {other}` ({}): try `mantle {other} {}`",
                if other == "tag" {
                    "single tags"
                } else {
                    "the kernel side"
                },
                hit.get_name()
            );
            Some((tip, false))
        }
        ErrorKind::MissingRequiredArgument | ErrorKind::UnknownArgument
            if words.starts_with(&["tag", "run"]) =>
        {
            let run = args.iter().position(|a| a == "run")?;
            if args[run..].iter().any(|a| a == "--") {
                return Some((
                    "the command to run goes after `--`, and cannot be empty".into(),
                    false,
                ));
            }
            // The words after `run`: --ttl and its value, the rest.
            let (mut opts, mut rest) = (Vec::new(), Vec::new());
            let mut it = args[run + 1..].iter();
            while let Some(a) = it.next() {
                if a == "--ttl" {
                    opts.push(a.as_str());
                    opts.extend(it.next().map(String::as_str));
                } else if a.starts_with("--ttl=") {
                    opts.push(a.as_str());
                } else {
                    rest.push(a.as_str());
                }
            }
            let tip = match rest.split_first() {
                Some((tag, cmd)) if !cmd.is_empty() => format!(
                    "tags go before `--`, the command after it: `mantle tag run {}{tag} -- {}`",
                    opts.iter().map(|o| format!("{o} ")).collect::<String>(),
                    cmd.join(" ")
                ),
                _ => "tags go before `--`, the command after it: `mantle tag run TAG... -- COMMAND [ARGS...]`".into(),
            };
            Some((tip, true))
        }
        _ => None,
    }
}

/// A tag name on the command line, checked once here (exit 2 when
/// malformed, like any other malformed argument).
fn tag_name(s: &str) -> Result<String, String> {
    mantle_tags::model::validate_name(s)
        .map(|()| s.to_string())
        .map_err(|e| e.to_string())
}

/// `--lifeline N`: the real limit is the ring all tags share.
fn lifeline_size(s: &str) -> Result<u32, String> {
    let max = mantle_tags::abi::MT_LIFELINE_SLOTS;
    match s.parse::<u64>() {
        Ok(n) if n <= max as u64 => Ok(n as u32),
        Ok(_) => Err(format!(
            "a lifeline holds at most {max} records (the ring all tags share)"
        )),
        Err(_) => Err(format!("{s:?} is not a number of records (0..={max})")),
    }
}

/// A failed command: what to print and the exit code. Every subsystem's
/// typed error converts into it, here only.
pub struct Failure {
    pub message: String,
    pub code: u8,
}

impl Failure {
    fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            message: message.into(),
            code,
        }
    }

    /// A file the user named could not be read or written.
    fn io(what: &str, path: &std::path::Path, e: &std::io::Error) -> Failure {
        let code = match e.kind() {
            std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
            std::io::ErrorKind::PermissionDenied => EXIT_PERMISSION,
            _ => EXIT_FAILURE,
        };
        Failure::new(code, format!("{what} {}: {e}", path.display()))
    }
}

// The exit codes: ONE rule for every command (README "Exit codes").
/// The operation was tried and failed (the kernel refused it, a tag
/// exists already, the table is full, I/O failed).
pub const EXIT_FAILURE: u8 = 1;
/// The command line is malformed: unknown command or option, a value out
/// of range (TTL, lifeline size, duration), a malformed tag name, or a
/// malformed file it names. clap exits with the same code.
pub const EXIT_USAGE: u8 = 2;
/// The tags kernel side is not loaded, or the machine lacks a kernel
/// feature or tool the command needs.
pub const EXIT_MISSING: u8 = 3;
/// Permission denied: the command needs privilege, or the object is
/// another user's.
pub const EXIT_PERMISSION: u8 = 4;
/// Something named does not exist: a tag, thread, process, user, file,
/// the program `tag run` should start, or a tag's lifeline.
pub const EXIT_NOT_FOUND: u8 = 5;

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let code = match e {
            Error::NotLoaded | Error::Missing(_) => EXIT_MISSING,
            Error::UnknownTag(_) | Error::NoSuchThread(_) => EXIT_NOT_FOUND,
            Error::Invalid(_) => EXIT_USAGE,
            // ours, or the kernel's EPERM/EACCES kept as the source
            _ if e.is_permission() => EXIT_PERMISSION,
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
            P::NoPmu(_) | P::FallbackNoPmu { .. } => EXIT_MISSING,
            P::Permission(_) => EXIT_PERMISSION,
            P::NoSession(_) | P::NoSuchProcess(_) | P::NoMatch { .. } => EXIT_NOT_FOUND,
            P::UnknownEvent(..) | P::Invalid(_) | P::RateTooHigh { .. } => EXIT_USAGE,
            P::SessionExists(_) | P::NotASession(_) => EXIT_USAGE,
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
        Cmd::Tags(c) => tags_cmd(c),
        Cmd::Tag(c) => tag_cmd(c),
        Cmd::Demo { json } => Ok(demo::run(json)?),
        Cmd::Prof(c) => Ok(prof::run(c)?),
    }
}

fn tags_cmd(c: TagsCmd) -> Result<(), Failure> {
    match c {
        TagsCmd::Up {
            lib,
            cluster,
            no_fd_channels,
            json,
        } => {
            if !mantle_sys::os::privileged() {
                return Err(Error::Permission(
                    "loading the kernel side needs root (CAP_SYS_ADMIN or CAP_BPF in the initial user namespace)".into(),
                )
                .into());
            }
            // Validate the cluster table before loading anything.
            let table = match &cluster {
                Some(p) => {
                    let text = std::fs::read_to_string(p)
                        .map_err(|e| Failure::io("cannot read cluster table", p, &e))?;
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
                    return Err(e.into());
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
            if !mantle_sys::os::privileged() {
                return Err(Error::Permission(
                    "unloading the kernel side needs root (CAP_SYS_ADMIN or CAP_BPF in the initial user namespace)".into(),
                )
                .into());
            }
            match mantle_tags::kernel::down() {
                Err(Error::NotLoaded) => Err(Failure::new(
                    EXIT_MISSING,
                    "the tags kernel side is not loaded: nothing to unload",
                )),
                r => Ok(r?),
            }?;
            println!("tags kernel side unloaded");
            Ok(())
        }
        TagsCmd::Status { json } => {
            let st = match Tags::open() {
                Ok(t) => t.status(),
                Err(Error::NotLoaded) => mantle_tags::Status::default(),
                Err(e) => return Err(e.into()),
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

// ---------------------------------------------------------------- JSON
//
// One schema per object, the same in every command (README "JSON"): a tag
// is `TagInfo`, a thread is `ThreadInfo` (its tags are held tags: name and
// TTL), a lifeline record is `ReceptionInfo`. A TTL is a number of hops, or
// null for unlimited, everywhere.

/// A lifeline record as JSON. The library keeps the kernel's 255 for an
/// unlimited TTL (the value the records carry); JSON says null, as for tags
/// and threads.
fn reception_json(r: &mantle_tags::ReceptionInfo) -> serde_json::Value {
    let mut v = serde_json::to_value(r).expect("serializable");
    if r.ttl == mantle_tags::abi::MT_TTL_INF as u8 {
        v["ttl"] = serde_json::Value::Null;
    }
    v
}

fn lifeline_json(l: &[mantle_tags::ReceptionInfo]) -> serde_json::Value {
    serde_json::Value::Array(l.iter().map(reception_json).collect())
}

/// Reads back a record saved with `--json` (null, or 255 from older
/// versions, for unlimited).
fn reception_from_json(
    mut v: serde_json::Value,
) -> Result<mantle_tags::ReceptionInfo, serde_json::Error> {
    if v.get("ttl").is_some_and(serde_json::Value::is_null) {
        v["ttl"] = mantle_tags::abi::MT_TTL_INF.into();
    }
    serde_json::from_value(v)
}

/// A thread as an unprivileged caller of `tag get` sees it: the thread
/// object without what lives in root-only task storage (the TTLs, the
/// terminators, the class), whose keys are left out rather than guessed.
#[derive(serde::Serialize)]
struct ThreadView {
    tid: u32,
    pid: u32,
    comm: String,
    tags: Vec<NameOnly>,
}

#[derive(serde::Serialize)]
struct NameOnly {
    name: String,
}

fn ttl_text(ttl: Option<u8>) -> String {
    ttl.map(|t| t.to_string()).unwrap_or_else(|| "inf".into())
}

/// Process id and comm of any thread, from /proc (readable by anyone).
fn proc_thread(tid: u32) -> Result<(u32, String), Error> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status"))
        .map_err(|_| Error::NoSuchThread(tid))?;
    let pid = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or(Error::NoSuchThread(tid))?;
    let comm = std::fs::read_to_string(format!("/proc/{tid}/comm"))
        .map(|c| c.trim_end_matches('\n').to_string())
        .unwrap_or_default();
    Ok((pid, comm))
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
            .map(|h| match h.ttl {
                None => h.name.clone(),
                Some(ttl) => format!("{}({ttl})", h.name),
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

/// The local lifeline of `name`. A tag made without one is "not found"
/// (exit 5), like a tag that does not exist; for those who may read
/// lifelines (others are refused first, exit 4).
fn local_lifeline(name: &str) -> Result<Vec<mantle_tags::ReceptionInfo>, Failure> {
    let t = Tags::open()?;
    if mantle_sys::os::privileged() && t.info(t.lookup(name)?)?.lifeline == 0 {
        return Err(Failure::new(
            EXIT_NOT_FOUND,
            format!("tag {name:?} has no lifeline (create it with --lifeline N)"),
        ));
    }
    Ok(t.lifeline(name)?)
}

fn lifeline_cmd(
    name: &str,
    format: &str,
    output: Option<PathBuf>,
    merge: &[PathBuf],
) -> Result<(), Failure> {
    let mut parts = Vec::new();
    match local_lifeline(name) {
        Ok(l) => parts.push(l),
        // With files to merge, a machine without the tag (or without mantle
        // loaded) just contributes nothing.
        Err(e) if merge.is_empty() => return Err(e),
        Err(_) => {}
    }
    for f in merge {
        let text = std::fs::read_to_string(f).map_err(|e| Failure::io("cannot read", f, &e))?;
        let l: Vec<mantle_tags::ReceptionInfo> =
            serde_json::from_str::<Vec<serde_json::Value>>(&text)
                .and_then(|v| v.into_iter().map(reception_from_json).collect())
                .map_err(|e| {
                    Error::Invalid(format!(
                        "{} is not a lifeline saved with `mantle tag lifeline --json`: {e}",
                        f.display()
                    ))
                })?;
        parts.push(l.into_iter().filter(|r| r.tag == name).collect());
    }
    let l = mantle_tags::lifeline::merge(parts);
    let text = match format {
        "json" => serde_json::to_string_pretty(&lifeline_json(&l)).expect("json") + "\n",
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
        Some(p) => std::fs::write(&p, text).map_err(|e| Failure::io("cannot write", &p, &e)),
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
        let ttl = ttl_text(Some(r.ttl).filter(|&t| t != mantle_tags::abi::MT_TTL_INF as u8));
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

/// The uid of `--owner`: a user name or a uid, which must exist (exit 5
/// otherwise: a tag owned by nobody who can log in could not be deleted by
/// its owner).
fn user_uid(who: &str) -> Result<u32, Failure> {
    let unknown = || Failure::new(EXIT_NOT_FOUND, format!("no such user: {who:?}"));
    let c = std::ffi::CString::new(who).map_err(|_| unknown())?;
    let mut buf = vec![0u8; 16384];
    // SAFETY: passwd is plain data that getpw*_r fills in.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; buf outlives it and its
    // length is passed; a number is looked up as a uid, anything else as a
    // name.
    let rc = unsafe {
        match who.parse::<u32>() {
            Ok(uid) => libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut out),
            Err(_) => libc::getpwnam_r(
                c.as_ptr(),
                &mut pw,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut out,
            ),
        }
    };
    if rc != 0 {
        return Err(Failure::new(
            EXIT_FAILURE,
            format!(
                "cannot look up user {who:?}: {}",
                std::io::Error::from_raw_os_error(rc)
            ),
        ));
    }
    if out.is_null() {
        return Err(unknown());
    }
    Ok(pw.pw_uid)
}

/// The program `tag run` is to start, found the way execvp(3) finds it,
/// before any tag is set: a command that cannot start must leave no trace
/// (no `set` in a lifeline). Not found: exit 5; found but not executable:
/// exit 4 (the shell's 127 and 126).
fn find_program(cmd: &str) -> Result<PathBuf, Failure> {
    use std::os::unix::ffi::OsStrExt;
    let runnable = |p: &std::path::Path| {
        let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
            return false;
        };
        // SAFETY: c is a valid NUL-terminated path.
        p.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
    };
    let not_executable = |p: &std::path::Path| {
        Failure::new(
            EXIT_PERMISSION,
            format!("cannot run {}: not an executable file", p.display()),
        )
    };
    if cmd.contains('/') {
        let p = PathBuf::from(cmd);
        return if runnable(&p) {
            Ok(p)
        } else if p.exists() {
            Err(not_executable(&p))
        } else {
            Err(Failure::new(
                EXIT_NOT_FOUND,
                format!("cannot run {cmd}: no such file"),
            ))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let mut seen = None;
    if !cmd.is_empty() {
        for dir in std::env::split_paths(&path) {
            // An empty PATH entry is the current directory, as for execvp.
            let p = if dir.as_os_str().is_empty() {
                PathBuf::from(cmd)
            } else {
                dir.join(cmd)
            };
            if runnable(&p) {
                return Ok(p);
            }
            if seen.is_none() && p.exists() {
                seen = Some(p);
            }
        }
    }
    match seen {
        Some(p) => Err(not_executable(&p)),
        None => Err(Failure::new(
            EXIT_NOT_FOUND,
            format!("cannot run {cmd:?}: command not found in PATH"),
        )),
    }
}

fn tag_cmd(c: TagCmd) -> Result<(), Failure> {
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
            anyone,
            per_request,
            expire,
            json,
        } => {
            let owner_uid = owner.as_deref().map(user_uid).transpose()?;
            let info = t.create(
                &name,
                &CreateOpts {
                    ttl,
                    system,
                    lifeline,
                    owner_uid,
                    replies,
                    deadlock,
                    anyone,
                    per_request,
                },
            )?;
            if let Some(ms) = expire {
                if let Err(e) = t.expire_after(&name, ms) {
                    let _ = t.delete(&name);
                    return Err(e.into());
                }
            }
            if json {
                print_json(&info);
            } else {
                println!("created tag {} (bit {})", info.name, info.bit);
            }
        }
        TagCmd::Delete { name } => {
            if mantle_sys::os::privileged() {
                t.delete(&name)?;
            } else {
                // A tag's owner may delete it without privilege: through
                // the trusted path (the kernel side checks the caller's uid
                // against the owner's), as the library call does.
                selfset::delete(&name)?;
            }
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
            // A tid beyond the view cannot exist (out of range, exit 2);
            // one within it may not (exit 5).
            let v = t.vector_of(tid)?;
            let (pid, comm) = proc_thread(tid)?;
            if !json {
                println!("{}", v.join(" "));
            } else if mantle_sys::os::privileged() {
                // The whole thread object; a thread with no tag, terminator
                // or class mark is not in the listing.
                let th = t
                    .threads(None)?
                    .into_iter()
                    .find(|th| th.tid == tid)
                    .unwrap_or(mantle_tags::ThreadInfo {
                        tid,
                        pid,
                        comm,
                        system: false,
                        tags: Vec::new(),
                        terminators: Vec::new(),
                    });
                print_json(&th);
            } else {
                print_json(&ThreadView {
                    tid,
                    pid,
                    comm,
                    tags: v.into_iter().map(|name| NameOnly { name }).collect(),
                });
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
            // Everything that can fail is checked before the first tag is
            // set: the program, then every tag.
            let program = find_program(&command[0])?;
            for n in &names {
                t.lookup(n)?;
            }
            let me = std::process::id();
            let ttl = ttl.map(|x| x as u32).unwrap_or(0);
            for n in &names {
                if mantle_sys::os::privileged() {
                    t.op(OpCode::Set, Some(n), ttl, Target::Tid(me))?;
                } else {
                    // Unprivileged: through the trusted path, which can
                    // only ever change this thread's own tags.
                    selfset::set(n, ttl)?;
                }
            }
            use std::os::unix::process::CommandExt;
            let e = std::process::Command::new(&program)
                .arg0(&command[0])
                .args(&command[1..])
                .exec();
            return Err(Failure::io("cannot run", &program, &e));
        }
    }
    Ok(())
}
