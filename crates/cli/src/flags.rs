//! Every flag of the command line, in one place: the command tree (clap
//! derive structs with their help texts and examples), the value parsers
//! that check arguments once (exit 2 when malformed), and the tips added to
//! clap's usage errors for the mistakes new users make. `mantle prof`'s
//! flags live with its command in prof.rs.

use clap::{Args, Parser, Subcommand};
use mantle_tags::Target;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "mantle",
    version,
    about = "Microkernel-style system services over an unmodified Linux",
    after_help = "Examples:\n  mantle doctor\n  mantle tags up\n  mantle tag create req --lifeline 1024\n  mantle tag run req -- sh -c 'ls | sort | head'\n  mantle tag lifeline req --json\n  mantle demo\n\nExit codes: 0 ok, 1 failure, 2 usage (a malformed command line), 3 kernel side not loaded or a feature missing, 4 permission denied, 5 not found (a tag, thread, process, user, program or lifeline). `mantle tag run` exits with its command's status once the command runs."
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
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
        /// Print the tag, its holders and its lifeline as JSON (docs/json.md).
        #[arg(long)]
        json: bool,
    },
    /// Profile the whole system, a process or a command (L4oprof-style).
    #[command(
        subcommand,
        after_help = "Examples:\n  mantle prof events\n  mantle prof record -a --duration 10s\n  mantle prof report"
    )]
    Prof(crate::prof::ProfCmd),
    /// Instrument function entries and exits of x86-64 objects (LOPI).
    #[command(
        subcommand,
        after_help = "Examples:\n  mantle instr plan a.o --all\n  mantle instr rewrite a.o -o a.instr.o --all --map prog.map\n  mantle instr verify ./prog ./prog.instr -- args\n\nSee docs/instr.md."
    )]
    Instr(crate::instr::InstrCmd),
    /// Run a command as a guest of an executive that interposes on its
    /// system calls (Hijack on Linux).
    #[command(
        after_help = "Examples:\n  mantle run --deny unlink=EACCES -- rm /tmp/x\n  mantle run --redirect /data=/srv/data -- ls /data\n  mantle run --perform getppid -- sh -c 'echo $PPID'\n  mantle run -v --deny connect=ENETUNREACH -- curl -s example.org\n  mantle run --system guests.toml\n  mantle run --fail-open --priority 50 -- ./server\n  mantle run --sleep --extended=50us --boost 10 -- ./control-loop\n  mantle run --path fast --sleep --extended --priority 99 --boost 10 -- ./control-loop\n  mantle run --sched 'edf 2ms/10ms' -- ./control-loop\n  mantle run --offload --bootstrap-cpu 0 -- xz -T2 big.tar\n\nThe exit status is the guest's (128+N if signal N killed it); mantle's own failures exit like env's: 125 (a malformed option, a missing kernel mechanism, an executive that could not start or died), 126 (the command cannot run), 127 (not found); with --offload mantle becomes the command (a bad --bootstrap-cpu is a usage error, 2). --deny and --redirect are enforced by the kernel on both paths (a seccomp filter, a mount namespace); while either is on io_uring is refused unless --allow-io-uring. No root needed (seccomp user notification; unprivileged user namespaces for --redirect); SCHED_FIFO and mlockall need privilege (a warning without)."
    )]
    Run(Box<crate::run::RunArgs>),
    /// The executives running on this machine (`mantle exec status`).
    #[command(
        subcommand,
        after_help = "Examples:\n  mantle exec status\n  mantle exec status --json"
    )]
    Exec(crate::exec::ExecCmd),
    /// Systems of isolated components: start, inspect, stop.
    #[command(
        subcommand,
        after_help = "Examples:\n  mantle comp up system.toml &\n  mantle comp status --json\n  mantle comp down"
    )]
    Comp(crate::comp::CompCmd),
    /// Shell completions for mantle, printed to standard output.
    #[command(
        after_help = "Examples:\n  mantle completions bash > /etc/bash_completion.d/mantle\n  mantle completions zsh > \"${fpath[1]}/_mantle\"\n  mantle completions fish > ~/.config/fish/completions/mantle.fish"
    )]
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Manual pages for mantle and every subcommand (roff), from the same
    /// definitions as --help.
    #[command(
        after_help = "Examples:\n  mantle man | man -l -\n  mantle man run | man -l -\n  mantle man --out /usr/local/share/man/man1   # mantle.1, mantle-run.1, mantle-tag-create.1, ..."
    )]
    Man {
        /// The subcommand's page (`run`, `tag create`); the top page if none.
        command: Vec<String>,
        /// Write every page into this directory instead (mantle-SUB-SUB.1).
        #[arg(long, value_name = "DIR", conflicts_with = "command")]
        out: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
pub enum TagsCmd {
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
        after_help = "Examples:\n  mantle tags status\n  mantle tags status --json | jq .live_tags\n  mantle tags status --quiet || mantle tags up\n\nExit status: 0 when the status could be read (loaded or not); with --quiet, 0 when the kernel side is loaded and 3 when it is not, as `systemctl is-active --quiet`."
    )]
    Status {
        /// Print the status as JSON (loaded, live_tags, hops and other counters).
        #[arg(long, conflicts_with = "quiet")]
        json: bool,
        /// Print nothing; exit 0 if the kernel side is loaded, 3 if not.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Send lifelines to an OpenTelemetry collector as they grow, until
    /// stopped (SIGTERM, Ctrl-C): each tag a trace, each reception a span
    /// (root; docs/otel.md, which also has its systemd unit).
    #[command(after_help = "Examples:
  mantle tags export --otlp http://127.0.0.1:4318
  mantle tags export --otlp http://127.0.0.1:4318 --tags req,batch --new
  systemctl enable --now mantle-tags-export   # scripts/mantle-tags-export.service")]
    Export(crate::otlp::ExportArgs),
}

#[derive(Args)]
pub struct Who {
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
    pub fn target(&self) -> Target {
        match (self.pid, self.tid) {
            (_, Some(t)) => Target::Tid(t),
            (Some(p), _) => Target::Pid(p),
            _ => unreachable!("clap requires one"),
        }
    }
}

#[derive(Subcommand)]
pub enum TagCmd {
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
        /// Print the new tag as JSON (docs/json.md: a tag).
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
        /// Print the tags as JSON (docs/json.md: a list of tags).
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
    ///
    /// A process forked by a marked thread inherits its class, unless the
    /// thread was marked with `--children user`: then the processes it forks
    /// from now on are user threads (a server's workers stay reachable by
    /// user tags while the server itself takes only system tags).
    #[command(
        after_help = "Examples:\n  mantle tag class system --pid $(pidof myserver)\n  mantle tag class system --pid $(head -1 $PGDATA/postmaster.pid) --children user\n  mantle tag class user --tid 1236"
    )]
    Class {
        /// system (holds system tags only) or user (user tags only).
        #[arg(value_parser = ["system", "user"])]
        class: String,
        #[command(flatten)]
        who: Who,
        /// The class of the processes the threads fork from now on
        /// (default: their own).
        #[arg(long, value_name = "CLASS", value_parser = ["user"])]
        children: Option<String>,
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
        /// Print the threads as JSON (docs/json.md: a list of threads).
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
        /// Print the thread as JSON (docs/json.md: a thread; TTLs,
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
        /// Send the lifeline as one OpenTelemetry trace to the collector at
        /// URL (OTLP over HTTP, e.g. http://127.0.0.1:4318; docs/otel.md)
        /// instead of printing it.
        #[arg(long, value_name = "URL", conflicts_with_all = ["output", "format", "json"])]
        otlp: Option<String>,
        /// With --otlp: how long the collector may take (500ms, 10s).
        #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::otlp::duration, requires = "otlp")]
        timeout: std::time::Duration,
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
        after_help = "Examples:\n  mantle tag run req -- ./client\n  mantle tag run a b --ttl 2 -- sh -c 'cat x | sort'\n  x=$(mantle tag run req --no-output-tag -- ./client)\n\nThe tags come before `--`, the command after it. Once the command runs, the exit status is the command's; if it cannot be started, mantle's (5: not found, 4: not executable).\n\nWhat the command writes to a pipe is a request, so its reader gets the tags: `x=$(mantle tag run T -- cmd)` tags the calling shell, and every later command it runs. --no-output-tag relays the command's standard output through mantle, which refuses the tags for itself, so the reader stays untagged."
    )]
    Run {
        /// Tags to hold (one or more).
        #[arg(required = true, value_parser = tag_name)]
        names: Vec<String>,
        /// Hops they may travel from the command: 0..254 or inf (default:
        /// each tag's).
        #[arg(long, value_parser = mantle_tags::model::parse_ttl, allow_negative_numbers = true)]
        ttl: Option<u8>,
        /// Keep the tags off the command's standard output: run it with
        /// its output through a pipe that mantle relays untagged, so that
        /// `x=$(mantle tag run T -- cmd)` does not tag the calling shell.
        #[arg(long)]
        no_output_tag: bool,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

/// The command tree as users see it: every `--json` flag without its own
/// help (other subsystems' too) says what it does.
pub fn command() -> clap::Command {
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
pub fn parse_args() -> Cli {
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
            if !e.use_stderr() {
                // --help, --version: clap's own output on stdout, exit 0
                e.exit()
            }
            // one style for every error: `mantle: <what>: <why>`
            let text = e.render().to_string();
            eprint!("mantle: {}", text.strip_prefix("error: ").unwrap_or(&text));
            // `mantle run` passes its command's status through: its own
            // usage errors must not look like one (README "Exit codes")
            let code = if args.get(1).map(String::as_str) == Some("run") {
                i32::from(crate::exit::EXIT_RUN_ERROR)
            } else {
                e.exit_code()
            };
            std::process::exit(code)
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
pub(crate) fn tag_name(s: &str) -> Result<String, String> {
    mantle_tags::model::validate_name(s)
        .map(|()| s.to_string())
        .map_err(|e| e.to_string())
}

/// A parser of integers from `lo` to `hi` whose error says so in words
/// (clap's own says `1..=98`).
pub fn int_from_to(lo: i32, hi: i32) -> impl Fn(&str) -> Result<i32, String> + Clone {
    move |s: &str| match s.parse::<i32>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a whole number from {lo} to {hi}")),
    }
}

/// `--lifeline N`: the real limit is the ring all tags share.
fn lifeline_size(s: &str) -> Result<u32, String> {
    let max = mantle_tags::abi::MT_LIFELINE_SLOTS;
    match s.parse::<u64>() {
        Ok(n) if n <= max as u64 => Ok(n as u32),
        Ok(_) => Err(format!(
            "a lifeline holds at most {max} records (the ring all tags share)"
        )),
        Err(_) => Err(format!("{s:?} is not a number of records (0 to {max})")),
    }
}

/// The default of `tags up --lib`: the libmantle.so next to this binary
/// (where `make install` and the build tree put it).
pub fn default_lib() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("libmantle.so")))
        .unwrap_or_else(|| PathBuf::from("libmantle.so"))
}
